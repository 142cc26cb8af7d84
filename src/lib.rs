//! warden: an in-guest security supervisor. It boots as PID 1 of a machine
//! that holds one AI coding agent, runs the agent as `runtime`, and runs
//! every command the agent asks for as `shell`, through its API.

pub mod activity;
pub mod admission;
pub mod api;
pub mod audit;
pub mod boot;
pub mod confine;
pub mod guest;
pub mod init;
pub mod keys;
pub mod launcher;
pub mod layout;
pub mod lifetime;
pub mod net;
pub mod network;
pub mod proc_status;
pub mod reaper;
pub mod shared;
pub mod shell_procs;
pub mod shell_space;
pub mod supervisor;
pub mod terminal;
pub mod throttle;
pub mod tool;
pub mod users;
pub mod vm;
pub mod vm_ports;
pub mod vsock;
pub mod wire;

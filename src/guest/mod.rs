//! The guest: warden as PID 1 of the machine that holds the agent. It
//! boots the machine (`boot`), supervises it (`supervisor`), serves the API
//! (`api`), runs every command the agent asks for as `shell` (`command`)
//! under every confinement layer (`confine`) and behind the firewall and
//! the egress proxy (`net`), keeps the machine's processes (`process`) and
//! accounts (`accounts`), does what a VM's first process must (`vm`), and
//! keeps the audit log (`audit`). It imports the wire and `shared`, never
//! the host (see docs/architecture.md).

pub mod accounts;
pub mod api;
pub mod audit;
pub mod boot;
pub mod command;
pub mod confine;
pub mod net;
pub mod process;
pub mod supervisor;
pub mod vm;

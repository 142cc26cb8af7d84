//! warden: an in-guest security supervisor. It boots as PID 1 of a machine
//! that holds one AI coding agent, runs the agent as `runtime`, and runs
//! every command the agent asks for as `shell`, through its API.
//!
//! Four parts, each a folder; docs/architecture.md says what each holds
//! and may import (a test holds the code to it):
//! `wire`, what warden and its clients say to each other; `shared`, what
//! both sides run; `guest`, warden as PID 1; `host`, the launcher.

pub mod guest;
pub mod host;
pub mod shared;
pub mod wire;

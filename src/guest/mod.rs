//! The guest: warden as PID 1 of the machine that holds the agent. It
//! boots the machine, supervises it, serves the API, runs every command
//! the agent asks for as `shell` under every confinement layer, and keeps
//! the audit log. It imports the wire and `shared`, never the host (see
//! docs/architecture.md).

pub mod command;

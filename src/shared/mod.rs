//! Code both sides run: the guest (warden as PID 1) and the host (the
//! launcher), and the command line. What is here may import the wire and
//! nothing else of the crate (see docs/architecture.md), so neither side
//! drags the other in through it.
//!
//! The files both sides read or write: the machine config (`config`,
//! `main_restart`), the policy files (`policy`), the machine's key
//! (`machine_key`), the audit log's chain and files (`audit_chain`), the
//! owner's setup (`setup_script`). What both sides decide the same way:
//! egress, which the guest's proxy and a VM's relay on the host both
//! decide (`egress`); spending (`spend`); the idle rules (`idle`). And
//! what every part prints through: diagnostics (`diag`, `say!`), secrets
//! kept out of them (`redact`), strings made safe to show (`printable`).

pub mod audit_chain;
pub mod config;
pub mod diag;
pub mod egress;
pub mod idle;
pub mod machine_key;
pub mod main_restart;
pub mod policy;
pub mod printable;
pub mod redact;
pub mod setup_script;
pub mod spend;

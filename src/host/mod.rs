//! The host side: `warden machine ...` makes, starts, stops and removes
//! agent machines from machine definitions: containers with podman (or
//! Docker), or micro-VMs under QEMU. It imports the wire and `shared`,
//! never the guest (see docs/architecture.md).
//!
//! `machine/` is the commands and what every kind of machine shares, with
//! what calls them back: the container backend (`machine/container.rs`),
//! `warden machine serve` (`machine/serve/`) and the credentials handed
//! again at every start (`machine/handed.rs`);
//! `backend.rs` what a kind must do, done by `machine/container.rs` and `vm/`;
//! `this_host.rs` what this host's engine needs, found once;
//! `engine.rs` runs podman or Docker; `state.rs` keeps a machine's state
//! folder, and `kept.rs` what the next `up` keeps of a container;
//! `image.rs` builds images; `create.rs` and `agent*.rs` turn a
//! definition into the engine's arguments and the agent's setup;
//! `kube.rs` into a cluster's manifests; `ps.rs` reads the engine's
//! listing into `ps`'s rows; `ready.rs` waits for a machine to be ready;
//! `reloaded.rs` keeps a container whose warden takes what changed;
//! `error.rs` is the error every step returns.

pub mod agent;
pub mod agent_setup;
pub mod backend;
pub mod context_ignore;
pub mod create;
pub mod definition;
pub mod engine;
pub mod error;
pub mod image;
pub mod kept;
pub mod kube;
pub mod machine;
pub mod made_from;
pub mod ps;
pub mod ready;
pub mod reloaded;
pub mod scope;
pub mod seen;
pub mod state;
pub mod this_host;
pub mod vm;

pub use error::LaunchError;

use sha2::{Digest, Sha256};
use std::time::Instant;

/// Prints one step with the seconds since `start`.
pub fn step(start: Instant, what: &str) {
    println!("[{:6.2} s] {what}", start.elapsed().as_secs_f64());
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::shared::audit_chain::hex(&Sha256::digest(bytes))
}

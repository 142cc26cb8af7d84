//! The host side: `warden machine ...` makes containers with podman (or
//! Docker) from machine definitions.

pub mod agent;
pub mod agent_setup;
pub mod create;
pub mod definition;
pub mod host;
pub mod image;
pub mod machine;
pub mod state;
pub mod vm;

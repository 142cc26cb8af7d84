//! The host side: `warden machine ...` makes containers with podman (or
//! Docker) from machine definitions.

pub mod definition;
pub mod host;
pub mod machine;
pub mod vm;

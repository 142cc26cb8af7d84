//! The host side: `warden machine ...` makes containers with podman from machine definitions.

pub mod definition;
pub mod machine;

//! The machine's two accounts and what is theirs: the `runtime` and
//! `shell` users (`users`), which path belongs to whom with which mode
//! (`layout`), and the runtime's keys, handed over by the owner
//! (`runtime_keys`).

pub mod layout;
pub mod runtime_keys;
pub mod users;

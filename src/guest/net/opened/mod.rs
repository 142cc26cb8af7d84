//! Hosts warden opens: for a host with credentials or rules by method and
//! path, the proxy ends the client's TLS itself (with a certificate signed
//! by the machine's own authority), reads each request, refuses what the
//! host's rules do not allow, adds the credential the request's user is
//! owed, and masks every form of that credential in what the origin
//! answers. Every other host stays a tunnel warden never reads.
//!
//! The pieces here are pure or self-contained: the authority (`ca`) and
//! the masking of answers (`scrub`). What the policy says of opened hosts
//! (a credential's form, the rules by method and path, which hosts are
//! opened) is `shared::egress`, which the host's launcher checks too.

mod bodies;
pub mod ca;
pub mod exchange;
pub mod http1;
pub mod scrub;
pub mod streams;
pub mod tls;
pub mod trust;
pub mod vault;

/// Why nothing opens hosts on this machine: what would (the proxy's
/// `Opener`: the machine's authority, the credentials' values, the
/// budgets) could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenerError {
    /// Until the boot makes it.
    #[error("not made yet")]
    NotMade,
    #[error(transparent)]
    Authority(#[from] ca::CaError),
    #[error(transparent)]
    Budget(#[from] crate::shared::spend::ledger::SpendError),
}

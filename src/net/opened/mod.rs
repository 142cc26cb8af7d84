//! Hosts warden opens: for a host with credentials or rules by method and
//! path, the proxy ends the client's TLS itself (with a certificate signed
//! by the machine's own authority), reads each request, refuses what the
//! host's rules do not allow, adds the credential the request's user is
//! owed, and masks every form of that credential in what the origin
//! answers. Every other host stays a tunnel warden never reads.
//!
//! The pieces here are pure or self-contained: the authority (`ca`), a
//! credential's form (`credential`), the rules (`request_rules`) and the
//! masking of answers (`scrub`).

pub mod ca;
pub mod credential;
pub mod exchange;
pub mod hosts;
pub mod http1;
pub mod request_rules;
pub mod scrub;
pub mod streams;
pub mod tls;
pub mod trust;
pub mod vault;

//! Egress as both sides decide it: the guest's proxy for every connection
//! of the machine, and, for a VM with a network, the relay on its host,
//! which decides again on its own before it connects.
//!
//! The lists (`hosts`, of names as the owner writes them; `target`, a
//! request's target parsed strictly), the address classes refused unless
//! allowed (`addr`), the decision on both (`decide`), why a connection is
//! refused (`refusal`), reaching an upstream (`reach`), the line a VM's
//! proxy and its host's relay speak (`link`), and what the policy says of
//! opened hosts: credentials (`credential`), rules by method and path
//! (`request_rules`), and which hosts are opened (`opened_hosts`).

pub mod addr;
pub mod credential;
pub mod decide;
pub mod hosts;
pub mod link;
pub mod opened_hosts;
pub mod reach;
pub mod refusal;
pub mod request_rules;
pub mod target;

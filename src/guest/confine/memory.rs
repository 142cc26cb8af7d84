//! warden's own memory kept from every user of the machine: PID 1 is not
//! dumpable, so its /proc files (mem, environ, maps) are root's alone and
//! no core of it is ever written. It holds the credentials the proxy adds
//! and the machine authority's key.
//!
//! A child started with `CLONE_VM` (every command, see `child_stack`)
//! shares warden's memory until it execs, and what it does there (a
//! setuid, or a probe made readable for the connect gate) sets the shared
//! flag: the parent sets it again once the child has exec'd or exited.

/// Makes warden's memory undumpable (again).
pub fn keep_unreadable() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// Whether warden's memory is dumpable now (for status).
pub fn dumpable() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_is_cleared() {
        keep_unreadable();
        assert!(!dumpable());
    }
}

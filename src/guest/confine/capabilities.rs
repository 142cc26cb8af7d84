//! Emptying a child's capability sets between fork and exec, and proving
//! it: shared by a command's setup (`spawn.rs`) and the probe that checks
//! it (`probe.rs`).

/// Empties the effective, permitted and inheritable sets (capset) and the
/// ambient set, then reads them back with the bounding set: true only if
/// nothing at all is left.
///
/// # Safety
/// Only for a forked child: raw syscalls on stack memory.
pub(super) unsafe fn empty(last_cap: u32) -> bool {
    const VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let zero = Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [zero; 2];
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL,
        0,
        0,
        0,
    );
    if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) < 0 {
        return false;
    }
    data = [Data {
        effective: 1,
        permitted: 1,
        inheritable: 1,
    }; 2];
    if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) < 0 {
        return false;
    }
    let sets_empty = data
        .iter()
        .all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0);
    let bounding_empty = (0..=last_cap)
        .all(|cap| libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) == 0);
    // The ambient set is always within permitted and inheritable, both
    // read back empty above; asking each bit once more costs little.
    let ambient_empty = (0..=last_cap).all(|cap| {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_IS_SET,
            cap as libc::c_ulong,
            0,
            0,
        ) == 0
    });
    sets_empty && bounding_empty && ambient_empty
}

//! The stack a command's child runs on until it execs, and the
//! descriptor slots it is lent its own through, one of each per spawning
//! thread (`spawn.rs` prepares the child; this starts it).

use super::spawn::{ChildFds, ChildPlan};
use nix::errno::Errno;
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Starts the child on this thread's stack; returns once it has exec'd
/// or exited, with its pid.
pub(super) fn start(plan: &ChildPlan) -> Result<Pid, Errno> {
    CHILD_STACK.with(|stack| stack.start(plan))
}

/// The stack a child runs on until it execs. The child shares warden's
/// memory (`CLONE_VM`: nothing is copied, so no page of warden's is
/// write-protected and faulted afterwards, and no core's TLB is flushed
/// for it) and the spawning thread is suspended until the child has
/// exec'd or exited (`CLONE_VFORK`), so one stack per spawning thread
/// serves every child. A guard page below it stops an overflow.
/// `CLONE_VFORK` matters for more than the wait: the kernel gives an
/// `oom_score_adj` written by a process to every process sharing its
/// memory, except from a vfork child (without it, warden's own score
/// became its command's 1000; `commands_are_first_for_the_oom_killer`).
struct ChildStack {
    /// The mapping (guard page first), or why there is none.
    mapping: Result<(std::ptr::NonNull<libc::c_void>, usize), Errno>,
    /// Low descriptor numbers this thread keeps for a child's own (see
    /// `Slots`), or why it has none (then the child copies the table).
    slots: Result<Slots, Errno>,
}

/// How many descriptors a child uses before exec: stdio, the report
/// pipe, its cgroup, its working folder and its Landlock ruleset.
const CHILD_FDS: usize = 7;

/// Descriptor numbers kept by one spawning thread, each open on /dev/null
/// between children. A child shares warden's descriptor table from its
/// start (`CLONE_FILES`) and first unshares it keeping only the numbers
/// below the highest slot (`close_range` with `CLOSE_RANGE_UNSHARE`):
/// the descriptors it needs are lent to the slots just before, so the
/// hundreds warden holds under load (a connection each) are neither
/// copied into the child nor closed one by one at its exec, which the
/// spawning thread waits for.
struct Slots {
    slots: [OwnedFd; CHILD_FDS],
    null: OwnedFd,
    /// One above the highest slot: what the child's own table keeps.
    below: u32,
}

/// What a command's setup may use of its stack (the firewall probe is
/// forked).
const CHILD_STACK_BYTES: usize = 1 << 20;
const GUARD_BYTES: usize = 4096;

thread_local! {
    static CHILD_STACK: ChildStack = ChildStack::new();
}

impl Slots {
    /// Opens /dev/null once and keeps `CHILD_FDS` copies of it, numbered
    /// 3 or above (a slot must never be one of the stdio numbers the
    /// child writes over).
    fn reserve() -> Result<Slots, Errno> {
        // close_range(2) (Linux 5.9, with CLOSE_RANGE_UNSHARE): an empty
        // range answers 0 where the kernel has it.
        // SAFETY: closes nothing (no descriptor is numbered u32::MAX).
        if unsafe { libc::syscall(libc::SYS_close_range, u32::MAX, u32::MAX, 0) } < 0 {
            return Err(Errno::last());
        }
        let null: OwnedFd = std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?
            .into();
        let copy = || -> Result<OwnedFd, Errno> {
            let dup = nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3);
            let fd = nix::fcntl::fcntl(null.as_raw_fd(), dup)?;
            // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor, owned here.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let slots = [
            copy()?,
            copy()?,
            copy()?,
            copy()?,
            copy()?,
            copy()?,
            copy()?,
        ];
        let highest = slots.iter().map(|s| s.as_raw_fd()).max().unwrap_or(2);
        Ok(Slots {
            below: highest as u32 + 1,
            slots,
            null,
        })
    }

    /// The child's descriptors lent to the slots: their numbers there, or
    /// None where one could not be (the child then copies the table).
    fn lend(&self, fds: &ChildFds) -> Option<ChildFds> {
        let mut slots = self.slots.iter().map(|s| s.as_raw_fd());
        let mut lend = |fd: RawFd| -> Option<RawFd> {
            let slot = slots.next()?;
            // SAFETY: dup3 onto a descriptor this struct owns: the slot
            // now refers to the child's file until `take_back`.
            let rc = unsafe { libc::dup3(fd, slot, libc::O_CLOEXEC) };
            (rc == slot).then_some(slot)
        };
        let stdio = [
            lend(fds.stdio[0])?,
            lend(fds.stdio[1])?,
            lend(fds.stdio[2])?,
        ];
        let err = lend(fds.err)?;
        let mut optional = |fd: Option<RawFd>| match fd {
            Some(fd) => lend(fd).map(Some),
            None => Some(None),
        };
        Some(ChildFds {
            stdio,
            err,
            cgroup: optional(fds.cgroup)?,
            landlock: optional(fds.landlock)?,
            workdir: optional(fds.workdir)?,
        })
    }

    /// Every slot back on /dev/null: warden holds no second reference to
    /// a child's pipe (whose reader would wait for an end that never
    /// comes).
    fn take_back(&self) {
        for slot in &self.slots {
            // SAFETY: dup3 onto a descriptor this struct owns.
            let rc =
                unsafe { libc::dup3(self.null.as_raw_fd(), slot.as_raw_fd(), libc::O_CLOEXEC) };
            if rc < 0 {
                crate::say!(
                    "a child's descriptor stays held in slot {}: {}",
                    slot.as_raw_fd(),
                    Errno::last()
                );
            }
        }
    }
}

impl ChildStack {
    fn new() -> ChildStack {
        let len = CHILD_STACK_BYTES + GUARD_BYTES;
        // SAFETY: an anonymous private mapping this struct owns; its lowest
        // page is made inaccessible as the guard.
        let mapping = unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                Err(Errno::last())
            } else if libc::mprotect(base, GUARD_BYTES, libc::PROT_NONE) < 0 {
                let e = Errno::last();
                libc::munmap(base, len);
                Err(e)
            } else {
                Ok((std::ptr::NonNull::new_unchecked(base), len))
            }
        };
        ChildStack {
            mapping,
            slots: Slots::reserve(),
        }
    }

    /// Starts the child on this stack; returns once it has exec'd or
    /// exited, with its pid.
    fn start(&self, plan: &ChildPlan) -> Result<Pid, Errno> {
        let slots = self.slots.as_ref().ok();
        let lent = slots.and_then(|slots| {
            let fds = slots.lend(&plan.fds)?;
            Some(ChildPlan {
                fds,
                own_table_below: Some(slots.below),
                ..*plan
            })
        });
        let started = self.clone_child(lent.as_ref().unwrap_or(plan));
        if let Some(slots) = slots {
            slots.take_back();
        }
        started
    }

    fn clone_child(&self, plan: &ChildPlan) -> Result<Pid, Errno> {
        let (base, len) = self.mapping?;
        // With its descriptors lent to the slots, the child shares the
        // table until it makes its own small one (see `Slots`).
        let files = match plan.own_table_below {
            Some(_) => libc::CLONE_FILES,
            None => 0,
        };
        extern "C" fn child(plan: *mut libc::c_void) -> libc::c_int {
            // SAFETY: `plan` is the ChildPlan passed to clone below, alive
            // in the suspended parent until this child execs or exits.
            let plan = unsafe { &*(plan as *const ChildPlan) };
            plan.run()
        }
        // SAFETY: the child runs on its own stack and only `plan.run()`,
        // which makes raw async-signal-safe syscalls on memory prepared
        // before (never allocating, locking or unwinding) and never
        // returns (it execs or _exits); the parent thread is suspended
        // until then (CLONE_VFORK), so nothing the child reads changes.
        // Sharing the descriptor table (CLONE_FILES), its first step is
        // to make its own (`own_table`), before it touches a descriptor.
        let pid = unsafe {
            let top = base.as_ptr().cast::<u8>().add(len).cast::<libc::c_void>();
            libc::clone(
                child,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | files | libc::SIGCHLD,
                plan as *const ChildPlan as *mut libc::c_void,
            )
        };
        // The child has exec'd or exited: what it set of the memory it
        // shared (dumpable) is warden's again to set.
        super::memory::keep_unreadable();
        match pid {
            -1 => Err(Errno::last()),
            pid => Ok(Pid::from_raw(pid)),
        }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        if let Ok((base, len)) = self.mapping {
            // SAFETY: the mapping made in `new`, no child running on it
            // (each has exec'd or exited before `start` returned).
            unsafe { libc::munmap(base.as_ptr(), len) };
        }
    }
}

//! The seccomp filter of every command: a deny list of the syscalls a build
//! never needs and an escape does. Built once at boot and installed once,
//! on the spawner thread, whose forked children all inherit it
//! (`spawner.rs`).
//!
//! The filter is one compact program, written here rather than generated:
//! the kernel JIT-compiles a filter at every install, and its cost grows
//! with the program's length (seccompiler's output for the same list was
//! 329 instructions over three filters, about 0.6 ms per command here; this
//! one is about 80). Its verdicts are checked by the BPF interpreter in the
//! tests below. seccompiler still compiles the policy's own additions and
//! knows every syscall's name.

use seccompiler::{sock_filter, BpfProgram, TargetArch};
use std::collections::HashMap;

/// Why a filter could not be made: a jump of warden's own program that
/// does not resolve, or the policy's additions that seccompiler refused.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("no label {0}")]
    NoLabel(&'static str),
    #[error("{0} is behind")]
    Behind(&'static str),
    #[error("{0} is too far")]
    TooFar(&'static str),
    #[error("{0}")]
    Compile(#[source] seccompiler::Error),
}

/// Syscalls denied whatever their arguments, each with the threat it stops.
const DENIED: &[(i64, &str, &str)] = &[
    (
        libc::SYS_ptrace,
        "ptrace",
        "reading or steering another process (the runtime, warden)",
    ),
    (
        libc::SYS_process_vm_readv,
        "process_vm_readv",
        "reading another process's memory",
    ),
    (
        libc::SYS_process_vm_writev,
        "process_vm_writev",
        "writing another process's memory",
    ),
    (
        libc::SYS_io_uring_setup,
        "io_uring_setup",
        "io_uring: a second syscall path around seccomp and a rich kernel attack surface",
    ),
    (
        libc::SYS_io_uring_enter,
        "io_uring_enter",
        "io_uring, as above",
    ),
    (
        libc::SYS_io_uring_register,
        "io_uring_register",
        "io_uring, as above",
    ),
    (
        libc::SYS_bpf,
        "bpf",
        "loading BPF programs: kernel attack surface, tracing others",
    ),
    (
        libc::SYS_perf_event_open,
        "perf_event_open",
        "observing other processes and the kernel; attack surface",
    ),
    (
        libc::SYS_userfaultfd,
        "userfaultfd",
        "stalling the kernel mid-copy, a classic exploit primitive",
    ),
    (
        libc::SYS_keyctl,
        "keyctl",
        "the kernel keyrings, which may hold others' secrets",
    ),
    (libc::SYS_add_key, "add_key", "the kernel keyrings"),
    (libc::SYS_request_key, "request_key", "the kernel keyrings"),
    (
        libc::SYS_mount,
        "mount",
        "remounting the filesystem around Landlock's rules",
    ),
    (
        libc::SYS_umount2,
        "umount2",
        "unmounting what hides or protects files",
    ),
    (
        libc::SYS_pivot_root,
        "pivot_root",
        "changing the root filesystem",
    ),
    (
        libc::SYS_move_mount,
        "move_mount",
        "the new mount API, as mount",
    ),
    (
        libc::SYS_open_tree,
        "open_tree",
        "the new mount API, as mount",
    ),
    (libc::SYS_fsopen, "fsopen", "the new mount API, as mount"),
    (libc::SYS_fsmount, "fsmount", "the new mount API, as mount"),
    (libc::SYS_fspick, "fspick", "the new mount API, as mount"),
    (
        libc::SYS_fsconfig,
        "fsconfig",
        "the new mount API, as mount",
    ),
    (
        libc::SYS_mount_setattr,
        "mount_setattr",
        "changing mount flags (nosuid, noexec, idmaps)",
    ),
    (
        libc::SYS_chroot,
        "chroot",
        "confusing path-based tools about where they are",
    ),
    (
        libc::SYS_unshare,
        "unshare",
        "new namespaces: user namespaces grant capabilities over new kernel surface",
    ),
    (libc::SYS_setns, "setns", "entering another namespace"),
    (libc::SYS_init_module, "init_module", "loading kernel code"),
    (
        libc::SYS_finit_module,
        "finit_module",
        "loading kernel code",
    ),
    (
        libc::SYS_delete_module,
        "delete_module",
        "unloading kernel code",
    ),
    (
        libc::SYS_kexec_load,
        "kexec_load",
        "replacing the running kernel",
    ),
    (
        libc::SYS_kexec_file_load,
        "kexec_file_load",
        "replacing the running kernel",
    ),
    (libc::SYS_reboot, "reboot", "stopping the machine"),
    (
        libc::SYS_swapon,
        "swapon",
        "changing swap, reading freed memory",
    ),
    (libc::SYS_swapoff, "swapoff", "changing swap"),
    (libc::SYS_acct, "acct", "process accounting files"),
    (
        libc::SYS_syslog,
        "syslog",
        "reading the kernel log (addresses, other processes' traces)",
    ),
    (
        libc::SYS_open_by_handle_at,
        "open_by_handle_at",
        "opening files by handle, around path checks (the shocker escape)",
    ),
    (
        libc::SYS_name_to_handle_at,
        "name_to_handle_at",
        "making handles for open_by_handle_at",
    ),
    (
        libc::SYS_lookup_dcookie,
        "lookup_dcookie",
        "kernel internals",
    ),
    (libc::SYS_quotactl, "quotactl", "filesystem quota control"),
    (
        libc::SYS_vhangup,
        "vhangup",
        "hanging up the terminal of others",
    ),
    (
        libc::SYS_personality,
        "personality",
        "turning off address randomisation and other process-wide quirks",
    ),
    // What Docker's default profile leaves out too, and no build needs;
    // in a VM this filter is the only one.
    (
        libc::SYS_modify_ldt,
        "modify_ldt",
        "16-bit segments: a long line of kernel bugs",
    ),
    (
        libc::SYS_mbind,
        "mbind",
        "NUMA placement of memory, around the machine's memory policy",
    ),
    (
        libc::SYS_set_mempolicy,
        "set_mempolicy",
        "NUMA placement of memory",
    ),
    (
        libc::SYS_get_mempolicy,
        "get_mempolicy",
        "NUMA placement of memory (kernel addresses once leaked here)",
    ),
    (
        libc::SYS_migrate_pages,
        "migrate_pages",
        "moving another process's pages",
    ),
    (
        libc::SYS_move_pages,
        "move_pages",
        "moving another process's pages",
    ),
    (
        libc::SYS_memfd_secret,
        "memfd_secret",
        "memory hidden from the kernel's own accounting and inspection",
    ),
    (libc::SYS_ioperm, "ioperm", "raw I/O ports"),
    (libc::SYS_iopl, "iopl", "raw I/O ports"),
    (
        libc::SYS_settimeofday,
        "settimeofday",
        "the machine's clock",
    ),
    (
        libc::SYS_clock_settime,
        "clock_settime",
        "the machine's clock",
    ),
    (
        libc::SYS_clock_adjtime,
        "clock_adjtime",
        "the machine's clock",
    ),
    (libc::SYS_uselib, "uselib", "an obsolete loader path"),
    (libc::SYS_ustat, "ustat", "an obsolete filesystem query"),
    (libc::SYS_sysfs, "sysfs", "an obsolete filesystem query"),
];

/// Where a conditional jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    Label(&'static str),
}

/// One instruction, its jumps still symbolic.
struct Op {
    code: u16,
    k: u32,
    jt: To,
    jf: To,
}

const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const AND: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const RET: u16 = 0x06; // BPF_RET | BPF_K

/// Offsets in struct seccomp_data (the low word of each argument).
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const MSG_FASTOPEN: u32 = libc::MSG_FASTOPEN as u32;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// A tiny assembler: instructions and labels, resolved into relative jumps.
#[derive(Default)]
struct Program {
    ops: Vec<Op>,
    labels: HashMap<&'static str, usize>,
}

impl Program {
    fn op(&mut self, code: u16, k: u32, jt: To, jf: To) -> &mut Self {
        self.ops.push(Op { code, k, jt, jf });
        self
    }
    fn load(&mut self, offset: u32) -> &mut Self {
        self.op(LD_ABS, offset, To::Next, To::Next)
    }
    /// If A == k, go to `label`.
    fn jeq(&mut self, k: u32, label: &'static str) -> &mut Self {
        self.op(JEQ, k, To::Label(label), To::Next)
    }
    fn ret(&mut self, k: u32) -> &mut Self {
        self.op(RET, k, To::Next, To::Next)
    }
    fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.insert(name, self.ops.len());
        self
    }

    fn assemble(&self) -> Result<BpfProgram, SeccompError> {
        let resolve = |at: usize, to: To| -> Result<u8, SeccompError> {
            match to {
                To::Next => Ok(0),
                To::Label(l) => {
                    let target = *self.labels.get(l).ok_or(SeccompError::NoLabel(l))?;
                    let offset = target.checked_sub(at + 1).ok_or(SeccompError::Behind(l))?;
                    u8::try_from(offset).map_err(|_| SeccompError::TooFar(l))
                }
            }
        };
        self.ops
            .iter()
            .enumerate()
            .map(|(at, op)| {
                Ok(sock_filter {
                    code: op.code,
                    jt: resolve(at, op.jt)?,
                    jf: resolve(at, op.jf)?,
                    k: op.k,
                })
            })
            .collect()
    }
}

/// The whole filter. Each conditional rule names the threat it stops.
fn deny_program() -> Result<BpfProgram, SeccompError> {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let mut p = Program::default();
    kill_foreign_abis(&mut p);
    // clone3 hides its flags behind a pointer: ENOSYS makes libc fall back
    // to clone, whose flags are checked below.
    p.jeq(libc::SYS_clone3 as u32, "enosys");
    for (nr, _, _) in DENIED {
        p.jeq(*nr as u32, "eperm");
    }
    network_calls(&mut p);
    p.jeq(libc::SYS_ioctl as u32, "ioctl");
    p.jeq(libc::SYS_clone as u32, "clone");
    p.ret(libc::SECCOMP_RET_ALLOW);
    network_rules(&mut p);

    p.label("ioctl").load(arg(1));
    // Typing into another process's terminal; console control.
    p.jeq(libc::TIOCSTI as u32, "eperm");
    p.jeq(libc::TIOCLINUX as u32, "eperm");
    // Changing the terminal's line discipline: where the kernel loads
    // modules on demand, a way to load and reach rarely used drivers.
    p.jeq(libc::TIOCSETD as u32, "eperm");
    p.ret(libc::SECCOMP_RET_ALLOW);

    // clone with a namespace flag: the same escape as unshare.
    p.label("clone").load(arg(0));
    p.op(JSET, NAMESPACE_FLAGS, To::Label("eperm"), To::Next);
    p.label("allow").ret(libc::SECCOMP_RET_ALLOW);
    p.label("eperm").ret(eperm);
    p.label("enosys")
        .ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    p.label("kill").ret(libc::SECCOMP_RET_KILL_PROCESS);
    p.assemble()
}

/// Foreign ABIs: an ia32 syscall carries another audit arch, an x32 one
/// the x32 bit in its number. Either would dodge a list of x86_64
/// numbers, so either goes to "kill". Leaves the syscall number loaded.
fn kill_foreign_abis(p: &mut Program) {
    p.load(ARCH)
        .op(JEQ, AUDIT_ARCH_X86_64, To::Next, To::Label("kill"));
    p.load(NR)
        .op(JGE, X32_SYSCALL_BIT, To::Label("kill"), To::Next);
}

/// The calls `network_rules` decides, sent to its labels.
fn network_calls(p: &mut Program) {
    p.jeq(libc::SYS_socket as u32, "socket");
    p.jeq(libc::SYS_sendto as u32, "send_flags_3");
    p.jeq(libc::SYS_sendmmsg as u32, "send_flags_3");
    p.jeq(libc::SYS_sendmsg as u32, "send_flags_2");
}

/// What a process may do with sockets where only the proxy may carry its
/// traffic, at labels "socket", "send_flags_3" and "send_flags_2" (ending
/// at "allow" or "eperm").
fn network_rules(p: &mut Program) {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    // Sockets: shell's tools need unix sockets and TCP to the proxy, which
    // resolves names for them; nothing else. Every other family is
    // refused: vsock (the host side of a VM, outside every other layer),
    // packet (sniffing and forging link-layer traffic), and the rarely
    // used ones that are kernel attack surface.
    p.label("socket").load(arg(0));
    p.jeq(libc::AF_UNIX as u32, "allow");
    p.jeq(libc::AF_INET as u32, "inet");
    p.jeq(libc::AF_INET6 as u32, "inet");
    p.jeq(libc::AF_NETLINK as u32, "netlink");
    p.ret(eperm);
    // IP: TCP streams only. UDP (a way out where the firewall does not
    // hold, DNS to any resolver included), ICMP datagrams, raw sockets
    // (forging packets around the proxy), SCTP and MPTCP are refused,
    // whatever the firewall does.
    p.label("inet")
        .load(arg(1))
        .op(AND, 0xf, To::Next, To::Next);
    p.op(JEQ, libc::SOCK_STREAM as u32, To::Next, To::Label("eperm"));
    p.load(arg(2));
    p.jeq(0, "allow");
    p.jeq(libc::IPPROTO_TCP as u32, "allow");
    p.ret(eperm);
    // Netlink beyond routing reaches firewall, audit and kernel control.
    p.label("netlink").load(arg(2));
    p.jeq(libc::NETLINK_ROUTE as u32, "allow");
    p.ret(eperm);

    // TCP Fast Open: a send with MSG_FASTOPEN connects without connect(),
    // so Landlock's connect rule never sees it; where the firewall does not
    // hold, it would reach any address and port.
    p.label("send_flags_3").load(arg(3));
    p.op(JSET, MSG_FASTOPEN, To::Label("eperm"), To::Label("allow"));
    p.label("send_flags_2").load(arg(2));
    p.op(JSET, MSG_FASTOPEN, To::Label("eperm"), To::Label("allow"));
}

/// The connect gate's filter, installed on the spawner thread after the
/// others when the firewall cannot hold: every connect(2) of a command goes
/// to warden as a user notification (see `net::connect_gate`). A foreign
/// ABI is let through here: the main filter kills it, and without that
/// filter Landlock still refuses its TCP connects.
///
/// Its listen(2) calls go to warden too (see `listen_program`): a thread
/// has one listener at most, so the gate's carries both.
pub fn gate_program() -> Result<BpfProgram, SeccompError> {
    notify_program(&[libc::SYS_connect, libc::SYS_listen])
}

/// Where the gate does not stand in: every listen(2) of a command goes to
/// warden as a user notification, which refuses it on a network socket
/// (listen binds an unbound one to a port on every address, which
/// Landlock's bind rule never sees) and listens on a unix socket itself
/// (`net::connect_gate::listen`). The filter sees only a descriptor's
/// number, not its family: hence warden.
pub fn listen_program() -> Result<BpfProgram, SeccompError> {
    notify_program(&[libc::SYS_listen])
}

/// A filter sending `calls` to warden and letting everything else go.
fn notify_program(calls: &[i64]) -> Result<BpfProgram, SeccompError> {
    let mut p = Program::default();
    p.load(ARCH)
        .op(JEQ, AUDIT_ARCH_X86_64, To::Next, To::Label("allow"));
    p.load(NR);
    for nr in calls {
        p.jeq(*nr as u32, "notify");
    }
    p.label("allow").ret(libc::SECCOMP_RET_ALLOW);
    p.label("notify").ret(libc::SECCOMP_RET_USER_NOTIF);
    p.assemble()
}

/// The runtime's filter where warden's connect gate decides its network
/// (`runtime_hosts` where nftables cannot hold): the socket rules of
/// commands (no UDP, raw, SCTP or MPTCP socket, no Fast Open), io_uring
/// refused (its operations make sockets and send without these calls;
/// ENOSYS makes libuv and others fall back), and every connect(2) and
/// listen(2) a user notification. A foreign ABI is killed, as it would dodge the rules.
pub fn runtime_gate_program() -> Result<BpfProgram, SeccompError> {
    let mut p = Program::default();
    kill_foreign_abis(&mut p);
    p.jeq(libc::SYS_connect as u32, "notify");
    // Its listens too: on the host's network a port on every address.
    p.jeq(libc::SYS_listen as u32, "notify");
    p.jeq(libc::SYS_io_uring_setup as u32, "enosys");
    network_calls(&mut p);
    p.ret(libc::SECCOMP_RET_ALLOW);
    network_rules(&mut p);
    p.label("allow").ret(libc::SECCOMP_RET_ALLOW);
    p.label("eperm")
        .ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    p.label("enosys")
        .ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    p.label("notify").ret(libc::SECCOMP_RET_USER_NOTIF);
    p.label("kill").ret(libc::SECCOMP_RET_KILL_PROCESS);
    p.assemble()
}

/// The extra names of the policy, compiled by seccompiler's JSON front end
/// (which resolves names to numbers).
fn extra(names: &[String]) -> Result<Option<BpfProgram>, SeccompError> {
    if names.is_empty() {
        return Ok(None);
    }
    let filter: Vec<serde_json::Value> = names
        .iter()
        .map(|n| serde_json::json!({"syscall": n, "comment": "denied by policy/seccomp.json"}))
        .collect();
    let json = serde_json::json!({"extra": {
        "mismatch_action": "allow",
        "filter_action": {"errno": libc::EPERM},
        "filter": filter,
    }});
    let mut map = seccompiler::compile_from_json(json.to_string().as_bytes(), TargetArch::x86_64)
        .map_err(SeccompError::Compile)?;
    Ok(map.remove("extra"))
}

/// Every filter a command gets, in the order they are installed: warden's
/// own, and the policy's additions when it has some.
pub fn build(extra_deny: &[String]) -> Result<Vec<BpfProgram>, SeccompError> {
    let mut programs = vec![deny_program()?];
    programs.extend(extra(extra_deny)?);
    Ok(programs)
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;

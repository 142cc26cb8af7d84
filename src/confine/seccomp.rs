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

/// Whether `name` is an x86_64 syscall, asked of seccompiler's own table
/// through its JSON front end (which knows every one).
pub fn is_known(name: &str) -> bool {
    let json = serde_json::json!({"probe": {
        "mismatch_action": "allow",
        "filter_action": "log",
        "filter": [{"syscall": name}],
    }});
    seccompiler::compile_from_json(json.to_string().as_bytes(), TargetArch::x86_64).is_ok()
}

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

    fn assemble(&self) -> Result<BpfProgram, String> {
        let resolve = |at: usize, to: To| -> Result<u8, String> {
            match to {
                To::Next => Ok(0),
                To::Label(l) => {
                    let target = *self.labels.get(l).ok_or(format!("no label {l}"))?;
                    let offset = target.checked_sub(at + 1).ok_or(format!("{l} is behind"))?;
                    u8::try_from(offset).map_err(|_| format!("{l} is too far"))
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
fn deny_program() -> Result<BpfProgram, String> {
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
pub fn gate_program() -> Result<BpfProgram, String> {
    let mut p = Program::default();
    p.load(ARCH)
        .op(JEQ, AUDIT_ARCH_X86_64, To::Next, To::Label("allow"));
    p.load(NR).jeq(libc::SYS_connect as u32, "notify");
    p.label("allow").ret(libc::SECCOMP_RET_ALLOW);
    p.label("notify").ret(libc::SECCOMP_RET_USER_NOTIF);
    p.assemble()
}

/// The runtime's filter where warden's connect gate decides its network
/// (`runtime_hosts` where nftables cannot hold): the socket rules of
/// commands (no UDP, raw, SCTP or MPTCP socket, no Fast Open), io_uring
/// refused (its operations make sockets and send without these calls;
/// ENOSYS makes libuv and others fall back), and every connect(2) a user
/// notification. A foreign ABI is killed, as it would dodge the rules.
pub fn runtime_gate_program() -> Result<BpfProgram, String> {
    let mut p = Program::default();
    kill_foreign_abis(&mut p);
    p.jeq(libc::SYS_connect as u32, "notify");
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
fn extra(names: &[String]) -> Result<Option<BpfProgram>, String> {
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
        .map_err(|e| e.to_string())?;
    Ok(map.remove("extra"))
}

/// Every filter a command gets, in the order they are installed: warden's
/// own, and the policy's additions when it has some.
pub fn build(extra_deny: &[String]) -> Result<Vec<BpfProgram>, String> {
    let mut programs = vec![deny_program()?];
    programs.extend(extra(extra_deny)?);
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile() {
        let programs = build(&["chown".into(), "kcmp".into()]).unwrap();
        assert_eq!(programs.len(), 2);
        assert!(
            programs[0].len() < 100,
            "{} instructions",
            programs[0].len()
        );
        assert!(programs.iter().all(|p| !p.is_empty() && p.len() < 4096));
    }

    #[test]
    fn names_resolve() {
        for (name, known) in [
            ("ptrace", true),
            ("kcmp", true),
            ("chown", true),
            ("nosuchcall", false),
            ("", false),
        ] {
            assert_eq!(is_known(name), known, "{name}");
        }
    }

    /// A classic-BPF interpreter for the instructions seccompiler and the
    /// ABI guard emit, to check the filters' verdicts without making the
    /// syscalls (AF_VSOCK above all, which must never be created here).
    fn run(program: &[seccompiler::sock_filter], data: &[u8; 64]) -> u32 {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = &program[pc];
            let k = i.k;
            pc += 1;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                0x20 => {
                    a = u32::from_le_bytes(data[k as usize..k as usize + 4].try_into().unwrap())
                }
                0x15 => pc += jump(a == k),
                0x25 => pc += jump(a > k),
                0x35 => pc += jump(a >= k),
                0x45 => pc += jump(a & k != 0),
                0x05 => pc += k as usize,
                0x54 => a &= k,
                0x06 => return k,
                code => panic!("instruction {code:#x} not interpreted"),
            }
        }
    }

    /// The kernel's verdict over stacked filters: the most severe wins.
    fn verdict(programs: &[BpfProgram], arch: u32, nr: i64, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as u32).to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        programs
            .iter()
            .map(|p| run(p, &data))
            .min_by_key(|ret| (ret & libc::SECCOMP_RET_ACTION_FULL) as i32)
            .unwrap()
    }

    #[test]
    fn the_gate_sends_connects_to_warden_and_nothing_else() {
        const X86_64: u32 = 0xc000_003e;
        const I386: u32 = 0x4000_0003;
        let mut programs = build(&[]).unwrap();
        programs.push(gate_program().unwrap());
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let kill = libc::SECCOMP_RET_KILL_PROCESS;
        let x32_connect = libc::SYS_connect | X32_SYSCALL_BIT as i64;
        let cases: &[(&str, u32, i64, u32)] = &[
            ("connect", X86_64, libc::SYS_connect, notify),
            ("accept", X86_64, libc::SYS_accept, allow),
            ("sendto", X86_64, libc::SYS_sendto, allow),
            ("ptrace stays denied", X86_64, libc::SYS_ptrace, eperm),
            ("x32 connect is killed", X86_64, x32_connect, kill),
            ("ia32 is killed", I386, 102, kill),
        ];
        for (name, arch, nr, want) in cases {
            assert_eq!(verdict(&programs, *arch, *nr, [0; 6]), *want, "{name}");
        }
        let alone = [gate_program().unwrap()];
        assert_eq!(
            verdict(&alone, I386, 102, [0; 6]),
            allow,
            "the gate alone kills nothing"
        );
    }

    #[test]
    fn the_runtime_gate_keeps_its_network_to_the_proxy() {
        const X86_64: u32 = 0xc000_003e;
        const I386: u32 = 0x4000_0003;
        let programs = [runtime_gate_program().unwrap()];
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let kill = libc::SECCOMP_RET_KILL_PROCESS;
        let socket =
            |domain: i32, ty: i32, proto: i32| [domain as u64, ty as u64, proto as u64, 0, 0, 0];
        let flags3 = [0, 0, 0, MSG_FASTOPEN as u64, 0, 0];
        let flags2 = [0, 0, MSG_FASTOPEN as u64, 0, 0, 0];
        let cases: &[(&str, u32, i64, [u64; 6], u32)] = &[
            ("connect", X86_64, libc::SYS_connect, [0; 6], notify),
            (
                "tcp socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0),
                allow,
            ),
            (
                "unix socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0),
                allow,
            ),
            (
                "udp socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_DGRAM, 0),
                eperm,
            ),
            (
                "sctp socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
                eperm,
            ),
            (
                "packet socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
                eperm,
            ),
            (
                "fast open by sendto",
                X86_64,
                libc::SYS_sendto,
                flags3,
                eperm,
            ),
            (
                "fast open by sendmsg",
                X86_64,
                libc::SYS_sendmsg,
                flags2,
                eperm,
            ),
            ("a plain send", X86_64, libc::SYS_sendto, [0; 6], allow),
            ("io_uring", X86_64, libc::SYS_io_uring_setup, [0; 6], enosys),
            (
                "ptrace is not this filter's",
                X86_64,
                libc::SYS_ptrace,
                [0; 6],
                allow,
            ),
            (
                "x32 connect is killed",
                X86_64,
                libc::SYS_connect | X32_SYSCALL_BIT as i64,
                [0; 6],
                kill,
            ),
            ("ia32 is killed", I386, 102, [0; 6], kill),
        ];
        for (name, arch, nr, args, want) in cases {
            assert_eq!(verdict(&programs, *arch, *nr, *args), *want, "{name}");
        }
    }

    #[test]
    fn the_filters_decide_as_designed() {
        const X86_64: u32 = 0xc000_003e;
        const I386: u32 = 0x4000_0003;
        let programs = build(&["kcmp".into()]).unwrap();
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        let kill = libc::SECCOMP_RET_KILL_PROCESS;
        let socket =
            |domain: i32, ty: i32, proto: i32| [domain as u64, ty as u64, proto as u64, 0, 0, 0];
        let cases: &[(&str, u32, i64, [u64; 6], u32)] = &[
            (
                "vsock socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0),
                eperm,
            ),
            (
                "packet socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
                eperm,
            ),
            (
                "raw inet socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 1),
                eperm,
            ),
            (
                "audit netlink",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_AUDIT),
                eperm,
            ),
            (
                "route netlink",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_NETLINK, libc::SOCK_DGRAM, libc::NETLINK_ROUTE),
                allow,
            ),
            (
                "tcp socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0),
                allow,
            ),
            (
                "tcp socket, named",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP),
                allow,
            ),
            (
                "udp socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0),
                eperm,
            ),
            (
                "udp6 socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP),
                eperm,
            ),
            (
                "icmp datagram (ping) socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
                eperm,
            ),
            (
                "sctp stream",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
                eperm,
            ),
            (
                "mptcp stream",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET6, libc::SOCK_STREAM, 262),
                eperm,
            ),
            (
                "seqpacket inet",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_INET, libc::SOCK_SEQPACKET, 0),
                eperm,
            ),
            (
                "sendto with MSG_FASTOPEN",
                X86_64,
                libc::SYS_sendto,
                [
                    3,
                    0,
                    5,
                    libc::MSG_FASTOPEN as u64 | libc::MSG_NOSIGNAL as u64,
                    0,
                    0,
                ],
                eperm,
            ),
            (
                "sendto without it",
                X86_64,
                libc::SYS_sendto,
                [3, 0, 5, libc::MSG_NOSIGNAL as u64, 0, 0],
                allow,
            ),
            (
                "sendmsg with MSG_FASTOPEN",
                X86_64,
                libc::SYS_sendmsg,
                [3, 0, libc::MSG_FASTOPEN as u64, 0, 0, 0],
                eperm,
            ),
            (
                "sendmsg without it",
                X86_64,
                libc::SYS_sendmsg,
                [3, 0, 0, 0, 0, 0],
                allow,
            ),
            (
                "sendmmsg with MSG_FASTOPEN",
                X86_64,
                libc::SYS_sendmmsg,
                [3, 0, 2, libc::MSG_FASTOPEN as u64, 0, 0],
                eperm,
            ),
            (
                "unix datagram",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0),
                allow,
            ),
            (
                "alg socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_ALG, libc::SOCK_SEQPACKET, 0),
                eperm,
            ),
            (
                "unix socket",
                X86_64,
                libc::SYS_socket,
                socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
                allow,
            ),
            (
                "clone newuser",
                X86_64,
                libc::SYS_clone,
                [libc::CLONE_NEWUSER as u64 | 17, 0, 0, 0, 0, 0],
                eperm,
            ),
            (
                "clone newnet",
                X86_64,
                libc::SYS_clone,
                [libc::CLONE_NEWNET as u64, 0, 0, 0, 0, 0],
                eperm,
            ),
            (
                "plain fork-like clone",
                X86_64,
                libc::SYS_clone,
                [libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
                allow,
            ),
            (
                "thread clone",
                X86_64,
                libc::SYS_clone,
                [0x3d0f00, 0, 0, 0, 0, 0],
                allow,
            ),
            ("clone3", X86_64, libc::SYS_clone3, [0; 6], enosys),
            (
                "TIOCSTI",
                X86_64,
                libc::SYS_ioctl,
                [0, libc::TIOCSTI, 0, 0, 0, 0],
                eperm,
            ),
            (
                "TIOCLINUX",
                X86_64,
                libc::SYS_ioctl,
                [0, libc::TIOCLINUX, 0, 0, 0, 0],
                eperm,
            ),
            (
                "TCGETS",
                X86_64,
                libc::SYS_ioctl,
                [0, libc::TCGETS, 0, 0, 0, 0],
                allow,
            ),
            ("ptrace", X86_64, libc::SYS_ptrace, [0; 6], eperm),
            (
                "io_uring_setup",
                X86_64,
                libc::SYS_io_uring_setup,
                [0; 6],
                eperm,
            ),
            ("policy's kcmp", X86_64, libc::SYS_kcmp, [0; 6], eperm),
            ("read", X86_64, libc::SYS_read, [0; 6], allow),
            ("execve", X86_64, libc::SYS_execve, [0; 6], allow),
            (
                "x32 getpid",
                X86_64,
                0x4000_0000 | libc::SYS_getpid,
                [0; 6],
                kill,
            ),
            ("ia32 getpid", I386, 20, [0; 6], kill),
        ];
        for (what, arch, nr, args, want) in cases {
            assert_eq!(verdict(&programs, *arch, *nr, *args), *want, "{what}");
        }
        for (nr, name, _) in DENIED {
            assert_eq!(verdict(&programs, X86_64, *nr, [0; 6]), eperm, "{name}");
        }
    }

    #[test]
    fn every_denied_syscall_names_a_threat() {
        for (nr, name, threat) in DENIED {
            assert!(*nr >= 0 && !name.is_empty() && threat.len() > 10, "{name}");
        }
    }
}

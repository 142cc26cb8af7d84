//! The seccomp filter of every command: a deny list of the syscalls a build
//! never needs and an escape does. Compiled once at boot (seccompiler),
//! installed in each command's child just before exec.
//!
//! Three filters are stacked: an ABI guard that kills any syscall made
//! through a foreign ABI (ia32, x32), the deny list (EPERM), and clone3
//! (ENOSYS, so libc falls back to clone, whose flags the deny list can see).

use crate::policy::SeccompPolicy;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

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
];

const AF_VSOCK: u64 = libc::AF_VSOCK as u64;
const AF_PACKET: u64 = libc::AF_PACKET as u64;
const AF_NETLINK: u64 = libc::AF_NETLINK as u64;
const NETLINK_ROUTE: u64 = libc::NETLINK_ROUTE as u64;
const SOCK_TYPE_MASK: u64 = 0xf;
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
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

fn cond(index: u8, len: Len, op: Op, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(index, len, op, value).map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

/// The deny list with arguments: the rules of a syscall are alternatives.
fn conditional_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    let mut rules = BTreeMap::new();
    rules.insert(
        libc::SYS_socket,
        vec![
            // vsock reaches the host side of a VM, outside every other layer.
            rule(vec![cond(0, Len::Dword, Op::Eq, AF_VSOCK)?])?,
            // Raw link-layer access: sniffing and forging traffic.
            rule(vec![cond(0, Len::Dword, Op::Eq, AF_PACKET)?])?,
            // Netlink beyond routing: firewall, audit and kernel control.
            rule(vec![
                cond(0, Len::Dword, Op::Eq, AF_NETLINK)?,
                cond(2, Len::Dword, Op::Ne, NETLINK_ROUTE)?,
            ])?,
            // Raw IP sockets: forging packets around the proxy.
            rule(vec![cond(
                1,
                Len::Dword,
                Op::MaskedEq(SOCK_TYPE_MASK),
                libc::SOCK_RAW as u64,
            )?])?,
        ],
    );
    rules.insert(
        libc::SYS_ioctl,
        vec![
            // Typing into another process's terminal.
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCSTI)?])?,
            // Console control: also injects input on a virtual console.
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCLINUX)?])?,
        ],
    );
    // clone with a namespace flag: the same escape as unshare.
    let clone = NAMESPACE_FLAGS
        .iter()
        .map(|flag| rule(vec![cond(0, Len::Qword, Op::MaskedEq(*flag), *flag)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone);
    for (nr, _, _) in DENIED {
        rules.insert(*nr, Vec::new());
    }
    Ok(rules)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, TargetArch::x86_64)
        .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// Kills any syscall made through a foreign ABI: an ia32 syscall carries
/// another audit arch, an x32 one the x32 bit in its number. Either would
/// bypass a deny list written for x86_64 numbers.
fn abi_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const ARCH_OFFSET: u32 = 4;
    const NR_OFFSET: u32 = 0;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let f = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        f(LD_W_ABS, 0, 0, ARCH_OFFSET),
        f(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        f(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        f(LD_W_ABS, 0, 0, NR_OFFSET),
        f(JGE_K, 0, 1, X32_SYSCALL_BIT),
        f(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        f(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
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

/// Every filter a command gets, in the order they are installed.
pub fn build(policy: &SeccompPolicy) -> Result<Vec<BpfProgram>, String> {
    let mut programs = vec![
        abi_guard(),
        compile(
            conditional_rules()?,
            SeccompAction::Errno(libc::EPERM as u32),
        )?,
        compile(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Errno(libc::ENOSYS as u32),
        )?,
    ];
    programs.extend(extra(&policy.extra_deny)?);
    Ok(programs)
}

/// The names of the unconditionally denied syscalls, for status.
pub fn denied_names() -> Vec<&'static str> {
    DENIED.iter().map(|(_, name, _)| *name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile() {
        let policy = SeccompPolicy {
            require: crate::policy::Requirement::Required,
            extra_deny: vec!["chown".into(), "kcmp".into()],
        };
        let programs = build(&policy).unwrap();
        assert_eq!(programs.len(), 4);
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
    fn the_filters_decide_as_designed() {
        const X86_64: u32 = 0xc000_003e;
        const I386: u32 = 0x4000_0003;
        let policy = SeccompPolicy {
            require: crate::policy::Requirement::Required,
            extra_deny: vec!["kcmp".into()],
        };
        let programs = build(&policy).unwrap();
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

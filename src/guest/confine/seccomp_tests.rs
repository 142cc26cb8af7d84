//! The filters' verdicts, by a small interpreter of their BPF.
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
            0x20 => a = u32::from_le_bytes(data[k as usize..k as usize + 4].try_into().unwrap()),
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
        ("listen", X86_64, libc::SYS_listen, notify),
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
fn every_listen_goes_to_warden_and_nothing_else() {
    const X86_64: u32 = 0xc000_003e;
    let mut programs = build(&[]).unwrap();
    programs.push(listen_program().unwrap());
    let notify = libc::SECCOMP_RET_USER_NOTIF;
    let allow = libc::SECCOMP_RET_ALLOW;
    let cases: &[(&str, i64, u32)] = &[
        ("listen", libc::SYS_listen, notify),
        ("connect", libc::SYS_connect, allow),
        ("bind", libc::SYS_bind, allow),
        ("accept4", libc::SYS_accept4, allow),
    ];
    for (name, nr, want) in cases {
        assert_eq!(verdict(&programs, X86_64, *nr, [0; 6]), *want, "{name}");
    }
}

const X86_64: u32 = 0xc000_003e;
const I386: u32 = 0x4000_0003;
const NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

/// The arguments of socket(domain, type, protocol).
const fn socket(domain: i32, ty: i32, proto: i32) -> [u64; 6] {
    [domain as u64, ty as u64, proto as u64, 0, 0, 0]
}

/// sendto's flags are its fourth argument, sendmsg's its third.
const FLAGS3: [u64; 6] = [0, 0, 0, MSG_FASTOPEN as u64, 0, 0];
const FLAGS2: [u64; 6] = [0, 0, MSG_FASTOPEN as u64, 0, 0, 0];

/// (what, arch, syscall, arguments, verdict) for the runtime's gate.
const RUNTIME_GATE_CASES: &[(&str, u32, i64, [u64; 6], u32)] = &[
    ("connect", X86_64, libc::SYS_connect, [0; 6], NOTIFY),
    ("listen", X86_64, libc::SYS_listen, [0; 6], NOTIFY),
    ("bind", X86_64, libc::SYS_bind, [0; 6], ALLOW),
    (
        "tcp socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0),
        ALLOW,
    ),
    (
        "unix socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0),
        ALLOW,
    ),
    (
        "udp socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_DGRAM, 0),
        EPERM,
    ),
    (
        "sctp socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        EPERM,
    ),
    (
        "packet socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
        EPERM,
    ),
    (
        "fast open by sendto",
        X86_64,
        libc::SYS_sendto,
        FLAGS3,
        EPERM,
    ),
    (
        "fast open by sendmsg",
        X86_64,
        libc::SYS_sendmsg,
        FLAGS2,
        EPERM,
    ),
    ("a plain send", X86_64, libc::SYS_sendto, [0; 6], ALLOW),
    ("io_uring", X86_64, libc::SYS_io_uring_setup, [0; 6], ENOSYS),
    (
        "ptrace is not this filter's",
        X86_64,
        libc::SYS_ptrace,
        [0; 6],
        ALLOW,
    ),
    (
        "x32 connect is killed",
        X86_64,
        libc::SYS_connect | X32_SYSCALL_BIT as i64,
        [0; 6],
        KILL,
    ),
    ("ia32 is killed", I386, 102, [0; 6], KILL),
];

#[test]
fn the_runtime_gate_keeps_its_network_to_the_proxy() {
    let programs = [runtime_gate_program().unwrap()];
    for (name, arch, nr, args, want) in RUNTIME_GATE_CASES {
        assert_eq!(verdict(&programs, *arch, *nr, *args), *want, "{name}");
    }
}

/// (what, arch, syscall, arguments, verdict) for the filters every
/// confined process gets, with kcmp denied by policy.
const FILTER_CASES: &[(&str, u32, i64, [u64; 6], u32)] = &[
    (
        "vsock socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        EPERM,
    ),
    (
        "packet socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
        EPERM,
    ),
    (
        "raw inet socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 1),
        EPERM,
    ),
    (
        "audit netlink",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_AUDIT),
        EPERM,
    ),
    (
        "route netlink",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_NETLINK, libc::SOCK_DGRAM, libc::NETLINK_ROUTE),
        ALLOW,
    ),
    (
        "tcp socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0),
        ALLOW,
    ),
    (
        "tcp socket, named",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP),
        ALLOW,
    ),
    (
        "udp socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0),
        EPERM,
    ),
    (
        "udp6 socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP),
        EPERM,
    ),
    (
        "icmp datagram (ping) socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
        EPERM,
    ),
    (
        "sctp stream",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        EPERM,
    ),
    (
        "mptcp stream",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET6, libc::SOCK_STREAM, 262),
        EPERM,
    ),
    (
        "seqpacket inet",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_INET, libc::SOCK_SEQPACKET, 0),
        EPERM,
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
        EPERM,
    ),
    (
        "sendto without it",
        X86_64,
        libc::SYS_sendto,
        [3, 0, 5, libc::MSG_NOSIGNAL as u64, 0, 0],
        ALLOW,
    ),
    (
        "sendmsg with MSG_FASTOPEN",
        X86_64,
        libc::SYS_sendmsg,
        [3, 0, libc::MSG_FASTOPEN as u64, 0, 0, 0],
        EPERM,
    ),
    (
        "sendmsg without it",
        X86_64,
        libc::SYS_sendmsg,
        [3, 0, 0, 0, 0, 0],
        ALLOW,
    ),
    (
        "sendmmsg with MSG_FASTOPEN",
        X86_64,
        libc::SYS_sendmmsg,
        [3, 0, 2, libc::MSG_FASTOPEN as u64, 0, 0],
        EPERM,
    ),
    (
        "unix datagram",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0),
        ALLOW,
    ),
    (
        "alg socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_ALG, libc::SOCK_SEQPACKET, 0),
        EPERM,
    ),
    (
        "unix socket",
        X86_64,
        libc::SYS_socket,
        socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
        ALLOW,
    ),
    (
        "clone newuser",
        X86_64,
        libc::SYS_clone,
        [libc::CLONE_NEWUSER as u64 | 17, 0, 0, 0, 0, 0],
        EPERM,
    ),
    (
        "clone newnet",
        X86_64,
        libc::SYS_clone,
        [libc::CLONE_NEWNET as u64, 0, 0, 0, 0, 0],
        EPERM,
    ),
    (
        "plain fork-like clone",
        X86_64,
        libc::SYS_clone,
        [libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
        ALLOW,
    ),
    (
        "thread clone",
        X86_64,
        libc::SYS_clone,
        [0x3d0f00, 0, 0, 0, 0, 0],
        ALLOW,
    ),
    ("clone3", X86_64, libc::SYS_clone3, [0; 6], ENOSYS),
    (
        "TIOCSTI",
        X86_64,
        libc::SYS_ioctl,
        [0, libc::TIOCSTI, 0, 0, 0, 0],
        EPERM,
    ),
    (
        "TIOCLINUX",
        X86_64,
        libc::SYS_ioctl,
        [0, libc::TIOCLINUX, 0, 0, 0, 0],
        EPERM,
    ),
    (
        "TIOCSETD",
        X86_64,
        libc::SYS_ioctl,
        [0, libc::TIOCSETD, 0, 0, 0, 0],
        EPERM,
    ),
    (
        "TIOCGETD",
        X86_64,
        libc::SYS_ioctl,
        [0, libc::TIOCGETD, 0, 0, 0, 0],
        ALLOW,
    ),
    (
        "TCGETS",
        X86_64,
        libc::SYS_ioctl,
        [0, libc::TCGETS, 0, 0, 0, 0],
        ALLOW,
    ),
    ("ptrace", X86_64, libc::SYS_ptrace, [0; 6], EPERM),
    (
        "io_uring_setup",
        X86_64,
        libc::SYS_io_uring_setup,
        [0; 6],
        EPERM,
    ),
    ("policy's kcmp", X86_64, libc::SYS_kcmp, [0; 6], EPERM),
    ("read", X86_64, libc::SYS_read, [0; 6], ALLOW),
    ("execve", X86_64, libc::SYS_execve, [0; 6], ALLOW),
    (
        "x32 getpid",
        X86_64,
        0x4000_0000 | libc::SYS_getpid,
        [0; 6],
        KILL,
    ),
    ("ia32 getpid", I386, 20, [0; 6], KILL),
];

#[test]
fn the_filters_decide_as_designed() {
    let programs = build(&["kcmp".into()]).unwrap();
    for (what, arch, nr, args, want) in FILTER_CASES {
        assert_eq!(verdict(&programs, *arch, *nr, *args), *want, "{what}");
    }
    for (nr, name, _) in DENIED {
        assert_eq!(verdict(&programs, X86_64, *nr, [0; 6]), EPERM, "{name}");
    }
}

#[test]
fn every_denied_syscall_names_a_threat() {
    for (nr, name, threat) in DENIED {
        assert!(*nr >= 0 && !name.is_empty() && threat.len() > 10, "{name}");
    }
}

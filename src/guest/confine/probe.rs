//! The probe: a child started exactly as a command is (in warden's
//! memory, the spawner waiting), which applies every layer and then tests
//! each from inside instead of exec'ing, and the firewall probe, forked,
//! which knocks where the firewall must refuse and where it must let
//! through. Both run where a command's setup runs, so everything here is
//! a raw, async-signal-safe syscall: no allocation, no locks.

use nix::errno::Errno;

/// Where the firewall probe knocks: loopback ports warden holds open
/// (none of them the proxy), and the proxy's port. The `v6` ports are
/// tried on ::1 when set.
#[derive(Debug, Clone, Copy)]
pub struct NetProbe {
    pub tcp_v4: u16,
    pub tcp_v6: Option<u16>,
    pub udp_v4: u16,
    pub udp_v6: Option<u16>,
    pub proxy: u16,
}

impl NetProbe {
    /// The loopback addresses it knocks on (not the proxy's).
    pub fn addresses(&self) -> Vec<std::net::SocketAddr> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let mut all = vec![
            SocketAddr::new(v4, self.tcp_v4),
            SocketAddr::new(v4, self.udp_v4),
        ];
        all.extend(self.tcp_v6.map(|p| SocketAddr::new(v6, p)));
        all.extend(self.udp_v6.map(|p| SocketAddr::new(v6, p)));
        all
    }
}

/// What a probe child found, having applied every layer as a command would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe(pub u32);

impl Probe {
    /// Every capability set is empty (effective, permitted, inheritable,
    /// bounding; ambient cleared).
    pub const NO_CAPABILITIES: u32 = 1;
    pub const NO_NEW_PRIVS: u32 = 1 << 1;
    /// Opening "/" (granted to nobody) was refused with EACCES.
    pub const LANDLOCK_FILESYSTEM: u32 = 1 << 2;
    /// personality(2), harmless and denied, failed with EPERM.
    pub const SECCOMP: u32 = 1 << 3;
    /// A TCP connect to a port not granted was refused with EACCES.
    pub const LANDLOCK_TCP: u32 = 1 << 4;
    /// The uid is the command's.
    pub const IDENTITY: u32 = 1 << 5;
    /// The firewall probe: TCP connects to loopback ports that are not the
    /// proxy failed (on ::1 as well, when asked).
    pub const NET_TCP_REFUSED: u32 = 1 << 6;
    /// ... and they failed at once, not by timing out.
    pub const NET_REFUSED_FAST: u32 = 1 << 7;
    /// The proxy's port answered (on ::1 as well, when asked).
    pub const NET_PROXY_REACHED: u32 = 1 << 8;
    /// fork(2) failed with EAGAIN: the probe's cgroup allows it one
    /// process, itself (so it is in that cgroup, and pids.max holds).
    pub const FORK_REFUSED: u32 = 1 << 9;
    /// The firewall probe could not even make a UDP socket (seccomp
    /// refuses them to shell), so it sent no datagram.
    pub const NET_UDP_SOCKET_REFUSED: u32 = 1 << 10;
    /// Its own oom_score_adj read back as 1000: first for the OOM killer.
    pub const OOM_FIRST: u32 = 1 << 11;

    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
}

/// Tests, from inside, every layer just applied: the `Probe` bits that
/// hold.
///
/// # Safety
/// Only for a probe's child, after the layers are applied.
pub(super) unsafe fn layers(last_cap: u32, uid: u32, in_cgroup: bool, landlocked: bool) -> u32 {
    readable_by_the_gate(landlocked);
    let mut bits = 0u32;
    if super::capabilities::empty(last_cap) {
        bits |= Probe::NO_CAPABILITIES;
    }
    if libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 {
        bits |= Probe::NO_NEW_PRIVS;
    }
    let root = c"/";
    let fd = libc::open(
        root.as_ptr(),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
    );
    if fd < 0 && Errno::last() == Errno::EACCES {
        bits |= Probe::LANDLOCK_FILESYSTEM;
    }
    if libc::syscall(libc::SYS_personality, 0xffff_ffffu32) < 0 && Errno::last() == Errno::EPERM {
        bits |= Probe::SECCOMP;
    }
    if landlock_witness_refused() {
        bits |= Probe::LANDLOCK_TCP;
    }
    if libc::getuid() == uid && libc::geteuid() == uid {
        bits |= Probe::IDENTITY;
    }
    // Only a probe in a cgroup of one process has a fork to be refused;
    // elsewhere the test would copy warden's whole memory for nothing.
    if in_cgroup && fork_refused() {
        bits |= Probe::FORK_REFUSED;
    }
    if oom_score_adj_is(b"1000\n") {
        bits |= Probe::OOM_FIRST;
    }
    bits
}

/// Knocks where the firewall must refuse, and where it must let
/// through: the `Probe` bits that hold; the UDP datagrams' fate is judged by warden,
/// which holds the receiving sockets.
///
/// # Safety
/// Only for a probe's child, after its credentials are dropped.
pub(super) unsafe fn network(p: NetProbe, uid: u32, landlocked: bool) -> u32 {
    readable_by_the_gate(landlocked);
    let mut refused = true;
    let mut fast = true;
    let mut reached = true;
    let mut knock = |v6: bool, port: u16, must_connect: bool| match tcp_connect(v6, port) {
        Knock::Connected if must_connect => {}
        Knock::Connected => refused = false,
        Knock::Refused if must_connect => reached = false,
        Knock::Refused => {}
        Knock::TimedOut => {
            fast = false;
            if must_connect {
                reached = false;
            }
        }
    };
    knock(false, p.tcp_v4, false);
    knock(false, p.proxy, true);
    if let Some(port) = p.tcp_v6 {
        knock(true, port, false);
        knock(true, p.proxy, true);
    }
    // The runtime's own TCP connects, where the gate decides them: the
    // witness goes through the gate to the kernel, where Landlock must
    // refuse it (for shell, `layers` proves the same).
    let own_refused = landlock_witness_refused();
    let mut udp_made = udp_send(false, p.udp_v4);
    if let Some(port) = p.udp_v6 {
        udp_made |= udp_send(true, port);
    }
    let mut bits = 0u32;
    if !udp_made {
        bits |= Probe::NET_UDP_SOCKET_REFUSED;
    }
    if refused {
        bits |= Probe::NET_TCP_REFUSED;
    }
    if fast {
        bits |= Probe::NET_REFUSED_FAST;
    }
    if reached {
        bits |= Probe::NET_PROXY_REACHED;
    }
    if own_refused {
        bits |= Probe::LANDLOCK_TCP;
    }
    if libc::getuid() == uid {
        bits |= Probe::IDENTITY;
    }
    bits
}

/// Makes the probe readable by its own user, as a command is after exec
/// (dropping root made it unreadable): the connect gate reads a caller's
/// address so. Only where Landlock holds the probe: a process in a
/// Landlock domain may not trace or read one outside it, so no command
/// can read the probe's memory through /proc (for the layers probe that
/// is warden's own; for the firewall probe, a copy of it). Without
/// Landlock there is no gate to read it: the gate needs Landlock's TCP
/// rules.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a probe's child.
unsafe fn readable_by_the_gate(landlocked: bool) {
    if landlocked {
        libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
    }
}

/// Port 1 of 127.0.0.1: the connect gate lets this one through to the
/// kernel (see `connect_gate::LANDLOCK_WITNESS`), so it is Landlock's
/// refusal (EACCES) that is seen, gate or not.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a probe's child.
unsafe fn landlock_witness_refused() -> bool {
    // Non-blocking: Landlock refuses at connect(2) itself, and where it
    // does not, nothing is waited for (the layers probe holds the spawner).
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    let sock = libc::socket(libc::AF_INET, kind, 0);
    if sock < 0 {
        return false;
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 1u16.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let rc = libc::connect(sock, (&addr as *const libc::sockaddr_in).cast(), len);
    let refused = rc < 0 && Errno::last() == Errno::EACCES;
    libc::close(sock);
    refused
}

/// Whether this process's oom_score_adj reads as `want`.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a probe's child.
unsafe fn oom_score_adj_is(want: &[u8]) -> bool {
    let fd = libc::open(
        c"/proc/self/oom_score_adj".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 16];
    let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    libc::close(fd);
    n > 0 && &buf[..n as usize] == want
}

/// Whether a fork fails with EAGAIN; a child that was made exits at once
/// and is waited for.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a probe's child.
unsafe fn fork_refused() -> bool {
    // The raw system call, not glibc's fork: the layers probe runs in
    // warden's memory (spawn.rs), where glibc's fork would take and reset
    // the locks of warden's heap and run its fork handlers.
    let flags = libc::SIGCHLD as libc::c_ulong;
    match libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) {
        0 => libc::_exit(0),
        pid if pid > 0 => {
            libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            false
        }
        _ => Errno::last() == Errno::EAGAIN,
    }
}

/// How a TCP connect from the firewall probe ended.
enum Knock {
    Connected,
    Refused,
    TimedOut,
}

/// A loopback socket address on the stack: (storage, length).
fn loopback(v6: bool, port: u16) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = if v6 {
        let a = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: port.to_be(),
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr {
                s6_addr: std::net::Ipv6Addr::LOCALHOST.octets(),
            },
            sin6_scope_id: 0,
        };
        // SAFETY: sockaddr_storage is larger than, and aligned for, any
        // socket address.
        unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), a) };
        std::mem::size_of::<libc::sockaddr_in6>()
    } else {
        let a = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: as above.
        unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), a) };
        std::mem::size_of::<libc::sockaddr_in>()
    };
    (storage, len as libc::socklen_t)
}

/// A non-blocking connect, given two seconds: a firewall that drops
/// instead of refusing shows as a timeout.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a probe's child.
unsafe fn tcp_connect(v6: bool, port: u16) -> Knock {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = libc::socket(
        family,
        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0,
    );
    if fd < 0 {
        return Knock::Refused;
    }
    let (addr, len) = loopback(v6, port);
    let knock = if libc::connect(fd, (&addr as *const libc::sockaddr_storage).cast(), len) == 0 {
        Knock::Connected
    } else if Errno::last() != Errno::EINPROGRESS {
        Knock::Refused
    } else {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, 2000) <= 0 {
            Knock::TimedOut
        } else {
            let mut err: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            );
            if err == 0 {
                Knock::Connected
            } else {
                Knock::Refused
            }
        }
    };
    libc::close(fd);
    knock
}

/// One datagram to a loopback port; whether it arrives is for warden to
/// see. False when no UDP socket could be made.
///
/// # Safety
/// Raw, async-signal-safe syscalls only: callable in a probe's child.
unsafe fn udp_send(v6: bool, port: u16) -> bool {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        return false;
    }
    let (addr, len) = loopback(v6, port);
    let msg = b"warden firewall probe";
    libc::sendto(
        fd,
        msg.as_ptr().cast(),
        msg.len(),
        0,
        (&addr as *const libc::sockaddr_storage).cast(),
        len,
    );
    libc::close(fd);
    true
}

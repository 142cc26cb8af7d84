//! listen(2) of a command, sent here by its filter (`seccomp::gate_program`,
//! `seccomp::listen_program`): the seccomp filter sees a descriptor's
//! number, not its family, and listen on an unbound TCP socket binds it to
//! a port on every address (Landlock's bind rule never sees that bind). On
//! the host's network that is a server anyone can reach.
//!
//! warden takes the caller's socket (pidfd_getfd), reads its family, and:
//! - refuses listen on anything but a unix socket (EACCES, as Landlock
//!   refuses a TCP bind), but on a TCP socket bound to one of the
//!   `listen_ports` (the runtime's published ports; none for commands);
//! - listens on the socket itself, on the socket it took, and answers
//!   with the kernel's result. Letting the call go on instead would let
//!   another thread of the caller swap a TCP socket in under the checked
//!   number before the kernel reads it; here what was checked is what
//!   listens. The gate's thread takes the caller's effective ids for that
//!   call, so a client of the socket finds shell's uid and gid as its
//!   peer's (the peer pid it finds is warden's).

use super::notify::{self, Notice, Threads};
use super::{Listener, Outcome, Settings};

/// Decides one listen(2) and answers it; `refuse` records and answers a
/// refusal.
pub(super) fn handle(
    listener: &Listener,
    n: &Notice,
    (threads, settings): (&mut Threads, &Settings),
    refuse: impl Fn(i32, String) -> Outcome,
) -> Outcome {
    let (fd, backlog) = (n.args[0] as i32, n.args[1] as i32);
    let sock = match threads.take(n.tid, fd) {
        Ok(sock) => sock,
        // What the kernel would answer for a number that is no socket.
        Err(e) => return answer(listener, n, Err(e.raw_os_error().unwrap_or(libc::EBADF))),
    };
    // The pidfd pins the thread: the socket was the caller's.
    if !listener.still_waiting(n.id) {
        return Outcome::Gone;
    }
    let family = match notify::family(&sock) {
        Ok(family) => family,
        Err(e) => return answer(listener, n, Err(e.raw_os_error().unwrap_or(libc::ENOTSOCK))),
    };
    if family != libc::AF_UNIX {
        // Port 0 (unbound) is never listed: listen would pick one.
        let port = notify::local_port(&sock).unwrap_or(0);
        if port == 0 || !settings.listen_ports.contains(&port) {
            return refuse(
                libc::EACCES,
                format!("listen on a socket of family {family}, port {port}: not a published port"),
            );
        }
    }
    let (uid, gid) = (settings.uid, settings.gid);
    answer(listener, n, notify::listen_as(&sock, backlog, uid, gid))
}

fn answer(listener: &Listener, n: &Notice, result: Result<(), i32>) -> Outcome {
    let sent = match result {
        Ok(()) => listener.answer(n.id, 0, 0),
        Err(errno) => listener.answer(n.id, -1, errno),
    };
    match sent {
        Ok(()) => Outcome::Listened,
        Err(_) => Outcome::Gone,
    }
}

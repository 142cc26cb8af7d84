//! A command's terminal (`pty: {rows, cols}` on a run, protocol version
//! 4): a pseudo-terminal whose slave is the command's stdin, stdout,
//! stderr and controlling terminal (in its own session, so it leads
//! nothing else's), given to `shell`; warden holds the master, streams what
//! the command prints as stdout frames, writes stdin frames to it raw
//! (Ctrl-C is byte 3: the line discipline turns it into SIGINT for the
//! foreground group), and resizes it (`resize`: the kernel sends SIGWINCH).
//! The slave stays root's (mode 0600): no other command can open it by
//! name, to read what the owner types in it or to write into it.
//! TIOCSTI and TIOCLINUX stay refused by seccomp, so the terminal types
//! into nothing but itself.

use crate::guest::command::output::{Budget, Out};
use crate::wire::Kind;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

/// The largest size a client may ask for.
pub const MAX_SIDE: u16 = 1000;

/// warden's end of a command's terminal.
pub struct Terminal {
    master: AsyncFd<OwnedFd>,
}

/// Pure: whether a terminal size is one warden accepts.
pub fn valid_size(rows: u16, cols: u16) -> Result<(), String> {
    match (rows, cols) {
        (1..=MAX_SIDE, 1..=MAX_SIDE) => Ok(()),
        _ => Err(format!(
            "pty {rows}x{cols}: rows and cols must be 1 to {MAX_SIDE}"
        )),
    }
}

fn winsize(rows: u16, cols: u16) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

impl Terminal {
    /// Opens a terminal of this size; the slave (returned) is for the
    /// child's three descriptors. It stays root's, mode 0600: the command
    /// uses it through the descriptors it inherits (and `/dev/tty`), while
    /// no other process of shell's can open it by its name to read what is
    /// typed there or to write into it. `group` is the slave's group.
    pub fn open(rows: u16, cols: u16, group: u32) -> std::io::Result<(Terminal, OwnedFd)> {
        let pair = nix::pty::openpty(Some(&winsize(rows, cols)), None)?;
        for fd in [&pair.master, &pair.slave] {
            fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        }
        fcntl(
            pair.master.as_raw_fd(),
            FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
        )?;
        nix::unistd::fchown(
            pair.slave.as_raw_fd(),
            None,
            Some(nix::unistd::Gid::from_raw(group)),
        )?;
        nix::sys::stat::fchmod(
            pair.slave.as_raw_fd(),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )?;
        // SAFETY: an OwnedFd is open and keeps the same descriptor for as
        // long as the AsyncFd that owns it lives.
        let master = unsafe { AsyncFd::register(pair.master) }.map_err(|e| e.into_parts().1)?;
        Ok((Terminal { master }, pair.slave))
    }

    /// Sets the terminal's size; the command's foreground group gets
    /// SIGWINCH.
    pub fn resize(&self, rows: u16, cols: u16) -> std::io::Result<()> {
        let size = winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads one struct winsize from the pointer, on
        // a descriptor we own.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        match rc {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Writes all of `bytes` to the terminal (the command's input).
    pub async fn write_all(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let mut ready = self.master.writable().await?;
            match ready.try_io(|fd| nix::unistd::write(fd, bytes).map_err(std::io::Error::from)) {
                Ok(Ok(n)) => bytes = &bytes[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Reads what the command printed; 0 once every holder of the slave
    /// has closed it (the kernel then answers EIO).
    pub async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut ready = self.master.readable().await?;
            match ready
                .try_io(|fd| nix::unistd::read(fd.as_raw_fd(), buf).map_err(std::io::Error::from))
            {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Streams the terminal's output as stdout frames of `id`, within the
/// output budget, until the command and everything holding its terminal
/// are gone.
pub async fn pump(
    terminal: Arc<Terminal>,
    id: u32,
    tx: mpsc::Sender<Out>,
    count: Arc<AtomicU64>,
    budget: Arc<Budget>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match terminal.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let granted = budget.grant(n);
        count.fetch_add(granted as u64, Ordering::Relaxed);
        if granted > 0
            && tx
                .send(Out::Data(Kind::Stdout, id, buf[..granted].to_vec()))
                .await
                .is_err()
        {
            return;
        }
        if granted < n {
            return;
        }
    }
}

/// Feeds stdin frames to the terminal until the client closes stdin.
pub async fn feed(terminal: Arc<Terminal>, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        if terminal.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_table() {
        for (rows, cols, ok) in [
            (24, 80, true),
            (1, 1, true),
            (1000, 1000, true),
            (0, 80, false),
            (24, 0, false),
            (1001, 80, false),
        ] {
            assert_eq!(valid_size(rows, cols).is_ok(), ok, "{rows}x{cols}");
        }
    }

    #[test]
    fn a_terminal_echoes_resizes_and_ends_with_eio() {
        let me = nix::unistd::getgid().as_raw();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (terminal, slave) = Terminal::open(24, 80, me).unwrap();
            let mut size: libc::winsize = unsafe { std::mem::zeroed() };
            // SAFETY: TIOCGWINSZ writes one winsize to the pointer.
            unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
            assert_eq!((size.ws_row, size.ws_col), (24, 80));
            terminal.resize(50, 132).unwrap();
            // SAFETY: as above.
            unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
            assert_eq!((size.ws_row, size.ws_col), (50, 132));
            // What is typed echoes back (canonical mode, echo on).
            terminal.write_all(b"hi\n").await.unwrap();
            let mut buf = [0u8; 64];
            let n = terminal.read(&mut buf).await.unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("hi"));
            drop(slave);
            let mut rest = Vec::new();
            loop {
                match terminal.read(&mut buf).await.unwrap() {
                    0 => break,
                    n => rest.extend_from_slice(&buf[..n]),
                }
            }
        });
    }
}

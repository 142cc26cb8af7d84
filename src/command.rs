//! A command's life outside the API's framing. For now: its pipes, made
//! with warden's ends async and the child's plain, and the task that feeds
//! its stdin. (The rest of a command's life, now in `api`, belongs here.)

use crate::protocol::StdinMode;
use crate::spawn::Stdio;
use nix::fcntl::OFlag;
use std::os::fd::OwnedFd;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

/// Pipes are widened to this size, where the kernel allows, for throughput.
const PIPE_SIZE: libc::c_int = 1 << 20;

/// Feeds stdin frames to the command until the client closes stdin.
pub async fn feed(mut pipe: pipe::Sender, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        if pipe.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// The pipes of one command: warden's ends as async pipes, the child's as
/// plain descriptors.
pub struct CommandPipes {
    /// The child's ends, until taken to spawn it.
    pub child: Option<Stdio>,
    pub stdin: Option<pipe::Sender>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

impl CommandPipes {
    pub fn new(stdin: StdinMode) -> std::io::Result<CommandPipes> {
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = pipe_pair()?;
        let (child_in, our_in) = match stdin {
            StdinMode::Null => (dev_null()?, None),
            StdinMode::Pipe => {
                let (r, w) = pipe_pair()?;
                (r, Some(pipe::Sender::from_owned_fd(w)?))
            }
        };
        widen(&out_r);
        Ok(CommandPipes {
            child: Some(Stdio {
                stdin: child_in,
                stdout: out_w,
                stderr: err_w,
                terminal: false,
            }),
            stdin: our_in,
            stdout: pipe::Receiver::from_owned_fd(out_r)?,
            stderr: pipe::Receiver::from_owned_fd(err_r)?,
        })
    }
}

/// A terminal of this size for a command: warden's end, and the child's
/// three descriptors on its slave (the controlling terminal of the new
/// session the child leads).
pub fn terminal(
    rows: u16,
    cols: u16,
    group: u32,
) -> std::io::Result<(crate::pty::Terminal, Stdio)> {
    let (terminal, slave) = crate::pty::Terminal::open(rows, cols, group)?;
    let child = Stdio {
        stdin: slave.try_clone()?,
        stdout: slave.try_clone()?,
        stderr: slave,
        terminal: true,
    };
    Ok((terminal, child))
}

fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC)?)
}

fn dev_null() -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open("/dev/null")?.into())
}

fn widen(fd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETPIPE_SZ on a pipe we own; failure only keeps the default.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE);
    }
}

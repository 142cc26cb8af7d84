//! Runs a short helper program (`nft`, or a package tool asked for its
//! registry) and collects its output, within a deadline.
//!
//! It goes through warden's own fork and reaper: `std::process::Command`
//! would wait for its child itself, and race the reaper, which reaps every
//! child of PID 1. It runs on the calling thread, never the spawner thread,
//! whose seccomp filter denies the netlink sockets `nft` needs.

use crate::guest::confine::spawn::{
    self, Grouping, Identity, Launch, LaunchError, SpawnError, Stdio, Workdir,
};
use crate::guest::process::reaper::{Exit, Reaper};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The most output kept from a helper: nft's listing is a few KiB.
const MAX_OUTPUT: usize = 1 << 20;

/// Why a helper did not run to its end. `program` is its argv[0].
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("pipe: {0}")]
    Pipe(#[source] Errno),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("no end of output before the deadline")]
    NoEnd,
    #[error("poll: {0}")]
    Poll(#[source] Errno),
    #[error("{program}: writing its input: {error}")]
    Input {
        program: String,
        #[source]
        error: Errno,
    },
    #[error("{program}: its exit was lost")]
    ExitLost { program: String },
    #[error("{program}: killed after {ms} ms")]
    Killed { program: String, ms: u128 },
}

#[derive(Debug)]
pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `argv` as `identity` with `env`, feeding it `stdin`, and kills it
/// at `deadline`. Err says why it did not run to the end.
pub fn run(
    reaper: &Reaper,
    argv: &[String],
    env: &[(String, String)],
    identity: Identity,
    stdin: &[u8],
    deadline: Duration,
) -> Result<Output, ToolError> {
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/sbin:/usr/bin:/sbin:/bin");
    let launch = Launch::new(
        argv,
        env,
        path,
        identity,
        Grouping::Session,
        Workdir::At(c"/".to_owned()),
        None,
    )?;
    let (in_read, in_write) = pipe()?;
    let (out_read, out_write) = pipe()?;
    let (err_read, err_write) = pipe()?;
    let stdio = Stdio {
        stdin: in_read,
        stdout: out_write,
        stderr: err_write,
        terminal: false,
    };
    let spawned = spawn::spawn(&launch, stdio, reaper, true)?;
    let until = Instant::now() + deadline;
    // Small inputs only (a ruleset): the pipe buffer takes them at once.
    let wrote = nix::unistd::write(&in_write, stdin);
    drop(in_write);
    let collected = collect(out_read, err_read, until);
    let mut exit = spawned.exit;
    let program = || argv[0].clone();
    let status = loop {
        match exit.try_recv() {
            Ok(e) => break Ok(e),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                break Err(ToolError::ExitLost { program: program() })
            }
            Err(_) if Instant::now() > until => {
                reaper.signal(spawned.pid, Signal::SIGKILL, true);
                break Err(ToolError::Killed {
                    program: program(),
                    ms: deadline.as_millis(),
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let (stdout, stderr) = collected?;
    if let Err(error) = wrote {
        return Err(ToolError::Input {
            program: program(),
            error,
        });
    }
    let status = status?;
    Ok(Output {
        status: Exit::status(status),
        stdout,
        stderr,
    })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ToolError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(ToolError::Pipe)
}

/// Reads both pipes to their end (the program has exited or closed them).
fn collect(out: OwnedFd, err: OwnedFd, until: Instant) -> Result<(String, String), ToolError> {
    let mut bufs = [Vec::new(), Vec::new()];
    let mut open = [true, true];
    let fds = [out, err];
    while open[0] || open[1] {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ToolError::NoEnd);
        }
        let mut polled: Vec<PollFd> = fds
            .iter()
            .zip(open)
            .filter(|(_, o)| *o)
            .map(|(fd, _)| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        let ms =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::MAX);
        match poll(&mut polled, ms) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(ToolError::Poll(e)),
        }
        drop(polled);
        for i in 0..2 {
            if open[i] {
                open[i] = read_some(&fds[i], &mut bufs[i]);
            }
        }
    }
    let [out, err] = bufs.map(|b| String::from_utf8_lossy(&b).into_owned());
    Ok((out, err))
}

/// Reads what is there without blocking; false at end of file.
fn read_some(fd: &OwnedFd, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    let flags = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap_or(0);
    let _ = nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(
            nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK,
        ),
    );
    loop {
        match nix::unistd::read(fd.as_raw_fd(), &mut chunk) {
            Ok(0) => return false,
            Ok(n) => {
                if buf.len() < MAX_OUTPUT {
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => return true,
            Err(_) => return false,
        }
    }
}

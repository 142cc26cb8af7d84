//! A command's life, outside the API's framing: its stdio (pipes made
//! with warden's ends async and the child's plain, or a terminal), the
//! spawn, its output, the watch that ends it, its exit report and its
//! audit lines (`execute`). The API only turns frames into a checked
//! request and a `Sink`, and the report back into frames.
//!
//! The rest of a command's life is beside it: the request's checks
//! (`request`), its spawn plan (`plan`), its output on its way to a client
//! (`output`), its terminal (`pty`), the OOM killer's count (`oom`), and
//! commands that outlive their connection (`detached`). What a command
//! needs of the machine (its users, confinement, spawner, reaper, audit
//! log) it reads from the supervisor, which knows nothing of commands but
//! their ids, pids and tags.

pub mod detached;
pub mod oom;
pub mod output;
pub mod plan;
pub mod pty;
pub mod request;

use crate::guest::audit::payload;
use crate::guest::confine::cgroups::CommandCgroup;
use crate::guest::confine::spawn::{SpawnError, Spawned, Stdio};
use crate::guest::process::reaper::Exit;
use crate::guest::supervisor::running::Entry;
use crate::guest::supervisor::Supervisor;
use crate::wire::Limits;
use crate::wire::{Event, ExitReport, Kind, StdinMode};
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use output::{pump, Budget, Out};
use request::ValidRun;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

/// Where a command's events and output go: the frames of one id on one
/// connection (or a detached command's own buffer).
pub struct Sink {
    pub tx: mpsc::Sender<Out>,
    pub id: u32,
}

/// A command once it runs.
pub struct Running {
    /// warden's own name for it, unique for the machine's life.
    pub command: u64,
    pub pid: Pid,
    /// Its terminal, when it runs on one.
    pub terminal: Option<Arc<pty::Terminal>>,
}

/// A command's life, from its checked request to its exit report: its
/// stdio (pipes or a terminal), the spawn, its output streamed to `sink`
/// within its budget, the watch (exit, timeout, output limit: a limit kills
/// the whole group), what it left behind, the drain, and its audit lines.
/// `on_spawn` learns the command once it runs, and answers false when it
/// must be killed at once (its client is gone). The caller sends the exit
/// report.
pub async fn execute(
    sup: &Supervisor,
    run: ValidRun,
    requester: u32,
    sink: Sink,
    stdin_rx: Option<mpsc::Receiver<Vec<u8>>>,
    on_spawn: impl FnOnce(&Running) -> bool,
) -> ExitReport {
    let started = Instant::now();
    // The policy's limits, tightened by what the request asks.
    let limits = sup.confinement.limits().tightened_by(&run.limits);
    // The OOM killer's count before it runs (see `oom`).
    let oom_before = oom::kills();
    let started_one = match start(sup, &run, &limits).await {
        Ok(s) => s,
        Err((status, message)) => {
            return not_started(sup, &run, requester, started, status, message)
        }
    };
    let Started {
        spawned,
        io,
        tag,
        cgroup,
    } = started_one;
    let running = Running {
        command: sup.commands.next_id(),
        pid: spawned.pid,
        terminal: match &io {
            Io::Terminal(terminal, _) => Some(terminal.clone()),
            Io::Pipes(_) => None,
        },
    };
    if !on_spawn(&running) {
        sup.reaper.signal(running.pid, Signal::SIGKILL, true);
    }
    announce(sup, &run, requester, &limits, &running, tag, &sink).await;
    let budget = Budget::new(limits.output_bytes);
    let mut streams = Streams::start(io, &sink, stdin_rx, &budget);
    let (exit, watched) = watch(sup, running.pid, spawned.exit, limits.timeout_ms, &budget).await;
    // What its cgroup says stopped it, read before the cgroup goes.
    let cgroup_hit = cgroup.as_ref().and_then(CommandCgroup::limit_hit);
    let escaped = end_leftovers(sup, run.keep_background, tag, cgroup).await;
    let drained = streams.drain(sup.drain_period()).await;
    sup.command_ended(running.command);
    let exit = exit.unwrap_or(Exit::Code(125));
    // The OOM count is read again only when the command was killed: the
    // usual end pays for one read, not two.
    let oom_struck = || matches!((oom_before, oom::kills()), (Some(a), Some(b)) if b > a);
    let ending = classify_exit(exit, watched, budget.was_exceeded(), cgroup_hit, oom_struck);
    let spent = sup.reaper.take_spent(running.pid);
    let report = ExitReport {
        status: exit.status(),
        code: ending.code,
        signal: ending.signal,
        limit: ending.limit.map(str::to_string),
        error: None,
        duration_ms: ms(started.elapsed()),
        stdout_bytes: streams.counts[0].load(Ordering::Relaxed),
        stderr_bytes: streams.counts[1].load(Ordering::Relaxed),
        drained,
        cpu_user_ms: spent.map(|s| round_ms(s.user_ms)),
        cpu_system_ms: spent.map(|s| round_ms(s.system_ms)),
        max_rss_kb: spent.map(|s| s.max_rss_kb),
    };
    sup.commands.count_spent(&report);
    record_end(sup, running.command, &report, escaped);
    report
}

/// The `command_end` audit line: its report, and what it left behind
/// (killed, surviving).
fn record_end(sup: &Supervisor, command: u64, report: &ExitReport, escaped: (usize, usize)) {
    sup.audit.record(&payload::CommandEnd {
        command,
        status: report.status,
        code: report.code,
        signal: &report.signal,
        limit: &report.limit,
        duration_ms: report.duration_ms,
        stdout_bytes: report.stdout_bytes,
        stderr_bytes: report.stderr_bytes,
        drained: report.drained,
        cpu_user_ms: report.cpu_user_ms,
        cpu_system_ms: report.cpu_system_ms,
        max_rss_kb: report.max_rss_kb,
        left_behind_killed: escaped.0,
        left_behind_surviving: escaped.1,
    });
}

/// A command just spawned, with what it was given.
struct Started {
    spawned: Spawned,
    io: Io,
    /// The group every process it starts carries (see `lifetime`).
    tag: u32,
    cgroup: Option<CommandCgroup>,
}

/// Takes a tag, prepares the launch (and its cgroup) and the stdio, and
/// spawns; on failure gives back what it took: (exit status, why).
async fn start(
    sup: &Supervisor,
    run: &ValidRun,
    limits: &Limits,
) -> Result<Started, (i32, String)> {
    let Some(tag) = sup.tags.take() else {
        return Err((125, format!("all {} command tags are taken by kept background processes (stop_shell frees them)", crate::guest::process::lifetime::TAG_COUNT)));
    };
    let (launch, cgroup) = match plan::shell_launch(sup, run, limits, tag) {
        Ok(made) => made,
        Err(e) => {
            sup.tags.give_back(tag);
            return Err((125, e));
        }
    };
    let spawned = match stdio(run) {
        Ok((io, child)) => match sup.spawner.spawn(launch, child, !run.keep_background).await {
            Ok(spawned) => Ok((spawned, io)),
            Err(SpawnError::Child(f)) => Err((f.status(), f.to_string())),
            Err(e) => Err((125, e.to_string())),
        },
        Err(e) => Err((125, e)),
    };
    match spawned {
        Ok((spawned, io)) => Ok(Started {
            spawned,
            io,
            tag,
            cgroup,
        }),
        Err(failed) => {
            if let Some(cgroup) = &cgroup {
                cgroup.remove();
            }
            sup.tags.give_back(tag);
            Err(failed)
        }
    }
}

/// The command's stdio, and the child's end of it to spawn with.
fn stdio(run: &ValidRun) -> Result<(Io, Stdio), String> {
    let io = match run.pty {
        None => CommandPipes::new(run.stdin).map(Io::Pipes),
        Some(size) => terminal(size.rows, size.cols, 0)
            .map(|(terminal, child)| Io::Terminal(Arc::new(terminal), Some(child))),
    };
    let mut io = io.map_err(|e| format!("stdio: {e}"))?;
    let child = match &mut io {
        Io::Pipes(pipes) => pipes.child.take(),
        Io::Terminal(_, child) => child.take(),
    };
    let child = child.ok_or("stdio: already handed out")?;
    Ok((io, child))
}

/// A command that could not start: its audit line and report.
fn not_started(
    sup: &Supervisor,
    run: &ValidRun,
    requester: u32,
    started: Instant,
    status: i32,
    message: String,
) -> ExitReport {
    sup.audit.record(&payload::CommandFailed {
        requester_uid: requester,
        argv: &run.argv,
        folder: run.folder_text(),
        status,
        error: &message,
    });
    ExitReport {
        status,
        code: Some(status),
        error: Some(message),
        duration_ms: ms(started.elapsed()),
        drained: true,
        ..Default::default()
    }
}

/// Says the command runs: in the supervisor's list, the audit log and to
/// its client.
async fn announce(
    sup: &Supervisor,
    run: &ValidRun,
    requester: u32,
    limits: &Limits,
    running: &Running,
    tag: u32,
    sink: &Sink,
) {
    let (command, pid) = (running.command, running.pid);
    let entry = Entry {
        pid,
        tag,
        argv: run.argv.clone(),
        folder: run.folder_text(),
        requester_uid: requester,
    };
    sup.commands.started(command, entry);
    sup.audit.record(&payload::CommandStart {
        command,
        pid: pid.as_raw(),
        requester_uid: requester,
        argv: &run.argv,
        folder: run.folder_text(),
        limits,
        keep_background: run.keep_background,
        detached: run.detach.is_some(),
        tag: run.detach.clone().flatten(),
        terminal: run.pty.is_some(),
    });
    let started = Event::Started {
        command,
        pid: pid.as_raw(),
    };
    let _ = sink.tx.send(Out::Event(sink.id, started)).await;
}

/// The tasks that move a command's output to its sink (and its client's
/// stdin to it), with the bytes counted.
struct Streams {
    out: tokio::task::JoinHandle<()>,
    err: tokio::task::JoinHandle<()>,
    feeder: Option<tokio::task::JoinHandle<()>>,
    counts: [Arc<AtomicU64>; 2],
}

impl Streams {
    fn start(
        io: Io,
        sink: &Sink,
        stdin_rx: Option<mpsc::Receiver<Vec<u8>>>,
        budget: &Arc<Budget>,
    ) -> Streams {
        let counts = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        let stream = |pipe, kind, count: &Arc<AtomicU64>| {
            tokio::spawn(pump(
                pipe,
                kind,
                sink.id,
                sink.tx.clone(),
                count.clone(),
                budget.clone(),
            ))
        };
        let (out, err, feeder) = match io {
            Io::Pipes(pipes) => {
                let out = stream(pipes.stdout, Kind::Stdout, &counts[0]);
                let err = stream(pipes.stderr, Kind::Stderr, &counts[1]);
                let feeder = match (pipes.stdin, stdin_rx) {
                    (Some(pipe), Some(rx)) => Some(tokio::spawn(feed(pipe, rx))),
                    _ => None,
                };
                (out, err, feeder)
            }
            // One stream: a terminal has no stderr of its own.
            Io::Terminal(terminal, _) => {
                let out = tokio::spawn(pty::pump(
                    terminal.clone(),
                    sink.id,
                    sink.tx.clone(),
                    counts[0].clone(),
                    budget.clone(),
                ));
                let feeder = stdin_rx.map(|rx| tokio::spawn(pty::feed(terminal, rx)));
                (out, tokio::spawn(async {}), feeder)
            }
        };
        Streams {
            out,
            err,
            feeder,
            counts,
        }
    }

    /// Waits (bounded) for the output to be delivered; false when the
    /// period ran out first.
    async fn drain(&mut self, period: Duration) -> bool {
        let drained = tokio::time::timeout(period, async {
            let _ = (&mut self.out).await;
            let _ = (&mut self.err).await;
        })
        .await
        .is_ok();
        self.out.abort();
        self.err.abort();
        if let Some(f) = &self.feeder {
            f.abort();
        }
        drained
    }
}

/// Waits for the command's exit, its timeout or its output limit; a limit
/// kills its whole group. (its exit, the limit hit).
async fn watch(
    sup: &Supervisor,
    pid: Pid,
    mut exit_rx: oneshot::Receiver<Exit>,
    timeout_ms: Option<u64>,
    budget: &Arc<Budget>,
) -> (Option<Exit>, Option<&'static str>) {
    let deadline = async {
        match timeout_ms {
            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            None => std::future::pending().await,
        }
    };
    let hit = tokio::select! {
        exit = &mut exit_rx => Err(exit),
        _ = deadline => Ok("timeout"),
        _ = budget.exceeded.notified() => Ok("output"),
    };
    match hit {
        Err(exit) => (exit.ok(), None),
        Ok(limit) => {
            sup.reaper.signal(pid, Signal::SIGKILL, true);
            ((&mut exit_rx).await.ok(), Some(limit))
        }
    }
}

/// Ends what the command left behind (a new session, a double fork, a
/// daemon): by its cgroup where it has one, and by its tag whatever the
/// cgroup could not end (or where there is none); unless it asked to keep
/// it, and then the tag stays taken. (killed, still there)
async fn end_leftovers(
    sup: &Supervisor,
    keep_background: bool,
    tag: u32,
    cgroup: Option<CommandCgroup>,
) -> (usize, usize) {
    if keep_background {
        return (0, 0);
    }
    let shell = sup.shell.uid;
    // Most commands leave nothing: one look at the machine's /proc (tens
    // of processes, under 100 µs) says so here, without a trip to a
    // blocking thread and back. Killing, which waits between rounds,
    // goes there.
    if cgroup.is_none() && crate::guest::process::lifetime::carriers(shell, tag).is_empty() {
        sup.tags.give_back(tag);
        return (0, 0);
    }
    let ended = tokio::task::spawn_blocking(move || match cgroup.map(|c| c.end()) {
        // What its cgroup could not end still carries its tag.
        Some((killed, left)) if left > 0 => {
            let (more, still) = crate::guest::process::lifetime::sweep(shell, tag);
            (killed + more, still)
        }
        Some(ended) => ended,
        None => crate::guest::process::lifetime::sweep(shell, tag),
    })
    .await
    .unwrap_or((0, 1));
    if ended.1 == 0 {
        sup.tags.give_back(tag);
    }
    ended
}

/// How a command ended, as its exit report and audit line say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub code: Option<i32>,
    pub signal: Option<String>,
    /// The limit that ended it: `timeout`, `output`, `memory`,
    /// `processes`, `cpu`, `file_size`.
    pub limit: Option<&'static str>,
}

/// Pure: how a command ended, from its exit, the limit warden's watch
/// hit (if one did), whether its output passed its budget, the limit its
/// own cgroup counted (if it has one), and whether the OOM killer struck
/// in the machine while it ran (asked only when it was killed).
pub fn classify_exit(
    exit: Exit,
    watched: Option<&'static str>,
    output_exceeded: bool,
    cgroup_hit: Option<&'static str>,
    oom_struck: impl FnOnce() -> bool,
) -> Ending {
    // Output cut at its limit is that limit, even when the command exited
    // before the watch heard of it.
    let limit = watched.or(output_exceeded.then_some("output"));
    // A shell reports its killed child as 137.
    let killed = matches!(exit, Exit::Signal(libc::SIGKILL) | Exit::Code(137));
    // Its own cgroup's limits: memory kills the whole command; processes
    // only refuses forks, so it is the reason only for a failed command.
    let failed = !matches!(exit, Exit::Code(0));
    let limit = limit.or(match cgroup_hit {
        Some("memory") if killed => Some("memory"),
        Some("processes") if failed => Some("processes"),
        _ => None,
    });
    // Killed while the OOM killer struck in the machine's cgroup: its
    // memory limit (commands are first in its line).
    let limit = limit.or_else(|| (killed && oom_struck()).then_some("memory"));
    // Limits the kernel enforces by rlimit announce themselves by signal.
    let limit = limit.or(match exit {
        Exit::Signal(libc::SIGXCPU) => Some("cpu"),
        Exit::Signal(libc::SIGXFSZ) => Some("file_size"),
        _ => None,
    });
    let (code, signal) = match exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(n) => (None, Some(signal_name(n))),
    };
    Ending {
        code,
        signal,
        limit,
    }
}

/// A command's stdio: pipes, or a terminal (the child's end taken once,
/// to be spawned with).
pub enum Io {
    Pipes(CommandPipes),
    Terminal(
        Arc<pty::Terminal>,
        Option<crate::guest::confine::spawn::Stdio>,
    ),
}

/// Shell's convention for a death by signal: its name.
pub fn signal_name(n: i32) -> String {
    Signal::try_from(n)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("SIG{n}"))
}

/// Milliseconds, to the microsecond (from a float of ms).
fn round_ms(ms: f64) -> f64 {
    (ms * 1e3).round() / 1e3
}

/// Milliseconds, to the microsecond.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

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
pub fn terminal(rows: u16, cols: u16, group: u32) -> std::io::Result<(pty::Terminal, Stdio)> {
    let (terminal, slave) = pty::Terminal::open(rows, cols, group)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// (exit, watched, output exceeded, cgroup's count, OOM struck) ->
    /// (code, signal, limit)
    type Case = (
        Exit,
        Option<&'static str>,
        bool,
        Option<&'static str>,
        bool,
        Option<i32>,
        Option<&'static str>,
        Option<&'static str>,
    );

    #[rustfmt::skip]
    const CASES: &[Case] = &[
        (Exit::Code(0), None, false, None, false, Some(0), None, None),
        (Exit::Code(3), None, false, None, true, Some(3), None, None),
        (Exit::Signal(KILL), Some("timeout"), false, Some("memory"), true, None, Some("SIGKILL"), Some("timeout")),
        (Exit::Signal(KILL), Some("output"), true, None, false, None, Some("SIGKILL"), Some("output")),
        (Exit::Code(0), None, true, None, false, Some(0), None, Some("output")),
        (Exit::Signal(KILL), None, false, Some("memory"), false, None, Some("SIGKILL"), Some("memory")),
        (Exit::Code(137), None, false, Some("memory"), false, Some(137), None, Some("memory")),
        (Exit::Code(0), None, false, Some("memory"), false, Some(0), None, None),
        (Exit::Code(1), None, false, Some("processes"), false, Some(1), None, Some("processes")),
        (Exit::Code(0), None, false, Some("processes"), false, Some(0), None, None),
        (Exit::Signal(KILL), None, false, None, true, None, Some("SIGKILL"), Some("memory")),
        (Exit::Code(137), None, false, None, true, Some(137), None, Some("memory")),
        (Exit::Signal(KILL), None, false, None, false, None, Some("SIGKILL"), None),
        (Exit::Signal(libc::SIGTERM), None, false, None, true, None, Some("SIGTERM"), None),
        (Exit::Signal(libc::SIGXCPU), None, false, None, false, None, Some("SIGXCPU"), Some("cpu")),
        (Exit::Signal(libc::SIGXFSZ), None, false, None, false, None, Some("SIGXFSZ"), Some("file_size")),
    ];
    const KILL: i32 = libc::SIGKILL;

    #[test]
    fn classify_exit_table() {
        for &(exit, watched, exceeded, cgroup, oom, code, signal, limit) in CASES {
            let got = classify_exit(exit, watched, exceeded, cgroup, || oom);
            let want = Ending {
                code,
                signal: signal.map(str::to_string),
                limit,
            };
            assert_eq!(
                got, want,
                "{exit:?} watched {watched:?} exceeded {exceeded} cgroup {cgroup:?} oom {oom}"
            );
        }
    }

    #[test]
    fn the_oom_count_is_read_only_for_a_killed_command() {
        let asked = std::cell::Cell::new(0);
        let oom = || {
            asked.set(asked.get() + 1);
            true
        };
        classify_exit(Exit::Code(0), None, false, None, oom);
        assert_eq!(asked.get(), 0);
        classify_exit(Exit::Signal(libc::SIGKILL), None, false, None, oom);
        assert_eq!(asked.get(), 1);
    }
}

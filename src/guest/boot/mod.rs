//! `warden init`: boot as PID 1 (or a subreaper), in numbered phases, then
//! supervise until the main process ends or a shutdown signal arrives.
//! The phases that prepare the machine are `phases`, the network's is
//! `net_phase`; where the boot's time goes is `phase_clock`, and the
//! boot's code given back once it is over `footprint`; the API's ways in
//! `doors`.

mod doors;
mod footprint;
mod net_phase;
mod phase_clock;
pub mod phases;

use crate::guest::audit::payload;
use crate::guest::confine::spawn::{self, SpawnError, Stdio};
use crate::guest::process::reaper::Exit;
use crate::guest::supervisor::Supervisor;
use crate::guest::vm::{self, Vm};
use crate::shared::main_restart;
use crate::wire::MainState;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;
use phase_clock::PhaseClock;
pub use phases::InitArgs;
use phases::{
    announce, bind_proxy, leave_the_books_in_order, load_config, make_layout, make_users,
    mount_volumes, open_audit, open_hosts, prepare_confinement, supervisor, BootError,
};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Signals that warden never blocks: faults must kill it rather than loop.
const SYNCHRONOUS: [Signal; 6] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGTRAP,
    Signal::SIGSYS,
];

/// Signals that stop the machine; everything else is forwarded.
fn is_shutdown(sig: Signal) -> bool {
    matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGPWR)
}

/// Boots and supervises; returns the exit status for the process. As PID 1
/// of a VM it never returns: it powers the machine off instead.
pub fn run(args: InitArgs) -> i32 {
    let boot = Instant::now();
    // 1. Block every asynchronous signal before any thread exists, so they
    //    all reach the signal loop and every thread inherits the mask.
    let waited = match block_signals() {
        Ok(set) => set,
        Err(e) => return refuse(format!("cannot block signals: {e}")),
    };
    // Dispositions inherited from whoever started warden (an ignored
    // signal survives exec) are reset once, for every child to come.
    spawn::default_signal_dispositions();
    // Its memory (the proxy's credentials, the machine authority's key)
    // is no user's to read, and never dumped.
    crate::guest::confine::memory::keep_unreadable();
    // 2. In a VM, the machine itself: kernel file systems, drivers, the
    //    root disk, the host name (what a container runtime does for a
    //    container).
    let mut clock = PhaseClock::new(boot);
    clock.mark("signals");
    let vm = if vm::detect() {
        // A bug while booting the VM must not end PID 1 (the kernel would
        // panic): it powers the machine off, saying so.
        let mut mark = |phase| clock.mark(phase);
        let booted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| vm::boot(&mut mark)))
            .unwrap_or(Err(vm::VmError::Panicked));
        match booted {
            Ok(vm) => Some(vm),
            // Not a machine after all: nothing of one is touched, not
            // even its power.
            Err(e @ vm::VmError::NotAMachine) => return refuse(e.to_string()),
            Err(e) => {
                refuse(format!("VM boot: {e}"));
                vm::power_off(1)
            }
        }
    } else {
        None
    };
    // A bug must not end PID 1 (in a VM the kernel would panic): it ends
    // the machine, in order.
    let machine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        boot_and_supervise(args, clock, waited, vm.as_ref())
    }));
    let status = machine.unwrap_or_else(|_| {
        crate::say!("internal error: warden panicked; stopping the machine");
        70
    });
    match vm {
        Some(_) => vm::power_off(status),
        None => status,
    }
}

/// Boots in numbered phases, then supervises: its exit status.
fn boot_and_supervise(args: InitArgs, clock: PhaseClock, waited: SigSet, vm: Option<&Vm>) -> i32 {
    match phases(args, clock, waited, vm) {
        Ok(status) => status,
        Err(e) => refuse(e.to_string()),
    }
}

/// The boot, phase by phase (1 and 2, the signals and a VM's own boot,
/// are `run`'s, and on `clock` already).
fn phases(
    args: InitArgs,
    mut clock: PhaseClock,
    waited: SigSet,
    vm: Option<&Vm>,
) -> Result<i32, BootError> {
    footprint::one_malloc_arena();
    let pid1 = nix::unistd::getpid().as_raw() == 1;
    if !pid1 {
        become_subreaper();
    }
    let (config, config_path, policy) = load_config(args)?; // 3
    clock.mark("config");
    let volumes = mount_volumes(vm, &config)?;
    let accounts = make_users(&config)?; // 4
    clock.mark("volumes_and_users");
    let (paths, changes) = make_layout(&config, &accounts)?; // 5
    clock.mark("layout");
    let audit = open_audit(&config, &paths, &accounts)?; // 6
    clock.mark("audit");
    let own_cgroups = vm.is_some() || config.command_cgroups;
    let (confinement, mut network) = prepare_confinement(
        policy,
        pid1,
        own_cgroups,
        [accounts[0].uid, accounts[1].uid],
    ); // 7
    clock.mark("confinement");
    let proxy_listeners = bind_proxy(&mut network); // 8
    clock.mark("proxy_bound");
    open_hosts(&mut network, &config, &audit);
    clock.mark("opened_hosts");
    let sup = supervisor(config, accounts, audit, confinement, network, pid1);
    clock.mark("supervisor");
    let runtime = async_runtime()?; // 9
    clock.mark("async_runtime");
    let signals = start_signal_loop(sup.clone(), waited);
    let doors = doors::open(&sup, &runtime, vm)?;
    if vm.is_some() {
        serve_vm_ports(&sup, &runtime);
    }
    clock.mark("doors");
    let defaults = net_phase::start(&sup, &runtime, proxy_listeners, vm.is_some()); // 10
    clock.mark("network");
    let layers = sup.probe(); // 11
    clock.mark("probe");
    let boot_ms = clock.elapsed_ms();
    sup.set_boot_ms(boot_ms);
    let vm_said = vm.map(|vm| (vm, &volumes[..], doors.vsock_port));
    record_boot(
        &sup,
        &clock,
        (&config_path, &changes),
        &layers,
        vm_said,
        boot_ms,
    );
    let vsock_port = doors.vsock_port;
    upkeep(&sup, &runtime);
    doors::serve(&sup, &runtime, doors);
    announce(&sup, &layers, clock.start(), vsock_port);
    if let Some(vm) = vm {
        vm.inject_fault();
    }
    net_phase::work_out_default_hosts(&sup, defaults);
    let (main, waits) = main_process(&sup); // 12
    watch_idleness_and_readiness(&sup, &runtime);
    // The boot is over: its code, and the stack it went deep on, need not
    // stay resident (see footprint).
    if let Err(e) = footprint::unmap_code() {
        crate::say!("the boot's code stays mapped: {e}");
    }
    if let Err(e) = footprint::give_back_boot_stack() {
        crate::say!("the boot's stack stays resident: {e}");
    }
    let status = runtime.block_on(supervise(sup.clone(), signals, main, waits)); // 13
    Ok(leave_the_books_in_order(&sup, status)) // 14
}

/// The `boot` audit line: what was set up, what holds, and how long each
/// phase took.
fn record_boot(
    sup: &Supervisor,
    clock: &PhaseClock,
    (config_path, changes): (&std::path::Path, &[String]),
    layers: &[crate::wire::LayerState],
    vm: Option<(&Vm, &[String], Option<u32>)>,
    boot_ms: f64,
) {
    sup.audit.record(&payload::Boot {
        version: env!("CARGO_PKG_VERSION"),
        pid1: sup.pid1,
        pid: nix::unistd::getpid().as_raw(),
        config: config_path,
        users: [(&sup.runtime).into(), (&sup.shell).into()],
        layout_changes: changes,
        socket: &sup.config.socket,
        tcp_door: sup.config.tcp_door,
        policy: payload::BootPolicy {
            dir: &sup.config.policy_dir,
            digest: &sup.confinement.policy.digest,
        },
        layers,
        vm: vm.map(|(vm, volumes, vsock_port)| payload::BootVm {
            root: &vm.root,
            modules: &vm.modules,
            hostname: &vm.hostname,
            volumes,
            vsock_port,
        }),
        boot_ms,
        boot_phases_ms: clock.said(),
    });
}

/// The async runtime warden's doors, proxy and supervision run on.
fn async_runtime() -> Result<tokio::runtime::Runtime, BootError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(BootError::Runtime)
}

/// A VM's published ports: the host's connections come over vsock.
fn serve_vm_ports(sup: &Arc<Supervisor>, runtime: &tokio::runtime::Runtime) {
    let _inside = runtime.enter();
    let used = sup.clone();
    let in_use: crate::guest::vm::published_ports::InUse =
        Arc::new(move |open| used.activity.carrying(open));
    for failed in crate::guest::vm::published_ports::serve(&sup.config.vm_ports, in_use) {
        crate::say!("{failed}");
    }
}

/// The watches on the main process: stopped when idle, ready once its
/// port answers.
fn watch_idleness_and_readiness(sup: &Arc<Supervisor>, runtime: &tokio::runtime::Runtime) {
    let _in_runtime = runtime.enter();
    crate::guest::supervisor::settings::watch_idleness(sup);
    crate::guest::supervisor::readiness::watch_port(sup);
}

/// 11, then: the refusal counts written once their window is over, even
///     on a machine that writes nothing else; once the machine was used
///     and then went idle, what its requests freed and the code they
///     mapped back go (once: an idle machine does no work for it).
fn upkeep(sup: &Arc<Supervisor>, runtime: &tokio::runtime::Runtime) {
    let counting = Arc::downgrade(sup);
    runtime.spawn(async move {
        let mut trimmed_after = None;
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let Some(sup) = counting.upgrade() else {
                return;
            };
            sup.audit.write_due_counts();
            // Idle for a second at least: never between the commands of
            // a stream, whose next one would map the code back at once.
            let last = sup.activity.last();
            let idle = last.elapsed() >= Duration::from_secs(1) && sup.commands.count() == 0;
            if trimmed_after != Some(last) && idle {
                give_back_freed_memory();
                trimmed_after = Some(last);
            }
        }
    });
}

/// 12. The main process, as runtime: now, or once the host has handed
///     over the runtime's keys when the config says it will (then it
///     starts in `supervise`).
fn main_process(sup: &Supervisor) -> (Option<Result<Main, i32>>, bool) {
    let waits = sup.config.main_waits_for_keys && !sup.config.main.is_empty();
    if waits {
        crate::say!("the main process starts once the host hands over the runtime's keys");
        return (None, true);
    }
    (start_main(sup), false)
}

fn refuse(reason: String) -> i32 {
    crate::say!("refusing to start: {reason}");
    1
}

fn block_signals() -> nix::Result<SigSet> {
    let mut set = SigSet::all();
    for sig in SYNCHRONOUS
        .iter()
        .chain(&[Signal::SIGKILL, Signal::SIGSTOP, Signal::SIGPIPE])
    {
        set.remove(*sig);
    }
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    Ok(set)
}

fn become_subreaper() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes plain integers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let pid = nix::unistd::getpid();
    if rc == 0 {
        crate::say!("not PID 1 (pid {pid}): acting as a subreaper for what it starts");
    } else {
        crate::say!(
            "not PID 1 (pid {pid}) and cannot become a subreaper ({}): orphans will not be reaped by warden",
            std::io::Error::last_os_error()
        );
    }
}

/// One thread owns every blocked signal: SIGCHLD drives the reaper, the
/// others go to the supervising task.
fn start_signal_loop(sup: Arc<Supervisor>, set: SigSet) -> mpsc::UnboundedReceiver<Signal> {
    let (tx, rx) = mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            // A bug here must not end signal handling for good: PID 1
            // without it would leak zombies and ignore shutdown.
            let step =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match set.wait() {
                    Ok(Signal::SIGCHLD) => {
                        sup.reaper.reap();
                    }
                    Ok(sig) => {
                        let _ = tx.send(sig);
                    }
                    Err(e) => {
                        crate::say!("sigwait: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }));
            if step.is_err() {
                crate::say!("internal error in the signal loop; carrying on");
            }
        });
    if let Err(e) = spawned {
        crate::say!("cannot start the signal thread: {e}; signals will not be handled");
    }
    rx
}

struct Main {
    pid: Pid,
    exit: oneshot::Receiver<Exit>,
    ended: Option<Exit>,
}

impl Main {
    /// Whether the main process has been reaped (remembering how it ended).
    fn has_ended(&mut self) -> bool {
        if self.ended.is_none() {
            self.ended = self.exit.try_recv().ok();
        }
        self.ended.is_some()
    }
}

/// Starts the machine's main process, if it has one. A main process that
/// cannot start is still a status to exit with (127, 126).
fn start_main(sup: &Supervisor) -> Option<Result<Main, i32>> {
    let argv = sup.config.main.clone();
    if argv.is_empty() {
        return None;
    }
    let launch = match sup.main_launch(&argv) {
        Ok(l) => l,
        Err(e) => {
            crate::say!("main process: {e}");
            return Some(Err(125));
        }
    };
    let stdio = match inherited_stdio() {
        Ok(s) => s,
        Err(e) => {
            crate::say!("main process: stdio: {e}");
            return Some(Err(125));
        }
    };
    match sup.spawn_runtime(launch, stdio, false) {
        Ok(spawned) => {
            sup.set_main(Some(MainState {
                pid: spawned.pid.as_raw(),
                argv: argv.clone(),
            }));
            sup.audit.record(&payload::MainStart {
                pid: spawned.pid.as_raw(),
                argv: &argv,
            });
            Some(Ok(Main {
                pid: spawned.pid,
                exit: spawned.exit,
                ended: None,
            }))
        }
        Err(SpawnError::Child(f)) => {
            // The program's name may carry a secret: redacted like the log.
            crate::say!("main process: {}", sup.audit.redact(&f.to_string()));
            sup.audit.record(&payload::MainFailed {
                argv: &argv,
                error: f.to_string(),
            });
            Some(Err(f.status()))
        }
        Err(e) => {
            crate::say!("main process: {e}");
            Some(Err(125))
        }
    }
}

/// warden's own stdio, duplicated for the main process (or /dev/null where
/// warden has none).
fn inherited_stdio() -> std::io::Result<Stdio> {
    let dup = |fd: i32, write: bool| -> std::io::Result<OwnedFd> {
        match nix::unistd::dup(fd) {
            // SAFETY: dup returned a fresh descriptor we now own.
            Ok(new) => Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new) }),
            Err(_) => Ok(std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open("/dev/null")?
                .into()),
        }
    };
    Ok(Stdio {
        stdin: dup(0, false)?,
        stdout: dup(1, true)?,
        stderr: dup(2, true)?,
        terminal: false,
    })
}

async fn supervise(
    sup: Arc<Supervisor>,
    mut signals: mpsc::UnboundedReceiver<Signal>,
    main: Option<Result<Main, i32>>,
    mut waits_for_keys: bool,
) -> i32 {
    let mut main = match main {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(status)) => {
            stop_everything(&sup, None).await;
            return status;
        }
    };
    // When the main process last started, and how many quick exits came.
    let (mut started, mut quick) = (Instant::now(), 0u32);
    loop {
        if waits_for_keys {
            waits_for_keys = false;
            match wait_for_keys(&sup, &mut signals).await {
                Ok(Some(m)) => main = Some(m),
                Ok(None) => {}
                Err(status) => return status,
            }
        }
        let main_exit = async {
            match main.as_mut() {
                Some(m) => (&mut m.exit).await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            sig = signals.recv() => {
                let Some(sig) = sig else { continue };
                if is_shutdown(sig) {
                    sup.audit.record(&payload::Signal { signal: sig.as_str(), action: "shutdown" });
                    crate::say!("{sig}: shutting down");
                    return shutdown(&sup, sig, main).await;
                }
                let forwarded = main.as_ref().is_some_and(|m| sup.reaper.signal(m.pid, sig, false));
                let action = if forwarded { "forwarded to main" } else { "ignored: no main process" };
                sup.audit.record(&payload::Signal { signal: sig.as_str(), action });
            }
            _ = sup.stop_requested() => {
                return stopped_on_request(&sup, main).await;
            }
            exit = main_exit => {
                let status = exit.map(Exit::status).unwrap_or(125);
                let again = sup.config.main_restart.again(status);
                sup.audit.record(&payload::MainExit { status, restart: Some(again) });
                sup.set_main(None);
                if again {
                    match start_again(&sup, &mut signals, status, (&mut started, &mut quick)).await {
                        Ok(Some(m)) => {
                            main = Some(m);
                            continue;
                        }
                        Ok(None) => {}
                        Err(status) => return status,
                    }
                }
                crate::say!("main process exited with status {status}; stopping");
                stop_everything(&sup, None).await;
                return status;
            }
        }
    }
}

/// Until the keys come (then the main process starts: Ok with it, if
/// there is one to start), or a signal that ends the machine, or a stop
/// (Err with the machine's exit status). Other signals have no main
/// process to go to.
async fn wait_for_keys(
    sup: &Supervisor,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
) -> Result<Option<Main>, i32> {
    loop {
        // The keys, a signal or a stop, whichever comes first.
        tokio::select! {
            _ = sup.keys.wait() => {
                return match start_main(sup) {
                    Some(Ok(m)) => Ok(Some(m)),
                    Some(Err(status)) => {
                        stop_everything(sup, None).await;
                        Err(status)
                    }
                    None => Ok(None),
                };
            }
            sig = signals.recv() => {
                let Some(sig) = sig else { continue };
                if is_shutdown(sig) {
                    sup.audit.record(&payload::Signal { signal: sig.as_str(), action: "shutdown" });
                    return Err(shutdown(sup, sig, None).await);
                }
            }
            _ = sup.stop_requested() => {
                return Err(stopped_on_request(sup, None).await);
            }
        }
    }
}

/// The main process exited with `status` and its restart policy says
/// again: the wait (longer after quick exits, counted in `quick` since
/// `started`), then it starts again. Ok with the new main process, if
/// there is one to start; Err with the machine's exit status.
async fn start_again(
    sup: &Supervisor,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
    status: i32,
    (started, quick): (&mut Instant, &mut u32),
) -> Result<Option<Main>, i32> {
    *quick = if started.elapsed() >= main_restart::SETTLED {
        0
    } else {
        *quick + 1
    };
    let wait = main_restart::backoff(quick.saturating_sub(1));
    crate::say!(
        "main process exited with status {status}; starting it again in {} s",
        wait.as_secs()
    );
    if let Some(status) = wait_to_restart(sup, signals, wait).await {
        return Err(status);
    }
    *started = Instant::now();
    match start_main(sup) {
        Some(Ok(m)) => Ok(Some(m)),
        Some(Err(status)) => {
            stop_everything(sup, None).await;
            Err(status)
        }
        None => Ok(None),
    }
}

/// The wait before the main process starts again. A stop, or a signal
/// that ends the machine, ends it now (its exit status); other signals
/// have no main process to go to.
async fn wait_to_restart(
    sup: &Supervisor,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
    wait: Duration,
) -> Option<i32> {
    let waited = tokio::time::sleep(wait);
    tokio::pin!(waited);
    loop {
        tokio::select! {
            _ = &mut waited => return None,
            _ = sup.stop_requested() => return Some(stopped_on_request(sup, None).await),
            sig = signals.recv() => {
                let Some(sig) = sig else {
                    // No more signals: the wait alone decides.
                    waited.as_mut().await;
                    return None;
                };
                let shuts = is_shutdown(sig);
                let action = if shuts { "shutdown" } else { "ignored: no main process" };
                sup.audit.record(&payload::Signal { signal: sig.as_str(), action });
                if shuts {
                    return Some(shutdown(sup, sig, None).await);
                }
            }
        }
    }
}

/// A stop asked for through the API, or for being idle: as SIGTERM, but
/// an idle stop ends with status 0 (nothing failed; an engine's
/// `on-failure` restart must not start the machine again).
async fn stopped_on_request(sup: &Supervisor, main: Option<Main>) -> i32 {
    let idle = sup.activity.stopped_idle();
    match idle {
        true => crate::say!("idle: stopping"),
        false => crate::say!("shutdown requested through the API: shutting down"),
    }
    let status = shutdown(sup, Signal::SIGTERM, main).await;
    if idle {
        0
    } else {
        status
    }
}

/// Hands the heap's free pages back to the kernel, and unmaps the code
/// the last requests mapped back in. After a burst of commands, glibc
/// keeps what their connections and threads freed (one arena per thread
/// that allocated), and warden's resident memory stayed at its peak;
/// trimming every arena takes it back down. The code pages are the
/// binary's, in the page cache: the next request maps back what it runs.
fn give_back_freed_memory() {
    // SAFETY: malloc_trim takes each arena's lock itself; it only
    // releases pages no allocation holds.
    unsafe {
        libc::malloc_trim(0);
    }
    // Where this cannot be done, the boot said why once.
    let _ = footprint::unmap_code();
}

/// TERM/INT/PWR: pass it on to the main process, stop every command, and
/// exit with the main process's status (0 without one).
async fn shutdown(sup: &Supervisor, sig: Signal, main: Option<Main>) -> i32 {
    let to_main = if sig == Signal::SIGPWR {
        Signal::SIGTERM
    } else {
        sig
    };
    match main {
        None => {
            stop_everything(sup, None).await;
            0
        }
        Some(mut m) => {
            sup.reaper.signal(m.pid, to_main, false);
            stop_everything(sup, Some(&mut m)).await;
            let exit = match m.ended {
                Some(exit) => Some(exit),
                None => tokio::time::timeout(Duration::from_secs(1), &mut m.exit)
                    .await
                    .ok()
                    .and_then(Result::ok),
            };
            let status = exit
                .map(Exit::status)
                .unwrap_or(128 + Signal::SIGKILL as i32);
            sup.audit.record(&payload::MainExit {
                status,
                restart: None,
            });
            status
        }
    }
}

/// Refuses new commands, sends SIGTERM to every command's group, waits for
/// the grace period, then SIGKILLs whatever is left (in a PID namespace of
/// our own: every process in it).
async fn stop_everything(sup: &Supervisor, mut main: Option<&mut Main>) {
    sup.begin_shutdown();
    let termed = sup.signal_commands(Signal::SIGTERM);
    let deadline = Instant::now() + sup.grace_period();
    loop {
        let main_done = main.as_mut().is_none_or(|m| m.has_ended());
        if main_done && sup.commands.count() == 0 {
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = sup.signal_commands(Signal::SIGKILL);
    if let Some(m) = main {
        if !m.has_ended() {
            sup.reaper.signal(m.pid, Signal::SIGKILL, false);
        }
    }
    if sup.pid1 {
        // Everything else in the machine, orphans included. Only as PID 1:
        // elsewhere kill(-1) would reach processes that are not ours.
        let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGKILL);
    } else {
        // A subreaper kills what it holds: its children, orphans included.
        for pid in own_children() {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        }
    }
    // Let every command's task write its end to the audit log.
    let deadline = Instant::now() + sup.drain_period() + Duration::from_secs(1);
    while sup.commands.count() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sup.audit.record(&payload::Stopped {
        terminated: termed,
        killed_after_grace: killed,
    });
}

/// Every child of this process (of any of its threads, since an orphan is
/// handed to the thread that reaps), from /proc.
fn own_children() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .map(Pid::from_raw)
                .collect::<Vec<_>>()
        })
        .collect()
}

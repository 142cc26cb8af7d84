//! `warden machine serve`: one host process for all of an owner's machines
//! whose definitions say `serve`. It holds their host ports at all times
//! (the engine publishes the machine's on ports of its own choosing) and
//! carries each connection there; a connection to a sleeping machine
//! starts it (or thaws it) and is carried once it is ready. It stops or
//! freezes a machine idle for its time (no connection, request, command,
//! hold, nor job due within five minutes), and starts a stopped one a lead
//! time before the runtime's next job. Each wake is an audit line in the
//! machine (`wake`, its cause).
//!
//! `fronts.rs` is what `up` leaves for it in each state folder (and
//! `fronted.rs` how `up` leaves it); `idle.rs` its decisions; `frozen.rs`
//! a freeze and a thaw, and the lock that keeps connections out of them.

pub mod fronted;
pub mod fronts;
mod frozen;
pub mod idle;

pub use frozen::{awake, freeze, frozen, thaw_for, thaw_frozen, Awake, SLEEP_LOCK};

use super::{connect, start, stop};
use crate::host::{engine, LaunchError};
use fronts::{Front, Fronts};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// How often each machine is looked at.
const LOOK: Duration = Duration::from_secs(1);

/// The lock one serve per owner and engine holds, in the state root.
fn lock_path(root: &Path) -> Result<PathBuf, LaunchError> {
    let engine = fronts::engine_key(engine::host()?.engine);
    let short = &crate::host::sha256_hex(engine.as_bytes())[..12];
    Ok(root.join(format!("serve-{short}.lock")))
}

/// Serves until killed; `lead` is how long before a job its machine starts.
pub fn run(lead: Duration) -> Result<(), LaunchError> {
    engine::host()?;
    let root = crate::host::this_host::state_root()?;
    let _held = hold_lock(&root)?;
    if crate::host::scope::systemd_runs() {
        engine::start_in_own_scope();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| LaunchError::new("serve", e.to_string()))?;
    println!(
        "warden machine serve: fronting the machines of {}",
        root.display()
    );
    let engine = fronts::engine_key(engine::host()?.engine);
    runtime.block_on(serve(root, engine, lead));
    Ok(())
}

/// Whether a serve holds the lock of this owner's state root now.
pub fn running() -> bool {
    let Ok(root) = crate::host::this_host::state_root() else {
        return false;
    };
    let Ok(path) = lock_path(&root) else {
        return false;
    };
    match std::fs::File::open(path) {
        Ok(file) => {
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
        }
        Err(_) => false,
    }
}

/// Starts a serve of this owner's in the background when none runs (its
/// output in the state root's `serve.log`); returns its pid, or None when
/// one already ran.
pub fn ensure_running() -> Result<Option<u32>, LaunchError> {
    if running() {
        return Ok(None);
    }
    let root = crate::host::this_host::state_root()?;
    let log_path = root.join("serve.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| LaunchError::io(&log_path, e))?;
    let err = log.try_clone().map_err(|e| LaunchError::io(&log_path, e))?;
    let me = std::env::current_exe().map_err(|e| LaunchError::new("serve", e.to_string()))?;
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new(me)
        .args(["machine", "serve"])
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        // Its own process group: a terminal's Ctrl-C for `up` is not its.
        .process_group(0)
        .spawn()
        .map_err(|e| LaunchError::new("start warden machine serve", e.to_string()))?;
    Ok(Some(child.id()))
}

/// Waits (five seconds at most) until serve holds every front port, so
/// that `up` returns with them answering; a port bound by anyone counts.
pub fn wait_held(ports: &[Front]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let held = |f: &Front| std::net::TcpListener::bind(("127.0.0.1", f.front)).is_err();
    while !ports.iter().all(held) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn hold_lock(root: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, LaunchError> {
    let path = lock_path(root)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LaunchError::io(&path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        LaunchError::new(
            "warden machine serve",
            format!(
                "another one serves this owner's machines already ({})",
                path.display()
            ),
        )
    })
}

/// A machine serve fronts.
struct Served {
    id: String,
    state: PathBuf,
    /// As `up` last left them; the ports never change under a listener.
    fronts: Mutex<Fronts>,
    /// Connections carried now, and when the last one began or ended.
    open: AtomicUsize,
    last: Mutex<Instant>,
    /// One wake at a time.
    waking: tokio::sync::Mutex<()>,
    /// The engine's port for each of the machine's, as last asked.
    engine_ports: Mutex<HashMap<u16, u16>>,
    /// A look is under way (a stop may take seconds): one at a time.
    looking: AtomicBool,
    /// The job (Unix ms) serve last started the machine for.
    started_for: AtomicU64,
    listeners: Vec<tokio::task::JoinHandle<()>>,
}

async fn serve(root: PathBuf, engine: String, lead: Duration) {
    let mut served: HashMap<String, Arc<Served>> = HashMap::new();
    loop {
        refresh(&root, &engine, &mut served);
        for machine in served.values() {
            if machine.looking.swap(true, Ordering::SeqCst) {
                continue;
            }
            let machine = machine.clone();
            tokio::task::spawn_blocking(move || {
                look(&machine, lead);
                machine.looking.store(false, Ordering::SeqCst);
            });
        }
        tokio::time::sleep(LOOK).await;
    }
}

/// Takes in the machines whose `serve.json` appeared or changed, and lets
/// go of the ones whose went away.
fn refresh(root: &Path, engine: &str, served: &mut HashMap<String, Arc<Served>>) {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let id = entry.file_name().to_string_lossy().into_owned();
        let Some(fronts) = fronts::load(&entry.path()).filter(|f| f.engine == engine) else {
            continue;
        };
        seen.push(id.clone());
        if let Some(known) = served.get(&id) {
            let mut kept = known.fronts.lock().unwrap_or_else(|e| e.into_inner());
            if kept.ports == fronts.ports {
                // The idle time or what follows it: taken as it is.
                *kept = fronts;
                continue;
            }
        }
        if let Some(old) = served.remove(&id) {
            old.listeners.iter().for_each(|l| l.abort());
        }
        served.insert(id.clone(), take_in(id, entry.path(), fronts));
    }
    served.retain(|id, s| {
        let keep = seen.contains(id);
        if !keep {
            s.listeners.iter().for_each(|l| l.abort());
        }
        keep
    });
}

/// Binds the machine's front ports and carries what comes to them.
fn take_in(id: String, state: PathBuf, fronts: Fronts) -> Arc<Served> {
    Arc::new_cyclic(|me: &std::sync::Weak<Served>| {
        let listeners = fronts
            .ports
            .iter()
            .map(|front| tokio::spawn(listen(me.clone(), *front)))
            .collect();
        Served {
            id,
            state,
            fronts: Mutex::new(fronts),
            open: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            waking: tokio::sync::Mutex::new(()),
            engine_ports: Mutex::new(HashMap::new()),
            looking: AtomicBool::new(false),
            started_for: AtomicU64::new(0),
            listeners,
        }
    })
}

async fn listen(machine: std::sync::Weak<Served>, front: Front) {
    let listener = match bind(front.front).await {
        Ok(listener) => listener,
        Err(e) => {
            let id = machine.upgrade().map(|m| m.id.clone()).unwrap_or_default();
            eprintln!("serve: {id}: cannot hold 127.0.0.1:{}: {e}", front.front);
            return;
        }
    };
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let Some(machine) = machine.upgrade() else {
            return;
        };
        tokio::spawn(async move { machine.carry(client, front.port).await });
    }
}

/// Binds 127.0.0.1:`port`, trying for up to five seconds: a listener of
/// this port's that was let go may not be closed yet.
async fn bind(port: u16) -> std::io::Result<TcpListener> {
    let mut tries = 0;
    loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            bound => return bound,
        }
    }
}

impl Served {
    /// Carries one connection to the machine's `port`, waking it first.
    async fn carry(self: Arc<Self>, mut client: TcpStream, port: u16) {
        self.touch(1);
        match self.reach(port).await {
            Ok(mut machine) => {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut machine).await;
            }
            Err(e) => eprintln!("serve: {}: port {port}: {e}", self.id),
        }
        self.touch(-1);
    }

    /// A connection to the machine's `port`: where the engine publishes it
    /// now, after waking the machine when it sleeps.
    async fn reach(self: &Arc<Self>, port: u16) -> Result<TcpStream, LaunchError> {
        if !self.paused() {
            if let Some(stream) = self.connect_published(port).await {
                return Ok(stream);
            }
        }
        let _one = self.waking.lock().await;
        // Another connection may have woken it while this one waited.
        if !self.paused() {
            if let Some(stream) = self.connect_published(port).await {
                return Ok(stream);
            }
        }
        let me = self.clone();
        let started = tokio::task::spawn_blocking(move || me.wake("port"))
            .await
            .map_err(|e| LaunchError::new("wake", e.to_string()))??;
        // A start may publish the port elsewhere; a thaw leaves it.
        if started {
            self.engine_ports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        }
        self.connect_published(port)
            .await
            .ok_or_else(|| LaunchError::sentence("the machine is up, but its port does not answer"))
    }

    /// A connection where the engine publishes `port`, asking the engine
    /// where that is when it is not known yet.
    async fn connect_published(&self, port: u16) -> Option<TcpStream> {
        let known = self
            .engine_ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&port)
            .copied();
        let engine_port = match known {
            Some(p) => p,
            None => {
                let name = crate::host::state::container(&self.id);
                let asked = tokio::task::spawn_blocking(move || engine_port(&name, port))
                    .await
                    .ok()??;
                self.engine_ports
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(port, asked);
                asked
            }
        };
        TcpStream::connect(("127.0.0.1", engine_port)).await.ok()
    }

    /// Starts or thaws the machine for `cause`, and says so in its audit
    /// log; true when it was started (not thawed). Blocking.
    fn wake(&self, cause: &str) -> Result<bool, LaunchError> {
        let thawed = thaw_frozen(&self.id, &self.state)?;
        if !thawed && crate::host::vm::is_vm(&self.id) {
            return Err(LaunchError::new(
                format!("machine {}", self.id),
                "a VM that stopped is made again by `warden machine up`",
            ));
        }
        if !thawed {
            start(&self.id)?;
        }
        note_wake(&self.id, cause);
        self.retell_job();
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Ok(!thawed)
    }

    /// A started machine's warden is told the job it had before its stop
    /// (its runtime may not have said it again yet), so that neither its
    /// idle stop nor serve's stops it while the job is due.
    fn retell_job(&self) {
        let now = crate::shared::idle::now_ms();
        let Some(job) = fronts::next_job(&self.state).filter(|&j| j >= now) else {
            return;
        };
        if let Err(e) = connect(&self.id, None).and_then(|mut c| {
            c.next_job(job)
                .map_err(|e| LaunchError::sentence(e.to_string()))
        }) {
            eprintln!(
                "serve: {}: its next job at {job} not told again: {e}",
                self.id
            );
        }
    }

    /// Whether the machine is frozen: its marker, which a thaw by its door
    /// or a VM's relay (other processes) takes away.
    fn paused(&self) -> bool {
        self.state.join(crate::host::state::PAUSED).exists()
    }

    /// A connection began (+1) or ended (-1).
    fn touch(&self, by: isize) {
        match by {
            1 => self.open.fetch_add(1, Ordering::SeqCst),
            _ => self.open.fetch_sub(1, Ordering::SeqCst),
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// One look at a machine (blocking): a running one is put to sleep when
/// it is due, its next job kept; a sleeping one is woken for its job.
fn look(m: &Served, lead: Duration) {
    let now = crate::shared::idle::now_ms();
    let status = match m.paused() {
        // A frozen warden answers nothing: not asked.
        true => None,
        false => connect(&m.id, None).ok().and_then(|mut c| c.status().ok()),
    };
    let Some(status) = status else {
        let job = fronts::next_job(&m.state);
        let started_for = Some(m.started_for.load(Ordering::SeqCst));
        if let Some(job) =
            job.filter(|&j| idle::job_start_due(j, lead.as_millis() as u64, now, started_for))
        {
            m.started_for.store(job, Ordering::SeqCst);
            if let Err(e) = m.wake("job") {
                eprintln!("serve: {}: starting it for its job at {job}: {e}", m.id);
            }
        }
        return;
    };
    let activity = status.activity.unwrap_or_default();
    if let Err(e) = fronts::keep_next_job(&m.state, activity.next_job_at_ms.unwrap_or(0)) {
        eprintln!(
            "serve: {}: its next job not kept ({e}): a stop forgets it",
            m.id
        );
    }
    let (idle_s, how) = {
        let fronts = m.fronts.lock().unwrap_or_else(|e| e.into_inner());
        (fronts.idle_s, fronts.idle)
    };
    let Some(limit_s) = idle_s else {
        return;
    };
    let seen = idle::Seen {
        warden_idle_ms: activity.idle_ms,
        running: activity.running.unwrap_or(status.running.len()),
        held_until_ms: activity.held_until_ms,
        next_job_ms: activity.next_job_at_ms,
        open: m.open.load(Ordering::SeqCst),
        carried_idle_ms: m
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_millis() as u64,
    };
    if idle::sleep_due(seen, limit_s * 1000, now) {
        let idle_ms = seen.warden_idle_ms.min(seen.carried_idle_ms);
        match sleep(m, how, idle_ms) {
            Ok(how) => println!("serve: {}: {how} after {} s idle", m.id, idle_ms / 1000),
            Err(e) => eprintln!("serve: {}: could not put it to sleep: {e}", m.id),
        }
    }
}

/// Stops or freezes the machine, as its definition says.
fn sleep(
    m: &Served,
    how: crate::host::definition::Idle,
    idle_ms: u64,
) -> Result<&'static str, LaunchError> {
    match how {
        crate::host::definition::Idle::Stop => stop(&m.id).map(|()| "stopped"),
        crate::host::definition::Idle::Pause => freeze(&m.id, &m.state, idle_ms).map(|()| "paused"),
    }
}

/// The machine's audit log says it was woken, and why; a warden too old
/// to hear it is let be.
pub fn note_wake(id: &str, cause: &str) {
    let noted = connect(id, None).and_then(|mut client| {
        client
            .wake(cause)
            .map_err(|e| LaunchError::sentence(e.to_string()))
    });
    if let Err(e) = noted {
        eprintln!("warden: machine {id}: its wake ({cause}) is not in its audit log: {e}");
    }
}

/// Where the engine publishes the machine's `port` on the host now.
fn engine_port(container: &str, port: u16) -> Option<u16> {
    let out = engine::run("port", &["port", container, &format!("{port}/tcp")]).ok()?;
    out.lines().next()?.rsplit(':').next()?.trim().parse().ok()
}

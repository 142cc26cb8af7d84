//! The firewall layer as the supervisor proves it: warden's nftables
//! table where it holds, else warden's connect gate, opened once at boot
//! and proven on every status after.

use super::Supervisor;
use crate::guest::audit::payload;
use crate::guest::confine::runtime_spawner::RuntimeSpawner;
use crate::guest::net::connect_gate::{self, Listener, OpenError, Refusal};
use crate::guest::net::{Gate, ListensError, RuntimeGate};
use crate::wire::LayerState;
use std::sync::Arc;

/// Refusals waiting for the audit thread: past this, the gate waits for
/// it (slowing the refused caller, losing no line).
const REFUSALS_QUEUED: usize = 1024;

/// A refused caller's command, as its id and argv digest.
type Named = Option<(u64, String)>;

impl Supervisor {
    /// The firewall layer, proven now (see the module's comment).
    pub(super) fn firewall_layer(
        self: &Arc<Self>,
        landlock_tcp: bool,
        seccomp_sockets: bool,
    ) -> LayerState {
        let knock = |plan| self.run_net_probe(plan);
        if let Some(gate) = self.network.gate() {
            return self.network.prove_gate(gate, knock);
        }
        let (firewall, why_not) = self.network.prove((landlock_tcp, seccomp_sockets), knock);
        if !self.network.first_proof() {
            return firewall;
        }
        if !self.network.wants_gate(&firewall) {
            self.guard_listens();
            return firewall;
        }
        let why_not = why_not.unwrap_or_default();
        let opened = match landlock_tcp {
            true => self.open_gate(why_not),
            false => Err(OpenError::NoLandlockTcp),
        };
        match opened {
            Ok(()) => match self.network.gate() {
                Some(gate) => self
                    .network
                    .prove_gate(gate, |plan| self.run_net_probe(plan)),
                None => firewall,
            },
            Err(e) => {
                crate::say!("the connect gate cannot stand in for the firewall: {e}");
                self.guard_listens();
                let mut firewall = firewall;
                firewall.detail += &format!("; warden's connect gate cannot stand in: {e}");
                firewall
            }
        }
    }

    /// The runtime's network, where `runtime_hosts` limits it: warden's
    /// table must hold it (the connect gate covers commands, not the main
    /// process), proven by a probe as the runtime, forked as the main
    /// process is (outside the commands' filters).
    pub(super) fn runtime_network_layer(&self) -> Option<LayerState> {
        let hosts = self.network.policy.runtime_hosts.as_ref()?;
        if let Some(gate) = self.network.gate() {
            let runtime_gate = match &gate.runtime {
                Some(Ok(runtime_gate)) => runtime_gate,
                Some(Err(e)) => return Some(crate::guest::confine::state(
                    "runtime_network",
                    true,
                    false,
                    format!("nftables cannot hold here, and warden's connect gate cannot open for the runtime ({e}): its connections are not limited to the proxy"),
                )),
                None => return None,
            };
            let knock = |plan| {
                let confine = self.confinement.for_gated_runtime(Some(plan))?;
                self.spawn_probe_as("warden-runtime-probe", confine, &self.runtime)
            };
            return Some(
                self.network
                    .prove_runtime_gated(hosts.len(), runtime_gate, knock),
            );
        }
        let knock = |plan| {
            let confine = self.confinement.for_runtime_network_probe(plan);
            self.spawn_probe_as("warden-runtime-probe", confine, &self.runtime)
        };
        Some(
            self.network
                .prove_runtime(hosts.len(), self.runtime.uid, knock),
        )
    }

    /// Opens the connect gate: commands lose their own TCP connects to
    /// Landlock first, then the spawner thread takes the gate's filter, and
    /// the gate's thread answers its listener.
    fn open_gate(self: &Arc<Self>, why_not_firewall: String) -> Result<(), OpenError> {
        let program = crate::guest::confine::seccomp::gate_program().map_err(OpenError::Filter)?;
        let on_refusal = self.gate_recorder(None)?;
        self.confinement.set_gated(true);
        let listener = match self.spawner.install_gate(program) {
            Ok(fd) => Self::listener(fd),
            Err(e) => {
                self.confinement.set_gated(false);
                return Err(OpenError::Spawner(e));
            }
        };
        let settings = connect_gate::Settings {
            proxy_port: self.network.policy.proxy_port,
            uid: self.shell.uid,
            gid: self.shell.gid,
            listen_ports: Vec::new(),
        };
        // From here on commands carry the filter: without the gate's
        // thread, their connects fail (closed, not open).
        let ledger =
            connect_gate::start(listener, settings, on_refusal).map_err(OpenError::Closed)?;
        self.network.set_listens(Ok(
            "warden's connect gate takes every listen(2): refused on a network socket".into(),
        ));
        crate::say!(
            "the firewall does not hold ({why_not_firewall}): warden's connect gate stands in"
        );
        let runtime = self.network.policy.runtime_hosts.is_some().then(|| {
            let opened = self.open_runtime_gate();
            if let Err(e) = &opened {
                crate::say!("warden's connect gate cannot open for the runtime: {e}");
            }
            opened
        });
        self.network.set_gate(Gate {
            ledger,
            why_not_firewall,
            runtime,
        });
        Ok(())
    }

    /// Where the gate does not stand in: commands' listen(2) calls go to a
    /// gate thread of their own, which refuses them on network sockets
    /// (see `net::connect_gate::listen`). Said, not fatal, if it cannot
    /// start: then a command's listen fails (ENOSYS) or, with no filter,
    /// is Landlock's and the firewall's to hold.
    fn guard_listens(self: &Arc<Self>) {
        if std::process::id() != 1 {
            let why = ListensError::NotPid1;
            crate::say!("{why}");
            self.network.set_listens(Err(why));
            return;
        }
        let guarded = crate::guest::confine::seccomp::listen_program()
            .map_err(OpenError::Filter)
            .and_then(|program| {
                let on_refusal = self.gate_recorder(None)?;
                let installed = self.spawner.install_gate(program);
                let listener = Self::listener(installed.map_err(OpenError::Spawner)?);
                let settings = connect_gate::Settings {
                    proxy_port: self.network.policy.proxy_port,
                    uid: self.shell.uid,
                    gid: self.shell.gid,
                    listen_ports: Vec::new(),
                };
                Ok(connect_gate::start(listener, settings, on_refusal)?)
            });
        let held = match guarded {
            Ok(_) => Ok("every listen(2) of a command goes to warden: refused on a network socket, done by warden on a unix one".into()),
            Err(e) => {
                let why = ListensError::Guard(e);
                crate::say!("{why}");
                Err(why)
            }
        };
        self.network.set_listens(held);
    }

    /// The gate's listener; said when each connect must pay a wake-up on
    /// another CPU each way (kernels before 6.6).
    fn listener(fd: std::os::fd::OwnedFd) -> Listener {
        let listener = Listener::new(fd);
        if !listener.sync_wake_up() {
            crate::say!("the kernel has no synchronous wake-ups for seccomp's notifications (Linux 6.6): each gated connect waits for another CPU to wake");
        }
        listener
    }

    /// The runtime's gate, where `runtime_hosts` limits it: a thread to
    /// fork its processes from, carrying the filter that sends their
    /// connects to a gate thread that acts with the runtime's ids.
    fn open_runtime_gate(self: &Arc<Self>) -> Result<RuntimeGate, OpenError> {
        // Landlock's refusal, which the gate relies on, must be possible.
        crate::guest::confine::landlock::no_tcp_connect().map_err(OpenError::Landlock)?;
        let program =
            crate::guest::confine::seccomp::runtime_gate_program().map_err(OpenError::Filter)?;
        let (spawner, listener) = RuntimeSpawner::start(program).map_err(OpenError::Spawner)?;
        let settings = connect_gate::Settings {
            proxy_port: self.network.policy.proxy_port,
            uid: self.runtime.uid,
            gid: self.runtime.gid,
            listen_ports: self.config.runtime_ports.clone(),
        };
        let on_refusal = self.gate_recorder(Some("runtime"))?;
        let ledger = connect_gate::start(Self::listener(listener), settings, on_refusal)?;
        Ok(RuntimeGate { spawner, ledger })
    }

    /// Where the gate's refusals go: a thread of their own writes them to
    /// the audit log (the gate's thread reads commands' memory as shell,
    /// and must not open audit files so).
    /// `user`: whose refusals they are, when not shell's.
    fn gate_recorder(
        self: &Arc<Self>,
        user: Option<&'static str>,
    ) -> Result<connect_gate::OnRefusal, OpenError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Refusal, Named)>(REFUSALS_QUEUED);
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("connect-gate-audit".into())
            .spawn(move || {
                for (refusal, command) in rx {
                    match weak.upgrade() {
                        Some(sup) => sup.record_gate_refusal(refusal, command, user),
                        None => return,
                    }
                }
            })
            .map_err(OpenError::AuditThread)?;
        let weak = Arc::downgrade(self);
        // Called by the gate while the caller waits: its command is named
        // now, while it surely runs; the line is written by the thread.
        Ok(Arc::new(move |refusal: Refusal| {
            let command = weak
                .upgrade()
                .and_then(|sup| sup.command_of(refusal.status.as_deref()?));
            let _ = tx.send((refusal, command));
        }))
    }

    /// The command (id, argv digest) whose tag a /proc status carries.
    fn command_of(&self, status: &[u8]) -> Named {
        let tags = crate::guest::process::lifetime::TAGS;
        let tag = crate::guest::net::origin::tag_of(status, tags)?;
        self.commands.digest_of_tag(tag)
    }

    fn record_gate_refusal(&self, refusal: Refusal, command: Named, user: Option<&str>) {
        let (command, argv_sha256) = command.unzip();
        let line = payload::GateRefusal {
            listen: refusal.listen,
            pid: refusal.tid,
            reason: refusal.reason,
            user: user.map(str::to_string),
            address: refusal.address.map(|a| a.to_string()),
            command,
            argv_sha256,
        };
        // Per command, and the runtime's always whole (see `source_of`).
        self.audit
            .record_refusal_by("connect_gate", self.runtime.uid, &line);
    }
}

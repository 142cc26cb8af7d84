//! The probe: every layer applied in a child as shell (or as the
//! runtime), which tests each from inside; what it finds is what `status`
//! and the audit log say holds. Beside it, warden's own place in the OOM
//! killer's line, which the probe proves for commands.

use super::launches::{c_path, identity};
use super::Supervisor;
use crate::guest::accounts::users::Account;
use crate::guest::confine::probe::Probe;
use crate::guest::confine::spawn::{Grouping, Launch, Stdio, Workdir};
use crate::guest::confine::ProbeError;
use crate::wire::{LayerState, Limits};
use std::os::fd::OwnedFd;
use std::sync::Arc;

impl Supervisor {
    /// Applies every layer in a child as shell and has it test each from
    /// inside; records and returns what holds.
    pub fn probe(self: &Arc<Self>) -> Vec<LayerState> {
        // One probe at a time: each makes the cgroup `probe` anew (removing
        // one left there), so a second at once took the first's cgroup away
        // under its child, and the failed probe, recorded, refused every
        // command until the next status.
        static PROBING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = PROBING.lock().unwrap_or_else(|e| e.into_inner());
        let found = self.run_probe();
        let landlock_tcp = self.confinement.coverage.tcp
            && found.as_ref().is_ok_and(|p| p.has(Probe::LANDLOCK_TCP));
        // The filter carries the socket rules: proven installed by the probe.
        let seccomp_sockets = found.as_ref().is_ok_and(|p| p.has(Probe::SECCOMP));
        let firewall = self.firewall_layer(landlock_tcp, seccomp_sockets);
        fn space<E: std::fmt::Display>(layer: &str, found: &Result<String, E>) -> LayerState {
            let (holds, detail) = match found {
                Ok(d) => (true, d.clone()),
                Err(e) => (false, e.to_string()),
            };
            crate::guest::confine::state(layer, false, holds, detail)
        }
        let commands_first = found.as_ref().is_ok_and(|p| p.has(Probe::OOM_FIRST));
        let more = vec![
            firewall,
            space("shell_space", &self.shell_space),
            space("link_protections", &self.link_protections),
            space("listen", &self.network.listens()),
            oom_order(commands_first, &self.oom_order),
        ];
        let more = more
            .into_iter()
            .chain(self.runtime_network_layer())
            .collect();
        self.confinement.record(found, more)
    }

    /// The firewall probe: a child as shell knocking where `plan` says
    /// (without Landlock, but under the connect gate).
    pub(super) fn run_net_probe(
        &self,
        plan: crate::guest::confine::probe::NetProbe,
    ) -> Result<Probe, ProbeError> {
        let confine = self.confinement.for_network_probe(plan)?;
        self.spawn_probe("warden-net-probe", confine)
    }

    fn run_probe(&self) -> Result<Probe, ProbeError> {
        let mut confine = self
            .confinement
            .for_command(None, &self.confinement.limits(), true)?;
        // A cgroup that allows one process: the probe's fork must fail.
        let one = Limits {
            processes: Some(1),
            ..Default::default()
        };
        let cgroup = self.confinement.probe_cgroup(&one)?;
        let cgroup = cgroup.map(|(cgroup, procs)| {
            confine.join_cgroup(procs);
            cgroup
        });
        let found = self.spawn_probe("warden-probe", confine);
        if let Some(cgroup) = cgroup {
            cgroup.remove();
        }
        found
    }

    fn spawn_probe(
        &self,
        name: &str,
        confine: crate::guest::confine::spawn::Confine,
    ) -> Result<Probe, ProbeError> {
        self.spawn_probe_as(name, confine, &self.shell)
    }

    /// A probe child as `who`: forked by the spawner thread (so carrying
    /// the commands' filters) for shell, as the main process is for the
    /// runtime.
    pub(super) fn spawn_probe_as(
        &self,
        name: &str,
        confine: crate::guest::confine::spawn::Confine,
        who: &Account,
    ) -> Result<Probe, ProbeError> {
        let home = c_path(&who.home)?;
        let launch = Launch::new(
            &[name.to_string()],
            &[],
            "",
            identity(who),
            Grouping::Session,
            Workdir::At(home),
            Some(confine),
        )?;
        let null = || {
            std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map(OwnedFd::from)
                .map_err(ProbeError::Stdio)
        };
        let stdio = Stdio {
            stdin: null()?,
            stdout: null()?,
            stderr: null()?,
            terminal: false,
        };
        let spawned = match who.uid == self.shell.uid {
            true => self.spawner.spawn_blocking(launch, stdio, true),
            false => self.spawn_runtime(launch, stdio, true),
        };
        match spawned {
            Ok(spawned) => {
                // Gone before the answer: a probe is never seen among
                // shell's processes (status lists them right after).
                let _ = spawned.exit.blocking_recv();
                spawned.probe.ok_or(ProbeError::RanPast)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Puts warden last in line for the OOM killer (and the runtime, which
/// inherits it); commands put themselves first (`spawn`). Lowering needs
/// CAP_SYS_RESOURCE, which a container may not grant: then it says so.
/// Asks for warden's (and so the runtime's) place last in the OOM
/// killer's line; what it got.
pub(super) fn last_for_the_oom_killer() -> Result<String, OomScoreError> {
    match std::fs::write("/proc/self/oom_score_adj", "-1000") {
        Ok(()) => Ok("warden and the runtime last (-1000)".into()),
        Err(source) => {
            let now = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap_or_default();
            Err(OomScoreError {
                now: now.trim().to_string(),
                source,
            })
        }
    }
}

/// warden's oom_score_adj could not be lowered: where it stays, and why.
#[derive(Debug, thiserror::Error)]
#[error("warden and the runtime stay at {now} (lowering needs CAP_SYS_RESOURCE: {source})")]
pub struct OomScoreError {
    now: String,
    source: std::io::Error,
}

/// The OOM order as proven: shell's commands first only when the probe,
/// set up as a command is, read its own oom_score_adj back as 1000.
fn oom_order(commands_first: bool, warden: &Result<String, OomScoreError>) -> LayerState {
    let commands = match commands_first {
        true => "shell's commands first (oom_score_adj 1000, read back by the probe)",
        false => "shell's commands NOT first: the probe did not read oom_score_adj 1000",
    };
    let (warden_last, said) = match warden {
        Ok(d) => (true, d.clone()),
        Err(e) => (false, e.to_string()),
    };
    crate::guest::confine::state(
        "oom_order",
        false,
        commands_first && warden_last,
        format!("{commands}; {said}"),
    )
}

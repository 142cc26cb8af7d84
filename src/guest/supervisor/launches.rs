//! How warden launches the runtime's processes: the main process (its
//! environment, its confinement where the connect gate decides its
//! network) and the runtime's probe, forked where they carry the gate's
//! filter.

use super::Supervisor;
use crate::guest::accounts::layout;
use crate::guest::accounts::users::Account;
use crate::guest::confine::spawn::{Grouping, Identity, Launch, LaunchError, Workdir};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

impl Supervisor {
    /// Forks a process of the runtime's (the main process, its probe):
    /// from the runtime's spawner thread where warden's connect gate
    /// decides its network, so that it carries the gate's filter; else
    /// from the calling thread.
    pub fn spawn_runtime(
        &self,
        launch: Launch,
        stdio: crate::guest::confine::spawn::Stdio,
        kill_group: bool,
    ) -> Result<crate::guest::confine::spawn::Spawned, crate::guest::confine::spawn::SpawnError>
    {
        use crate::guest::confine::spawn::{spawn, SpawnError};
        match self.network.gate().and_then(|g| g.runtime_gate()) {
            Some(gate) => {
                let reaper = self.reaper.clone();
                gate.spawner
                    .run(move || spawn(&launch, stdio, &reaper, kill_group))
                    .map_err(|_| SpawnError::SpawnerGone)?
            }
            None => spawn(&launch, stdio, &self.reaper, kill_group),
        }
    }

    /// The main process: warden's own environment (the machine's, as a
    /// container engine set it) and the config's `main_env` (a VM's), with
    /// the runtime's identity variables.
    pub fn main_launch(&self, argv: &[String]) -> Result<Launch, LaunchError> {
        let mut env: BTreeMap<String, String> = std::env::vars().collect();
        env.extend(self.config.main_env.clone());
        env.entry("PATH".into())
            .or_insert_with(|| self.config.path.clone());
        // The runtime's keys, when the host handed them over: the
        // runtime's own, like its `.env` (but never its HOME or name).
        env.extend(self.keys.pairs());
        // The machine's authority, for the hosts the proxy opens.
        env.extend(self.network.trust_env());
        // Its model providers' SDKs, pointed at their metered endpoints.
        let port = self.network.policy.proxy_port;
        for provider in &self.network.policy.providers {
            let (name, url) = provider.base_url(port);
            env.insert(name.into(), url);
        }
        if self.network.policy.runtime_hosts.is_some() || self.config.egress_vsock_port.is_some() {
            // Its traffic goes through the proxy alone (its own list, or
            // a VM's only way out): its tools are pointed at it (Node 24
            // and later honour the variables for fetch with
            // NODE_USE_ENV_PROXY).
            env.extend(self.network.env.iter().cloned());
            env.insert("NODE_USE_ENV_PROXY".into(), "1".into());
        }
        if let Some(path) = env.get_mut("PATH") {
            *path = self.runtime_path(path);
        }
        env.insert("HOME".into(), self.runtime.home.display().to_string());
        env.insert("USER".into(), self.runtime.name.clone());
        env.insert("LOGNAME".into(), self.runtime.name.clone());
        let env: Vec<(String, String)> = env.into_iter().collect();
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        // Where the gate decides its network, Landlock refuses it every
        // TCP connect of its own: without that, no start.
        let confine = match self.network.gate().and_then(|g| g.runtime_gate()) {
            Some(_) => Some(
                self.confinement
                    .for_gated_runtime(None)
                    .map_err(LaunchError::Confinement)?,
            ),
            None => None,
        };
        Launch::new(
            argv,
            &env,
            &path,
            identity(&self.runtime),
            Grouping::ProcessGroup,
            Workdir::At(c_path(&self.runtime.home)?),
            confine,
        )
    }

    /// `path` without the folders shell writes (`layout::shell_writes`):
    /// the runtime would run, keys in hand, what shell put there. Each one
    /// left out is said.
    fn runtime_path(&self, path: &str) -> String {
        let kept: Vec<&str> = path
            .split(':')
            .filter(|dir| {
                let theirs = layout::shell_writes(&self.paths, Path::new(dir));
                if theirs {
                    crate::say!("the runtime's PATH: {dir} left out (shell writes there)");
                }
                !theirs
            })
            .collect();
        kept.join(":")
    }
}

/// The ids a process of `account` runs with.
pub fn identity(account: &Account) -> Identity {
    Identity {
        uid: account.uid,
        gid: account.gid,
        groups: account.groups.clone(),
    }
}

/// `path` as the C string a launch takes.
pub fn c_path(path: &Path) -> Result<CString, LaunchError> {
    Ok(CString::new(path.as_os_str().as_bytes())?)
}

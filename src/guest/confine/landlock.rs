//! Landlock: what a command may reach in the filesystem and over TCP, and
//! whom it may signal. The paths the policy names are opened once at boot;
//! each command gets a fresh ruleset (with its own workspace folder), built
//! in warden and enforced by the child just before exec.

use crate::shared::policy::LandlockPolicy;
use enumflags2::BitFlags;
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The newest Landlock ABI warden asks for (and is tested with).
const WANTED: ABI = ABI::V7;

/// Why a command's ruleset (or the runtime's) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("the Landlock rules were not opened")]
    NotOpened,
    /// The kernel or the crate refused a step of building it.
    #[error("{0}")]
    Ruleset(#[source] landlock::RulesetError),
    /// The ruleset built once, for every command without a folder, could
    /// not be shared with one more.
    #[error("{0}")]
    Clone(#[source] std::io::Error),
    /// The ruleset built once failed: every command that would share it
    /// gets the same error.
    #[error(transparent)]
    Shared(Arc<LandlockError>),
    #[error("Landlock's TCP rules need ABI 4 (Linux 6.7); the kernel has {abi}")]
    NoTcpRules { abi: i32 },
    #[error("Landlock made no ruleset")]
    NoRuleset,
}

/// The Landlock ABI the running kernel offers (0: none).
pub fn kernel_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and the VERSION flag the syscall only
    // returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    abi.max(0) as i32
}

/// What the kernel will enforce of the policy, measured from its ABI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    pub abi: i32,
    pub filesystem: bool,
    pub tcp: bool,
    pub scopes: bool,
    /// What the policy asks for and the kernel cannot do, in words.
    pub missing: Vec<String>,
}

pub fn coverage(abi: i32, policy: &LandlockPolicy) -> Coverage {
    let mut missing = Vec::new();
    if abi < 1 {
        missing.push("filesystem rules (no Landlock in this kernel)".to_string());
    }
    let wants_tcp = true; // TCP is always handled: no port unless listed.
    if wants_tcp && abi < 4 {
        missing.push(format!(
            "TCP connect/bind rules (need ABI 4, kernel has {abi})"
        ));
    }
    if policy.scopes && abi < 6 {
        missing.push(format!(
            "signal and abstract-socket scopes (need ABI 6, kernel has {abi})"
        ));
    }
    Coverage {
        abi,
        filesystem: abi >= 1,
        tcp: abi >= 4,
        scopes: policy.scopes && abi >= 6,
        missing,
    }
}

/// One path opened at boot, with the rights it grants.
struct Grant {
    fd: PathFd,
    access: BitFlags<AccessFs>,
}

/// The policy's paths, opened once.
pub struct StaticRules {
    grants: Vec<Grant>,
    tcp_connect: Vec<u16>,
    tcp_bind: Vec<u16>,
    scopes: bool,
    /// Paths the policy names that do not exist here (skipped).
    pub skipped: Vec<PathBuf>,
    /// The ruleset of a command without a folder, built once: a ruleset
    /// is never changed after it is built, so every such command can be
    /// restricted by the same one.
    without_folder: Result<Option<OwnedFd>, Arc<LandlockError>>,
    /// The same under the connect gate, built when first asked for.
    without_folder_gated: OnceLock<Result<Option<OwnedFd>, Arc<LandlockError>>>,
}

fn read_exec() -> BitFlags<AccessFs> {
    AccessFs::from_read(WANTED)
}

fn read_only() -> BitFlags<AccessFs> {
    AccessFs::from_read(WANTED) & !AccessFs::Execute
}

fn read_write() -> BitFlags<AccessFs> {
    AccessFs::from_all(WANTED)
}

impl StaticRules {
    /// Rules not yet opened: every ruleset is refused until `open`.
    pub fn unopened(policy: &LandlockPolicy) -> StaticRules {
        StaticRules {
            grants: Vec::new(),
            tcp_connect: policy.tcp_connect.clone(),
            tcp_bind: policy.tcp_bind.clone(),
            scopes: policy.scopes,
            skipped: Vec::new(),
            without_folder: Err(Arc::new(LandlockError::NotOpened)),
            without_folder_gated: OnceLock::new(),
        }
    }

    /// Opens the policy's paths plus warden's own grants: `routines` read
    /// only, shell's home read-write. Each is opened as `view` shows it:
    /// as commands see it in their own mount namespace, where /tmp and
    /// /dev/shm are shell's (a rule on a folder a mount hides would never
    /// be reached: Landlock ignores hidden mount points).
    pub fn open(
        policy: &LandlockPolicy,
        routines: &Path,
        shell_home: &Path,
        view: &dyn Fn(&Path) -> PathBuf,
    ) -> StaticRules {
        let mut grants = Vec::new();
        let mut skipped = Vec::new();
        let lists = [
            (&policy.read_exec, read_exec()),
            (&policy.read_only, read_only()),
            (&policy.read_write, read_write()),
        ];
        let own = [
            (routines.to_path_buf(), read_only()),
            (shell_home.to_path_buf(), read_write()),
        ];
        let all = lists
            .iter()
            .flat_map(|(paths, access)| paths.iter().map(move |p| (p.clone(), *access)))
            .chain(own);
        for (path, access) in all {
            match grant(&view(&path), access) {
                Some(g) => grants.push(g),
                None => skipped.push(path),
            }
        }
        let mut rules = StaticRules {
            grants,
            tcp_connect: policy.tcp_connect.clone(),
            tcp_bind: policy.tcp_bind.clone(),
            scopes: policy.scopes,
            skipped,
            without_folder: Ok(None),
            without_folder_gated: OnceLock::new(),
        };
        rules.without_folder = rules.build(None, false).map_err(Arc::new);
        rules
    }

    /// The ruleset for one command: read-write on `folder` if it has one.
    /// None when the kernel has no Landlock at all. `gated`: under the
    /// connect gate, which connects to the proxy for commands, so that no
    /// TCP connect of their own is granted.
    pub fn ruleset(
        &self,
        folder: Option<&OwnedFd>,
        gated: bool,
    ) -> Result<Option<OwnedFd>, LandlockError> {
        if folder.is_some() {
            return self.build(folder, gated);
        }
        let shared = match gated {
            true => self
                .without_folder_gated
                .get_or_init(|| match &self.without_folder {
                    Ok(_) => self.build(None, true).map_err(Arc::new),
                    Err(e) => Err(e.clone()),
                }),
            false => &self.without_folder,
        };
        match shared {
            Ok(shared) => shared
                .as_ref()
                .map(|fd| fd.try_clone().map_err(LandlockError::Clone))
                .transpose(),
            Err(e) => Err(LandlockError::Shared(e.clone())),
        }
    }

    fn build(
        &self,
        folder: Option<&OwnedFd>,
        gated: bool,
    ) -> Result<Option<OwnedFd>, LandlockError> {
        let e = LandlockError::Ruleset;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(WANTED))
            .map_err(e)?
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(e)?;
        if self.scopes {
            ruleset = ruleset.scope(Scope::from_all(WANTED)).map_err(e)?;
        }
        let mut created = ruleset.create().map_err(e)?;
        for g in &self.grants {
            created = created
                .add_rule(PathBeneath::new(g.fd.as_fd(), g.access))
                .map_err(e)?;
        }
        if let Some(folder) = folder {
            created = created
                .add_rule(PathBeneath::new(folder.as_fd(), read_write()))
                .map_err(e)?;
        }
        let connect: &[u16] = if gated { &[] } else { &self.tcp_connect };
        for port in connect {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(e)?;
        }
        for port in &self.tcp_bind {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::BindTcp))
                .map_err(e)?;
        }
        Ok(created.into())
    }
}

/// A ruleset that handles TCP connect alone and grants none: the
/// runtime's own TCP connects refused, where warden's connect gate makes
/// them for it. Nothing else of the runtime is restricted.
pub fn no_tcp_connect() -> Result<OwnedFd, LandlockError> {
    let abi = kernel_abi();
    if abi < 4 {
        return Err(LandlockError::NoTcpRules { abi });
    }
    let e = LandlockError::Ruleset;
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .map_err(e)?
        .create()
        .map_err(e)?;
    Option::<OwnedFd>::from(created).ok_or(LandlockError::NoRuleset)
}

fn grant(path: &Path, access: BitFlags<AccessFs>) -> Option<Grant> {
    let meta = std::fs::metadata(path).ok()?;
    // A file can only carry file rights.
    let access = if meta.is_dir() {
        access
    } else {
        access & AccessFs::from_file(WANTED)
    };
    Some(Grant {
        fd: PathFd::new(path).ok()?,
        access,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::policy::Policy;

    #[test]
    fn coverage_table() {
        let policy = Policy::built_in().landlock;
        let no_scopes = LandlockPolicy {
            scopes: false,
            ..policy.clone()
        };
        let cases = [
            (0, &policy, (false, false, false), 3),
            (3, &policy, (true, false, false), 2),
            (4, &policy, (true, true, false), 1),
            (6, &policy, (true, true, true), 0),
            (7, &policy, (true, true, true), 0),
            (5, &no_scopes, (true, true, false), 0),
        ];
        for (abi, p, (fs, tcp, scopes), missing) in cases {
            let c = coverage(abi, p);
            assert_eq!(
                (c.filesystem, c.tcp, c.scopes, c.missing.len()),
                (fs, tcp, scopes, missing),
                "abi {abi}"
            );
        }
    }
}

//! What a kind of machine must do for the launcher: a container under
//! podman or Docker (`container.rs`), or a micro-VM under QEMU (`vm/`).
//! `machine.rs` does what both share (the definition, the keys, the state
//! folder, the image, undoing a failed `up`) and asks the machine's backend
//! for the rest; the backends know nothing of each other.

use super::definition::Definition;
use super::error::LaunchError;
use super::image::Image;
use super::this_host::Host;
use crate::wire::client::Client;
use crate::wire::Request;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What `up` has ready when it hands over to the backend.
pub struct Prepared<'a> {
    pub def: &'a Definition,
    pub host: &'a Host,
    /// The machine's state folder.
    pub state: PathBuf,
    pub image: Image,
    /// The engine's id of that image.
    pub image_id: String,
    /// What the container kind's one inspect said of its container, its
    /// volumes and its image (asked with the image's id, one call); empty
    /// for the other kinds, or when the record made the inspect needless.
    pub looked: super::engine::Looked,
    /// The last `up`'s record of the machine's container, when the
    /// machine is unchanged since (then neither is asked of the engine).
    pub kept: Option<super::kept::Record>,
    /// Digests everything the machine is made of except the runtime's keys.
    pub digest: String,
    /// The same inputs, kept apart, to say why a machine is made again.
    pub made_from: super::made_from::MadeFrom,
    /// The runtime's `.env`: only the keys the definition names.
    pub keys_text: &'a str,
    /// The values of the credentials warden's proxy adds (a `.env` text),
    /// handed to warden alone once it answers.
    pub credentials_text: &'a str,
    /// What the setup is made of (its script, and the definition's `env`
    /// and key names it runs with); None without a setup.
    pub setup_digest: Option<String>,
    /// Run the setup whether or not it ran with these inputs (`up --setup`).
    pub force_setup: bool,
    /// When `up` began, for its progress lines.
    pub start: Instant,
}

impl Prepared<'_> {
    /// Whether the setup that ran (its digest as `recorded`) is this one,
    /// and not asked for again; said in `up`'s progress when so.
    pub fn setup_ran(&self, script: &Path, recorded: Option<&str>) -> bool {
        let ran = !self.force_setup
            && recorded.map(str::trim).is_some()
            && recorded.map(str::trim) == self.setup_digest.as_deref();
        if ran {
            super::step(
                self.start,
                &format!(
                    "setup {}: unchanged since it ran, not run again (`up --setup` runs it)",
                    script.display()
                ),
            );
        }
        ran
    }
}

/// What one `up` made, in the order made: undone in reverse when a later
/// step fails. What an earlier `up` made is never touched.
#[derive(Default)]
pub struct Made {
    pub state: Option<PathBuf>,
    pub image: Option<String>,
    pub volumes: Vec<String>,
    /// Volumes podman's `run` makes with the container when they are not
    /// there, and the time before it: those made since are this `up`'s.
    pub volumes_since: Option<(Vec<String>, std::time::SystemTime)>,
    pub container: Option<String>,
}

pub trait Backend {
    /// "container" or "VM", for people.
    fn noun(&self) -> &'static str;

    /// Refuses a definition this host cannot run as this kind, saying why.
    fn fits(&self, def: &Definition, host: &Host) -> Result<(), LaunchError>;

    /// Makes (or keeps) the machine and starts it; returns once its warden
    /// answers. What it makes is recorded in `made`.
    fn up(&self, prepared: &Prepared, made: &mut Made) -> Result<(), LaunchError>;

    /// Starts a stopped machine and waits for its warden.
    fn start(&self, id: &str) -> Result<(), LaunchError>;

    /// Stops the machine: warden is asked first, killed after a grace.
    fn stop(&self, id: &str) -> Result<(), LaunchError>;

    /// Prints the machine's own output (the engine's log, a VM's console).
    fn logs(&self, id: &str) -> Result<(), LaunchError>;

    /// Removes the machine; with `volumes`, its disks or volumes too.
    fn remove(&self, id: &str, volumes: bool) -> Result<(), LaunchError>;

    /// A client of the machine's warden, keyed.
    fn connect(&self, id: &str, first: Option<(u32, &Request)>) -> Result<Client, LaunchError>;

    /// Copies the audit log into `copy` (an empty folder); true when the
    /// copy may lack the last lines (the machine runs and has not yet
    /// written them where the host can read them).
    fn copy_audit(&self, id: &str, copy: &Path) -> Result<bool, LaunchError>;

    /// This owner's machines of this kind, a row each for `ps` (the idle
    /// time left for `ps` to ask): one engine call at most.
    fn list(&self) -> Result<Vec<super::ps::Row>, LaunchError>;

    /// Takes the machine down, when its agent is done: it stops and is
    /// removed, and what its next `up` finds again is kept (a container's
    /// volumes, a VM's disks, the state folder with the key and the audit
    /// anchor, the image built for it).
    fn down(&self, id: &str) -> Result<(), LaunchError>;

    /// The ids of this owner's machines that have anything of this kind
    /// left (a container, a volume, a VM's folder), for `prune`.
    fn ids(&self) -> Result<Vec<String>, LaunchError>;
}

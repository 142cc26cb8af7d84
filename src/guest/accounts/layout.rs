//! The machine's layout: which path belongs to whom, with which mode.
//! `ensure` makes and fixes it at boot; `measure` reports it for status.

use crate::guest::accounts::users::Account;
use crate::wire::PathState;
use nix::fcntl::OFlag;
use nix::sys::stat::{fchmod, fstat, Mode, SFlag};
use nix::unistd::{fchown, Gid, Uid};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// One path the machine relies on, and how it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub path: PathBuf,
    pub kind: Kind,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    /// Names for the owner, for messages ("runtime:shell").
    pub owner: String,
}

/// Whether `dir`, a folder on a PATH, is one shell writes (or may make):
/// its home, or the workspace outside the routines. Judged by its words
/// and, where it exists, by where its links lead. A relative one is the
/// runtime's: it starts in its own home or setup folder.
pub fn shell_writes(paths: &Paths, dir: &Path) -> bool {
    if !dir.is_absolute() {
        return false;
    }
    let theirs = |d: &Path| {
        d.starts_with(&paths.shell_home)
            || (d.starts_with(&paths.workspace) && !d.starts_with(&paths.routines))
    };
    theirs(&lexical(dir)) || std::fs::canonicalize(dir).is_ok_and(|real| theirs(&real))
}

/// Pure: an absolute path with `.` and `..` taken out, as its words say.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The paths of the layout, derived from the two accounts.
#[derive(Debug, Clone)]
pub struct Paths {
    pub runtime_home: PathBuf,
    pub env_file: PathBuf,
    pub data: PathBuf,
    pub workspace: PathBuf,
    pub routines: PathBuf,
    pub shell_home: PathBuf,
    pub audit_dir: PathBuf,
    /// The routines are a folder the owner lent (a mount point): warden
    /// changes neither its owner nor its modes, and checks that shell
    /// cannot write it.
    pub routines_lent: bool,
}

impl Paths {
    pub fn new(runtime: &Account, shell: &Account, audit_dir: PathBuf) -> Paths {
        let home = runtime.home.clone();
        Paths {
            env_file: home.join(".env"),
            data: home.join("data"),
            workspace: home.join("workspace"),
            routines: home.join("workspace/routines"),
            runtime_home: home,
            shell_home: shell.home.clone(),
            audit_dir,
            routines_lent: false,
        }
    }

    /// As `new`, with `routines_lent` read from this process's mounts.
    pub fn of_machine(runtime: &Account, shell: &Account, audit_dir: PathBuf) -> Paths {
        let mut paths = Paths::new(runtime, shell, audit_dir);
        // As bytes: a mount's path that is not UTF-8 must not hide the rest.
        let mounts = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
        let mounts = String::from_utf8_lossy(&mounts);
        paths.routines_lent = mount_points(&mounts).contains(&paths.routines);
        paths
    }
}

/// The machine's layout (as the README lists it): the runtime's secrets and data closed to
/// everyone else, a sticky workspace where `shell` may make folders but not
/// remove others', routines it can read and never write.
pub fn specs(paths: &Paths, runtime: &Account, shell: &Account) -> Vec<Spec> {
    let spec = |path: &Path, kind, who: &Account, gid: u32, group: &str, mode| Spec {
        path: path.to_path_buf(),
        kind,
        uid: who.uid,
        gid,
        mode,
        owner: format!("{}:{}", who.name, group),
    };
    let root = Account {
        name: "root".into(),
        uid: 0,
        gid: 0,
        groups: vec![0],
        home: "/root".into(),
    };
    let (r, s) = (runtime, shell);
    let mut out = vec![
        // 0711: shell may pass through to the workspace but not list the home.
        spec(&paths.runtime_home, Kind::Dir, r, r.gid, &r.name, 0o711),
        spec(&paths.env_file, Kind::File, r, r.gid, &r.name, 0o600),
        spec(&paths.data, Kind::Dir, r, r.gid, &r.name, 0o700),
        // Sticky and group-writable by shell only: shell makes folders,
        // cannot remove the runtime's or rename its routines.
        spec(&paths.workspace, Kind::Dir, r, s.gid, &s.name, 0o1770),
        spec(&paths.shell_home, Kind::Dir, s, s.gid, &s.name, 0o700),
    ];
    if !paths.routines_lent {
        out.push(spec(&paths.routines, Kind::Dir, r, r.gid, &r.name, 0o755));
    }
    // The audit log is root's, readable by the runtime, never by shell.
    for dir in ancestors_below(&paths.audit_dir, &paths.data) {
        out.push(spec(&dir, Kind::Dir, &root, r.gid, &r.name, 0o750));
    }
    out
}

/// Pure: the mount points `/proc/self/mountinfo` lists (its fifth field,
/// with the kernel's octal escapes of space, tab, newline and `\\` undone).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| {
            let mut out = Vec::new();
            let bytes = field.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                let octal = bytes.get(i + 1..i + 4).and_then(|d| {
                    std::str::from_utf8(d)
                        .ok()
                        .and_then(|d| u8::from_str_radix(d, 8).ok())
                });
                match (bytes[i], octal) {
                    (b'\\', Some(byte)) => {
                        out.push(byte);
                        i += 4;
                    }
                    (byte, _) => {
                        out.push(byte);
                        i += 1;
                    }
                }
            }
            PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
        })
        .collect()
}

/// Why a lent routines folder is refused: shell could write it by its
/// owner and modes (Landlock aside, which may not hold everywhere).
pub fn check_lent_routines(routines: &Path, shell: Who) -> Result<(), LayoutError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(routines).map_err(|e| err(routines, e.to_string()))?;
    if permits(shell, meta.uid(), meta.gid(), meta.mode(), MAY_WRITE) {
        return Err(err(
            routines,
            format!(
                "lent so that shell could write it (owner {}:{}, mode {:04o}): the agent's routines are never shell's",
                meta.uid(),
                meta.gid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// The directories from just below `base` down to `dir`, when `dir` is
/// inside `base`; `[dir]` when it is elsewhere.
fn ancestors_below(dir: &Path, base: &Path) -> Vec<PathBuf> {
    match dir.strip_prefix(base) {
        Ok(rest) => {
            let mut acc = base.to_path_buf();
            rest.components()
                .map(|c| {
                    acc.push(c);
                    acc.clone()
                })
                .collect()
        }
        Err(_) => vec![dir.to_path_buf()],
    }
}

#[derive(Debug, thiserror::Error)]
#[error("layout: {path}: {problem}")]
pub struct LayoutError {
    pub path: PathBuf,
    pub problem: String,
}

/// Makes every path exist as its spec says. Returns what it changed.
/// Never follows a symlink: one where a layout path should be is refused.
pub fn ensure(specs: &[Spec]) -> Result<Vec<String>, LayoutError> {
    let mut changes = Vec::new();
    for spec in specs {
        if let Some(parent) = spec.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e.to_string()))?;
        }
        let mut fixes = Vec::new();
        let made = open_or_create(spec)?;
        fix(spec, &made.fd, &mut fixes)?;
        if made.fresh {
            changes.push(format!(
                "made {} ({} {:04o})",
                spec.path.display(),
                spec.owner,
                spec.mode
            ));
        } else {
            changes.extend(fixes);
        }
    }
    Ok(changes)
}

fn err(path: &Path, problem: impl Into<String>) -> LayoutError {
    LayoutError {
        path: path.into(),
        problem: problem.into(),
    }
}

struct Opened {
    fd: OwnedFd,
    /// Made just now (so its fixes are part of making it, not news).
    fresh: bool,
}

fn open_or_create(spec: &Spec) -> Result<Opened, LayoutError> {
    let mut fresh = false;
    let path = &spec.path;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(err(
                path,
                "is a symlink; refusing to follow it (remove it by hand)",
            ))
        }
        Ok(meta) if spec.kind == Kind::Dir && !meta.is_dir() => {
            return Err(err(path, "exists but is not a directory"))
        }
        Ok(meta) if spec.kind == Kind::File && !meta.is_file() => {
            return Err(err(path, "exists but is not a regular file"))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let made = match spec.kind {
                Kind::Dir => nix::unistd::mkdir(path, Mode::from_bits_truncate(0o700)),
                Kind::File => nix::fcntl::open(
                    path,
                    OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .and_then(nix::unistd::close),
            };
            made.map_err(|e| err(path, format!("cannot create: {e}")))?;
            fresh = true;
        }
        Err(e) => return Err(err(path, e.to_string())),
    }
    let kind_flag = match spec.kind {
        Kind::Dir => OFlag::O_DIRECTORY,
        Kind::File => OFlag::empty(),
    };
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let raw = nix::fcntl::open(path, flags | kind_flag, Mode::empty())
        .map_err(|e| err(path, format!("cannot open without following links: {e}")))?;
    // SAFETY: `raw` was just returned by open(2) and is owned by nobody else.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    Ok(Opened { fd, fresh })
}

fn fix(spec: &Spec, fd: &OwnedFd, changes: &mut Vec<String>) -> Result<(), LayoutError> {
    let path = &spec.path;
    let st = fstat(fd.as_raw_fd()).map_err(|e| err(path, e.to_string()))?;
    let is_dir = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR;
    let is_file = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG;
    match spec.kind {
        Kind::Dir if !is_dir => return Err(err(path, "exists but is not a directory")),
        Kind::File if !is_file => return Err(err(path, "exists but is not a regular file")),
        _ => {}
    }
    if st.st_uid != spec.uid || st.st_gid != spec.gid {
        fchown(
            fd.as_raw_fd(),
            Some(Uid::from_raw(spec.uid)),
            Some(Gid::from_raw(spec.gid)),
        )
        .map_err(|e| err(path, format!("cannot give it to {}: {e}", spec.owner)))?;
        changes.push(format!(
            "owner of {} was {}:{}, now {}",
            path.display(),
            st.st_uid,
            st.st_gid,
            spec.owner
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode != spec.mode {
        fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(spec.mode))
            .map_err(|e| err(path, format!("cannot set mode {:04o}: {e}", spec.mode)))?;
        changes.push(format!(
            "mode of {} was {mode:04o}, now {:04o}",
            path.display(),
            spec.mode
        ));
    }
    Ok(())
}

/// Why a command's folder cannot be made or entered for it.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("{place} is not a place for commands: shell may never write there")]
    Refused { place: String },
    #[error("{}: {source}", base.display())]
    Base { base: PathBuf, source: nix::Error },
    #[error("fstat: {0}")]
    Fstat(#[source] nix::Error),
    #[error("shell may not enter {0}")]
    MayNotEnter(String),
    #[error("shell may not make folders in {0}")]
    MayNotMake(String),
    #[error("{0} is a link or not a folder")]
    NotAFolder(String),
    #[error("cannot open {name}: {source}")]
    Open { name: String, source: nix::Error },
    #[error("cannot make {name}: {source}")]
    Make { name: String, source: nix::Error },
    #[error("fstat {name}: {source}")]
    FstatMade { name: String, source: nix::Error },
    #[error("{0} changed while it was being made")]
    Changed(String),
    #[error("cannot give {name} to shell: {source}")]
    GiveAway { name: String, source: nix::Error },
}

/// Who a command's folder is made for, as the kernel sees them.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub uid: u32,
    pub gid: u32,
    pub groups: &'a [u32],
}

/// Access bits, as in a mode's `rwx` triplets.
pub const MAY_WRITE: u32 = 0o2;
pub const MAY_ENTER: u32 = 0o1;

/// Pure: whether `who` (never root) may do `want` (MAY_* bits) on a file
/// of this owner and mode, by the kernel's rule: the owner's bits if it is
/// theirs, else the group's if they are in its group, else the others'.
pub fn permits(who: Who, uid: u32, gid: u32, mode: u32, want: u32) -> bool {
    let bits = if who.uid == uid {
        mode >> 6
    } else if who.gid == gid || who.groups.contains(&gid) {
        mode >> 3
    } else {
        mode
    } & 0o7;
    bits & want == want
}

/// Opens (making what is missing) the folder `parts` under `base`, one
/// component at a time, never following a link: whatever `shell` planted
/// in the workspace, the folder returned is really beneath it.
///
/// warden makes the folder as root, so it checks each step as the kernel
/// would for `who`: every folder on the way must be one `who` may enter,
/// and a missing one is made only where `who` may write. Root's mkdir
/// would otherwise hand `who` a folder inside anything (the routines, a
/// runtime's 0700 folder). New folders are `who`'s, mode 0755. `refused`
/// names the places (as component lists) that are never a command's
/// folder, nor anything under them.
pub fn make_folder(
    base: &Path,
    parts: &[String],
    who: Who,
    refused: &[Vec<String>],
) -> Result<OwnedFd, FolderError> {
    if let Some(place) = refused.iter().find(|r| parts.starts_with(r)) {
        return Err(FolderError::Refused {
            place: place.join("/"),
        });
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let open_at = |dir: Option<&OwnedFd>, name: &Path| -> nix::Result<OwnedFd> {
        let raw = match dir {
            None => nix::fcntl::open(name, flags, Mode::empty())?,
            Some(d) => nix::fcntl::openat(Some(d.as_raw_fd()), name, flags, Mode::empty())?,
        };
        // SAFETY: `raw` was just returned by open(2) and is ours alone.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
    };
    let may = |dir: &OwnedFd, want: u32| -> Result<bool, FolderError> {
        let st = fstat(dir.as_raw_fd()).map_err(FolderError::Fstat)?;
        Ok(permits(
            who,
            st.st_uid,
            st.st_gid,
            st.st_mode & 0o7777,
            want,
        ))
    };
    let mut dir = open_at(None, base).map_err(|source| FolderError::Base {
        base: base.into(),
        source,
    })?;
    for (i, part) in parts.iter().enumerate() {
        let here = if i == 0 {
            "the workspace".to_string()
        } else {
            parts[..i].join("/")
        };
        if !may(&dir, MAY_ENTER)? {
            return Err(FolderError::MayNotEnter(here));
        }
        let name = Path::new(part);
        let cannot_open = |source| FolderError::Open {
            name: part.clone(),
            source,
        };
        let next = match open_at(Some(&dir), name) {
            Ok(next) => next,
            Err(nix::errno::Errno::ENOENT) => {
                if !may(&dir, MAY_WRITE | MAY_ENTER)? {
                    return Err(FolderError::MayNotMake(here));
                }
                make_one(&dir, part, who)?;
                open_at(Some(&dir), name).map_err(cannot_open)?
            }
            Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => {
                return Err(FolderError::NotAFolder(part.clone()))
            }
            Err(e) => return Err(cannot_open(e)),
        };
        dir = next;
    }
    if !may(&dir, MAY_ENTER)? {
        return Err(FolderError::MayNotEnter(parts.join("/")));
    }
    Ok(dir)
}

/// Makes `name` in `dir` for `who` (0755), tolerating a racing maker.
fn make_one(dir: &OwnedFd, name: &str, who: Who) -> Result<(), FolderError> {
    match nix::sys::stat::mkdirat(
        Some(dir.as_raw_fd()),
        Path::new(name),
        Mode::from_bits_truncate(0o700),
    ) {
        Ok(()) => {}
        // Made meanwhile by someone else: opened and checked like any other.
        Err(nix::errno::Errno::EEXIST) => return Ok(()),
        Err(source) => {
            return Err(FolderError::Make {
                name: name.into(),
                source,
            })
        }
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let raw = nix::fcntl::openat(Some(dir.as_raw_fd()), Path::new(name), flags, Mode::empty())
        .map_err(|source| FolderError::Open {
            name: name.into(),
            source,
        })?;
    // SAFETY: `raw` was just returned by open(2) and is ours alone.
    let made = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    // Still the folder just made (root's, 0700), not one renamed onto its
    // name meanwhile: only that one is handed over.
    let st = fstat(made.as_raw_fd()).map_err(|source| FolderError::FstatMade {
        name: name.into(),
        source,
    })?;
    if st.st_uid != 0 || st.st_mode & 0o7777 != 0o700 {
        return Err(FolderError::Changed(name.into()));
    }
    fchown(
        made.as_raw_fd(),
        Some(Uid::from_raw(who.uid)),
        Some(Gid::from_raw(who.gid)),
    )
    .and_then(|()| fchmod(made.as_raw_fd(), Mode::from_bits_truncate(0o755)))
    .map_err(|source| FolderError::GiveAway {
        name: name.into(),
        source,
    })
}

/// Measures each path as it is now, without changing anything.
pub fn measure(specs: &[Spec]) -> Vec<PathState> {
    specs
        .iter()
        .map(|spec| {
            let expected = describe(spec.kind, spec.mode, spec.uid, spec.gid);
            let found = match std::fs::symlink_metadata(&spec.path) {
                Ok(meta) => {
                    use std::os::unix::fs::MetadataExt;
                    let ft = meta.file_type();
                    if ft.is_symlink() {
                        "symlink".to_string()
                    } else {
                        let kind = if ft.is_dir() { Kind::Dir } else { Kind::File };
                        let plain = ft.is_dir() || ft.is_file();
                        let text = describe(kind, meta.mode() & 0o7777, meta.uid(), meta.gid());
                        if plain {
                            text
                        } else {
                            format!("special {text}")
                        }
                    }
                }
                Err(e) => format!("missing ({e})"),
            };
            PathState {
                path: spec.path.display().to_string(),
                ok: found == expected,
                expected,
                found,
            }
        })
        .collect()
}

fn describe(kind: Kind, mode: u32, uid: u32, gid: u32) -> String {
    let k = match kind {
        Kind::Dir => "dir",
        Kind::File => "file",
    };
    format!("{k} {mode:04o} {uid}:{gid}")
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_path_folder_is_shells_in_its_home_and_the_workspace_but_the_routines() {
        let account = |name: &str, uid| Account {
            name: name.into(),
            uid,
            gid: uid,
            groups: vec![uid],
            home: format!("/nonexistent-test/{name}").into(),
        };
        let paths = Paths::new(
            &account("runtime", 2000),
            &account("shell", 2001),
            "/nonexistent-test/runtime/data/audit".into(),
        );
        let cases = [
            ("/usr/bin", false),
            ("bin", false),
            ("", false),
            ("/nonexistent-test/runtime", false),
            ("/nonexistent-test/runtime/.local/bin", false),
            ("/nonexistent-test/runtime/workspace", true),
            (
                "/nonexistent-test/runtime/workspace/proj/node_modules/.bin",
                true,
            ),
            ("/nonexistent-test/runtime/workspace/routines/bin", false),
            ("/nonexistent-test/runtime/workspace/routines/../x", true),
            ("/nonexistent-test/runtime/data/../workspace/bin", true),
            ("/nonexistent-test/shell/bin", true),
            ("/nonexistent-test/shell", true),
        ];
        for (dir, want) in cases {
            assert_eq!(shell_writes(&paths, Path::new(dir)), want, "{dir}");
        }
    }
    use super::*;

    #[test]
    fn permission_table() {
        let groups = [3000];
        let who = Who {
            uid: 2001,
            gid: 2001,
            groups: &groups,
        };
        let rwx = MAY_WRITE | MAY_ENTER;
        // (owner uid, group, mode, wanted, allowed)
        let cases = [
            (2001, 0, 0o700, rwx, true),           // its own folder
            (2000, 2000, 0o755, MAY_ENTER, true),  // the runtime's, open to all
            (2000, 2000, 0o755, rwx, false),       // ... but not writable
            (2000, 2000, 0o700, MAY_ENTER, false), // the runtime's, closed
            (2000, 2001, 0o1770, rwx, true),       // the sticky workspace, its group
            (2000, 3000, 0o070, rwx, true),        // a supplementary group
            (2000, 2000, 0o707, rwx, true),        // others' bits
            (2001, 2001, 0o077, MAY_ENTER, false), // owner bits win, even when narrower
            (2000, 2001, 0o707, MAY_ENTER, false), // group bits win over others'
        ];
        for (uid, gid, mode, want, allowed) in cases {
            assert_eq!(
                permits(who, uid, gid, mode, want),
                allowed,
                "{uid}:{gid} {mode:o} want {want:o}"
            );
        }
    }

    #[test]
    fn mount_points_table() {
        let info = "22 1 0:21 / / rw - ext4 /dev/vda rw\n\
                    30 22 0:5 /p /home/runtime/workspace/routines ro - ext4 /dev/x rw\n\
                    31 22 0:5 /q /lent/a\\040b rw - ext4 /dev/x rw\n\
                    bad line\n";
        let points = mount_points(info);
        assert_eq!(
            points,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/home/runtime/workspace/routines"),
                PathBuf::from("/lent/a b"),
            ]
        );
    }

    #[test]
    fn audit_dir_ancestors() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("/h/data/audit", "/h/data", &["/h/data/audit"]),
            ("/h/data/a/b", "/h/data", &["/h/data/a", "/h/data/a/b"]),
            ("/var/log/warden", "/h/data", &["/var/log/warden"]),
        ];
        for (dir, base, want) in cases {
            let got = ancestors_below(Path::new(dir), Path::new(base));
            let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
            assert_eq!(got, want, "{dir}");
        }
    }
}

/// Where the launcher puts the runtime's keys among the machine's own
/// files (root's, mode 0600), when it cannot write the `.env` itself.
pub const HANDED_KEYS: &str = "/etc/warden/runtime.env";

/// Moves the keys at `from` into the runtime's `.env` at `to` (which the
/// layout has made: the runtime's, mode 0600, no link), and removes
/// `from`. False when there is nothing to hand over.
pub fn hand_over_keys(from: &Path, to: &Path) -> Result<bool, HandOverError> {
    let on = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HandOverError { path, source }
    };
    let keys = match std::fs::read(from) {
        Ok(k) => k,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(on(from)(e)),
    };
    let mut env = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)
        .map_err(on(to))?;
    std::io::Write::write_all(&mut env, &keys).map_err(on(to))?;
    std::fs::remove_file(from).map_err(on(from))?;
    Ok(true)
}

/// The keys could not be moved: the file it failed on, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct HandOverError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

#[cfg(test)]
mod hand_over_tests {
    use super::*;

    #[test]
    fn keys_move_into_the_env_and_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("runtime.env"), dir.path().join(".env"));
        assert!(matches!(hand_over_keys(&from, &to), Ok(false)));
        std::fs::write(&to, "OLD=1\n").unwrap();
        std::fs::write(&from, "TOKEN=abc\n").unwrap();
        assert!(matches!(hand_over_keys(&from, &to), Ok(true)));
        assert_eq!(std::fs::read_to_string(&to).unwrap(), "TOKEN=abc\n");
        assert!(!from.exists());
        // A link where the .env should be is refused, not followed.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "").unwrap();
        std::fs::remove_file(&to).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &to).unwrap();
        std::fs::write(&from, "TOKEN=abc\n").unwrap();
        assert!(hand_over_keys(&from, &to).is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "");
    }
}

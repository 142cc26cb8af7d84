//! The runtime's keys, handed over by the owner through the host's door
//! (`hand_keys`, protocol version 4) rather than through the engine: they
//! become the runtime's `.env` (its own, mode 0600) and the main process's
//! environment, which can wait for them to start (`main_waits_for_keys`).
//! Only their names are ever audited.

use std::ffi::{CString, NulError};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The largest `.env` the host may hand over.
pub const MAX_BYTES: usize = 64 * 1024;

/// Why a text is not a `.env`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvTextError {
    #[error("{len} bytes, at most {MAX_BYTES}")]
    TooLarge { len: usize },
    #[error("holds a NUL byte")]
    Nul,
    #[error("line {line} is not NAME=VALUE")]
    NotNameValue { line: usize },
}

/// Callers that still take errors as text get the words it prints.
/// Why the runtime's keys could not be read (`keys_from`) or written
/// (its `.env`).
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("keys_from {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("keys_from {}: not a regular file of root's", path.display())]
    NotRoots { path: PathBuf },
    #[error("keys_from {}: {source}", path.display())]
    Text { path: PathBuf, source: EnvTextError },
    #[error("no folder")]
    NoFolder,
    #[error("no file name")]
    NoFileName,
    /// A step of writing the `.env` ("open home", "create", "chown",
    /// "rename").
    #[error("{}: {step}: {source}", path.display())]
    Write {
        path: PathBuf,
        step: &'static str,
        source: nix::Error,
    },
    /// Its text written, or synced ("write", "sync").
    #[error("{}: {step}: {source}", path.display())]
    WriteText {
        path: PathBuf,
        step: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    TempName(#[source] NulError),
}

/// Pure: the names a `.env` text gives, in order, or why it is not one
/// (every line is blank, a `#` comment, or `NAME=VALUE`).
pub fn names(text: &str) -> Result<Vec<String>, EnvTextError> {
    if text.len() > MAX_BYTES {
        return Err(EnvTextError::TooLarge { len: text.len() });
    }
    if text.contains('\0') {
        return Err(EnvTextError::Nul);
    }
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let name = line.split_once('=').map(|(n, _)| n.trim()).unwrap_or("");
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(EnvTextError::NotNameValue { line: i + 1 });
        }
        names.push(name.to_string());
    }
    Ok(names)
}

/// The keys handed over so far, and a wake-up for the main process that
/// waits for them.
#[derive(Default)]
pub struct HandedKeys {
    pairs: Mutex<Option<Vec<(String, String)>>>,
    arrived: tokio::sync::Notify,
}

impl HandedKeys {
    /// Records the keys and wakes whoever waits for them.
    pub fn arrive(&self, text: &str) {
        let pairs = crate::shared::redact::env_pairs(text)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        *self.pairs.lock().unwrap_or_else(|e| e.into_inner()) = Some(pairs);
        self.arrived.notify_one();
    }

    /// The pairs, once handed over.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.pairs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// Resolves once keys have been handed over (at once if they were).
    pub async fn wait(&self) {
        if self
            .pairs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return;
        }
        self.arrived.notified().await;
    }
}

/// The runtime's `.env` when it holds keys from an earlier hand-over: a
/// regular file of the runtime's own with one link, read without
/// following a link (what the runtime could swap in is not read as root).
pub fn earlier(env_file: &Path, runtime_uid: u32) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(env_file)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file()
        || meta.uid() != runtime_uid
        || meta.nlink() != 1
        || meta.len() > MAX_BYTES as u64
    {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_BYTES as u64).read_to_string(&mut text).ok()?;
    (names(&text).is_ok_and(|n| !n.is_empty())).then_some(text)
}

/// Copies the runtime's keys from `from`, a file of root's that stays
/// where it is (a cluster's Secret, mounted read-only; the kubelet's own
/// link to it is followed), into the runtime's `.env`. Returns the names.
pub fn copy_mounted(
    from: &Path,
    env_file: &Path,
    uid: u32,
    gid: u32,
) -> Result<Vec<String>, KeysError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let fail = |source| KeysError::Read {
        path: from.into(),
        source,
    };
    let file = std::fs::File::open(from).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.is_file() || meta.uid() != 0 {
        return Err(KeysError::NotRoots { path: from.into() });
    }
    let mut text = String::new();
    file.take(MAX_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(fail)?;
    let names = names(&text).map_err(|source| KeysError::Text {
        path: from.into(),
        source,
    })?;
    write_env(env_file, &text, uid, gid)?;
    Ok(names)
}

/// Writes `text` as the runtime's `.env`: a new file made in its home
/// (never through a link the runtime left there), given to the runtime
/// with mode 0600, then renamed over the old one.
pub fn write_env(env_file: &Path, text: &str, uid: u32, gid: u32) -> Result<(), KeysError> {
    use nix::fcntl::{openat, renameat, OFlag};
    use nix::sys::stat::Mode;
    let home = env_file.parent().ok_or(KeysError::NoFolder)?;
    let name = env_file.file_name().ok_or(KeysError::NoFileName)?;
    let fail = |step: &'static str, source: nix::Error| KeysError::Write {
        path: env_file.into(),
        step,
        source,
    };
    let fail_io = |step: &'static str, source: std::io::Error| KeysError::WriteText {
        path: env_file.into(),
        step,
        source,
    };
    let dir_flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let dir = nix::fcntl::open(home, dir_flags, Mode::empty()).map_err(|e| fail("open home", e))?;
    // SAFETY: `dir` was just returned by open(2) and is owned by nobody else.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let temp = format!(".env.warden-{}-{stamp}", std::process::id());
    let temp_c = CString::new(temp.clone()).map_err(KeysError::TempName)?;
    let file_flags =
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(
        Some(dir.as_raw_fd()),
        temp_c.as_c_str(),
        file_flags,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| fail("create", e))?;
    // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let written = (|| {
        nix::unistd::fchown(
            file.as_raw_fd(),
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .map_err(|e| fail("chown", e))?;
        use std::io::Write;
        (&file)
            .write_all(text.as_bytes())
            .map_err(|e| fail_io("write", e))?;
        file.sync_all().map_err(|e| fail_io("sync", e))?;
        renameat(
            Some(dir.as_raw_fd()),
            temp_c.as_c_str(),
            Some(dir.as_raw_fd()),
            name,
        )
        .map_err(|e| fail("rename", e))
    })();
    if written.is_err() {
        let _ = nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            temp_c.as_c_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn names_table() {
        let cases: [(&str, Result<Vec<&str>, ()>); 7] = [
            ("", Ok(vec![])),
            ("A=1\n# c\n\nexport B_2=x=y\n", Ok(vec!["A", "B_2"])),
            ("A=\n", Ok(vec!["A"])),
            ("no equals\n", Err(())),
            ("1A=x\n", Err(())),
            ("A-B=x\n", Err(())),
            ("A=\0\n", Err(())),
        ];
        for (text, want) in cases {
            let got = names(text).map_err(|_| ());
            let want = want.map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{text:?}");
        }
        assert!(names(&"A=1\n".repeat(MAX_BYTES)).is_err());
    }

    #[test]
    fn the_env_replaces_a_link_and_does_not_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "untouched").unwrap();
        let env = dir.path().join(".env");
        std::os::unix::fs::symlink(&target, &env).unwrap();
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        write_env(&env, "K=v\n", me.0, me.1).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
        let meta = std::fs::symlink_metadata(&env).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&env).unwrap(), "K=v\n");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 2, "no temporary file is left");
    }

    #[test]
    fn mounted_keys_are_copied_and_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let (from, env) = (dir.path().join("runtime.env"), dir.path().join(".env"));
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let root = me.0 == 0;
        type Case<'a> = (&'a str, Option<&'a str>, Result<Vec<&'a str>, &'a str>);
        let cases: [Case; 4] = [
            ("good", Some("A=1\nB=2\n"), Ok(vec!["A", "B"])),
            ("not a .env", Some("no equals\n"), Err("not NAME=VALUE")),
            ("missing", None, Err("No such file")),
            ("a folder", Some(""), Err("not a regular file")),
        ];
        for (what, text, want) in cases {
            let _ = std::fs::remove_file(&from);
            let _ = std::fs::remove_dir(&from);
            match (what, text) {
                ("a folder", _) => std::fs::create_dir(&from).unwrap(),
                (_, Some(t)) => std::fs::write(&from, t).unwrap(),
                _ => {}
            }
            let got = copy_mounted(&from, &env, me.0, me.1);
            match (want, got) {
                (Ok(names), Ok(got)) if root => {
                    assert_eq!(got, names, "{what}");
                    assert_eq!(std::fs::read_to_string(&env).unwrap(), text.unwrap());
                    assert!(from.exists(), "{what}: the mounted file stays");
                }
                // Not root: the file is not root's, and is refused.
                (Ok(_), Err(e)) if !root => {
                    assert!(e.to_string().contains("of root's"), "{what}: {e}")
                }
                (Err(w), Err(e)) => assert!(e.to_string().contains(w) || !root, "{what}: {e}"),
                (want, got) => panic!("{what}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn keys_wake_a_waiter() {
        let keys = HandedKeys::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        keys.arrive("A=1\n");
        rt.block_on(keys.wait());
        assert_eq!(keys.pairs(), vec![("A".to_string(), "1".to_string())]);
    }
}

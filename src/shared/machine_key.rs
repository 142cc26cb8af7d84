//! The machine's key: what a client on the host socket must present in its
//! hello, where the socket's peer cannot be known by its uid (a socket in a
//! folder lent to the host, reached from outside the machine).
//!
//! The key file is a regular file, or exactly the shape a kubelet gives a
//! Secret's file: `<dir>/key -> ..data/key`, `<dir>/..data -> ..<stamp>`
//! (both links root's), `<dir>/..<stamp>/key` the file itself, in a folder
//! no one else may write. Any other link is refused.

use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// A key shorter than this is refused: it would be guessable.
pub const MIN_LEN: usize = 32;

/// The kubelet's link to the current version of a Secret's files.
const DATA_LINK: &str = "..data";

pub struct Key {
    digest: [u8; 32],
}

/// A key file refused: its path, and why.
#[derive(Debug, thiserror::Error)]
#[error("key file {}: {source}", path.display())]
pub struct KeyFileError {
    pub path: PathBuf,
    pub source: KeyError,
}

/// Why a key, or the file it is read from, is refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("a key has at least {MIN_LEN} characters")]
    TooShort,
    #[error("not a regular file (a link)")]
    Link,
    #[error("not a regular file")]
    NotRegular,
    #[error("must be root's and mode 0600 or 0400 (is uid {uid}, mode {mode:o})")]
    NotPrivate { uid: u32, mode: u32 },
    /// Opening or reading the file, or following the Secret's links.
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// A step of a kubelet's shape ("the folder", "..data", "the
    /// Secret's folder") could not be looked at.
    #[error("{what}: {source}")]
    Step {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{what} {} is uid {uid}'s, not root's", path.display())]
    NotOwners {
        what: &'static str,
        path: PathBuf,
        uid: u32,
    },
    #[error(
        "a link, and not a kubelet's Secret file ({0}); only a regular file or that shape is taken"
    )]
    NotSecret(NotSecret),
}

/// How a link at the key's path differs from a kubelet's Secret.
#[derive(Debug, thiserror::Error)]
pub enum NotSecret {
    #[error("no folder")]
    NoFolder,
    #[error("its folder may be written by others")]
    FolderWritable,
    #[error("the link is not root's")]
    LinkNotRoots,
    #[error("it points to {}, not {DATA_LINK}/{name}", target.display())]
    PointsElsewhere { target: PathBuf, name: String },
    #[error("{DATA_LINK} is not a link")]
    DataNotALink,
    #[error("{DATA_LINK} points to {}, not a ..<stamp> folder beside it", stamp.display())]
    DataElsewhere { stamp: PathBuf },
    #[error("{} is not a folder that root alone may write", version.display())]
    VersionWritable { version: PathBuf },
}

impl Key {
    /// Reads the key file: root's, readable by nobody else, at least
    /// `MIN_LEN` characters (surrounding whitespace is not part of it).
    pub fn load(path: &Path) -> Result<Key, KeyFileError> {
        Key::load_owned_by(path, 0)
    }

    /// As `load`, with the file (and the links and folders of a kubelet's
    /// shape) owned by `owner`.
    fn load_owned_by(path: &Path, owner: u32) -> Result<Key, KeyFileError> {
        let refused = |source| KeyFileError {
            path: path.into(),
            source,
        };
        let text = read_key_file(path, owner).map_err(refused)?;
        Key::from_text(text.trim()).map_err(refused)
    }

    pub fn from_text(key: &str) -> Result<Key, KeyError> {
        if key.len() < MIN_LEN {
            return Err(KeyError::TooShort);
        }
        Ok(Key {
            digest: Sha256::digest(key.as_bytes()).into(),
        })
    }

    /// Whether `given` is the key. The digests are compared in full, so
    /// the time taken says nothing of how much of a guess was right.
    pub fn matches(&self, given: &str) -> bool {
        let other: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        self.digest
            .iter()
            .zip(other)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// Reads the key file at `path` (a regular file, or a kubelet's Secret
/// shape) after checking what it finally is: a regular file of `owner`,
/// that no one else may read or write. The file is opened without
/// following a last link and checked on the opened descriptor, so what is
/// read is what was checked.
fn read_key_file(path: &Path, owner: u32) -> Result<String, KeyError> {
    let file_path = resolve(path, owner)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO put there must not hang the boot.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&file_path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => KeyError::Link,
            _ => KeyError::Io(e),
        })?;
    let meta = file.metadata().map_err(KeyError::Io)?;
    if !meta.file_type().is_file() {
        return Err(KeyError::NotRegular);
    }
    if meta.uid() != owner || meta.mode() & 0o077 != 0 {
        return Err(KeyError::NotPrivate {
            uid: meta.uid(),
            mode: meta.mode() & 0o777,
        });
    }
    let mut text = String::new();
    // A key is small; a huge file is not one.
    (&mut file)
        .take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(KeyError::Io)?;
    Ok(text)
}

/// The path of the file itself: `path` when it is no link; for a link,
/// the file of a kubelet's Secret shape, each step checked (see the
/// module's text); any other link is refused.
fn resolve(path: &Path, owner: u32) -> Result<PathBuf, KeyError> {
    let meta = std::fs::symlink_metadata(path).map_err(KeyError::Io)?;
    if !meta.file_type().is_symlink() {
        return Ok(path.to_path_buf());
    }
    let refuse = |why| Err(KeyError::NotSecret(why));
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return refuse(NotSecret::NoFolder);
    };
    let owned = |p: &Path, what: &'static str| -> Result<std::fs::Metadata, KeyError> {
        let m = std::fs::symlink_metadata(p).map_err(|source| KeyError::Step { what, source })?;
        match m.uid() == owner {
            true => Ok(m),
            false => Err(KeyError::NotOwners {
                what,
                path: p.into(),
                uid: m.uid(),
            }),
        }
    };
    // The folder: others may not write it, or only with the sticky bit
    // (a kubelet's Secret volume is a 1777 tmpfs): root's entries in it
    // cannot be replaced by anyone else.
    let folder = owned(dir, "the folder")?;
    if folder.mode() & 0o022 != 0 && folder.mode() & 0o1000 == 0 {
        return refuse(NotSecret::FolderWritable);
    }
    if meta.uid() != owner {
        return refuse(NotSecret::LinkNotRoots);
    }
    // key -> ..data/key
    let target = std::fs::read_link(path).map_err(KeyError::Io)?;
    let parts: Vec<Component> = target.components().collect();
    let expected = [
        Component::Normal(OsStr::new(DATA_LINK)),
        Component::Normal(name),
    ];
    if parts != expected {
        return refuse(NotSecret::PointsElsewhere {
            target,
            name: name.to_string_lossy().into_owned(),
        });
    }
    // ..data -> ..<stamp>, root's link, in the same folder.
    let data = dir.join(DATA_LINK);
    let data_meta = owned(&data, DATA_LINK)?;
    if !data_meta.file_type().is_symlink() {
        return refuse(NotSecret::DataNotALink);
    }
    let stamp = std::fs::read_link(&data).map_err(KeyError::Io)?;
    let stamp_name = match stamp.components().collect::<Vec<_>>().as_slice() {
        [Component::Normal(n)]
            if n.to_str()
                .is_some_and(|s| s.starts_with("..") && s != DATA_LINK) =>
        {
            n.to_os_string()
        }
        _ => return refuse(NotSecret::DataElsewhere { stamp }),
    };
    // ..<stamp>: a real folder, root's, that no one else may write.
    let version = dir.join(&stamp_name);
    let version_meta = owned(&version, "the Secret's folder")?;
    if !version_meta.file_type().is_dir() || version_meta.mode() & 0o022 != 0 {
        return refuse(NotSecret::VersionWritable { version });
    }
    Ok(version.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_table() {
        let key = Key::from_text("k3y-0123456789abcdef0123456789abcdef").unwrap();
        let cases = [
            ("k3y-0123456789abcdef0123456789abcdef", true),
            ("  k3y-0123456789abcdef0123456789abcdef\n", true),
            ("k3y-0123456789abcdef0123456789abcdeF", false),
            ("k3y-0123456789abcdef0123456789abcde", false),
            ("", false),
        ];
        for (given, want) in cases {
            assert_eq!(key.matches(given), want, "{given:?}");
        }
        assert!(Key::from_text("short").is_err());
    }

    use std::os::unix::fs::{symlink, PermissionsExt};

    const KEY: &str = "k3y-0123456789abcdef0123456789abcdef\n";

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    }

    // A kubelet's shape in `dir`: key -> ..data/key, ..data -> ..stamp.
    fn kubelet(dir: &Path) {
        let stamp = dir.join("..2024_05_01_12_00_00.123456789");
        std::fs::create_dir(&stamp).unwrap();
        mode(&stamp, 0o755);
        std::fs::write(stamp.join("key"), KEY).unwrap();
        mode(&stamp.join("key"), 0o400);
        symlink("..2024_05_01_12_00_00.123456789", dir.join("..data")).unwrap();
        symlink("..data/key", dir.join("key")).unwrap();
        mode(dir, 0o1777);
    }

    type Shape = fn(&Path);

    /// (what, how to make it in a fresh folder, None for taken or the
    /// refusal's words).
    const SHAPES: &[(&str, Shape, Option<&str>)] = &[
        (
            "a plain file, 0400",
            |d: &Path| {
                std::fs::write(d.join("key"), KEY).unwrap();
                mode(&d.join("key"), 0o400);
            },
            None,
        ),
        (
            "a plain file others may read",
            |d: &Path| {
                std::fs::write(d.join("key"), KEY).unwrap();
                mode(&d.join("key"), 0o644);
            },
            Some("mode 0600 or 0400"),
        ),
        ("a kubelet's Secret", kubelet, None),
        (
            "a kubelet's Secret others may read",
            |d: &Path| {
                kubelet(d);
                mode(&d.join("..data/key"), 0o644);
            },
            Some("mode 0600 or 0400"),
        ),
        (
            "a kubelet's Secret in a folder others may write, not sticky",
            |d: &Path| {
                kubelet(d);
                mode(d, 0o777);
            },
            Some("may be written by others"),
        ),
        (
            "the stamp folder writable by others",
            |d: &Path| {
                kubelet(d);
                mode(&d.join("..2024_05_01_12_00_00.123456789"), 0o777);
            },
            Some("root alone may write"),
        ),
        (
            "a link to an absolute path",
            |d: &Path| {
                std::fs::create_dir(d.join("real")).unwrap();
                std::fs::write(d.join("real/key"), KEY).unwrap();
                mode(&d.join("real/key"), 0o400);
                symlink(d.join("real/key"), d.join("key")).unwrap();
            },
            Some("not ..data/key"),
        ),
        (
            "a link to another name under ..data",
            |d: &Path| {
                kubelet(d);
                std::fs::remove_file(d.join("key")).unwrap();
                symlink("..data/other", d.join("key")).unwrap();
            },
            Some("not ..data/key"),
        ),
        (
            "a link out of the folder",
            |d: &Path| {
                symlink("../elsewhere/key", d.join("key")).unwrap();
            },
            Some("not ..data/key"),
        ),
        (
            "..data pointing out of the folder",
            |d: &Path| {
                let out = tempfile::tempdir().unwrap().keep();
                std::fs::write(out.join("key"), KEY).unwrap();
                mode(&out.join("key"), 0o400);
                symlink(&out, d.join("..data")).unwrap();
                symlink("..data/key", d.join("key")).unwrap();
            },
            Some("not a ..<stamp> folder"),
        ),
        (
            "..data pointing two folders down",
            |d: &Path| {
                std::fs::create_dir_all(d.join("..s/sub")).unwrap();
                std::fs::write(d.join("..s/sub/key"), KEY).unwrap();
                mode(&d.join("..s/sub/key"), 0o400);
                symlink("..s/sub", d.join("..data")).unwrap();
                symlink("..data/key", d.join("key")).unwrap();
            },
            Some("not a ..<stamp> folder"),
        ),
        (
            "..data a real folder",
            |d: &Path| {
                std::fs::create_dir(d.join("..data")).unwrap();
                std::fs::write(d.join("..data/key"), KEY).unwrap();
                mode(&d.join("..data/key"), 0o400);
                symlink("..data/key", d.join("key")).unwrap();
            },
            Some("..data is not a link"),
        ),
        (
            "the stamp's file itself a link",
            |d: &Path| {
                kubelet(d);
                let file = d.join("..2024_05_01_12_00_00.123456789/key");
                std::fs::remove_file(&file).unwrap();
                std::fs::write(d.join("real"), KEY).unwrap();
                mode(&d.join("real"), 0o400);
                symlink(d.join("real"), file).unwrap();
            },
            Some("a link"),
        ),
        (
            "the stamp's file a folder",
            |d: &Path| {
                kubelet(d);
                let file = d.join("..2024_05_01_12_00_00.123456789/key");
                std::fs::remove_file(&file).unwrap();
                std::fs::create_dir(&file).unwrap();
                mode(&file, 0o700);
            },
            Some("not a regular file"),
        ),
        (
            "a FIFO, refused without hanging",
            |d: &Path| {
                nix::unistd::mkfifo(&d.join("key"), nix::sys::stat::Mode::S_IRUSR).unwrap();
            },
            Some("not a regular file"),
        ),
        ("nothing there", |_: &Path| {}, Some("No such file")),
    ];

    /// Every shape a key file may take, and those it may not: a plain
    /// file, a kubelet's Secret links, and links of other shapes.
    #[test]
    fn key_file_shapes_table() {
        let me = nix::unistd::geteuid().as_raw();
        for (name, make, want) in SHAPES {
            let dir = tempfile::tempdir().unwrap();
            make(dir.path());
            let got = Key::load_owned_by(&dir.path().join("key"), me);
            match (got, want) {
                (Ok(key), None) => assert!(key.matches(KEY), "{name}"),
                (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{name}: {e}"),
                (Ok(_), Some(w)) => panic!("{name}: taken, wanted {w:?}"),
                (Err(e), None) => panic!("{name}: {e}"),
            }
        }
        // Another owner's file, or link, is refused (root alone can make one).
        if me == 0 {
            let dir = tempfile::tempdir().unwrap();
            kubelet(dir.path());
            let link = dir.path().join("..data");
            std::os::unix::fs::lchown(&link, Some(1000), Some(1000)).unwrap();
            let e = Key::load(&dir.path().join("key"))
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("uid 1000's, not root's"), "{e}");
            let dir = tempfile::tempdir().unwrap();
            kubelet(dir.path());
            let file = dir.path().join("..data/key");
            std::os::unix::fs::chown(&file, Some(1000), None).unwrap();
            let e = Key::load(&dir.path().join("key"))
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("must be root's"), "{e}");
        }
    }
}

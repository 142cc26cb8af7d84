//! The machine's key: what a client on the host socket must present in its
//! hello, where the socket's peer cannot be known by its uid (a socket in a
//! folder lent to the host, reached from outside the machine).

use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A key shorter than this is refused: it would be guessable.
pub const MIN_LEN: usize = 32;

pub struct Key {
    digest: [u8; 32],
}

impl Key {
    /// Reads the key file: root's, readable by nobody else, at least
    /// `MIN_LEN` characters (surrounding whitespace is not part of it).
    pub fn load(path: &Path) -> Result<Key, String> {
        let meta = std::fs::symlink_metadata(path)
            .map_err(|e| format!("key file {}: {e}", path.display()))?;
        if !meta.file_type().is_file() {
            return Err(format!("key file {}: not a regular file", path.display()));
        }
        if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
            return Err(format!(
                "key file {}: must be root's and mode 0600 or 0400 (is uid {}, mode {:o})",
                path.display(),
                meta.uid(),
                meta.mode() & 0o777
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("key file {}: {e}", path.display()))?;
        Key::from_text(text.trim()).map_err(|e| format!("key file {}: {e}", path.display()))
    }

    pub fn from_text(key: &str) -> Result<Key, String> {
        if key.len() < MIN_LEN {
            return Err(format!("a key has at least {MIN_LEN} characters"));
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
}

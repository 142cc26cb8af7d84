//! What `up` has learnt of podman's images, kept beside the machines'
//! state folders (`images-seen.json`), so that the first `up` of a new
//! machine asks the engine nothing before its `run`: each engine call is
//! a process of the engine's, and the one inspect this saves was a fifth
//! of a new machine's `up`.
//!
//! Two things are kept, neither of which can go stale unseen: where the
//! engine's image list is (its `images.json`, read each time for the id
//! of an image's name, as `kept.rs` reads it), and each image's
//! entrypoint by the image's id (an id names the image's content, so its
//! entrypoint never changes). A file that does not read, or an image not
//! in it, leaves `up` asking the engine as before. What is kept is a
//! cache: two `up`s writing it at once may lose one's addition, which
//! costs the next `up` one inspect.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE: &str = "images-seen.json";

/// Entrypoints kept at most (an owner's images; the oldest id goes).
const MOST: usize = 64;

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The engine's image list.
    pub store: Option<PathBuf>,
    /// Each image's id and its entrypoint as JSON text, oldest first.
    pub entrypoints: Vec<(String, String)>,
}

impl Seen {
    /// The id and entrypoint of the image `name`, when the engine's image
    /// list holds the name exactly once and its entrypoint was learnt.
    pub fn image(&self, name: &str) -> Option<(String, String)> {
        let id = super::kept::id_in(self.store.as_deref()?, name)?;
        let (_, entrypoint) = self.entrypoints.iter().find(|(i, _)| *i == id)?;
        Some((id, entrypoint.clone()))
    }

    /// Pure: learns the store and an image's entrypoint; true when that
    /// changed anything.
    pub fn learn(&mut self, store: Option<&Path>, image: Option<(&str, &str)>) -> bool {
        let mut changed = false;
        if let Some(store) = store.filter(|s| self.store.as_deref() != Some(*s)) {
            self.store = Some(store.to_path_buf());
            changed = true;
        }
        if let Some((id, entrypoint)) = image {
            if !self
                .entrypoints
                .iter()
                .any(|(i, e)| i == id && e == entrypoint)
            {
                self.entrypoints.retain(|(i, _)| i != id);
                self.entrypoints
                    .push((id.to_string(), entrypoint.to_string()));
                changed = true;
            }
        }
        let over = self.entrypoints.len().saturating_sub(MOST);
        self.entrypoints.drain(..over);
        changed
    }
}

/// Where it is kept: beside the machines' state folders.
fn path() -> Option<PathBuf> {
    let root = super::this_host::state_root().ok()?;
    Some(root.parent()?.join(FILE))
}

/// What was kept; nothing when it does not read.
pub fn load() -> Seen {
    path()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|text| serde_json::from_slice(&text).ok())
        .unwrap_or_default()
}

/// Learns the store and an image's entrypoint; written (whole, never
/// read half-written) only when that changed anything.
pub fn learn(store: Option<&Path>, image: Option<(&str, &str)>) {
    let Some(path) = path() else { return };
    let mut seen = load();
    if seen.learn(store, image) {
        let otherwise = "the next new machine's `up` asks the engine";
        super::kept::write_or_say(&path, &seen, otherwise);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_what_changed_and_keeps_the_newest() {
        let store = Path::new("/var/lib/containers/storage/overlay-images/images.json");
        type Case<'a> = (Option<&'a Path>, Option<(&'a str, &'a str)>, bool);
        let cases: &[Case] = &[
            (Some(store), None, true),
            (Some(store), None, false),
            (None, Some(("a", "[\"/warden\"]")), true),
            (Some(store), Some(("a", "[\"/warden\"]")), false),
            (None, Some(("a", "null")), true),
        ];
        let mut seen = Seen::default();
        for (i, (s, image, changed)) in cases.iter().enumerate() {
            assert_eq!(seen.learn(*s, *image), *changed, "case {i}");
        }
        let entry = |id: &str| seen.entrypoints.iter().find(|(i, _)| i == id).cloned();
        assert_eq!(entry("a"), Some(("a".into(), "null".into())));
        for n in 0..MOST + 3 {
            seen.learn(None, Some((&format!("id{n}"), "null")));
        }
        let entry = |id: &str| seen.entrypoints.iter().any(|(i, _)| i == id);
        assert_eq!(seen.entrypoints.len(), MOST);
        assert!(!entry("a") && !entry("id2") && entry("id3"));
    }

    #[test]
    fn an_image_is_known_by_the_stores_list_and_its_learnt_entrypoint() {
        let dir = std::env::temp_dir().join(format!("warden-seen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = dir.join("images.json");
        std::fs::write(
            &store,
            r#"[{"id":"abc","names":["localhost/warden-machine:latest"]},{"id":"def","names":["localhost/other:latest"]}]"#,
        )
        .unwrap();
        let mut seen = Seen::default();
        seen.learn(Some(&store), Some(("abc", "[\"/usr/local/bin/warden\"]")));
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            (
                "localhost/warden-machine:latest",
                Some(("abc", "[\"/usr/local/bin/warden\"]")),
            ),
            (
                "localhost/warden-machine",
                Some(("abc", "[\"/usr/local/bin/warden\"]")),
            ),
            // In the list, its entrypoint never learnt.
            ("localhost/other:latest", None),
            // A short name is resolved by the engine's own rules.
            ("warden-machine", None),
            ("localhost/missing:latest", None),
        ];
        for (name, want) in cases {
            let got = seen.image(name);
            let want = want.map(|(i, e)| (i.to_string(), e.to_string()));
            assert_eq!(got, want, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

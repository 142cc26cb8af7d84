//! The record a container machine's `up` leaves in its state folder
//! (`kept.json`), so that the next `up` of the same, unchanged machine
//! asks the engine nothing before starting it: each engine call is a
//! process of the engine's (tens of milliseconds here), as much as a
//! third of what `podman start` itself costs.
//!
//! The record names the container by its id, not its name: a container's
//! configuration (and with it its `warden.inputs` label) never changes
//! after it is made, so starting that id starts exactly the machine the
//! record describes, or fails when it is gone. The image's id is read
//! from the engine's own image list (podman's `images.json`, written
//! whole and renamed, so never seen half-written); a name the list does
//! not hold exactly, a file that does not read, or an image that moved
//! leaves the record unused, and `up` asks the engine as before.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE: &str = "kept.json";

/// What the last `up` of a container machine saw of its container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The container's id.
    pub container: String,
    /// The image's name as the engine resolved it (`host/name:tag`).
    pub image_name: String,
    /// The container's inputs digest (its `warden.inputs` label).
    pub inputs: String,
    /// The engine's image list, where the image's id is looked up.
    pub store: PathBuf,
    /// The container's size as `up` says it, when the engine holds one.
    pub size: Option<String>,
}

/// The record of the machine in `state`, when one reads.
pub fn load(state: &Path) -> Option<Record> {
    let text = std::fs::read(state.join(FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Keeps `record` for the next `up`. A record that cannot be written only
/// costs the next `up` its engine calls, so failing to write is said,
/// never fatal.
pub fn save(state: &Path, record: &Record) {
    write_or_say(&state.join(FILE), record, "the next `up` asks the engine");
}

/// Writes `value` as JSON at `path`, whole (a file of this process's
/// beside it, then renamed, so another `up` never reads it half-written);
/// a failure is said with what it costs (`otherwise`), never fatal.
pub(super) fn write_or_say<T: serde::Serialize>(path: &Path, value: &T, otherwise: &str) {
    let part = path.with_extension(format!("new.{}", std::process::id()));
    let written = serde_json::to_vec(value)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&part, bytes))
        .and_then(|()| std::fs::rename(&part, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&part);
        eprintln!("warden: {}: not written ({e}); {otherwise}", path.display());
    }
}

/// Forgets the record (its container was removed or replaced).
pub fn forget(state: &Path) {
    let _ = std::fs::remove_file(state.join(FILE));
}

/// The id of the image `name` (as a definition names it) in `record`'s
/// image list, when the name is the one the record's container was made
/// from and the list holds it exactly.
pub fn image_id(record: &Record, name: &str) -> Option<String> {
    let name = qualified(name)?;
    (name == record.image_name).then_some(())?;
    read_id(&record.store, &name)
}

/// The id of the image `name` in the engine's image list `store`, when
/// the name is fully qualified and the list holds it exactly once.
pub fn id_in(store: &Path, name: &str) -> Option<String> {
    read_id(store, &qualified(name)?)
}

/// The id of the image of the qualified `name` in the list `store`.
fn read_id(store: &Path, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(store).ok()?;
    id_in_store(&text, name)
}

/// Pure: a fully qualified image name with its tag (`:latest` when none is
/// given); None for a short name (the engine resolves those by its own
/// search rules, which the record does not repeat) or a digest reference.
pub fn qualified(name: &str) -> Option<String> {
    if name.contains('@') {
        return None;
    }
    let (host, rest) = name.split_once('/')?;
    let is_host = host == "localhost" || host.contains('.') || host.contains(':');
    if !is_host || rest.is_empty() {
        return None;
    }
    let last = rest.rsplit('/').next().unwrap_or(rest);
    Some(match last.contains(':') {
        true => name.to_string(),
        false => format!("{name}:latest"),
    })
}

/// Pure: in podman's image list (a JSON array of `{"id", "names"}`), the
/// id of the one image named `name`; None when none or several are.
pub fn id_in_store(text: &str, name: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Entry {
        id: String,
        #[serde(default)]
        names: Vec<String>,
    }
    let entries: Vec<Entry> = serde_json::from_str(text).ok()?;
    let mut named = entries
        .into_iter()
        .filter(|e| e.names.iter().any(|n| n == name));
    let one = named.next()?;
    named.next().is_none().then_some(one.id)
}

/// Pure: podman's image list, from a container's `StaticDir`
/// (`<root>/<driver>-containers/<id>/userdata`) and its storage driver.
pub fn store_of(static_dir: &str, driver: &str, id: &str) -> Option<PathBuf> {
    let tail = format!("/{driver}-containers/{id}/userdata");
    let root = static_dir.strip_suffix(&tail)?;
    let ok = |s: &str| !s.is_empty() && !s.contains('/') && s != "..";
    if !root.starts_with('/') || !ok(driver) || !ok(id) {
        return None;
    }
    Some(PathBuf::from(format!("{root}/{driver}-images/images.json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "localhost/warden-machine",
                Some("localhost/warden-machine:latest"),
            ),
            (
                "localhost/warden-demo:latest",
                Some("localhost/warden-demo:latest"),
            ),
            (
                "registry.example:5000/team/agent",
                Some("registry.example:5000/team/agent:latest"),
            ),
            (
                "registry.example:5000/team/agent:v2",
                Some("registry.example:5000/team/agent:v2"),
            ),
            (
                "mirror.example/library/debian:bookworm",
                Some("mirror.example/library/debian:bookworm"),
            ),
            // Short names: the engine's search rules decide what they mean.
            ("debian", None),
            ("debian:bookworm", None),
            ("library/debian", None),
            // A digest reference is not a tag the list names.
            ("localhost/x@sha256:abcd", None),
            ("localhost/", None),
        ];
        for (name, want) in cases {
            assert_eq!(qualified(name).as_deref(), *want, "{name}");
        }
    }

    #[test]
    fn ids_in_the_store() {
        let store = r#"[
            {"id":"aaa","names":["localhost/warden-machine:latest"],"layer":"x"},
            {"id":"bbb","digest":"sha256:1"},
            {"id":"ccc","names":["localhost/two:latest","localhost/other:1"]},
            {"id":"ddd","names":["localhost/two:latest"]}
        ]"#;
        let cases: &[(&str, &str, Option<&str>)] = &[
            (store, "localhost/warden-machine:latest", Some("aaa")),
            (store, "localhost/other:1", Some("ccc")),
            // Named twice: not trusted, the engine is asked.
            (store, "localhost/two:latest", None),
            (store, "localhost/absent:latest", None),
            (store, "localhost/warden-machine", None),
            ("[]", "localhost/warden-machine:latest", None),
            ("not json", "localhost/warden-machine:latest", None),
            (r#"{"id":"aaa"}"#, "localhost/warden-machine:latest", None),
        ];
        for (text, name, want) in cases {
            assert_eq!(
                id_in_store(text, name).as_deref(),
                *want,
                "{name} in {text}"
            );
        }
    }

    #[test]
    fn stores_of_containers() {
        let root = "/var/lib/containers/storage";
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            (
                "/var/lib/containers/storage/overlay-containers/f00/userdata",
                "overlay",
                "f00",
                Some("/var/lib/containers/storage/overlay-images/images.json"),
            ),
            (
                "/home/o/.local/share/containers/storage/vfs-containers/f00/userdata",
                "vfs",
                "f00",
                Some("/home/o/.local/share/containers/storage/vfs-images/images.json"),
            ),
            // Another container's folder, a relative root, an odd driver.
            (
                &format!("{root}/overlay-containers/bar/userdata"),
                "overlay",
                "f00",
                None,
            ),
            (
                "storage/overlay-containers/f00/userdata",
                "overlay",
                "f00",
                None,
            ),
            (
                &format!("{root}/../overlay-containers/f00/userdata"),
                "..",
                "f00",
                None,
            ),
            ("", "overlay", "f00", None),
        ];
        for (dir, driver, id, want) in cases {
            let got = store_of(dir, driver, id);
            assert_eq!(got.as_deref(), want.map(Path::new), "{dir}");
        }
    }

    #[test]
    fn records_read_back_and_a_bad_one_is_none() {
        let dir = std::env::temp_dir().join(format!("warden-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let record = Record {
            container: "f00".into(),
            image_name: "localhost/warden-machine:latest".into(),
            inputs: "d1".into(),
            store: dir.join("images.json"),
            size: Some("cpus 2".into()),
        };
        save(&dir, &record);
        assert_eq!(load(&dir), Some(record.clone()));
        std::fs::write(
            &record.store,
            r#"[{"id":"aaa","names":["localhost/warden-machine:latest"]}]"#,
        )
        .unwrap();
        assert_eq!(
            image_id(&record, "localhost/warden-machine").as_deref(),
            Some("aaa")
        );
        // Another name than the record's: the record says nothing of it.
        assert_eq!(image_id(&record, "localhost/other"), None);
        std::fs::write(dir.join(FILE), "{").unwrap();
        assert_eq!(load(&dir), None);
        forget(&dir);
        assert_eq!(load(&dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

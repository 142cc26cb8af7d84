//! What `up` knows of a machine's existing container: what the engine
//! holds of it (one inspect, or the combined one's answer), or, for a
//! machine whose record `up` kept, its container woken by its id (or
//! found running, its warden answering) with no engine call to ask.

use crate::host::agent_setup::{said_size, SIZE_FORMAT};
use crate::host::engine;
use crate::host::kept;
use crate::host::state::{key, socket, state_dir};
use crate::host::step;
use crate::wire::client::Client;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `up` needs of an existing container (each engine call starts a
/// process of the engine's, tens of milliseconds here): its inputs digest,
/// whether it runs, its size for people, and what the next `up` keeps of
/// it (`kept.rs`).
pub(super) struct Found {
    pub(super) inputs: String,
    pub(super) running: bool,
    pub(super) size: Option<String>,
    /// The container's id, its image's name as the engine resolved it,
    /// and the engine's image list.
    pub(super) id: String,
    pub(super) image_name: String,
    pub(super) store: Option<PathBuf>,
}

impl Found {
    /// The record the next `up` starts from, when this container is the
    /// one `digest` describes and the engine's image list was found.
    pub(super) fn record(&self, digest: &str) -> Option<kept::Record> {
        (self.inputs == digest).then_some(())?;
        Some(kept::Record {
            container: self.id.clone(),
            image_name: self.image_name.clone(),
            inputs: self.inputs.clone(),
            store: self.store.clone()?,
            size: self.size.clone(),
        })
    }
}

/// One inspect; None when there is no such container.
pub(super) fn found(name: &str) -> Option<Found> {
    let format = format!(
        "{{{{index .Config.Labels \"warden.inputs\"}}}}\t{{{{.State.Running}}}}\t{{{{.Id}}}}\t{{{{.ImageName}}}}\t{{{{.StaticDir}}}}\t{{{{.Driver}}}}\t{SIZE_FORMAT}"
    );
    let out = engine::run(
        "inspect",
        &["container", "inspect", "--format", &format, name],
    )
    .ok()?;
    found_in_line(&out)
}

/// Pure: the same, from the line `found`'s format gives.
fn found_in_line(out: &str) -> Option<Found> {
    let mut parts = out.trim_end().splitn(7, '\t').map(str::trim);
    let inputs = parts.next()?.to_string();
    let running = parts.next()? == "true";
    let (id, image_name) = (parts.next()?.to_string(), parts.next()?.to_string());
    let (static_dir, driver) = (parts.next()?, parts.next()?);
    Some(Found {
        inputs,
        running,
        size: said_size(parts.next()?),
        store: kept::store_of(static_dir, driver, &id),
        id,
        image_name,
    })
}

/// Pure: the same, from the container's inspect as JSON.
pub(super) fn found_in(inspect: &serde_json::Value) -> Option<Found> {
    let limits = &inspect["HostConfig"];
    let number = |key: &str| limits[key].as_i64().unwrap_or(0);
    let size = format!(
        "{} {} {}",
        number("NanoCpus"),
        number("Memory"),
        number("PidsLimit")
    );
    let text = |key: &str| inspect[key].as_str().unwrap_or("").to_string();
    let id = text("Id");
    Some(Found {
        inputs: inspect["Config"]["Labels"]["warden.inputs"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        running: inspect["State"]["Running"].as_bool()?,
        size: said_size(&size),
        store: kept::store_of(&text("StaticDir"), &text("Driver"), &id),
        id,
        image_name: text("ImageName"),
    })
}

/// Starts the container the record names, by its id (whose labels and
/// mounts never change after it is made), unless its warden answers
/// already; None when it is gone or does not start (said, with the
/// engine's words), and `up` asks the engine the long way.
pub(super) fn wake(record: &kept::Record, id: &str, name: &str, start: Instant) -> Option<Found> {
    if answers_now(id) {
        step(start, &format!("{name}: running, its warden answers"));
    } else if let Err(e) = engine::run("start", &["start", &record.container]) {
        let why = format!("{name}: its recorded container did not start ({e}); asking the engine");
        step(start, &why);
        return None;
    } else {
        step(start, &format!("{name}: started by its id, as recorded"));
    }
    Some(Found {
        inputs: record.inputs.clone(),
        running: true,
        size: record.size.clone(),
        id: record.container.clone(),
        image_name: record.image_name.clone(),
        store: Some(record.store.clone()),
    })
}

/// Whether the machine's warden answers a keyed hello now (then its
/// container runs, and `start` would be an engine call for nothing). A
/// machine marked frozen does not: its hello would wait for the thaw.
fn answers_now(id: &str) -> bool {
    if super::serve::frozen(&state_dir(id)) {
        return false;
    }
    let Ok(key) = key(id) else {
        return false;
    };
    let Ok(stream) = std::os::unix::net::UnixStream::connect(socket(id)) else {
        return false;
    };
    let bound = Some(Duration::from_secs(1));
    if stream.set_read_timeout(bound).is_err() || stream.set_write_timeout(bound).is_err() {
        return false;
    }
    Client::over(stream, Some(&key)).is_ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn what_up_needs_is_read_from_the_containers_inspect() {
        let podman = json!({
            "Config": {"Labels": {"warden.inputs": "d1"}},
            "State": {"Running": true},
            "HostConfig": {"NanoCpus": 1_500_000_000i64, "Memory": 536_870_912i64, "PidsLimit": 256},
        });
        let found = super::found_in(&podman).unwrap();
        assert_eq!((found.inputs.as_str(), found.running), ("d1", true));
        assert_eq!(
            found.size.as_deref(),
            Some("cpus 1.5, memory 512 MiB, processes 256")
        );
        // Docker says null for no limit, and a container made elsewhere
        // has no inputs label: it differs from every digest.
        let docker = json!({
            "Config": {"Labels": null},
            "State": {"Running": false},
            "HostConfig": {"NanoCpus": 0, "Memory": 0, "PidsLimit": null},
        });
        let found = super::found_in(&docker).unwrap();
        assert_eq!((found.inputs.as_str(), found.running), ("", false));
        assert_eq!(
            found.size.as_deref(),
            Some("cpus unlimited, memory unlimited, processes unlimited")
        );
        assert!(super::found_in(&json!({"Id": "x"})).is_none());
    }
}

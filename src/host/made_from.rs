//! What a machine was made from, kept in its state folder when its
//! container is made (the definition as written, the image's id, warden's
//! version), so that the next `up` that makes it again can say why: which
//! fields of the definition changed, or that the image or warden did.
//! A container is not made again for the fields its warden reads again
//! (`RELOADED`): those reach the running machine through `reload`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

const FILE: &str = "made-from.json";

/// The definition's fields a running container's warden takes again at
/// `reload` (network.json's hosts, limits.json, machine.json's idle stop):
/// a change of them alone does not make the container again.
pub const RELOADED: [&str; 3] = ["hosts", "idle_stop_minutes", "limits"];

/// Pure: the part of a definition's text that makes a container (its
/// JSON without the `RELOADED` fields); a VM's or a pod's is all of it
/// (their files are on a disk, or in a manifest, made with them).
pub fn counted(text: &str, reloads: bool) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut fields)) if reloads => {
            for name in RELOADED {
                fields.remove(name);
            }
            Value::Object(fields).to_string()
        }
        _ => text.to_string(),
    }
}

/// Pure: the `RELOADED` fields that differ between what the machine was
/// last made or reloaded from and now (all of them present in either when
/// that is not known), sorted.
pub fn reloaded(old: Option<&MadeFrom>, new: &MadeFrom) -> Vec<String> {
    let null = Value::Null;
    let old = old.map_or(&null, |o| &o.definition);
    let unknown = old.is_null();
    changed_fields(old, &new.definition)
        .into_iter()
        .chain(
            RELOADED
                .iter()
                .filter(|f| unknown && new.definition.get(**f).is_some())
                .map(|f| f.to_string()),
        )
        .filter(|f| RELOADED.contains(&f.as_str()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The inputs of one machine as made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MadeFrom {
    /// The definition as parsed JSON (it holds key names, never values).
    pub definition: Value,
    pub image: String,
    pub warden: String,
}

impl MadeFrom {
    pub fn now(definition_text: &str, image_id: &str) -> MadeFrom {
        MadeFrom {
            definition: serde_json::from_str(definition_text).unwrap_or(Value::Null),
            image: image_id.to_string(),
            warden: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// What the machine in `state` was last made from, if warden kept it.
pub fn load(state: &Path) -> Option<MadeFrom> {
    serde_json::from_slice(&std::fs::read(state.join(FILE)).ok()?).ok()
}

/// Keeps what the machine was made from; a failure to write costs only the
/// next remake its reason, and is said.
pub fn keep(state: &Path, made: &MadeFrom) {
    let otherwise = "the next `up` that makes the machine again cannot say why";
    super::kept::write_or_say(&state.join(FILE), made, otherwise);
}

/// Pure: why a machine made from `old` is made again from `new`, one
/// phrase per reason (the definition's changed fields by name, first).
pub fn why_again(old: Option<&MadeFrom>, new: &MadeFrom) -> String {
    let Some(old) = old else {
        return "its inputs changed (it was made before warden kept what from)".to_string();
    };
    let mut reasons = Vec::new();
    let fields = changed_fields(&old.definition, &new.definition);
    if !fields.is_empty() {
        reasons.push(format!("the definition's {} changed", fields.join(", ")));
    }
    if old.image != new.image {
        reasons.push(format!(
            "its image changed ({} -> {})",
            short(&old.image),
            short(&new.image)
        ));
    }
    if old.warden != new.warden {
        reasons.push(format!("warden changed ({} -> {})", old.warden, new.warden));
    }
    match reasons.is_empty() {
        true => "the container there is not the one warden made from these inputs".to_string(),
        false => reasons.join("; "),
    }
}

/// The top-level fields whose values differ (added or removed ones too),
/// sorted.
fn changed_fields(old: &Value, new: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| old.get(*name) != new.get(*name))
        .map(|name| name.to_string())
        .collect()
}

fn short(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn made(definition: Value, image: &str, warden: &str) -> MadeFrom {
        MadeFrom {
            definition,
            image: image.into(),
            warden: warden.into(),
        }
    }

    #[test]
    fn the_reason_names_what_changed() {
        let base = json!({"id": "a", "image": "x", "idle_stop_minutes": 5, "hosts": ["a.com"]});
        let cases = [
            (
                made(
                    json!({"id": "a", "image": "x", "idle_stop_minutes": 30, "hosts": ["a.com"]}),
                    "i1",
                    "0.1.0",
                ),
                "the definition's idle_stop_minutes changed",
            ),
            (
                made(
                    json!({"id": "a", "image": "x", "hosts": ["b.com"], "cpus": 2}),
                    "i1",
                    "0.1.0",
                ),
                "the definition's cpus, hosts, idle_stop_minutes changed",
            ),
            (
                made(base.clone(), "sha256:0123456789abcdef", "0.1.0"),
                "its image changed (i1 -> 0123456789ab)",
            ),
            (
                made(base.clone(), "i1", "0.2.0"),
                "warden changed (0.1.0 -> 0.2.0)",
            ),
            (
                made(base.clone(), "i1", "0.1.0"),
                "the container there is not the one warden made from these inputs",
            ),
        ];
        let old = made(base.clone(), "i1", "0.1.0");
        for (new, want) in cases {
            assert_eq!(why_again(Some(&old), &new), want);
        }
        assert!(why_again(None, &old).starts_with("its inputs changed (it was made before"));
    }

    #[test]
    fn only_the_reloaded_fields_leave_the_count() {
        let text = r#"{"id": "a", "hosts": ["a.com"], "limits": {"timeout_ms": 5}, "idle_stop_minutes": 3, "env": {"X": "1"}}"#;
        let other = r#"{"env": {"X": "1"}, "id": "a", "hosts": ["b.com"], "idle_stop_minutes": 9}"#;
        assert_eq!(counted(text, true), counted(other, true));
        assert_eq!(counted(text, true), r#"{"env":{"X":"1"},"id":"a"}"#);
        let env = r#"{"id": "a", "hosts": ["a.com"], "env": {"X": "2"}}"#;
        assert_ne!(counted(text, true), counted(env, true));
        // A VM's or a pod's: every byte counts.
        assert_eq!(counted(text, false), text);
        assert_eq!(counted("not json", true), "not json");
    }

    #[test]
    fn the_reloaded_fields_that_changed_are_named() {
        let was = made(
            json!({"id": "a", "hosts": ["a.com"], "limits": {"timeout_ms": 5}}),
            "i",
            "v",
        );
        let cases = [
            (
                json!({"id": "a", "hosts": ["a.com"], "limits": {"timeout_ms": 5}}),
                vec![],
            ),
            (
                json!({"id": "a", "hosts": ["b.com"], "limits": {"timeout_ms": 5}}),
                vec!["hosts"],
            ),
            (
                json!({"id": "a", "hosts": ["a.com"], "idle_stop_minutes": 2}),
                vec!["idle_stop_minutes", "limits"],
            ),
            (
                json!({"id": "b", "hosts": ["a.com"], "limits": {"timeout_ms": 5}, "env": {}}),
                vec![],
            ),
        ];
        for (now, want) in cases {
            assert_eq!(
                reloaded(Some(&was), &made(now.clone(), "i", "v")),
                want,
                "{now}"
            );
        }
        // Not known what it was made from: every reloaded field it has.
        let now = made(json!({"id": "a", "limits": {}, "hosts": []}), "i", "v");
        assert_eq!(reloaded(None, &now), vec!["hosts", "limits"]);
    }

    #[test]
    fn what_it_was_made_from_is_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()), None);
        let made = MadeFrom::now(r#"{"id": "a"}"#, "i1");
        keep(dir.path(), &made);
        assert_eq!(load(dir.path()), Some(made));
    }
}

//! What a machine was made from, kept in its state folder when its
//! container is made (the definition as written, the image's id, warden's
//! version), so that the next `up` that makes it again can say why: which
//! fields of the definition changed, or that the image or warden did.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

const FILE: &str = "made-from.json";

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
    fn what_it_was_made_from_is_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()), None);
        let made = MadeFrom::now(r#"{"id": "a"}"#, "i1");
        keep(dir.path(), &made);
        assert_eq!(load(dir.path()), Some(made));
    }
}

//! The audit log as every reader sees it, the guest's writer and the
//! host's copies alike: the chain's pure half (sealing a line, its hash
//! over its own bytes linked to the line before; checking lines and whole
//! logs, the owner's anchor, describing a line for people) and the log's
//! files in chain order. Nothing here writes a file (the writer is
//! `guest::audit`).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The `prev` of a log's first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The current file of a log, in its folder.
pub const FILE_NAME: &str = "warden.jsonl";

pub struct Sealed {
    pub text: String,
    pub hash: String,
}

/// Pure: builds the line for an event and its hash.
pub fn seal(seq: u64, time: &str, kind: &str, fields: Value, prev: &str) -> Sealed {
    let mut obj = Map::new();
    obj.insert("seq".into(), seq.into());
    obj.insert("time".into(), time.into());
    obj.insert("kind".into(), kind.into());
    if let Value::Object(extra) = fields {
        for (k, v) in extra {
            if !matches!(k.as_str(), "seq" | "time" | "kind" | "prev" | "hash") {
                obj.insert(k, v);
            }
        }
    }
    obj.insert("prev".into(), prev.into());
    let body = Value::Object(obj).to_string();
    let hash = hex(&Sha256::digest(body.as_bytes()));
    let text = format!("{},\"hash\":\"{hash}\"}}\n", &body[..body.len() - 1]);
    Sealed { text, hash }
}

/// Pure: checks one line against the previous hash; returns its hash.
pub fn check_line(line: &str, prev: &str) -> Result<String, String> {
    const TAIL: usize = ",\"hash\":\"\"}".len() + 64;
    if line.len() < TAIL + 2 || !line.is_char_boundary(line.len() - TAIL) {
        return Err("line too short to carry a hash".into());
    }
    let (body_open, tail) = line.split_at(line.len() - TAIL);
    let hash = tail
        .strip_prefix(",\"hash\":\"")
        .and_then(|t| t.strip_suffix("\"}"))
        .ok_or("line does not end with its hash")?;
    let body = format!("{body_open}}}");
    if hex(&Sha256::digest(body.as_bytes())) != hash {
        return Err("hash does not match the line's content".into());
    }
    let value: Value = serde_json::from_str(&body).map_err(|e| format!("not JSON: {e}"))?;
    match value.get("prev").and_then(Value::as_str) {
        Some(p) if p == prev => Ok(hash.to_string()),
        Some(_) => Err("prev does not name the previous line's hash".into()),
        None => Err("no prev field".into()),
    }
}

/// Where a chain breaks: the 1-based line and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub line: usize,
    pub reason: String,
}

/// Pure: checks every line of one file. `prev` is the hash its first line
/// must name (the previous file's last); None accepts the first line's own
/// `prev`, except that a log starting at seq 1 must start from genesis.
/// Returns how many lines were checked and the last hash.
pub fn verify_text(text: &str, prev: Option<&str>) -> Result<(usize, String), Break> {
    let mut expected_prev = prev.map(String::from);
    let mut expected_seq: Option<u64> = None;
    let mut count = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let line_no = count + 1;
        let broke = |reason: String| Break {
            line: line_no,
            reason,
        };
        let Some((line, after)) = rest.split_once('\n') else {
            return Err(broke(
                "the last line is incomplete (torn by a crash, or cut)".into(),
            ));
        };
        rest = after;
        let value: Value =
            serde_json::from_str(line).map_err(|e| broke(format!("not JSON: {e}")))?;
        let seq = value
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| broke("no seq".into()))?;
        if let Some(want) = expected_seq {
            if seq != want {
                return Err(broke(format!(
                    "seq {seq} where {want} was due: a line is missing or moved"
                )));
            }
        }
        let named = value
            .get("prev")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let want_prev = match &expected_prev {
            Some(p) => p.clone(),
            None if seq == 1 => GENESIS.to_string(),
            None => named,
        };
        let hash = check_line(line, &want_prev).map_err(broke)?;
        expected_prev = Some(hash);
        expected_seq = Some(seq + 1);
        count += 1;
    }
    let last = expected_prev
        .or(prev.map(String::from))
        .unwrap_or_else(|| GENESIS.to_string());
    Ok((count, last))
}

/// Checks files in order, as one chain (each continues the one before).
/// Returns the number of lines and the last hash, or the first break.
pub fn verify_files(paths: &[PathBuf]) -> Result<(usize, String), (PathBuf, Break)> {
    let mut prev: Option<String> = None;
    let mut total = 0;
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| {
            (
                path.clone(),
                Break {
                    line: 0,
                    reason: format!("cannot read: {e}"),
                },
            )
        })?;
        let (count, last) = verify_text(&text, prev.as_deref()).map_err(|b| (path.clone(), b))?;
        total += count;
        prev = Some(last);
    }
    Ok((total, prev.unwrap_or_else(|| GENESIS.to_string())))
}

/// The last line an owner verified, kept on the host: a later copy of the
/// log must still hold that line, with the same hash. The chain alone shows
/// an edit; only an anchor kept elsewhere shows that the end was cut off,
/// or the whole log replaced by another valid chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Anchor {
    pub seq: u64,
    pub hash: String,
}

/// How a log stands against an anchor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnchorCheck {
    /// The anchored line is there, unchanged.
    Holds,
    /// Rotation dropped the file that held it: the oldest line kept is
    /// `oldest`. Nothing can be said about the lines before.
    RotatedAway { oldest: u64 },
    /// The log ends before the anchored line: it was cut.
    Cut { last: u64 },
    /// A line with the anchored number has another hash: the log was
    /// rewritten from there (or replaced).
    Rewritten,
}

/// Pure: the (seq, hash) of every line of `text` that has them.
fn sequence(text: &str) -> impl Iterator<Item = (u64, String)> + '_ {
    text.lines().filter_map(|line| {
        let v: Value = serde_json::from_str(line).ok()?;
        Some((
            v.get("seq")?.as_u64()?,
            v.get("hash")?.as_str()?.to_string(),
        ))
    })
}

/// Pure: checks the texts of a log's files, in chain order, against an
/// anchor, and returns the check and the new anchor (the last line).
pub fn check_anchor(texts: &[String], anchor: Option<&Anchor>) -> (AnchorCheck, Option<Anchor>) {
    let mut oldest = None;
    let mut last = None;
    let mut found = None;
    for text in texts {
        for (seq, hash) in sequence(text) {
            oldest.get_or_insert(seq);
            if anchor.is_some_and(|a| a.seq == seq) {
                found = Some(hash.clone());
            }
            last = Some(Anchor { seq, hash });
        }
    }
    let check = match (anchor, found) {
        (None, _) => AnchorCheck::Holds,
        (Some(a), Some(hash)) if hash == a.hash => AnchorCheck::Holds,
        (Some(_), Some(_)) => AnchorCheck::Rewritten,
        (Some(a), None) => match (oldest, &last) {
            (Some(oldest), _) if a.seq < oldest => AnchorCheck::RotatedAway { oldest },
            (_, Some(l)) => AnchorCheck::Cut { last: l.seq },
            (_, None) => AnchorCheck::Cut { last: 0 },
        },
    };
    (check, last)
}

/// Pure: one line for people: `#seq time kind key=value ...`, without the
/// chain's fields; None for a line that is not an audit event.
pub fn describe(line: &str) -> Option<(String, String)> {
    let Value::Object(mut fields) = serde_json::from_str(line).ok()? else {
        return None;
    };
    let seq = fields.remove("seq")?;
    let time = fields.remove("time")?;
    let kind = fields.remove("kind")?.as_str()?.to_string();
    fields.remove("prev");
    fields.remove("hash");
    let rest: Vec<String> = fields
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={}", crate::shared::printable::escape_controls(s)),
            other => format!("{k}={other}"),
        })
        .collect();
    let time = time.as_str().unwrap_or_default().to_string();
    Some((
        kind.clone(),
        format!("#{seq} {time} {kind} {}", rest.join(" ")),
    ))
}

/// Lower-case hex, as every digest warden writes is spelled.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The set-aside files of `dir`, oldest first (their names sort by the
/// sequence number of their first line).
pub fn rotated_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("warden-") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The first line's sequence number of a set-aside file, from its name.
pub fn first_seq_of(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_prefix("warden-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// Every file of the log in `dir`, in chain order: the set-aside ones, then
/// the current one.
pub fn log_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = rotated_files(dir)?;
    let current = dir.join(FILE_NAME);
    if current.exists() {
        files.push(current);
    }
    Ok(files)
}

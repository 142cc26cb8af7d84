//! The audit log: JSON lines, each chained to the one before by a SHA-256
//! hash, so an edited, removed or reordered line is detectable.
//!
//! A line is `{"seq":N,"time":"...","kind":"...",<fields>,"prev":"<hex>"}`
//! with `,"hash":"<hex>"` spliced in before the closing brace, where hash =
//! SHA-256 of the line as it was before the splice. Lines are written with
//! one write(2) each on an O_APPEND file, so a line is whole or absent.
//!
//! This is the writer, warden's alone. The chain's pure half and the
//! log's files, which the host's copies are read with too, are
//! `shared::audit_chain`; the kinds of event are `event`, what each
//! kind's line carries `payload`, the log read through the API `read`,
//! and the throttle that keeps floods of refusals out `throttle`.

mod event;
pub mod payload;
mod read;
pub mod throttle;
use crate::shared::audit_chain::*;
pub use event::Event;
pub use payload::Payload;
pub use read::Reader;

use crate::guest::audit::throttle::{Throttle, Verdict};
use crate::shared::redact::Redactor;
use serde_json::Value;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Audit {
    dir: PathBuf,
    path: PathBuf,
    state: Mutex<Chain>,
    /// Hides the machine's secrets in every line (none in unit tests).
    redactor: Option<Redactor>,
    rotation: Rotation,
    group: Option<u32>,
    /// The last write failed (a full disk): why.
    failing: Mutex<Option<String>>,
    /// Refusals from one source beyond a burst are counted, not written.
    throttle: Mutex<Throttle>,
}

/// Refusals of one kind from one source written whole per window; the
/// rest of the window's are one `suppressed` line with their count.
const REFUSAL_BURST: u32 = 20;
const REFUSAL_WINDOW: Duration = Duration::from_secs(10);

/// When the current file is set aside, and how many files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    /// All files together, the current one included (at least 2).
    pub max_files: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_bytes: 16 << 20,
            max_files: 8,
        }
    }
}

struct Chain {
    file: File,
    /// Bytes in the current file (every line in it is whole).
    len: u64,
    seq: u64,
    prev: String,
}

impl Audit {
    /// Opens (or makes) the log in `dir`, continuing the chain of what is
    /// already there. `group`, when given, is the group that may read it
    /// (the runtime's); the files are then root's.
    pub fn open(
        dir: &Path,
        group: Option<u32>,
        redactor: Option<Redactor>,
    ) -> std::io::Result<Audit> {
        Audit::open_with(dir, group, redactor, Rotation::default())
    }

    pub fn open_with(
        dir: &Path,
        group: Option<u32>,
        redactor: Option<Redactor>,
        rotation: Rotation,
    ) -> std::io::Result<Audit> {
        let path = dir.join(FILE_NAME);
        let mut file = open_log(&path, group)?;
        let len = drop_torn_tail(&mut file)?;
        // An empty current file continues the newest rotated one.
        let (seq, prev) = match last_link(&mut file)? {
            Some(link) => link,
            None => match rotated_files(dir)?.last() {
                Some(older) => {
                    last_link(&mut File::open(older)?)?.unwrap_or((0, GENESIS.to_string()))
                }
                None => (0, GENESIS.to_string()),
            },
        };
        Ok(Audit {
            dir: dir.to_path_buf(),
            path,
            state: Mutex::new(Chain {
                file,
                len,
                seq,
                prev,
            }),
            redactor,
            rotation,
            group,
            failing: Mutex::new(None),
            throttle: Mutex::new(Throttle::new(REFUSAL_BURST, REFUSAL_WINDOW)),
        })
    }

    /// `text` with the machine's secrets hidden (for errors sent out).
    pub fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.redactor {
            Some(r) => r.text(text),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hides `secrets` too (the credentials the proxy adds), as the
    /// runtime's keys are.
    pub fn hide_also(&self, secrets: Vec<String>) {
        if let Some(r) = &self.redactor {
            r.hide_also(secrets);
        }
    }

    /// Why the log cannot be written now (a full disk), if it cannot.
    pub fn failing(&self) -> Option<String> {
        self.failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// When writing failed, tries again (recording that it recovered);
    /// returns why it still cannot, if it cannot.
    pub fn retry(&self) -> Option<String> {
        let before = self.failing()?;
        self.record(&payload::AuditRecovered { after: before });
        self.failing()
    }

    /// Appends one event, whole or not at all. A failure never crashes
    /// warden: it is said on stderr and kept for `failing`.
    pub fn record<P: Payload + ?Sized>(&self, payload: &P) {
        self.record_seq(payload);
    }

    /// The same, returning the line's sequence number if it was written.
    pub fn record_seq<P: Payload + ?Sized>(&self, payload: &P) -> Option<u64> {
        self.write_counts(false);
        self.write(payload.event(), payload::fields_of(payload))
    }

    /// A refusal that anyone in the machine can cause at will (a wrong
    /// peer, a bad frame, a host not on the list): written whole up to a
    /// burst per window and `source`, then counted into one `suppressed`
    /// line, so a flood cannot push the owner's evidence out of rotation.
    pub fn record_refusal<P: Payload + ?Sized>(&self, source: &str, payload: &P) {
        self.refusal(payload.event(), source, payload::fields_of(payload));
    }

    /// A refusal counted by who asked, as `throttle::source_of` tells
    /// from its line (`via` the proxy or the connect gate); the runtime's
    /// always written whole.
    pub fn record_refusal_by<P: Payload + ?Sized>(&self, via: &str, runtime_uid: u32, payload: &P) {
        let fields = payload::fields_of(payload);
        match throttle::source_of(via, &fields, runtime_uid) {
            Some(source) => self.refusal(payload.event(), &source, fields),
            None => {
                self.write_counts(false);
                self.write(payload.event(), fields);
            }
        }
    }

    fn refusal(&self, kind: Event, source: &str, fields: Value) {
        self.write_counts(false);
        // What a count keeps as examples: the host or address refused,
        // else why.
        let sample = ["host", "address", "reason", "message"]
            .iter()
            .find_map(|k| fields.get(*k).and_then(Value::as_str))
            .map(str::to_string);
        let verdict = self
            .throttle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(kind.word(), source, sample.as_deref(), Instant::now());
        if verdict == Verdict::Write {
            self.write(kind, fields);
        }
    }

    /// Writes the counts of refusals not written whole whose window is
    /// over (warden calls this every few seconds, so a quiet machine's
    /// counts are written too).
    pub fn write_due_counts(&self) {
        self.write_counts(false);
    }

    /// Writes the counts of refusals not written whole: those whose window
    /// is over, or all of them (at shutdown). A count that cannot be
    /// written is kept for the next try.
    fn write_counts(&self, all: bool) {
        let now = Instant::now();
        let due = self
            .throttle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .due(now, all);
        for s in due {
            let samples = s.samples.kept.iter();
            let line = payload::Suppressed {
                of: &s.kind,
                source: &s.source,
                count: s.count,
                window_ms: s.window.as_millis() as u64,
                samples: samples
                    .map(|(what, count)| payload::Sample {
                        what,
                        count: *count,
                    })
                    .collect(),
                unsampled: s.samples.unsampled,
            };
            let written = self.write(line.event(), payload::fields_of(&line));
            if written.is_none() {
                self.throttle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .restore(s, now);
            }
        }
    }

    fn write(&self, kind: Event, fields: Value) -> Option<u64> {
        let fields = crate::shared::printable::clamp(match &self.redactor {
            Some(r) => r.value(fields),
            None => fields,
        });
        let (seq, dropped) = self.append(kind, fields)?;
        if let Some((first, last)) = dropped {
            crate::say!(
                "audit: lines {first} to {last} were rotated away (the log keeps {} files of {} bytes); an owner who has not read them has lost them",
                self.rotation.max_files,
                self.rotation.max_bytes
            );
            let line = payload::RotatedAway { first, last };
            self.append(line.event(), payload::fields_of(&line));
        }
        Some(seq)
    }

    /// Seals and appends one line; with the range of lines that rotation
    /// dropped to make room, if it did.
    fn append(&self, kind: Event, fields: Value) -> Option<(u64, Option<(u64, u64)>)> {
        let mut chain = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let seq = chain.seq + 1;
        let line = seal(seq, &now(), kind.word(), fields, &chain.prev);
        let mut dropped = None;
        let written = self
            .rotate_if_full(&mut chain, line.text.len() as u64, &mut dropped)
            .and_then(|()| append_whole(&mut chain, line.text.as_bytes()));
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        match written {
            Ok(()) => {
                chain.seq = seq;
                chain.prev = line.hash;
                *failing = None;
                Some((seq, dropped))
            }
            Err(e) => {
                let why = format!("cannot write {}: {e}", self.path.display());
                if failing.is_none() {
                    crate::say!("audit: {why}");
                }
                *failing = Some(why);
                None
            }
        }
    }

    /// Sets the current file aside when the next line would pass the size
    /// limit, starting a new one that continues the chain; drops the
    /// oldest files past the cap.
    fn rotate_if_full(
        &self,
        chain: &mut Chain,
        next: u64,
        dropped: &mut Option<(u64, u64)>,
    ) -> std::io::Result<()> {
        if chain.len == 0 || chain.len + next <= self.rotation.max_bytes {
            return Ok(());
        }
        chain.file.sync_all()?;
        let first_seq = chain.seq + 1 - count_lines(&self.path)? as u64;
        let aside = self.dir.join(format!("warden-{first_seq:012}.jsonl"));
        std::fs::rename(&self.path, &aside)?;
        chain.file = open_log(&self.path, self.group)?;
        chain.len = 0;
        let rotated = rotated_files(&self.dir)?;
        let keep = self.rotation.max_files.max(2) - 1;
        let gone = &rotated[..rotated.len().saturating_sub(keep)];
        for old in gone {
            std::fs::remove_file(old)?;
        }
        if !gone.is_empty() {
            let first = gone.first().and_then(|p| first_seq_of(p)).unwrap_or(0);
            let last = rotated
                .get(gone.len())
                .and_then(|p| first_seq_of(p))
                .map_or(first, |next| next.saturating_sub(1));
            *dropped = Some((first, last));
        }
        Ok(())
    }

    /// Writes every count of refusals not yet written (at shutdown, before
    /// the last line).
    pub fn write_all_counts(&self) {
        self.write_counts(true);
    }

    /// Makes every line written so far durable, the counts of refusals
    /// not yet written included.
    pub fn sync(&self) {
        self.write_counts(true);
        let chain = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = chain.file.sync_all() {
            crate::say!("audit: cannot sync {}: {e}", self.path.display());
        }
    }
}

fn open_log(path: &Path, group: Option<u32>) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if let Some(gid) = group {
        nix::unistd::fchown(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            Some(nix::unistd::Uid::from_raw(0)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )?;
    }
    Ok(file)
}

/// Opens a file of the log to read it, never through a link.
fn open_log_for_reading(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Writes `bytes` at the end; if only part of it got there (a full disk),
/// cuts the file back so no torn line is left for the next to follow.
fn append_whole(chain: &mut Chain, bytes: &[u8]) -> std::io::Result<()> {
    match chain.file.write_all(bytes) {
        Ok(()) => {
            chain.len += bytes.len() as u64;
            Ok(())
        }
        Err(e) => {
            let _ = chain.file.set_len(chain.len);
            Err(e)
        }
    }
}

/// A crash mid-write can only leave a last line without its newline; it was
/// never acknowledged, so it is cut off. Returns the file's length.
fn drop_torn_tail(file: &mut File) -> std::io::Result<u64> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(0);
    }
    let start = len.saturating_sub(64 * 1024);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    if tail.last() == Some(&b'\n') {
        return Ok(len);
    }
    let keep = match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => start + i as u64 + 1,
        None if start == 0 => 0,
        None => return Ok(len),
    };
    crate::say!(
        "audit: dropping a torn last line ({} bytes) left by a crash",
        len - keep
    );
    file.set_len(keep)?;
    Ok(keep)
}

fn count_lines(path: &Path) -> std::io::Result<usize> {
    let text = std::fs::read(path)?;
    Ok(text.iter().filter(|b| **b == b'\n').count())
}

fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// Reads the sequence number and hash of the last line, to continue the
/// chain across restarts; None for an empty file.
fn last_link(file: &mut File) -> std::io::Result<Option<(u64, String)>> {
    let len = file.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(64 * 1024);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    // The window may start inside a character: lossy is fine for a search.
    let tail = String::from_utf8_lossy(&bytes);
    Ok(tail.lines().rev().find_map(|line| {
        let v: Value = serde_json::from_str(line).ok()?;
        Some((
            v.get("seq")?.as_u64()?,
            v.get("hash")?.as_str()?.to_string(),
        ))
    }))
}

#[cfg(test)]
mod tests {
    use super::payload::Raw;
    use super::*;

    #[test]
    fn anchors_table() {
        let line = |seq: u64, hash: &str| {
            format!("{{\"seq\":{seq},\"kind\":\"x\",\"hash\":\"{hash}\"}}\n")
        };
        let log =
            |lines: &[(u64, &str)]| lines.iter().map(|(s, h)| line(*s, h)).collect::<String>();
        let anchor = |seq: u64, hash: &str| Anchor {
            seq,
            hash: hash.into(),
        };
        let cases: Vec<(Vec<String>, Option<Anchor>, AnchorCheck)> = vec![
            (vec![log(&[(1, "a"), (2, "b")])], None, AnchorCheck::Holds),
            (
                vec![log(&[(1, "a"), (2, "b")])],
                Some(anchor(2, "b")),
                AnchorCheck::Holds,
            ),
            (
                vec![log(&[(1, "a")]), log(&[(2, "b"), (3, "c")])],
                Some(anchor(2, "b")),
                AnchorCheck::Holds,
            ),
            (
                vec![log(&[(1, "a"), (2, "b")])],
                Some(anchor(3, "c")),
                AnchorCheck::Cut { last: 2 },
            ),
            (
                vec![String::new()],
                Some(anchor(3, "c")),
                AnchorCheck::Cut { last: 0 },
            ),
            (
                vec![log(&[(1, "a"), (2, "x")])],
                Some(anchor(2, "b")),
                AnchorCheck::Rewritten,
            ),
            (
                vec![log(&[(7, "g"), (8, "h")])],
                Some(anchor(2, "b")),
                AnchorCheck::RotatedAway { oldest: 7 },
            ),
        ];
        for (texts, kept, want) in cases {
            let (got, last) = check_anchor(&texts, kept.as_ref());
            assert_eq!(got, want, "{texts:?} against {kept:?}");
            if !texts[0].is_empty() {
                assert!(last.is_some());
            }
        }
    }
    use serde_json::json;

    #[test]
    fn sealed_lines_chain_and_detect_edits() {
        let a = seal(1, "t1", "boot", json!({"version": "x"}), GENESIS);
        let b = seal(2, "t2", "command_start", json!({"argv": ["id"]}), &a.hash);
        assert_eq!(check_line(a.text.trim_end(), GENESIS), Ok(a.hash.clone()));
        assert_eq!(check_line(b.text.trim_end(), &a.hash), Ok(b.hash.clone()));
        // Reordered: b does not follow genesis.
        assert!(check_line(b.text.trim_end(), GENESIS).is_err());
        // Edited content.
        let edited = b.text.trim_end().replace("\"id\"", "\"ls\"");
        assert!(check_line(&edited, &a.hash)
            .unwrap_err()
            .contains("does not match"));
        // Garbage.
        for junk in [
            "",
            "{}",
            "not json at all, but long enough to pass the length check...........",
            "é",
        ] {
            assert!(check_line(junk, GENESIS).is_err(), "{junk}");
        }
    }

    #[test]
    fn verification_table() {
        let a = seal(1, "t", "boot", json!({}), GENESIS);
        let b = seal(2, "t", "command_start", json!({"argv": ["id"]}), &a.hash);
        let c = seal(3, "t", "shutdown", json!({}), &b.hash);
        let whole = format!("{}{}{}", a.text, b.text, c.text);
        assert_eq!(verify_text(&whole, None), Ok((3, c.hash.clone())));
        assert_eq!(verify_text("", None), Ok((0, GENESIS.to_string())));
        let cases: Vec<(String, usize, &str)> = vec![
            (format!("{}{}", a.text, c.text), 2, "seq 3 where 2 was due"),
            (format!("{}{}", b.text, c.text), 1, ""),
            (
                format!("{}{}{}", a.text, b.text.replace("\"id\"", "\"ls\""), c.text),
                2,
                "does not match",
            ),
            (format!("{}{}", a.text, c.text.trim_end()), 2, "incomplete"),
            (format!("{}garbage\n", a.text), 2, "not JSON"),
            (format!("{}{}", b.text, a.text), 2, "seq 1 where 3 was due"),
        ];
        for (text, line, reason) in cases {
            match verify_text(&text, None) {
                Err(e) => assert!(
                    e.line == line && e.reason.contains(reason),
                    "{e:?}, wanted line {line} {reason}"
                ),
                // A file starting at seq 2 cannot be checked against its
                // predecessor without it: accepted from its own first prev.
                Ok(_) => assert_eq!(reason, "", "accepted: {text}"),
            }
        }
        // Continuing from a known hash: a file cut at the front is caught.
        let e = verify_text(&format!("{}{}", b.text, c.text), Some(GENESIS)).unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn rotation_keeps_the_chain_and_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let rotation = Rotation {
            max_bytes: 4096,
            max_files: 3,
        };
        let audit = Audit::open_with(dir.path(), None, None, rotation).unwrap();
        for i in 0..200 {
            audit.record(&Raw(
                Event::CommandStart,
                json!({"command": i, "argv": ["echo", "x".repeat(40)]}),
            ));
        }
        drop(audit);
        let files = log_files(dir.path()).unwrap();
        assert_eq!(files.len(), 3, "{files:?}");
        for f in &files {
            assert!(std::fs::metadata(f).unwrap().len() <= 4096, "{f:?}");
        }
        // The kept files verify as one chain, and end at line 200.
        let (lines, _) = verify_files(&files).unwrap();
        assert!(lines > 20 && lines < 200, "{lines}");
        let last = std::fs::read_to_string(&files[2]).unwrap();
        assert!(last.contains("\"command\":199,"), "{last}");
        // Each drop is said in the log itself, with the lines it took.
        let all: String = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        let drops: Vec<Value> = all
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["kind"] == "rotated_away")
            .collect();
        assert!(!drops.is_empty());
        let newest = drops.last().unwrap();
        assert!(
            newest["first"].as_u64() <= newest["last"].as_u64(),
            "{newest}"
        );
        // Reopened after a rotation, the chain continues.
        let audit = Audit::open_with(dir.path(), None, None, rotation).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        drop(audit);
        verify_files(&log_files(dir.path()).unwrap()).unwrap();
    }

    #[test]
    fn described_lines_escape_control_characters() {
        let line = r#"{"seq":1,"time":"t","kind":"command_failed","folder":"a\nb\u001b[8m","prev":"p","hash":"h"}"#;
        let (_, text) = describe(line).unwrap();
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.contains(r"folder=a\nb\u{1b}[8m"), "{text}");
    }

    #[test]
    fn a_torn_last_line_is_dropped_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(dir.path(), None, None).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        audit.record(&Raw(Event::Shutdown, json!({})));
        drop(audit);
        let path = dir.path().join(FILE_NAME);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"seq\":3,\"ki");
        std::fs::write(&path, &text).unwrap();
        let audit = Audit::open(dir.path(), None, None).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        drop(audit);
        let (lines, _) = verify_files(&[path]).unwrap();
        assert_eq!(lines, 3);
    }

    #[test]
    fn reserved_fields_cannot_be_overridden() {
        let s = seal(
            7,
            "t",
            "k",
            json!({"seq": 99, "kind": "forged", "hash": "0"}),
            GENESIS,
        );
        let v: Value = serde_json::from_str(&s.text).unwrap();
        assert_eq!(v["seq"], 7);
        assert_eq!(v["kind"], "k");
        assert_eq!(v["hash"], s.hash.as_str());
    }

    #[test]
    fn reopened_log_continues_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(dir.path(), None, None).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        audit.record(&Raw(Event::Shutdown, json!({})));
        drop(audit);
        let audit = Audit::open(dir.path(), None, None).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        let mut prev = GENESIS.to_string();
        for (i, line) in text.lines().enumerate() {
            prev = check_line(line, &prev).unwrap();
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["seq"], i as u64 + 1);
        }
        assert_eq!(text.lines().count(), 3);
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::payload::Raw;
    use super::*;
    use serde_json::json;

    /// A count names what it counted: the host refused, else the address
    /// (the connect gate's lines), else why.
    #[test]
    fn a_count_names_what_was_refused() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(dir.path(), None, None).unwrap();
        let cases = [
            (
                json!({"host": "exfil.example", "reason": "not listed"}),
                "exfil.example",
            ),
            (
                json!({"pid": 7, "address": "192.0.2.1:8080", "reason": "not the proxy"}),
                "192.0.2.1:8080",
            ),
            (json!({"uid": 2001, "reason": "wrong peer"}), "wrong peer"),
        ];
        for (fields, _) in &cases {
            for _ in 0..REFUSAL_BURST {
                audit.record_refusal(
                    "connect_gate command 3",
                    &Raw(Event::ConnectRefused, json!({})),
                );
            }
            audit.record_refusal(
                "connect_gate command 3",
                &Raw(Event::ConnectRefused, fields.clone()),
            );
            audit.write_all_counts();
        }
        let text = std::fs::read_to_string(audit.path()).unwrap();
        let counts: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["kind"] == "suppressed")
            .collect();
        assert_eq!(counts.len(), cases.len());
        for (count, (_, named)) in counts.iter().zip(&cases) {
            assert_eq!(
                count["samples"],
                json!([{"what": named, "count": 1}]),
                "{count}"
            );
            assert_eq!(count["source"], "connect_gate command 3");
        }
    }
}

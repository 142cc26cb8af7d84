//! `warden audit ...`: verifying a log (and an owner's anchor), and
//! reading its last lines.

use crate::error::CliError;
use crate::fail;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub fn verify(given: &[PathBuf], anchor: Option<&Path>, allow_gap: bool) -> i32 {
    // A folder stands for all its log files, in chain order.
    let mut files = Vec::new();
    for path in given {
        match path.is_dir() {
            true => match warden::shared::audit_chain::log_files(path) {
                Ok(found) => files.extend(found),
                Err(e) => fail(&format!("{}: {e}", path.display())),
            },
            false => files.push(path.clone()),
        }
    }
    match warden::shared::audit_chain::verify_files(&files) {
        Ok((lines, last)) => {
            println!("ok: {lines} lines, chain intact; last hash {last}");
            match anchor {
                Some(path) => check_anchor(&files, path, allow_gap),
                None => 0,
            }
        }
        Err((file, b)) => {
            println!("BROKEN: {}:{}: {}", file.display(), b.line, b.reason);
            1
        }
    }
}

/// Checks the log against the anchor kept on the host, then moves the
/// anchor to the log's last line.
pub fn check_anchor(files: &[PathBuf], path: &Path, allow_gap: bool) -> i32 {
    use warden::shared::audit_chain::{Anchor, AnchorCheck};
    let kept: Option<Anchor> = match std::fs::read_to_string(path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(a) => Some(a),
            Err(e) => fail(&format!("anchor {}: {e}", path.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => fail(&format!("anchor {}: {e}", path.display())),
    };
    let texts: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    let (check, last) = warden::shared::audit_chain::check_anchor(&texts, kept.as_ref());
    let status = match (&check, &kept) {
        (AnchorCheck::Holds, Some(a)) => {
            println!(
                "ok: line {} verified before is still there, unchanged",
                a.seq
            );
            0
        }
        (AnchorCheck::Holds, None) => {
            println!("no anchor yet: this check starts one");
            0
        }
        (AnchorCheck::RotatedAway { oldest }, Some(a)) if *oldest == a.seq + 1 => {
            println!(
                "ok: line {} verified before was rotated away; every line after it is here",
                a.seq
            );
            0
        }
        (AnchorCheck::RotatedAway { oldest }, Some(a)) if allow_gap => {
            println!(
                "ok, with a gap (allowed): lines {} to {} were rotated away since the last check",
                a.seq + 1,
                oldest - 1
            );
            0
        }
        (AnchorCheck::RotatedAway { oldest }, Some(a)) => {
            println!(
                "GAP: lines {} to {} were rotated away before anyone checked them (line {} verified before is gone; the oldest kept is {oldest}); --allow-gap accepts this and moves the anchor",
                a.seq + 1,
                oldest - 1,
                a.seq
            );
            1
        }
        (AnchorCheck::Cut { last }, Some(a)) => {
            println!(
                "CUT: line {} was verified before, but the log now ends at line {last}",
                a.seq
            );
            1
        }
        (AnchorCheck::Rewritten, Some(a)) => {
            println!(
                "REWRITTEN: line {} has another hash than when it was verified",
                a.seq
            );
            1
        }
        (_, None) => 0,
    };
    if status == 0 {
        if let Some(last) = last {
            if let Err(e) = write_anchor(path, &last) {
                fail(&format!("anchor {}: {e}", path.display()));
            }
        }
    }
    status
}

pub fn write_anchor(
    path: &Path,
    anchor: &warden::shared::audit_chain::Anchor,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(
        serde_json::to_string(anchor)
            .map_err(std::io::Error::other)?
            .as_bytes(),
    )?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

pub fn tail(file: &Path, follow: bool, kind: Option<&str>, lines: usize) -> Result<i32, CliError> {
    use std::io::{BufRead, Seek};
    let show = |line: &str| {
        if let Some((k, text)) = warden::shared::audit_chain::describe(line) {
            if kind.is_none_or(|want| want == k) {
                println!("{text}");
            }
        }
    };
    let mut f = std::fs::File::open(file).map_err(|source| CliError::File {
        path: file.into(),
        source,
    })?;
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(CliError::Io)?;
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let all: Vec<&str> = complete.lines().collect();
    for line in &all[all.len().saturating_sub(lines)..] {
        show(line);
    }
    if !follow {
        return Ok(0);
    }
    let mut offset = complete.len() as u64;
    loop {
        let _ = std::io::stdout().flush();
        std::thread::sleep(std::time::Duration::from_millis(250));
        f.seek(std::io::SeekFrom::Start(offset))
            .map_err(CliError::Io)?;
        let mut reader = std::io::BufReader::new(&f);
        let mut line = String::new();
        while reader.read_line(&mut line).map_err(CliError::Io)? > 0 && line.ends_with('\n') {
            offset += line.len() as u64;
            show(line.trim_end());
            line.clear();
        }
    }
}

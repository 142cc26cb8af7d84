//! A process's `/proc/PID/status`, read as bytes. The kernel writes a
//! process's name there as the process set it: any bytes but a newline
//! (escaped), so not always UTF-8. A reader that wants text finds no
//! process where one runs; a hostile command names itself so to escape
//! everything that looks for shell's processes. Here every field is parsed
//! from bytes, and one that cannot be parsed is unknown (None): each
//! caller says what unknown means for it, never "absent".

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The fields warden reads of a process's status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// The real uid (the first of the `Uid:` line).
    pub uid: Option<u32>,
    /// Whether it is a zombie (dead, waiting to be reaped).
    pub zombie: Option<bool>,
    /// The supplementary groups.
    pub groups: Option<Vec<u32>>,
}

/// Pure: the fields of a status file's bytes.
pub fn parse(bytes: &[u8]) -> Status {
    Status {
        uid: field(bytes, b"Uid:").and_then(|v| numbers(v)?.first().copied()),
        zombie: field(bytes, b"State:").and_then(|v| Some(v.trim_ascii_start().first()? == &b'Z')),
        groups: field(bytes, b"Groups:").and_then(numbers),
    }
}

/// The status of process `pid` as the kernel writes it now.
pub fn read(pid: i32) -> std::io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/status"))
}

/// The owner of `/proc/PID` (the process's effective uid), or None once
/// it is gone.
pub fn owner(pid: i32) -> Option<u32> {
    std::fs::metadata(Path::new("/proc").join(pid.to_string()))
        .ok()
        .map(|m| m.uid())
}

/// Every pid in /proc now (its names are read as bytes too).
pub fn pids() -> Vec<i32> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            std::str::from_utf8(e.file_name().as_bytes())
                .ok()?
                .parse()
                .ok()
        })
        .collect()
}

/// The value after `key` on the first line that starts with it (the name
/// comes first and holds no newline, so it cannot forge a later line).
fn field<'a>(bytes: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    bytes
        .split(|b| *b == b'\n')
        .find_map(|line| line.strip_prefix(key))
}

/// Whitespace-separated decimal numbers; None if any is not one.
fn numbers(value: &[u8]) -> Option<Vec<u32>> {
    value
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| std::str::from_utf8(w).ok()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let full = |name: &[u8]| {
            let mut b = b"Name:\t".to_vec();
            b.extend(name);
            b.extend(
                b"\nState:\tS (sleeping)\nUid:\t2001\t2001\t2001\t2001\nGroups:\t2001 60007 \n",
            );
            b
        };
        let sleeping = Status {
            uid: Some(2001),
            zombie: Some(false),
            groups: Some(vec![2001, 60007]),
        };
        let cases: Vec<(Vec<u8>, Status)> = vec![
            (full(b"sleep"), sleeping.clone()),
            // Not UTF-8: what the kernel writes for a name of \377.
            (full(b"\xff"), sleeping.clone()),
            (full(b"\xc3(\xa0\xa1\xfe"), sleeping.clone()),
            // An escaped newline cannot forge a line.
            (full(b"x\\nGroups:\t1"), sleeping.clone()),
            (
                b"Name:\tz\nState:\tZ (zombie)\nUid:\t0\t1000\t0\t0\nGroups:\t\n".to_vec(),
                Status {
                    uid: Some(0),
                    zombie: Some(true),
                    groups: Some(vec![]),
                },
            ),
            (b"Name:\tx\n".to_vec(), Status::default()),
            (
                b"Uid:\tx\nGroups:\t2001 6000x\n".to_vec(),
                Status::default(),
            ),
            (b"".to_vec(), Status::default()),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse(&bytes), want, "{}", bytes.escape_ascii());
        }
    }

    #[test]
    fn this_process_is_found_with_its_uid() {
        let me = std::process::id() as i32;
        assert!(pids().contains(&me));
        let status = parse(&read(me).unwrap());
        assert_eq!(status.uid, Some(nix::unistd::getuid().as_raw()));
        assert_eq!(status.zombie, Some(false));
        assert!(status.groups.is_some());
        assert_eq!(owner(me), Some(nix::unistd::geteuid().as_raw()));
    }
}

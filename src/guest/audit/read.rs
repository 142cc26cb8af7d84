//! The log read through the API (`read_audit`): its lines as they are on
//! disk, from a sequence number on, to the last line written when the
//! reading began, across set-aside files. What is read is a snapshot taken
//! under the chain's lock: every file is opened there (a file set aside or
//! dropped later stays readable through its descriptor) and the current
//! one's length noted, so only whole lines are read, however much is
//! written meanwhile.

use super::{first_seq_of, open_log_for_reading, rotated_files, Audit};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Take};

/// A snapshot of the log being read, chunk by chunk.
pub struct Reader {
    files: VecDeque<Take<BufReader<File>>>,
    from_seq: u64,
    /// The last line's seq when the snapshot was taken.
    pub last_seq: u64,
    /// The first line's seq sent, once one was.
    pub first_seq: Option<u64>,
    pub lines: u64,
    pub bytes: u64,
    /// A line longer than one chunk: what is left of it to send.
    pending: Vec<u8>,
}

impl Audit {
    /// Takes a snapshot of the log for reading from `from_seq` on.
    pub fn reader(&self, from_seq: u64) -> std::io::Result<Reader> {
        let chain = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let rotated = rotated_files(&self.dir)?;
        let mut files = VecDeque::new();
        for (i, path) in rotated.iter().enumerate() {
            // A file whose successor begins at or before `from_seq` holds
            // nothing asked for.
            let next = rotated.get(i + 1).and_then(|p| first_seq_of(p));
            if next.is_some_and(|next| next <= from_seq) {
                continue;
            }
            // Rotated files are whole and never written again.
            let file = open_log_for_reading(path)?;
            files.push_back(BufReader::new(file).take(u64::MAX));
        }
        // Only what was written before now: the current file's length.
        let current = open_log_for_reading(&self.path)?;
        files.push_back(BufReader::new(current).take(chain.len));
        Ok(Reader {
            files,
            from_seq,
            last_seq: chain.seq,
            first_seq: None,
            lines: 0,
            bytes: 0,
            pending: Vec::new(),
        })
    }
}

impl Reader {
    /// The next bytes to send, at most `max` (whole lines, except a line
    /// longer than `max`, which comes in pieces); None at the end.
    pub fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Vec<u8>>> {
        let max = max.max(1);
        if self.pending.len() > max {
            let chunk: Vec<u8> = self.pending.drain(..max).collect();
            self.bytes += max as u64;
            return Ok(Some(chunk));
        }
        let mut chunk = std::mem::take(&mut self.pending);
        let mut line = Vec::new();
        while let Some(file) = self.files.front_mut() {
            line.clear();
            if file.read_until(b'\n', &mut line)? == 0 {
                self.files.pop_front();
                continue;
            }
            if line.last() != Some(&b'\n') {
                // Cannot be (only whole lines are written): left out.
                continue;
            }
            let seq = seq_of(&line);
            // A line whose seq cannot be read is sent once the stream has
            // begun: the reader's verification then says where it broke.
            match seq {
                Some(seq) if seq < self.from_seq => continue,
                Some(seq) if seq > self.last_seq => {
                    self.files.clear();
                    break;
                }
                None if self.first_seq.is_none() => continue,
                _ => {}
            }
            if self.first_seq.is_none() {
                self.first_seq = seq;
            }
            self.lines += 1;
            if chunk.len() + line.len() <= max {
                chunk.extend_from_slice(&line);
                continue;
            }
            if chunk.is_empty() {
                // A line longer than a chunk: its first piece now.
                chunk.extend_from_slice(&line[..max]);
                self.pending = line[max..].to_vec();
                self.bytes += max as u64;
                return Ok(Some(chunk));
            }
            // Full: this line is the next chunk's.
            self.pending = std::mem::take(&mut line);
            break;
        }
        self.bytes += chunk.len() as u64;
        Ok((!chunk.is_empty()).then_some(chunk))
    }
}

/// A line's seq: its top-level `seq` (a line's fields are sorted, and a
/// nested object may carry a `seq` of its own: the line is parsed).
fn seq_of(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    serde_json::from_slice::<Seq>(line).ok().map(|s| s.seq)
}

#[cfg(test)]
mod tests {
    use super::super::{log_files, verify_text, Event, Rotation};
    use super::*;
    use crate::guest::audit::payload::Raw;
    use serde_json::json;

    fn read_all(audit: &Audit, from: u64, max: usize) -> (String, Reader) {
        let mut reader = audit.reader(from).unwrap();
        let mut out = Vec::new();
        while let Some(chunk) = reader.next_chunk(max).unwrap() {
            assert!(chunk.len() <= max, "a chunk of {} > {max}", chunk.len());
            out.extend(chunk);
        }
        (String::from_utf8(out).unwrap(), reader)
    }

    #[test]
    fn what_is_read_is_the_log_from_a_seq_on_across_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let rotation = Rotation {
            max_bytes: 4096,
            max_files: 4,
        };
        let audit = Audit::open_with(dir.path(), None, None, rotation).unwrap();
        for i in 0..120 {
            audit.record(&Raw(
                Event::CommandStart,
                json!({"command": i, "argv": ["x"]}),
            ));
        }
        let files = log_files(dir.path()).unwrap();
        assert!(files.len() >= 3, "{files:?}");
        let on_disk: String = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        let first_line = on_disk.lines().next().unwrap().as_bytes();
        let oldest = seq_of(first_line).unwrap();
        let last: u64 = on_disk.lines().count() as u64 + oldest - 1;
        // (from_seq, chunk size): what comes back, and that it verifies.
        for (from, max) in [
            (1, 64 * 1024),
            (oldest + 30, 1000),
            (last, 300),
            (last + 5, 4096),
        ] {
            let (text, reader) = read_all(&audit, from, max);
            let want_first = from.max(oldest);
            assert_eq!(reader.last_seq, last);
            if want_first > last {
                assert_eq!(
                    (text.as_str(), reader.first_seq, reader.lines),
                    ("", None, 0)
                );
                continue;
            }
            assert_eq!(reader.first_seq, Some(want_first), "from {from}");
            assert_eq!(reader.lines, last - want_first + 1);
            assert_eq!(reader.bytes, text.len() as u64);
            // Exactly the disk's lines from there on.
            let skip = (want_first - oldest) as usize;
            let want: String = on_disk.split_inclusive('\n').skip(skip).collect();
            assert_eq!(text, want, "from {from}");
            verify_text(&text, None).unwrap();
        }
        // A snapshot ends where the log ended when it was taken.
        let mut reader = audit.reader(last).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        let first = reader.next_chunk(1 << 20).unwrap().unwrap();
        assert_eq!(seq_of(&first), Some(last), "one line, the last");
        assert_eq!(reader.next_chunk(1 << 20).unwrap(), None);
        assert_eq!(reader.lines, 1);
    }

    #[test]
    fn a_line_longer_than_a_chunk_comes_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(dir.path(), None, None).unwrap();
        audit.record(&Raw(Event::Boot, json!({})));
        let long: Vec<String> = (0..40)
            .map(|i| format!("{i}-{}", "y".repeat(100)))
            .collect();
        audit.record(&Raw(Event::CommandStart, json!({"argv": long})));
        audit.record(&Raw(Event::Shutdown, json!({})));
        let (text, reader) = read_all(&audit, 1, 512);
        assert_eq!(
            text,
            std::fs::read_to_string(dir.path().join(super::super::FILE_NAME)).unwrap()
        );
        assert_eq!(
            (reader.lines, reader.first_seq, reader.last_seq),
            (3, Some(1), 3)
        );
        verify_text(&text, None).unwrap();
    }

    #[test]
    fn a_lines_seq_is_its_top_level_one() {
        let cases: [(&[u8], Option<u64>); 6] = [
            (b"{\"seq\":17,\"time\":\"t\"}\n", Some(17)),
            (b"{\"kind\":\"x\",\"seq\":1}\n", Some(1)),
            (b"{\"fields\":{\"seq\":9},\"seq\":3}\n", Some(3)),
            (b"{\"seq\":,}\n", None),
            (b"{\"seq\":4", None),
            (b"", None),
        ];
        for (line, want) in cases {
            assert_eq!(seq_of(line), want, "{}", String::from_utf8_lossy(line));
        }
    }
}

//! A detached command's backlog: the last bytes it printed, in one ring,
//! with one bit per byte saying whether it came on stderr. What is
//! allocated is bounded (the limit, and an eighth of it for the kinds),
//! whatever the number of writes the bytes came in: a command printing
//! one byte per write costs what one printing them all at once does.

use crate::wire::Kind;

/// The smallest ring allocated, so that a few small writes do not grow it
/// byte by byte.
const FIRST_CAPACITY: usize = 4096;

/// The last `limit` bytes printed, oldest first.
#[derive(Debug)]
pub struct Backlog {
    limit: usize,
    /// The ring: its length is what is allocated (at most `limit`).
    bytes: Vec<u8>,
    /// Bit i set: the byte at ring position i came on stderr.
    stderr: Vec<u8>,
    /// Ring position of the oldest byte kept.
    start: usize,
    len: usize,
}

impl Backlog {
    pub fn new(limit: usize) -> Backlog {
        Backlog {
            limit,
            bytes: Vec::new(),
            stderr: Vec::new(),
            start: 0,
            len: 0,
        }
    }

    /// Bytes kept.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated for the ring and its kinds.
    pub fn allocated(&self) -> usize {
        self.bytes.capacity() + self.stderr.capacity()
    }

    /// Keeps `data`, printed on `kind` (stderr, or stdout for anything
    /// else), letting the oldest bytes go past the limit; returns how many
    /// were let go.
    pub fn push(&mut self, kind: Kind, data: &[u8]) -> u64 {
        let mut dropped = 0u64;
        let mut data = data;
        if data.len() >= self.limit {
            // Only its tail is kept; everything before goes.
            let over = data.len() - self.limit;
            dropped += (self.len + over) as u64;
            data = &data[over..];
            self.start = 0;
            self.len = 0;
        } else if self.len + data.len() > self.limit {
            let over = self.len + data.len() - self.limit;
            self.start = self.position(over);
            self.len -= over;
            dropped += over as u64;
        }
        if self.len + data.len() > self.bytes.len() {
            self.grow(self.len + data.len());
        }
        let err = kind == Kind::Stderr;
        for (i, b) in data.iter().enumerate() {
            let at = self.position(self.len + i);
            if let Some(slot) = self.bytes.get_mut(at) {
                *slot = *b;
            }
            self.set_stderr(at, err);
        }
        self.len += data.len();
        dropped
    }

    /// The run of bytes of one kind starting `offset` bytes after the
    /// oldest kept, at most `max` of them; None past the end.
    pub fn chunk_at(&self, offset: usize, max: usize) -> Option<(Kind, Vec<u8>)> {
        if offset >= self.len || max == 0 {
            return None;
        }
        let err = self.is_stderr(self.position(offset));
        let mut end = offset + 1;
        while end < self.len && end - offset < max && self.is_stderr(self.position(end)) == err {
            end += 1;
        }
        let chunk = (offset..end)
            .filter_map(|i| self.bytes.get(self.position(i)).copied())
            .collect();
        let kind = if err { Kind::Stderr } else { Kind::Stdout };
        Some((kind, chunk))
    }

    /// Every byte kept, in runs of one kind of at most `max` bytes.
    pub fn chunks(&self, max: usize) -> impl Iterator<Item = (Kind, Vec<u8>)> + '_ {
        let mut offset = 0;
        std::iter::from_fn(move || {
            let (kind, chunk) = self.chunk_at(offset, max)?;
            offset += chunk.len();
            Some((kind, chunk))
        })
    }

    /// The ring position of the byte `offset` after the oldest.
    fn position(&self, offset: usize) -> usize {
        (self.start + offset) % self.bytes.len().max(1)
    }

    fn is_stderr(&self, at: usize) -> bool {
        self.stderr
            .get(at / 8)
            .is_some_and(|b| b & (1 << (at % 8)) != 0)
    }

    fn set_stderr(&mut self, at: usize, err: bool) {
        if let Some(b) = self.stderr.get_mut(at / 8) {
            match err {
                true => *b |= 1 << (at % 8),
                false => *b &= !(1 << (at % 8)),
            }
        }
    }

    /// A larger ring for at least `needed` bytes (doubling, never past the
    /// limit), the bytes kept moved to its start in order.
    fn grow(&mut self, needed: usize) {
        let capacity = needed
            .max(self.bytes.len() * 2)
            .max(FIRST_CAPACITY)
            .min(self.limit);
        let mut bytes = Vec::new();
        bytes.reserve_exact(capacity);
        bytes.resize(capacity, 0);
        let mut stderr = Vec::new();
        stderr.reserve_exact(capacity.div_ceil(8));
        stderr.resize(capacity.div_ceil(8), 0);
        let mut grown = Backlog {
            limit: self.limit,
            bytes,
            stderr,
            start: 0,
            len: self.len,
        };
        for i in 0..self.len {
            let from = self.position(i);
            if let (Some(slot), Some(b)) = (grown.bytes.get_mut(i), self.bytes.get(from)) {
                *slot = *b;
            }
            grown.set_stderr(i, self.is_stderr(from));
        }
        *self = grown;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::{Stderr as E, Stdout as O};

    /// The backlog as runs, e.g. "o:abc e:de".
    fn runs(b: &Backlog, max: usize) -> String {
        b.chunks(max)
            .map(|(k, c)| {
                let k = if k == E { "e" } else { "o" };
                format!("{k}:{}", String::from_utf8_lossy(&c))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// (limit, writes) -> (runs kept, bytes let go)
    type Case<'a> = (usize, &'a [(Kind, &'a str)], &'a str, u64);

    #[test]
    fn pushes_table() {
        let cases: &[Case] = &[
            (10, &[], "", 0),
            (10, &[(O, "abc"), (O, "de")], "o:abcde", 0),
            (10, &[(O, "abc"), (E, "de"), (O, "f")], "o:abc e:de o:f", 0),
            // The oldest go, their kinds with them.
            (4, &[(O, "abc"), (E, "de")], "o:bc e:de", 1),
            (2, &[(O, "abc"), (E, "de")], "e:de", 3),
            (1, &[(O, "abc"), (E, "de")], "e:e", 4),
            // A write larger than the limit keeps its tail.
            (2, &[(O, "x"), (E, "abcdef")], "e:ef", 5),
            (3, &[(O, "abc")], "o:abc", 0),
            // Around the ring many times, one byte at a time.
            (
                3,
                &[(O, "a"), (E, "b"), (O, "c"), (E, "d"), (E, "e")],
                "o:c e:de",
                2,
            ),
            // Anything but stderr is kept as stdout.
            (8, &[(Kind::Stdin, "i"), (E, "e")], "o:i e:e", 0),
        ];
        for (limit, writes, want, let_go) in cases {
            let mut b = Backlog::new(*limit);
            let dropped: u64 = writes.iter().map(|(k, w)| b.push(*k, w.as_bytes())).sum();
            assert_eq!(runs(&b, usize::MAX), *want, "{limit} {writes:?}");
            assert_eq!(dropped, *let_go, "{limit} {writes:?}");
            assert!(b.len() <= *limit);
        }
    }

    #[test]
    fn reading_from_an_offset_table() {
        let mut b = Backlog::new(6);
        // Wrapped around: the ring holds "cdefgh" from position 2 on.
        for (k, w) in [(O, "abcd"), (E, "ef"), (O, "gh")] {
            b.push(k, w.as_bytes());
        }
        // (offset, max) -> the run there
        let cases = [
            (0, 10, Some((O, "cd"))),
            (1, 10, Some((O, "d"))),
            (2, 10, Some((E, "ef"))),
            (2, 1, Some((E, "e"))),
            (4, 10, Some((O, "gh"))),
            (5, 10, Some((O, "h"))),
            (6, 10, None),
            (0, 0, None),
        ];
        for (offset, max, want) in cases {
            let got = b.chunk_at(offset, max);
            let want = want.map(|(k, s)| (k, s.as_bytes().to_vec()));
            assert_eq!(got, want, "{offset} {max}");
        }
        assert_eq!(runs(&b, 1), "o:c o:d e:e e:f o:g o:h");
    }

    #[test]
    fn a_drip_allocates_what_a_burst_does() {
        let limit = 1 << 20;
        let mut drip = Backlog::new(limit);
        for i in 0..(limit + limit / 8) {
            let kind = if i % 2 == 0 { O } else { E };
            drip.push(kind, b"x");
        }
        let mut burst = Backlog::new(limit);
        burst.push(O, &vec![b'x'; limit + limit / 8]);
        assert_eq!(drip.len(), limit);
        assert_eq!(drip.allocated(), burst.allocated());
        assert!(drip.allocated() <= limit + limit / 8);
        // Every byte alternates: a run per byte, in order.
        let kinds: Vec<Kind> = drip.chunks(usize::MAX).take(4).map(|(k, _)| k).collect();
        assert_eq!(kinds, [O, E, O, E]);
        // A few bytes take a small ring.
        let mut small = Backlog::new(limit);
        small.push(O, b"hello");
        assert!(small.allocated() <= 2 * FIRST_CAPACITY);
    }
}

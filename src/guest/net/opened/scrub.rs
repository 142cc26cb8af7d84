//! Keeping a secret from coming back: the proxy masks every form of a
//! credential it added (its bytes, its base64 at each of the three
//! alignments it can take inside a longer base64 text, and its URL-encoded
//! form) in what an origin answers, before the client reads a byte of it.
//!
//! Masking keeps lengths (each byte of a match becomes `*`), so a
//! `Content-Length` or a chunk's size stays true. A match may straddle two
//! reads: the scrubber holds back the last `longest - 1` bytes of each
//! piece until it knows they begin no match.

use base64::Engine;
use memchr::memmem::Finder;

/// The byte a masked secret's bytes become.
pub const MASK: u8 = b'*';

/// The forms of one or more secrets, and the bytes held back between
/// pieces of one stream.
#[derive(Debug, Clone)]
pub struct Scrubber {
    /// One searcher per form, made once.
    finders: Vec<Finder<'static>>,
    longest: usize,
    held: Vec<u8>,
    /// How many matches were masked so far.
    pub masked: u64,
}

impl Scrubber {
    /// A scrubber for these secrets (empty ones are ignored).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> Scrubber {
        let mut needles: Vec<Vec<u8>> = secrets
            .into_iter()
            .filter(|s| !s.is_empty())
            .flat_map(forms)
            .filter(|f| f.len() >= 4)
            .collect();
        needles.sort();
        needles.dedup();
        Scrubber {
            longest: needles.iter().map(Vec::len).max().unwrap_or(0),
            finders: needles
                .iter()
                .map(|n| Finder::new(n).into_owned())
                .collect(),
            held: Vec::new(),
            masked: 0,
        }
    }

    /// Whether bytes are held back, waiting for what follows them.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The next piece of the stream: returns what may go on now (the rest
    /// is held back until the next piece or `finish`).
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(piece);
        self.masked += mask_all(&self.finders, &mut self.held);
        let keep = self.longest.saturating_sub(1).min(self.held.len());
        let cut = self.held.len() - keep;
        let rest = self.held.split_off(cut);
        std::mem::replace(&mut self.held, rest)
    }

    /// The end of the stream: what was held back.
    pub fn finish(&mut self) -> Vec<u8> {
        self.masked += mask_all(&self.finders, &mut self.held);
        std::mem::take(&mut self.held)
    }

    /// Masks a whole text at once (a header's value), counting matches.
    pub fn whole(&mut self, text: &mut [u8]) {
        let mut owned = text.to_vec();
        self.masked += mask_all(&self.finders, &mut owned);
        text.copy_from_slice(&owned);
    }
}

/// Every form of `secret` that may appear in an answer.
fn forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![secret.to_vec(), url_encoded(secret)];
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        forms.extend(base64_alignments(engine, secret));
    }
    forms
}

/// The secret's base64 as it shows inside a longer encoded text, at each
/// of the three offsets it may start at: the characters that depend on
/// the bytes around it are cut from both ends.
fn base64_alignments(engine: &impl Engine, secret: &[u8]) -> Vec<Vec<u8>> {
    (0..3usize)
        .map(|offset| {
            let mut padded = vec![0u8; offset];
            padded.extend_from_slice(secret);
            let encoded = engine.encode(&padded);
            let encoded = encoded.trim_end_matches('=').as_bytes();
            // Characters wholly made of the secret's bits: skip the ones
            // touched by the padding in front, and drop the last one, which
            // depends on what follows.
            let start = match offset {
                0 => 0,
                1 => 2,
                _ => 3,
            };
            let end = (offset + secret.len()) * 8 / 6;
            encoded
                .get(start..end.min(encoded.len()))
                .unwrap_or(&[])
                .to_vec()
        })
        .collect()
}

fn url_encoded(secret: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(secret.len() * 3);
    for &b in secret {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// Masks every match of every needle in `text`; returns how many.
fn mask_all(finders: &[Finder<'static>], text: &mut [u8]) -> u64 {
    let mut count = 0;
    for finder in finders {
        let needle = finder.needle();
        let mut from = 0;
        while let Some(at) = finder.find(&text[from..]) {
            let start = from + at;
            text[start..start + needle.len()].fill(MASK);
            count += 1;
            from = start + needle.len();
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        memchr::memmem::find(haystack, needle)
    }

    const SECRET: &[u8] = b"ghp_S3cr3t/Token+Value=42";

    /// The stream cut into pieces at every split point, and at single bytes.
    fn scrubbed_in_pieces(text: &[u8], cut: usize) -> (Vec<u8>, u64) {
        let mut s = Scrubber::new([SECRET]);
        let mut out = Vec::new();
        for piece in text.chunks(cut.max(1)) {
            out.extend(s.push(piece));
        }
        out.extend(s.finish());
        (out, s.masked)
    }

    #[test]
    fn every_form_is_masked_wherever_the_stream_is_cut() {
        let mut encoded_in_longer = Vec::new();
        for prefix in ["", "u", "us", "use"] {
            let mut joined = prefix.as_bytes().to_vec();
            joined.extend_from_slice(SECRET);
            joined.extend_from_slice(b"!tail");
            encoded_in_longer.push(STANDARD.encode(&joined));
            encoded_in_longer.push(URL_SAFE.encode(&joined));
        }
        let mut texts: Vec<Vec<u8>> = vec![
            [b"{\"authorization\":\"Bearer ".as_slice(), SECRET, b"\"}"].concat(),
            url_encoded(SECRET),
        ];
        texts.extend(encoded_in_longer.into_iter().map(String::into_bytes));
        for text in &texts {
            for cut in 1..=text.len() {
                let (out, masked) = scrubbed_in_pieces(text, cut);
                assert_eq!(out.len(), text.len(), "lengths kept");
                assert!(
                    masked >= 1,
                    "cut {cut}: nothing masked in {}",
                    String::from_utf8_lossy(text)
                );
                let out_text = String::from_utf8_lossy(&out);
                for form in forms(SECRET) {
                    assert!(
                        find(&out, &form).is_none(),
                        "cut {cut}: a form is left in {out_text}"
                    );
                }
                // Whatever decodes from the answer does not hold it either.
                for engine in [&STANDARD, &URL_SAFE] {
                    if let Ok(decoded) = engine.decode(out_text.trim()) {
                        assert!(find(&decoded, SECRET).is_none());
                    }
                }
            }
        }
    }

    #[test]
    fn other_text_passes_unchanged_and_unheld_at_the_end() {
        let text = b"nothing secret here, just ghp_ and Token words";
        for cut in 1..=text.len() {
            let (out, masked) = scrubbed_in_pieces(text, cut);
            assert_eq!(out, text);
            assert_eq!(masked, 0);
        }
    }

    #[test]
    fn no_secret_holds_nothing_back() {
        let mut s = Scrubber::new([b"".as_slice()]);
        assert_eq!(s.push(b"abc"), b"abc");
        assert_eq!(s.finish(), b"");
    }

    #[test]
    fn a_header_value_is_masked_whole() {
        let mut s = Scrubber::new([SECRET]);
        let mut value = [b"token ".as_slice(), SECRET].concat();
        s.whole(&mut value);
        assert!(find(&value, SECRET).is_none());
        assert_eq!(s.masked, 1);
    }
}

//! Strings chosen by a command (a folder name, a host, an argument) made
//! safe to keep and to show: cut to a size with their length and digest,
//! and every character that could break a line or change how a terminal
//! shows the text around it escaped.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// No string in an audit line is longer than this: a longer one keeps its
/// start, its length and its SHA-256, so a line stays small whoever chose
/// it.
pub const MAX_STRING: usize = 2048;

/// Every string of `value` (keys included) cut to MAX_STRING bytes; a cut
/// one says how long it was and keeps its SHA-256, so it can still be
/// matched against what was asked.
pub fn clamp(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(clamp_text(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(clamp).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (clamp_text(k), clamp(v)))
                .collect(),
        ),
        other => other,
    }
}

fn clamp_text(s: String) -> String {
    if s.len() <= MAX_STRING {
        return s;
    }
    let mut cut = MAX_STRING - 160;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = format!("{:x}", Sha256::digest(s.as_bytes()));
    format!(
        "{}...[cut: {} bytes in all, sha256 {digest}]",
        &s[..cut],
        s.len()
    )
}

/// Whether `c` can change how the text around it is shown: control
/// characters, bidirectional overrides and isolates, line and paragraph
/// separators.
pub fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// `text` with every control character written as an escape, so that a
/// string chosen by a command (a folder name, a host) can neither break a
/// line nor send a terminal an escape sequence.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| match hides_text(c) {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_strings_are_cut_with_their_length_and_digest() {
        let long = "h".repeat(10_000);
        let cut = clamp(json!({"host": long, "short": "ok", long.clone(): [long.clone()]}));
        let text = cut.to_string();
        assert!(text.len() < 3 * MAX_STRING, "{}", text.len());
        assert_eq!(cut["short"], "ok");
        let host = cut["host"].as_str().unwrap();
        assert!(host.contains("10000 bytes in all"), "{host}");
        assert!(host.contains(&format!("{:x}", Sha256::digest(long.as_bytes()))));
        // A cut never splits a character.
        let wide = "é".repeat(3000);
        assert!(clamp(json!(wide)).as_str().unwrap().contains("6000 bytes"));
    }

    #[test]
    fn what_could_hide_text_is_escaped() {
        let cases = [
            ("plain/path", "plain/path"),
            ("a\nb", "a\\nb"),
            ("\u{1b}[8m", "\\u{1b}[8m"),
            ("rtl\u{202e}cod", "rtl\\u{202e}cod"),
            ("ünï", "ünï"),
        ];
        for (text, want) in cases {
            assert_eq!(escape_controls(text), want, "{text:?}");
        }
    }
}

//! Secrets never reach a log: every value of the runtime's `.env`, and of
//! any variable of warden's own environment whose name looks secret, is
//! replaced by a marker wherever it appears in an audit line or an error
//! warden sends: as it is, and base64-encoded.

use base64::Engine;
use serde_json::Value;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

pub const MARK: &str = "[redacted]";
/// Shorter values would redact ordinary words everywhere.
const MIN_SECRET: usize = 4;

/// Pure: the `(name, value)` lines of a `.env` file (`KEY=VALUE` or
/// `export KEY=VALUE`; comments and blank lines skipped), values as written.
pub fn env_pairs(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("export ").unwrap_or(l).split_once('='))
        .map(|(k, v)| (k.trim(), v))
}

/// Pure: the values of a `.env` file, quoted or not.
pub fn env_values(text: &str) -> Vec<String> {
    env_pairs(text)
        .map(|(_, v)| {
            let v = v.trim();
            let unquoted = ['"', '\'']
                .iter()
                .find_map(|q| v.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)));
            unquoted.unwrap_or(v).to_string()
        })
        .filter(|v| v.len() >= MIN_SECRET)
        .collect()
}

/// Whether a variable's name says it holds a secret.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "PRIVATE",
        "CREDENTIAL",
        "_KEY",
        "AUTH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// Pure: the strings to hide for these secrets: each, and its base64 forms.
pub fn patterns(secrets: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in secrets {
        out.push(s.clone());
        for engine in [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::URL_SAFE,
        ] {
            let encoded = engine.encode(s.as_bytes());
            out.push(encoded.trim_end_matches('=').to_string());
            out.push(encoded);
            // Inside a longer base64 text the secret starts at some byte
            // offset: for each offset mod 3, the characters that depend on
            // the secret alone are always the same.
            for k in 1..3usize {
                let mut shifted = vec![0u8; k];
                shifted.extend_from_slice(s.as_bytes());
                let e = engine.encode(&shifted);
                let (first, last) = ((8 * k).div_ceil(6), 8 * (k + s.len()) / 6);
                if let Some(core) = e.get(first..last) {
                    out.push(core.to_string());
                }
            }
        }
    }
    // Longest first, so a secret containing another is hidden whole.
    out.sort_by_key(|p| std::cmp::Reverse(p.len()));
    out.dedup();
    out.retain(|p| p.len() >= MIN_SECRET);
    out
}

/// Pure: `text` with every pattern replaced by the marker.
pub fn hide<'a>(text: &'a str, patterns: &[String]) -> Cow<'a, str> {
    if !patterns.iter().any(|p| text.contains(p.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for p in patterns {
        if out.contains(p.as_str()) {
            out = out.replace(p.as_str(), MARK);
        }
    }
    Cow::Owned(out)
}

/// When `.env` was read (its mtime and size), and the patterns it gave.
type Loaded = (Option<(SystemTime, u64)>, Vec<String>);

/// The redactor of a machine: `.env` is read again whenever it changes.
pub struct Redactor {
    env_file: PathBuf,
    from_environment: Vec<String>,
    /// Secrets warden holds in memory alone (the proxy's credentials).
    held: Mutex<Vec<String>>,
    state: Mutex<Loaded>,
}

impl Redactor {
    pub fn new(env_file: PathBuf) -> Redactor {
        let from_environment = std::env::vars()
            .filter(|(k, v)| looks_secret(k) && v.len() >= 6)
            .map(|(_, v)| v)
            .collect();
        Redactor {
            env_file,
            from_environment,
            held: Mutex::new(Vec::new()),
            state: Mutex::new((None, Vec::new())),
        }
    }

    /// Hides these secrets too, from now on (replacing the last set).
    pub fn hide_also(&self, secrets: Vec<String>) {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = secrets;
        // Read again at the next line.
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = None;
    }

    fn current(&self) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let stamp = std::fs::metadata(&self.env_file)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        if stamp != state.0 || state.0.is_none() {
            let text = std::fs::read_to_string(&self.env_file).unwrap_or_default();
            let mut secrets = env_values(&text);
            secrets.extend(self.from_environment.iter().cloned());
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            secrets.extend(held.iter().filter(|s| s.len() >= MIN_SECRET).cloned());
            *state = (stamp, patterns(&secrets));
        }
        state.1.clone()
    }

    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        hide(text, &self.current())
    }

    /// Every string in a JSON value, redacted.
    pub fn value(&self, value: Value) -> Value {
        let patterns = self.current();
        if patterns.is_empty() {
            return value;
        }
        redact_value(value, &patterns)
    }
}

fn redact_value(value: Value, patterns: &[String]) -> Value {
    match value {
        Value::String(s) => Value::String(hide(&s, patterns).into_owned()),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| redact_value(v, patterns)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (hide(&k, patterns).into_owned(), redact_value(v, patterns)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_table() {
        let text = "# comment\n\nAPI_KEY=sk-live-123\nexport TOKEN=\"quoted value\"\nSHORT=ab\nSINGLE='single-q'\n  SPACED = padded-value  \nnot a pair\n";
        assert_eq!(
            env_values(text),
            ["sk-live-123", "quoted value", "single-q", "padded-value"]
        );
    }

    #[test]
    fn secret_names_table() {
        for (name, secret) in [
            ("GITHUB_TOKEN", true),
            ("api_key", true),
            ("DB_PASSWORD", true),
            ("AWS_SECRET_ACCESS_KEY", true),
            ("PATH", false),
            ("HOME", false),
            ("LANG", false),
            ("KEYBOARD", false),
        ] {
            assert_eq!(looks_secret(name), secret, "{name}");
        }
    }

    #[test]
    fn hiding_table() {
        let p = patterns(&["hunter2-secret".to_string(), "abc".to_string()]);
        let b64 = base64::engine::general_purpose::STANDARD.encode("hunter2-secret");
        let cases = [
            ("plain hunter2-secret here", "plain [redacted] here"),
            ("url?token=hunter2-secret&x=1", "url?token=[redacted]&x=1"),
            (&*format!("b64 {b64}"), "b64 [redacted]"),
            ("short abc stays", "short abc stays"),
            ("nothing", "nothing"),
        ];
        // A secret inside a longer base64 text, at each offset mod 3.
        for prefix in ["", "a", "ab", "abc", "Authorization: Bearer "] {
            let e = base64::engine::general_purpose::STANDARD
                .encode(format!("{prefix}hunter2-secret and more"));
            let got = hide(&e, &p);
            assert!(got.contains(MARK), "{prefix:?}: {e}");
        }
        for (text, want) in cases {
            assert_eq!(hide(text, &p), want, "{text}");
        }
    }

    #[test]
    fn values_inside_json_are_hidden() {
        let p = patterns(&["canary-value".to_string()]);
        let v = serde_json::json!({"argv": ["echo", "canary-value"], "n": 3, "canary-value": {"e": "x canary-value"}});
        let got = redact_value(v, &p).to_string();
        assert!(!got.contains("canary-value"), "{got}");
        assert_eq!(got.matches(MARK).count(), 3, "{got}");
    }
}

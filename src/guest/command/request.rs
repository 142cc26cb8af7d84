//! Pure checks of what a `run` request asks for, before anything runs.

use crate::wire::Limits;
use crate::wire::{RunRequest, StdinMode};
use std::time::Duration;

/// A run request that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRun {
    pub argv: Vec<String>,
    /// The folder's components under the workspace; None: shell's home.
    pub folder: Option<Vec<String>>,
    pub env: Vec<(String, String)>,
    pub stdin: StdinMode,
    pub timeout: Option<Duration>,
    pub keep_background: bool,
    /// The limits the request asks for (only ever tighten the policy's).
    pub limits: Limits,
    /// A terminal of this size, checked.
    pub pty: Option<crate::wire::PtySize>,
    /// The command outlives its connection, under this tag (if any).
    pub detach: Option<Option<String>>,
}

impl ValidRun {
    pub fn folder_text(&self) -> Option<String> {
        self.folder.as_ref().map(|parts| parts.join("/"))
    }
}

pub const MAX_ARGS: usize = 4096;
pub const MAX_ARG_BYTES: usize = 1 << 20;
const MAX_FOLDER_DEPTH: usize = 32;

pub fn validate(req: RunRequest) -> Result<ValidRun, String> {
    let argv = match (req.argv, req.shell) {
        (Some(argv), None) => argv,
        (None, Some(line)) => vec!["/bin/sh".into(), "-c".into(), line],
        (Some(_), Some(_)) => return Err("give either argv or shell, not both".into()),
        (None, None) => return Err("give argv or shell".into()),
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err("argv must name a program".into());
    }
    if argv.len() > MAX_ARGS {
        return Err(format!(
            "argv has {} items; the limit is {MAX_ARGS}",
            argv.len()
        ));
    }
    if argv.iter().map(String::len).sum::<usize>() > MAX_ARG_BYTES {
        return Err(format!("argv exceeds {MAX_ARG_BYTES} bytes"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("argv contains a NUL byte".into());
    }
    let folder = req.folder.as_deref().map(parse_folder).transpose()?;
    let mut env = Vec::with_capacity(req.env.len());
    for (name, value) in req.env {
        if !valid_env_name(&name) {
            return Err(format!(
                "environment name {name:?} is not [A-Za-z_][A-Za-z0-9_]*"
            ));
        }
        if value.contains('\0') {
            return Err(format!("environment value of {name} contains a NUL byte"));
        }
        env.push((name, value));
    }
    let timeout = match req.timeout_ms {
        Some(0) => return Err("timeout_ms must be positive".into()),
        Some(ms) => Some(Duration::from_millis(ms)),
        None => None,
    };
    let mut limits = req.limits.unwrap_or_default();
    limits.timeout_ms = match (limits.timeout_ms, req.timeout_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(size) = req.pty {
        crate::guest::command::pty::valid_size(size.rows, size.cols)?;
    }
    let detach = match (req.detach, req.tag) {
        (false, Some(_)) => return Err("tag goes with detach".into()),
        (false, None) => None,
        (true, tag) => Some(tag.map(check_tag).transpose()?),
    };
    Ok(ValidRun {
        argv,
        folder,
        env,
        stdin: req.stdin,
        timeout,
        keep_background: req.keep_background,
        limits,
        pty: req.pty,
        detach,
    })
}

/// A detached command's tag: 1 to 128 bytes of printable text.
fn check_tag(tag: String) -> Result<String, String> {
    let printable = !tag.is_empty() && tag.len() <= 128 && !tag.chars().any(char::is_control);
    match printable {
        true => Ok(tag),
        false => Err("tag must be 1 to 128 bytes of printable text".into()),
    }
}

/// A folder name is a relative path of plain components: it can only name
/// a place inside the workspace.
pub fn parse_folder(text: &str) -> Result<Vec<String>, String> {
    let bad = |why: &str| Err(format!("folder {text:?} {why}"));
    if text.is_empty() {
        return bad("is empty");
    }
    if text.starts_with('/') {
        return bad("must be relative to the workspace");
    }
    let parts: Vec<&str> = text.trim_end_matches('/').split('/').collect();
    if parts.len() > MAX_FOLDER_DEPTH {
        return bad("is too deep");
    }
    for part in &parts {
        match *part {
            "" => return bad("has an empty component"),
            "." | ".." => return bad("may not contain . or .."),
            p if p.contains('\0') => return bad("contains a NUL byte"),
            // A name is shown in logs and terminals: no line breaks or
            // escape sequences that could forge or hide what is printed.
            p if p.chars().any(crate::shared::printable::hides_text) => {
                return bad("contains a control character")
            }
            p if p.len() > 255 => return bad("has a component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(parts.into_iter().map(String::from).collect())
}

pub fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Accepts `TERM`, `SIGTERM` or `15`.
pub fn parse_signal(text: &str) -> Result<nix::sys::signal::Signal, String> {
    use nix::sys::signal::Signal;
    use std::str::FromStr;
    if let Ok(n) = text.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| format!("no signal number {n}"));
    }
    let name = if text.starts_with("SIG") {
        text.to_string()
    } else {
        format!("SIG{text}")
    };
    Signal::from_str(&name).map_err(|_| format!("unknown signal {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn folder_table() {
        let cases: &[(&str, Result<&[&str], &str>)] = &[
            ("proj", Ok(&["proj"])),
            ("a/b/c", Ok(&["a", "b", "c"])),
            ("a/", Ok(&["a"])),
            ("routines", Ok(&["routines"])),
            ("", Err("empty")),
            ("/etc", Err("relative")),
            ("../x", Err(". or ..")),
            ("a/../../b", Err(". or ..")),
            ("./a", Err(". or ..")),
            ("a//b", Err("empty component")),
            ("a\0b", Err("NUL")),
            ("a\nforged", Err("control character")),
            ("x\u{1b}[8m", Err("control character")),
            ("tab\there", Err("control character")),
            ("c1\u{9b}31m", Err("control character")),
            ("bidi\u{202e}txt.sh", Err("control character")),
            ("iso\u{2066}late", Err("control character")),
            ("line\u{2028}sep", Err("control character")),
            ("ünïcode", Ok(&["ünïcode"])),
            (&"x/".repeat(40), Err("too deep")),
        ];
        for (text, want) in cases {
            match (parse_folder(text), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, *w, "{text:?}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn run_validation_table() {
        let run = |argv: Option<&[&str]>, shell: Option<&str>| RunRequest {
            argv: argv.map(|a| a.iter().map(|s| s.to_string()).collect()),
            shell: shell.map(String::from),
            ..Default::default()
        };
        assert_eq!(validate(run(Some(&["id"]), None)).unwrap().argv, vec!["id"]);
        assert_eq!(
            validate(run(None, Some("echo hi"))).unwrap().argv,
            vec!["/bin/sh", "-c", "echo hi"]
        );
        let errors: Vec<(RunRequest, &str)> = vec![
            (run(None, None), "give argv or shell"),
            (run(Some(&["a"]), Some("b")), "not both"),
            (run(Some(&[]), None), "name a program"),
            (run(Some(&[""]), None), "name a program"),
            (run(Some(&["a\0"]), None), "NUL"),
            (
                RunRequest {
                    timeout_ms: Some(0),
                    ..run(Some(&["a"]), None)
                },
                "positive",
            ),
            (
                RunRequest {
                    env: BTreeMap::from([("A=B".into(), "x".into())]),
                    ..run(Some(&["a"]), None)
                },
                "environment name",
            ),
            (
                RunRequest {
                    env: BTreeMap::from([("A".into(), "x\0".into())]),
                    ..run(Some(&["a"]), None)
                },
                "NUL",
            ),
            (
                RunRequest {
                    folder: Some("../up".into()),
                    ..run(Some(&["a"]), None)
                },
                "folder",
            ),
        ];
        for (req, want) in errors {
            let err = validate(req.clone()).unwrap_err();
            assert!(err.contains(want), "{req:?}: {err}");
        }
    }

    #[test]
    fn signal_table() {
        use nix::sys::signal::Signal::*;
        let cases = [
            ("TERM", Some(SIGTERM)),
            ("SIGKILL", Some(SIGKILL)),
            ("10", Some(SIGUSR1)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_signal(text).ok(), want, "{text}");
        }
        for text in ["", "NOPE", "999", "-1", "sigterm"] {
            assert!(parse_signal(text).is_err(), "{text}");
        }
    }
}

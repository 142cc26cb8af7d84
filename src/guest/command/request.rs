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

/// What a run request asks that warden refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("give either argv or shell, not both")]
    ArgvAndShell,
    #[error("give argv or shell")]
    NoArgvNorShell,
    #[error("argv must name a program")]
    NoProgram,
    #[error("argv has {0} items; the limit is {MAX_ARGS}")]
    TooManyArgs(usize),
    #[error("argv exceeds {MAX_ARG_BYTES} bytes")]
    ArgsTooLong,
    #[error("argv contains a NUL byte")]
    ArgvNul,
    #[error(transparent)]
    Folder(#[from] FolderNameError),
    #[error("environment name {0:?} is not [A-Za-z_][A-Za-z0-9_]*")]
    EnvName(String),
    #[error("environment value of {0} contains a NUL byte")]
    EnvValueNul(String),
    #[error("timeout_ms must be positive")]
    ZeroTimeout,
    /// The terminal's size, as `pty::valid_size` words it.
    #[error("{0}")]
    PtySize(String),
    #[error("tag goes with detach")]
    TagWithoutDetach,
    #[error("tag must be 1 to 128 bytes of printable text")]
    Tag,
}

/// A folder name that is not a relative path of plain components.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("folder {text:?} {problem}")]
pub struct FolderNameError {
    pub text: String,
    pub problem: FolderProblem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FolderProblem {
    #[error("is empty")]
    Empty,
    #[error("must be relative to the workspace")]
    Absolute,
    #[error("is too deep")]
    TooDeep,
    #[error("has an empty component")]
    EmptyComponent,
    #[error("may not contain . or ..")]
    Dots,
    #[error("contains a NUL byte")]
    Nul,
    #[error("contains a control character")]
    Control,
    #[error("has a component longer than 255 bytes")]
    LongComponent,
}

/// A signal's name or number that names none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    #[error("no signal number {0}")]
    NoNumber(i32),
    #[error("unknown signal {0:?}")]
    Unknown(String),
}

pub fn validate(req: RunRequest) -> Result<ValidRun, RunError> {
    let argv = match (req.argv, req.shell) {
        (Some(argv), None) => argv,
        (None, Some(line)) => vec!["/bin/sh".into(), "-c".into(), line],
        (Some(_), Some(_)) => return Err(RunError::ArgvAndShell),
        (None, None) => return Err(RunError::NoArgvNorShell),
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err(RunError::NoProgram);
    }
    if argv.len() > MAX_ARGS {
        return Err(RunError::TooManyArgs(argv.len()));
    }
    if argv.iter().map(String::len).sum::<usize>() > MAX_ARG_BYTES {
        return Err(RunError::ArgsTooLong);
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(RunError::ArgvNul);
    }
    let folder = req.folder.as_deref().map(parse_folder).transpose()?;
    let mut env = Vec::with_capacity(req.env.len());
    for (name, value) in req.env {
        if !valid_env_name(&name) {
            return Err(RunError::EnvName(name));
        }
        if value.contains('\0') {
            return Err(RunError::EnvValueNul(name));
        }
        env.push((name, value));
    }
    let timeout = match req.timeout_ms {
        Some(0) => return Err(RunError::ZeroTimeout),
        Some(ms) => Some(Duration::from_millis(ms)),
        None => None,
    };
    let mut limits = req.limits.unwrap_or_default();
    limits.timeout_ms = match (limits.timeout_ms, req.timeout_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(size) = req.pty {
        crate::guest::command::pty::valid_size(size.rows, size.cols).map_err(RunError::PtySize)?;
    }
    let detach = match (req.detach, req.tag) {
        (false, Some(_)) => return Err(RunError::TagWithoutDetach),
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
fn check_tag(tag: String) -> Result<String, RunError> {
    let printable = !tag.is_empty() && tag.len() <= 128 && !tag.chars().any(char::is_control);
    match printable {
        true => Ok(tag),
        false => Err(RunError::Tag),
    }
}

/// A folder name is a relative path of plain components: it can only name
/// a place inside the workspace.
pub fn parse_folder(text: &str) -> Result<Vec<String>, FolderNameError> {
    let bad = |problem| {
        Err(FolderNameError {
            text: text.to_string(),
            problem,
        })
    };
    if text.is_empty() {
        return bad(FolderProblem::Empty);
    }
    if text.starts_with('/') {
        return bad(FolderProblem::Absolute);
    }
    let parts: Vec<&str> = text.trim_end_matches('/').split('/').collect();
    if parts.len() > MAX_FOLDER_DEPTH {
        return bad(FolderProblem::TooDeep);
    }
    for part in &parts {
        match *part {
            "" => return bad(FolderProblem::EmptyComponent),
            "." | ".." => return bad(FolderProblem::Dots),
            p if p.contains('\0') => return bad(FolderProblem::Nul),
            // A name is shown in logs and terminals: no line breaks or
            // escape sequences that could forge or hide what is printed.
            p if p.chars().any(crate::shared::printable::hides_text) => {
                return bad(FolderProblem::Control)
            }
            p if p.len() > 255 => return bad(FolderProblem::LongComponent),
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
pub fn parse_signal(text: &str) -> Result<nix::sys::signal::Signal, SignalError> {
    use nix::sys::signal::Signal;
    use std::str::FromStr;
    if let Ok(n) = text.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| SignalError::NoNumber(n));
    }
    let name = if text.starts_with("SIG") {
        text.to_string()
    } else {
        format!("SIG{text}")
    };
    Signal::from_str(&name).map_err(|_| SignalError::Unknown(text.to_string()))
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
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{text:?}: {e}"),
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
            let err = validate(req.clone()).unwrap_err().to_string();
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

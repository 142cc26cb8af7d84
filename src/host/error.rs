//! The launcher's error: the step that failed, the one line saying what
//! went wrong there, and a hint when the failure is a known quirk of hosts
//! (see `host::hint`). It prints as `{step}: {line}`, then
//! `\n  hint: {hint}`, then each note as `\n  {note}`: the text the
//! launcher's commands have always printed, which people and tests read.

use super::definition::DefinitionError;
use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchError {
    /// What was being done: "create container", "state folder /x",
    /// "machine abc", "kind \"vm\"". Empty when the message is one
    /// sentence of its own, with no step to name.
    pub step: String,
    /// What went wrong there: the engine's first line of output, an io
    /// error, the cause. Output that matters whole (a setup script's, a
    /// console's last lines) follows it on lines of its own.
    pub line: String,
    /// What the failure means, when it is a known quirk of hosts.
    pub hint: Option<&'static str>,
    /// Said after the hint: what a failed `up` removed again.
    pub notes: Vec<String>,
}

impl LaunchError {
    pub fn new(step: impl Into<String>, line: impl Into<String>) -> LaunchError {
        LaunchError {
            step: step.into(),
            line: line.into(),
            hint: None,
            notes: Vec::new(),
        }
    }

    /// A message that names no step: printed as it is.
    pub fn sentence(text: impl Into<String>) -> LaunchError {
        LaunchError::new(String::new(), text)
    }

    /// An error on a file, folder or socket: `{path}: {e}`.
    pub fn io(path: &Path, e: impl fmt::Display) -> LaunchError {
        LaunchError::new(path.display().to_string(), e.to_string())
    }

    pub fn with_hint(mut self, hint: Option<&'static str>) -> LaunchError {
        self.hint = hint;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> LaunchError {
        self.notes.push(note.into());
        self
    }

    /// The error as part of a larger step: `{step}: {self}`, the hint and
    /// notes kept (they print last either way).
    pub fn within(self, step: impl Into<String>) -> LaunchError {
        let line = match self.step.is_empty() {
            true => self.line,
            false => format!("{}: {}", self.step, self.line),
        };
        LaunchError {
            step: step.into(),
            line,
            ..self
        }
    }
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.step.is_empty() {
            write!(f, "{}: ", self.step)?;
        }
        f.write_str(&self.line)?;
        if let Some(hint) = self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        for note in &self.notes {
            write!(f, "\n  {note}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LaunchError {}

/// The command line's errors are text: `?` turns a launcher's error into
/// the very text it prints.
impl From<LaunchError> for String {
    fn from(e: LaunchError) -> String {
        e.to_string()
    }
}

/// A definition's error begins with its file: that is the step.
impl From<DefinitionError> for LaunchError {
    fn from(e: DefinitionError) -> LaunchError {
        let path = match &e {
            DefinitionError::Read { path, .. }
            | DefinitionError::TooLarge { path }
            | DefinitionError::Syntax { path, .. }
            | DefinitionError::Invalid { path, .. } => path.display().to_string(),
        };
        let text = e.to_string();
        match text.strip_prefix(&format!("{path}: ")) {
            Some(line) => LaunchError::new(path, line),
            None => LaunchError::sentence(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_table() {
        let hint = "no Docker engine runs here";
        let cases = [
            (LaunchError::new("rm", "gone"), "rm: gone"),
            (LaunchError::sentence("docker is not installed"), "docker is not installed"),
            (
                LaunchError::io(Path::new("/s/a"), "No such file or directory (os error 2)"),
                "/s/a: No such file or directory (os error 2)",
            ),
            (
                LaunchError::new("create container", "docker failed (exit status: 1): x")
                    .with_hint(Some(hint)),
                "create container: docker failed (exit status: 1): x\n  hint: no Docker engine runs here",
            ),
            (
                LaunchError::new("start", "podman failed (exit status: 125): y")
                    .with_hint(Some(hint))
                    .note("removed what this `up` made: container warden-a"),
                "start: podman failed (exit status: 125): y\n  hint: no Docker engine runs here\n  removed what this `up` made: container warden-a",
            ),
            (
                LaunchError::sentence("the VM stopped; its last lines:\na: b").note("n"),
                "the VM stopped; its last lines:\na: b\n  n",
            ),
            (
                LaunchError::new("this program", "gone").within("lend warden"),
                "lend warden: this program: gone",
            ),
            (
                LaunchError::sentence("gone").with_hint(Some(hint)).within("outer"),
                "outer: gone\n  hint: no Docker engine runs here",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want, "{error:?}");
            assert_eq!(String::from(error), want);
        }
    }

    #[test]
    fn a_definition_error_names_its_file_as_the_step() {
        let e = DefinitionError::Invalid {
            path: "/d/def.json".into(),
            field: "id".into(),
            problem: "missing".into(),
        };
        let text = e.to_string();
        let launch = LaunchError::from(e);
        assert_eq!(launch.step, "/d/def.json");
        assert_eq!(launch.line, "id: missing");
        assert_eq!(launch.to_string(), text);
    }
}

//! A definition's paths: files of the host (relative to the definition's
//! folder), the two sides of a mount, and the folders lent to the machine,
//! none of which may shadow the machine's own system paths.

use super::{DefinitionError, Lend, LendMode, Parser};
use crate::host::agent;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

/// A lend may not land on or beneath these (only on `/` itself for `/`):
/// it would shadow the machine's own files. The users' homes under
/// `/home` are refused too (`agent::in_a_home`), but for the agent's
/// folder; the rest of `/home` is free, so a project can be lent at the
/// path it has on the host.
const SYSTEM_PATHS: [&str; 16] = [
    "/", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
    "/dev", "/run", "/var", "/boot", "/root",
];

pub(super) const LEND_FIELDS: [&str; 3] = ["host", "at", "mode"];

impl Parser<'_> {
    /// A file of the host: absolute as written, or relative to the
    /// definition's folder. `.` and doubled slashes are dropped; `..` is
    /// kept (the parser does not know the host's links).
    pub(super) fn resolve(&self, field: &str, written: &str) -> Result<PathBuf, DefinitionError> {
        if written.is_empty() {
            return Err(self.invalid(field, "empty path"));
        }
        if written.chars().any(|c| c.is_control()) {
            return Err(self.invalid(field, format!("{written:?} holds a control character")));
        }
        let written = Path::new(written);
        let joined = if written.is_absolute() {
            written.to_path_buf()
        } else {
            match self.path.parent() {
                Some(folder) if folder.is_absolute() => folder.join(written),
                _ => {
                    return Err(self.invalid(
                        field,
                        format!(
                            "{} is relative, and the definition's own path {} is not absolute to resolve it against",
                            written.display(),
                            self.path.display()
                        ),
                    ))
                }
            }
        };
        Ok(joined.components().collect())
    }

    /// A path that becomes one side of a podman mount: absolute, and free
    /// of what would split or garble mount options.
    pub(super) fn mount_path(
        &self,
        field: &str,
        written: &str,
    ) -> Result<PathBuf, DefinitionError> {
        if !written.starts_with('/') {
            return Err(self.invalid(field, format!("{written:?} is not an absolute path")));
        }
        if written.chars().any(|c| c.is_control()) {
            return Err(self.invalid(field, format!("{written:?} holds a control character")));
        }
        if written.contains([':', ',']) {
            return Err(self.invalid(
                field,
                format!("{written:?} holds ':' or ',', which separate podman's mount options"),
            ));
        }
        Ok(PathBuf::from(written))
    }

    pub(super) fn lends(&self, lends: Vec<Value>) -> Result<Vec<Lend>, DefinitionError> {
        let mut out: Vec<Lend> = Vec::with_capacity(lends.len());
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (i, lend) in lends.into_iter().enumerate() {
            let field = format!("lend[{i}]");
            let Value::Object(mut object) = lend else {
                return Err(self.invalid(field, "must be an object with host, at and mode"));
            };
            self.known_only(&object, &LEND_FIELDS, &format!("{field}."))?;
            let mut required = |key: &str| -> Result<String, DefinitionError> {
                let name = format!("{field}.{key}");
                self.take(&mut object, key, &name)?
                    .ok_or_else(|| self.invalid(name, "missing"))
            };
            let host = required("host")?;
            let at = required("at")?;
            let mode_field = format!("{field}.mode");
            let mode: LendMode = self
                .take(&mut object, "mode", &mode_field)?
                .ok_or_else(|| self.invalid(&mode_field, "missing; \"read\" or \"write\""))?;
            let host = self.mount_path(&format!("{field}.host"), &host)?;
            let at_field = format!("{field}.at");
            let text = at.as_str();
            let at = self.mount_path(&at_field, text)?;
            if text != "/"
                && text[1..]
                    .split('/')
                    .any(|part| part.is_empty() || part == "." || part == "..")
            {
                return Err(self.invalid(
                    at_field,
                    format!("{text} is not normalized (no '.', '..', '//' or trailing '/')"),
                ));
            }
            if let Some(system) = shadowed(&at) {
                return Err(
                    self.invalid(at_field, format!("{text} shadows a system path ({system})"))
                );
            }
            if let Some(home) = agent::in_a_home(&at) {
                return Err(self.invalid(
                    at_field,
                    format!(
                        "{text} overlaps a user's home ({home}); only {} may be lent there",
                        agent::ROUTINES
                    ),
                ));
            }
            // No two earlier ones nest, so at most one is `at` or above
            // it; those below it come right after it in path order.
            let above = at.ancestors().find_map(|a| seen.get_key_value(a));
            let below = || {
                seen.range::<Path, _>((Bound::Excluded(at.as_path()), Bound::Unbounded))
                    .next()
                    .filter(|(other, _)| other.starts_with(&at))
            };
            if let Some((other, j)) = above.or_else(below) {
                let problem = if *other == at {
                    format!("{text} is also lend[{j}].at")
                } else if at.starts_with(other) {
                    format!("{text} is under lend[{j}].at {}", other.display())
                } else {
                    format!("{text} holds lend[{j}].at {}", other.display())
                };
                return Err(self.invalid(at_field, problem));
            }
            seen.insert(at.clone(), i);
            out.push(Lend { host, at, mode });
        }
        Ok(out)
    }
}

/// The system path `at` would shadow, if any.
fn shadowed(at: &Path) -> Option<&'static str> {
    SYSTEM_PATHS.into_iter().find(|system| match *system {
        "/" => at == Path::new("/"),
        system => at.starts_with(system),
    })
}

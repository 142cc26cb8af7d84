//! A definition's readiness: what `up` and `--start` wait for before they
//! return (`ready: "runtime"`: the runtime says `ready`; `ready_port`: a
//! port of the machine accepts a connection), and for how long at most.

use super::{DefinitionError, Parser};
use crate::shared::config::ReadyWhen;
use serde_json::{Map, Value};

/// The longest wait for a machine to be ready: an hour.
const MAX_TIMEOUT_S: u64 = 3600;

/// What `up` waits for, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Ready {
    /// None: warden's answering is enough (as without these fields).
    pub when: Option<ReadyWhen>,
    pub timeout_s: u64,
}

impl Default for Ready {
    fn default() -> Ready {
        Ready {
            when: None,
            timeout_s: 120,
        }
    }
}

impl Parser<'_> {
    /// `ready`, `ready_port` and `ready_timeout_s`.
    pub(super) fn ready(&self, object: &mut Map<String, Value>) -> Result<Ready, DefinitionError> {
        let said: Option<String> = self.take(object, "ready", "ready")?.flatten();
        let port: Option<u16> = self.take(object, "ready_port", "ready_port")?.flatten();
        let timeout_s: Option<u64> = self
            .take(object, "ready_timeout_s", "ready_timeout_s")?
            .flatten();
        let when = match (said.as_deref(), port) {
            (None, None) => None,
            (Some("runtime"), None) => Some(ReadyWhen::Runtime),
            (None, Some(0)) => return Err(self.invalid("ready_port", "0 is no port")),
            (None, Some(port)) => Some(ReadyWhen::Port(port)),
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "ready",
                    "either the runtime says it (\"ready\": \"runtime\") or a port answers (\"ready_port\"), not both",
                ))
            }
            (Some(other), None) => {
                return Err(self.invalid(
                    "ready",
                    format!("{other:?} is not \"runtime\" (for a port, give \"ready_port\")"),
                ))
            }
        };
        let timeout_s = match timeout_s {
            None => Ready::default().timeout_s,
            Some(_) if when.is_none() => {
                return Err(self.invalid(
                    "ready_timeout_s",
                    "given without \"ready\" or \"ready_port\": there is nothing to wait for",
                ))
            }
            Some(s) if (1..=MAX_TIMEOUT_S).contains(&s) => s,
            Some(s) => {
                return Err(self.invalid(
                    "ready_timeout_s",
                    format!("{s} is not between 1 and {MAX_TIMEOUT_S}"),
                ))
            }
        };
        Ok(Ready { when, timeout_s })
    }
}

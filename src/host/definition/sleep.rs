//! How a machine sleeps and wakes: `serve` (its published ports fronted by
//! `warden machine serve`, which holds them while the machine sleeps and
//! starts it at the first connection) and `idle` (after its idle time it
//! is stopped, or frozen with its memory kept).

use super::{DefinitionError, Kind, Parser};
use serde_json::{Map, Value};

/// What follows the idle time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idle {
    /// Stopped: its memory is gone, its volumes stay.
    #[default]
    Stop,
    /// Frozen by the engine: its memory stays; the first request thaws it.
    Pause,
}

/// The sleep fields, checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sleep {
    pub serve: bool,
    pub idle: Idle,
}

impl Parser<'_> {
    /// `serve` and `idle`, against the ports, the idle time and the kind.
    pub(super) fn sleep(
        &self,
        object: &mut Map<String, Value>,
        has_ports: bool,
        idle_minutes: Option<f64>,
        kind: Kind,
    ) -> Result<Sleep, DefinitionError> {
        let serve: bool = self.take(object, "serve", "serve")?.unwrap_or(false);
        let idle: Idle = self.take(object, "idle", "idle")?.unwrap_or_default();
        if serve && !has_ports {
            return Err(self.invalid(
                "serve",
                "fronts published ports: the definition has no \"ports\"",
            ));
        }
        if serve && kind == Kind::Vm {
            return Err(self.invalid(
                "serve",
                "fronts a container's ports; a VM's are carried by its relay",
            ));
        }
        if idle == Idle::Pause && !serve {
            return Err(self.invalid(
                "idle",
                "\"pause\" is done by `warden machine serve`, which thaws it at the next connection: needs \"serve\": true",
            ));
        }
        if idle == Idle::Pause && idle_minutes.is_none() {
            return Err(self.invalid(
                "idle",
                "\"pause\" after how long? needs \"idle_stop_minutes\"",
            ));
        }
        Ok(Sleep { serve, idle })
    }
}

//! How a machine sleeps and wakes: `serve` (its published ports fronted by
//! `warden machine serve`, which holds them while the machine sleeps and
//! starts it at the first connection) and `idle` (after its idle time it
//! is stopped, or frozen with its memory kept). A VM's ports are its
//! relay's at all times: serve only freezes it, and its relay or its door
//! thaws it; a stopped VM is made again by `up`.

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
        if let Err(why) = serve_fits(serve, idle, has_ports, kind) {
            return Err(self.invalid("serve", why));
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

/// Pure: whether `serve` fits the machine's ports, its idle and its kind
/// (also asked when `up --vm` makes a VM of a container's definition).
pub fn serve_fits(
    serve: bool,
    idle: Idle,
    has_ports: bool,
    kind: Kind,
) -> Result<(), &'static str> {
    match (serve, kind) {
        (false, _) => Ok(()),
        (true, Kind::Vm) if idle != Idle::Pause => Err(
            "a VM's ports are its relay's; serve freezes a VM (\"idle\": \"pause\"), and a stopped VM is made again by `warden machine up`",
        ),
        (true, Kind::Vm) => Ok(()),
        (true, _) if !has_ports => Err("fronts published ports: the definition has no \"ports\""),
        (true, _) => Ok(()),
    }
}

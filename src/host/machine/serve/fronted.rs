//! What `up` does for a machine whose ports `warden machine serve` fronts:
//! the fronts kept in its state folder, serve started when none runs, and
//! `up` back only once serve holds the ports. A VM's ports stay its
//! relay's: serve is told of it only to freeze it when idle.

use super::fronts::{self, Fronts};
use crate::host::agent::HostPort;
use crate::host::agent_setup::host_ports;
use crate::host::backend::Prepared;
use crate::host::definition::Idle;
use crate::host::LaunchError;

/// A machine whose ports `warden machine serve` fronts: what it fronts
/// kept for it (the same host ports as before where the machine had them),
/// serve started when none runs; the lines `up` says.
pub(in crate::host) fn front(p: &Prepared) -> Result<Vec<String>, LaunchError> {
    let def = p.def;
    let before = fronts::load(&p.state);
    let held = before.as_ref().is_some_and(|b| {
        def.ports.iter().all(|port| {
            b.ports.iter().any(|f| {
                f.port == port.port
                    && match port.host {
                        HostPort::Fixed(h) => f.front == h,
                        HostPort::Auto { .. } => true,
                    }
            })
        })
    });
    let ports = match held {
        true => {
            let ports: Vec<(u16, u16)> = def.ports.iter().map(|p| (0, p.port)).collect();
            fronts::keep_fronts(before.as_ref(), &ports)
        }
        false => fronts::keep_fronts(None, &host_ports(def)?),
    };
    let (kept, serving) = keep_served(p, ports)?;
    Ok(kept
        .ports
        .iter()
        .map(|f| {
            format!(
                "{}/tcp -> 127.0.0.1:{} (fronted by {serving})",
                f.port, f.front
            )
        })
        .collect())
}

/// A VM that serve freezes when idle (its relay holds its ports and thaws
/// it at a connection, as its door does); the line `up` says.
pub(in crate::host) fn watch(p: &Prepared) -> Result<String, LaunchError> {
    let (_, serving) = keep_served(p, Vec::new())?;
    Ok(format!("frozen when idle by {serving}"))
}

/// Keeps what serve fronts for the machine, starts serve when none runs,
/// and waits until it holds the ports; says which serve it is.
fn keep_served(p: &Prepared, ports: Vec<fronts::Front>) -> Result<(Fronts, String), LaunchError> {
    let kept = Fronts {
        ports,
        idle_s: p.def.idle_stop_s(),
        idle: p.def.sleep.idle,
        engine: fronts::engine_key(p.host.engine),
    };
    fronts::keep(&p.state, &kept).map_err(|e| LaunchError::io(&p.state.join(fronts::FILE), e))?;
    if kept.idle == Idle::Pause {
        // From now on a connection to its door is made under it.
        let lock = p.state.join(super::SLEEP_LOCK);
        std::fs::write(&lock, b"").map_err(|e| LaunchError::io(&lock, e))?;
    }
    let serving = match super::ensure_running()? {
        Some(pid) => format!("warden machine serve started, pid {pid}"),
        None => "warden machine serve".to_string(),
    };
    super::wait_held(&kept.ports);
    Ok((kept, serving))
}

/// A machine made again without `serve`: serve lets it go.
pub(in crate::host) fn forget(state: &std::path::Path) {
    let _ = std::fs::remove_file(state.join(fronts::FILE));
}

//! What `warden machine serve` fronts for one machine, kept in its state
//! folder (`serve.json`) by `up`: the host ports serve holds (`front`) for
//! the machine's ports (`port`; the engine publishes each on a port of its
//! own choosing, asked at each start), the idle time and what follows it.
//! Beside it, `next-job.json` (the runtime's next job, as serve last read
//! it, kept across the machine's stop) and `paused` (the machine is
//! frozen: its door must thaw it first).

use crate::host::definition::Idle;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FILE: &str = "serve.json";
pub const NEXT_JOB: &str = "next-job.json";

/// One fronted port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Front {
    /// On the host's 127.0.0.1, held by serve.
    pub front: u16,
    /// The runtime's, inside the machine.
    pub port: u16,
}

/// A machine as serve fronts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fronts {
    pub ports: Vec<Front>,
    /// Seconds with no connection, request, command or hold before it
    /// sleeps; None: never.
    pub idle_s: Option<u64>,
    pub idle: Idle,
    /// The engine that made the machine (`engine_key`): a serve runs
    /// with one, and fronts that one's machines only.
    pub engine: String,
}

/// The engine this process runs machines with: podman, or Docker and the
/// daemon it speaks to (two daemons' machines share the state root).
pub fn engine_key(engine: crate::host::this_host::Engine) -> String {
    match (engine, std::env::var("DOCKER_HOST")) {
        (crate::host::this_host::Engine::Docker, Ok(daemon)) if !daemon.is_empty() => {
            format!("docker {daemon}")
        }
        (engine, _) => engine.program().to_string(),
    }
}

/// What the machine in `state` is fronted with, if it is.
pub fn load(state: &Path) -> Option<Fronts> {
    serde_json::from_slice(&std::fs::read(state.join(FILE)).ok()?).ok()
}

/// Keeps it for serve; a failure is `up`'s.
pub fn keep(state: &Path, fronts: &Fronts) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(fronts).map_err(std::io::Error::other)?;
    let fresh = state.join(format!("{FILE}.new"));
    std::fs::write(&fresh, text)?;
    std::fs::rename(fresh, state.join(FILE))
}

/// The runtime's next job as serve last read it (Unix ms).
pub fn next_job(state: &Path) -> Option<u64> {
    let value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join(NEXT_JOB)).ok()?).ok()?;
    value.get("at_ms")?.as_u64().filter(|&t| t != 0)
}

/// Keeps the runtime's next job (0: none) across the machine's stop.
pub fn keep_next_job(state: &Path, at_ms: u64) -> std::io::Result<()> {
    if next_job(state).unwrap_or(0) == at_ms {
        return Ok(());
    }
    let fresh = state.join(format!("{NEXT_JOB}.new"));
    std::fs::write(&fresh, serde_json::json!({ "at_ms": at_ms }).to_string())?;
    std::fs::rename(fresh, state.join(NEXT_JOB))
}

/// Pure: the front ports for `ports` (the machine's), the ones kept when
/// the same port was fronted before (serve may hold them now), else the
/// ones chosen now.
pub fn keep_fronts(before: Option<&Fronts>, chosen: &[(u16, u16)]) -> Vec<Front> {
    chosen
        .iter()
        .map(|&(front, port)| {
            let held = before.and_then(|b| b.ports.iter().find(|f| f.port == port));
            held.copied().unwrap_or(Front { front, port })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_fronted_before_keeps_its_front() {
        let before = Fronts {
            ports: vec![Front {
                front: 3100,
                port: 3000,
            }],
            idle_s: None,
            idle: Idle::Stop,
            engine: "podman".into(),
        };
        let kept = keep_fronts(Some(&before), &[(3200, 3000), (4100, 4000)]);
        assert_eq!(
            kept,
            vec![
                Front {
                    front: 3100,
                    port: 3000
                },
                Front {
                    front: 4100,
                    port: 4000
                }
            ]
        );
        assert_eq!(
            keep_fronts(None, &[(3200, 3000)]),
            vec![Front {
                front: 3200,
                port: 3000
            }]
        );
    }

    #[test]
    fn the_files_are_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()), None);
        let fronts = Fronts {
            ports: vec![Front {
                front: 3100,
                port: 3000,
            }],
            idle_s: Some(6),
            idle: Idle::Pause,
            engine: "docker unix:///run/d.sock".into(),
        };
        keep(dir.path(), &fronts).unwrap();
        assert_eq!(load(dir.path()), Some(fronts));
        assert_eq!(next_job(dir.path()), None);
        keep_next_job(dir.path(), 1_796_112_000_000).unwrap();
        assert_eq!(next_job(dir.path()), Some(1_796_112_000_000));
        keep_next_job(dir.path(), 0).unwrap();
        assert_eq!(next_job(dir.path()), None);
    }
}

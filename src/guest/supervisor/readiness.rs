//! Whether the machine is ready, by what its definition waits for: the
//! runtime saying so (`ready`, protocol version 9), or a port of the
//! machine accepting a connection, which warden tries until it does. The
//! launcher's `up` and `--start` wait for it (see `host::ready`).

use super::Supervisor;
use crate::guest::audit::payload;
use crate::shared::config::ReadyWhen;
use crate::wire::ReadyState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the machine waits for, and since when (and by what) it is ready.
pub struct Readiness {
    wanted: Option<ReadyWhen>,
    /// Milliseconds after warden started, plus one; 0 while not ready.
    after_ms: AtomicU64,
    by: Mutex<Option<String>>,
}

impl Readiness {
    pub fn new(wanted: Option<ReadyWhen>) -> Readiness {
        Readiness {
            wanted,
            after_ms: AtomicU64::new(0),
            by: Mutex::new(None),
        }
    }

    /// Notes the machine ready `after_ms` after warden started, `by` what;
    /// true the first time only.
    fn note(&self, after_ms: u64, by: &str) -> bool {
        let first = self
            .after_ms
            .compare_exchange(0, after_ms + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if first {
            *self.by.lock().unwrap_or_else(|e| e.into_inner()) = Some(by.to_string());
        }
        first
    }

    fn after_ms(&self) -> Option<u64> {
        self.after_ms.load(Ordering::SeqCst).checked_sub(1)
    }

    pub fn state(&self) -> ReadyState {
        ReadyState {
            wanted: self.wanted.map(|w| w.to_string()),
            after_ms: self.after_ms(),
            by: self.by.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

impl Supervisor {
    /// The machine is ready, `by` what: recorded once (`ready`); answers
    /// since when.
    pub fn note_ready(&self, by: &str) -> u64 {
        let now = self.started.elapsed().as_millis() as u64;
        if self.readiness.note(now, by) {
            let wanted = self.readiness.wanted.map(|w| w.to_string());
            self.audit.record(&payload::Ready {
                by,
                after_ms: now,
                wanted,
            });
        }
        self.readiness.after_ms().unwrap_or(now)
    }
}

/// Where the definition waits for a port: tries it on loopback (every
/// 50 ms for the first minute, then every second) until it accepts a
/// connection, and notes the machine ready. Called in the runtime.
pub fn watch_port(sup: &Arc<Supervisor>) {
    let Some(ReadyWhen::Port(port)) = sup.readiness.wanted else {
        return;
    };
    let watched = Arc::downgrade(sup);
    tokio::spawn(async move {
        let mut tries: u32 = 0;
        loop {
            let Some(sup) = watched.upgrade() else { return };
            if sup.readiness.after_ms().is_some() {
                return;
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                sup.note_ready(&format!("port {port}"));
                return;
            }
            drop(sup);
            tries = tries.saturating_add(1);
            tokio::time::sleep(pause_after(tries)).await;
        }
    });
}

/// Pure: the pause after the `tries`th refused connection: short while a
/// runtime is likely starting, then gentle.
fn pause_after(tries: u32) -> Duration {
    match tries {
        0..=1200 => Duration::from_millis(50),
        _ => Duration::from_secs(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_is_noted_once_and_said_as_wanted() {
        let r = Readiness::new(Some(ReadyWhen::Port(3000)));
        let state = r.state();
        assert_eq!(state.wanted.as_deref(), Some("port 3000"));
        assert!(!state.is_ready());
        assert!(r.note(0, "port 3000"), "0 ms after the start is a time too");
        assert!(!r.note(70, "runtime"));
        let state = r.state();
        assert_eq!(
            (state.after_ms, state.by.as_deref()),
            (Some(0), Some("port 3000"))
        );
        assert!(state.is_ready());
        // Nothing wanted: ready once warden answers.
        assert!(Readiness::new(None).state().is_ready());
    }

    #[test]
    fn the_port_is_tried_often_at_first_then_gently() {
        let cases = [(1, 50), (1200, 50), (1201, 1000), (u32::MAX, 1000)];
        for (tries, ms) in cases {
            assert_eq!(pause_after(tries), Duration::from_millis(ms), "{tries}");
        }
    }
}

//! Waiting for a machine to be ready: `up`, `exec --start` and `status
//! --start` return once the machine's warden says it is (the runtime said
//! `ready`, or the port the definition names accepted a connection), or
//! fail after the definition's `ready_timeout_s`, saying what they waited
//! for. A machine whose definition waits for nothing is ready once warden
//! answers, as before.

use super::LaunchError;
use crate::wire::client::Client;
use crate::wire::ReadyState;
use std::time::{Duration, Instant};

/// How often warden is asked.
const POLL: Duration = Duration::from_millis(50);

/// The definition's `ready_timeout_s` as the machine was last made with,
/// for `--start`, which has no definition in hand.
pub fn timeout_of(state: &std::path::Path) -> Duration {
    let made = super::made_from::load(state);
    let given = made.and_then(|m| m.definition.get("ready_timeout_s")?.as_u64());
    Duration::from_secs(given.unwrap_or(super::definition::Ready::default().timeout_s))
}

/// Waits until the machine's warden (reached by `connect`) says it is
/// ready; returns what made it ready, None when nothing was waited for.
pub fn wait(
    id: &str,
    timeout: Duration,
    connect: impl Fn() -> Result<Client, LaunchError>,
) -> Result<Option<String>, LaunchError> {
    let begun = Instant::now();
    let mut client = connect()?;
    loop {
        let status = client
            .status()
            .map_err(|e| LaunchError::new(format!("machine {id}"), e.to_string()))?;
        // An older warden says nothing of readiness: it answered, enough.
        let Some(ready) = status.ready else {
            return Ok(None);
        };
        if ready.is_ready() {
            return Ok(ready.wanted.and(ready.by));
        }
        if begun.elapsed() >= timeout {
            return Err(not_ready(id, &ready, timeout));
        }
        std::thread::sleep(POLL);
    }
}

/// Pure: the one line a machine that did not become ready in time gets.
fn not_ready(id: &str, ready: &ReadyState, timeout: Duration) -> LaunchError {
    let what = match ready.wanted.as_deref() {
        Some("runtime") => "the runtime to say `ready`".to_string(),
        Some(port) => format!("its {port} to accept a connection"),
        None => "nothing".to_string(),
    };
    LaunchError::new(
        format!("machine {id}"),
        format!(
            "not ready after {} s: waited for {what} (ready_timeout_s); it runs: `warden machine logs {id}` shows its output",
            timeout.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_ready_says_what_was_waited_for() {
        let cases = [
            ("runtime", "waited for the runtime to say `ready`"),
            (
                "port 3000",
                "waited for its port 3000 to accept a connection",
            ),
        ];
        for (wanted, said) in cases {
            let ready = ReadyState {
                wanted: Some(wanted.into()),
                after_ms: None,
                by: None,
            };
            let e = not_ready("a", &ready, Duration::from_secs(3)).to_string();
            assert!(e.contains("not ready after 3 s") && e.contains(said), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}

//! serve's decisions, pure: whether a running machine has been idle long
//! enough to sleep, and whether a sleeping one's job is near enough to
//! start it.

use crate::shared::idle::job_soon;

/// What serve saw of a running machine at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Since warden's last request or command's end.
    pub warden_idle_ms: u64,
    /// Commands running now.
    pub running: usize,
    /// The runtime's hold (Unix ms), when one is in force.
    pub held_until_ms: Option<u64>,
    pub next_job_ms: Option<u64>,
    /// Connections serve carries to it now.
    pub open: usize,
    /// Since serve last carried one.
    pub carried_idle_ms: u64,
}

/// Pure: whether the machine sleeps now, idle for `limit_ms` at least.
pub fn sleep_due(seen: Seen, limit_ms: u64, now_ms: u64) -> bool {
    let idle = seen.warden_idle_ms.min(seen.carried_idle_ms);
    seen.open == 0
        && seen.running == 0
        && idle >= limit_ms
        && seen.held_until_ms.is_none_or(|t| t <= now_ms)
        && !job_soon(seen.next_job_ms.unwrap_or(0), now_ms)
}

/// Pure: whether a sleeping machine is started now for its job at
/// `job_ms`, `lead_ms` ahead, unless it was already started for it.
pub fn job_start_due(job_ms: u64, lead_ms: u64, now_ms: u64, started_for: Option<u64>) -> bool {
    started_for != Some(job_ms) && now_ms + lead_ms >= job_ms && now_ms <= job_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        Seen {
            warden_idle_ms: 10_000,
            running: 0,
            held_until_ms: None,
            next_job_ms: None,
            open: 0,
            carried_idle_ms: 10_000,
        }
    }

    #[test]
    fn a_machine_sleeps_only_when_nothing_keeps_it() {
        let now = 1_000_000;
        let cases = [
            (seen(), true),
            (
                Seen {
                    warden_idle_ms: 9_999,
                    ..seen()
                },
                false,
            ),
            (
                Seen {
                    carried_idle_ms: 9_999,
                    ..seen()
                },
                false,
            ),
            (Seen { open: 1, ..seen() }, false),
            (
                Seen {
                    running: 1,
                    ..seen()
                },
                false,
            ),
            (
                Seen {
                    held_until_ms: Some(now + 1),
                    ..seen()
                },
                false,
            ),
            (
                Seen {
                    held_until_ms: Some(now),
                    ..seen()
                },
                true,
            ),
            (
                Seen {
                    next_job_ms: Some(now + 60_000),
                    ..seen()
                },
                false,
            ),
            (
                Seen {
                    next_job_ms: Some(now + 600_000),
                    ..seen()
                },
                true,
            ),
        ];
        for (seen, want) in cases {
            assert_eq!(sleep_due(seen, 10_000, now), want, "{seen:?}");
        }
    }

    #[test]
    fn a_job_starts_its_machine_once_within_the_lead() {
        let job = 1_000_000;
        let cases = [
            (job - 120_001, None, false),
            (job - 120_000, None, true),
            (job, None, true),
            (job + 1, None, false),
            (job - 60_000, Some(job), false),
            (job - 60_000, Some(job - 5), true),
        ];
        for (now, started_for, want) in cases {
            assert_eq!(
                job_start_due(job, 120_000, now, started_for),
                want,
                "{now} {started_for:?}"
            );
        }
    }
}

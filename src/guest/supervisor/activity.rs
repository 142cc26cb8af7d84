//! When the machine was last used, and whether it may stop for being
//! idle (`idle_stop_s`): no API request, no command running and no hold
//! for that long. The runtime holds the machine awake until a time with
//! `hold` (protocol version 4), e.g. for a job that is due then. A
//! connection carried in (a VM's published port) keeps it in use while
//! it is open.

use crate::shared::idle::{job_soon, now_ms};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest hold: a week from now.
pub const MAX_HOLD_MS: u64 = 7 * 24 * 3600 * 1000;

pub struct Activity {
    /// The idle stop in milliseconds, 0 for none; a reload may change it.
    idle_stop_ms: AtomicU64,
    /// Whether a task watches for the idle stop (see `boot`): one at most.
    pub watching: AtomicBool,
    last: Mutex<Instant>,
    /// Unix time in milliseconds; 0 when nothing holds the machine.
    held_until_ms: AtomicU64,
    /// The runtime's next job, Unix ms; 0: none said.
    next_job_ms: AtomicU64,
    stopped_idle: AtomicBool,
    /// Connections carried in and open now.
    carried: AtomicUsize,
}

/// Pure: whether a machine idle for `idle`, with `running` commands, held
/// until `held_until_ms` and its next job at `next_job_ms`, stops now.
pub fn due(
    idle: Duration,
    idle_stop: Duration,
    running: usize,
    (held_until_ms, next_job_ms): (u64, u64),
    now_ms: u64,
) -> bool {
    running == 0 && idle >= idle_stop && held_until_ms <= now_ms && !job_soon(next_job_ms, now_ms)
}

impl Activity {
    pub fn new(idle_stop_s: Option<u64>) -> Activity {
        Activity {
            idle_stop_ms: AtomicU64::new(idle_stop_s.map_or(0, |s| s.saturating_mul(1000))),
            watching: AtomicBool::new(false),
            last: Mutex::new(Instant::now()),
            held_until_ms: AtomicU64::new(0),
            next_job_ms: AtomicU64::new(0),
            stopped_idle: AtomicBool::new(false),
            carried: AtomicUsize::new(0),
        }
    }

    /// Something happened: a request, a command's end.
    pub fn touch(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// How long nothing happened; none while a carried connection is open.
    pub fn idle(&self) -> Duration {
        match self.carried.load(Ordering::SeqCst) {
            0 => self.last().elapsed(),
            _ => Duration::ZERO,
        }
    }

    /// A connection carried in began (true) or ended (false).
    pub fn carrying(&self, began: bool) {
        match began {
            true => self.carried.fetch_add(1, Ordering::SeqCst),
            false => self.carried.fetch_sub(1, Ordering::SeqCst),
        };
        self.touch();
    }

    /// When something last happened.
    pub fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn idle_stop(&self) -> Option<Duration> {
        match self.idle_stop_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// The idle stop from now on (None: never); the idle time so far counts.
    pub fn set_idle_stop(&self, idle_stop_s: Option<u64>) {
        let ms = idle_stop_s.map_or(0, |s| s.saturating_mul(1000));
        self.idle_stop_ms.store(ms, Ordering::SeqCst);
    }

    /// Holds the machine awake until `until_ms` (Unix ms; 0 lets go);
    /// returns the hold now in force, or why it is refused.
    pub fn hold(&self, until_ms: u64) -> Result<u64, String> {
        let now = now_ms();
        if until_ms > now.saturating_add(MAX_HOLD_MS) {
            return Err(format!(
                "until_ms {until_ms} is more than a week from now ({now})"
            ));
        }
        let until = if until_ms <= now { 0 } else { until_ms };
        self.held_until_ms.store(until, Ordering::SeqCst);
        self.touch();
        Ok(until)
    }

    pub fn held_until_ms(&self) -> Option<u64> {
        match self.held_until_ms.load(Ordering::SeqCst) {
            0 => None,
            t if t <= now_ms() => None,
            t => Some(t),
        }
    }

    /// Whether the machine stops now for being idle, with `running`
    /// commands; once true, it is recorded as the reason of the stop.
    pub fn stop_now(&self, running: usize) -> bool {
        let Some(limit) = self.idle_stop() else {
            return false;
        };
        let held = self.held_until_ms.load(Ordering::SeqCst);
        let job = self.next_job_ms.load(Ordering::SeqCst);
        let stop = due(self.idle(), limit, running, (held, job), now_ms());
        if stop {
            self.stopped_idle.store(true, Ordering::SeqCst);
        }
        stop
    }

    /// The runtime's next job (Unix ms; 0: none), from now on.
    pub fn set_next_job(&self, at_ms: u64) {
        self.next_job_ms.store(at_ms, Ordering::SeqCst);
    }

    /// The runtime's next job, when it said one.
    pub fn next_job_ms(&self) -> Option<u64> {
        Some(self.next_job_ms.load(Ordering::SeqCst)).filter(|&t| t != 0)
    }

    /// Whether the machine stopped because it was idle.
    pub fn stopped_idle(&self) -> bool {
        self.stopped_idle.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_table() {
        let s = Duration::from_secs;
        let min = 60_000;
        // (idle, limit, running, held until, next job, now) -> due
        let cases = [
            (s(10), s(10), 0, 0, 0, 1000, true),
            (s(9), s(10), 0, 0, 0, 1000, false),
            (s(60), s(10), 1, 0, 0, 1000, false),
            (s(60), s(10), 0, 2000, 0, 1000, false),
            (s(60), s(10), 0, 1000, 0, 1000, true),
            (s(60), s(10), 0, 999, 0, 1000, true),
            // A job within five minutes keeps it; one later, or past, not.
            (s(60), s(10), 0, 0, 1000 + 5 * min, 1000, false),
            (s(60), s(10), 0, 0, 1001 + 5 * min, 1000, true),
            (s(60), s(10), 0, 0, 999, 1000, true),
        ];
        for (idle, limit, running, held, job, now, want) in cases {
            assert_eq!(
                due(idle, limit, running, (held, job), now),
                want,
                "{idle:?} {limit:?} {running} {held} {job} {now}"
            );
        }
    }

    #[test]
    fn holds_are_bounded_and_lapse() {
        let a = Activity::new(Some(1));
        assert!(a.hold(now_ms() + MAX_HOLD_MS + 60_000).is_err());
        let until = now_ms() + 60_000;
        assert_eq!(a.hold(until), Ok(until));
        assert_eq!(a.held_until_ms(), Some(until));
        assert_eq!(a.hold(1), Ok(0), "a time past lets go");
        assert_eq!(a.held_until_ms(), None);
        assert!(!Activity::new(None).stop_now(0), "no idle stop set: never");
    }

    #[test]
    fn an_open_carried_connection_is_not_idle() {
        let a = Activity::new(Some(1));
        std::thread::sleep(Duration::from_millis(5));
        a.carrying(true);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(a.idle(), Duration::ZERO, "open: in use");
        a.carrying(false);
        assert!(
            a.idle() < Duration::from_millis(5),
            "its end is the last use"
        );
    }
}

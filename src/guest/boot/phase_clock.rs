//! Where the boot's time goes: each phase's share, in the order the
//! phases ran, for the boot line (`boot_ms`, `boot_phases_ms`).

use serde_json::{json, Value};
use std::time::Instant;

/// Marks the end of each phase against the boot's start.
pub struct PhaseClock {
    start: Instant,
    last: f64,
    phases: Vec<(&'static str, f64)>,
}

impl PhaseClock {
    pub fn new(start: Instant) -> PhaseClock {
        PhaseClock {
            start,
            last: 0.0,
            phases: Vec::new(),
        }
    }

    /// `phase` ended now: it took the time since the previous mark.
    pub fn mark(&mut self, phase: &'static str) {
        let now = self.start.elapsed().as_secs_f64() * 1e3;
        self.record(phase, now);
    }

    /// When the boot began.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The boot's time up to the last mark: the phases' sum.
    pub fn elapsed_ms(&self) -> f64 {
        self.last
    }

    fn record(&mut self, phase: &'static str, now_ms: f64) {
        self.phases.push((phase, (now_ms - self.last).max(0.0)));
        self.last = now_ms.max(self.last);
    }

    /// `[{"phase": name, "ms": ms}, ...]` in the order the phases ran,
    /// to 0.01 ms.
    pub fn said(&self) -> Value {
        let round = |ms: f64| (ms * 100.0).round() / 100.0;
        self.phases
            .iter()
            .map(|(phase, ms)| json!({"phase": phase, "ms": round(*ms)}))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_takes_the_time_since_the_one_before() {
        let cases: [(&[(&str, f64)], &str); 3] = [
            (&[], "[]"),
            (
                &[("config", 1.0), ("users", 1.5), ("probe", 4.25)],
                r#"[{"ms":1.0,"phase":"config"},{"ms":0.5,"phase":"users"},{"ms":2.75,"phase":"probe"}]"#,
            ),
            // A clock read earlier than the last mark (it cannot go back,
            // but a phase is never negative).
            (
                &[("a", 2.0), ("b", 1.0), ("c", 3.0)],
                r#"[{"ms":2.0,"phase":"a"},{"ms":0.0,"phase":"b"},{"ms":1.0,"phase":"c"}]"#,
            ),
        ];
        for (marks, want) in cases {
            let mut clock = PhaseClock::new(Instant::now());
            for (phase, at) in marks {
                clock.record(phase, *at);
            }
            assert_eq!(clock.said().to_string(), want, "{marks:?}");
            let last = marks.iter().map(|(_, at)| *at).fold(0.0, f64::max);
            assert_eq!(clock.elapsed_ms(), last, "{marks:?}");
        }
    }

    #[test]
    fn marks_follow_the_real_clock() {
        let mut clock = PhaseClock::new(Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(2));
        clock.mark("slept");
        let slept = clock.said()[0]["ms"].as_f64().unwrap();
        assert!(slept >= 2.0, "{slept}");
    }
}

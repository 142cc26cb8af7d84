//! Keeps a flood of refusals from flooding the audit log: per kind of line
//! and per source (a uid, the proxy), the first `burst` lines of a window
//! are written whole; the rest are counted, and the count is written as
//! one `suppressed` line once the window is over. Nothing is lost: every
//! refusal is either a line or part of a count.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How many sources are told apart; more share one bucket, so a flood of
/// made-up sources cannot grow warden's memory.
const MAX_SOURCES: usize = 64;
const OTHERS: &str = "others";
/// Distinct examples a count keeps of what it counted (e.g. the hosts a
/// flood asked for), so that the real attempts inside a flood of junk are
/// not a bare number.
const SAMPLES: usize = 8;
const SAMPLE_BYTES: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Write,
    /// Counted into the next summary instead.
    Count,
}

/// What was counted and not written, for one kind and source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub kind: String,
    pub source: String,
    pub count: u64,
    pub window: Duration,
    /// Up to SAMPLES distinct examples of what was counted.
    pub samples: Vec<String>,
}

#[derive(Debug)]
struct Bucket {
    since: Instant,
    written: u32,
    counted: u64,
    samples: Vec<String>,
}

#[derive(Debug)]
pub struct Throttle {
    burst: u32,
    window: Duration,
    buckets: HashMap<(String, String), Bucket>,
}

impl Throttle {
    pub fn new(burst: u32, window: Duration) -> Throttle {
        Throttle {
            burst,
            window,
            buckets: HashMap::new(),
        }
    }

    /// Whether a line of `kind` from `source` is written now; `sample`
    /// is kept (a few distinct ones) when it is only counted.
    pub fn admit(
        &mut self,
        kind: &str,
        source: &str,
        sample: Option<&str>,
        now: Instant,
    ) -> Verdict {
        let known = self
            .buckets
            .contains_key(&(kind.to_string(), source.to_string()));
        let source = if known || self.buckets.len() < MAX_SOURCES {
            source
        } else {
            OTHERS
        };
        let bucket = self
            .buckets
            .entry((kind.to_string(), source.to_string()))
            .or_insert(Bucket {
                since: now,
                written: 0,
                counted: 0,
                samples: Vec::new(),
            });
        if now.duration_since(bucket.since) >= self.window && bucket.counted == 0 {
            bucket.since = now;
            bucket.written = 0;
        }
        if bucket.written < self.burst {
            bucket.written += 1;
            Verdict::Write
        } else {
            bucket.counted += 1;
            if let Some(sample) = sample {
                let sample: String = sample.chars().take(SAMPLE_BYTES).collect();
                if bucket.samples.len() < SAMPLES && !bucket.samples.contains(&sample) {
                    bucket.samples.push(sample);
                }
            }
            Verdict::Count
        }
    }

    /// Puts back a count that could not be written, to be written later.
    pub fn restore(&mut self, summary: Summary, now: Instant) {
        let bucket = self
            .buckets
            .entry((summary.kind, summary.source))
            .or_insert(Bucket {
                since: now,
                written: 0,
                counted: 0,
                samples: Vec::new(),
            });
        bucket.counted += summary.count;
        for s in summary.samples {
            if bucket.samples.len() < SAMPLES && !bucket.samples.contains(&s) {
                bucket.samples.push(s);
            }
        }
    }

    /// The counts of every window that is over (all of them when `all`),
    /// each once; their buckets start afresh.
    pub fn due(&mut self, now: Instant, all: bool) -> Vec<Summary> {
        let window = self.window;
        let mut out = Vec::new();
        self.buckets.retain(|(kind, source), b| {
            let over = all || now.duration_since(b.since) >= window;
            if over && b.counted > 0 {
                out.push(Summary {
                    kind: kind.clone(),
                    source: source.clone(),
                    count: b.counted,
                    window: now.duration_since(b.since),
                    samples: std::mem::take(&mut b.samples),
                });
            }
            // A quiet bucket whose window is over is forgotten.
            !over
        });
        out.sort_by(|a, b| (&a.kind, &a.source).cmp(&(&b.kind, &b.source)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_written_the_rest_counted_and_summed_once() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = Throttle::new(3, 10 * s);
        // (kind, source, seconds after t0, verdict)
        let steps = [
            ("egress", "proxy", 0, Verdict::Write),
            ("egress", "proxy", 0, Verdict::Write),
            ("egress", "proxy", 1, Verdict::Write),
            ("egress", "proxy", 1, Verdict::Count),
            ("egress", "proxy", 2, Verdict::Count),
            // Another source and another kind have buckets of their own.
            ("egress", "uid 2001", 2, Verdict::Write),
            ("request_refused", "proxy", 2, Verdict::Write),
        ];
        for (kind, source, at, want) in steps {
            assert_eq!(
                t.admit(kind, source, Some(&format!("h{at}")), t0 + at * s),
                want,
                "{kind} {source} {at}"
            );
        }
        assert!(t.due(t0 + 5 * s, false).is_empty(), "window not over");
        let due = t.due(t0 + 10 * s, false);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].kind.as_str(), due[0].count), ("egress", 2));
        assert_eq!(due[0].samples, ["h1", "h2"], "what was counted, by example");
        assert!(t.due(t0 + 11 * s, false).is_empty(), "summed once");
        // A new window writes a burst again.
        assert_eq!(
            t.admit("egress", "proxy", None, t0 + 12 * s),
            Verdict::Write
        );
        // A count that could not be written comes back, whole.
        for _ in 0..5 {
            t.admit("egress", "proxy", None, t0 + 12 * s);
        }
        let due = t.due(t0 + 30 * s, true);
        t.restore(due[0].clone(), t0 + 30 * s);
        assert_eq!(t.due(t0 + 31 * s, true)[0].count, due[0].count);
    }

    #[test]
    fn made_up_sources_share_one_bucket() {
        let t0 = Instant::now();
        let mut t = Throttle::new(1, Duration::from_secs(10));
        for i in 0..1000 {
            t.admit("connection_refused", &format!("uid {i}"), None, t0);
        }
        assert!(t.buckets.len() <= MAX_SOURCES + 1);
        let due = t.due(t0, true);
        let others: u64 = due
            .iter()
            .filter(|s| s.source == OTHERS)
            .map(|s| s.count)
            .sum();
        assert_eq!(others, 1000 - MAX_SOURCES as u64 - 1);
    }
}

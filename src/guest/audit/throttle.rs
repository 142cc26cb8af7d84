//! Keeps a flood of refusals from flooding the audit log: per kind of line
//! and per source (a uid, a command, the proxy), the first `burst` lines
//! of a window are written whole; the rest are counted, and the count is
//! written as one `suppressed` line once the window is over. Nothing is
//! lost: every refusal is either a line or part of a count, and every
//! distinct thing refused (a host, an address) is named in that line, with
//! its own count, up to a byte budget per window.

use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How many sources are told apart; more share one bucket, so a flood of
/// made-up sources cannot grow warden's memory.
const MAX_SOURCES: usize = 64;
const OTHERS: &str = "others";
/// Bytes of distinct examples a count keeps of what it counted (e.g. the
/// hosts a flood asked for), each with its own count, so that the real
/// attempts inside a flood of junk are not a bare number; what does not
/// fit is counted as `unsampled`.
const SAMPLE_BUDGET: usize = 4096;
const SAMPLE_BYTES: usize = 256;
/// What an example costs of the budget besides its bytes (its place in
/// the line, its count), so that tiny ones cannot make a huge line.
const SAMPLE_COST: usize = 32;

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
    pub samples: Samples,
}

/// Distinct examples of what was counted, each with its count, in the
/// order first seen, up to `SAMPLE_BUDGET` bytes; the rest a count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samples {
    pub kept: Vec<(String, u64)>,
    bytes: usize,
    /// Counted refusals whose example did not fit in the budget.
    pub unsampled: u64,
}

impl Samples {
    /// Counts `n` refusals of `sample` (None: one without an example).
    fn add(&mut self, sample: Option<&str>, n: u64) {
        let Some(sample) = sample else { return };
        if let Some((_, count)) = self.kept.iter_mut().find(|(s, _)| s == sample) {
            *count += n;
        } else if self.bytes + sample.len() + SAMPLE_COST <= SAMPLE_BUDGET {
            self.bytes += sample.len() + SAMPLE_COST;
            self.kept.push((sample.to_string(), n));
        } else {
            self.unsampled += n;
        }
    }

    fn merge(&mut self, other: Samples) {
        for (sample, n) in other.kept {
            self.add(Some(&sample), n);
        }
        self.unsampled += other.unsampled;
    }
}

#[derive(Debug)]
struct Bucket {
    since: Instant,
    written: u32,
    counted: u64,
    samples: Samples,
}

/// Whose a refusal line is, for its bucket: `via` (`proxy`,
/// `connect_gate`) and who asked, as the line says (`origin`'s `uid` and
/// `command`, or the gate's `command`): e.g. `proxy uid 2001 command 17`.
/// None for the runtime's own refusals, which are never counted away: a
/// flood of shell's must not hide them.
pub fn source_of(via: &str, line: &Value, runtime_uid: u32) -> Option<String> {
    let origin = line.get("origin");
    let uid = origin.and_then(|o| o.get("uid")).and_then(Value::as_u64);
    let runtime = line.get("list").and_then(Value::as_str) == Some("runtime_hosts")
        || line.get("user").and_then(Value::as_str) == Some("runtime")
        || uid == Some(u64::from(runtime_uid));
    if runtime {
        return None;
    }
    let command = origin
        .and_then(|o| o.get("command"))
        .or_else(|| line.get("command"))
        .and_then(Value::as_u64);
    let mut source = via.to_string();
    if let Some(uid) = uid {
        source.push_str(&format!(" uid {uid}"));
    }
    if let Some(command) = command {
        source.push_str(&format!(" command {command}"));
    }
    Some(source)
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
                samples: Samples::default(),
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
            let sample = sample.map(|s| s.chars().take(SAMPLE_BYTES).collect::<String>());
            bucket.samples.add(sample.as_deref(), 1);
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
                samples: Samples::default(),
            });
        bucket.counted += summary.count;
        bucket.samples.merge(summary.samples);
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
    use serde_json::json;

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
        assert_eq!(
            due[0].samples.kept,
            [("h1".to_string(), 1), ("h2".to_string(), 1)],
            "what was counted, by example"
        );
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

    /// (samples added in order) -> (kept with counts, unsampled)
    type Case<'a> = (&'a [Option<&'a str>], &'a [(&'a str, u64)], u64);

    #[test]
    fn samples_table() {
        let big = "x".repeat(SAMPLE_BUDGET - 2 * SAMPLE_COST - 3);
        let cases: &[Case] = &[
            (&[], &[], 0),
            (&[None, None], &[], 0),
            (&[Some("a"), Some("b"), Some("a")], &[("a", 2), ("b", 1)], 0),
            // Past the budget: the hosts kept go on counting, new ones
            // are counted apart.
            (
                &[Some(&big), Some("abc"), Some("d"), Some("abc"), Some("e")],
                &[(&big, 1), ("abc", 2)],
                2,
            ),
        ];
        for (added, kept, unsampled) in cases {
            let mut samples = Samples::default();
            for sample in *added {
                samples.add(*sample, 1);
            }
            let kept: Vec<(String, u64)> = kept.iter().map(|(s, n)| (s.to_string(), *n)).collect();
            assert_eq!(samples.kept, kept, "{added:?}");
            assert_eq!(samples.unsampled, *unsampled, "{added:?}");
        }
    }

    #[test]
    fn sources_table() {
        let runtime = 2000;
        let cases = [
            ("proxy", json!({"host": "a"}), Some("proxy")),
            ("proxy", json!({"origin": {"pid": 9}}), Some("proxy")),
            (
                "proxy",
                json!({"origin": {"uid": 2001}}),
                Some("proxy uid 2001"),
            ),
            (
                "proxy",
                json!({"origin": {"uid": 2001, "pid": 9, "command": 17}}),
                Some("proxy uid 2001 command 17"),
            ),
            ("proxy", json!({"origin": {"uid": 0}}), Some("proxy uid 0")),
            // The runtime's are never counted away.
            ("proxy", json!({"origin": {"uid": 2000, "pid": 9}}), None),
            ("proxy", json!({"list": "runtime_hosts"}), None),
            ("connect_gate", json!({"pid": 9}), Some("connect_gate")),
            (
                "connect_gate",
                json!({"pid": 9, "command": 4}),
                Some("connect_gate command 4"),
            ),
            ("connect_gate", json!({"pid": 9, "user": "runtime"}), None),
        ];
        for (via, line, want) in cases {
            assert_eq!(source_of(via, &line, runtime).as_deref(), want, "{line}");
        }
    }

    /// The attack: 20 refusals of junk, then distinct junk hosts to fill
    /// the examples, over and over, and the real target among them; and
    /// another source's refusal meanwhile. (name, source) -> whether the
    /// name is in a line: written whole, or in its count's examples.
    #[test]
    fn a_sample_fill_flood_hides_no_distinct_host() {
        let t0 = Instant::now();
        let mut t = Throttle::new(20, Duration::from_secs(10));
        let mut whole = Vec::new();
        let mut refuse = |t: &mut Throttle, host: &str, source: &str| {
            if t.admit("egress", source, Some(host), t0) == Verdict::Write {
                whole.push((host.to_string(), source.to_string()));
            }
        };
        let flood = "proxy uid 2001 command 1";
        for _round in 0..30 {
            for _ in 0..20 {
                refuse(&mut t, "junk.example", flood);
            }
            for i in 0..8 {
                refuse(&mut t, &format!("fill-{i}.example"), flood);
            }
        }
        refuse(&mut t, "exfil.example", flood);
        refuse(&mut t, "exfil-2.example", "proxy uid 2001 command 2");
        let due = t.due(t0 + Duration::from_secs(10), false);
        let named = |host: &str| {
            let counted = due
                .iter()
                .filter(|s| s.samples.kept.iter().any(|(h, _)| h == host))
                .count();
            counted + whole.iter().filter(|(h, _)| h == host).count()
        };
        for host in ["exfil.example", "exfil-2.example", "fill-7.example"] {
            assert_eq!(named(host), 1, "{host}");
        }
        let flooded = due.iter().find(|s| s.source == flood).unwrap();
        assert_eq!(flooded.count, 30 * 28 - 20 + 1);
        assert_eq!(flooded.samples.kept.len(), 10);
        let exfil = flooded
            .samples
            .kept
            .iter()
            .find(|(h, _)| h == "exfil.example");
        assert_eq!(exfil.map(|(_, n)| *n), Some(1));
    }

    #[test]
    fn tiny_examples_make_no_huge_line() {
        let mut samples = Samples::default();
        for i in 0..10_000 {
            samples.add(Some(&i.to_string()), 1);
        }
        let line = serde_json::to_string(&samples.kept).unwrap();
        assert!(line.len() < SAMPLE_BUDGET, "{} bytes", line.len());
        let kept: u64 = samples.kept.iter().map(|(_, n)| n).sum();
        assert_eq!(kept + samples.unsampled, 10_000);
    }
}

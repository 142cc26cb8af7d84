//! The card's two forms, over made-up audit lines.

use super::timeline::*;
use super::*;
use serde_json::json;

/// A card as spend::card builds it, over made-up lines.
fn card_of(lines: &[Value], run: &str) -> Value {
    crate::shared::spend::card::build(lines, run).unwrap()
}

fn begin(time: &str) -> Value {
    json!({"kind": "run_begin", "run": "r1", "budget_micro_usd": 500_000, "time": time})
}

fn start(id: u64, argv: Value, time: &str) -> Value {
    json!({"kind": "command_start", "command": id, "argv": argv, "time": time})
}

fn end(id: u64, code: Option<i32>, limit: Option<&str>, ms: f64) -> Value {
    let signal = limit.map(|_| "KILL");
    json!({"kind": "command_end", "command": id, "code": code, "signal": signal,
           "status": code.unwrap_or(137), "limit": limit, "duration_ms": ms})
}

fn request(time: &str, cost: u64, cut: bool) -> Value {
    json!({"kind": "provider_request", "run": "r1", "model": "claude-test", "status": 200,
           "input_tokens": 120, "output_tokens": 30, "micro_usd": cost, "cut": cut,
           "duration_ms": 400.0, "time": time})
}

fn finish(time: &str, how: &str) -> Value {
    json!({"kind": "run_end", "run": "r1", "how": how, "time": time})
}

/// A full run: a request, one cut at the budget, two commands (one
/// failed, one stopped by its timeout), a host reached, one refused.
fn full() -> Vec<Value> {
    vec![
        begin("2026-12-04T10:00:00.000000Z"),
        start(1, json!(["npm", "test"]), "2026-12-04T10:00:01.000000Z"),
        request("2026-12-04T10:00:02.500000Z", 4210, false),
        json!({"kind": "egress", "allowed": true, "host": "registry.npmjs.org"}),
        json!({"kind": "egress", "allowed": false, "host": "evil.test", "refusal": "not_listed"}),
        end(1, Some(1), None, 3000.0),
        start(2, json!(["sleep", "100"]), "2026-12-04T10:00:05.000000Z"),
        end(2, None, Some("timeout"), 2000.0),
        request("2026-12-04T10:00:08.000000Z", 495_790, true),
        finish("2026-12-04T10:00:09.000000Z", "budget"),
    ]
}

#[test]
fn dollars_durations_and_times_read_as_people_expect() {
    for (micro, want) in [
        (0, "$0.000000"),
        (4210, "$0.004210"),
        (1_000_000, "$1.000000"),
        (12_345_678, "$12.345678"),
    ] {
        assert_eq!(dollars(micro), want);
    }
    for (ms, want) in [
        (0.4, "0 ms"),
        (812.0, "812 ms"),
        (2000.0, "2.0 s"),
        (65_000.0, "1 m 05 s"),
        (7_380_000.0, "2 h 03 m"),
    ] {
        assert_eq!(duration(ms), want);
    }
    for (time, want) in [
        ("1970-01-01T00:00:00Z", Some(0.0)),
        ("1970-01-01T00:00:01.5Z", Some(1500.0)),
        ("2000-03-01T00:00:00.000000Z", Some(951_868_800_000.0)),
        ("2026-11-29T08:37:35.091883Z", Some(1_795_941_455_091.883)),
        ("2026-11-29 08:37:35Z", None),
        ("2026-11-29T08:37:35+01:00", None),
        ("2026-13-29T08:37:35Z", None),
        ("", None),
    ] {
        let got = epoch_ms(time);
        match (got, want) {
            (Some(g), Some(w)) => assert!((g - w).abs() < 0.01, "{time}: {g} != {w}"),
            _ => assert_eq!(got, want, "{time}"),
        }
    }
}

#[test]
fn every_string_of_the_card_is_escaped() {
    let nasty = r#"<script>alert("x")</script>&'"#;
    let lines = vec![
        json!({"kind": "run_begin", "run": nasty, "budget_micro_usd": 1000, "time": "2026-12-04T10:00:00Z"}),
        start(1, json!(["sh", "-c", nasty]), "2026-12-04T10:00:01Z"),
        end(1, Some(0), None, 5.0),
        json!({"kind": "provider_request", "run": nasty, "model": nasty, "micro_usd": 1,
               "refused": nasty, "time": "2026-12-04T10:00:02Z"}),
        json!({"kind": "egress", "allowed": true, "host": nasty}),
        json!({"kind": "egress", "allowed": false, "host": nasty, "refusal": nasty}),
        json!({"kind": "run_end", "run": nasty, "how": nasty, "time": "2026-12-04T10:00:03Z"}),
    ];
    let card = card_of(&lines, nasty);
    let page = html(&card);
    for bad in ["<script", "alert(\"x\")", "</script>&'"] {
        assert!(!page.contains(bad), "{bad} got through");
    }
    assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"));
    // A string chosen inside the machine never escapes its element:
    // every tag in the page is one the renderer wrote.
    let tags: std::collections::BTreeSet<&str> = page
        .split('<')
        .skip(1)
        .map(|t| {
            t.split(|c: char| c.is_whitespace() || c == '>')
                .next()
                .unwrap()
        })
        .collect();
    let ours = [
        "!DOCTYPE", "html", "head", "meta", "title", "/title", "style", "/style", "body", "main",
        "header", "div", "/div", "span", "/span", "h1", "/h1", "dl", "dt", "/dt", "dd", "/dd",
        "/dl", "section", "/section", "h2", "/h2", "svg", "/svg", "line", "/line", "text", "/text",
        "rect", "/rect", "table", "/table", "tr", "/tr", "th", "/th", "td", "/td", "code", "/code",
        "p", "/p", "i", "/i", "footer", "/footer", "/header", "/main", "/body", "/html", "/head",
    ];
    for tag in &tags {
        assert!(
            ours.contains(tag),
            "a tag the renderer never writes: <{tag}"
        );
    }
    // Control characters reach no terminal.
    let mut card = card.clone();
    card["commands"][0]["argv"] = json!(["printf", "\u{1b}[2J\u{202e}"]);
    let out = text(&card);
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{202e}'),
        "{out}"
    );
    assert!(!html(&card).contains('\u{1b}'));
}

#[test]
fn the_page_reaches_for_nothing_outside_itself() {
    for card in [card_of(&full(), "r1"), card_of(&full()[..1], "r1")] {
        let page = html(&card);
        for outside in [
            "http:", "https:", "src=", "href=", "url(", "@import", "<script", "<link",
        ] {
            assert!(!page.contains(outside), "{outside} in the page");
        }
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("default-src 'none'"));
    }
}

/// (case, lines, what text() must hold, what html() must hold)
type Case = (
    &'static str,
    Vec<Value>,
    Vec<&'static str>,
    Vec<&'static str>,
);

/// A run cut at its budget, and the same run still open.
fn busy_run_cases() -> Vec<Case> {
    let mut open = full();
    open.truncate(6);
    vec![
        (
            "a run cut at its budget",
            full(),
            vec![
                "run r1  (ended at its budget)",
                "spent  $0.500000 of a $0.500000 budget (100.0%)",
                "claude-test         2    240      60            0           0  $0.500000",
                "cut at the budget",
                "1  exit 1                        3.0 s  npm test",
                "2  killed: timeout limit (KILL)  2.0 s  sleep 100",
                "registry.npmjs.org  1 connection",
                "evil.test  not_listed  1 time",
                "(after 9.0 s)",
            ],
            vec![
                "b-budget",
                "ended at its budget",
                "$0.500000",
                r#"class="high" style="width:100.0%""#,
                "killed: timeout limit (KILL)",
                "k-limit",
                "k-fail",
                "exit 1",
                "cut at the budget",
                "npm test",
                "sleep 100",
                "model requests (2)",
                "registry.npmjs.org",
                "not_listed",
            ],
        ),
        (
            "an open run",
            open,
            vec![
                "run r1  (open)",
                "ended  (open: the card runs to the log's end)",
                "spent  $0.004210 of a $0.500000 budget (0.8%)",
                "1  exit 1  3.0 s  npm test",
            ],
            vec![
                "b-open",
                "the log ends here: the run is open",
                "$0.004210",
                r#"class="low" style="width:0.8%""#,
            ],
        ),
    ]
}

/// Runs where little or nothing happened.
fn quiet_run_cases() -> Vec<Case> {
    vec![
        (
            "a run with no request",
            vec![
                begin("2026-12-04T10:00:00Z"),
                start(1, json!(["cargo", "build"]), "2026-12-04T10:00:00.5Z"),
                finish("2026-12-04T10:00:02Z", "ended"),
            ],
            vec![
                "spent  $0.000000 of a $0.500000 budget (0.0%)",
                "(no request to a model provider)",
                "1  running     -  cargo build",
                "hosts reached\n  (none)",
            ],
            vec![
                "b-ended",
                "No request to a model provider during this run.",
                "k-running",
                "cargo build",
                "Commands (1)",
            ],
        ),
        (
            "a run where nothing happened",
            vec![
                begin("2026-12-04T10:00:00Z"),
                finish("2026-12-04T10:00:00Z", "machine_stopped"),
            ],
            vec![
                "(ended: the machine stopped)",
                "(none started during the run)",
            ],
            vec![
                "nothing ran and no model was asked during the run",
                "No command was started during this run.",
                "b-machine_stopped",
            ],
        ),
    ]
}

#[test]
fn cards_render_as_expected() {
    let cases: Vec<Case> = [busy_run_cases(), quiet_run_cases()].concat();
    for (case, lines, in_text, in_html) in cases {
        let card = card_of(&lines, "r1");
        let (t, h) = (text(&card), html(&card));
        for want in in_text {
            assert!(t.contains(want), "{case}: text lacks {want:?}:\n{t}");
        }
        for want in in_html {
            assert!(h.contains(want), "{case}: html lacks {want:?}");
        }
        assert!(h.matches("<svg").count() == 1, "{case}: one timeline");
    }
}

#[test]
fn the_timeline_places_things_in_the_run_s_time() {
    let card = card_of(&full(), "r1");
    let page = html(&card);
    // The run lasted 9 s: command 2 began at 5 s, so 5/9 of the plot.
    let x2 = LABEL + 5.0 / 9.0 * PLOT;
    assert!(page.contains(&format!(r#"<rect x="{x2:.1}""#)), "{page}");
    // Ticks of 2 s over 9 s.
    for tick in ["0<", "2 s<", "4 s<", "8 s<"] {
        assert!(page.contains(tick), "{tick}");
    }
    for (span, step) in [(9000.0, 2000.0), (100.0, 20.0), (1.0, 1.0), (3.6e6, 1e6)] {
        assert_eq!(tick_step(span), step, "{span}");
    }
}

//! A run's card (spend::card) for people: `text`, plain and aligned for a
//! terminal, and `html`, one self-contained page (inline CSS, an inline
//! SVG timeline of the run's requests and commands; no script, no font,
//! no address outside the page). Every string of the card is escaped on
//! the way out: a command's argv, a model's or a host's name are chosen
//! by whoever runs in the machine.

use crate::shared::printable::escape_controls;
use serde_json::Value;
use std::fmt::Write;

/// Dollars from integer micro-dollars, to the micro-dollar: `$0.004210`.
pub fn dollars(micro_usd: u64) -> String {
    format!("${}.{:06}", micro_usd / 1_000_000, micro_usd % 1_000_000)
}

/// A duration for people: `812 ms`, `2.0 s`, `1 m 05 s`, `2 h 03 m`.
pub fn duration(ms: f64) -> String {
    let ms = ms.max(0.0);
    if ms < 1000.0 {
        return format!("{} ms", ms.round() as u64);
    }
    if ms < 60_000.0 {
        return format!("{:.1} s", ms / 1000.0);
    }
    let s = (ms / 1000.0).round() as u64;
    match s < 3600 {
        true => format!("{} m {:02} s", s / 60, s % 60),
        false => format!("{} h {:02} m", s / 3600, s % 3600 / 60),
    }
}

/// Milliseconds since the Unix epoch of an audit line's `time` (RFC 3339,
/// UTC: `2026-11-29T08:37:35.091883Z`); None for anything else.
pub fn epoch_ms(time: &str) -> Option<f64> {
    let b = time.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = time.get(from..to)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, s) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let rest = &time[19..];
    let (frac, zone) = match rest.strip_prefix('.') {
        Some(r) => {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            (&r[..digits], &r[digits..])
        }
        None => ("", rest),
    };
    if zone != "Z" {
        return None;
    }
    let frac: f64 = match frac {
        "" => 0.0,
        f => format!("0.{f}").parse().ok()?,
    };
    // Days from the civil date (proleptic Gregorian).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + s;
    Some(secs as f64 * 1000.0 + frac * 1000.0)
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// A command's argv as one line (words with spaces or quotes quoted).
fn argv_line(argv: &Value) -> String {
    let words: Vec<String> = list(argv)
        .iter()
        .map(|w| {
            let w = w.as_str().map_or_else(|| w.to_string(), str::to_string);
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_alphanumeric() || "-_./=:,+@%^".contains(c));
            match plain {
                true => w,
                false => format!("'{}'", w.replace('\'', r"'\''")),
            }
        })
        .collect();
    match words.is_empty() {
        true => "(no argv)".into(),
        false => words.join(" "),
    }
}

/// How a run ended, in words.
fn how_words(how: &str) -> &'static str {
    match how {
        "ended" => "ended",
        "budget" => "ended at its budget",
        "machine_stopped" => "ended: the machine stopped",
        "open" => "open",
        _ => "ended (other)",
    }
}

/// How a command ended: `exit 0`, `killed: timeout limit`, `signal KILL`,
/// `running`; and its kind (`ok`, `fail`, `limit`, `signal`, `running`).
fn ending(c: &Value) -> (String, &'static str) {
    let limit = str_of(&c["limit"]);
    let signal = str_of(&c["signal"]);
    if !limit.is_empty() {
        let by = match signal {
            "" => String::new(),
            s => format!(" ({s})"),
        };
        return (format!("killed: {limit} limit{by}"), "limit");
    }
    if let Some(code) = c["exit"].as_i64() {
        return (
            format!("exit {code}"),
            if code == 0 { "ok" } else { "fail" },
        );
    }
    if !signal.is_empty() {
        return (format!("signal {signal}"), "signal");
    }
    match c["duration_ms"].is_null() {
        true => ("running".into(), "running"),
        false => ("ended".into(), "ok"),
    }
}

/// What one request was, beyond its model and cost.
fn request_note(r: &Value) -> String {
    let mut notes = Vec::new();
    if r["cut"] == true {
        notes.push("cut at the budget".to_string());
    }
    if let Some(why) = r["refused"].as_str() {
        notes.push(format!("refused: {why}"));
    }
    if r["estimated"] == true {
        notes.push("tokens estimated".to_string());
    }
    notes.join(", ")
}

fn percent(spent: u64, budget: u64) -> Option<f64> {
    (budget > 0).then(|| spent as f64 * 100.0 / budget as f64)
}

/// Columns padded to their widest cell: numbers (cells starting with a
/// digit or `$`, or a header over them) to the right.
fn table(out: &mut String, rows: &[Vec<String>], right: &[bool]) {
    let width = |s: &str| s.chars().count();
    let mut widths = vec![0; rows.iter().map(Vec::len).max().unwrap_or(0)];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(width(cell));
        }
    }
    for row in rows {
        let mut line = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[i] - width(cell));
            let last = i + 1 == row.len();
            line.push(' ');
            match right.get(i).copied().unwrap_or(false) {
                true => line.push_str(&format!("{pad}{cell}")),
                false if last => line.push_str(cell),
                false => line.push_str(&format!("{cell}{pad}")),
            }
            if !last {
                line.push(' ');
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// The card as plain text, aligned for a terminal (every string from the
/// card with its control characters escaped).
pub fn text(card: &Value) -> String {
    let t = |v: &Value| escape_controls(str_of(v));
    let mut out = String::new();
    let how = str_of(&card["how"]);
    let began = epoch_ms(str_of(&card["began"]));
    let _ = writeln!(out, "run {}  ({})", t(&card["run"]), how_words(how));
    let _ = writeln!(out, "  began  {}", t(&card["began"]));
    let ended = match card["ended"].as_str() {
        Some(e) => {
            let took = epoch_ms(e)
                .zip(began)
                .map(|(e, b)| format!("  (after {})", duration(e - b)))
                .unwrap_or_default();
            format!("{}{took}", escape_controls(e))
        }
        None => "(open: the card runs to the log's end)".into(),
    };
    let _ = writeln!(out, "  ended  {ended}");
    let (spent, budget) = (
        u64_of(&card["spent_micro_usd"]),
        u64_of(&card["budget_micro_usd"]),
    );
    let share = percent(spent, budget)
        .map(|p| format!(" ({p:.1}%)"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  spent  {} of a {} budget{share}",
        dollars(spent),
        dollars(budget)
    );

    let models = list(&card["models"]);
    let _ = writeln!(out, "\nmodels");
    if models.is_empty() {
        let _ = writeln!(out, "  (no request to a model provider)");
    } else {
        let mut rows = vec![[
            "model",
            "requests",
            "input",
            "output",
            "cache write",
            "cache read",
            "cost",
        ]
        .map(String::from)
        .to_vec()];
        for m in models {
            let mut row = vec![t(&m["model"])];
            for f in [
                "requests",
                "input_tokens",
                "output_tokens",
                "cache_write_tokens",
                "cache_read_tokens",
            ] {
                row.push(u64_of(&m[f]).to_string());
            }
            row.push(dollars(u64_of(&m["micro_usd"])));
            rows.push(row);
        }
        table(
            &mut out,
            &rows,
            &[false, true, true, true, true, true, true],
        );
    }

    let requests = list(&card["requests"]);
    if !requests.is_empty() {
        let _ = writeln!(out, "\nrequests");
        let mut rows = vec![["at", "model", "status", "in", "out", "cost", ""]
            .map(String::from)
            .to_vec()];
        for r in requests {
            let at = epoch_ms(str_of(&r["time"]))
                .zip(began)
                .map(|(at, b)| format!("+{}", duration(at - b)))
                .unwrap_or_else(|| t(&r["time"]));
            rows.push(vec![
                at,
                t(&r["model"]),
                r["status"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |s| s.to_string()),
                u64_of(&r["input_tokens"]).to_string(),
                u64_of(&r["output_tokens"]).to_string(),
                dollars(u64_of(&r["micro_usd"])),
                request_note(r),
            ]);
        }
        table(
            &mut out,
            &rows,
            &[true, false, true, true, true, true, false],
        );
    }

    let commands = list(&card["commands"]);
    let _ = writeln!(out, "\ncommands");
    if commands.is_empty() {
        let _ = writeln!(out, "  (none started during the run)");
    } else {
        let mut rows = vec![["#", "ended", "took", "argv"].map(String::from).to_vec()];
        for c in commands {
            rows.push(vec![
                u64_of(&c["command"]).to_string(),
                ending(c).0,
                c["duration_ms"]
                    .as_f64()
                    .map_or_else(|| "-".into(), duration),
                escape_controls(&argv_line(&c["argv"])),
            ]);
        }
        table(&mut out, &rows, &[true, false, true, false]);
    }

    let reached = list(&card["hosts"]["reached"]);
    let refused = list(&card["hosts"]["refused"]);
    let _ = writeln!(out, "\nhosts reached");
    if reached.is_empty() {
        let _ = writeln!(out, "  (none)");
    } else {
        let rows: Vec<Vec<String>> = reached
            .iter()
            .map(|h| {
                let n = u64_of(&h["connections"]);
                let s = if n == 1 { "" } else { "s" };
                vec![t(&h["host"]), format!("{n} connection{s}")]
            })
            .collect();
        table(&mut out, &rows, &[false, true]);
    }
    let _ = writeln!(out, "\nhosts refused");
    if refused.is_empty() {
        let _ = writeln!(out, "  (none)");
    } else {
        let rows: Vec<Vec<String>> = refused
            .iter()
            .map(|h| {
                let n = u64_of(&h["count"]);
                let s = if n == 1 { "" } else { "s" };
                vec![t(&h["host"]), t(&h["refusal"]), format!("{n} time{s}")]
            })
            .collect();
        table(&mut out, &rows, &[false, false, true]);
    }
    out
}

/// `text` safe inside HTML, as element text and as an attribute's value.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if crate::shared::printable::hides_text(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// An audit time to the second, for the page (the whole in its title).
fn short_time(time: &str) -> String {
    let short = match epoch_ms(time) {
        Some(_) => format!("{} {} UTC", &time[..10], &time[11..19]),
        None => time.to_string(),
    };
    format!(r#"<span title="{}">{}</span>"#, esc(time), esc(&short))
}

/// At most `n` characters of `s`, an ellipsis marking a cut.
fn cut(s: &str, n: usize) -> String {
    match s.chars().count() > n {
        true => s.chars().take(n.saturating_sub(1)).collect::<String>() + "…",
        false => s.to_string(),
    }
}

const STYLE: &str = r#"
:root{--ink:#1d2433;--muted:#5d6779;--line:#e3e7ee;--bg:#f4f6f9;--card:#fff;
--ok:#2f9e63;--fail:#d64545;--limit:#e08a00;--signal:#8a5cd6;--run:#3b82f6;--req:#4f6bd8}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 24px 40px}
section,header{background:var(--card);border:1px solid var(--line);border-radius:12px;
padding:20px 24px;margin-bottom:18px;box-shadow:0 1px 2px rgba(20,30,50,.04)}
h1{font-size:26px;margin:2px 0 4px;word-break:break-all}
h2{font-size:15px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:0 0 12px}
.kicker{font-size:12px;text-transform:uppercase;letter-spacing:.1em;color:var(--muted)}
.badge{display:inline-block;padding:2px 10px;border-radius:999px;font-size:13px;font-weight:600;
vertical-align:middle;margin-left:8px;color:#fff}
.b-ended{background:var(--ok)}.b-budget{background:var(--fail)}.b-machine_stopped{background:#6b7280}
.b-open{background:var(--run)}
.top{display:grid;grid-template-columns:minmax(0,1fr) 320px;gap:28px;align-items:end}
@media (max-width:820px){.top{grid-template-columns:1fr}.cols{grid-template-columns:1fr}}
.facts{display:grid;grid-template-columns:repeat(3,auto);justify-content:start;gap:2px 26px;margin-top:14px}
.facts dt{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
.facts dd{margin:0;font-variant-numeric:tabular-nums;white-space:nowrap}
.spend{min-width:0}
.spend .big{font-size:30px;font-weight:700;font-variant-numeric:tabular-nums}
.spend .of{color:var(--muted)}
.bar{height:14px;background:#e9edf3;border-radius:7px;overflow:hidden;margin:8px 0 4px}
.bar span{display:block;height:100%;border-radius:7px}
.low{background:var(--ok)}.mid{background:var(--limit)}.high{background:var(--fail)}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th{text-align:left;font-size:12px;color:var(--muted);font-weight:600;text-transform:uppercase;
letter-spacing:.05em;border-bottom:1px solid var(--line);padding:6px 10px}
td{border-bottom:1px solid var(--line);padding:7px 10px;vertical-align:top}
tr:last-child td{border-bottom:0}
td.n,th.n{text-align:right;white-space:nowrap}
code{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
word-break:break-all}
.pill{display:inline-block;padding:1px 8px;border-radius:6px;font-size:13px;font-weight:600;white-space:nowrap}
.k-ok{background:#e3f5eb;color:#1e7a4a}.k-fail{background:#fde8e8;color:#b42323}
.k-limit{background:#fff1dc;color:#9a5b00}.k-signal{background:#efe8fc;color:#5f3aa8}
.k-running{background:#e6efff;color:#2355b8}
.empty{color:var(--muted);font-style:italic}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:18px}
.cols section{margin-bottom:0}
svg{display:block;width:100%;height:auto}
svg text{font:12px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:var(--ink)}
svg .axis{fill:var(--muted);font-size:11px}
.legend{display:flex;gap:6px 18px;flex-wrap:wrap;font-size:13px;color:var(--muted);margin-top:8px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:3px;margin-right:5px;vertical-align:-1px}
footer{color:var(--muted);font-size:13px;text-align:center;margin-top:8px}
"#;

/// The timeline's size: the label column, the plot and one lane.
const W: f64 = 1060.0;
const LABEL: f64 = 220.0;
const PLOT: f64 = W - LABEL - 20.0;
const LANE: f64 = 30.0;
/// Commands drawn one lane each, at most (the rest are in the table).
const LANES: usize = 40;

/// Tick spacing over `span` ms: 1, 2 or 5 times a power of ten, about
/// six ticks.
fn tick_step(span: f64) -> f64 {
    let rough = (span / 6.0).max(1.0);
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

fn tick_label(ms: f64) -> String {
    if ms == 0.0 {
        return "0".into();
    }
    if ms < 1000.0 {
        return format!("{} ms", ms.round());
    }
    if ms < 60_000.0 {
        let s = ms / 1000.0;
        return match s.fract() == 0.0 {
            true => format!("{s} s"),
            false => format!("{s:.1} s"),
        };
    }
    duration(ms)
}

/// The inline SVG of the run's time: requests on one lane, each command
/// on its own, from the run's beginning to its end (or the log's).
fn timeline(card: &Value) -> String {
    let Some(t0) = epoch_ms(str_of(&card["began"])) else {
        return "<p class=\"empty\">No time to draw a timeline on.</p>".into();
    };
    let requests = list(&card["requests"]);
    let commands = list(&card["commands"]);
    // Each thing's [start, end] in ms after the run began.
    let at = |v: &Value| epoch_ms(str_of(v)).map(|t| t - t0);
    let spans_r: Vec<(f64, f64)> = requests
        .iter()
        .filter_map(|r| {
            let end = at(&r["time"])?;
            let took = r["duration_ms"].as_f64().unwrap_or(0.0);
            Some(((end - took).max(0.0), end))
        })
        .collect();
    let ended = card["ended"].as_str().and_then(epoch_ms).map(|e| e - t0);
    let mut last = ended.unwrap_or(0.0);
    for &(_, e) in &spans_r {
        last = last.max(e);
    }
    for c in commands {
        if let Some(s) = at(&c["time"]) {
            last = last.max(s + c["duration_ms"].as_f64().unwrap_or(0.0));
        }
    }
    let span = last.max(1.0);
    let x = |ms: f64| LABEL + (ms.clamp(0.0, span) / span) * PLOT;
    let lanes = usize::from(!requests.is_empty()) + commands.len().min(LANES);
    let top = 34.0;
    let height = top + (lanes.max(1) as f64) * LANE + 16.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg viewBox="0 0 {W} {height}" role="img" aria-label="timeline of the run">"#
    );
    // Axis: ticks over the run's time.
    let step = tick_step(span);
    let mut tick = 0.0;
    while tick <= span + 1e-9 {
        let tx = x(tick);
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#edf0f5"/><text class="axis" x="{tx:.1}" y="16" text-anchor="middle">{}</text>"##,
            top - 8.0,
            height - 10.0,
            esc(&tick_label(tick)),
        );
        tick += step;
    }
    // The run's beginning and end (or where the log ends, dashed).
    let end_mark = match ended {
        Some(_) => r##"stroke="#1d2433""##,
        None => r##"stroke="#3b82f6" stroke-dasharray="4 3""##,
    };
    let _ = write!(
        svg,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#1d2433" stroke-width="1.5"><title>run began</title></line><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" {end_mark} stroke-width="1.5"><title>{}</title></line>"##,
        x(0.0),
        top - 8.0,
        x(0.0),
        height - 10.0,
        x(span),
        top - 8.0,
        x(span),
        height - 10.0,
        match ended {
            Some(_) => "run ended",
            None => "the log ends here: the run is open",
        },
    );
    let mut y = top;
    let lane_bg = |svg: &mut String, y: f64, label: &str, full: &str, i: usize| {
        if i.is_multiple_of(2) {
            let _ = write!(
                svg,
                r##"<rect x="0" y="{y:.1}" width="{W}" height="{LANE}" fill="#f8f9fb"/>"##
            );
        }
        let _ = write!(
            svg,
            r#"<text x="8" y="{:.1}"><title>{}</title>{}</text>"#,
            y + LANE / 2.0 + 4.0,
            esc(full),
            esc(label),
        );
    };
    let mut i = 0;
    if !requests.is_empty() {
        let n = requests.len();
        let label = format!("model requests ({n})");
        lane_bg(&mut svg, y, &label, &label, i);
        for (r, &(s, e)) in requests.iter().zip(&spans_r) {
            let color = match (r["cut"] == true, r["refused"].is_string()) {
                (true, _) => "#e08a00",
                (_, true) => "#d64545",
                _ => "#4f6bd8",
            };
            let (x0, x1) = (x(s), x(e));
            let tip = format!(
                "{} · {} · {} in, {} out{}",
                str_of(&r["model"]),
                dollars(u64_of(&r["micro_usd"])),
                u64_of(&r["input_tokens"]),
                u64_of(&r["output_tokens"]),
                match request_note(r).as_str() {
                    "" => String::new(),
                    n => format!(" · {n}"),
                },
            );
            let _ = write!(
                svg,
                r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="3" fill="{color}" fill-opacity="0.85"><title>{}</title></rect>"#,
                y + 7.0,
                (x1 - x0).max(4.0),
                LANE - 14.0,
                esc(&tip),
            );
        }
        y += LANE;
        i += 1;
    }
    for c in commands.iter().take(LANES) {
        let argv = argv_line(&c["argv"]);
        let label = format!("#{} {}", u64_of(&c["command"]), cut(&argv, 26));
        lane_bg(&mut svg, y, &label, &argv, i);
        if let Some(s) = at(&c["time"]) {
            let (words, kind) = ending(c);
            let short = match kind {
                "limit" => format!("{} limit", str_of(&c["limit"])),
                _ => words.clone(),
            };
            let (e, open) = match c["duration_ms"].as_f64() {
                Some(d) => (s + d, false),
                None => (span, true),
            };
            let color = match kind {
                "ok" => "#2f9e63",
                "fail" => "#d64545",
                "limit" => "#e08a00",
                "signal" => "#8a5cd6",
                _ => "#3b82f6",
            };
            let (x0, x1) = (x(s), x(e));
            let w = (x1 - x0).max(4.0);
            let took = c["duration_ms"]
                .as_f64()
                .map(|d| format!(" · {}", duration(d)))
                .unwrap_or_default();
            let _ = write!(
                svg,
                r#"<rect x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" rx="4" fill="{color}"{}><title>{}</title></rect>"#,
                y + 6.0,
                LANE - 12.0,
                match open {
                    true => r#" fill-opacity="0.45""#,
                    false => "",
                },
                esc(&format!("{argv} · {words}{took}")),
            );
            // Its ending, beside the bar (inside it where the bar ends
            // near the plot's right edge).
            let room = 7.0 * short.chars().count() as f64;
            let (tx, anchor, fill) = match x0 + w + 8.0 + room > W - 4.0 {
                true if w > room + 12.0 => (x0 + w - 6.0, "end", "#fff"),
                true => (x0 - 6.0, "end", "#5d6779"),
                false => (x0 + w + 6.0, "start", "#5d6779"),
            };
            let _ = write!(
                svg,
                r#"<text x="{tx:.1}" y="{:.1}" text-anchor="{anchor}" style="fill:{fill}">{}</text>"#,
                y + LANE / 2.0 + 4.0,
                esc(&short),
            );
        }
        y += LANE;
        i += 1;
    }
    if lanes == 0 {
        let _ = write!(
            svg,
            r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">nothing ran and no model was asked during the run</text>"#,
            LABEL + PLOT / 2.0,
            top + LANE / 2.0 + 4.0,
        );
    }
    svg.push_str("</svg>");
    if commands.len() > LANES {
        let _ = write!(
            svg,
            r#"<p class="empty">The first {LANES} of {} commands are drawn; the table lists them all.</p>"#,
            commands.len()
        );
    }
    svg.push_str(
        r##"<div class="legend"><span><i style="background:#4f6bd8"></i>model request</span><span><i style="background:#e08a00"></i>request cut at the budget; command stopped by a limit</span><span><i style="background:#d64545"></i>request refused; command failed</span><span><i style="background:#2f9e63"></i>command exited 0</span><span><i style="background:#8a5cd6"></i>command ended by a signal</span></div>"##,
    );
    svg
}

/// The card as one self-contained HTML page: a header with the spend
/// against the budget, a timeline, and tables of models, commands,
/// requests and hosts.
pub fn html(card: &Value) -> String {
    let s = |v: &Value| esc(str_of(v));
    let run = str_of(&card["run"]);
    let how = str_of(&card["how"]);
    let how_class = match how {
        "ended" | "budget" | "machine_stopped" | "open" => how,
        _ => "machine_stopped",
    };
    let (spent, budget) = (
        u64_of(&card["spent_micro_usd"]),
        u64_of(&card["budget_micro_usd"]),
    );
    let share = percent(spent, budget);
    let fill = share.unwrap_or(0.0).clamp(0.0, 100.0);
    let level = match share.unwrap_or(0.0) {
        p if p >= 100.0 => "high",
        p if p >= 75.0 => "mid",
        _ => "low",
    };
    let began = epoch_ms(str_of(&card["began"]));
    let ended_at = card["ended"].as_str();
    let lasted = ended_at
        .and_then(epoch_ms)
        .zip(began)
        .map(|(e, b)| duration(e - b))
        .unwrap_or_else(|| "—".into());
    let requests = list(&card["requests"]);
    let commands = list(&card["commands"]);
    let mut p = String::new();
    let _ = write!(
        p,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
<title>Run {} — warden</title><style>{STYLE}</style></head><body><main>",
        esc(run)
    );
    // Header: the run, how it ended, when, and spend against budget.
    let _ = write!(
        p,
        r#"<header><div class="top"><div><div class="kicker">warden · run card</div><h1>{}<span class="badge b-{how_class}">{}</span></h1>"#,
        esc(run),
        esc(how_words(how)),
    );
    let _ = write!(
        p,
        r#"<dl class="facts"><dt>began</dt><dt>ended</dt><dt>lasted</dt><dd>{}</dd><dd>{}</dd><dd>{}</dd></dl></div>"#,
        short_time(str_of(&card["began"])),
        ended_at.map_or_else(|| "open".into(), short_time),
        esc(&lasted),
    );
    let _ = write!(
        p,
        r#"<div class="spend"><div class="kicker">spent</div><div class="big">{}</div><div class="bar" role="meter" aria-valuemin="0" aria-valuemax="{budget}" aria-valuenow="{spent}"><span class="{level}" style="width:{fill:.1}%"></span></div><div class="of">{} of a {} budget</div></div></div></header>"#,
        dollars(spent),
        match share {
            Some(pc) => format!("{pc:.1}%"),
            None => "no share".into(),
        },
        dollars(budget),
    );
    let _ = write!(p, "<section><h2>Timeline</h2>{}</section>", timeline(card));
    // Per model.
    p.push_str("<section><h2>Models</h2>");
    let models = list(&card["models"]);
    if models.is_empty() {
        p.push_str(r#"<p class="empty">No request to a model provider during this run.</p>"#);
    } else {
        p.push_str(r#"<table><tr><th>model</th><th class="n">requests</th><th class="n">input</th><th class="n">output</th><th class="n">cache write</th><th class="n">cache read</th><th class="n">cost</th></tr>"#);
        for m in models {
            let _ = write!(p, "<tr><td><code>{}</code></td>", s(&m["model"]));
            for f in [
                "requests",
                "input_tokens",
                "output_tokens",
                "cache_write_tokens",
                "cache_read_tokens",
            ] {
                let _ = write!(p, r#"<td class="n">{}</td>"#, u64_of(&m[f]));
            }
            let _ = write!(
                p,
                r#"<td class="n">{}</td></tr>"#,
                dollars(u64_of(&m["micro_usd"]))
            );
        }
        p.push_str("</table>");
    }
    p.push_str("</section>");
    // Commands.
    let _ = write!(p, "<section><h2>Commands ({})</h2>", commands.len());
    if commands.is_empty() {
        p.push_str(r#"<p class="empty">No command was started during this run.</p>"#);
    } else {
        p.push_str(r#"<table><tr><th class="n">#</th><th>argv</th><th class="n">started</th><th>ended</th><th class="n">took</th></tr>"#);
        for c in commands {
            let (words, kind) = ending(c);
            let started = epoch_ms(str_of(&c["time"]))
                .zip(began)
                .map(|(t, b)| format!("+{}", duration(t - b)))
                .unwrap_or_else(|| str_of(&c["time"]).to_string());
            let _ = write!(
                p,
                r#"<tr><td class="n">{}</td><td><code>{}</code></td><td class="n">{}</td><td><span class="pill k-{kind}">{}</span></td><td class="n">{}</td></tr>"#,
                u64_of(&c["command"]),
                esc(&argv_line(&c["argv"])),
                esc(&started),
                esc(&words),
                c["duration_ms"]
                    .as_f64()
                    .map_or_else(|| "—".into(), duration),
            );
        }
        p.push_str("</table>");
    }
    p.push_str("</section>");
    // Requests, one by one.
    if !requests.is_empty() {
        let _ = write!(p, "<section><h2>Requests ({})</h2>", requests.len());
        p.push_str(r#"<table><tr><th class="n">at</th><th>model</th><th class="n">status</th><th class="n">input</th><th class="n">output</th><th class="n">took</th><th class="n">cost</th><th></th></tr>"#);
        for r in requests {
            let at = epoch_ms(str_of(&r["time"]))
                .zip(began)
                .map(|(t, b)| format!("+{}", duration(t - b)))
                .unwrap_or_else(|| str_of(&r["time"]).to_string());
            let note = request_note(r);
            let pill = match (r["cut"] == true, r["refused"].is_string()) {
                (true, _) => "k-limit",
                (_, true) => "k-fail",
                _ => "k-running",
            };
            let _ = write!(
                p,
                r#"<tr><td class="n">{}</td><td><code>{}</code></td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
                esc(&at),
                s(&r["model"]),
                r["status"]
                    .as_u64()
                    .map_or_else(|| "—".into(), |v| v.to_string()),
                u64_of(&r["input_tokens"]),
                u64_of(&r["output_tokens"]),
                r["duration_ms"]
                    .as_f64()
                    .map_or_else(|| "—".into(), duration),
                dollars(u64_of(&r["micro_usd"])),
                match note.is_empty() {
                    true => String::new(),
                    false => format!(r#"<span class="pill {pill}">{}</span>"#, esc(&note)),
                },
            );
        }
        p.push_str("</table></section>");
    }
    // Hosts.
    p.push_str(r#"<div class="cols"><section><h2>Hosts reached</h2>"#);
    let reached = list(&card["hosts"]["reached"]);
    if reached.is_empty() {
        p.push_str(r#"<p class="empty">None.</p>"#);
    } else {
        p.push_str(r#"<table><tr><th>host</th><th class="n">connections</th></tr>"#);
        for h in reached {
            let _ = write!(
                p,
                r#"<tr><td><code>{}</code></td><td class="n">{}</td></tr>"#,
                s(&h["host"]),
                u64_of(&h["connections"])
            );
        }
        p.push_str("</table>");
    }
    p.push_str(r#"</section><section><h2>Hosts refused</h2>"#);
    let refused = list(&card["hosts"]["refused"]);
    if refused.is_empty() {
        p.push_str(r#"<p class="empty">None.</p>"#);
    } else {
        p.push_str(r#"<table><tr><th>host</th><th>why</th><th class="n">times</th></tr>"#);
        for h in refused {
            let _ = write!(
                p,
                r#"<tr><td><code>{}</code></td><td>{}</td><td class="n">{}</td></tr>"#,
                s(&h["host"]),
                s(&h["refusal"]),
                u64_of(&h["count"])
            );
        }
        p.push_str("</table>");
    }
    p.push_str("</section></div>");
    p.push_str("<footer>Built from the machine's audit log (lines <code>run_begin</code>, <code>provider_request</code>, <code>command_start</code>, <code>command_end</code>, <code>egress</code>, <code>run_end</code>): <code>warden machine audit</code> verifies its chain.</footer>");
    p.push_str("</main></body></html>\n");
    p
}

#[cfg(test)]
mod tests {
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
            "!DOCTYPE", "html", "head", "meta", "title", "/title", "style", "/style", "body",
            "main", "header", "div", "/div", "span", "/span", "h1", "/h1", "dl", "dt", "/dt", "dd",
            "/dd", "/dl", "section", "/section", "h2", "/h2", "svg", "/svg", "line", "/line",
            "text", "/text", "rect", "/rect", "table", "/table", "tr", "/tr", "th", "/th", "td",
            "/td", "code", "/code", "p", "/p", "i", "/i", "footer", "/footer", "/header", "/main",
            "/body", "/html", "/head",
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

    #[test]
    fn cards_render_as_expected() {
        let mut open = full();
        open.truncate(6);
        let cases: Vec<Case> = vec![
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
        ];
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
}

//! A run's card (spend::card) for people: `text`, plain and aligned for a
//! terminal, and `html`, one self-contained page (inline CSS, an inline
//! SVG timeline of the run's requests and commands; no script, no font,
//! no address outside the page). Every string of the card is escaped on
//! the way out: a command's argv, a model's or a host's name are chosen
//! by whoever runs in the machine.

use crate::shared::printable::escape_controls;
use serde_json::Value;

// `text.rs` is the terminal's form, `html.rs` the page's and `timeline.rs`
// the page's SVG timeline; the words both forms share are here.
mod html;
mod text;
mod timeline;

pub use html::html;
pub use text::text;

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

#[cfg(test)]
mod tests;

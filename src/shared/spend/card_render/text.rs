//! A run's card as plain text, aligned for a terminal.

use super::*;
use std::fmt::Write;

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
    let mut out = String::new();
    header(&mut out, card);
    models(&mut out, card);
    requests(&mut out, card);
    commands(&mut out, card);
    hosts(&mut out, card);
    out
}

/// The run, how it ended, when, and its spend against its budget.
fn header(out: &mut String, card: &Value) {
    let t = |v: &Value| escape_controls(str_of(v));
    let began = epoch_ms(str_of(&card["began"]));
    let how = str_of(&card["how"]);
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
}

/// Spend and tokens per model.
fn models(out: &mut String, card: &Value) {
    let t = |v: &Value| escape_controls(str_of(v));
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
        table(out, &rows, &[false, true, true, true, true, true, true]);
    }
}

/// The provider's requests, one by one.
fn requests(out: &mut String, card: &Value) {
    let t = |v: &Value| escape_controls(str_of(v));
    let began = epoch_ms(str_of(&card["began"]));
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
        table(out, &rows, &[true, false, true, true, true, true, false]);
    }
}

/// Each command, how it ended and what it cost.
fn commands(out: &mut String, card: &Value) {
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
        table(out, &rows, &[true, false, true, false]);
    }
}

/// The hosts reached and refused.
fn hosts(out: &mut String, card: &Value) {
    let t = |v: &Value| escape_controls(str_of(v));
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
        table(out, &rows, &[false, true]);
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
        table(out, &rows, &[false, false, true]);
    }
}

//! A run's card as one self-contained HTML page: inline CSS, the timeline,
//! the tables; every string escaped on the way out.

use super::timeline::timeline;
use super::*;
use std::fmt::Write;

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

/// The card as one self-contained HTML page: a header with the spend
/// against the budget, a timeline, and tables of models, commands,
/// requests and hosts.
pub fn html(card: &Value) -> String {
    let run = str_of(&card["run"]);
    let mut p = String::new();
    let _ = write!(
        p,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
<title>Run {} — warden</title><style>{STYLE}</style></head><body><main>",
        esc(run)
    );
    header(&mut p, card);
    let _ = write!(p, "<section><h2>Timeline</h2>{}</section>", timeline(card));
    models(&mut p, card);
    commands(&mut p, card);
    requests(&mut p, card);
    hosts(&mut p, card);
    p.push_str("<footer>Built from the machine's audit log (lines <code>run_begin</code>, <code>provider_request</code>, <code>command_start</code>, <code>command_end</code>, <code>egress</code>, <code>run_end</code>): <code>warden machine audit</code> verifies its chain.</footer>");
    p.push_str("</main></body></html>\n");
    p
}

/// The run, how it ended, when, and its spend against its budget.
fn header(p: &mut String, card: &Value) {
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
}

/// Spend and tokens per model.
fn models(p: &mut String, card: &Value) {
    let s = |v: &Value| esc(str_of(v));
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
}

/// Each command, how it ended and what it cost.
fn commands(p: &mut String, card: &Value) {
    let began = epoch_ms(str_of(&card["began"]));
    let commands = list(&card["commands"]);
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
}

/// The provider's requests, one by one.
fn requests(p: &mut String, card: &Value) {
    let s = |v: &Value| esc(str_of(v));
    let began = epoch_ms(str_of(&card["began"]));
    let requests = list(&card["requests"]);
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
}

/// The hosts reached and refused.
fn hosts(p: &mut String, card: &Value) {
    let s = |v: &Value| esc(str_of(v));
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
}

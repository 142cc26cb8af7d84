//! A run's card: when it began and ended, its budget and what it spent
//! (per model), the commands it ran, the hosts it reached and was refused,
//! and how it ended. Built from the audit log alone (so a card can be
//! checked against the chain), by a pure function over its lines.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a run has no card: the audit log does not read, or holds no such
/// run.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The log's folder, its files not listed.
    #[error("{}: {source}", dir.display())]
    Files {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("no run {0:?} in the audit log")]
    NoRun(String),
}

/// The card of `run` in the audit log whose current file is `current`
/// (its set-aside files read first, in chain order).
pub fn of_log(current: &Path, run: &str) -> Result<Value, CardError> {
    let dir = current.parent().unwrap_or(Path::new("."));
    let files = crate::shared::audit_chain::log_files(dir).map_err(|source| CardError::Files {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut lines = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(source) => return Err(CardError::Read { file, source }),
        };
        lines.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok()),
        );
    }
    build(&lines, run)
}

fn kind(line: &Value) -> &str {
    line["kind"].as_str().unwrap_or("")
}

/// Pure: the card of `run` from the log's lines (its last run of that
/// name), or why there is none.
pub fn build(lines: &[Value], run: &str) -> Result<Value, CardError> {
    let begin = lines
        .iter()
        .rposition(|l| kind(l) == "run_begin" && l["run"] == run)
        .ok_or_else(|| CardError::NoRun(run.to_string()))?;
    let end = lines[begin..]
        .iter()
        .position(|l| kind(l) == "run_end" && l["run"] == run)
        .map(|at| begin + at);
    let window = &lines[begin..=end.unwrap_or(lines.len() - 1)];
    let began = &lines[begin];
    let ended = end.map(|at| &lines[at]);
    let budget = began["budget_micro_usd"].as_u64().unwrap_or(0);
    let requests: Vec<&Value> = window
        .iter()
        .filter(|l| kind(l) == "provider_request" && l["run"] == run)
        .collect();
    let spent: u64 = requests
        .iter()
        .filter_map(|r| r["micro_usd"].as_u64())
        .sum();
    let how = match ended {
        Some(line) => line["how"].as_str().unwrap_or("ended").to_string(),
        None => "open".to_string(),
    };
    Ok(json!({
        "run": run,
        "began": began["time"],
        "ended": ended.map(|l| l["time"].clone()),
        "how": how,
        "budget_micro_usd": budget,
        "spent_micro_usd": spent,
        "budget_usd": budget as f64 / 1e6,
        "spent_usd": spent as f64 / 1e6,
        "models": models(&requests),
        "requests": requests.iter().map(|r| json!({
            "time": r["time"], "provider": r["provider"], "model": r["model"],
            "status": r["status"], "micro_usd": r["micro_usd"], "cut": r["cut"],
            "refused": r["refused"], "estimated": r["estimated"],
            "input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"],
            "duration_ms": r["duration_ms"],
        })).collect::<Vec<_>>(),
        "commands": commands(window),
        "hosts": hosts(window),
    }))
}

/// Requests, tokens and cost per model, in the order first used.
fn models(requests: &[&Value]) -> Vec<Value> {
    let mut order: Vec<String> = Vec::new();
    let mut sums: BTreeMap<String, [u64; 6]> = BTreeMap::new();
    for r in requests {
        let model = r["model"].as_str().unwrap_or("").to_string();
        if !sums.contains_key(&model) {
            order.push(model.clone());
        }
        let sum = sums.entry(model).or_default();
        let fields = [
            "input_tokens",
            "output_tokens",
            "cache_write_tokens",
            "cache_read_tokens",
            "micro_usd",
        ];
        sum[0] += 1;
        for (i, f) in fields.iter().enumerate() {
            sum[i + 1] += r[*f].as_u64().unwrap_or(0);
        }
    }
    order
        .into_iter()
        .map(|model| {
            let s = sums[&model];
            json!({"model": model, "requests": s[0], "input_tokens": s[1], "output_tokens": s[2],
                   "cache_write_tokens": s[3], "cache_read_tokens": s[4], "micro_usd": s[5]})
        })
        .collect()
}

/// The commands started while the run was open, with how each ended
/// (`status` the shell's convention, 128+n after signal n; all null while
/// one runs).
fn commands(window: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut at: BTreeMap<u64, usize> = BTreeMap::new();
    for line in window {
        let Some(id) = line["command"].as_u64() else {
            continue;
        };
        match kind(line) {
            "command_start" => {
                at.insert(id, out.len());
                out.push(
                    json!({"command": id, "time": line["time"], "argv": line["argv"],
                           "status": null, "exit": null, "signal": null, "duration_ms": null,
                           "limit": null}),
                );
            }
            "command_end" => {
                if let Some(&i) = at.get(&id) {
                    let entry = &mut out[i];
                    for field in ["status", "code", "signal", "duration_ms", "limit"] {
                        let name = if field == "code" { "exit" } else { field };
                        entry[name] = line[field].clone();
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The hosts reached (connections, by host) and refused (by host and
/// reason) through the proxy while the run was open.
fn hosts(window: &[Value]) -> Value {
    let mut reached: BTreeMap<String, u64> = BTreeMap::new();
    let mut refused: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in window.iter().filter(|l| kind(l) == "egress") {
        let host = line["host"].as_str().unwrap_or("(none)").to_string();
        match line["allowed"].as_bool() {
            Some(true) => *reached.entry(host).or_default() += 1,
            _ => {
                let reason = line["refusal"].as_str().unwrap_or("").to_string();
                *refused.entry((host, reason)).or_default() += 1;
            }
        }
    }
    let reached: Vec<Value> = reached
        .into_iter()
        .map(|(host, n)| json!({"host": host, "connections": n}))
        .collect();
    let refused: Vec<Value> = refused
        .into_iter()
        .map(|((host, reason), n)| json!({"host": host, "refusal": reason, "count": n}))
        .collect();
    let mut hosts = Map::new();
    hosts.insert("reached".into(), reached.into());
    hosts.insert("refused".into(), refused.into());
    hosts.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines() -> Vec<Value> {
        [
            json!({"kind": "run_begin", "run": "r1", "budget_micro_usd": 10000, "time": "t0"}),
            json!({"kind": "command_start", "command": 1, "argv": ["npm", "test"], "time": "t1"}),
            json!({"kind": "egress", "allowed": true, "host": "registry.test"}),
            json!({"kind": "egress", "allowed": false, "host": "evil.test", "refusal": "not_listed"}),
            json!({"kind": "provider_request", "run": "r1", "model": "m", "input_tokens": 10, "output_tokens": 5, "micro_usd": 4000, "status": 200, "time": "t2"}),
            json!({"kind": "provider_request", "run": "other", "model": "m", "micro_usd": 99}),
            json!({"kind": "command_end", "command": 1, "code": 0, "duration_ms": 812.0, "limit": null}),
            json!({"kind": "provider_request", "run": "r1", "model": "m", "input_tokens": 10, "output_tokens": 20, "micro_usd": 7000, "status": 200, "cut": true}),
            json!({"kind": "run_end", "run": "r1", "how": "budget", "time": "t3"}),
            json!({"kind": "command_start", "command": 2, "argv": ["late"]}),
        ]
        .into()
    }

    #[test]
    fn a_card_sums_its_run_and_nothing_else() {
        let card = build(&lines(), "r1").unwrap();
        assert_eq!(card["how"], "budget");
        assert_eq!(card["spent_micro_usd"], 11000);
        assert_eq!(card["budget_usd"], 0.01);
        assert_eq!(card["models"][0]["requests"], 2);
        assert_eq!(card["models"][0]["output_tokens"], 25);
        assert_eq!(card["commands"].as_array().unwrap().len(), 1, "{card}");
        assert_eq!(card["commands"][0]["exit"], 0);
        assert_eq!(card["hosts"]["reached"][0]["host"], "registry.test");
        assert_eq!(card["hosts"]["refused"][0]["refusal"], "not_listed");
        assert_eq!(card["requests"][1]["cut"], true);
        assert!(build(&lines(), "nope").is_err());
    }

    #[test]
    fn an_open_run_s_card_runs_to_the_log_s_end() {
        let mut l = lines();
        l.truncate(5);
        let card = build(&l, "r1").unwrap();
        assert_eq!(
            (card["how"].as_str(), card["ended"].is_null()),
            (Some("open"), true)
        );
        assert_eq!(card["spent_micro_usd"], 4000);
    }
}

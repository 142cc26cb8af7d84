//! Spending held below the agent, end to end: warden as PID 1 on the
//! tests' own internet, whose fake Anthropic and OpenAI origins
//! (tests/internet/serve.py) answer JSON and event streams with known
//! usage. The runtime's requests, on its providers' endpoints or through
//! the proxy, are metered at the policy's prices, counted against runs and
//! cut or refused at their budget.

mod common;

use common::internet::Internet;
use common::net::{boot, Net};
use common::{privileged, text, Options, RUNTIME_UID};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

const ANTHROPIC_KEY: &str = "sk-ant-test-9b1f0c7d3e5a";
const OPENAI_KEY: &str = "sk-oai-test-4d2e8a6c1b7f";

/// Prices that make the arithmetic plain: dollars per million tokens.
const PRICES: &str = r#"{"models": {"test-model": {"input": 1, "output": 10, "cache_write": 2, "cache_read": 0.5, "date": "2026-12-04", "source": "tests"}}}"#;

fn policy(internet: &Internet, extra: Value) -> Value {
    let mut policy = common::net::policy(internet);
    policy["hosts"].as_array_mut().unwrap().extend([
        json!("anthropic.allowed.test"),
        json!("openai.allowed.test"),
    ]);
    policy["upstream_ca"] = json!([internet.ca]);
    policy["providers"] = json!([
        {"name": "anthropic", "host": "anthropic.allowed.test", "api": "anthropic-messages", "key": "ANTHROPIC_API_KEY"},
        {"name": "openai", "host": "openai.allowed.test", "api": "openai", "key": "OPENAI_API_KEY"},
    ]);
    if let Value::Object(extra) = extra {
        policy.as_object_mut().unwrap().extend(extra);
    }
    policy
}

/// A machine metering its providers, the keys read at boot as from a
/// Secret, the main process a sleeping runtime.
fn boot_metered(extra: Value) -> Net {
    boot(
        |internet| policy(internet, extra),
        |opts: &mut Options| {
            let dir = opts.config["policy_dir"].as_str().unwrap().to_string();
            std::fs::write(format!("{dir}/prices.json"), PRICES).unwrap();
            let keys = format!("{dir}/../credentials.env");
            std::fs::write(
                &keys,
                format!("ANTHROPIC_API_KEY={ANTHROPIC_KEY}\nOPENAI_API_KEY={OPENAI_KEY}\n"),
            )
            .unwrap();
            std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
            opts.config["credentials_from"] = json!(keys);
            opts.main = vec!["sleep".into(), "1000".into()];
        },
    )
}

/// A request as the runtime (its uid, in the machine's network), on the
/// provider's endpoint: (status, body).
fn as_runtime(net: &Net, provider: &str, path: &str, body: &Value) -> (u16, String) {
    let url = format!("http://127.0.0.1:3128/providers/{provider}{path}");
    let body = body.to_string();
    let args = [
        "--noproxy",
        "*",
        "-H",
        "content-type: application/json",
        "-d",
        &body,
        &url,
    ];
    runtime_curl(net, &args)
}

fn runtime_curl(net: &Net, args: &[&str]) -> (u16, String) {
    let uid = RUNTIME_UID.to_string();
    let out = net
        .internet
        .in_machine("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, "--clear-groups"])
        .args(["curl", "-sS", "--max-time", "30", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let all = text(&out.stdout);
    let (body, status) = all.rsplit_once('\n').unwrap_or(("", "0"));
    (
        status.trim().parse().unwrap_or(0),
        body.to_string() + &text(&out.stderr),
    )
}

fn metered(net: &Net) -> Vec<Value> {
    net.machine.audit_kinds("provider_request")
}

/// The provider_request lines once there are `n`, waiting at most 10 s.
fn metered_n(net: &Net, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let lines = metered(net);
        if lines.len() >= n || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn every_request_costs_the_table_s_price_to_the_micro_dollar() {
    if !privileged("every_request_costs_the_table_s_price_to_the_micro_dollar") {
        return;
    }
    let net = boot_metered(json!({}));
    // input 500, cache write 300, cache read 200, output 500 (Anthropic);
    // input 1000 of which 200 cached, output 500 (OpenAI).
    let anthropic = 500 + 300 * 2 + 200 / 2 + 500 * 10;
    let openai = 800 + 200 / 2 + 500 * 10;
    let cases = [
        (
            "anthropic",
            "/v1/messages",
            json!({"model": "test-model", "max_tokens": 500}),
            anthropic,
        ),
        (
            "anthropic",
            "/v1/messages",
            json!({"model": "test-model-20250101", "max_tokens": 500, "stream": true}),
            anthropic,
        ),
        (
            "openai",
            "/v1/chat/completions",
            json!({"model": "test-model", "max_tokens": 500}),
            openai,
        ),
        (
            "openai",
            "/v1/chat/completions",
            json!({"model": "test-model", "max_tokens": 500, "stream": true, "stream_options": {"include_usage": true}}),
            openai,
        ),
        (
            "openai",
            "/v1/responses",
            json!({"model": "test-model", "max_tokens": 500}),
            openai,
        ),
        (
            "openai",
            "/v1/responses",
            json!({"model": "test-model", "max_tokens": 500, "stream": true}),
            openai,
        ),
    ];
    for (i, (provider, path, body, want)) in cases.iter().enumerate() {
        let (status, answer) = as_runtime(&net, provider, path, body);
        assert_eq!(
            status,
            200,
            "{provider}{path}: {answer}\n{}",
            net.machine.log()
        );
        let lines = metered_n(&net, i + 1);
        let line = &lines[i];
        assert_eq!(line["micro_usd"], *want, "{provider}{path} {body}: {line}");
        assert_eq!(line["estimated"], false, "{line}");
        assert_eq!(line["run"], Value::Null, "no run open: the day's: {line}");
    }
    only_warden_holds_the_providers_keys(&net, cases.len());
}

/// The key each origin saw (of `requests`) is the one warden added; the
/// runtime holds none, and its base URLs name the proxy.
fn only_warden_holds_the_providers_keys(net: &Net, requests: usize) {
    let seen = net.internet.provider_log();
    assert_eq!(seen.len(), requests, "{seen:?}");
    for s in &seen {
        let key = s["key"].as_str().unwrap();
        assert!(
            key == ANTHROPIC_KEY || key == format!("Bearer {OPENAI_KEY}"),
            "{s}"
        );
    }
    let pid = main_pid(net);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains(ANTHROPIC_KEY) && !environ.contains(OPENAI_KEY));
    assert!(
        environ.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:3128/providers/anthropic"),
        "{environ}"
    );
    assert!(environ.contains("OPENAI_BASE_URL=http://127.0.0.1:3128/providers/openai/v1"));
}

/// The main process's pid, as the host sees it.
fn main_pid(net: &Net) -> i32 {
    let warden = net.machine.warden_pid();
    let children = std::fs::read_to_string(format!("/proc/{warden}/task/{warden}/children"))
        .unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        })
        .expect("the main process")
}

#[test]
fn a_run_is_cut_at_its_budget_then_refused_and_the_next_starts_fresh() {
    if !privileged("a_run_is_cut_at_its_budget_then_refused_and_the_next_starts_fresh") {
        return;
    }
    let net = boot_metered(json!({}));
    let mut client = net.machine.client();
    assert_eq!(client.begin_run("r1", Some(0.01)).unwrap(), 10_000);
    // Each answer: 1200 for its input, 10 per output token: 280 tokens,
    // 4000 micro-dollars. The third crosses 10000 while it streams.
    let body = json!({"model": "test-model", "max_tokens": 280, "stream": true});
    for i in 0..3 {
        let (status, answer) = as_runtime(&net, "anthropic", "/v1/messages", &body);
        assert_eq!(status, 200, "request {i}: {answer}");
        if i == 2 {
            assert!(!answer.contains("message_stop"), "not cut: {answer}");
        }
    }
    let lines = metered_n(&net, 3);
    assert_eq!(lines[0]["micro_usd"], 4000, "{lines:?}");
    assert_eq!(lines[2]["cut"], true, "{lines:?}");
    assert_eq!(lines[2]["estimated"], true, "{lines:?}");
    let spent: u64 = lines.iter().map(|l| l["micro_usd"].as_u64().unwrap()).sum();
    assert!((10_000..10_200).contains(&spent), "{spent}: {lines:?}");
    let status = serde_json::to_value(client.status().unwrap()).unwrap();
    let runs = &status["proxy"]["opened"]["spend"]["runs"];
    assert_eq!(runs[0]["run"], "r1", "{status}");
    assert_eq!(runs[0]["spent_micro_usd"], spent, "{status}");
    // Spent: the next request is refused before it leaves, as the
    // provider would refuse it.
    let before = net.internet.provider_log().len();
    let (status, answer) = as_runtime(&net, "anthropic", "/v1/messages", &body);
    assert_eq!(status, 402, "{answer}");
    assert!(
        answer.contains("billing_error") && answer.contains("r1"),
        "{answer}"
    );
    assert_eq!(net.internet.provider_log().len(), before);
    let (spent_end, how) = client.end_run("r1").unwrap();
    assert_eq!((spent_end, how.as_str()), (spent, "budget"));
    let card = client.card("r1").unwrap();
    assert_eq!(card["how"], "budget", "{card}");
    assert_eq!(card["spent_micro_usd"], spent, "{card}");
    assert_eq!(card["models"][0]["requests"], 4, "{card}");
    // A second run starts fresh.
    client.begin_run("r2", Some(0.01)).unwrap();
    let (status, answer) = as_runtime(&net, "anthropic", "/v1/messages", &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(metered_n(&net, 5)[4]["run"], "r2");
}

#[test]
fn an_unpriced_model_is_refused_before_the_provider_sees_a_byte() {
    if !privileged("an_unpriced_model_is_refused_before_the_provider_sees_a_byte") {
        return;
    }
    let net = boot_metered(json!({}));
    let (status, answer) = as_runtime(
        &net,
        "openai",
        "/v1/chat/completions",
        &json!({"model": "gpt-unknown", "messages": []}),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("model_not_found") && answer.contains("gpt-unknown"),
        "{answer}"
    );
    assert!(net.internet.provider_log().is_empty());
    assert!(!net.internet.http_requests().contains("openai.allowed.test"));
    let line = &metered_n(&net, 1)[0];
    assert_eq!(
        (line["refused"].as_str(), line["micro_usd"].as_u64()),
        (Some("unpriced"), Some(0))
    );
}

/// With `runtime_hosts`, the provider's host through the proxy (a plain
/// CONNECT, the way a runtime that honours a proxy goes) is metered too:
/// never an open, unmetered tunnel. Shell is not the runtime: it gets no
/// key, and the provider's endpoint turns it away.
#[test]
fn the_provider_is_metered_whichever_way_the_runtime_goes() {
    if !privileged("the_provider_is_metered_whichever_way_the_runtime_goes") {
        return;
    }
    let net = boot_metered(json!({"runtime_hosts": ["anthropic.allowed.test"]}));
    // The machine's bundle, which trusts warden's authority.
    let bundle = net.machine.root().join("run/trust.pem");
    let body = json!({"model": "test-model", "max_tokens": 10}).to_string();
    let (status, answer) = runtime_curl(
        &net,
        &[
            "-x",
            "http://127.0.0.1:3128",
            "--cacert",
            bundle.to_str().unwrap(),
            "-H",
            "content-type: application/json",
            "-d",
            &body,
            "https://anthropic.allowed.test/v1/messages",
        ],
    );
    assert_eq!(status, 200, "{answer}\n{}", net.machine.log());
    let line = &metered_n(&net, 1)[0];
    assert_eq!(line["provider"], "anthropic", "{line}");
    assert_eq!(net.internet.provider_log()[0]["key"], ANTHROPIC_KEY);
    // Shell: its endpoint request is refused; through the proxy it is
    // metered and gets no key.
    let (_, text) = net.text(&format!(
        "curl -sS --max-time 20 -i --noproxy '*' -d '{body}' http://127.0.0.1:3128/providers/anthropic/v1/messages"
    ));
    assert!(
        text.contains("403") && text.contains("runtime's alone"),
        "{text}"
    );
    let (_, text) = net.text(&format!(
        "curl -sS --max-time 20 -d '{body}' https://anthropic.allowed.test/v1/messages"
    ));
    assert!(text.contains("\"usage\""), "{text}");
    let log = net.internet.provider_log();
    assert_eq!(log.last().unwrap()["key"], "", "shell got no key: {log:?}");
    assert_eq!(metered_n(&net, 2).len(), 2);
}

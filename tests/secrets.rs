//! Secrets never appear in the audit log, nor in an error warden sends:
//! canaries from the runtime's .env and from warden's own environment, in
//! an argv, a URL's query, a failing command's error, and base64.

mod common;

use base64::Engine;
use common::{privileged, Machine, Options, RUNTIME_UID};
use std::path::{Path, PathBuf};
use warden::wire::RunRequest;

const ENV_CANARY: &str = "canary-sk-5f7e9a1c";
const TOKEN_CANARY: &str = "ghp-canary-77d2e0";

fn argv(args: &[&str]) -> RunRequest {
    RunRequest {
        argv: Some(args.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

#[test]
fn secrets_are_redacted_from_every_audit_line_and_error() {
    if !privileged("secrets_are_redacted_from_every_audit_line_and_error") {
        return;
    }
    let (m, policy) = boot_with_a_token_and_the_runtimes_key();

    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let url = format!("https://registry.invalid/pkg?token={ENV_CANARY}&v=1");
    let bearer = b64(&format!("Authorization: Bearer {ENV_CANARY}"));
    let attempts = [
        argv(&["echo", ENV_CANARY]),
        argv(&["echo", TOKEN_CANARY]),
        argv(&["echo", &url]),
        argv(&["echo", &b64(ENV_CANARY)]),
        argv(&["echo", &bearer]),
        argv(&["true", &format!("--password={ENV_CANARY}")]),
    ];
    for req in attempts {
        assert_eq!(m.client().run(req).unwrap().exit.status, 0);
    }
    // A command that cannot start: its error names the program.
    let failed = m
        .client()
        .run(argv(&[&format!("/nonexistent/{ENV_CANARY}")]))
        .unwrap();
    let error = failed.exit.error.unwrap();
    assert!(
        !error.contains(ENV_CANARY) && error.contains(warden::shared::redact::MARK),
        "{error}"
    );

    a_broken_host_list_quoting_the_secret_is_said_with_the_mark(&m, &policy);

    let audit = std::fs::read_to_string(m.audit_path()).unwrap();
    for secret in [
        ENV_CANARY,
        TOKEN_CANARY,
        &b64(ENV_CANARY),
        b64(ENV_CANARY).trim_end_matches('='),
    ] {
        assert!(!audit.contains(secret), "{secret} is in the audit log");
    }
    assert!(
        !audit.contains(&bearer),
        "the base64 text carrying the secret survived whole"
    );
    assert!(
        audit.matches(warden::shared::redact::MARK).count() >= 7,
        "{audit}"
    );
    // And the chain still verifies: lines are redacted before they are sealed.
    let mut prev = "0".repeat(64);
    for line in audit.lines() {
        prev = warden::shared::audit_chain::check_line(line, &prev).unwrap();
    }
}

/// A machine with TOKEN_CANARY in warden's environment, ENV_CANARY in the
/// runtime's .env, and a policy folder of its own; the folder.
fn boot_with_a_token_and_the_runtimes_key() -> (Machine, PathBuf) {
    let dir = Machine::folder("");
    let policy = dir.path().join("policy");
    std::fs::create_dir(&policy).unwrap();
    let m = Machine::start_in(
        dir,
        Options {
            env: vec![("GITHUB_TOKEN".into(), TOKEN_CANARY.into())],
            config: serde_json::json!({"policy_dir": policy}),
            ..Default::default()
        },
    );
    m.wait_ready();
    let env = m.home.join(".env");
    std::fs::write(&env, format!("# keys\nAPI_KEY={ENV_CANARY}\n")).unwrap();
    std::os::unix::fs::chown(&env, Some(RUNTIME_UID), Some(RUNTIME_UID)).unwrap();
    (m, policy)
}

/// A broken host list quoting the secret: the reload error, the audit
/// line and warden's own diagnostic line all carry the mark instead.
fn a_broken_host_list_quoting_the_secret_is_said_with_the_mark(m: &Machine, policy: &Path) {
    std::fs::write(
        policy.join("network.json"),
        format!("{{\"hosts\": [\"bad!{ENV_CANARY}.example\"]}}"),
    )
    .unwrap();
    let e = m.client().reload().unwrap_err().to_string();
    assert!(
        !e.contains(ENV_CANARY) && e.contains(warden::shared::redact::MARK),
        "{e}"
    );
    // The proxy notices the file by itself too, and says so on stderr.
    let probe = std::process::Command::new("nsenter")
        .args(["-t", &m.warden_pid().to_string(), "-n", "python3", "-c"])
        .arg("import socket; socket.create_connection(('127.0.0.1', 3128)).sendall(b'CONNECT x.example:443 HTTP/1.1\\r\\n\\r\\n')")
        .output()
        .unwrap();
    assert!(probe.status.success(), "{probe:?}");
    std::fs::write(policy.join("network.json"), "{\"hosts\": [\"ok.example\"]}").unwrap();
    let _ = m.client().reload();
    std::fs::write(
        policy.join("network.json"),
        format!("{{\"hosts\": [\"again!{ENV_CANARY}.example\"]}}"),
    )
    .unwrap();
    let probe = std::process::Command::new("nsenter")
        .args(["-t", &m.warden_pid().to_string(), "-n", "python3", "-c"])
        .arg("import socket; s = socket.create_connection(('127.0.0.1', 3128)); s.sendall(b'CONNECT x.example:443 HTTP/1.1\\r\\n\\r\\n'); s.recv(100)")
        .output()
        .unwrap();
    assert!(probe.status.success(), "{probe:?}");
    let log = m.log();
    assert!(log.contains("network policy not reloaded"), "{log}");
    assert!(
        log.contains(&format!("again!{}", warden::shared::redact::MARK)),
        "{log}"
    );
    assert!(
        !log.contains(ENV_CANARY) && !log.contains(TOKEN_CANARY),
        "{log}"
    );
}

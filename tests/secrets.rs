//! Secrets never appear in the audit log, nor in an error warden sends:
//! canaries from the runtime's .env and from warden's own environment, in
//! an argv, a URL's query, a failing command's error, and base64.

mod common;

use base64::Engine;
use common::{privileged, Machine, Options, RUNTIME_UID};
use warden::protocol::RunRequest;

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
    let m = Machine::boot(Options {
        env: vec![("GITHUB_TOKEN".into(), TOKEN_CANARY.into())],
        ..Default::default()
    });
    let env = m.home.join(".env");
    std::fs::write(&env, format!("# keys\nAPI_KEY={ENV_CANARY}\n")).unwrap();
    std::os::unix::fs::chown(&env, Some(RUNTIME_UID), Some(RUNTIME_UID)).unwrap();

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
        !error.contains(ENV_CANARY) && error.contains(warden::redact::MARK),
        "{error}"
    );

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
    assert!(audit.matches(warden::redact::MARK).count() >= 7, "{audit}");
    // And the chain still verifies: lines are redacted before they are sealed.
    let mut prev = "0".repeat(64);
    for line in audit.lines() {
        prev = warden::audit::check_line(line, &prev).unwrap();
    }
}

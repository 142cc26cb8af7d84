use super::*;
use serde_json::json;

/// Each case's line (an event, the fields it was given, the fields
/// documented) is the JSON object the log has always had.
fn assert_lines_as_documented(cases: Vec<(Event, Value, Value)>) {
    for (event, got, want) in cases {
        assert_eq!(got, want, "{event}");
    }
}

/// A refused CONNECT, with an origin whose every field is known.
fn refused_egress() -> Egress {
    let origin = Origin {
        pid: Some(9),
        uid: Some(2001),
        command: Some(17),
        argv_sha256: Some("ab".into()),
    };
    Egress {
        allowed: false,
        method: "CONNECT".into(),
        host: Some("h.test".into()),
        port: Some(443),
        client: "127.0.0.1:5000".into(),
        resolved: vec![],
        address: None,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 1.5,
        entry: None,
        list: None,
        status: Some(403),
        end: None,
        origin: Some(origin),
        opened: None,
        path: None,
        credential: None,
        credential_echo_removed: None,
        reason: Some("not listed".into()),
        refusal: Some("not_listed"),
    }
}

/// The proxy's shapes, with and without their fields that come and go,
/// are the JSON objects the log has always had.
#[test]
fn proxy_payloads_are_the_lines_as_documented() {
    let egress = refused_egress();
    let cases: Vec<(Event, Value, Value)> = vec![
        (
            Event::Egress,
            fields_of(&ProxyLine::Egress(egress.clone())),
            json!({"allowed": false, "method": "CONNECT", "host": "h.test", "port": 443,
                   "client": "127.0.0.1:5000", "resolved": [], "address": null,
                   "bytes_up": 0, "bytes_down": 0, "duration_ms": 1.5, "status": 403,
                   "origin": {"pid": 9, "uid": 2001, "command": 17, "argv_sha256": "ab"},
                   "reason": "not listed", "refusal": "not_listed"}),
        ),
        (
            Event::CredentialEchoRemoved,
            fields_of(&ProxyLine::CredentialEchoRemoved(CredentialEchoRemoved {
                host: "h".into(),
                path: "/p".into(),
                count: 2,
                origin: None,
            })),
            json!({"host": "h", "path": "/p", "count": 2, "origin": null}),
        ),
    ];
    assert_lines_as_documented(cases);
    assert_eq!(ProxyLine::Egress(egress).event(), Event::Egress);
}

/// The connect gate's refusals: a connect's line as documented, and a
/// listen's its own event.
#[test]
fn gate_payloads_are_the_lines_as_documented() {
    let cases: Vec<(Event, Value, Value)> = vec![(
        Event::ConnectRefused,
        fields_of(&GateRefusal {
            listen: false,
            pid: 7,
            reason: "r".into(),
            user: None,
            address: Some("192.0.2.1:80".into()),
            command: None,
            argv_sha256: None,
        }),
        json!({"pid": 7, "reason": "r", "address": "192.0.2.1:80"}),
    )];
    assert_lines_as_documented(cases);
    let listen = GateRefusal {
        listen: true,
        pid: 1,
        reason: String::new(),
        user: None,
        address: None,
        command: None,
        argv_sha256: None,
    };
    assert_eq!(listen.event(), Event::ListenRefused);
}

/// Warden's own shapes (its network, main process, detached commands,
/// doors and keys) are the JSON objects the log has always had.
#[test]
fn warden_payloads_are_the_lines_as_documented() {
    let cases: Vec<(Event, Value, Value)> = vec![
        (
            Event::Network,
            fields_of(&Network {
                firewall: Firewall::Failed { error: "e".into() },
                firewall_via: None,
                firewall_policy: Requirement::BestEffort,
                proxy: &[],
                proxy_error: None,
                hosts_from: "default",
            }),
            json!({"firewall": {"error": "e"}, "firewall_via": null,
                   "firewall_policy": "best-effort", "proxy": [],
                   "proxy_error": null, "hosts_from": "default"}),
        ),
        (
            Event::MainExit,
            fields_of(&MainExit {
                status: 3,
                restart: None,
            }),
            json!({"status": 3}),
        ),
        (
            Event::CommandSignalled,
            fields_of(&OnDetached {
                kind: DetachedAction::Signalled,
                command: 4,
                requester_uid: 0,
                signal: Some("SIGTERM"),
            }),
            json!({"command": 4, "requester_uid": 0, "signal": "SIGTERM"}),
        ),
        (
            Event::ConnectionRefused,
            fields_of(&ConnectionRefused {
                door: "host",
                via: "vsock",
                uid: None,
                pid: None,
                reason: "bad key",
                also_refused_unaudited: Some(0),
            }),
            json!({"door": "host", "via": "vsock", "reason": "bad key",
                   "also_refused_unaudited": 0}),
        ),
        (
            Event::KeysFailed,
            fields_of(&KeysFailed {
                credentials_from: None,
                error: "e".into(),
            }),
            json!({"error": "e"}),
        ),
    ];
    assert_lines_as_documented(cases);
    let opened = OnDetached {
        kind: DetachedAction::Attached,
        command: 1,
        requester_uid: 0,
        signal: None,
    };
    assert_eq!(opened.event(), Event::CommandAttached);
}

/// An origin of which only the uid is known is that uid alone.
#[test]
fn an_origin_of_only_a_uid_is_that_uid() {
    let only_uid = Origin {
        uid: Some(0),
        ..Default::default()
    };
    assert_eq!(serde_json::to_value(&only_uid).unwrap(), json!({"uid": 0}));
}

/// The metered half of a `provider_request` line is flattened into
/// it, its `refused` only when there was a refusal.
#[test]
fn a_provider_request_is_one_flat_object() {
    let metered = crate::shared::spend::AuditLine {
        run: None,
        provider: "p".into(),
        api: "openai",
        model: "m".into(),
        status: Some(200),
        streamed: false,
        cut: false,
        estimated: false,
        input_tokens: 1,
        output_tokens: 2,
        cache_write_tokens: 0,
        cache_read_tokens: 0,
        micro_usd: 5,
        duration_ms: 2.0,
        refused: None,
    };
    let line = ProxyLine::ProviderRequest(ProviderRequest {
        metered,
        origin: None,
    });
    assert_eq!(line.event(), Event::ProviderRequest);
    assert_eq!(
        fields_of(&line),
        json!({"run": null, "provider": "p", "api": "openai", "model": "m", "status": 200,
               "streamed": false, "cut": false, "estimated": false, "input_tokens": 1,
               "output_tokens": 2, "cache_write_tokens": 0, "cache_read_tokens": 0,
               "micro_usd": 5, "duration_ms": 2.0, "origin": null})
    );
}

//! An opened host's parsers, over what a client or an origin sends: a
//! request head, an answer head, a chunked body fed in two pieces, a path
//! rule, and the masking of a secret in a stream. Never panics; a chunked
//! body decodes the same however it is cut, and masking keeps lengths.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::guest::net::opened::http1::{self, Chunked};
use warden::guest::net::opened::scrub::Scrubber;
use warden::shared::egress::request_rules::{request_path, Rule, RuleText};

fuzz_target!(|data: &[u8]| {
    if let Ok(head) = http1::parse_request(data, "api.example.com") {
        assert!(head.target.starts_with('/'));
        let sent = http1::request_upstream(&head, Some(("Authorization", "Bearer k")), true);
        let ending: &[u8] = match head.websocket {
            true => b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            false => b"Connection: close\r\n\r\n",
        };
        assert!(sent.ends_with(ending));
    }
    for method in ["GET", "HEAD"] {
        if let Ok(answer) = http1::parse_response(data, method) {
            let _ = http1::require_identity(&answer);
            let mut keep = |_: &mut [u8]| {};
            let _ = http1::response_downstream(&answer, false, &mut keep);
        }
    }
    chunked_cut_anywhere(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = request_path(text);
        let (pattern, target) = text.split_once('\n').unwrap_or((text, "/"));
        let rule = Rule::parse(&RuleText {
            method: None,
            path: Some(pattern.to_string()),
        });
        if let (Ok(rule), Ok(segments)) = (rule, request_path(target)) {
            let _ = rule.allows("GET", &segments);
        }
    }
    masking_keeps_lengths(data);
});

/// The same payload and the same end whether the body comes whole or cut
/// at its middle.
fn chunked_cut_anywhere(data: &[u8]) {
    let mut whole = Chunked::default();
    let Ok((payload, used)) = whole.feed(data) else {
        return;
    };
    let mut cut = Chunked::default();
    let middle = data.len() / 2;
    let Ok((mut again, first)) = cut.feed(&data[..middle]) else {
        panic!("a prefix of a good body was refused");
    };
    if !cut.done {
        let (rest, second) = cut.feed(&data[middle..]).expect("the rest of a good body");
        again.extend(rest);
        assert_eq!(first + second, used);
    }
    assert_eq!(again, payload);
    assert_eq!(cut.done, whole.done);
}

fn masking_keeps_lengths(data: &[u8]) {
    let (secret, text) = data.split_at(data.len().min(12));
    let mut scrubber = Scrubber::new([secret]);
    let mut out = Vec::new();
    for piece in text.chunks(7) {
        out.extend(scrubber.push(piece));
    }
    out.extend(scrubber.finish());
    assert_eq!(out.len(), text.len());
}

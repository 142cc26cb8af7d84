//! The line a VM's guest sends the host's egress relay, and the relay's
//! answer: the host reads what a hostile guest kernel may write, so the
//! parser never panics, and what it accepts is one printable word per
//! part and writes back the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::shared::egress::link::{ask_line, parse_answer, parse_ask};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ask) = parse_ask(text) {
        assert!(ask.port != 0);
        for part in [&ask.key, &ask.host] {
            assert!(!part.is_empty() && part.chars().all(|c| c.is_ascii_graphic()));
        }
        if let Ok(line) = ask_line(&ask) {
            assert_eq!(parse_ask(line.trim_end_matches('\n')), Ok(ask));
        }
    }
    let _ = parse_answer(text);
});

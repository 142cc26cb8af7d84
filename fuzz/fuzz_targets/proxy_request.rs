//! The egress proxy's parsers: a request head, the targets inside it, and
//! a host list. Never panics; what they accept is well-formed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::net::hosts::HostList;
use warden::net::proxy::parse_request;
use warden::net::target::{self, Host};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = parse_request(data) {
        // An accepted target is a name or an address, with a real port.
        assert!(request.target.port > 0);
        if let Host::Name(name) = &request.target.host {
            assert!(target::valid_name(name), "{name:?}");
            assert!(!name.ends_with('.') && name.to_ascii_lowercase() == *name);
        }
        if let Some(plain) = &request.plain {
            // What goes upstream is one head, ending where it should.
            assert!(plain.head.ends_with(b"Connection: close\r\n\r\n"));
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = target::parse_authority(text);
    let _ = target::parse_absolute_uri(text);
    let _ = target::parse_host_header(text, 80);
    let entries: Vec<String> = text.lines().map(String::from).collect();
    if let Ok(list) = HostList::parse(&entries, &[80, 443]) {
        for name in ["example.com", "a.example.com"] {
            let _ = list.allowing(name, 443);
        }
    }
});

//! The egress proxy's parsers: a request head, the targets inside it, a
//! host list, the address classifier and the policy's address ranges.
//! Never panics; what they accept is well-formed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;
use warden::guest::net::proxy::parse_request;
use warden::shared::egress::addr::{self, Cidr};
use warden::shared::egress::hosts::HostList;
use warden::shared::egress::target::{self, Host};

fuzz_target!(|data: &[u8]| {
    classify(data);
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
    if let Ok(range) = text.parse::<Cidr>() {
        // What parses prints back as something that parses the same.
        assert_eq!(range.to_string().parse::<Cidr>().as_ref(), Ok(&range));
    }
    let entries: Vec<String> = text.lines().map(String::from).collect();
    if let Ok(list) = HostList::parse(&entries, &[80, 443]) {
        for name in ["example.com", "a.example.com"] {
            let _ = list.allowing(name, 443);
        }
    }
});

/// The classifier over the input's first bytes as an IPv4 and an IPv6
/// address: an address the policy lists is always allowed.
fn classify(data: &[u8]) {
    let mut v6 = [0u8; 16];
    for (d, s) in v6.iter_mut().zip(data) {
        *d = *s;
    }
    let v4 = [v6[0], v6[1], v6[2], v6[3]];
    for ip in [IpAddr::from(v4), IpAddr::from(v6)] {
        let _ = addr::refused(ip);
        let exact: Cidr = ip.to_string().parse().expect("an address is a range");
        assert!(exact.contains(ip));
        assert!(addr::check(ip, &[exact]).is_ok(), "{ip} listed but refused");
    }
}

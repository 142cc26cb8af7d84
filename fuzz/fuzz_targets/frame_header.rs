//! The API's frame header decoder: never panics, never accepts a length
//! over the limit, and what it accepts encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::wire::{Header, HEADER_LEN, MAX_FRAME};

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = <[u8; HEADER_LEN]>::try_from(data.get(..HEADER_LEN).unwrap_or(&[])) else {
        return;
    };
    if let Ok(header) = Header::decode(&raw) {
        assert!(header.len <= MAX_FRAME);
        assert_eq!(header.encode(), raw);
    }
});

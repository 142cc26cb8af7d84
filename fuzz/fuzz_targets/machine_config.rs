//! The machine config parser and validator: never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = warden::shared::config::MachineConfig::parse(text);
    }
});

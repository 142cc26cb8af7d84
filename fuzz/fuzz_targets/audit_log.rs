//! The audit log checker, fed whatever a copied log file may hold, and the
//! line describer of `warden audit tail`: never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = warden::shared::audit_chain::verify_text(&text, None);
    for line in text.lines() {
        let _ = warden::shared::audit_chain::describe(line);
        let _ = warden::shared::audit_chain::check_line(line, "0");
    }
});

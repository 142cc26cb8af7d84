//! warden's own diagnostic lines, on stderr, redacted like the audit log:
//! a secret must not reach the console or a container's log either.

use std::sync::OnceLock;

type Redact = Box<dyn Fn(&str) -> String + Send + Sync>;

static REDACT: OnceLock<Redact> = OnceLock::new();

/// Installs the redaction every later line goes through (once, at boot,
/// when the audit log and its redactor exist).
pub fn set_redaction(redact: Redact) {
    let _ = REDACT.set(redact);
}

/// Prints one line, "warden: " and `text`, redacted.
pub fn say(text: &str) {
    match REDACT.get() {
        Some(redact) => eprintln!("warden: {}", redact(text)),
        None => eprintln!("warden: {text}"),
    }
}

/// `say!("...", args)`: a redacted diagnostic line.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::shared::diag::say(&format!($($arg)*))
    };
}

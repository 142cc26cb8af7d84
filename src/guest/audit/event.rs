//! The kinds of event the audit log records: one closed list, so a line's
//! `kind` is always one the owner's documentation describes (a test holds
//! `docs/audit.md`'s table to this list, both ways).

use serde::{Serialize, Serializer};

/// Declares `Event` with each kind's word in the log, and `Event::ALL`.
macro_rules! events {
    ($($variant:ident => $word:literal),* $(,)?) => {
        /// What an audit line records (its `kind`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Event {
            $($variant),*
        }

        impl Event {
            /// Every kind, in the order the documentation lists them.
            pub const ALL: &'static [Event] = &[$(Event::$variant),*];

            /// The kind's word in the log.
            pub fn word(self) -> &'static str {
                match self {
                    $(Event::$variant => $word),*
                }
            }
        }
    };
}

events! {
    Boot => "boot",
    Network => "network",
    DefaultHosts => "default_hosts",
    Egress => "egress",
    ConnectRefused => "connect_refused",
    ListenRefused => "listen_refused",
    PolicyReload => "policy_reload",
    PolicyReloadFailed => "policy_reload_failed",
    SettingsReload => "settings_reload",
    Ready => "ready",
    Wake => "wake",
    Pause => "pause",
    NextJob => "next_job",
    MainStart => "main_start",
    MainFailed => "main_failed",
    MainExit => "main_exit",
    CommandStart => "command_start",
    CommandEnd => "command_end",
    CommandFailed => "command_failed",
    CommandRefused => "command_refused",
    ConnectionRefused => "connection_refused",
    Connection => "connection",
    Suppressed => "suppressed",
    RotatedAway => "rotated_away",
    GateClosed => "gate_closed",
    GateOpened => "gate_opened",
    KeysHanded => "keys_handed",
    KeysFailed => "keys_failed",
    CredentialsHanded => "credentials_handed",
    CredentialEchoRemoved => "credential_echo_removed",
    ProviderRequest => "provider_request",
    RunBegin => "run_begin",
    RunEnd => "run_end",
    Setup => "setup",
    Hold => "hold",
    IdleStop => "idle_stop",
    CommandAttached => "command_attached",
    CommandWaited => "command_waited",
    CommandSignalled => "command_signalled",
    ShellStopped => "shell_stopped",
    Signal => "signal",
    ShutdownRequested => "shutdown_requested",
    Stopped => "stopped",
    Shutdown => "shutdown",
    Runtime => "runtime",
    RequestRefused => "request_refused",
    AuditRecovered => "audit_recovered",
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.word())
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds `docs/audit.md`'s events table names (the backticked words
    /// of its first column), in its order.
    fn documented(markdown: &str) -> Vec<String> {
        let table = markdown
            .split("## Events")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'));
        table
            .filter_map(|row| row.split('|').nth(1))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_string))
            .collect()
    }

    #[test]
    fn the_documented_events_are_exactly_the_recorded_ones() {
        let doc = include_str!("../../../docs/audit.md");
        let documented = documented(doc);
        let words: Vec<String> = Event::ALL.iter().map(|e| e.word().to_string()).collect();
        let undocumented: Vec<&String> = words.iter().filter(|w| !documented.contains(w)).collect();
        let unknown: Vec<&String> = documented.iter().filter(|d| !words.contains(d)).collect();
        assert!(
            undocumented.is_empty(),
            "not in docs/audit.md: {undocumented:?}"
        );
        assert!(
            unknown.is_empty(),
            "in docs/audit.md, never recorded: {unknown:?}"
        );
        assert_eq!(documented.len(), words.len(), "a kind documented twice");
    }

    #[test]
    fn documented_reads_the_first_column_only() {
        let cases: &[(&str, &[&str])] = &[
            ("## Events\n\n| kind | fields |\n|---|---|\n| `a`, `b` | `x` |\n| `c` | y |\n\nafter `d`", &["a", "b", "c"]),
            ("| `z` | before the heading |\n## Events\n| `a` | |", &["a"]),
            ("no table", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(documented(text), *want, "{text:?}");
        }
    }

    #[test]
    fn an_event_serialises_as_its_word() {
        for event in Event::ALL {
            let json = serde_json::to_value(event).unwrap();
            assert_eq!(json, event.word());
            assert_eq!(event.to_string(), event.word());
        }
        let words: std::collections::HashSet<_> = Event::ALL.iter().map(|e| e.word()).collect();
        assert_eq!(words.len(), Event::ALL.len(), "two kinds share a word");
    }
}

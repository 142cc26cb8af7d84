//! The main process started again when it ends (`main_restart` in the
//! machine config): what a container's engine does for a container, done
//! by warden where no engine stands around it (a VM). The rule alone, pure,
//! beside the machine config that names it; the guest's boot applies it.

use serde::Deserialize;
use std::time::Duration;

/// When the main process is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MainRestart {
    /// The machine ends with its main process (the default).
    #[default]
    No,
    /// Started again when it ended with a status other than 0.
    OnFailure,
    /// Started again whatever its status, until the machine is stopped.
    Always,
}

impl MainRestart {
    /// Whether a main process that ended with `status` starts again.
    pub fn again(self, status: i32) -> bool {
        match self {
            MainRestart::No => false,
            MainRestart::OnFailure => status != 0,
            MainRestart::Always => true,
        }
    }
}

/// A main process that ran at least this long ends a run of quick exits.
pub const SETTLED: Duration = Duration::from_secs(60);

/// The wait before the next start, after `quick` exits in a row that
/// came sooner than `SETTLED`: 1 s, doubling, at most 30 s.
pub fn backoff(quick: u32) -> Duration {
    Duration::from_secs(1u64 << quick.min(5)).min(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn again_table() {
        let cases = [
            (MainRestart::No, 0, false),
            (MainRestart::No, 1, false),
            (MainRestart::OnFailure, 0, false),
            (MainRestart::OnFailure, 1, true),
            (MainRestart::OnFailure, 137, true),
            (MainRestart::Always, 0, true),
            (MainRestart::Always, 2, true),
        ];
        for (policy, status, want) in cases {
            assert_eq!(policy.again(status), want, "{policy:?} {status}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_30_s() {
        let secs: Vec<u64> = (0..8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn the_words_are_the_definitions() {
        for (word, want) in [
            ("\"no\"", MainRestart::No),
            ("\"on-failure\"", MainRestart::OnFailure),
            ("\"always\"", MainRestart::Always),
        ] {
            assert_eq!(serde_json::from_str::<MainRestart>(word).unwrap(), want);
        }
        assert!(serde_json::from_str::<MainRestart>("\"sometimes\"").is_err());
    }
}

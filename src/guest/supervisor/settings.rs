//! The settings a running machine takes again without being made again:
//! the commands' limits (limits.json) and the idle stop (machine.json's
//! `idle_stop_s`), read at the API's `reload` beside the network policy,
//! and the task that stops an idle machine, whose limit may change.

use super::Supervisor;
use crate::guest::audit::payload;
use crate::wire::Limits;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Why the settings could not be read again: the file's own error.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Limits(#[from] crate::shared::policy::PolicyError),
    #[error(transparent)]
    Config(#[from] crate::shared::config::ConfigError),
}

/// What a reload read: applied only once the network policy has been
/// read too, so that a broken file changes nothing.
pub struct Settings {
    pub limits: Limits,
    pub idle_stop_s: Option<u64>,
}

impl Supervisor {
    /// Reads the settings a reload changes; an unreadable or invalid file
    /// is an error naming it, and nothing is applied.
    pub fn read_settings(&self) -> Result<Settings, SettingsError> {
        let limits = crate::shared::policy::load_limits(&self.config.policy_dir)?;
        let idle_stop_s = match &self.config.file {
            Some(path) => crate::shared::config::MachineConfig::load(path, true)?.idle_stop_s,
            // No machine.json at boot: nothing to read it again from.
            None => self.activity.idle_stop().map(|d| d.as_secs()),
        };
        Ok(Settings {
            limits,
            idle_stop_s,
        })
    }

    /// Applies what `read_settings` read: commands started from now on get
    /// the new limits (running ones keep theirs), and the idle stop counts
    /// from the last activity as before. Recorded as `settings_reload`.
    pub fn apply_settings(self: &Arc<Self>, settings: Settings) {
        self.confinement.set_limits(settings.limits);
        self.activity.set_idle_stop(settings.idle_stop_s);
        watch_idleness(self);
        self.audit.record(&payload::SettingsReload {
            limits: settings.limits,
            idle_stop_s: settings.idle_stop_s,
        });
    }
}

/// With an idle stop set: looks every second (or a quarter of the limit)
/// whether the machine has been idle long enough (no request, no command,
/// no hold), and stops it. One task at most; it ends when a reload takes
/// the idle stop away. Called in the runtime (boot, or a reload).
pub fn watch_idleness(sup: &Arc<Supervisor>) {
    if sup.activity.idle_stop().is_none() || sup.activity.watching.swap(true, Ordering::SeqCst) {
        return;
    }
    let watched = Arc::downgrade(sup);
    tokio::spawn(async move {
        loop {
            let step = {
                let Some(sup) = watched.upgrade() else { return };
                let Some(limit) = sup.activity.idle_stop() else {
                    sup.activity.watching.store(false, Ordering::SeqCst);
                    return;
                };
                if sup.activity.stop_now(sup.commands.count()) {
                    let idle_ms = sup.activity.idle().as_millis() as u64;
                    sup.audit.record(&payload::IdleStop {
                        idle_ms,
                        idle_stop_s: limit.as_secs(),
                    });
                    sup.request_stop();
                    return;
                }
                step_for(limit)
            };
            tokio::time::sleep(step).await;
        }
    });
}

/// Pure: how often an idle stop of `limit` is looked at.
fn step_for(limit: Duration) -> Duration {
    Duration::from_secs(1)
        .min(limit / 4)
        .max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_watch_looks_often_enough_and_not_too_often() {
        let cases = [
            (Duration::from_secs(3600), Duration::from_secs(1)),
            (Duration::from_secs(2), Duration::from_millis(500)),
            (Duration::from_millis(100), Duration::from_millis(100)),
        ];
        for (limit, want) in cases {
            assert_eq!(step_for(limit), want, "{limit:?}");
        }
    }
}

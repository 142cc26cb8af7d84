//! The idle rules both sides apply: now as Unix milliseconds, and whether
//! the runtime's next job is near enough that a machine stays up (the
//! guest's idle stop) or is started ahead of it (`warden machine serve`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// A machine with a job due within this long does not stop for being idle.
pub const JOB_SOON_MS: u64 = 5 * 60 * 1000;

/// Pure: whether a job at `next_job_ms` (0: none) is due within
/// `JOB_SOON_MS` of `now_ms` (a time past is not).
pub fn job_soon(next_job_ms: u64, now_ms: u64) -> bool {
    next_job_ms != 0 && next_job_ms >= now_ms && next_job_ms - now_ms <= JOB_SOON_MS
}

//! The limits of a command: limits.json's shape (read by the guest's
//! policy) and a `run` request's (which can only lower them), so both
//! sides of the wire build them the same way.

use serde::{Deserialize, Serialize};

/// Upper bounds for every command; None means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub timeout_ms: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub address_space_bytes: Option<u64>,
    pub processes: Option<u64>,
    pub output_bytes: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub open_files: Option<u64>,
    /// Memory of the command as a whole (its cgroup's memory.max: page
    /// cache, memfd and shared memory included); held only where commands
    /// get cgroups of their own.
    pub memory_bytes: Option<u64>,
    /// CPU time per wall time, in percent of one CPU (its cgroup's
    /// cpu.max); held only where commands get cgroups of their own.
    pub cpu_percent: Option<u64>,
}

impl Limits {
    /// Each limit is the lower of the two; a request can only ask for less.
    pub fn tightened_by(&self, asked: &Limits) -> Limits {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Limits {
            timeout_ms: min(self.timeout_ms, asked.timeout_ms),
            cpu_seconds: min(self.cpu_seconds, asked.cpu_seconds),
            address_space_bytes: min(self.address_space_bytes, asked.address_space_bytes),
            processes: min(self.processes, asked.processes),
            output_bytes: min(self.output_bytes, asked.output_bytes),
            file_size_bytes: min(self.file_size_bytes, asked.file_size_bytes),
            open_files: min(self.open_files, asked.open_files),
            memory_bytes: min(self.memory_bytes, asked.memory_bytes),
            cpu_percent: min(self.cpu_percent, asked.cpu_percent),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_only_tightens_limits() {
        let policy = Limits {
            cpu_seconds: Some(10),
            processes: None,
            timeout_ms: Some(1000),
            ..Default::default()
        };
        let asked = Limits {
            cpu_seconds: Some(99),
            processes: Some(5),
            timeout_ms: Some(10),
            ..Default::default()
        };
        let got = policy.tightened_by(&asked);
        assert_eq!(
            (got.cpu_seconds, got.processes, got.timeout_ms),
            (Some(10), Some(5), Some(10))
        );
    }
}

//! Gang readiness: HyperPod's gang scheduling, Kueue's `waitForPodsReady`.
//!
//! When it is on, a workload whose pods have not all started within `timeout_s` of its
//! admission is evicted (reason `PodsReadyTimeout`, naming the pods that did not start and what
//! their agents last said of them) and queued again after a backoff that doubles with each
//! timeout: `backoff_base_s`, then twice that, up to `backoff_max_s`. With `block_admission`,
//! nothing else is admitted while an admitted workload's pods have not all started.
//!
//! Kueue's `recoveryTimeout` (a running gang whose pod failed, waiting for it to come back) has
//! no counterpart: allot never restarts a pod in place, so a gang is never partly running; a
//! failed pod fails its workload (or, with auto-resume, queues it again) and a lost one evicts
//! it at once.

use serde::{Deserialize, Serialize};

/// The longest timeout or backoff accepted: a day.
pub const MAX_SECONDS: u32 = 24 * 60 * 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodsReadyPolicy {
    /// Seconds from admission for every pod to start (HyperPod's default: 5 minutes).
    pub timeout_s: u32,
    /// Admit nothing else while an admitted workload's pods have not all started.
    pub block_admission: bool,
    /// The first backoff after a timeout, in seconds (Kueue's default: 60).
    pub backoff_base_s: u32,
    /// The longest backoff, in seconds (Kueue's default: an hour).
    pub backoff_max_s: u32,
}

impl Default for PodsReadyPolicy {
    fn default() -> Self {
        PodsReadyPolicy {
            timeout_s: 300,
            block_admission: false,
            backoff_base_s: 60,
            backoff_max_s: 3600,
        }
    }
}

impl PodsReadyPolicy {
    /// Checks the ranges; the error names the value and what is accepted.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("timeout", self.timeout_s),
            ("backoff base", self.backoff_base_s),
            ("backoff max", self.backoff_max_s),
        ] {
            if !(1..=MAX_SECONDS).contains(&v) {
                return Err(format!(
                    "gang scheduling {name} {v} s is out of range 1..={MAX_SECONDS} seconds"
                ));
            }
        }
        if self.backoff_max_s < self.backoff_base_s {
            return Err(format!(
                "gang scheduling backoff max {} s is below its base {} s",
                self.backoff_max_s, self.backoff_base_s
            ));
        }
        Ok(())
    }

    /// The backoff after the `n`th timeout (from 1), in milliseconds.
    pub fn backoff_ms(&self, n: u32) -> i64 {
        let doubled = u64::from(self.backoff_base_s)
            .saturating_mul(1u64 << n.saturating_sub(1).min(32))
            .min(u64::from(self.backoff_max_s));
        i64::try_from(doubled).unwrap_or(i64::MAX / 1000) * 1000
    }

    /// The timeout in milliseconds.
    pub fn timeout_ms(&self) -> i64 {
        i64::from(self.timeout_s) * 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = PodsReadyPolicy::default();
        let got: Vec<i64> = (1..=8).map(|n| p.backoff_ms(n) / 1000).collect();
        assert_eq!(got, vec![60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(p.backoff_ms(u32::MAX), 3_600_000);
    }

    #[test]
    fn ranges_are_checked_by_name() {
        assert!(PodsReadyPolicy::default().validate().is_ok());
        let e = PodsReadyPolicy {
            timeout_s: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("timeout 0 s") && e.contains("1..=86400"), "{e}");
        let e = PodsReadyPolicy {
            backoff_base_s: 100,
            backoff_max_s: 50,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("below its base"), "{e}");
    }
}

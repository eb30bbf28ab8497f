//! Agents' leases watched from outside, for `allot bench --failover`: each agent writes the
//! end of its lease (wall-clock milliseconds) to its data directory's `lease` file at every
//! renewal. Read every 10 ms, the files say how far apart two renewals were (the longest gap,
//! from the values themselves, so the polling does not blur it) and how little of a lease was
//! ever left (pods stop when nothing is).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use allot_common::timefmt::now_ms;

/// What the watch saw, over every agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseFigures {
    pub renewals: u64,
    /// The most a renewal moved a lease's end on: the time between two renewals' requests.
    pub longest_gap_ms: i64,
    /// The least time left on any lease when looked at (`None` before any was seen).
    pub least_left_ms: Option<i64>,
}

impl LeaseFigures {
    /// One reading of one agent's lease end, `last` being the one before.
    fn saw(&mut self, last: &mut Option<i64>, until: i64, now: i64) {
        if let Some(prev) = *last {
            if until > prev {
                self.renewals += 1;
                self.longest_gap_ms = self.longest_gap_ms.max(until - prev);
            }
        }
        if last.is_none_or(|p| until > p) {
            *last = Some(until);
        }
        let left = last.unwrap_or(until) - now;
        self.least_left_ms = Some(self.least_left_ms.map_or(left, |l| l.min(left)));
    }
}

pub struct LeaseWatch {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<LeaseFigures>>,
}

impl LeaseWatch {
    /// Starts reading `files` (agents' `lease` files) on a thread of its own.
    pub fn start(files: Vec<PathBuf>) -> LeaseWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut figures = LeaseFigures::default();
            let mut last: Vec<Option<i64>> = vec![None; files.len()];
            while !halt.load(Ordering::SeqCst) {
                for (f, last) in files.iter().zip(last.iter_mut()) {
                    let read = std::fs::read_to_string(f).ok();
                    if let Some(until) = read.and_then(|t| t.trim().parse::<i64>().ok()) {
                        figures.saw(last, until, now_ms());
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            figures
        });
        LeaseWatch {
            stop,
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) -> LeaseFigures {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_come_from_the_lease_ends_and_the_least_left_from_the_readings() {
        let mut f = LeaseFigures::default();
        let mut last = None;
        // Lease 10 s, renewed every 2 s; read at odd moments, twice between renewals.
        f.saw(&mut last, 10_000, 0);
        f.saw(&mut last, 10_000, 1_500);
        f.saw(&mut last, 12_000, 2_100);
        // A leader killed: the next renewal's request left 4.5 s after the last.
        f.saw(&mut last, 12_000, 6_000);
        f.saw(&mut last, 16_500, 7_000);
        assert_eq!(f.renewals, 2);
        assert_eq!(f.longest_gap_ms, 4_500);
        assert_eq!(f.least_left_ms, Some(6_000));
        // An older value read back (a torn read, an agent restarted) moves nothing back.
        f.saw(&mut last, 11_000, 7_100);
        assert_eq!(last, Some(16_500));
        assert_eq!(f.renewals, 2);
    }
}

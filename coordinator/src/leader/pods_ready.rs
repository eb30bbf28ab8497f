//! The leader's side of gang readiness (`allot_core::pods_ready`): it watches the clock, and
//! proposes `PodsReadyTimeout` for an admitted workload whose pods have not all started within
//! the timeout (naming each such pod, its node, and what its agent last said of it) and
//! `BackoffFinished` once a workload's backoff is over. Checked as often as leases are; a
//! proposal lost with a leadership change is made again after `retry_ms`, and applying one
//! twice changes nothing.

use super::*;

/// A workload the leader evicted for not being ready, for the shell's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReady {
    pub workload: String,
    pub message: String,
}

/// The key of a `BackoffFinished` proposal in `Leader::ready_proposed` (a timeout's is the
/// attempt, never this).
const BACKOFF: u32 = u32::MAX;

impl Leader {
    /// Leader only: proposes what gang readiness asks for at `wall` (the log's clock);
    /// `progress` gives what a pod's agent last said of it. Returns the workloads evicted.
    pub fn poll_pods_ready<D: Disk>(
        &mut self,
        rep: &mut Replica<D>,
        now: Millis,
        wall: i64,
        progress: &dyn Fn(u64, u32) -> Option<String>,
    ) -> Vec<NotReady> {
        self.sync_role(rep, now);
        if !self.was_leader
            || rep.machine.pods_ready.is_empty()
            || self
                .last_ready_check
                .is_some_and(|t| now.saturating_sub(t) < self.cfg.lease_check_ms)
        {
            return Vec::new();
        }
        self.last_ready_check = Some(now);
        let retry = self.cfg.retry_ms;
        self.ready_proposed
            .retain(|_, t| now.saturating_sub(*t) < retry);
        let m = &rep.machine;
        let mut proposals: Vec<((u64, u32), Command, Option<NotReady>)> = Vec::new();
        let timeout_s = m.pods_ready.policy.map_or(0, |p| p.timeout_s);
        for u in m.unready(wall) {
            let key = (u.id.0, u.attempt);
            if self.ready_proposed.contains_key(&key) {
                continue;
            }
            let pods: Vec<String> = u
                .pods
                .iter()
                .map(|(rank, node)| {
                    let said = progress(u.id.0, *rank)
                        .unwrap_or_else(|| "its agent has not said why".to_string());
                    format!("pod {rank} on {node} has not started ({said})")
                })
                .collect();
            let message = format!(
                "not every pod started within {timeout_s} s of its admission: {}",
                pods.join("; ")
            );
            let workload = m.state.workload(u.id).spec.name.clone();
            proposals.push((
                key,
                Command::PodsReadyTimeout {
                    workload_id: u.id.0,
                    attempt: u.attempt,
                    message: message.clone(),
                },
                Some(NotReady { workload, message }),
            ));
        }
        for id in m.backoffs_due(wall) {
            let key = (id.0, BACKOFF);
            if !self.ready_proposed.contains_key(&key) {
                proposals.push((key, Command::BackoffFinished { workload_id: id.0 }, None));
            }
        }
        let mut evicted = Vec::new();
        for (key, cmd, said) in proposals {
            let token = self.token();
            if rep.propose(token, &Cmd { now: wall, cmd }).is_ok() {
                self.ready_proposed.insert(key, now);
                evicted.extend(said);
            }
        }
        evicted
    }
}

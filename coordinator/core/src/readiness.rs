//! Gang readiness on the state machine (the records are `pods_ready.rs`): the commands'
//! effects, the backoff's parking, and what the leader asks (`unready`, `backoffs_due`,
//! `blocks_admission`).

use allot_common::api::{ApiError, ErrorKind, Reply};
use allot_common::pods_ready::PodsReadyPolicy;

use crate::ids::WlId;
use crate::machine::{Command, Machine};
use crate::pods_ready::{Backoff, Unready};
use crate::state::{Event, Time, WlState};

impl Machine {
    /// Applies one of gang readiness's commands (`SetPodsReady`, `PodsReadyTimeout`,
    /// `BackoffFinished`).
    pub(crate) fn apply_pods_ready(
        &mut self,
        cmd: &Command,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        match cmd {
            Command::SetPodsReady(p) => self.set_pods_ready(*p),
            Command::PodsReadyTimeout {
                workload_id,
                attempt,
                message,
            } => self.pods_ready_timeout(WlId(*workload_id), *attempt, message, now, events),
            Command::BackoffFinished { workload_id } => {
                self.backoff_finished(WlId(*workload_id), now)
            }
            _ => Ok(Reply::Done),
        }
    }

    fn set_pods_ready(&mut self, p: Option<PodsReadyPolicy>) -> Result<Reply, ApiError> {
        if let Some(p) = &p {
            p.validate()
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
        }
        self.pods_ready.policy = p;
        Ok(Reply::Done)
    }

    /// Evicts `id` for not being ready (if it is still the attempt the leader saw, admitted
    /// with pods not all started) and starts its backoff.
    fn pods_ready_timeout(
        &mut self,
        id: WlId,
        attempt: u32,
        message: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        let Some(policy) = self.pods_ready.policy else {
            return Ok(Reply::Done);
        };
        let Some(wl) = self.state.workloads.get(&id) else {
            return Ok(Reply::Done);
        };
        if wl.attempt != attempt
            || !matches!(wl.state, WlState::Admitted | WlState::Running)
            || self.not_started(id).is_empty()
        {
            return Ok(Reply::Done);
        }
        let b = self.pods_ready.backoff.entry(id).or_insert(Backoff {
            timeouts: 0,
            until: now,
        });
        b.timeouts += 1;
        b.until = now.saturating_add(policy.backoff_ms(b.timeouts));
        let msg = format!(
            "{message}; queued again after a backoff of {} s (timeout {} of this workload)",
            policy.backoff_ms(b.timeouts) / 1000,
            b.timeouts
        );
        events.extend(self.state.start_eviction(id, "PodsReadyTimeout", &msg, now));
        Ok(Reply::Done)
    }

    /// Puts `id` back in its team's queue once its backoff is over. Its count of timeouts
    /// stays (the next backoff is longer) until it ends.
    fn backoff_finished(&mut self, id: WlId, now: Time) -> Result<Reply, ApiError> {
        if self
            .pods_ready
            .backoff
            .get(&id)
            .is_some_and(|b| b.until <= now)
        {
            self.state.unpark(id, now);
        }
        Ok(Reply::Done)
    }

    /// After each entry: a workload requeued while in backoff waits out of its queue; one that
    /// finished or was forgotten leaves the backoff book.
    pub(crate) fn park_backed_off(&mut self, events: &[Event], now: Time) {
        for e in events {
            match e {
                Event::Requeued { wl } => {
                    if let Some(b) = self.pods_ready.backoff.get(wl).filter(|b| b.until > now) {
                        let msg = format!(
                            "waits out a backoff after its pods were not ready in time (timeout \
                             {}), until {}",
                            b.timeouts,
                            allot_common::timefmt::utc(b.until)
                        );
                        self.state.park(*wl, "PodsReadyTimeout", &msg, now);
                    }
                }
                Event::Finished { wl, .. } | Event::Cancelled { wl } => {
                    self.pods_ready.backoff.remove(wl);
                }
                _ => {}
            }
        }
        let gone: Vec<WlId> = self
            .pods_ready
            .backoff
            .keys()
            .filter(|id| !self.state.workloads.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            self.pods_ready.backoff.remove(&id);
        }
    }

    /// The pods of `id`'s current attempt that have not started: (rank, node).
    pub fn not_started(&self, id: WlId) -> Vec<(u32, String)> {
        let Some(wl) = self.state.workloads.get(&id) else {
            return Vec::new();
        };
        let Some(adm) = &wl.admission else {
            return Vec::new();
        };
        let started = self
            .history
            .get(&id)
            .filter(|h| h.attempt == wl.attempt)
            .map(|h| &h.pods);
        (0..adm.placement.len() as u32)
            .filter(|r| {
                // A pod that ended came up (one that exited before its agent saw it run never
                // reports a start).
                started
                    .and_then(|p| p.get(r))
                    .is_none_or(|p| p.started.is_none() && p.ended.is_none())
            })
            .map(|r| (r, self.pod_node(id, r)))
            .collect()
    }

    /// Admitted workloads whose pods have not all started `timeout` after their admission, at
    /// `now`; nothing while gang readiness is off.
    pub fn unready(&self, now: Time) -> Vec<Unready> {
        let Some(policy) = self.pods_ready.policy else {
            return Vec::new();
        };
        self.admitted_not_ready()
            .filter_map(|(id, admitted)| {
                let waited_ms = now.saturating_sub(admitted);
                (waited_ms >= policy.timeout_ms()).then(|| Unready {
                    id,
                    attempt: self.state.workload(id).attempt,
                    pods: self.not_started(id),
                    waited_ms,
                })
            })
            .collect()
    }

    /// Workloads whose backoff is over at `now`.
    pub fn backoffs_due(&self, now: Time) -> Vec<WlId> {
        self.pods_ready
            .backoff
            .iter()
            .filter(|(id, b)| {
                b.until <= now && self.state.workloads.get(id).is_some_and(|w| w.is_parked())
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// With `block_admission`: an admitted workload's pods have not all started, so nothing
    /// else may be admitted.
    pub fn blocks_admission(&self) -> bool {
        self.pods_ready.policy.is_some_and(|p| p.block_admission)
            && self.admitted_not_ready().next().is_some()
    }

    /// Workloads holding quota (not being evicted) with a pod not started, and their admission
    /// time.
    ///
    /// Only the workloads holding quota are looked at (the teams' admitted sets), not every
    /// workload the cluster keeps: the leader asks each lease check, and with block admission
    /// each submit.
    fn admitted_not_ready(&self) -> impl Iterator<Item = (WlId, Time)> + '_ {
        self.state
            .teams
            .iter()
            .flat_map(|t| t.admitted.iter())
            .filter_map(|id| self.state.workloads.get(id))
            .filter(|w| matches!(w.state, WlState::Admitted | WlState::Running))
            .filter_map(|w| w.admitted_at.map(|t| (w.id, t)))
            .filter(|(id, _)| !self.not_started(*id).is_empty())
    }
}

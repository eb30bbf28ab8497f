//! Gang readiness's records in the state machine: the settings (`allot_common::pods_ready`)
//! and the workloads in backoff after a `PodsReadyTimeout`. What the machine does with them is
//! `readiness.rs`.
//!
//! The leader watches the clock (`Leader::poll_pods_ready` in the coordinator): it proposes
//! `PodsReadyTimeout` for an admitted workload whose pods have not all started within the
//! timeout, and `BackoffFinished` once a backoff is over. Applying them is deterministic:
//! the timeout evicts the workload (its pods are stopped, then it is requeued as any eviction
//! is) and records its backoff; a workload requeued while in backoff is held out of its
//! team's queue, Pending with `Requeued` False / `PodsReadyTimeout` (Kueue's condition), until
//! `BackoffFinished` puts it back in its queue with its original submit time.

use std::collections::BTreeMap;

use allot_common::pods_ready::PodsReadyPolicy;
use serde::{Deserialize, Serialize};

use crate::ids::WlId;
use crate::state::Time;

/// The settings and the workloads in backoff.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodsReady {
    /// `None`: gang readiness is off.
    pub policy: Option<PodsReadyPolicy>,
    /// Workloads that timed out: how many times, and until when they wait (kept until the
    /// workload ends, so each backoff is longer than the one before).
    pub backoff: BTreeMap<WlId, Backoff>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    pub timeouts: u32,
    pub until: Time,
}

impl PodsReady {
    pub fn is_empty(&self) -> bool {
        self.policy.is_none() && self.backoff.is_empty()
    }
}

/// An admitted workload whose pods have not all started within the timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unready {
    pub id: WlId,
    pub attempt: u32,
    /// The pods that have not started: (rank, node).
    pub pods: Vec<(u32, String)>,
    /// Milliseconds since its admission.
    pub waited_ms: i64,
}

//! What the machine keeps for the command line's job handling (`jobs` handles it): job arrays
//! and the pod times of each workload's last attempt. Apart from `jobs`, so that the machine
//! that stores them and the code that handles them do not import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use allot_common::api::SubmitInput;
use allot_common::array::ArrayIndices;
use serde::{Deserialize, Serialize};

use crate::ids::WlId;
use crate::state::Time;

/// A job array: its template, which indices are still to be queued, and its active elements.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayRecord {
    /// The submit every element is made from (its name is the array's).
    pub input: Arc<SubmitInput>,
    /// The indices as submitted (`0-999%4`), and parsed.
    pub text: String,
    pub indices: ArrayIndices,
    /// How many indices (in order) were taken for queueing so far.
    pub released: u32,
    /// Indices cancelled before they were queued.
    pub cancelled_held: BTreeSet<u32>,
    /// Elements queued and not finished.
    pub active: BTreeSet<WlId>,
    /// Elements that could not be queued (their name was taken by an active workload), with
    /// the last reason.
    pub refused: u32,
    pub last_refusal: String,
    pub submitted: Time,
}

impl ArrayRecord {
    pub(crate) fn total(&self) -> u32 {
        self.indices.len()
    }

    /// Indices not taken for queueing yet, cancelled ones included.
    pub(crate) fn held(&self) -> u32 {
        self.total() - self.released
    }

    /// Indices still waiting to be queued (held, not cancelled).
    pub(crate) fn waiting(&self) -> u32 {
        self.held() - self.cancelled_held.len() as u32
    }

    pub(crate) fn is_held(&self, index: u32) -> bool {
        self.indices
            .position(index)
            .is_some_and(|k| k >= self.released)
    }
}

/// When each pod of a workload's last attempt started and ended, and how; and when the
/// workload finished. Kept until the workload is forgotten.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodHistory {
    pub attempt: u32,
    pub pods: BTreeMap<u32, PodTime>,
    pub finished: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodTime {
    pub node: String,
    pub started: Option<Time>,
    pub ended: Option<Time>,
    pub exit_code: Option<i32>,
    /// Succeeded, Failed or Lost, with the agent's detail.
    pub outcome: Option<String>,
}

impl PodHistory {
    pub(crate) fn attempt(&mut self, attempt: u32) -> &mut Self {
        if self.attempt != attempt {
            self.attempt = attempt;
            self.pods.clear();
        }
        self
    }
}

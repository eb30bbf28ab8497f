//! What one scheduling cycle decided: admissions (quota and placement together), preemptions,
//! and the reason every other pending workload waits.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{FlavorId, FrId, ResId, WlId};
use crate::nodes::PodAlloc;

/// The reason a plan gives a preemptor whose victims have not stopped yet. It keeps the
/// preemptor's head start (it goes first in the next cycle, within its team too) until then.
pub const WAITING_FOR_VICTIMS: &str = "WaitingForPreemptedWorkloads";

/// Per pod set, the flavor of each resource it requests.
pub type PodSetFlavors = Vec<Vec<(ResId, FlavorId)>>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSetAdmission {
    pub name: String,
    pub count: u32,
    /// Flavor per requested resource.
    pub flavors: Vec<(ResId, FlavorId)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    pub pod_sets: Vec<PodSetAdmission>,
    /// Total usage per (flavor, resource), sorted by id.
    pub usage: Vec<(FrId, i64)>,
    /// One entry per pod, in pod-set order; empty without placement.
    pub placement: Vec<(usize, PodAlloc)>,
    /// The part of this admission above the team's nominal, per resource.
    pub borrowed: Vec<(ResId, i64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PreemptReason {
    InClusterQueue,
    InCohortReclamation,
    InCohortFairSharing,
    InCohortReclaimWhileBorrowing,
}

impl PreemptReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            PreemptReason::InClusterQueue => "InClusterQueue",
            PreemptReason::InCohortReclamation => "InCohortReclamation",
            PreemptReason::InCohortFairSharing => "InCohortFairSharing",
            PreemptReason::InCohortReclaimWhileBorrowing => "InCohortReclaimWhileBorrowing",
        }
    }
    /// The words used in the victim's message.
    pub fn phrase(&self) -> &'static str {
        match self {
            PreemptReason::InClusterQueue => "prioritization in the team",
            PreemptReason::InCohortReclamation => "reclamation within the cohort",
            PreemptReason::InCohortFairSharing => "fair sharing within the cohort",
            PreemptReason::InCohortReclaimWhileBorrowing => {
                "reclamation within the cohort while borrowing"
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedAdmission {
    pub wl: WlId,
    pub admission: Admission,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedPreemption {
    pub victim: WlId,
    pub preemptor: WlId,
    pub reason: PreemptReason,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub admissions: Vec<PlannedAdmission>,
    pub preemptions: Vec<PlannedPreemption>,
    /// (workload, reason, message) for every pending workload considered and not admitted,
    /// except those in stretches of a queue whose every shape waits as its every entry already
    /// shows: the fast cycle settles such a stretch in one step and lists none of it (the
    /// reference lists each; applying either does the same, see `State::plan_effect`). Shared
    /// strings: workloads of one shape share one reason and message.
    pub pending: Vec<(WlId, Arc<str>, Arc<str>)>,
    /// Pending workloads judged or settled one by one in this cycle (not those settled in
    /// bulk).
    pub considered: usize,
    /// For each preemptor of this plan, the flavors (per pod set, per resource) its victims
    /// were chosen for. It tries them first while it waits and once they are gone.
    #[serde(default)]
    pub targets: Vec<(WlId, PodSetFlavors)>,
}

impl Plan {
    /// Whether the plan changes anything beyond messages.
    /// The plan with its pending entries in a canonical order: preemptors waiting for their
    /// victims first, in the plan's order (their order among them is their head start in the
    /// next cycle), then every other entry by workload id. The order of those others carries
    /// nothing (applying the plan sets each one's condition), and the fast cycle settles runs
    /// of them ahead of the tournament, so two cycles that decide alike compare equal here.
    pub fn canonical(&self) -> Plan {
        let mut plan = self.clone();
        let key = |(id, reason, _): &(WlId, Arc<str>, Arc<str>)| {
            (&**reason != WAITING_FOR_VICTIMS).then_some(*id)
        };
        plan.pending.sort_by_key(key);
        plan
    }

    pub fn has_decisions(&self) -> bool {
        !self.admissions.is_empty() || !self.preemptions.is_empty()
    }
}

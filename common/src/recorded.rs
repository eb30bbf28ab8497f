//! What the cluster recorded over a period, for `allot what-if`: the policy, teams and nodes as
//! they are, and every workload submitted in the period or still waiting or running at its
//! start, with when it was submitted, first admitted and ended, and how long its last run held
//! quota. The CLI turns it into an
//! `allot simulate` scenario and replays it.

use serde::{Deserialize, Serialize};

use crate::{ClusterPolicy, Resources, TeamSpec, WorkloadSpec};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedQuery {
    pub since_ms: i64,
    pub until_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub since_ms: i64,
    pub until_ms: i64,
    pub policy: ClusterPolicy,
    pub teams: Vec<TeamSpec>,
    /// (name, instance type, capacity).
    pub nodes: Vec<(String, String, Resources)>,
    pub workloads: Vec<RecordedWorkload>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedWorkload {
    pub spec: WorkloadSpec,
    pub submitted_ms: i64,
    /// Its first admission (`None`: never admitted, or the cluster no longer knows when).
    pub admitted_ms: Option<i64>,
    /// When it finished, failed or was cancelled, if it did.
    pub ended_ms: Option<i64>,
    /// How long its last run held quota, if that run ended with the workload.
    pub ran_ms: Option<i64>,
    /// `Succeeded`, `Failed`, `Cancelled`, `Pending`, `Admitted`, `Running` or `Evicting`.
    pub state: String,
    pub preemptions: u32,
    /// Submitted before the period and still waiting or running at its start: the replay
    /// submits it at the start, and its last run counts from there.
    pub carried: bool,
}

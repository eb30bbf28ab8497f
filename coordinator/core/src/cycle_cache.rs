//! What one cycle learned that the next can reuse: the outcomes of its first generation (the
//! working state before its first decision), per workload shape, with the state they were
//! computed from. A cycle whose state is the same apart from its queues (workloads submitted,
//! pending ones cancelled, pending messages changed) starts from them: a submit into a full
//! cluster then costs the new workload's shape, not every shape waiting.
//!
//! The comparison is exact: it holds the nodes and admitted workloads it saw (shared, so the
//! copy costs a reference count each, and an address can never be reused while it is held) and
//! compares everything else a first generation reads by value.

use std::collections::BTreeMap;
use std::sync::Arc;

use allot_common::{ClusterPolicy, CohortSpec, TeamSpec};

use crate::ids::{CohortId, FrId, FrVec, WlId};
use crate::nodes::Node;
use crate::quota::Share;
use crate::state::{CohortRt, State, Time, Workload};

/// A (team, shape) key of the fast path: the shape fingerprint, the submit time where the
/// team's policy compares it, and whether the workload is a preemptor.
pub(crate) type FastShape = (u128, Time, bool);

/// What a first generation reads apart from the pending queues.
pub(crate) struct Basis {
    policy: ClusterPolicy,
    placement: bool,
    cohort_specs: BTreeMap<String, CohortSpec>,
    cohorts: Vec<CohortRt>,
    teams: Vec<(TeamSpec, CohortId)>,
    admitted: Vec<(WlId, Arc<Workload>)>,
    team_usage: Vec<FrVec>,
    pool_used: Vec<FrVec>,
    nodes: Vec<Arc<Node>>,
    idle_capacity: BTreeMap<FrId, i64>,
    pool_excess: Vec<FrVec>,
    team_excess: Vec<FrVec>,
    names: (usize, usize, usize),
    forgotten: u64,
}

impl Basis {
    fn of(st: &State) -> Basis {
        Basis {
            policy: st.policy.clone(),
            placement: st.placement,
            cohort_specs: st.cohort_specs.clone(),
            cohorts: st.cohorts.clone(),
            teams: st
                .teams
                .iter()
                .map(|t| (t.spec.clone(), t.cohort))
                .collect(),
            admitted: st
                .teams
                .iter()
                .flat_map(|t| t.admitted.iter())
                .filter_map(|id| st.workloads.get(id).map(|w| (*id, w.clone())))
                .collect(),
            team_usage: st.acct.team_usage.clone(),
            pool_used: st.acct.pool_used.clone(),
            nodes: st.acct.nodes.nodes.clone(),
            idle_capacity: st.idle_capacity.clone(),
            pool_excess: st.pool_excess.clone(),
            team_excess: st.team_excess.clone(),
            names: st.names.sizes(),
            forgotten: st.forgotten,
        }
    }

    /// Whether `st` reads the same as the state this was taken from.
    fn holds_for(&self, st: &State) -> bool {
        let same_admitted = || {
            let mut mine = self.admitted.iter();
            for id in st.teams.iter().flat_map(|t| t.admitted.iter()) {
                match (mine.next(), st.workloads.get(id)) {
                    (Some((m, w)), Some(now)) if m == id && Arc::ptr_eq(w, now) => {}
                    _ => return false,
                }
            }
            mine.next().is_none()
        };
        let same_nodes = || {
            self.nodes.len() == st.acct.nodes.nodes.len()
                && self
                    .nodes
                    .iter()
                    .zip(&st.acct.nodes.nodes)
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        };
        self.forgotten == st.forgotten
            && self.placement == st.placement
            && self.names == st.names.sizes()
            && self.team_usage == st.acct.team_usage
            && self.pool_used == st.acct.pool_used
            && self.pool_excess == st.pool_excess
            && self.team_excess == st.team_excess
            && self.idle_capacity == st.idle_capacity
            && self.policy == st.policy
            && self.teams.len() == st.teams.len()
            && self
                .teams
                .iter()
                .zip(&st.teams)
                .all(|((spec, c), t)| *c == t.cohort && *spec == t.spec)
            && self.cohort_specs == st.cohort_specs
            && self.cohorts == st.cohorts
            && same_nodes()
            && same_admitted()
    }
}

/// The first-generation outcomes of the last cycle run with this cache, and what they were
/// computed from. Keep one per scheduler (the simulator's loop, the leader) and pass it to
/// every cycle; any cycle may also run without it.
#[derive(Default)]
pub struct CycleCache {
    basis: Option<Basis>,
    /// Plain shapes found waiting (no capacity held): reason and message.
    pub(crate) waits: BTreeMap<FastShape, (Arc<str>, Arc<str>)>,
    /// The (borrows, share) part of plain shapes' tournament keys.
    pub(crate) key_parts: BTreeMap<u128, (bool, Share)>,
    /// Cycles that could start from the last one's outcomes, and cycles run.
    pub reused: u64,
    pub cycles: u64,
}

impl CycleCache {
    /// The outcomes a cycle on `st` may start from, if `st` reads as the last cycle's did;
    /// otherwise none, and the cache is emptied. Returns the basis to `store` afterwards.
    pub(crate) fn start(&mut self, st: &State) -> Option<Basis> {
        self.cycles += 1;
        let hit = self.basis.as_ref().is_some_and(|b| b.holds_for(st));
        if hit {
            self.reused += 1;
            return None;
        }
        self.waits.clear();
        self.key_parts.clear();
        self.basis = None;
        Some(Basis::of(st))
    }

    /// Keeps a cycle's first-generation outcomes; `fresh` is what `start` returned.
    pub(crate) fn store(
        &mut self,
        fresh: Option<Basis>,
        waits: impl Iterator<Item = (FastShape, (Arc<str>, Arc<str>))>,
        key_parts: impl Iterator<Item = (u128, (bool, Share))>,
    ) {
        if let Some(b) = fresh {
            self.basis = Some(b);
        }
        self.waits.extend(waits);
        self.key_parts.extend(key_parts);
    }
}

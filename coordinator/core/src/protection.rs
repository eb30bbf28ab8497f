//! Work that stays put: which admitted workloads a preemption may not pick, and until when.
//!
//! Three rules bound how often one workload is thrown off (docs/scheduling.md, "Work stays
//! put"):
//! - at one instant a workload is preempted at most once (`Workload::preempted_at`): every
//!   instant settles;
//! - the cluster's minimum run time (`Stability::minimum_run_time_s`) spares a workload
//!   admitted less than that long ago;
//! - its preemption budget (`Stability::preemption_budget`) spares one preempted that many
//!   times already, for the rest of its life.
//!
//! The last two spare a workload only from the preemptions that rebalance borrowed capacity
//! (fair sharing between borrowers, or a borrowing preemptor taking from another borrower).
//! A team's own higher-priority work, and a team reclaiming its nominal quota, take what they
//! need whatever its age or history: a guarantee never waits on stability.

use allot_common::ClusterPolicy;

use crate::state::{Time, Workload};

/// Why a workload may not be picked by a preemption that rebalances borrowed capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spared {
    /// It has run less than the minimum run time; it may be picked from `until` on.
    MinimumRunTime { until: Time },
    /// It was preempted `times` times, the budget or more.
    Budget { times: u32 },
}

/// Whether `w`, admitted at `admitted_at`, is spared at `now` by the minimum run time or its
/// preemption budget (the budget first: it never ends).
pub fn spared(
    policy: &ClusterPolicy,
    w: &Workload,
    admitted_at: Option<Time>,
    now: Time,
) -> Option<Spared> {
    let s = policy.stability;
    if s.preemption_budget > 0 && w.preemptions >= s.preemption_budget {
        return Some(Spared::Budget {
            times: w.preemptions,
        });
    }
    let until = run_time_ends(policy, admitted_at?)?;
    (now < until).then_some(Spared::MinimumRunTime { until })
}

/// When the minimum run time of a workload admitted at `admitted_at` ends (none when the rule
/// is off).
pub fn run_time_ends(policy: &ClusterPolicy, admitted_at: Time) -> Option<Time> {
    let m = policy.stability.minimum_run_ms();
    (m > 0).then(|| admitted_at.saturating_add(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_common::Stability;

    /// A workload admitted at `at` (a cycle on an empty cluster of one team), preempted
    /// `preemptions` times before.
    fn admitted(at: Time, preemptions: u32) -> Workload {
        use allot_common::quota::ResourceQuota;
        use allot_common::{FlavorQuota, ResourceName, Resources, TeamSpec, WorkloadSpec};
        let mut st = crate::State::new(ClusterPolicy::default());
        let quota = vec![FlavorQuota {
            flavor: "default".into(),
            resources: vec![(ResourceName::cpu(), ResourceQuota::nominal(4))],
        }];
        st.set_team(TeamSpec::new("a", quota)).expect("valid team");
        let mut req = Resources::new();
        req.set(ResourceName::cpu(), 1);
        let (id, _) = st
            .submit(WorkloadSpec::single("w", "a", 1, req), at)
            .expect("valid workload");
        let plan = crate::scheduler::schedule(&st, at);
        st.apply_plan(&plan, at);
        let mut w = st.workload(id).clone();
        assert_eq!(w.admitted_at, Some(at));
        w.preemptions = preemptions;
        w
    }

    #[test]
    fn the_minimum_run_time_ends_and_the_budget_does_not() {
        let policy = ClusterPolicy {
            stability: Stability {
                minimum_run_time_s: 60,
                preemption_budget: 2,
            },
            ..Default::default()
        };
        let w = admitted(1_000, 0);
        assert_eq!(
            spared(&policy, &w, w.admitted_at, 1_000),
            Some(Spared::MinimumRunTime { until: 61_000 })
        );
        assert_eq!(
            spared(&policy, &w, w.admitted_at, 60_999),
            Some(Spared::MinimumRunTime { until: 61_000 })
        );
        assert_eq!(spared(&policy, &w, w.admitted_at, 61_000), None);
        let twice = admitted(1_000, 2);
        assert_eq!(
            spared(&policy, &twice, twice.admitted_at, 1_000_000),
            Some(Spared::Budget { times: 2 })
        );
        let off = ClusterPolicy {
            stability: Stability::OFF,
            ..Default::default()
        };
        assert_eq!(spared(&off, &twice, twice.admitted_at, 1_000), None);
    }
}

//! Who a victim search could take for a workload, counted with the search's own tests: for
//! `explain` to say why it found no victim without judging any candidate itself.
//!
//! A search (`preemption`) takes candidates from the admissions that use a contested pair:
//! its own team's, and those of the teams within its reach that borrow one
//! (`preemption::reclaimable_teams`), each as the team's policy allows (`preemption::allowed`,
//! which also keeps out the workload that evicted it and its eviction chain,
//! `preemption::never_taken`). The census counts those, team by team, with the same functions.

use std::collections::BTreeSet;

use crate::ids::{FrId, TeamId, WlId};
use crate::preemption;
use crate::state::Workload;
use crate::working::Ctx;

/// A team's admissions on the contested pairs, as a search sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TeamCount {
    pub team: TeamId,
    /// Its admissions that use a contested pair.
    pub users: Vec<WlId>,
    /// Of `users`, those kept out by the rules against preemption loops.
    pub never: Vec<WlId>,
    /// Of `users`, how many the preemptor's policy lets it take.
    pub allowed: usize,
}

/// Where the preemptor may look beyond its own team.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Its team has no cohort.
    NoCohort,
    /// Its team does not reclaim from its cohort (`reclaim_within_cohort: Never`).
    ReclaimNever,
    /// The teams within its reach that borrow a contested pair (none: no one borrows).
    Teams(Vec<TeamCount>),
}

/// What a search for `wl` could take on the contested pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Census {
    pub own: TeamCount,
    pub reach: Reach,
}

impl Census {
    /// The teams within reach, with their counts.
    pub fn rivals(&self) -> impl Iterator<Item = &TeamCount> {
        match &self.reach {
            Reach::Teams(teams) => teams.iter(),
            _ => [].iter(),
        }
    }
}

/// The census of a victim search for `wl` with `usage`, contesting `f_set`.
pub(crate) fn census(
    ctx: &Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> Census {
    let st = ctx.st;
    let never = preemption::never_taken(ctx, wl, usage, f_set);
    let count = |team: TeamId| {
        let own = team == wl.team;
        let users: Vec<WlId> = preemption::users_of(ctx, team, f_set);
        TeamCount {
            team,
            never: (users.iter().copied())
                .filter(|id| never.contains(id))
                .collect(),
            allowed: (users.iter())
                .filter(|id| preemption::allowed(ctx, wl, **id, own, &never))
                .count(),
            users,
        }
    };
    let team = &st.teams[wl.team.idx()];
    let reach = if st.cohorts[team.cohort.idx()].private {
        Reach::NoCohort
    } else if team.spec.preemption.reclaim_within_cohort
        == allot_common::quota::ReclaimWithinCohort::Never
    {
        Reach::ReclaimNever
    } else {
        Reach::Teams(
            preemption::reclaimable_teams(ctx, wl, f_set)
                .map(count)
                .collect(),
        )
    };
    Census {
        own: count(wl.team),
        reach,
    }
}

//! The scheduler's verdict on one flavor for one pod set, typed: what each check found, in
//! the order the checks ran (`decision::eval_flavor` records them), with the numbers that
//! decided it. The scheduler renders a finding into the pending message a workload shows
//! (`message`); `explain` renders the same findings at length, with who holds the quota and
//! what would change the outcome. Neither judges a second time.
//!
//! Reasons are enums here and become Kueue's strings only where a plan or a condition
//! records them (`PendingReason::as_str`).

use std::collections::BTreeSet;

use crate::ids::{FlavorId, FrId, ResId, TeamId, WlId};
use crate::preemption::Victim;
use crate::quota::{self, Acct};
use crate::state::{State, Workload};

/// What a cycle does with one pending workload when it is the first the cycle decides: the
/// scheduler's decision as `explain` says it (`decision::decide`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decided {
    /// Admitted at these pod counts, with these flavors (per pod set, per resource).
    Admits {
        counts: Vec<u32>,
        flavors: Vec<Vec<(ResId, FlavorId)>>,
    },
    /// At these pod counts, it preempts these workloads and is admitted once they have
    /// stopped.
    Preempts {
        counts: Vec<u32>,
        victims: Vec<WlId>,
    },
    /// It waits, with this reason and message.
    Waits { reason: String, message: String },
}

/// Why a workload waits, as Kueue names it in the `QuotaReserved` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// It may fit later: quota or room is short now.
    WaitingForQuota,
    /// A resource it requests is in none of its team's flavors.
    NoMatchingFlavor,
    /// It requests more than its team can ever use.
    ExceedsMaxQuota,
}

impl PendingReason {
    /// Kueue's string for it.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::WaitingForQuota => "WaitingForQuota",
            PendingReason::NoMatchingFlavor => "NoMatchingFlavor",
            PendingReason::ExceedsMaxQuota => "ExceedsMaxQuota",
        }
    }
}

/// What caps a request above the most its team can ever use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxBound {
    /// The team's borrowing limit (this many above its nominal).
    BorrowingLimit(i64),
    /// All its cohort could ever lend it.
    Cohort,
}

/// How much of a short request each limit keeps from it: the team's borrowing limit, and
/// what its cohort has free to lend (`pool_free` of `pool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub by_borrowing_limit: i64,
    pub by_pool: i64,
    pub pool_free: i64,
    pub pool: i64,
}

/// A request of one resource, on one (flavor, resource) pair: what this pod set asks with
/// what the workload's earlier pod sets take there (`requested` counts both), against the
/// team's nominal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub res: ResId,
    pub fr: FrId,
    pub requested: i64,
    pub earlier: i64,
    pub nominal: i64,
}

/// One check's finding, for one flavor and one pod set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// The team has no quota for the resource in the flavor: the flavor is out.
    NoQuota { res: ResId },
    /// More than the team can ever use (`potential`), whatever runs: the flavor is out.
    /// `reserved` is the nominal it never lends, `borrowed_now` what it borrows now.
    OverMax {
        ask: Ask,
        potential: i64,
        reserved: i64,
        borrowed_now: i64,
        bound: MaxBound,
    },
    /// More than is available now: it fits only if work leaves or is preempted, and
    /// `may_preempt` says whether its team's policy lets it preempt for this request.
    Short {
        ask: Ask,
        available: i64,
        usage: i64,
        borrowing_limit: Option<i64>,
        binding: Binding,
        may_preempt: bool,
    },
    /// The cluster has no nodes of the flavor.
    NoNodes,
    /// Quota fits (by borrowing, where `borrows`), but only `placed` of `wanted` pods fit on
    /// the flavor's nodes.
    NoRoom {
        placed: u32,
        wanted: u32,
        borrows: bool,
    },
    /// It fits once these are preempted.
    Preempts(Vec<Victim>),
    /// No set of workloads may be preempted for it on `pairs`; with `waits_for_leavers`, it
    /// fits once the workloads preempted for others in this cycle have stopped.
    NoVictims {
        pairs: BTreeSet<FrId>,
        waits_for_leavers: bool,
    },
    /// It fits as things stand.
    Fits,
}

/// Why a workload waits that fits once the workloads preempted in its cycle (for others) have
/// stopped: it takes no victim of its own.
pub const WAITS_FOR_LEAVERS: &str =
    "it fits once the workloads preempted for others in this cycle have stopped";

/// The pending message a finding gives pod set `ps` of `wl` on flavor `f` (none for the
/// findings that do not keep it waiting).
pub fn message(
    st: &State,
    wl: &Workload,
    ps: usize,
    f: FlavorId,
    finding: &Finding,
) -> Option<String> {
    let fname = st.names.flavor_name(f);
    let team = &st.teams[wl.team.idx()];
    let text = match finding {
        Finding::NoQuota { res } => format!(
            "flavor {fname} has no quota for {} in team {}",
            st.names.resource_name(*res),
            team.name()
        ),
        Finding::OverMax {
            ask,
            potential,
            reserved,
            borrowed_now,
            bound,
        } => over_max_message(st, fname, ask, (*potential, *reserved, *borrowed_now), *bound),
        Finding::Short { ask, .. } => format!(
            "insufficient unused quota for {} in flavor {fname} (requested {}, nominal {})",
            st.names.resource_name(ask.res),
            st.names.format_qty(ask.res, ask.requested),
            st.names.format_qty(ask.res, ask.nominal)
        ),
        Finding::NoNodes => format!("no nodes of flavor {fname} in the cluster"),
        Finding::NoRoom { placed, wanted, .. } => format!(
            "quota is available but nodes of flavor {fname} have no room for pod set {} ({placed} of {wanted} pods fit{})",
            wl.spec.pod_sets[ps].name,
            match wl.topology() {
                Some(ask) => format!(" in one domain of {}", ask.level),
                None => String::new(),
            }
        ),
        Finding::NoVictims {
            waits_for_leavers: true,
            ..
        } => WAITS_FOR_LEAVERS.to_string(),
        Finding::NoVictims { .. } | Finding::Preempts(_) | Finding::Fits => return None,
    };
    Some(text)
}

fn over_max_message(
    st: &State,
    fname: &str,
    ask: &Ask,
    (potential, reserved, borrowed_now): (i64, i64, i64),
    bound: MaxBound,
) -> String {
    let rname = st.names.resource_name(ask.res);
    let fmt = |v: i64| st.names.format_qty(ask.res, v);
    match bound {
        MaxBound::BorrowingLimit(bl) => format!(
            "borrowing limit for {rname} in flavor {fname} exceeded (requested {}, nominal {}, borrowing limit {}, borrowed now {})",
            fmt(ask.requested),
            fmt(ask.nominal),
            fmt(bl),
            fmt(borrowed_now)
        ),
        MaxBound::Cohort if ask.earlier > 0 => format!(
            "insufficient quota for {rname} in flavor {fname}, previously considered podsets requests ({}) + current podset request ({}) > maximum capacity ({})",
            fmt(ask.earlier),
            fmt(ask.requested - ask.earlier),
            fmt(potential)
        ),
        MaxBound::Cohort => format!(
            "insufficient quota for {rname} in flavor {fname}, request {} > maximum capacity {} (nominal {}, {} more the cohort can lend)",
            fmt(ask.requested),
            fmt(potential),
            fmt(ask.nominal),
            fmt(potential - reserved)
        ),
    }
}

impl Binding {
    /// Which limits keep `ask` from team `t`, which uses `usage` of the pair now under
    /// `borrowing_limit`: its own unused nominal comes first, then what the borrowing limit
    /// leaves it and what its cohort (and the cohorts above) have free.
    pub fn of(
        st: &State,
        acct: &Acct,
        t: TeamId,
        ask: &Ask,
        (usage, borrowing_limit): (i64, Option<i64>),
    ) -> Binding {
        let team = &st.teams[t.idx()];
        let reserved = team.reserved(ask.fr);
        let pool_free = quota::cohort_available(st, acct, team.cohort, ask.fr).max(0);
        let own_free = (reserved - usage).max(0);
        let by_borrowing_limit = borrowing_limit
            .map(|bl| (ask.nominal + bl - usage.max(reserved)).max(0))
            .map_or(0, |room| (ask.requested - own_free - room).max(0));
        Binding {
            by_borrowing_limit,
            by_pool: (ask.requested - own_free - pool_free).max(0),
            pool_free,
            pool: st.cohorts[team.cohort.idx()].pool.get(ask.fr),
        }
    }
}

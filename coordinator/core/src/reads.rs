//! What a waiting workload's judgement reads, and what a change to the state touches, both as
//! (flavor, resource) pairs: a judgement kept from an earlier state still holds when nothing it
//! reads was touched since (`Touched::hits`).
//!
//! A judgement of a workload of team T (`scheduler::process`, and the (borrows, share) part of
//! its tournament key) reads, for each flavor T has quota in (only the one it pins, if it pins
//! one) and each resource the workload requests: every team's usage of the pair (T's own, the cohort's for what it may borrow, the
//! candidates' for preemption), the nodes of the flavor for that resource (placement, and the
//! room a victim leaves), and the flavor's primary resource (the nodes' order in placement).
//! It also reads the flavor's set of schedulable nodes (`ANY`), and, with fair sharing, the
//! teams' shares, which read every pair of a team but change only with what it borrows.
//! Everything else it reads (policies, quotas, cohorts, the workload itself) is compared whole
//! by whoever keeps judgements (`cycle_cache`).

use std::collections::BTreeSet;

use smallvec::SmallVec;

use crate::ids::{FlavorId, ResId};
use crate::nodes::{Node, PodAlloc};
use crate::state::{Admission, State, Workload};

/// The resource of a flavor's pair that stands for its whole set of schedulable nodes.
pub const ANY: ResId = ResId(u32::MAX);

/// What one judgement reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// Sorted, without repeats.
    pub pairs: SmallVec<[(FlavorId, ResId); 8]>,
    /// Whether it compares teams' shares (fair sharing).
    pub shares: bool,
    /// Whether the workload was evicted by another: its chain of evictions, which a search
    /// reads, passes through finished workloads that may be forgotten.
    pub chain: bool,
}

impl Reads {
    /// What judging `wl` on `st` reads.
    pub fn of(st: &State, wl: &Workload) -> Reads {
        let team = &st.teams[wl.team.idx()];
        let mut pairs: SmallVec<[(FlavorId, ResId); 8]> = SmallVec::new();
        // A pinned workload is judged on its flavor only (`decision::assign` skips the rest).
        let flavors: SmallVec<[FlavorId; 4]> = match wl.pinned {
            Some(f) => std::iter::once(f).collect(),
            None => team
                .groups
                .iter()
                .flat_map(|g| g.flavors.iter().copied())
                .collect(),
        };
        for f in flavors {
            pairs.push((f, ANY));
            if let Some(p) = st.acct.nodes.primary(f) {
                pairs.push((f, p));
            }
            for reqs in &wl.pod_reqs {
                pairs.extend(reqs.iter().map(|(r, _)| (f, *r)));
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        Reads {
            pairs,
            shares: st.policy.fair_share,
            chain: wl.preempted_by.is_some(),
        }
    }

    /// Adds what `other` reads.
    pub fn merge(&mut self, other: &Reads) {
        self.pairs.extend(other.pairs.iter().copied());
        self.pairs.sort_unstable();
        self.pairs.dedup();
        self.shares |= other.shares;
        self.chain |= other.chain;
    }
}

/// What changed between two states (or within a cycle).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Something no pair stands for changed: nothing kept holds.
    pub all: bool,
    pub pairs: BTreeSet<(FlavorId, ResId)>,
    /// Some team's share may have changed (what it borrows did).
    pub shares: bool,
    /// Finished workloads were forgotten.
    pub forgotten: bool,
}

/// Whether team `t`'s usage of `fr` going from `before` to `after` changes what it borrows,
/// and so may change its share (`quota::share` counts only usage above nominal).
pub fn borrowing_moved(
    st: &State,
    t: crate::ids::TeamId,
    fr: crate::ids::FrId,
    before: i64,
    after: i64,
) -> bool {
    let nominal = st.teams[t.idx()].quota(fr).map_or(0, |q| q.nominal);
    (before - nominal).max(0) != (after - nominal).max(0)
}

impl Touched {
    pub fn is_empty(&self) -> bool {
        !self.all && !self.shares && !self.forgotten && self.pairs.is_empty()
    }

    /// Whether a judgement that read `reads` may read differently now.
    pub fn hits(&self, reads: &Reads) -> bool {
        self.all
            || (self.shares && reads.shares)
            || (self.forgotten && reads.chain)
            || reads.pairs.iter().any(|p| self.pairs.contains(p))
    }

    /// An admission came or went (or changed): what it uses, on quota and on nodes.
    pub fn admission(&mut self, st: &State, adm: &Admission) {
        for (fr, _) in &adm.usage {
            self.pairs.insert(st.names.fr_parts(*fr));
        }
        for (_, p) in &adm.placement {
            self.alloc(st, p);
        }
    }

    /// A pod's allocation came or went.
    pub fn alloc(&mut self, st: &State, p: &PodAlloc) {
        let Some(node) = st.acct.nodes.nodes.get(p.node.idx()) else {
            self.all = true;
            return;
        };
        for (r, _) in &p.req {
            self.pairs.insert((node.flavor, *r));
        }
        for (r, _) in &p.devices {
            self.pairs.insert((node.flavor, *r));
        }
    }

    /// Node `a` became `b` (the same node, changed): the resources whose room changed, or its
    /// whole flavor when its schedulability or shape did.
    pub fn node(&mut self, a: &Node, b: &Node) {
        if a.flavor != b.flavor {
            self.whole_node(a);
            self.whole_node(b);
            return;
        }
        if a.healthy != b.healthy
            || a.cordoned != b.cordoned
            || a.res.len() != b.res.len()
            // A node that moved between topology domains changes the room of domains.
            || a.topology != b.topology
        {
            self.whole_node(b);
            self.whole_node(a);
            return;
        }
        for (x, y) in a.res.iter().zip(&b.res) {
            if x.res != y.res {
                self.whole_node(b);
                return;
            }
            if x != y {
                self.pairs.insert((b.flavor, x.res));
            }
        }
    }

    /// A node appeared or changed in a way that touches everything about its flavor.
    pub fn whole_node(&mut self, n: &Node) {
        self.pairs.insert((n.flavor, ANY));
        for r in &n.res {
            self.pairs.insert((n.flavor, r.res));
        }
    }
}

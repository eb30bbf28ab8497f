//! A wait known again by the values its judgement read, not judged anew.
//!
//! `Reads` names the pairs a judgement reads, and a decision that touches one of them makes
//! every wait that reads it be judged again. In a full cohort that is every wait: a completion
//! and the admission that takes the room it left both touch the pair every waiting shape of
//! the cohort reads, though most of those shapes then read the same values as before (the
//! same usage, nothing more they may take, no victim to be had).
//!
//! `Witness` covers the commonest wait of a contended cluster: a workload of one pod set,
//! offered one flavor by one resource group, short of quota on some pair where its team's
//! policy allows preemption, under fair sharing, whose victim search is hopeless before it
//! starts (`preemption::fair_share_hopeless`) or out of reach (`preemption::out_of_reach_of`:
//! the request does not fit with the usage of every member the search could take from gone,
//! and its team's own candidates'). Beyond what a cycle cache compares whole
//! (policies, quotas, cohorts, the workload's shape), that judgement (`scheduler::process`)
//! reads the flavor, and on each requested pair its team's usage and whether the request is
//! above what the team may still take: the flavor assignment notes the short pairs (with the
//! request and the nominal, not with what is available: `explain::now_note` adds that when the
//! workload is read), whether it borrows and any capacity held come from the usage, and the
//! search is skipped. How much the team may take beyond that is never read: in a full cohort it
//! moves with every completion (one GPU left free makes it 1 where it was 0), and a witness
//! that kept it was judged again for every shape of the cohort though none of them changed.
//! The nodes only add pairs to what the search would contest, and the search is skipped only
//! where the hopeless test says so on them. So a witness keeps the flavor, the usage and the
//! short pairs, and `Observer::observe` tells them, and the test, again on the state as it is,
//! at a small part of a judgement's cost: where they are equal, so is the judgement.

use std::collections::BTreeSet;

use smallvec::SmallVec;

use crate::ids::{FlavorId, FrId};
use crate::preemption;
use crate::quota::{self, Share};
use crate::shapes::ByShape;
use crate::state::Workload;
use crate::working::{node_shortfall, Ctx};

/// What a wait of the kind above read (see the module's comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Witness {
    flavor: FlavorId,
    /// Per requested pair, in request order: the team's usage, and whether the request is
    /// above what the team may take now (`quota::available`).
    pairs: SmallVec<[(FrId, i64, bool); 4]>,
}

/// A workload's one pod set as the flavor assignment sees it when it is of the kind above:
/// its one flavor, and per requested pair the request, the team's usage and whether the
/// request is above what the team may take.
struct Short {
    flavor: FlavorId,
    count: u32,
    /// (pair, request, usage, whether the request is above what the team may take), in
    /// request order.
    pairs: SmallVec<[(FrId, i64, i64, bool); 4]>,
    /// The pairs short of quota.
    contested: BTreeSet<FrId>,
}

impl Short {
    /// `wl` on the working state, where it has one pod set offered one flavor, within what its
    /// team could ever use on every pair, and short of quota on some pair its team's policy
    /// may preempt for (`eval_flavor` then finds `Mode::Preempt` from quota alone, whatever
    /// the nodes hold).
    fn of(ctx: &Ctx, wl: &Workload) -> Option<Short> {
        let st = ctx.st;
        let [ps] = wl.spec.pod_sets.as_slice() else {
            return None;
        };
        let reqs = wl.pod_reqs.first()?;
        if reqs.is_empty() {
            return None;
        }
        let t = wl.team;
        let team = &st.teams[t.idx()];
        // One resource group covers every requested resource, and offers this workload one
        // flavor: the assignment has nothing to choose.
        let mut groups = team
            .groups
            .iter()
            .filter(|g| reqs.iter().any(|(r, _)| g.resources.contains(r)));
        let g = groups.next()?;
        if groups.next().is_some() || !reqs.iter().all(|(r, _)| g.resources.contains(r)) {
            return None;
        }
        let mut offered = g
            .flavors
            .iter()
            .filter(|f| wl.pinned.is_none_or(|p| p == **f));
        let f = *offered.next()?;
        if offered.next().is_some() {
            return None;
        }
        let mut pairs = SmallVec::new();
        let mut contested = BTreeSet::new();
        for (r, per_pod) in reqs {
            let fr = st.names.find_fr(f, *r)?;
            let q = team.quota(fr)?;
            let val = per_pod * i64::from(ps.count);
            if val > quota::potential_available(st, t, fr) {
                return None;
            }
            let short = val > quota::available(st, &ctx.acct, t, fr);
            if short {
                // Where the policy alone does not allow it, whether it may preempt depends on
                // the cohorts above (`fits_below_root`): no witness.
                if !preemption::policy_allows(st, wl, q.nominal, val) {
                    return None;
                }
                contested.insert(fr);
            }
            pairs.push((fr, val, ctx.acct.usage(t, fr), short));
        }
        if contested.is_empty() {
            return None;
        }
        if st.placement && !ctx.acct.nodes.has_flavor(f) {
            return None;
        }
        Some(Short {
            flavor: f,
            count: ps.count,
            pairs,
            contested,
        })
    }

    /// What the workload would use.
    fn usage(&self) -> Vec<(FrId, i64)> {
        self.pairs.iter().map(|(fr, v, _, _)| (*fr, *v)).collect()
    }
}

/// What `Observer::observe` finds of a workload from its team and request alone (what its
/// request fingerprint fixes), not its priority or submit time: the witness it would have, and
/// whether the search is out of reach without the team's own candidates; with some, what the
/// search is told with (`preemption::out_of_reach_of`, per workload).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Part {
    witness: Witness,
    /// The search is hopeless or out of reach when the team holds no candidate of its own.
    hopeless: bool,
    /// The request fits once this cycle's victims have left: it would wait for them, and no
    /// search is out of reach (told with the request alone, once).
    fits_once_left: bool,
    usage: Vec<(FrId, i64)>,
    contested: BTreeSet<FrId>,
}

impl Witness {
    /// All of `Observer::observe` but what reads the team's own candidates: the part that
    /// reads of the workload only its team and request.
    fn of_request(ctx: &mut Ctx, wl: &Workload) -> Option<Part> {
        let st = ctx.st;
        if !st.policy.fair_share {
            return None;
        }
        let mut short = Short::of(ctx, wl)?;
        // No partial admission to try (`process` tries smaller counts only above min_count).
        if wl.spec.pod_sets[0]
            .min_count
            .is_some_and(|m| m != short.count)
        {
            return None;
        }
        // The pairs the victim search would contest: the quota shortfalls, and what the
        // flavor's nodes lack (`eval_flavor`, then `preemption::find_victims`).
        let f = short.flavor;
        let usage = short.usage();
        if st.placement {
            let mut flavors = BTreeSet::new();
            node_shortfall(
                st,
                &mut ctx.acct.nodes,
                f,
                &wl.pod_reqs[0],
                short.count,
                wl.topology(),
            )
            .contest(f, &mut short.contested, &mut flavors);
            if flavors.contains(&f) {
                short.contested.extend(usage.iter().map(|(fr, _)| *fr));
            }
        }
        // Told on the state as it is at every observation, so not kept in the witness (with
        // the team's own candidates: `preemption::fair_share_hopeless`), and as the search
        // tells it: where this cycle's victims have left, and only if it does not fit there
        // (it would wait for them, not be hopeless).
        let place = if st.placement {
            vec![(0, f, short.count)]
        } else {
            Vec::new()
        };
        let (fits_once_left, hopeless) = ctx.once_victims_leave(|ctx| {
            let fits = ctx.has_leavers() && ctx.fits(wl, &usage, &place, true);
            let hopeless = !fits
                && (preemption::cohort_hopeless(ctx, wl.team, &usage, &short.contested)
                    || preemption::cohort_out_of_reach(ctx, wl.team, &usage, &short.contested));
            (fits, hopeless)
        });
        let witness = Witness {
            flavor: f,
            pairs: short
                .pairs
                .iter()
                .map(|(fr, _, u, short)| (*fr, *u, *short))
                .collect(),
        };
        Some(Part {
            witness,
            hopeless,
            fits_once_left,
            usage,
            contested: short.contested,
        })
    }
}

impl Part {
    /// The witness of `wl`'s wait: where its team holds a workload it may preempt, the search
    /// must be out of reach with what those use taken off (told for `wl`, whose priority says
    /// which they are), where the victims of this cycle have left and it does not fit there.
    fn witness_of(&self, ctx: &mut Ctx, wl: &Workload) -> Option<Witness> {
        if !preemption::own_candidate(ctx, wl) {
            return self.hopeless.then(|| self.witness.clone());
        }
        if self.fits_once_left {
            return None;
        }
        let out = ctx.once_victims_leave(|ctx| {
            preemption::out_of_reach_of(ctx, wl, &self.usage, &self.contested)
        });
        out.then(|| self.witness.clone())
    }
}

/// Observes waits for a cycle, with the part that reads only the workload's request found
/// once per request and working state: a team's shapes that differ only in priority (its
/// classes) read it alike, and a cycle after a completion observes every shape of the cohort.
#[derive(Default)]
pub(crate) struct Observer {
    /// Per request fingerprint: the working state's counts when it was found, and the part.
    by_request: ByShape<u128, (Stamp, Option<Part>)>,
}

/// Counts of what changes the working state (decisions, usage, candidates taken off): equal
/// counts, the same state. Both live only as long as a cycle's working state.
type Stamp = (u64, u64, u64);

impl Observer {
    /// What judging `wl` on the working state reads, when that judgement is a wait of this
    /// kind; `None` when it is not, or may not be. `request` is `wl`'s request fingerprint.
    pub(crate) fn observe(
        &mut self,
        ctx: &mut Ctx,
        wl: &Workload,
        request: u128,
    ) -> Option<Witness> {
        let stamp = (ctx.changes.clock, ctx.acct.changes(), ctx.removals());
        let part = match self.by_request.get(&request) {
            Some((at, part)) if *at == stamp => {
                // Debug builds (every test) check the kept part against observing it again.
                debug_assert_eq!(*part, Witness::of_request(ctx, wl), "{}", wl.spec.name);
                part.clone()
            }
            _ => {
                let part = Witness::of_request(ctx, wl);
                self.by_request.insert(request, (stamp, part.clone()));
                part
            }
        };
        part?.witness_of(ctx, wl)
    }
}

/// The (borrows, share) part of `wl`'s tournament key (`scheduler::entry_key`), where it is
/// short of quota as `Short` says: the quick flavor assignment then takes its one flavor
/// whatever the nodes hold, assumes preemption brings it within what it may use, and takes
/// its borrow level with its team's own usage gone (its request alone against its nominal,
/// then up the tree). `None` where it is not so.
pub(crate) fn key_part(ctx: &Ctx, wl: &Workload) -> Option<(u8, Share)> {
    let st = ctx.st;
    let short = Short::of(ctx, wl)?;
    // As a quick assignment judges a pod set short of quota: its team's own preemptions
    // assumed to free what it uses (`decision::eval_flavor`).
    let borrows = short
        .pairs
        .iter()
        .map(|(fr, v, _, _)| quota::borrow_level(st, &ctx.acct, wl.team, *fr, *v, 0))
        .max()
        .unwrap_or(0);
    let usage: Vec<(FrId, i64)> = short
        .pairs
        .iter()
        .filter(|(_, v, _, _)| *v > 0)
        .map(|(fr, v, _, _)| (*fr, *v))
        .collect();
    let share = if st.policy.fair_share {
        quota::share(st, &ctx.acct, wl.team, &usage)
    } else {
        Share::ZERO
    };
    Some((quota::order_level(st.policy.fair_share, borrows), share))
}

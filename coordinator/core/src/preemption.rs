//! Choosing victims (scheduling.md §4 classical, §6 fair sharing). Both searches remove
//! candidates from the cycle's working copy, test the shared `fits` (quota and placement) after
//! each removal, put back what is not needed (minimal set), and leave the working copy as they
//! found it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use allot_common::quota::{BorrowWithinCohortPolicy, ReclaimWithinCohort, WithinTeam};
use allot_common::{FairSharingStrategy, Stability};

use crate::ids::{CohortId, FlavorId, FrId, TeamId, WlId};
use crate::nodes::RoomCount;
use crate::plan::PreemptReason;
use crate::protection;
use crate::quota::{self, Acct, Share};
use crate::state::{State, Time, WlState, Workload};
use crate::working::{admission_in, pairs_key, taken_off, Ctx, KeptRivals, Rivals, Usage};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub id: WlId,
    pub reason: PreemptReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Own,
    /// The preemptor has the hierarchical advantage over the candidate's team
    /// (`advantages`: within its nominal, or within a cohort's quota below the one they
    /// share): reclaim.
    Advantage,
    /// Usable only in a search where the preemptor ends up not borrowing.
    WithoutBorrowing,
    WhileBorrowing,
}

#[derive(Clone, Debug)]
struct Cand {
    id: WlId,
    team: TeamId,
    kind: Kind,
}

impl Cand {
    fn reason(&self) -> PreemptReason {
        match self.kind {
            Kind::Own => PreemptReason::InClusterQueue,
            Kind::Advantage | Kind::WithoutBorrowing => PreemptReason::InCohortReclamation,
            Kind::WhileBorrowing => PreemptReason::InCohortReclaimWhileBorrowing,
        }
    }
}

/// Finds the victims that let `wl` fit with `usage` and `place`. `Some(vec![])` means it fits
/// already; `None` means no set of allowed victims makes room, or none is needed once this
/// cycle's victims have left (`Ctx::fits_once_victims_leave` says which).
///
/// The search runs on the usage as it will be when `wl` can be admitted, with this cycle's
/// victims gone and their preemptors in (`Ctx::once_victims_leave`); their room on the nodes
/// stays theirs, as it does until they stop.
pub fn find_victims(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    contested: &BTreeSet<FrId>,
    contested_flavors: &BTreeSet<FlavorId>,
) -> Option<Vec<Victim>> {
    ctx.fits_once_victims_leave = false;
    if ctx.fits(wl, usage, place, true) {
        return Some(Vec::new());
    }
    let found =
        ctx.once_victims_leave(|ctx| search(ctx, wl, usage, place, contested, contested_flavors));
    if found.as_ref().is_some_and(|v| v.is_empty()) {
        // Room comes free for it without a victim of its own: it waits for the others'.
        ctx.fits_once_victims_leave = true;
        return None;
    }
    found
}

fn search(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    contested: &BTreeSet<FrId>,
    contested_flavors: &BTreeSet<FlavorId>,
) -> Option<Vec<Victim>> {
    // Without victims leaving, this view is the one `find_victims` just found it does not fit.
    if ctx.has_leavers() && ctx.fits(wl, usage, place, true) {
        return Some(Vec::new());
    }
    // Contested pairs: quota shortfalls, plus every requested pair on flavors short of nodes.
    let mut f_set: BTreeSet<FrId> = contested.clone();
    for (fr, _) in usage {
        let (f, _) = ctx.st.names.fr_parts(*fr);
        if contested_flavors.contains(&f) {
            f_set.insert(*fr);
        }
    }
    if f_set.is_empty() {
        return None;
    }
    if ctx.st.policy.fair_share {
        fair_sharing(ctx, wl, usage, place, &f_set)
    } else {
        classical(ctx, wl, usage, place, &f_set)
    }
}

/// Whether a team's policy allows any preemption for a request of `val` of a pair that does
/// not fit its quota now: within its nominal, through borrow_within_cohort (or fair sharing),
/// or, in a tree of cohorts, where a cohort below the root has room for it in its own quota
/// (Kueue's reclaim in the hierarchy: `fits_below_root`).
pub(crate) fn may_preempt_for_quota(
    st: &State,
    acct: &Acct,
    wl: &Workload,
    (fr, nominal): (FrId, i64),
    val: i64,
) -> bool {
    policy_allows(st, wl, nominal, val) || fits_below_root(st, acct, wl.team, fr, val)
}

/// `may_preempt_for_quota` by the team's policy alone (what a flat cohort decides by).
pub(crate) fn policy_allows(st: &State, wl: &Workload, nominal: i64, val: i64) -> bool {
    let p = &st.teams[wl.team.idx()].spec.preemption;
    nominal >= val
        || p.borrow_within_cohort.policy != BorrowWithinCohortPolicy::Never
        || (st.policy.fair_share && p.reclaim_within_cohort != ReclaimWithinCohort::Never)
}

/// Whether `val` of `fr` for team `t`, beyond the part of its quota it keeps, fits in the
/// quota of a cohort on its way up below the root: that subtree has the first claim to it
/// (kueue-reference.md §8). Never in a flat cohort.
pub(crate) fn fits_below_root(st: &State, acct: &Acct, t: TeamId, fr: FrId, val: i64) -> bool {
    let c = quota::lowest_fit(st, acct, t, fr, (val, acct.usage(t, fr)));
    st.cohorts[c.idx()].tree.parent.is_some()
}

fn uses_any(ctx: &Ctx, id: WlId, f_set: &BTreeSet<FrId>) -> bool {
    ctx.admission_of(id)
        .is_some_and(|a| a.usage.iter().any(|(fr, v)| *v > 0 && f_set.contains(fr)))
}

/// A team's admissions: its admitted workloads and those admitted earlier in this cycle,
/// removed or not.
fn admissions_of<'c>(ctx: &'c Ctx, t: TeamId) -> impl Iterator<Item = WlId> + 'c {
    ctx.st.teams[t.idx()].admitted.iter().copied().chain(
        ctx.planned
            .iter()
            // A preemptor admitted into the room its victims left is not taken back in the
            // same cycle: that would waste the evictions made for it.
            .filter(move |(id, (pt, _))| *pt == t && ctx.st.workload(**id).preempting.is_none())
            .map(|(id, _)| *id),
    )
}

/// A team's candidates: its admissions not removed.
fn holders<'c>(ctx: &'c Ctx, t: TeamId) -> impl Iterator<Item = WlId> + 'c {
    admissions_of(ctx, t).filter(move |id| !ctx.removed.contains(id))
}

fn borrowing_in(ctx: &Ctx, t: TeamId, f_set: &BTreeSet<FrId>) -> bool {
    f_set
        .iter()
        .any(|fr| quota::is_borrowing(ctx.st, &ctx.acct, t, *fr))
}

/// The workload that evicted `wl`: never one of its candidates, so two workloads never
/// preempt each other back and forth.
pub(crate) fn evicted_by(wl: &Workload) -> Option<WlId> {
    wl.preempted_by.as_ref().map(|p| p.preemptor)
}

/// The workloads whose preemptions led, one after another, to `wl`'s eviction: the one that
/// evicted it, the one that evicted that one, and so on (as far as they are still known).
pub(crate) fn eviction_chain(st: &State, wl: &Workload) -> Vec<WlId> {
    let mut out = Vec::new();
    let mut next = evicted_by(wl);
    while let Some(id) = next {
        if id == wl.id || out.contains(&id) {
            break;
        }
        out.push(id);
        next = st.workloads.get(&id).and_then(|w| evicted_by(w));
    }
    out
}

/// Whether `wl`, admitted with `usage`, would be above its team's nominal in a contested pair.
pub(crate) fn borrows_contested(
    ctx: &Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> bool {
    usage.iter().any(|(fr, v)| {
        f_set.contains(fr) && quota::borrows_with(ctx.st, &ctx.acct, wl.team, *fr, *v)
    })
}

/// Who `wl` may not take room from: the workload that evicted it (so two workloads never
/// preempt each other back and forth), and, when it preempts to borrow a contested pair, every
/// workload of its eviction chain: A evicted B, B evicted C, so C does not evict A to borrow,
/// which would let A evict B again, and so on around the loop. Reclaiming nominal quota is
/// never held back by the chain: a team always gets back what it is guaranteed.
pub(crate) fn never_taken(
    ctx: &Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> Vec<WlId> {
    if borrows_contested(ctx, wl, usage, f_set) {
        eviction_chain(ctx.st, wl)
    } else {
        evicted_by(wl).into_iter().collect()
    }
}

pub(crate) fn own_allowed(policy: WithinTeam, wl: &Workload, c: &Workload) -> bool {
    match policy {
        WithinTeam::Never => false,
        WithinTeam::LowerPriority => c.priority < wl.priority,
        WithinTeam::LowerOrNewerEqualPriority => {
            c.priority < wl.priority
                || (c.priority == wl.priority && c.submit_time > wl.submit_time)
        }
    }
}

/// Candidate order (Kueue's): being evicted first; then those the preemptor has the
/// hierarchical advantage over, other teams' others, and the preemptor's own team's, in that
/// order; then lower priority, most recently admitted, name.
fn order(ctx: &Ctx, own: TeamId, cands: &mut [Cand]) {
    let st = ctx.st;
    // Each key once (a workload lookup per comparison was most of the search's cost); ids are
    // unique, so the unstable sort gives the one order.
    let mut keyed: Vec<_> = cands
        .iter()
        .map(|c| {
            let w = st.workload(c.id);
            // Admissions planned in this cycle are the most recent of all.
            let admitted_at = if ctx.planned.contains_key(&c.id) {
                i64::MAX
            } else {
                w.admitted_at.unwrap_or(i64::MAX)
            };
            let group = match c.kind {
                _ if c.team == own => 2u8,
                Kind::Advantage => 0,
                _ => 1,
            };
            (
                (
                    w.state != WlState::Evicting,
                    group,
                    w.priority,
                    std::cmp::Reverse(admitted_at),
                ),
                w.spec.name.as_str(),
                c.id,
                c.clone(),
            )
        })
        .collect();
    keyed.sort_unstable_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
    for (slot, k) in cands.iter_mut().zip(keyed) {
        *slot = k.3;
    }
}

/// Whether an admission `id` on a contested pair (of the preemptor's team when `own`) is a
/// candidate for `wl`: it is not removed, not in `never`, was not preempted already at this
/// instant (`Workload::preempted_at`: readmitted, it stays), and the team's policy allows
/// taking it. The stability rules are applied on top, in the search's order (`Walk`).
pub(crate) fn allowed(ctx: &Ctx, wl: &Workload, id: WlId, own: bool, never: &[WlId]) -> bool {
    if ctx.removed.contains(&id) || never.contains(&id) {
        return false;
    }
    let policy = ctx.st.teams[wl.team.idx()].spec.preemption;
    let c = ctx.st.workload(id);
    if c.preempted_at(ctx.now) {
        return false;
    }
    if own {
        own_allowed(policy.within_team, wl, c)
    } else {
        policy.reclaim_within_cohort != ReclaimWithinCohort::LowerPriority
            || c.priority < wl.priority
    }
}

/// Whether the stability rules spare admission `id` (workload `c`) from a preemption that
/// rebalances borrowed capacity; one planned in this cycle counts as admitted now, and one
/// being evicted already is never spared (taking it costs nothing).
fn spared(ctx: &Ctx, id: WlId, c: &Workload) -> bool {
    if c.state == WlState::Evicting {
        return false;
    }
    let admitted_at = if ctx.planned.contains_key(&id) {
        Some(ctx.now)
    } else {
        c.admitted_at
    };
    protection::spared(&ctx.st.policy, c, admitted_at, ctx.now).is_some()
}

/// Whether a search may find a team's candidates spared by the stability rules: a rival's,
/// when taking it would rebalance borrowed capacity, with a rule on.
fn spares(ctx: &Ctx, own: bool, rebalance: bool) -> bool {
    !own && rebalance && ctx.st.policy.stability != Stability::OFF
}

/// Lowers `cap` to `p` (the lowest priority seen so far).
fn lower(cap: &mut Option<i32>, p: i32) {
    *cap = Some(cap.map_or(p, |c| c.min(p)));
}

/// Team `m`'s admissions (admitted, or planned in this cycle) that use a pair of `f_set`,
/// removed ones included (`allowed` skips those). With `sorted`, in the search's order
/// within one team (`order`: being evicted first, lower priority, most recently admitted,
/// name). Kept in the cycle's context until the team's admissions change: the searches of one
/// cycle read the same teams again and again (the one with the highest share above all), each
/// taking candidates and putting them back.
fn users(ctx: &Ctx, m: TeamId, f_set: &BTreeSet<FrId>, sorted: bool) -> Rc<[WlId]> {
    let read = || -> Vec<WlId> {
        admissions_of(ctx, m)
            .filter(|id| uses_any(ctx, *id, f_set))
            .collect()
    };
    let sort = |ids: &[WlId]| -> Rc<[WlId]> {
        let mut cands: Vec<Cand> = ids
            .iter()
            .map(|&id| Cand {
                id,
                team: m,
                kind: Kind::Own,
            })
            .collect();
        order(ctx, m, &mut cands);
        cands.iter().map(|c| c.id).collect()
    };
    let key = pairs_key(f_set);
    let version = ctx.version(m);
    let kept = match ctx.users.borrow().get(&key, &m) {
        Some((v, ids, in_order)) if *v == version => {
            // Debug builds (every test) check the kept list against reading it again.
            #[cfg(debug_assertions)]
            {
                let mut now = read();
                let mut was = ids.to_vec();
                now.sort_unstable();
                was.sort_unstable();
                assert_eq!(was, now, "team {m:?}'s kept admissions are stale");
            }
            if *in_order || !sorted {
                return ids.clone();
            }
            Some(ids.clone())
        }
        _ => None,
    };
    let ids = match kept {
        Some(ids) => sort(&ids),
        None if sorted => sort(&read()),
        None => read().into(),
    };
    ctx.users
        .borrow_mut()
        .insert(&key, m, (version, ids.clone(), sorted));
    ids
}

/// Team `m`'s admissions (admitted, or planned in this cycle) that use a pair of `f_set`, as
/// a search reads them (`users`), in id order.
pub(crate) fn users_of(ctx: &Ctx, m: TeamId, f_set: &BTreeSet<FrId>) -> Vec<WlId> {
    let mut ids = users(ctx, m, f_set, false).to_vec();
    ids.sort_unstable();
    ids
}

/// The distinct usages, negated, of team `m`'s admissions that use a pair of `f_set` (those
/// `users` gives), in order: what taking any one of them off leaves of the team's share is one
/// of these. Kept in the cycle's context until the team's admissions change.
fn usages(ctx: &Ctx, m: TeamId, f_set: &BTreeSet<FrId>) -> Rc<[Usage]> {
    let key = pairs_key(f_set);
    let version = ctx.version(m);
    if let Some((v, kept)) = ctx.usages.borrow().get(&key, &m) {
        if *v == version {
            return kept.clone();
        }
    }
    let mut all: Vec<Usage> = users(ctx, m, f_set, false)
        .iter()
        .filter_map(|id| ctx.admission_of(*id))
        .map(taken_off)
        .collect();
    all.sort_unstable();
    all.dedup();
    let all: Rc<[Usage]> = all.into();
    ctx.usages
        .borrow_mut()
        .insert(&key, m, (version, all.clone()));
    all
}

/// The teams of the cohort (of its whole tree) whose workloads `wl` may reclaim: none when its
/// policy never reclaims or its cohort is its own; else every other team borrowing a contested
/// pair, and in a tree of cohorts only where every cohort above it, below the one both share,
/// borrows one as well (`in_reach`).
pub(crate) fn reclaimable_teams<'c>(
    ctx: &'c Ctx,
    wl: &Workload,
    f_set: &'c BTreeSet<FrId>,
) -> impl Iterator<Item = TeamId> + 'c {
    let t = wl.team;
    let cohort = &ctx.st.cohorts[ctx.st.teams[t.idx()].cohort.idx()];
    let reclaims = reclaims(ctx.st, t);
    cohort.sharing().iter().copied().filter(move |m| {
        reclaims && *m != t && borrowing_in(ctx, *m, f_set) && in_reach(ctx, t, *m, f_set)
    })
}

/// Whether team `t`'s policy lets it reclaim from others at all: it may, and its cohort is
/// not its own.
fn reclaims(st: &State, t: TeamId) -> bool {
    let team = &st.teams[t.idx()];
    team.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::Never
        && !st.cohorts[team.cohort.idx()].private
}

/// Whether team `m`'s work is within reach of a reclaim by team `t` on `f_set`: every cohort
/// from `m`'s up to (not including) the lowest one `t`'s shares borrows a pair of `f_set`
/// (Kueue: a candidate's queue and its ancestors below the common one are over their quota).
/// Teams of one cohort always are.
fn in_reach(ctx: &Ctx, t: TeamId, m: TeamId, f_set: &BTreeSet<FrId>) -> bool {
    let st = ctx.st;
    let (ct, cm) = (st.teams[t.idx()].cohort, st.teams[m.idx()].cohort);
    if ct == cm {
        return true;
    }
    let above_t: Vec<CohortId> = quota::ancestors(st, ct).collect();
    for x in quota::ancestors(st, cm) {
        if above_t.contains(&x) {
            return true;
        }
        let borrows = f_set
            .iter()
            .any(|fr| quota::cohort_borrowing(st, &ctx.acct, x, *fr));
        if !borrows {
            return false;
        }
    }
    false
}

/// Per cohort from team `t`'s up to its root: whether a request of `usage` by `t` has the
/// hierarchical advantage over the teams whose lowest cohort shared with `t` is that one
/// (Kueue's hierarchical reclaim, kueue-reference.md §5). Over the teams of its own cohort: when
/// it fits in `t`'s nominal. Further up: also when what exceeds the quota kept below fits in
/// the quota of a cohort on the way (its subtree has the first claim to it). In a flat cohort,
/// the one entry is "within nominal".
fn advantages(ctx: &Ctx, t: TeamId, usage: &[(FrId, i64)]) -> Vec<(CohortId, bool)> {
    let st = ctx.st;
    let team = &st.teams[t.idx()];
    let mut advantage = usage
        .iter()
        .all(|(fr, v)| !quota::borrows_with(st, &ctx.acct, t, *fr, *v));
    // What is left of the request beyond the part of the quota kept below each level.
    let mut left: Vec<(FrId, i64)> = usage
        .iter()
        .map(|(fr, v)| {
            let kept_free = (team.reserved(*fr) - ctx.acct.usage(t, *fr)).max(0);
            (*fr, (v - kept_free).max(0))
        })
        .collect();
    let mut out = Vec::new();
    for c in quota::ancestors(st, team.cohort) {
        out.push((c, advantage));
        let cohort = &st.cohorts[c.idx()];
        let used = |fr: FrId| ctx.acct.pool_used[c.idx()].get(fr);
        advantage |= left
            .iter()
            .all(|(fr, v)| used(*fr) + v <= cohort.pool.get(*fr));
        for (fr, v) in &mut left {
            *v = (*v - (cohort.tree.local.get(*fr) - used(*fr)).max(0)).max(0);
        }
    }
    out
}

/// `advantages`' word on team `m`: the entry of the lowest cohort on the path that holds `m`.
fn advantage_over(ctx: &Ctx, advantages: &[(CohortId, bool)], m: TeamId) -> bool {
    let st = ctx.st;
    let above_m: Vec<CohortId> = quota::ancestors(st, st.teams[m.idx()].cohort).collect();
    advantages
        .iter()
        .find(|(c, _)| above_m.contains(c))
        .is_some_and(|(_, a)| *a)
}

/// The classical search's candidates, unordered (the fair-sharing search gathers its own,
/// team by team: `Pools`).
fn collect(ctx: &Ctx, wl: &Workload, usage: &[(FrId, i64)], f_set: &BTreeSet<FrId>) -> Vec<Cand> {
    let st = ctx.st;
    let t = wl.team;
    let policy = st.teams[t.idx()].spec.preemption;
    let mut cands = Vec::new();
    let never = never_taken(ctx, wl, usage, f_set);
    for &id in users(ctx, t, f_set, false).iter() {
        if allowed(ctx, wl, id, true, &never) {
            cands.push(Cand {
                id,
                team: t,
                kind: Kind::Own,
            });
        }
    }
    let advantages = advantages(ctx, t, usage);
    let bwc = policy.borrow_within_cohort;
    for m in reclaimable_teams(ctx, wl, f_set) {
        let advantage = advantage_over(ctx, &advantages, m);
        // The lowest priority of the team's candidates the stability rules spare (as a
        // preemptor that borrows would take them): none above it is taken (`Walk`).
        let mut cap: Option<i32> = None;
        for &id in users(ctx, m, f_set, false).iter() {
            if !allowed(ctx, wl, id, false, &never) {
                continue;
            }
            let c = st.workload(id);
            let kind = if advantage {
                Kind::Advantage
            } else if bwc.policy == BorrowWithinCohortPolicy::Never
                || c.priority >= wl.priority
                || bwc.max_priority_threshold.is_some_and(|th| c.priority > th)
            {
                Kind::WithoutBorrowing
            } else {
                Kind::WhileBorrowing
            };
            // Taken while the preemptor borrows: a rebalance of borrowed capacity.
            if kind == Kind::WhileBorrowing && spared(ctx, id, c) {
                lower(&mut cap, c.priority);
                continue;
            }
            cands.push(Cand { id, team: m, kind });
        }
        if let Some(p) = cap {
            cands.retain(|c| {
                let w = st.workload(c.id);
                c.team != m
                    || c.kind != Kind::WhileBorrowing
                    || w.state == WlState::Evicting
                    || w.priority <= p
            });
        }
    }
    cands
}

/// An upper bound before the one-by-one search: if the preemptor does not fit even with every
/// candidate gone, no subset of them makes room (removing usage only ever adds room).
fn fits_without_all(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    cands: &[Cand],
    allow_borrowing: bool,
) -> bool {
    let mut bound = Bound::start(ctx, wl, usage, place, allow_borrowing);
    bound.feed(ctx, wl, usage, cands);
    let holds = bound.finish(ctx, wl, usage, place);
    // Debug builds (every test) check a counted bound against placing with every candidate gone.
    #[cfg(debug_assertions)]
    if let [_] = place {
        let ids: Vec<WlId> = cands.iter().map(|c| c.id).collect();
        ctx.remove_many(&ids);
        let placed = ctx.fits(wl, usage, place, allow_borrowing);
        ctx.restore_many(&ids);
        assert_eq!(
            holds, placed,
            "the bound disagrees with placing for {}",
            wl.spec.name
        );
    }
    holds
}

/// `fits_without_all`, fed its candidates. Quota and room only grow as candidates go, so
/// feeding stops once it [`holds`](Self::holds): a bound that holds (the usual case) reads a
/// few candidates, one that fails reads each once.
struct Bound {
    allow_borrowing: bool,
    quota_ok: bool,
    /// Candidates whose usage is off the working accounting until `finish`.
    taken: Vec<(TeamId, WlId)>,
    /// Quota is tested again when `taken` reaches this (1, 2, 4, ...), and at the end.
    next_check: usize,
    room: Room,
}

enum Room {
    /// No placement to test.
    Free,
    /// One pod set: counted on the nodes without changing them.
    Counted(RoomCount),
    /// The flavor has no nodes.
    Never,
    /// Several pod sets: placed at the end with every candidate fed gone.
    Placed(Vec<WlId>),
}

impl Room {
    /// How the room for `place` is told: nothing to test without placement, counted for one
    /// pod set, placed for several.
    fn of(ctx: &Ctx, wl: &Workload, place: &[(usize, FlavorId, u32)]) -> Room {
        match place {
            _ if !ctx.st.placement || place.is_empty() => Room::Free,
            [one] => Room::of_one(ctx, wl, *one),
            _ => Room::Placed(Vec::new()),
        }
    }

    /// The room for one pod set, counted on the nodes where counting tells.
    fn of_one(ctx: &Ctx, wl: &Workload, (i, f, count): (usize, FlavorId, u32)) -> Room {
        let (nodes, req) = (&ctx.acct.nodes, &wl.pod_reqs[i]);
        let counted = match wl.topology() {
            None => nodes.room_count(f, req, count),
            // One domain that a gang requires, without slices: counted per domain.
            Some(ask) if ask.required && ask.slice.is_none() => {
                nodes.room_count_in(f, req, count, ask.level)
            }
            // A preferred level widens and slices are placed greedily: placed at the end.
            Some(_) => return Room::Placed(Vec::new()),
        };
        counted.map_or(Room::Never, Room::Counted)
    }
}

impl Bound {
    fn start(
        ctx: &Ctx,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
        allow_borrowing: bool,
    ) -> Bound {
        Bound {
            allow_borrowing,
            quota_ok: quota::fits(ctx.st, &ctx.acct, wl.team, usage, allow_borrowing).is_ok(),
            taken: Vec::new(),
            next_check: 1,
            room: Room::of(ctx, wl, place),
        }
    }

    fn holds(&self) -> bool {
        self.quota_ok
            && match &self.room {
                Room::Free => true,
                Room::Counted(r) => r.fits(),
                Room::Never | Room::Placed(_) => false,
            }
    }

    fn feed(&mut self, ctx: &mut Ctx, wl: &Workload, usage: &[(FrId, i64)], cands: &[Cand]) {
        let st = ctx.st;
        let Ctx { acct, planned, .. } = &mut *ctx;
        for c in cands {
            if self.holds() || matches!(self.room, Room::Never) {
                return;
            }
            let Some(a) = admission_in(st, planned, c.id) else {
                continue;
            };
            match &mut self.room {
                Room::Counted(r) if !r.fits() => {
                    for (_, p) in &a.placement {
                        r.release(&acct.nodes, p);
                    }
                }
                Room::Placed(ids) => ids.push(c.id),
                _ => {}
            }
            if !self.quota_ok {
                acct.add_all(st, c.team, &a.usage, -1);
                self.taken.push((c.team, c.id));
                if self.taken.len() >= self.next_check {
                    self.next_check *= 2;
                    self.quota_ok =
                        quota::fits(st, acct, wl.team, usage, self.allow_borrowing).is_ok();
                }
            }
        }
    }

    /// Whether the preemptor fits with every candidate fed gone; the working accounting is as
    /// it was before `start`.
    fn finish(
        mut self,
        ctx: &mut Ctx,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
    ) -> bool {
        let st = ctx.st;
        if !self.quota_ok {
            self.quota_ok =
                quota::fits(st, &ctx.acct, wl.team, usage, self.allow_borrowing).is_ok();
        }
        let Ctx { acct, planned, .. } = &mut *ctx;
        for (team, id) in &self.taken {
            if let Some(a) = admission_in(st, planned, *id) {
                acct.add_all(st, *team, &a.usage, 1);
            }
        }
        if !self.quota_ok {
            return false;
        }
        match self.room {
            Room::Placed(ids) => {
                ctx.remove_many(&ids);
                let fits = ctx.fits(wl, usage, place, self.allow_borrowing);
                ctx.restore_many(&ids);
                fits
            }
            room => matches!(room, Room::Free) || matches!(room, Room::Counted(r) if r.fits()),
        }
    }
}

/// The candidates a fair-sharing search has taken off, in order, and whether the preemptor
/// fits without them. For one pod set, the room they leave is counted on the nodes as they
/// were at the first removal (`RoomCount`): their usage leaves the accounting at once, their
/// pods leave the nodes only once the preemptor fits (`victims`). Several pod sets are placed
/// after each removal. In a dry walk (`search_within`) a take moves usage alone
/// (`Ctx::shift_usage`: the walk never looks at a candidate twice) and nothing fits on the
/// way: whether the preemptor fits with all of them gone is asked once (`fits_all`).
#[derive(Default)]
struct Taking {
    removed: Vec<(Cand, PreemptReason)>,
    /// How the room is told, from the first removal on.
    room: Option<Room>,
    /// A dry walk's (`search_within`).
    dry: bool,
}

impl Taking {
    /// Whether the removed candidates' pods are still on their nodes.
    fn counted(&self) -> bool {
        self.dry || matches!(self.room, Some(Room::Free | Room::Counted(_) | Room::Never))
    }

    fn take(
        &mut self,
        ctx: &mut Ctx,
        (wl, place): (&Workload, &[(usize, FlavorId, u32)]),
        c: Cand,
        reason: PreemptReason,
    ) {
        if self.dry {
            ctx.shift_usage(c.id, -1);
            self.removed.push((c, reason));
            return;
        }
        let room = self.room.get_or_insert_with(|| Room::of(ctx, wl, place));
        match room {
            Room::Placed(_) => ctx.remove(c.id),
            Room::Counted(r) => {
                if let Some(a) = ctx.admission_of(c.id) {
                    for (_, p) in &a.placement {
                        r.release(&ctx.acct.nodes, p);
                    }
                }
                ctx.remove_counted(c.id);
            }
            Room::Free | Room::Never => ctx.remove_counted(c.id),
        }
        self.removed.push((c, reason));
    }

    /// Of a dry walk: whether the preemptor fits (borrowing allowed) with every candidate it
    /// took gone. Quota first: the room is counted only where quota allows.
    fn fits_all(
        &self,
        ctx: &mut Ctx,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
    ) -> bool {
        if self.removed.is_empty() || quota::fits(ctx.st, &ctx.acct, wl.team, usage, true).is_err()
        {
            return false;
        }
        match Room::of(ctx, wl, place) {
            Room::Free => true,
            Room::Never => false,
            Room::Counted(mut r) => {
                for (c, _) in &self.removed {
                    for (_, p) in ctx.admission_of(c.id).iter().flat_map(|a| &a.placement) {
                        r.release(&ctx.acct.nodes, p);
                    }
                }
                r.fits()
            }
            Room::Placed(_) => self.placed_fits(ctx, wl, usage, place),
        }
    }

    /// `Ctx::fits` (borrowing allowed) with the taken candidates' pods given back on their
    /// nodes for the test (their usage is off already), then taken again.
    fn placed_fits(
        &self,
        ctx: &mut Ctx,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
    ) -> bool {
        let ids = self.ids();
        ctx.shift_nodes(&ids, -1);
        let fits = ctx.fits(wl, usage, place, true);
        ctx.shift_nodes(&ids, 1);
        fits
    }

    /// `Ctx::fits` (borrowing allowed) with every candidate taken off.
    fn fits(
        &self,
        ctx: &mut Ctx,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
    ) -> bool {
        if self.dry {
            return false;
        }
        if !self.counted() {
            return ctx.fits(wl, usage, place, true);
        }
        let fits = quota::fits(ctx.st, &ctx.acct, wl.team, usage, true).is_ok()
            && match &self.room {
                Some(Room::Counted(r)) => r.fits(),
                Some(Room::Free) => true,
                _ => false,
            };
        // Debug builds (every test) check the count against placing with the pods given back.
        #[cfg(debug_assertions)]
        {
            let placed = self.placed_fits(ctx, wl, usage, place);
            assert_eq!(
                fits, placed,
                "the counted room disagrees with placing for {}",
                wl.spec.name
            );
        }
        fits
    }

    fn ids(&self) -> Vec<WlId> {
        self.removed.iter().map(|(c, _)| c.id).collect()
    }

    /// The victims once the preemptor fits: the counted candidates' pods given back on their
    /// nodes, then the fewest of them kept (`fill_back`).
    fn victims(
        self,
        ctx: &mut Ctx,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
    ) -> Vec<Victim> {
        if self.counted() {
            ctx.shift_nodes(&self.ids(), -1);
        }
        fill_back(ctx, wl, usage, place, true, self.removed)
    }

    /// Puts every candidate back, the last taken first.
    fn put_back(&self, ctx: &mut Ctx) {
        let counted = self.counted();
        for (c, _) in self.removed.iter().rev() {
            if self.dry {
                ctx.shift_usage(c.id, 1);
            } else if counted {
                ctx.restore_counted(c.id);
            } else {
                ctx.restore(c.id);
            }
        }
    }
}

/// Puts back every victim (last one excepted) that the preemptor does not need, newest removal
/// first, then restores the working copy. Returns the minimal set.
fn fill_back(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    allow_borrowing: bool,
    removed: Vec<(Cand, PreemptReason)>,
) -> Vec<Victim> {
    let mut keep: Vec<bool> = vec![true; removed.len()];
    if removed.len() >= 2 {
        for i in (0..removed.len() - 1).rev() {
            ctx.restore(removed[i].0.id);
            if ctx.fits(wl, usage, place, allow_borrowing) {
                keep[i] = false;
            } else {
                ctx.remove(removed[i].0.id);
            }
        }
    }
    let mut out = Vec::new();
    for (i, (c, reason)) in removed.into_iter().enumerate() {
        if keep[i] {
            ctx.restore(c.id);
            out.push(Victim { id: c.id, reason });
        }
    }
    out
}

fn classical(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    f_set: &BTreeSet<FrId>,
) -> Option<Vec<Victim>> {
    let st = ctx.st;
    let t = wl.team;
    let team = &st.teams[t.idx()];
    let mut cands = collect(ctx, wl, usage, f_set);
    if cands.is_empty() {
        return None;
    }
    // No attempt can fit without every candidate gone, whatever their order: test that before
    // sorting (the attempts test each their own part of it below).
    if !fits_without_all(ctx, wl, usage, place, &cands, true) {
        return None;
    }
    order(ctx, t, &mut cands);
    let others = cands.iter().any(|c| c.kind != Kind::Own);
    let bwc_off =
        team.spec.preemption.borrow_within_cohort.policy == BorrowWithinCohortPolicy::Never;
    let below_nominal = f_set
        .iter()
        .all(|fr| ctx.acct.usage(t, *fr) < team.quota(*fr).map(|q| q.nominal).unwrap_or(0));
    let any_advantage = cands.iter().any(|c| c.kind == Kind::Advantage);
    let attempts: &[bool] = if !others || (bwc_off && !below_nominal) {
        &[true]
    } else if bwc_off && !any_advantage {
        &[false, true]
    } else {
        &[true, false]
    };
    for &allow_borrowing in attempts {
        // Upper bound for this attempt: every candidate it may use gone at once.
        let usable: Vec<Cand> = cands
            .iter()
            .filter(|c| !(allow_borrowing && c.kind == Kind::WithoutBorrowing))
            .cloned()
            .collect();
        if usable.is_empty() || !fits_without_all(ctx, wl, usage, place, &usable, allow_borrowing) {
            continue;
        }
        let mut removed: Vec<(Cand, PreemptReason)> = Vec::new();
        for c in &cands {
            if c.kind != Kind::Own {
                if (allow_borrowing || attempts.len() == 1) && c.kind == Kind::WithoutBorrowing {
                    continue;
                }
                // Its team, and each cohort between it and the one both share, must still
                // borrow a contested pair (the removals so far may have ended that).
                if !borrowing_in(ctx, c.team, f_set) || !in_reach(ctx, t, c.team, f_set) {
                    continue;
                }
            }
            ctx.remove(c.id);
            removed.push((c.clone(), c.reason()));
            if ctx.fits(wl, usage, place, allow_borrowing) {
                return Some(fill_back(ctx, wl, usage, place, allow_borrowing, removed));
            }
        }
        for (c, _) in removed.iter().rev() {
            ctx.restore(c.id);
        }
    }
    None
}

fn fair_sharing(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    f_set: &BTreeSet<FrId>,
) -> Option<Vec<Victim>> {
    if in_tree(ctx.st, wl.team) {
        return tree_fair_sharing(ctx, wl, usage, place, f_set);
    }
    if fair_share_hopeless(ctx, wl, usage, f_set) || out_of_reach_of(ctx, wl, usage, f_set) {
        // Debug builds (every test) check the short-cut against the search it skips.
        #[cfg(debug_assertions)]
        {
            let found = fair_sharing_search(ctx, wl, usage, place, f_set);
            assert!(
                found.is_none(),
                "the hopeless short-cut skipped a search that finds victims for {}: {found:?}",
                wl.spec.name
            );
        }
        return None;
    }
    fair_sharing_search(ctx, wl, usage, place, f_set)
}

/// The fair-sharing search's candidates, team by team, gathered and ordered only when the
/// search first looks at a team. Most searches look at a few teams of a large cohort (the one
/// with the highest share, whose candidates fail the strategy, then one with a share below the
/// preemptor's: hopeless), and gathering and sorting every candidate of every team was nearly
/// all of a contended search's cost.
struct Pools {
    /// The preemptor's team and the members it may reclaim from (borrowing at the start), in
    /// team id order.
    teams: Vec<TeamId>,
    own: TeamId,
    never: Vec<WlId>,
    /// Whether a rival's candidate taken would rebalance borrowed capacity (the preemptor's
    /// team goes above its nominal with it, as it stands before the search): then the
    /// stability rules spare some (`allowed`). Told once per search; a search that makes
    /// the preemptor's team fit its nominal by taking its own work still spares them.
    rebalance: bool,
    /// Per team once looked at: its admissions on a contested pair in the search's order
    /// (`users`), and how far the search has gone in them. Whether one is a candidate
    /// (`allowed`) is told only when the search reaches it: a search takes a few candidates
    /// of a team that holds hundreds, and telling every one of them was most of its cost.
    gathered: BTreeMap<TeamId, (Rc<[WlId]>, Walk)>,
    /// Per team not gathered yet: whether it has a candidate.
    any: BTreeMap<TeamId, bool>,
    /// Teams not gathered yet whose candidates were all passed over (`exhaust`).
    exhausted: BTreeSet<TeamId>,
}

impl Pools {
    fn new(ctx: &Ctx, wl: &Workload, usage: &[(FrId, i64)], f_set: &BTreeSet<FrId>) -> Pools {
        // `reclaimable_teams`, read from the cohort's borrowers as the cycle keeps them
        // (`ranked_borrowers`) rather than from every member: a search starts at every
        // judgement, and a cohort has a hundred members.
        let t = wl.team;
        let mut teams = vec![t];
        if reclaims(ctx.st, t) {
            let cohort = ctx.st.teams[t.idx()].cohort;
            teams.extend(
                (ranked_borrowers(ctx, cohort, f_set).iter())
                    .map(|(_, m)| *m)
                    .filter(|&m| m != t && in_reach(ctx, t, m, f_set)),
            );
        }
        teams.sort_unstable();
        // Debug builds (every test) check them against every member.
        #[cfg(debug_assertions)]
        {
            let mut all: Vec<TeamId> = std::iter::once(t)
                .chain(reclaimable_teams(ctx, wl, f_set))
                .collect();
            all.sort_unstable();
            assert_eq!(teams, all, "the teams {} may reclaim from", wl.spec.name);
        }
        Pools {
            teams,
            own: wl.team,
            never: never_taken(ctx, wl, usage, f_set),
            rebalance: !within_nominal_after(ctx, wl.team, usage, f_set),
            gathered: BTreeMap::new(),
            any: BTreeMap::new(),
            exhausted: BTreeSet::new(),
        }
    }

    /// Looks at team `m`'s admissions on a contested pair, in the search's order.
    fn gather(&mut self, ctx: &Ctx, m: TeamId, f_set: &BTreeSet<FrId>) {
        if self.gathered.contains_key(&m) {
            return;
        }
        let ids = users(ctx, m, f_set, true);
        let mut walk = Walk::default();
        if self.exhausted.contains(&m) {
            walk.next = ids.len();
        }
        self.gathered.insert(m, (ids, walk));
    }

    /// Team `m`'s next candidate in the search's order, left in place: the admissions passed
    /// on the way are not candidates, and never become ones during the search (it removes only
    /// candidates it took).
    fn next_of(&mut self, ctx: &Ctx, wl: &Workload, m: TeamId) -> Option<Cand> {
        let rules = self.rules();
        let (ids, walk) = self.gathered.get_mut(&m)?;
        walk.step(ctx, wl, rules, &self.never, m, ids)
    }

    /// Whether team `m` has a candidate the search has not taken. A team not gathered yet is
    /// asked once: none of its candidates can go before it is gathered.
    fn has_next(&mut self, ctx: &Ctx, wl: &Workload, m: TeamId, f_set: &BTreeSet<FrId>) -> bool {
        if self.gathered.contains_key(&m) {
            return self.next_of(ctx, wl, m).is_some();
        }
        if self.exhausted.contains(&m) {
            return false;
        }
        let own = m == self.own;
        let rules = self.rules();
        let never = &self.never;
        let spares = spares(ctx, own, self.rebalance);
        *self.any.entry(m).or_insert_with(|| {
            // The own team's lowest holder, kept across the cycle, tells at once when none of
            // its workloads may go (a low-priority preemptor's team holds only its equals and
            // betters), which the scan would learn only at its end.
            if own && !own_candidate(ctx, wl) {
                return false;
            }
            if !spares {
                let users = users(ctx, m, f_set, false);
                return users.iter().any(|id| allowed(ctx, wl, *id, own, never));
            }
            // Where the stability rules may spare some, as `Walk` finds it in the search's
            // order (kept for the cycle): it stops at the first one being evicted or not
            // spared, or past the lowest priority spared. Unsorted, every admission of the
            // team was read for each search that asked.
            let found = first_candidate(ctx, wl, rules, never, m, f_set).is_some();
            // Debug builds (every test) check it against reading every admission: one being
            // evicted, or one not spared at or below the lowest priority spared.
            #[cfg(debug_assertions)]
            {
                let (mut cap, mut lowest, mut evicting) = (None, None, false);
                let users = users(ctx, m, f_set, false);
                for &id in users.iter().filter(|id| allowed(ctx, wl, **id, own, never)) {
                    let c = ctx.st.workload(id);
                    evicting |= c.state == WlState::Evicting;
                    if spared(ctx, id, c) {
                        lower(&mut cap, c.priority);
                    } else {
                        lower(&mut lowest, c.priority);
                    }
                }
                let scanned = evicting || lowest.is_some_and(|l| cap.is_none_or(|c| l <= c));
                assert_eq!(
                    found, scanned,
                    "team {m:?}'s first candidate for {}",
                    wl.spec.name
                );
            }
            found
        })
    }

    /// Team `m`'s next candidate in the search's order, left in place; when the team is not
    /// gathered yet, found without gathering it (the first allowed one).
    fn peek(
        &mut self,
        ctx: &Ctx,
        wl: &Workload,
        m: TeamId,
        f_set: &BTreeSet<FrId>,
    ) -> Option<Cand> {
        if self.gathered.contains_key(&m) {
            return self.next_of(ctx, wl, m);
        }
        first_candidate(ctx, wl, self.rules(), &self.never, m, f_set)
    }

    /// The preemptor's team, and whether the stability rules spare rivals' candidates.
    fn rules(&self) -> (TeamId, bool) {
        (self.own, self.rebalance)
    }

    /// Takes none of team `m`'s candidates that are left.
    fn exhaust(&mut self, m: TeamId) {
        if let Some((c, walk)) = self.gathered.get_mut(&m) {
            walk.next = c.len();
        } else {
            self.exhausted.insert(m);
        }
    }

    /// Takes team `m`'s next candidate in the search's order.
    fn pop(&mut self, ctx: &Ctx, wl: &Workload, m: TeamId, f_set: &BTreeSet<FrId>) -> Option<Cand> {
        self.gather(ctx, m, f_set);
        let c = self.next_of(ctx, wl, m)?;
        if let Some((_, walk)) = self.gathered.get_mut(&m) {
            walk.next += 1;
        }
        Some(c)
    }
}

/// Whether the preemptor's request fits its quota with the teams in `reach` using none of the
/// requested pairs, what its own team's candidates use (`own`, per pair) gone: a bound on
/// what any search can take, read from each team's usage, not from its admissions one by one
/// (`out_of_reach_of`). Their candidates use no more than all of it, and less usage never
/// leaves less room.
fn quota_bound(
    ctx: &mut Ctx,
    t: TeamId,
    usage: &[(FrId, i64)],
    own: &[(FrId, i64)],
    reach: &[TeamId],
) -> bool {
    let st = ctx.st;
    let mut moves: Vec<(TeamId, FrId, i64)> = Vec::new();
    for &m in reach.iter().filter(|m| **m != t) {
        for &(fr, _) in usage {
            let u = ctx.acct.usage(m, fr);
            if u > 0 {
                moves.push((m, fr, -u));
            }
        }
    }
    moves.extend(own.iter().map(|(fr, v)| (t, *fr, -v)));
    ctx.acct.with_moved(st, &moves, |acct| {
        quota::fits(st, acct, t, usage, true).is_ok()
    })
}

/// Team `m`'s first candidate in the search's order (`Walk` from the start of its sorted
/// admissions, kept for the cycle), as a search finds it before taking any of the team's.
fn first_candidate(
    ctx: &Ctx,
    wl: &Workload,
    rules: (TeamId, bool),
    never: &[WlId],
    m: TeamId,
    f_set: &BTreeSet<FrId>,
) -> Option<Cand> {
    let ids = users(ctx, m, f_set, true);
    Walk::default().step(ctx, wl, rules, never, m, &ids)
}

/// How far a search has gone through one team's admissions in its order (`users`, sorted):
/// the next to look at, and the lowest priority among those passed over because the
/// stability rules spare them. None of a higher priority is taken after one is spared: the
/// rules hold a preemption back, never move it onto more important work. (Passing over a
/// spared workload to the next in the order took a higher-priority victim; requeued, it
/// preempted its own team's lower-priority work, and on the 3,000-workload contended
/// scenario preemptions rose by half.)
#[derive(Clone, Copy, Default)]
struct Walk {
    next: usize,
    cap: Option<i32>,
}

impl Walk {
    /// Team `m`'s next candidate from `next` on, left in place; the admissions passed on the
    /// way are not candidates, and never become ones during the search (it removes only
    /// candidates it took, and being spared does not change within a search). `rules`: the
    /// preemptor's team, and whether its taking a rival's would rebalance borrowed capacity.
    fn step(
        &mut self,
        ctx: &Ctx,
        wl: &Workload,
        (own, rebalance): (TeamId, bool),
        never: &[WlId],
        m: TeamId,
        ids: &[WlId],
    ) -> Option<Cand> {
        let is_own = m == own;
        let spares = spares(ctx, is_own, rebalance);
        while let Some(&id) = ids.get(self.next) {
            if allowed(ctx, wl, id, is_own, never) {
                let c = ctx.st.workload(id);
                if !spares || c.state == WlState::Evicting {
                    let kind = if is_own { Kind::Own } else { Kind::Advantage };
                    return Some(Cand { id, team: m, kind });
                }
                if self.cap.is_some_and(|p| c.priority > p) {
                    self.next = ids.len();
                    return None;
                }
                if !spared(ctx, id, c) {
                    return Some(Cand {
                        id,
                        team: m,
                        kind: Kind::Advantage,
                    });
                }
                lower(&mut self.cap, c.priority);
            }
            self.next += 1;
        }
        None
    }
}

/// The cluster's fair-sharing strategies: the first (by default Kueue's
/// LessThanOrEqualToFinalShare) and the second, if any.
fn strategies(st: &State) -> (FairSharingStrategy, Option<FairSharingStrategy>) {
    let all = &st.policy.fair_sharing_strategies;
    let first = all
        .first()
        .copied()
        .unwrap_or(FairSharingStrategy::LessThanOrEqualToFinalShare);
    (first, all.get(1).copied())
}

/// Whether team `t`'s cohort is part of a tree of cohorts (it, or one above or below it, has
/// a parent).
pub(crate) fn in_tree(st: &State, t: TeamId) -> bool {
    !st.cohorts[st.teams[t.idx()].cohort.idx()]
        .tree
        .shared
        .is_empty()
}

/// A node of a tree of cohorts: a team or a cohort.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Team(TeamId),
    Cohort(CohortId),
}

/// Team `t`'s place: the cohorts from its root down, then the team.
fn path_of(st: &State, t: TeamId) -> Vec<Node> {
    let mut path: Vec<Node> = std::iter::once(Node::Team(t))
        .chain(quota::ancestors(st, st.teams[t.idx()].cohort).map(Node::Cohort))
        .collect();
    path.reverse();
    path
}

/// Where two teams' paths part: the nodes just below the lowest cohort they share (Kueue's
/// almost-LCA); in one cohort, the teams themselves.
fn parting(a: &[Node], b: &[Node]) -> (Node, Node) {
    let k = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let last = |p: &[Node]| p[k.min(p.len() - 1)];
    (last(a), last(b))
}

/// The preemptor of a search in a tree: its team, its request, and its path (`path_of`).
struct Asker<'a> {
    t: TeamId,
    usage: &'a [(FrId, i64)],
    path: Vec<Node>,
}

/// A node's share with the preemptor's request in: a team's weighted share, a cohort's
/// (`quota::cohort_share`) with the request counted where the preemptor is below it.
fn node_share(ctx: &mut Ctx, node: Node, asker: &Asker) -> Share {
    let st = ctx.st;
    let (t, usage) = (asker.t, asker.usage);
    match node {
        Node::Team(m) if m == t => quota::share(st, &ctx.acct, t, usage),
        Node::Team(m) => ctx.share(m),
        Node::Cohort(c) => {
            if asker.path.contains(&node) {
                ctx.acct.add_all(st, t, usage, 1);
                let s = quota::cohort_share(st, &ctx.acct, c);
                ctx.acct.add_all(st, t, usage, -1);
                s
            } else {
                quota::cohort_share(st, &ctx.acct, c)
            }
        }
    }
}

/// The fair-sharing search's next target in a tree, Kueue's tournament from the root: at
/// each cohort the child (cohort or team) with the highest share among those with candidates
/// left, a child that does not borrow left out unless the preemptor is below it; ties to the
/// cohort, then the lowest id. `teams`: those with candidates left.
fn tree_target(ctx: &mut Ctx, teams: &[TeamId], asker: &Asker) -> Option<TeamId> {
    // Each node's share once per pick: the teams' paths share their upper nodes.
    let mut shares: BTreeMap<Node, Share> = BTreeMap::new();
    let mut share = |ctx: &mut Ctx, n: Node| -> Share {
        *shares.entry(n).or_insert_with(|| node_share(ctx, n, asker))
    };
    let mut best: Option<(TeamId, Vec<Node>)> = None;
    'teams: for &m in teams {
        let path = path_of(ctx.st, m);
        for node in &path[1..] {
            if !asker.path.contains(node) && share(ctx, *node) == Share::ZERO {
                continue 'teams;
            }
        }
        let better = match &best {
            None => true,
            Some((_, bp)) => {
                let (a, b) = parting(&path, bp);
                let (sa, sb) = (share(ctx, a), share(ctx, b));
                sa > sb
                    || (sa == sb
                        && match (a, b) {
                            (Node::Cohort(_), Node::Team(_)) => true,
                            (Node::Team(_), Node::Cohort(_)) => false,
                            (Node::Cohort(x), Node::Cohort(y)) => x < y,
                            (Node::Team(x), Node::Team(y)) => x < y,
                        })
            }
        };
        if better {
            best = Some((m, path));
        }
    }
    best.map(|(m, _)| m)
}

/// Whether the search in a tree must end without victims, told before any candidate is
/// gathered: the preemptor takes nothing of its own team, would borrow after admission, and
/// at every rival its share where their paths part is at or above the rival's side. Then no
/// candidate passes either strategy (taking one never raises the target's side), nothing is
/// removed, and nothing changes: exactly the search's own answer (as `fair_share_hopeless`
/// for a flat cohort).
fn tree_hopeless(ctx: &mut Ctx, wl: &Workload, asker: &Asker, f_set: &BTreeSet<FrId>) -> bool {
    if own_candidate(ctx, wl) || within_nominal_after(ctx, asker.t, asker.usage, f_set) {
        return false;
    }
    let rivals: Vec<TeamId> = reclaimable_teams(ctx, wl, f_set).collect();
    for m in rivals {
        let (px, pt) = parting(&asker.path, &path_of(ctx.st, m));
        if node_share(ctx, px, asker) < node_share(ctx, pt, asker) {
            return false;
        }
    }
    true
}

/// The fair-sharing search in a tree of cohorts (kueue-reference.md §6, with §8's levels): the
/// target is chosen by the tournament from the root (`tree_target`), and the strategies
/// compare the shares where the preemptor's path and the target's part (`parting`): two
/// departments compare as wholes, two teams of one cohort as teams. Plainer than the flat
/// cohort's search: only the hopeless case is told first (`tree_hopeless`); the kept ranking
/// and the dry walk compare team shares.
fn tree_fair_sharing(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    f_set: &BTreeSet<FrId>,
) -> Option<Vec<Victim>> {
    let st = ctx.st;
    let t = wl.team;
    let asker = Asker {
        t,
        usage,
        path: path_of(st, t),
    };
    if tree_hopeless(ctx, wl, &asker, f_set) {
        return None;
    }
    let mut pools = Pools::new(ctx, wl, usage, f_set);
    let (first, second) = strategies(st);
    let mut removed: Vec<(Cand, PreemptReason)> = Vec::new();
    let mut retry: BTreeMap<TeamId, VecDeque<Cand>> = BTreeMap::new();
    let mut fit = false;
    'outer: loop {
        let left: Vec<TeamId> = (pools.teams.clone().into_iter())
            .filter(|&m| m == t || borrowing_in(ctx, m, f_set))
            .filter(|&m| pools.has_next(ctx, wl, m, f_set))
            .collect();
        let Some(target) = tree_target(ctx, &left, &asker) else {
            break;
        };
        if target == t || within_nominal_after(ctx, t, usage, f_set) {
            let Some(c) = pools.pop(ctx, wl, target, f_set) else {
                break;
            };
            let reason = if target == t {
                PreemptReason::InClusterQueue
            } else {
                PreemptReason::InCohortReclamation
            };
            ctx.remove(c.id);
            removed.push((c, reason));
            if ctx.fits(wl, usage, place, true) {
                fit = true;
                break;
            }
            continue;
        }
        let (px, pt) = parting(&asker.path, &path_of(st, target));
        let p = node_share(ctx, px, &asker);
        let t0 = node_share(ctx, pt, &asker);
        while let Some(c) = pools.pop(ctx, wl, target, f_set) {
            // The target's side without the candidate: its usage off the accounting only (the
            // nodes are not read by a share).
            let held: Vec<(FrId, i64)> = ctx
                .admission_of(c.id)
                .map_or(Vec::new(), |a| a.usage.clone());
            ctx.acct.add_all(st, c.team, &held, -1);
            let t1 = node_share(ctx, pt, &asker);
            ctx.acct.add_all(st, c.team, &held, 1);
            if passes(first, p, t0, t1) {
                ctx.remove(c.id);
                removed.push((c, PreemptReason::InCohortFairSharing));
                if ctx.fits(wl, usage, place, true) {
                    fit = true;
                    break 'outer;
                }
                continue 'outer;
            }
            retry.entry(target).or_default().push_back(c);
        }
    }
    if let Some(s2) = second.filter(|_| !fit) {
        // Once per team, by the tournament over the teams with a candidate passed over.
        let mut used: BTreeSet<TeamId> = BTreeSet::new();
        loop {
            let left: Vec<TeamId> = (retry.iter())
                .filter(|(m, q)| !q.is_empty() && !used.contains(m))
                .map(|(m, _)| *m)
                .collect();
            let Some(target) = tree_target(ctx, &left, &asker) else {
                break;
            };
            used.insert(target);
            let (px, pt) = parting(&asker.path, &path_of(st, target));
            let (p, t0) = (node_share(ctx, px, &asker), node_share(ctx, pt, &asker));
            let Some(c) = retry.get_mut(&target).and_then(|q| q.pop_front()) else {
                continue;
            };
            if passes(s2, p, t0, t0) {
                ctx.remove(c.id);
                removed.push((c, PreemptReason::InCohortFairSharing));
                if ctx.fits(wl, usage, place, true) {
                    fit = true;
                    break;
                }
            }
        }
    }
    if fit {
        return Some(fill_back(ctx, wl, usage, place, true, removed));
    }
    for (c, _) in removed.iter().rev() {
        ctx.restore(c.id);
    }
    None
}

fn fair_sharing_search(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    f_set: &BTreeSet<FrId>,
) -> Option<Vec<Victim>> {
    search_within(ctx, wl, usage, place, f_set)
}

/// Whether taking a candidate off a team passes strategy `s`: the preemptor's share after its
/// admission `p` against the team's share before (`t0`) and after (`t1`). The final-share test
/// is strict: at `P == T1` the eviction leaves the two teams where they were, so the victim,
/// requeued, may pass the same test against the preemptor, and a cohort of equal teams (whose
/// dominant resource the workloads do not move) preempts round and round. An eviction that
/// lands exactly level still passes the initial-share test (`P < T0`), one per team, in the
/// second pass.
fn passes(s: FairSharingStrategy, p: Share, t0: Share, t1: Share) -> bool {
    match s {
        FairSharingStrategy::LessThanOrEqualToFinalShare => p < t1,
        FairSharingStrategy::LessThanInitialShare => p < t0,
    }
}

/// A team's share as the search compares it: the preemptor's own after its admission.
fn share_of(ctx: &Ctx, t: TeamId, usage: &[(FrId, i64)], tid: TeamId) -> Share {
    if tid == t {
        quota::share(ctx.st, &ctx.acct, t, usage)
    } else {
        ctx.share(tid)
    }
}

/// The teams the fair-sharing search may take a candidate from (the preemptor's, and those
/// borrowing a contested pair), by share, highest first, ties to the lowest team id: `pick`
/// takes the first with a candidate left. Shares and borrowing change only when a candidate
/// is taken off, and a team without candidates left has none later, so the order is walked
/// once between removals (each pick looked at every team of the cohort). It starts from the
/// cohort's borrowers in order, kept for the cycle's searches while the accounting is
/// unchanged (`ranked_borrowers`), with the preemptor's team placed at its share after
/// admission; a removal moves only the team that lost the candidate (its share and borrowing
/// are its own usage's).
#[derive(Default)]
struct Ranking {
    ranked: Vec<(Share, TeamId)>,
    /// How many removals the order has taken in (`None`: not built yet).
    after: Option<usize>,
    cursor: usize,
}

impl Ranking {
    fn rank_in(&mut self, share: Share, tid: TeamId) {
        let at = (self.ranked).partition_point(|(s, x)| *s > share || (*s == share && *x < tid));
        self.ranked.insert(at, (share, tid));
    }

    /// The team with the highest share that still has candidates in `pools`; ties go to the
    /// lowest team id.
    fn pick(
        &mut self,
        ctx: &Ctx,
        pools: &mut Pools,
        removed: &[(Cand, PreemptReason)],
        (wl, usage, f_set): (&Workload, &[(FrId, i64)], &BTreeSet<FrId>),
    ) -> Option<TeamId> {
        let st = ctx.st;
        let t = wl.team;
        match self.after {
            Some(n) if n == removed.len() => {}
            Some(n) if n < removed.len() => {
                for (c, _) in &removed[n..] {
                    let m = c.team;
                    self.ranked.retain(|(_, x)| *x != m);
                    if m == t || borrowing_in(ctx, m, f_set) {
                        self.rank_in(share_of(ctx, t, usage, m), m);
                    }
                }
                self.after = Some(removed.len());
                self.cursor = 0;
            }
            _ => {
                let cohort = st.teams[t.idx()].cohort;
                self.ranked.clear();
                self.ranked.extend(
                    ranked_borrowers(ctx, cohort, f_set)
                        .iter()
                        .filter(|(_, m)| *m != t && pools.teams.binary_search(m).is_ok()),
                );
                self.rank_in(share_of(ctx, t, usage, t), t);
                self.after = Some(removed.len());
                self.cursor = 0;
            }
        }
        // Debug builds (every test) check the order against ranking every team again.
        #[cfg(debug_assertions)]
        {
            let mut all: Vec<(Share, TeamId)> = pools
                .teams
                .iter()
                .filter(|&&tid| tid == t || borrowing_in(ctx, tid, f_set))
                .map(|&tid| (share_of(ctx, t, usage, tid), tid))
                .collect();
            all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            assert_eq!(
                self.ranked, all,
                "the fair-sharing search's kept order is stale"
            );
        }
        let mut picked = None;
        while let Some(&(_, tid)) = self.ranked.get(self.cursor) {
            if pools.has_next(ctx, wl, tid, f_set) {
                picked = Some(tid);
                break;
            }
            self.cursor += 1;
        }
        // Debug builds (every test) check the pick against a scan of every team.
        #[cfg(debug_assertions)]
        {
            let mut best: Option<(Share, TeamId)> = None;
            for tid in pools.teams.clone() {
                if (tid == t || borrowing_in(ctx, tid, f_set))
                    && pools.has_next(ctx, wl, tid, f_set)
                {
                    let s = share_of(ctx, t, usage, tid);
                    if best.as_ref().is_none_or(|(bs, _)| s > *bs) {
                        best = Some((s, tid));
                    }
                }
            }
            assert_eq!(picked, best.map(|(_, tid)| tid));
        }
        picked
    }
}

/// The second pass's pick: the team with the highest share among those with a candidate left
/// in `pool` and not picked yet (`used`); ties go to the lowest team id.
fn pick_retry(
    ctx: &Ctx,
    pool: &BTreeMap<TeamId, VecDeque<Cand>>,
    used: &BTreeSet<TeamId>,
    (t, usage, f_set): (TeamId, &[(FrId, i64)], &BTreeSet<FrId>),
) -> Option<TeamId> {
    let mut best: Option<(Share, TeamId)> = None;
    for (tid, q) in pool {
        if q.is_empty() || used.contains(tid) {
            continue;
        }
        if *tid != t && !borrowing_in(ctx, *tid, f_set) {
            continue;
        }
        let s = share_of(ctx, t, usage, *tid);
        if best.as_ref().is_none_or(|(bs, _)| s > *bs) {
            best = Some((s, *tid));
        }
    }
    best.map(|(_, tid)| tid)
}

/// What a search is for: the workload, its usage, where its pods go, the contested pairs.
type Want<'w> = (
    &'w Workload,
    &'w [(FrId, i64)],
    &'w [(usize, FlavorId, u32)],
    &'w BTreeSet<FrId>,
);

/// The second strategy's pass over the candidates the first passed over: one per team, by
/// share. Whether the workload fits after it.
fn second_pass(
    ctx: &mut Ctx,
    mut retry: BTreeMap<TeamId, VecDeque<Cand>>,
    s2: FairSharingStrategy,
    (wl, usage, place, f_set): Want,
    taking: &mut Taking,
) -> bool {
    let st = ctx.st;
    let t = wl.team;
    let mut used: BTreeSet<TeamId> = BTreeSet::new();
    while let Some(target) = pick_retry(ctx, &retry, &used, (t, usage, f_set)) {
        used.insert(target);
        let p = quota::share(st, &ctx.acct, t, usage);
        let t0 = ctx.share(target);
        let Some(c) = retry.get_mut(&target).and_then(|q| q.pop_front()) else {
            continue;
        };
        if passes(s2, p, t0, t0) {
            taking.take(ctx, (wl, place), c, PreemptReason::InCohortFairSharing);
            if taking.fits(ctx, wl, usage, place) {
                return true;
            }
        }
    }
    false
}

/// `fair_sharing_search`. Most searches fail, and a failing search takes every candidate its
/// walk can take (the walk's choices read the accounting, never the nodes): a dry walk first
/// takes them off the accounting only and asks once, with all of them gone, whether the
/// preemptor fits (quota, then the room their pods leave). Room and quota only grow as
/// candidates go, and the search's walk takes what the dry one took, in the same order, until
/// the preemptor fits: so it finds victims exactly when the dry walk ends fitting, and then
/// the dry walk's candidates are taken again in its order, asking after each.
fn search_within(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    f_set: &BTreeSet<FrId>,
) -> Option<Vec<Victim>> {
    let want = (wl, usage, place, f_set);
    let mut dry = Taking {
        dry: true,
        ..Taking::default()
    };
    walk(ctx, want, &mut dry);
    let fits = dry.fits_all(ctx, wl, usage, place);
    dry.put_back(ctx);
    if !fits {
        // Debug builds (every test) check the dry walk against the search it skips.
        #[cfg(debug_assertions)]
        {
            let mut taking = Taking::default();
            let found = walk(ctx, want, &mut taking);
            taking.put_back(ctx);
            assert!(
                !found,
                "the dry walk skipped a search that finds victims for {}",
                wl.spec.name
            );
        }
        return None;
    }
    // Debug builds (every test) find the victims by the search's own walk, to compare.
    #[cfg(debug_assertions)]
    let walked = {
        let mut taking = Taking::default();
        assert!(
            walk(ctx, want, &mut taking),
            "the dry walk fits but the search does not for {}",
            wl.spec.name
        );
        taking.victims(ctx, wl, usage, place)
    };
    // The search's walk takes what the dry one took, in its order, until the preemptor fits.
    let mut taking = Taking::default();
    for (c, reason) in dry.removed {
        taking.take(ctx, (wl, place), c, reason);
        if taking.fits(ctx, wl, usage, place) {
            let victims = taking.victims(ctx, wl, usage, place);
            #[cfg(debug_assertions)]
            assert_eq!(victims, walked, "the victims of {}", wl.spec.name);
            return Some(victims);
        }
    }
    debug_assert!(
        false,
        "the dry walk fits, its takes do not for {}",
        wl.spec.name
    );
    taking.put_back(ctx);
    None
}

/// The fair-sharing search's walk: candidates taken team by team, by share, the first strategy
/// then the second, until the preemptor fits (`taking`; never for a dry walk). Whether it fits.
fn walk(ctx: &mut Ctx, want: Want, taking: &mut Taking) -> bool {
    let (wl, usage, place, f_set) = want;
    let st = ctx.st;
    let t = wl.team;
    let mut pools = Pools::new(ctx, wl, usage, f_set);
    let (first, second) = strategies(st);
    let mut ranking = Ranking::default();
    let mut retry: BTreeMap<TeamId, VecDeque<Cand>> = BTreeMap::new();
    let mut fit = false;
    let mut hopeless = false;
    'outer: while let Some(target) =
        ranking.pick(ctx, &mut pools, &taking.removed, (wl, usage, f_set))
    {
        if target == t {
            let Some(c) = pools.pop(ctx, wl, target, f_set) else {
                break;
            };
            taking.take(ctx, (wl, place), c, PreemptReason::InClusterQueue);
            if taking.fits(ctx, wl, usage, place) {
                fit = true;
                break;
            }
            continue;
        }
        if within_nominal_after(ctx, t, usage, f_set) {
            let Some(c) = pools.pop(ctx, wl, target, f_set) else {
                break;
            };
            taking.take(ctx, (wl, place), c, PreemptReason::InCohortReclamation);
            if taking.fits(ctx, wl, usage, place) {
                fit = true;
                break;
            }
            continue;
        }
        let p = quota::share(st, &ctx.acct, t, usage);
        let t0 = ctx.share(target);
        if p >= t0 {
            // The target has the highest share of all teams with candidates left, and removing
            // a candidate never raises a share: each of them ends at T1 <= T0 <= P and starts at
            // T0 <= P, so neither strategy can pass on them. Only the teams already passed over
            // (in `retry`, with T0 above P) may still pass the second one.
            hopeless = retry.values().all(|q| q.is_empty());
            break;
        }
        // Every candidate fails the first strategy when taking off even the usage that leaves
        // the target's share highest does. Then only the first candidate goes on: the second
        // pass takes no more than each team's first. This skips a share per candidate, most
        // of a contended search's cost at 10,000 nodes.
        if first == FairSharingStrategy::LessThanOrEqualToFinalShare
            && usages(ctx, target, f_set)
                .iter()
                .all(|u| !passes(first, p, t0, quota::share(st, &ctx.acct, target, u)))
        {
            // Debug builds (every test) check the short-cut against each candidate it skips.
            #[cfg(debug_assertions)]
            {
                let mut all = Pools::new(ctx, wl, usage, f_set);
                all.gathered = pools.gathered.clone();
                while let Some(c) = all.pop(ctx, wl, target, f_set) {
                    assert!(!passes(first, p, t0, ctx.share_without(target, c.id)));
                }
            }
            if let Some(c) = pools.peek(ctx, wl, target, f_set) {
                let q = retry.entry(target).or_default();
                if q.is_empty() {
                    q.push_back(c);
                }
            }
            pools.exhaust(target);
            continue;
        }
        while let Some(c) = pools.pop(ctx, wl, target, f_set) {
            // The target's share without the candidate, told from its usage alone: most
            // candidates fail the strategy, and taking each off its nodes and putting it back
            // was most of a contended search's cost.
            let t1 = ctx.share_without(target, c.id);
            if passes(first, p, t0, t1) {
                taking.take(ctx, (wl, place), c, PreemptReason::InCohortFairSharing);
                debug_assert_eq!(
                    t1.cmp(&quota::share(st, &ctx.acct, target, &[])),
                    std::cmp::Ordering::Equal
                );
                if taking.fits(ctx, wl, usage, place) {
                    fit = true;
                    break 'outer;
                }
                continue 'outer;
            }
            retry.entry(target).or_default().push_back(c);
        }
    }
    if !fit && !hopeless {
        if let Some(s2) = second {
            fit = second_pass(ctx, retry, s2, want, taking);
        }
    }
    fit
}

/// Whether `wl`'s team holds a workload its policy lets `wl` preempt (`own_allowed`). Only
/// the team's lowest priority among its candidates, and the latest submit time at it, can
/// tell: kept per team until its candidates change (the shapes of a cycle ask again and
/// again, and a team holds many).
pub(crate) fn own_candidate(ctx: &Ctx, wl: &Workload) -> bool {
    let t = wl.team;
    let policy = ctx.st.teams[t.idx()].spec.preemption.within_team;
    if policy == WithinTeam::Never {
        return false;
    }
    // Only the team's own admissions and removals move its lowest candidate: a search that
    // takes other teams' candidates off and puts them back leaves it kept.
    let key = (ctx.version(t), ctx.removals_of(t));
    let kept = ctx
        .lowest
        .borrow()
        .get(t.idx())
        .copied()
        .flatten()
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v);
    let lowest = kept.unwrap_or_else(|| {
        let mut low: Option<(i32, Time)> = None;
        for id in holders(ctx, t) {
            let w = ctx.st.workload(id);
            low = match low {
                Some((p, s)) if p < w.priority || (p == w.priority && s >= w.submit_time) => {
                    Some((p, s))
                }
                _ => Some((w.priority, w.submit_time)),
            };
        }
        if let Some(slot) = ctx.lowest.borrow_mut().get_mut(t.idx()) {
            *slot = Some((key, low));
        }
        low
    });
    let found = lowest.is_some_and(|(p, newest)| {
        p < wl.priority
            || (policy == WithinTeam::LowerOrNewerEqualPriority
                && p == wl.priority
                && newest > wl.submit_time)
    });
    debug_assert_eq!(
        found,
        holders(ctx, t).any(|id| own_allowed(policy, wl, ctx.st.workload(id))),
        "the kept lowest candidate of team {t:?} disagrees with its candidates"
    );
    found
}

/// Whether team `t`, with `usage` admitted, stays within its nominal on every contested pair.
fn within_nominal_after(
    ctx: &Ctx,
    t: TeamId,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> bool {
    f_set.iter().all(|fr| {
        let add: i64 = usage.iter().filter(|(u, _)| u == fr).map(|(_, v)| *v).sum();
        !quota::borrows_with(ctx.st, &ctx.acct, t, *fr, add)
    })
}

/// Whether the fair-sharing search below must end without victims, told before collecting
/// and sorting candidates (each search walked every admitted workload of the borrowing teams,
/// most of a contended cycle's cost): the preemptor's team has no workload it may preempt, the
/// preemptor would borrow after admission, and its share after admission is at or above the share
/// of every team of the cohort that borrows a contested pair. Then the search picks another team
/// first, or none; its share is not above the preemptor's, so neither strategy passes (the
/// "hopeless" case below), and no second pass runs. Exactly the search's own answer.
pub(crate) fn fair_share_hopeless(
    ctx: &Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> bool {
    !own_candidate(ctx, wl) && cohort_hopeless(ctx, wl.team, usage, f_set)
}

/// The part of `fair_share_hopeless` that reads only the preemptor's team and request, not
/// its priority or submit time: team `t`, with `usage` admitted, goes above its nominal on a
/// pair of `f_set`, and its share then is at or above that of every other member borrowing one.
pub(crate) fn cohort_hopeless(
    ctx: &Ctx,
    t: TeamId,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> bool {
    let st = ctx.st;
    let team = &st.teams[t.idx()];
    // In a tree of cohorts shares are compared level by level (`tree_fair_sharing`): no
    // short-cut.
    if within_nominal_after(ctx, t, usage, f_set) || in_tree(st, t) {
        return false;
    }
    let p = quota::share(st, &ctx.acct, t, usage);
    // Every other member borrowing a contested pair has a share not above `p`: the highest of
    // them has.
    let rivals = ranked_borrowers(ctx, team.cohort, f_set);
    let highest = rivals.iter().find(|(_, m)| *m != t);
    let hopeless = highest.is_none_or(|(s, _)| p >= *s);
    debug_assert_eq!(
        hopeless,
        st.cohorts[team.cohort.idx()]
            .sharing()
            .iter()
            .filter(|m| **m != t && borrowing_in(ctx, **m, f_set))
            .all(|m| p >= ctx.share(*m)),
        "the kept rivals of team {t:?} disagree with the cohort"
    );
    hopeless
}

/// The other part of the search's answer told before it starts, for a preemptor whose team
/// holds no workload it may preempt: team `t`, with `usage` admitted, goes above its nominal on
/// a pair of `f_set`, and its request does not fit its quota even with every member whose share
/// is above its own then using none of the requested pairs (`quota_bound`). Those members are
/// the search's reach (`Pools::reach`): only their candidates can ever be taken, so no search
/// finds victims. Reads, as `cohort_hopeless`, only the team and the request.
pub(crate) fn cohort_out_of_reach(
    ctx: &mut Ctx,
    t: TeamId,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> bool {
    out_of_reach_after(ctx, t, usage, f_set, &[])
}

/// Whether no fair-sharing search finds victims for `wl` (as `cohort_out_of_reach`), its own
/// team's workloads that its policy allows it to preempt gone: what they use (of every pair:
/// any of them may be what the team's share is told by) is taken off the team's usage before
/// its share and the bound are told. Those are
/// its own candidates and more (the search also passes over those it removed, those of its
/// eviction chain and those preempted at this instant), and taking off more only lowers the
/// team's share (more members in reach) and leaves more room: a bound that fails so fails
/// for the search. Most searches of a full cohort whose short-cuts do not apply fail there.
pub(crate) fn out_of_reach_of(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> bool {
    let t = wl.team;
    let policy = ctx.st.teams[t.idx()].spec.preemption.within_team;
    let mut own: Vec<(FrId, i64)> = Vec::new();
    if own_candidate(ctx, wl) {
        for id in holders(ctx, t) {
            if !own_allowed(policy, wl, ctx.st.workload(id)) {
                continue;
            }
            let Some(a) = ctx.admission_of(id) else {
                continue;
            };
            for &(fr, v) in &a.usage {
                match own.iter_mut().find(|(x, _)| *x == fr) {
                    Some((_, o)) => *o += v,
                    None => own.push((fr, v)),
                }
            }
        }
    }
    out_of_reach_after(ctx, t, usage, f_set, &own)
}

/// `cohort_out_of_reach` with `own` (per pair) taken off the team's usage.
fn out_of_reach_after(
    ctx: &mut Ctx,
    t: TeamId,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
    own: &[(FrId, i64)],
) -> bool {
    let st = ctx.st;
    let lowest: Vec<(FrId, i64)> = usage
        .iter()
        .copied()
        .chain(own.iter().map(|(fr, v)| (*fr, -v)))
        .collect();
    if within_nominal_after(ctx, t, &lowest, f_set) || in_tree(st, t) {
        return false;
    }
    let team = &st.teams[t.idx()];
    let cohort = team.cohort;
    let reclaims = team.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::Never
        && !st.cohorts[cohort.idx()].private;
    let reach: Vec<TeamId> = if reclaims {
        let p = quota::share(st, &ctx.acct, t, &lowest);
        ranked_borrowers(ctx, cohort, f_set)
            .iter()
            .take_while(|(s, _)| *s > p)
            .map(|(_, m)| *m)
            .filter(|m| *m != t)
            .collect()
    } else {
        Vec::new()
    };
    !quota_bound(ctx, t, usage, own, &reach)
}

/// The members of `cohort` that borrow a pair of `f_set`, by share (`Rivals`). The shapes of a
/// cycle ask about the same cohort and pairs again and again: the order is kept, and when the
/// accounting changed, only the members whose usage changed are ranked again (a search takes
/// candidates off a few teams and puts them back).
fn ranked_borrowers(ctx: &Ctx, cohort: CohortId, f_set: &BTreeSet<FrId>) -> Rivals {
    let key = pairs_key(f_set);
    let changes = ctx.acct.changes();
    let slot = (cohort, changes % 2 == 1);
    let members = ctx.st.cohorts[cohort.idx()].sharing();
    let rank = |m: TeamId| borrowing_in(ctx, m, f_set).then(|| (ctx.share(m), m));
    let first = |a: &(Share, TeamId), b: &(Share, TeamId)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
    let rank_all = || -> Vec<(Share, TeamId)> {
        let mut all: Vec<(Share, TeamId)> = members.iter().filter_map(|m| rank(*m)).collect();
        all.sort_by(first);
        all
    };
    let stamps = || -> Vec<u64> { members.iter().map(|m| ctx.acct.stamp(*m)).collect() };
    let mut cache = ctx.rivals.borrow_mut();
    let ranked = match cache.get_mut(&key, &slot) {
        Some(kept) if kept.changes == changes => return kept.ranked.clone(),
        Some(kept) if kept.stamps.len() == members.len() => {
            let mut moved: Vec<TeamId> = members
                .iter()
                .zip(&kept.stamps)
                .filter(|(m, s)| ctx.acct.stamp(**m) != **s)
                .map(|(m, _)| *m)
                .collect();
            if !moved.is_empty() {
                moved.sort_unstable();
                let mut all: Vec<(Share, TeamId)> = kept
                    .ranked
                    .iter()
                    .filter(|(_, m)| moved.binary_search(m).is_err())
                    .copied()
                    .collect();
                for e in moved.into_iter().filter_map(rank) {
                    let at = all.partition_point(|x| first(x, &e).is_lt());
                    all.insert(at, e);
                }
                kept.ranked = all.into();
                kept.stamps = stamps();
            }
            kept.changes = changes;
            kept.ranked.clone()
        }
        _ => {
            let ranked: Rivals = rank_all().into();
            let kept = KeptRivals {
                changes,
                stamps: stamps(),
                ranked: ranked.clone(),
            };
            cache.insert(&key, slot, kept);
            ranked
        }
    };
    // Debug builds (every test) check the kept order against ranking every member again.
    #[cfg(debug_assertions)]
    assert_eq!(
        &ranked[..],
        &rank_all()[..],
        "cohort {cohort:?}'s kept ranking is stale"
    );
    ranked
}

/// The victim's message: who took its place, why, and the numbers behind it.
pub fn victim_message(st: &State, preemptor: &Workload, v: &Victim) -> String {
    let victim = st.workload(v.id);
    let pt = &st.teams[preemptor.team.idx()];
    let vt = &st.teams[victim.team.idx()];
    let mut msg = format!(
        "Preempted to accommodate workload {}/{} due to {}",
        pt.name(),
        preemptor.spec.name,
        v.reason.phrase()
    );
    let borrowed = quota::borrowed_by_resource(st, &st.acct, victim.team);
    let detail = match v.reason {
        PreemptReason::InClusterQueue => {
            format!("priority {} < {}", victim.priority, preemptor.priority)
        }
        _ => {
            let b: Vec<String> = borrowed
                .iter()
                .map(|(r, q)| {
                    format!(
                        "{} {}",
                        st.names.resource_name(*r),
                        st.names.format_qty(*r, *q)
                    )
                })
                .collect();
            if b.is_empty() {
                format!("team {} was using quota lent by the cohort", vt.name())
            } else {
                format!(
                    "team {} was borrowing {} above its nominal",
                    vt.name(),
                    b.join(", ")
                )
            }
        }
    };
    msg.push_str(&format!(" ({detail})"));
    msg
}

#[cfg(test)]
#[path = "preemption_taking_tests.rs"]
mod taking_tests;

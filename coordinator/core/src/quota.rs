//! Quota accounting for cohorts, flat or nested (scheduling.md §1, §6, §8; Kueue's formulas
//! for a tree of cohorts in kueue-reference.md §2).
//!
//! A flat cohort is a root: its `pool` is what its members lend plus what it owns, and a team
//! may use its own never-lent part plus what the pool has free, within its borrowing limit. A
//! cohort with a parent is a node of a tree: its `pool` is its subtree's quota (what it owns,
//! its teams lend, and its child cohorts lend up), it keeps `local` of it for its own subtree
//! (with a lending limit), and what its subtree uses beyond `local` is charged to its parent,
//! within the cohort's borrowing limit there. The flat formulas are the tree's with one level,
//! and a flat cohort takes the same steps as before trees existed.
//!
//! Static limits live in `State` (teams and cohorts), read here through `Limits`; what changes
//! with every admission lives in `Acct` (usage per team, pool usage per cohort, node
//! allocations), which the scheduler clones once per cycle and updates incrementally.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use allot_common::{CohortSpec, ResourceQuota};

use crate::ids::{CohortId, FrId, FrVec, Interner, ResId, TeamId};
use crate::nodes::NodeSet;

/// The configuration quota arithmetic reads: each team's quotas, weight and cohort, and each
/// cohort's pool. The state holds it and implements this, so the accounting sits below the
/// state (and the scheduler) rather than reading the state's fields.
pub trait Limits {
    fn names(&self) -> &Interner;
    /// The cohort team `t` belongs to.
    fn cohort_of(&self, t: TeamId) -> CohortId;
    /// Team `t`'s quota per (flavor, resource), sorted by id.
    fn quotas(&self, t: TeamId) -> &[(FrId, ResourceQuota)];
    /// Team `t`'s quota for one (flavor, resource).
    fn quota(&self, t: TeamId, fr: FrId) -> Option<&ResourceQuota>;
    /// Team `t`'s fair-share weight (0 = lowest), as numerator and denominator.
    fn weight(&self, t: TeamId) -> (u32, u32);
    fn cohort(&self, c: CohortId) -> &CohortRt;
    /// Pool usage above the pool that cohort `c` may keep on `fr` (left by a shrunken pool).
    fn pool_excess(&self, c: CohortId, fr: FrId) -> i64;
    /// The part of team `t`'s nominal on `fr` never lent: `nominal - lending_limit`.
    fn reserved(&self, t: TeamId, fr: FrId) -> i64 {
        never_lent(self.quota(t, fr))
    }
}

/// The part of a quota never lent: `nominal - lending_limit` (0 without a quota).
pub fn never_lent(q: Option<&ResourceQuota>) -> i64 {
    q.map_or(0, |q| q.nominal - q.lending_limit.unwrap_or(q.nominal))
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CohortRt {
    pub name: String,
    /// A team without a cohort gets a private one that holds only its own quota.
    pub private: bool,
    pub spec: Option<CohortSpec>,
    pub members: Vec<TeamId>,
    /// Lendable quota of the members plus cohort-owned quota, plus what child cohorts lend up:
    /// the subtree's quota.
    pub pool: FrVec,
    /// What the cohort's teams may borrow from it at most, summed over flavors, per resource:
    /// the fair-share divisor (`pool` for a root, `potential` below one).
    pub lendable_by_res: BTreeMap<ResId, i64>,
    /// The tree, rebuilt from the cohorts' specs (`State::refresh_cohort_tree`), not stored:
    /// for a flat cohort only its depth and height (1 each) are set.
    #[serde(skip)]
    pub tree: Tree,
}

/// Where a cohort sits in a tree of cohorts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tree {
    pub parent: Option<CohortId>,
    /// Its own quotas with their borrowing and lending limits (a cohort with a parent only).
    pub limits: Vec<(FrId, ResourceQuota)>,
    /// The part of `pool` kept for its own subtree (`pool - lending_limit`), never lent up.
    pub local: FrVec,
    /// The most its subtree could draw, the rest of the tree empty (a cohort with a parent).
    pub potential: FrVec,
    /// Every team of the root's tree (the teams that share quota with this cohort's, its own
    /// included): `members` for a flat cohort, which leaves it empty.
    pub shared: Vec<TeamId>,
    /// Cohort levels from this cohort up to its root, itself included (1 for a root).
    pub depth: u8,
    /// Levels from this cohort down to its farthest team: 1 for a cohort of teams, one more
    /// for each level of cohorts below it (Kueue's node height).
    pub height: u8,
}

impl CohortRt {
    /// The teams that share quota with this cohort's teams: its root's whole tree.
    pub fn sharing(&self) -> &[TeamId] {
        if self.tree.shared.is_empty() {
            &self.members
        } else {
            &self.tree.shared
        }
    }

    /// Its own quota of `fr` with its limits (a cohort with a parent only).
    pub(crate) fn limit(&self, fr: FrId) -> Option<&ResourceQuota> {
        let l = &self.tree.limits;
        l.binary_search_by_key(&fr, |(f, _)| *f)
            .ok()
            .map(|i| &l[i].1)
    }

    /// The most of `fr` its subtree may use: a root its pool; below one, its pool and what its
    /// borrowing limit lets it draw from its parent (without one, only what the parent has,
    /// which the parent's own bound checks: `None`).
    pub(crate) fn usage_bound(&self, fr: FrId) -> Option<i64> {
        match self.tree.parent {
            None => Some(self.pool.get(fr)),
            Some(_) => (self.limit(fr))
                .and_then(|q| q.borrowing_limit)
                .map(|bl| self.pool.get(fr) + bl),
        }
    }
}

/// What changes with every admission.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Acct {
    pub team_usage: Vec<FrVec>,
    /// Per cohort: sum over its teams of `max(0, usage - reserved)`.
    pub pool_used: Vec<FrVec>,
    pub nodes: NodeSet,
    /// Per team: how many times its usage has changed in this copy. Not stored: a cycle's
    /// caches of values computed from a team's usage compare it (`Ctx::share`).
    #[serde(skip)]
    stamps: Vec<u64>,
    /// How many times any team's usage has changed in this copy (`stamps` summed).
    #[serde(skip)]
    changes: u64,
    /// Whether the usage is shifted to what it will be once this cycle's victims have left
    /// (`Ctx::once_victims_leave`). A shift changes no stamp: the view is told apart by it.
    #[serde(skip)]
    victims_gone: bool,
}

impl Acct {
    /// Adds `delta` to a team's usage of `fr`, keeping the cohort's pool usage in step.
    pub fn add_usage(&mut self, st: &impl Limits, t: TeamId, fr: FrId, delta: i64) {
        if self.stamps.len() <= t.idx() {
            self.stamps.resize(t.idx() + 1, 0);
        }
        self.stamps[t.idx()] += 1;
        self.changes += 1;
        self.move_usage(st, t, fr, delta);
    }

    /// `add_usage` without counting a change: the usage and the cohort's pool usage only (and
    /// up a tree, what each cohort uses beyond its `local`).
    fn move_usage(&mut self, st: &impl Limits, t: TeamId, fr: FrId, delta: i64) {
        let reserved = st.reserved(t, fr);
        let u = &mut self.team_usage[t.idx()];
        let before = (u.get(fr) - reserved).max(0);
        u.add(fr, delta);
        let after = (u.get(fr) - reserved).max(0);
        let mut c = st.cohort_of(t);
        let mut d = after - before;
        self.pool_used[c.idx()].add(fr, d);
        while let Some(parent) = st.cohort(c).tree.parent {
            if d == 0 {
                break;
            }
            let local = st.cohort(c).tree.local.get(fr);
            let used = self.pool_used[c.idx()].get(fr);
            d = (used - local).max(0) - (used - d - local).max(0);
            self.pool_used[parent.idx()].add(fr, d);
            c = parent;
        }
    }

    /// How many times team `t`'s usage has changed in this copy, and in which view: equal
    /// stamps, equal usage.
    pub fn stamp(&self, t: TeamId) -> u64 {
        self.stamps.get(t.idx()).copied().unwrap_or(0) * 2 + u64::from(self.victims_gone)
    }

    /// How many times any team's usage has changed in this copy, and in which view: equal
    /// counts, equal usage.
    pub fn changes(&self) -> u64 {
        self.changes * 2 + u64::from(self.victims_gone)
    }

    /// Shifts the usage to the view where `leaving` (per team, what victims still hold) is
    /// gone, or back. What a victim holds is fixed by its team's stamp (it is held and counted
    /// in one change), so a stamp and the view tell the usage.
    pub(crate) fn shift_view(
        &mut self,
        st: &impl Limits,
        leaving: &BTreeMap<TeamId, Vec<(FrId, i64)>>,
        victims_gone: bool,
    ) {
        debug_assert_ne!(self.victims_gone, victims_gone, "shifted twice");
        self.victims_gone = victims_gone;
        let sign = if victims_gone { -1 } else { 1 };
        for (t, held) in leaving {
            for &(fr, v) in held {
                self.move_usage(st, *t, fr, sign * v);
            }
        }
    }

    pub fn usage(&self, t: TeamId, fr: FrId) -> i64 {
        self.team_usage[t.idx()].get(fr)
    }

    pub fn add_all(&mut self, st: &impl Limits, t: TeamId, usage: &[(FrId, i64)], sign: i64) {
        for (fr, v) in usage {
            self.add_usage(st, t, *fr, sign * v);
        }
    }

    /// What `read` finds with each `(team, pair, delta)` of `moves` added (and up the teams'
    /// cohorts), the accounting left as it was. No change is counted (as `with_added`).
    pub(crate) fn with_moved<R>(
        &mut self,
        st: &impl Limits,
        moves: &[(TeamId, FrId, i64)],
        read: impl FnOnce(&Acct) -> R,
    ) -> R {
        for &(t, fr, v) in moves {
            self.move_usage(st, t, fr, v);
        }
        let found = read(self);
        for &(t, fr, v) in moves.iter().rev() {
            self.move_usage(st, t, fr, -v);
        }
        found
    }

    /// What `read` finds with `usage` added to team `t` (and up its cohorts), the accounting
    /// left as it was. No change is counted: a stamp or count taken before still tells it.
    pub(crate) fn with_added<R>(
        &mut self,
        st: &impl Limits,
        (t, usage): (TeamId, &[(FrId, i64)]),
        read: impl FnOnce(&Acct) -> R,
    ) -> R {
        for (fr, v) in usage {
            self.move_usage(st, t, *fr, *v);
        }
        let found = read(self);
        for (fr, v) in usage {
            self.move_usage(st, t, *fr, -v);
        }
        found
    }
}

/// How much more of `fr` team `t` may use now (scheduling.md §1).
pub fn available(st: &impl Limits, acct: &Acct, t: TeamId, fr: FrId) -> i64 {
    let Some(q) = st.quota(t, fr) else { return 0 };
    let usage = acct.usage(t, fr);
    let reserved = st.reserved(t, fr);
    let pool_free = cohort_available(st, acct, st.cohort_of(t), fr);
    let from_pool = match q.borrowing_limit {
        Some(bl) => pool_free.min(q.nominal + bl - usage.max(reserved)),
        None => pool_free,
    };
    ((reserved - usage).max(0) + from_pool).max(0)
}

/// How much more of `fr` cohort `c`'s subtree may draw now: what its pool has free, and below
/// a root, its own `local` part left plus what its parent has free, within its borrowing
/// limit (kueue-reference.md §2).
pub fn cohort_available(st: &impl Limits, acct: &Acct, c: CohortId, fr: FrId) -> i64 {
    let cohort = st.cohort(c);
    let used = acct.pool_used[c.idx()].get(fr);
    let Some(parent) = cohort.tree.parent else {
        return cohort.pool.get(fr) - used;
    };
    let local = cohort.tree.local.get(fr);
    let above = cohort_available(st, acct, parent, fr);
    let above = match cohort.limit(fr).and_then(|q| q.borrowing_limit) {
        Some(bl) => above.min(cohort.pool.get(fr) - local - (used - local).max(0) + bl),
        None => above,
    };
    (local - used).max(0) + above
}

/// The most of `fr` cohort `c`'s subtree could ever draw, the rest of the tree empty.
pub fn cohort_potential(st: &impl Limits, c: CohortId, fr: FrId) -> i64 {
    let cohort = st.cohort(c);
    match cohort.tree.parent {
        None => cohort.pool.get(fr),
        Some(_) => cohort.tree.potential.get(fr),
    }
}

/// Whether cohort `c`'s subtree uses more of `fr` than its own quota (`pool`): it borrows from
/// its parent. A root never does.
pub fn cohort_borrowing(st: &impl Limits, acct: &Acct, c: CohortId, fr: FrId) -> bool {
    let cohort = st.cohort(c);
    cohort.tree.parent.is_some() && acct.pool_used[c.idx()].get(fr) > cohort.pool.get(fr)
}

/// The most of `fr` team `t` could ever use, with the cohort otherwise empty.
pub fn potential_available(st: &impl Limits, t: TeamId, fr: FrId) -> i64 {
    let Some(q) = st.quota(t, fr) else { return 0 };
    let max = st.reserved(t, fr) + cohort_potential(st, st.cohort_of(t), fr);
    match q.borrowing_limit {
        Some(bl) => max.min(q.nominal + bl),
        None => max,
    }
}

/// How high in its tree a request of `val` of `fr` by team `t`, which uses `usage` of it,
/// borrows (Kueue's borrow level; a lower one goes first): 0 within its nominal; else the
/// height of the lowest cohort on its way up whose own quota has room for what exceeds the
/// quota kept below, or the root's where none has. Every borrowing request of a flat cohort
/// is at level 1.
pub fn borrow_level(
    st: &impl Limits,
    acct: &Acct,
    t: TeamId,
    fr: FrId,
    val: i64,
    usage: i64,
) -> u8 {
    let nominal = st.quota(t, fr).map_or(0, |q| q.nominal);
    if usage + val <= nominal {
        return 0;
    }
    st.cohort(lowest_fit(st, acct, t, fr, (val, usage)))
        .tree
        .height
        .max(1)
}

/// The dominant resource of what is `borrowed` against what is `lendable`: the largest
/// borrowed / lendable ratio, as (borrowed * 1000, lendable, resource); ties keep the smaller
/// name. Resources not borrowed never win over one that is (and none borrowed is none).
fn dominant(
    st: &impl Limits,
    borrowed: &[(ResId, i64)],
    lendable: &BTreeMap<ResId, i64>,
) -> Option<(i128, i128, ResId)> {
    let mut best: Option<(i128, i128, ResId)> = None;
    for (r, b) in borrowed {
        if *b == 0 {
            continue;
        }
        let lendable = lendable.get(r).copied().unwrap_or(0);
        if lendable <= 0 {
            continue;
        }
        let cand = (i128::from(*b) * 1000, i128::from(lendable), *r);
        best = match best {
            Some(cur) => {
                let (keep, take) = (cur.0 * cand.1, cand.0 * cur.1);
                let smaller_name =
                    || st.names().resource_name(cur.2) <= st.names().resource_name(cand.2);
                if keep > take || (keep == take && smaller_name()) {
                    Some(cur)
                } else {
                    Some(cand)
                }
            }
            None => Some(cand),
        };
    }
    best
}

/// A cohort's dominant-resource share as its parent sees it (Kueue's DRS of a cohort): what its
/// subtree uses beyond its own quota (`pool`), per resource over its flavors, against what its
/// parent could lend (the parent's fair-share divisor); weight 1. A root's is zero.
pub fn cohort_share(st: &impl Limits, acct: &Acct, c: CohortId) -> Share {
    let cohort = st.cohort(c);
    let Some(parent) = cohort.tree.parent else {
        return Share::ZERO;
    };
    let mut borrowed: smallvec::SmallVec<[(ResId, i64); 8]> = smallvec::SmallVec::new();
    for (i, used) in acct.pool_used[c.idx()].0.iter().enumerate() {
        let fr = FrId(i as u32);
        let b = (used - cohort.pool.get(fr)).max(0);
        if b == 0 {
            continue;
        }
        let (_, r) = st.names().fr_parts(fr);
        match borrowed.iter_mut().find(|(x, _)| *x == r) {
            Some((_, acc)) => *acc += b,
            None => borrowed.push((r, b)),
        }
    }
    let Some((num, den, _)) = dominant(st, &borrowed, &st.cohort(parent).lendable_by_res) else {
        return Share::ZERO;
    };
    // Divided by the cohort's weight, as a team's share by its own (1 where none is given).
    let weight = (cohort.spec.as_ref())
        .and_then(|s| s.fair_share_weight)
        .unwrap_or((1, 1));
    weighed(num, den, weight)
}

/// Cohort `c` and the cohorts above it, up to its root.
pub fn ancestors(st: &impl Limits, c: CohortId) -> impl Iterator<Item = CohortId> + '_ {
    std::iter::successors(Some(c), move |x| st.cohort(*x).tree.parent)
}

/// A borrow level as the admission order reads it: under fair sharing only whether it
/// borrows (Kueue's fair-sharing order: non-borrowing first, then the share), else the level.
pub fn order_level(fair_share: bool, level: u8) -> u8 {
    if fair_share {
        level.min(1)
    } else {
        level
    }
}

/// The lowest cohort on team `t`'s way up whose own quota has room for what a request of
/// `val` of `fr` (the team using `usage` of it) needs beyond the quota kept below it: each
/// level's kept part left over covers some, the rest goes up (Kueue's lowest subtree that
/// fits). The root where none below it has.
pub fn lowest_fit(
    st: &impl Limits,
    acct: &Acct,
    t: TeamId,
    fr: FrId,
    (val, usage): (i64, i64),
) -> CohortId {
    let mut left = val - (st.reserved(t, fr) - usage).max(0);
    let mut last = st.cohort_of(t);
    for c in ancestors(st, st.cohort_of(t)) {
        last = c;
        let cohort = st.cohort(c);
        let used = acct.pool_used[c.idx()].get(fr);
        if cohort.tree.parent.is_none() || used + left <= cohort.pool.get(fr) {
            break;
        }
        left -= (cohort.tree.local.get(fr) - used).max(0);
    }
    last
}

/// Whether the team uses more than its nominal on `fr`.
pub fn is_borrowing(st: &impl Limits, acct: &Acct, t: TeamId, fr: FrId) -> bool {
    borrows_with(st, acct, t, fr, 0)
}

/// Whether the team would use more than its nominal on `fr` with `add` more in use.
pub fn borrows_with(st: &impl Limits, acct: &Acct, t: TeamId, fr: FrId, add: i64) -> bool {
    let nominal = st.quota(t, fr).map(|q| q.nominal).unwrap_or(0);
    acct.usage(t, fr) + add > nominal
}

/// Why a usage does not fit a team's quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub fr: FrId,
    pub requested: i64,
    pub available: i64,
    pub potential: i64,
}

/// The one quota test used when deciding and when applying: every (flavor, resource) of `usage`
/// must be within what the team may use now; with `allow_borrowing == false` the team must also
/// stay within its nominal.
pub fn fits(
    st: &impl Limits,
    acct: &Acct,
    t: TeamId,
    usage: &[(FrId, i64)],
    allow_borrowing: bool,
) -> Result<(), Shortfall> {
    for (fr, v) in usage {
        let avail = available(st, acct, t, *fr);
        let within_nominal = allow_borrowing || !borrows_with(st, acct, t, *fr, *v);
        if *v > avail || !within_nominal {
            return Err(Shortfall {
                fr: *fr,
                requested: *v,
                available: avail,
                potential: potential_available(st, t, *fr),
            });
        }
    }
    Ok(())
}

/// A weighted dominant-resource share, compared exactly (no floating point).
///
/// Finite shares are `num / den`; a team with weight 0 that borrows has an infinite share, and
/// two infinite shares compare by their unweighted value (kept in `num / den`).
#[derive(Clone, Copy, Debug)]
pub struct Share {
    pub infinite: bool,
    pub num: i128,
    pub den: i128,
}

impl Share {
    pub const ZERO: Share = Share {
        infinite: false,
        num: 0,
        den: 1,
    };
    pub fn value(&self) -> f64 {
        if self.infinite {
            f64::INFINITY
        } else {
            self.num as f64 / self.den as f64
        }
    }
    /// The unweighted or weighted ratio as a float, for display.
    pub fn ratio(&self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl PartialEq for Share {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Share {}
impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Share {
    fn cmp(&self, other: &Self) -> Ordering {
        self.infinite.cmp(&other.infinite).then_with(|| {
            match (
                self.num.checked_mul(other.den),
                other.num.checked_mul(self.den),
            ) {
                (Some(a), Some(b)) => a.cmp(&b),
                // Bytes of memory times a fractional weight's numerator and denominator can
                // pass i128: compare the fractions without multiplying.
                _ => cmp_fractions(self.num, self.den, other.num, other.den),
            }
        })
    }
}

/// `a / b` against `c / d` for `a, c >= 0` and `b, d > 0`, exactly and without overflow: by
/// whole parts, then the remainders' fractions inverted (a continued fraction's steps).
fn cmp_fractions(mut a: i128, mut b: i128, mut c: i128, mut d: i128) -> Ordering {
    let mut flipped = false;
    loop {
        if b <= 0 || d <= 0 {
            return Ordering::Equal;
        }
        let (qa, ra) = (a / b, a % b);
        let (qc, rc) = (c / d, c % d);
        let o = match qa.cmp(&qc) {
            Ordering::Equal => match (ra == 0, rc == 0) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                (false, false) => {
                    // ra/b against rc/d is the reverse of b/ra against d/rc.
                    (a, b, c, d) = (b, ra, d, rc);
                    flipped = !flipped;
                    continue;
                }
            },
            o => o,
        };
        return if flipped { o.reverse() } else { o };
    }
}

/// Weighted share of team `t` with `extra` usage added (scheduling.md §6): the maximum over
/// resources of 1000 × borrowed / lendable-to-it, divided by the team's weight.
pub fn share(st: &impl Limits, acct: &Acct, t: TeamId, extra: &[(FrId, i64)]) -> Share {
    let cohort = st.cohort(st.cohort_of(t));
    // Borrowed per resource; teams have a handful of resources, so a small vector beats a map
    // (on the stack: a cycle computes shares for every team at every judgement).
    let mut borrowed: smallvec::SmallVec<[(ResId, i64); 8]> = smallvec::SmallVec::new();
    for (fr, q) in st.quotas(t) {
        let (_, r) = st.names().fr_parts(*fr);
        let mut u = acct.usage(t, *fr);
        for (efr, v) in extra {
            if efr == fr {
                u += v;
            }
        }
        let b = (u - q.nominal).max(0);
        match borrowed.iter_mut().find(|(x, _)| *x == r) {
            Some((_, acc)) => *acc += b,
            None => borrowed.push((r, b)),
        }
    }
    let Some((num, den, _)) = dominant(st, &borrowed, &cohort.lendable_by_res) else {
        return Share::ZERO;
    };
    weighed(num, den, st.weight(t))
}

/// The share `num / den` divided by weight `wn / wd`: the same numbers for a whole weight
/// (wd = 1); a weight of 0 makes a share that borrows infinite, compared by its unweighted
/// value.
fn weighed(num: i128, den: i128, (wn, wd): (u32, u32)) -> Share {
    if wn == 0 {
        return Share {
            infinite: true,
            num,
            den,
        };
    }
    Share {
        infinite: false,
        num: num * i128::from(wd.max(1)),
        den: den * i128::from(wn),
    }
}

/// What a team borrows per resource (summed over flavors).
pub fn borrowed_by_resource(st: &impl Limits, acct: &Acct, t: TeamId) -> BTreeMap<ResId, i64> {
    let mut m = BTreeMap::new();
    for (fr, q) in st.quotas(t) {
        let b = (acct.usage(t, *fr) - q.nominal).max(0);
        if b > 0 {
            let (_, r) = st.names().fr_parts(*fr);
            *m.entry(r).or_insert(0) += b;
        }
    }
    m
}

/// Per-cohort check used by invariants: pool usage within the pool.
pub fn cohort_within_pool(st: &impl Limits, acct: &Acct, c: CohortId) -> Result<(), String> {
    let cohort = st.cohort(c);
    for (i, used) in acct.pool_used[c.idx()].0.iter().enumerate() {
        let fr = FrId(i as u32);
        let allowed = st.pool_excess(c, fr);
        if cohort.usage_bound(fr).is_some_and(|b| *used > b + allowed) {
            return Err(format!(
                "cohort {} uses {} of its pool of {} for {}",
                cohort.name,
                used,
                cohort.pool.get(fr),
                st.names().describe_fr(fr)
            ));
        }
    }
    Ok(())
}

/// The part of `usage` that would be above the team's nominal, per resource.
pub fn borrowed_part(
    st: &impl Limits,
    acct: &Acct,
    t: TeamId,
    usage: &[(FrId, i64)],
) -> Vec<(ResId, i64)> {
    let mut m: BTreeMap<ResId, i64> = BTreeMap::new();
    for (fr, v) in usage {
        let nominal = st.quota(t, *fr).map(|q| q.nominal).unwrap_or(0);
        let u = acct.usage(t, *fr);
        let over = (u + v - nominal).max(0) - (u - nominal).max(0);
        if over > 0 {
            let (_, r) = st.names().fr_parts(*fr);
            *m.entry(r).or_insert(0) += over;
        }
    }
    m.into_iter().collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn shares_compare_exactly_where_their_products_would_overflow() {
        use std::cmp::Ordering::*;
        let big = i128::MAX / 3;
        for (a, b, c, d, want) in [
            (1, 3, 1, 3, Equal),
            (2, 3, 3, 4, Less),
            (7, 2, 10, 3, Greater),
            (big, big - 1, big - 1, big - 2, Less),
            (big, 7, big, 7, Equal),
            (0, 5, 0, big, Equal),
            (0, 5, 1, big, Less),
        ] {
            assert_eq!(cmp_fractions(a, b, c, d), want, "{a}/{b} against {c}/{d}");
            let s = |num, den| Share {
                infinite: false,
                num,
                den,
            };
            assert_eq!(s(a, b).cmp(&s(c, d)), want, "{a}/{b} against {c}/{d}");
        }
        // Every small pair agrees with the cross products.
        for a in 0..16 {
            for b in 1..16 {
                for c in 0..16 {
                    for d in 1..16 {
                        assert_eq!(cmp_fractions(a, b, c, d), (a * d).cmp(&(c * b)));
                    }
                }
            }
        }
    }

    use super::*;

    #[test]
    fn shares_compare_exactly() {
        // 8000/12/80 == 2000/12/20 exactly, which floating point might not say.
        let a = Share {
            infinite: false,
            num: 8000,
            den: 12 * 80,
        };
        let b = Share {
            infinite: false,
            num: 2000,
            den: 12 * 20,
        };
        assert_eq!(a, b);
        let inf_small = Share {
            infinite: true,
            num: 1000,
            den: 9,
        };
        let inf_big = Share {
            infinite: true,
            num: 3000,
            den: 9,
        };
        assert!(inf_small > a);
        assert!(inf_big > inf_small);
        assert!(Share::ZERO < a);
    }
}

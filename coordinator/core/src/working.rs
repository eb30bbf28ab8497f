//! The working accounting of a cycle: a copy of the state's accounting that decisions are
//! applied to as they are made, and the shared admission test (`Ctx::fits`: quota, then room
//! on nodes). It sits below both the scheduler, which decides, and preemption, which searches
//! for victims: each removes and restores candidates here, and neither calls the other back.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use crate::ids::{CohortId, FlavorId, FrId, ResId, TeamId, WlId};
use crate::nodes::PodAlloc;
use crate::quota::{self, Acct, Share};
use crate::state::{Admission, State, Time, Workload};

/// The working state of a cycle.
pub struct Ctx<'a> {
    pub st: &'a State,
    pub acct: Acct,
    /// Workloads removed from `acct` (victims) in this cycle or in a running search.
    /// Changed through `remove`, `restore`, `hold` and their batch forms only (they count
    /// each change: `removals`).
    pub(crate) removed: BTreeSet<WlId>,
    pub now: Time,
    /// Admissions decided earlier in this cycle. They are preemption candidates like admitted
    /// workloads (the most recently admitted of all); taking one withdraws it from the plan.
    /// Changed through `plan` and `unplan` only (the cycle's kept candidate lists count on it).
    pub(crate) planned: BTreeMap<WlId, (TeamId, Admission)>,
    /// Per team: how many times the admissions it holds (admitted, or planned in this cycle)
    /// have changed in this cycle.
    versions: Vec<u64>,
    /// Per (team, contested pairs): the team's admissions that use one of the pairs, removed
    /// or not, at the team's version (`preemption::users`); once a search needs them in order,
    /// in the search's order. The searches of one cycle read the same teams again and again.
    pub(crate) users: RefCell<UsersCache>,
    /// Per (team, contested pairs): the distinct usages of the team's admissions that use one
    /// of the pairs, at the team's version (`preemption::usages`).
    pub(crate) usages: RefCell<UsagesCache>,
    /// Per team: its share (`quota::share` with nothing added) at its usage stamp.
    shares: RefCell<Vec<Option<(u64, Share)>>>,
    /// Per (cohort, contested pairs): the members borrowing one of the pairs by share, at the
    /// accounting's change count (`preemption::ranked_borrowers`).
    pub(crate) rivals: RefCell<RivalsCache>,
    /// What the cycle's decisions changed, and when.
    pub(crate) changes: Changes,
    /// How many times `removed` has changed.
    removals: u64,
    /// Per team: how many times `removed` has changed for one of its workloads.
    team_removals: Vec<u64>,
    /// Per team: the lowest priority among its candidates, with the latest submit time at
    /// that priority, at its version and removals (`removals_of`; `preemption::own_candidate`).
    pub(crate) lowest: RefCell<Vec<Option<LowestHolder>>>,
    /// Per team: the usage its victims of this cycle still hold (`hold`), which they give up
    /// once their evictions complete. Victim searches run where it is gone
    /// (`once_victims_leave`).
    leaving: BTreeMap<TeamId, Vec<(FrId, i64)>>,
    /// Whether the last `preemption::find_victims` found no victim needed once this cycle's
    /// victims have left (it said `None` because the workload waits for them).
    pub(crate) fits_once_victims_leave: bool,
}

/// See `Ctx::lowest`: ((version, removals), (priority, submit time)).
pub(crate) type LowestHolder = ((u64, u64), Option<(i32, Time)>);

/// What a cycle's decisions changed, per (flavor, resource) pair, on a clock that counts
/// decisions: an outcome judged at clock `c` still holds while nothing it reads (`Reads`)
/// changed after `c`.
#[derive(Default)]
pub(crate) struct Changes {
    pub clock: u64,
    at: BTreeMap<(FlavorId, ResId), u64>,
    shares_at: u64,
    all_at: u64,
}

impl Changes {
    /// A decision touched `t`.
    pub fn record(&mut self, t: &crate::reads::Touched) {
        self.clock += 1;
        let c = self.clock;
        if t.all {
            self.all_at = c;
        }
        if t.shares {
            self.shares_at = c;
        }
        for p in &t.pairs {
            self.at.insert(*p, c);
        }
    }

    /// Whether nothing `reads` names changed after clock `judged`.
    pub fn unchanged_since(&self, judged: u64, reads: &crate::reads::Reads) -> bool {
        self.all_at <= judged
            && (!reads.shares || self.shares_at <= judged)
            && reads
                .pairs
                .iter()
                .all(|p| self.at.get(p).is_none_or(|c| *c <= judged))
    }
}

/// See `Ctx::users`: per (team, pairs), the version, the workloads, and whether they are
/// in order.
pub(crate) type UsersCache = ByPairs<TeamId, (u64, Rc<[WlId]>, bool)>;

/// Values kept per (set of pairs, key), looked up by the pairs as a slice: the searches of a
/// cycle ask thousands of times, and a lookup that built its key allocated each time.
pub(crate) struct ByPairs<K, V>(BTreeMap<Vec<FrId>, BTreeMap<K, V>>);

impl<K, V> Default for ByPairs<K, V> {
    fn default() -> Self {
        ByPairs(BTreeMap::new())
    }
}

impl<K: Ord, V> ByPairs<K, V> {
    pub(crate) fn get(&self, pairs: &[FrId], k: &K) -> Option<&V> {
        self.0.get(pairs)?.get(k)
    }

    pub(crate) fn get_mut(&mut self, pairs: &[FrId], k: &K) -> Option<&mut V> {
        self.0.get_mut(pairs)?.get_mut(k)
    }

    pub(crate) fn insert(&mut self, pairs: &[FrId], k: K, v: V) {
        match self.0.get_mut(pairs) {
            Some(m) => {
                m.insert(k, v);
            }
            None => {
                self.0.insert(pairs.to_vec(), BTreeMap::from([(k, v)]));
            }
        }
    }
}

/// A set of pairs as `ByPairs` keys it (in order), without allocating for the usual few.
pub(crate) fn pairs_key(f_set: &BTreeSet<FrId>) -> smallvec::SmallVec<[FrId; 8]> {
    f_set.iter().copied().collect()
}

/// An admission's usage, as a fair-sharing search compares it.
pub(crate) type Usage = smallvec::SmallVec<[(FrId, i64); 8]>;

/// What taking admission `a` off adds to its team's usage: its usage, negated.
pub(crate) fn taken_off(a: &Admission) -> Usage {
    a.usage.iter().map(|(fr, v)| (*fr, -v)).collect()
}

/// See `Ctx::usages`: per (team, pairs), the version and the distinct usages.
pub(crate) type UsagesCache = ByPairs<TeamId, (u64, Rc<[Usage]>)>;

/// See `Ctx::rivals`: per (cohort, pairs) and view (whether the usage is shifted to the
/// cycle's victims gone: `Acct::changes`' low bit), the members borrowing one of the pairs by
/// share.
pub(crate) type RivalsCache = ByPairs<(CohortId, bool), KeptRivals>;

/// A cohort's ranking as kept: the accounting's change count and every member's stamp
/// (`Acct::stamp`, in the cohort's order) it was made at. A member whose stamp moved is
/// ranked again; the others keep their place.
pub(crate) struct KeptRivals {
    pub changes: u64,
    pub stamps: Vec<u64>,
    pub ranked: Rivals,
}

/// A cohort's members that borrow one of some pairs, as (share, team): highest share first,
/// ties to the lowest team id (the fair-sharing search's order of target teams).
pub(crate) type Rivals = Rc<[(Share, TeamId)]>;

/// `Ctx::admission_of` from the parts of a context, for a caller that changes its accounting
/// meanwhile.
pub fn admission_in<'s>(
    st: &'s State,
    planned: &'s BTreeMap<WlId, (TeamId, Admission)>,
    id: WlId,
) -> Option<&'s Admission> {
    match planned.get(&id) {
        Some((_, a)) => Some(a),
        None => st.workload(id).admission.as_ref(),
    }
}

impl<'a> Ctx<'a> {
    pub fn new(st: &'a State, now: Time) -> Self {
        Self::with_acct(st, now, st.acct.clone())
    }

    /// A context on `acct`, which must equal `st.acct`.
    pub fn with_acct(st: &'a State, now: Time, acct: Acct) -> Self {
        Ctx {
            st,
            acct,
            removed: BTreeSet::new(),
            now,
            planned: BTreeMap::new(),
            versions: vec![0; st.teams.len()],
            users: RefCell::new(ByPairs::default()),
            usages: RefCell::new(ByPairs::default()),
            shares: RefCell::new(vec![None; st.teams.len()]),
            rivals: RefCell::new(ByPairs::default()),
            changes: Changes::default(),
            removals: 0,
            team_removals: vec![0; st.teams.len()],
            lowest: RefCell::new(vec![None; st.teams.len()]),
            leaving: BTreeMap::new(),
            fits_once_victims_leave: false,
        }
    }

    /// Team `t`'s share now (`quota::share` with nothing added), kept until its usage changes:
    /// the fair-sharing searches of one cycle compare every team of the cohort, search after
    /// search.
    pub fn share(&self, t: TeamId) -> Share {
        let stamp = self.acct.stamp(t);
        if let Some(Some((s, share))) = self.shares.borrow().get(t.idx()) {
            if *s == stamp {
                debug_assert_eq!(*share, quota::share(self.st, &self.acct, t, &[]));
                return *share;
            }
        }
        let share = quota::share(self.st, &self.acct, t, &[]);
        if let Some(slot) = self.shares.borrow_mut().get_mut(t.idx()) {
            *slot = Some((stamp, share));
        }
        share
    }

    /// Team `t`'s share without its admission `id` (which it holds now).
    pub fn share_without(&self, t: TeamId, id: WlId) -> Share {
        let without: Usage = self.admission_of(id).map(taken_off).unwrap_or_default();
        quota::share(self.st, &self.acct, t, &without)
    }

    /// How many times the admissions team `t` holds have changed in this cycle.
    pub(crate) fn version(&self, t: TeamId) -> u64 {
        self.versions.get(t.idx()).copied().unwrap_or(0)
    }

    /// How many times the workloads removed from the working state have changed.
    pub(crate) fn removals(&self) -> u64 {
        self.removals
    }

    /// How many times the removed workloads of team `t` have changed.
    pub(crate) fn removals_of(&self, t: TeamId) -> u64 {
        self.team_removals.get(t.idx()).copied().unwrap_or(0)
    }

    /// Counts a change to whether `id` is removed.
    fn count_removal(&mut self, id: WlId) {
        self.removals += 1;
        let t = self.st.workload(id).team;
        if let Some(n) = self.team_removals.get_mut(t.idx()) {
            *n += 1;
        }
    }

    fn touch(&mut self, id: WlId) {
        let t = self.st.workload(id).team;
        if let Some(v) = self.versions.get_mut(t.idx()) {
            *v += 1;
        }
    }

    /// Records an admission decided in this cycle.
    pub fn plan(&mut self, id: WlId, team: TeamId, adm: Admission) {
        self.planned.insert(id, (team, adm));
        self.touch(id);
    }

    /// Takes back an admission decided in this cycle.
    pub fn unplan(&mut self, id: WlId) {
        self.planned.remove(&id);
        self.touch(id);
    }

    /// The admission a candidate holds: decided in this cycle, or in the state.
    pub fn admission_of(&self, id: WlId) -> Option<&Admission> {
        admission_in(self.st, &self.planned, id)
    }

    /// Removes an admitted (or planned) workload's usage and pods from the working copy.
    pub fn remove(&mut self, id: WlId) {
        // Borrowed beside `acct`, not cloned: searches remove and restore candidates by the
        // thousand in a contended cycle.
        if let Some(adm) = admission_in(self.st, &self.planned, id) {
            for (_, p) in &adm.placement {
                self.acct.nodes.release(p);
            }
        }
        self.remove_counted(id);
    }

    /// `remove`, the workload's pods left on their nodes: a victim search that counts the room
    /// its removals make on the nodes as they were (`RoomCount`) gives their pods back only
    /// once the preemptor fits (`shift_nodes`), and not at all when it puts them back
    /// (`restore_counted`). Most searches fail, and giving pods back and taking them again was
    /// a fifth of a contended cycle.
    pub(crate) fn remove_counted(&mut self, id: WlId) {
        self.shift_usage(id, -1);
        self.removed.insert(id);
        self.count_removal(id);
    }

    /// Undoes `remove_counted`.
    pub(crate) fn restore_counted(&mut self, id: WlId) {
        self.shift_usage(id, 1);
        self.removed.remove(&id);
        self.count_removal(id);
    }

    /// Takes an admitted (or planned) workload's usage off the accounting (`sign` -1), or
    /// counts it again (1), and nothing else: it stays a candidate, its pods on their nodes.
    /// For a dry walk (`preemption::search_within`), which never looks at a candidate twice
    /// and puts every one back before anything else reads the working copy.
    pub(crate) fn shift_usage(&mut self, id: WlId, sign: i64) {
        let st = self.st;
        if let Some(adm) = admission_in(st, &self.planned, id) {
            self.acct
                .add_all(st, st.workload(id).team, &adm.usage, sign);
        }
    }

    /// Gives back on their nodes the pods of workloads `ids` (`sign` -1), or takes them again
    /// (1), in one index update per touched node: with `remove_counted`, removed as `remove`
    /// removes.
    pub(crate) fn shift_nodes(&mut self, ids: &[WlId], sign: i64) {
        let Ctx {
            st, acct, planned, ..
        } = self;
        let pods: Vec<&PodAlloc> = ids
            .iter()
            .filter_map(|id| admission_in(st, planned, *id))
            .flat_map(|a| a.placement.iter().map(|(_, p)| p))
            .collect();
        if sign < 0 {
            acct.nodes.release_many(pods.iter().copied());
        } else {
            acct.nodes.retake_many(pods.iter().copied());
        }
    }

    /// Runs `f` on the usage as it will be once this cycle's victims have left (those that
    /// `hold` their room), with the usage of the preemptors that wait for them reserved.
    ///
    /// A victim holds its quota until its eviction completes, so an admission planned now must
    /// fit with it still there. A victim search plans for later: its preemptor is admitted
    /// only once its own victims are gone, and by then so are the others. Searching with both
    /// the earlier victims and their preemptors counted overstates what the cohort uses by
    /// every earlier preemptor's request: each later search then took more victims to make up
    /// for it (one GPU's preemptor took eighteen one-GPU victims), and those victims were
    /// requeued to preempt in turn. Kueue likewise checks a preemptor against its cycle's
    /// usage with every victim chosen so far taken off.
    pub fn once_victims_leave<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        if self.leaving.is_empty() {
            return f(self);
        }
        self.acct.shift_view(self.st, &self.leaving, true);
        let r = f(self);
        self.acct.shift_view(self.st, &self.leaving, false);
        r
    }

    /// Whether victims of this cycle hold usage they will give up (`once_victims_leave`).
    pub(crate) fn has_leavers(&self) -> bool {
        !self.leaving.is_empty()
    }

    /// Undoes `remove`.
    pub fn restore(&mut self, id: WlId) {
        if let Some(adm) = admission_in(self.st, &self.planned, id) {
            for (_, p) in &adm.placement {
                // The same allocation was released by `remove`; nothing else holds it now.
                let _ = self.acct.nodes.take_exact(p);
            }
        }
        self.restore_counted(id);
    }

    /// Counts a victim, removed by `remove`, as holding its room again for the rest of the
    /// cycle: it keeps it until its eviction completes. Its quota usage comes back whole; on its
    /// nodes it takes back whatever of its pods' room the preemptor's reservation left free.
    /// An admission planned in this cycle and withdrawn (none in the state) holds nothing.
    /// Either way it stays out of later victim searches.
    pub fn hold(&mut self, id: WlId) {
        let st = self.st;
        let wl = st.workload(id);
        if let Some(adm) = &wl.admission {
            for (_, p) in &adm.placement {
                self.acct.nodes.retake_free_part(p);
            }
            self.acct.add_all(st, wl.team, &adm.usage, 1);
            let held = self.leaving.entry(wl.team).or_default();
            for &(fr, v) in &adm.usage {
                match held.iter_mut().find(|(x, _)| *x == fr) {
                    Some((_, h)) => *h += v,
                    None => held.push((fr, v)),
                }
            }
        }
        self.removed.insert(id);
        self.count_removal(id);
    }

    /// Removes many candidates at once (one index update per touched node).
    pub fn remove_many(&mut self, ids: &[WlId]) {
        self.shift_nodes(ids, -1);
        for id in ids {
            self.remove_counted(*id);
        }
    }

    /// Undoes `remove_many`.
    pub fn restore_many(&mut self, ids: &[WlId]) {
        self.shift_nodes(ids, 1);
        for id in ids {
            self.restore_counted(*id);
        }
    }

    /// Places every pod set on its flavor; on success the pods stay allocated in the working
    /// copy. All or nothing.
    pub fn place_all(
        &mut self,
        wl: &Workload,
        place: &[(usize, FlavorId, u32)],
    ) -> Result<Vec<(usize, PodAlloc)>, (usize, FlavorId)> {
        let mut out: Vec<(usize, PodAlloc)> = Vec::new();
        for (i, f, count) in place {
            match self
                .acct
                .nodes
                .place_in(*f, &wl.pod_reqs[*i], *count, wl.topology())
            {
                Ok(allocs) => out.extend(allocs.into_iter().map(|a| (*i, a))),
                Err(_) => {
                    for (_, a) in out.iter().rev() {
                        self.acct.nodes.release(a);
                    }
                    return Err((*i, *f));
                }
            }
        }
        Ok(out)
    }

    /// The shared admission test: quota (`quota::fits`) and, with placement, room on nodes.
    pub fn fits(
        &mut self,
        wl: &Workload,
        usage: &[(FrId, i64)],
        place: &[(usize, FlavorId, u32)],
        allow_borrowing: bool,
    ) -> bool {
        if quota::fits(self.st, &self.acct, wl.team, usage, allow_borrowing).is_err() {
            return false;
        }
        if !self.st.placement || place.is_empty() {
            return true;
        }
        if let [(i, f, count)] = place {
            // One pod set: counted on the nodes, nothing placed.
            return self
                .acct
                .nodes
                .try_place_in(*f, &wl.pod_reqs[*i], *count, wl.topology())
                .is_ok();
        }
        match self.place_all(wl, place) {
            Ok(allocs) => {
                for (_, a) in allocs.iter().rev() {
                    self.acct.nodes.release(a);
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// What a flavor's nodes add to the pairs contested for `count` pods of `reqs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeShortfall {
    /// The pods can be placed there.
    Room,
    /// These pairs of the flavor are too short on their own. Only they make other teams'
    /// borrowing work candidates: a workload short of cpu on the nodes does not reclaim from a
    /// team because that team borrows GPUs.
    Pairs(BTreeSet<FrId>),
    /// Each resource has room on its own, but split across nodes: every pair the pod set
    /// requests is contested.
    Split,
}

impl NodeShortfall {
    /// Adds what it contests to `pairs`, or flavor `f` whole to `flavors` when the room is split.
    pub(crate) fn contest(
        self,
        f: FlavorId,
        pairs: &mut BTreeSet<FrId>,
        flavors: &mut BTreeSet<FlavorId>,
    ) {
        match self {
            NodeShortfall::Room => {}
            NodeShortfall::Pairs(p) => pairs.extend(p),
            NodeShortfall::Split => {
                flavors.insert(f);
            }
        }
    }
}

/// Whether `count` pods of `reqs` fit on flavor `f`'s nodes, and if not which pairs are short.
/// A resource short on its own needs no placement attempt to tell; only otherwise are the pods
/// placed (and given back) to tell room from a split.
pub(crate) fn node_shortfall(
    st: &State,
    nodes: &mut crate::nodes::NodeSet,
    f: FlavorId,
    reqs: &[(ResId, i64)],
    count: u32,
    ask: Option<allot_common::topology::Ask>,
) -> NodeShortfall {
    let short: BTreeSet<FrId> = nodes
        .short_resources(f, reqs, count)
        .into_iter()
        .filter_map(|r| st.names.find_fr(f, r))
        .collect();
    if !short.is_empty() {
        NodeShortfall::Pairs(short)
    } else if nodes.try_place_in(f, reqs, count, ask).is_err() {
        NodeShortfall::Split
    } else {
        NodeShortfall::Room
    }
}

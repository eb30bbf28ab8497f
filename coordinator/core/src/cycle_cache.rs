//! What one cycle learned that the next can reuse: the outcomes of its first generation (the
//! working state before its first decision), per workload shape, each with what it read
//! (`Reads`), and the state they were computed from. The next cycle compares its state with
//! that one (`Basis::touched`) and starts from every outcome whose reads nothing touched: a
//! submit into a full cluster then costs the new workload's shape, and an admission or a
//! completion costs the shapes that read the pairs it used, not every shape waiting. After a
//! cycle whose decisions were all admissions, it keeps instead what holds at that cycle's end,
//! on the state the cycle leaves (`CycleCache::store_after`).
//!
//! The comparison is exact: it holds the nodes and the admitted workloads it saw (shared, so
//! the copy costs a reference count each, and an address can never be reused while it is
//! held) and compares what changed by value; it compares each queue by its length and entry
//! sum, and everything else a first generation reads whole (a change there keeps nothing).
//!
//! When a cycle found every pending workload waiting, the cache also says so (`settled`): with
//! nothing they read touched and the queues unchanged, each still waits, so a workload
//! submitted then is decided on the state as it is, exactly as the next cycle would decide it
//! (`scheduler::schedule_settled`, the leader's submit fast path behind a backlog).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use allot_common::{ClusterPolicy, CohortSpec, TeamSpec};

use crate::ids::{CohortId, FrId, FrVec, TeamId, WlId};
use crate::nodes::NodeVec;
use crate::plan::{Admission, PlannedAdmission};
use crate::quota::{Acct, Share};
use crate::reads::{Reads, Touched};
use crate::shapes::ByShape;
use crate::state::{CohortRt, State, Time, WlState, Workload};
use crate::witness::Witness;
use crate::working::Changes;

/// A (team, shape) key of the fast path: the shape fingerprint, the submit time where the
/// team's policy compares it, and whether the workload is a preemptor.
pub(crate) type FastShape = (u128, Time, bool);

/// A team's admitted workloads as a basis holds them, in id order.
type Admitted = Vec<(WlId, Arc<Workload>)>;

/// What of a basis a later state holds exactly: per team, whether its admitted workloads are
/// the ones the basis holds, and whether every node is.
#[derive(Default)]
struct Same {
    teams: Vec<bool>,
    nodes: bool,
}

/// What a first generation reads apart from the pending queues.
#[derive(Clone)]
pub(crate) struct Basis {
    placement: bool,
    /// Compared whole; shared with the next basis when it is equal (cloning every team's
    /// spec each cycle was a measurable part of a cycle's cost).
    config: Arc<Config>,
    /// Per team; a team whose admitted workloads are those of the last basis shares its list
    /// (holding every admitted workload anew each cycle, and letting go of the last cycle's,
    /// was most of a quiet cycle at 10,000 nodes).
    admitted: Vec<Arc<Admitted>>,
    team_usage: Vec<FrVec>,
    pool_used: Vec<FrVec>,
    /// Shared with the last basis when every node is the one it held (as `admitted`).
    nodes: NodeVec,
    idle_capacity: BTreeMap<FrId, i64>,
    pool_excess: Vec<FrVec>,
    team_excess: Vec<FrVec>,
    names: (usize, usize, usize),
    forgotten: u64,
    /// Last cycle's preemptors, which go first: compared by the settled proof only. A kept
    /// wait is never a preemptor's (`store`), and no other judgement reads who preempts (a
    /// preemption changes what its victims and its preemptor use, which is compared). Dropping
    /// every kept wait and witness when they changed made each cycle after a preemption
    /// judge every waiting shape anew: 72 % of the judgements on the 3,000-workload scenario.
    preemptors: BTreeSet<WlId>,
    /// Each team's queue, as its length and sum (`TeamRt::queue_sum`): holding the queues
    /// themselves would make the state copy each one the next time it changes.
    pending: Vec<(usize, u128)>,
    /// In a basis of a cycle's end (`CycleCache::store_after`): the admissions it planned,
    /// held in `admitted` as their pending workloads, compared with the next state by value.
    expected: BTreeMap<WlId, Admission>,
    /// The workloads preempted at this basis's instant that held quota again
    /// (`State::readmitted_at`), in id order: no preemption could pick them. A later state
    /// where that differs (the instant passed, or more were readmitted) changes what a search
    /// may take as much as an admission would, so each one that differs is touched.
    readmitted: Vec<WlId>,
    /// The instant of the cycle this basis was taken for.
    at: Time,
    /// With `expected`: the latest admission time of the other admitted workloads (`Time::MAX`
    /// where one has none). The planned ones were the most recent of all in their cycle, so
    /// in the next state they must be admitted after it, all at once, to be taken in the
    /// same order by a victim search (`preemption::order`).
    newest: Time,
}

/// The policies, quotas and cohorts a basis compares whole.
#[derive(PartialEq)]
struct Config {
    policy: ClusterPolicy,
    cohort_specs: BTreeMap<String, CohortSpec>,
    cohorts: Vec<CohortRt>,
    teams: Vec<(TeamSpec, CohortId)>,
}

impl Config {
    fn of(st: &State) -> Config {
        Config {
            policy: st.policy.clone(),
            cohort_specs: st.cohort_specs.clone(),
            cohorts: st.cohorts.clone(),
            teams: st
                .teams
                .iter()
                .map(|t| (t.spec.clone(), t.cohort))
                .collect(),
        }
    }

    fn holds_for(&self, st: &State) -> bool {
        self.policy == st.policy
            && self.teams.len() == st.teams.len()
            && self
                .teams
                .iter()
                .zip(&st.teams)
                .all(|((spec, c), t)| *c == t.cohort && *spec == t.spec)
            && self.cohort_specs == st.cohort_specs
            && self.cohorts == st.cohorts
    }
}

impl Basis {
    /// The basis of `st`; `config`, when given, must hold for it (`Config::holds_for`).
    /// `same`, when given: a basis and, per team, whether `st` holds exactly the admitted
    /// workloads it holds (`touched_teams`), whose lists are shared.
    fn of(
        st: &State,
        now: Time,
        config: Option<Arc<Config>>,
        same: Option<(&Basis, &Same)>,
    ) -> Basis {
        Basis {
            readmitted: st.readmitted_at(now),
            at: now,
            placement: st.placement,
            config: config.unwrap_or_else(|| Arc::new(Config::of(st))),
            admitted: st
                .teams
                .iter()
                .enumerate()
                .map(|(i, t)| match same {
                    Some((old, same))
                        if same.teams.get(i) == Some(&true) && i < old.admitted.len() =>
                    {
                        old.admitted[i].clone()
                    }
                    _ => Arc::new(
                        t.admitted
                            .iter()
                            .filter_map(|id| st.workloads.get(id).map(|w| (*id, w.clone())))
                            .collect(),
                    ),
                })
                .collect(),
            team_usage: st.acct.team_usage.clone(),
            pool_used: st.acct.pool_used.clone(),
            nodes: match same {
                Some((old, same)) if same.nodes => old.nodes.clone(),
                _ => st.acct.nodes.nodes.clone(),
            },
            idle_capacity: st.idle_capacity.clone(),
            pool_excess: st.pool_excess.clone(),
            team_excess: st.team_excess.clone(),
            names: st.names.sizes(),
            forgotten: st.forgotten,
            preemptors: st.preemptors.clone(),
            pending: st
                .teams
                .iter()
                .map(|t| (t.pending.len(), t.queue_sum))
                .collect(),
            expected: BTreeMap::new(),
            newest: Time::MIN,
        }
    }

    /// This basis with `admitted` made, as they were planned on it, and `acct` the working
    /// accounting after them (`CycleCache::store_after`); none when one of them is a
    /// preemptor (its admission changes what a basis compares whole).
    fn after(&self, st: &State, admitted: &[PlannedAdmission], acct: &Acct) -> Option<Basis> {
        let newest = self
            .admitted
            .iter()
            .flat_map(|l| l.iter())
            .map(|(_, w)| w.admitted_at.unwrap_or(Time::MAX))
            .max()
            .unwrap_or(Time::MIN);
        let mut b = Basis {
            team_usage: acct.team_usage.clone(),
            pool_used: acct.pool_used.clone(),
            nodes: acct.nodes.nodes.clone(),
            // Never the queues of a state: a basis of a cycle's end backs no settled proof.
            pending: vec![(usize::MAX, 0); self.pending.len()],
            expected: BTreeMap::new(),
            newest,
            ..self.clone()
        };
        for a in admitted {
            let w = st.workloads.get(&a.wl)?;
            // Planned as it was preempted at this instant: no candidate in that cycle, none
            // in the next at the same instant either, once admitted.
            if w.preempted_by.as_ref().is_some_and(|p| p.time == self.at) {
                if let Err(at) = b.readmitted.binary_search(&a.wl) {
                    b.readmitted.insert(at, a.wl);
                }
            }
            if w.preempting.is_some() || w.state != WlState::Pending {
                return None;
            }
            let list = Arc::make_mut(b.admitted.get_mut(w.team.idx())?);
            let at = list.partition_point(|(id, _)| *id < a.wl);
            list.insert(at, (a.wl, w.clone()));
            b.expected.insert(a.wl, a.admission.clone());
        }
        Some(b)
    }

    /// What changed from the state this was taken from to `st`, as far as a waiting
    /// workload's judgement reads it (see `reads`).
    pub(crate) fn touched(&self, st: &State, now: Time) -> Touched {
        self.touched_teams(st, now).0
    }

    /// `touched`, and what of this basis `st` holds exactly (nothing when everything is
    /// touched).
    fn touched_teams(&self, st: &State, instant: Time) -> (Touched, Same) {
        let mut t = Touched::default();
        if self.placement != st.placement
            || self.names != st.names.sizes()
            || !self.config.holds_for(st)
            || self.team_usage.len() != st.acct.team_usage.len()
            || self.pool_used.len() != st.acct.pool_used.len()
            || self.pool_excess.len() != st.pool_excess.len()
            || self.team_excess.len() != st.team_excess.len()
        {
            t.all = true;
            return (t, Same::default());
        }
        t.forgotten = self.forgotten != st.forgotten;
        let fr_count = st.names.fr_count();
        let pair = |t: &mut Touched, i: usize| {
            if i < fr_count {
                t.pairs.insert(st.names.fr_parts(FrId(i as u32)));
            } else {
                t.all = true;
            }
        };
        for (i, (a, b)) in self.team_usage.iter().zip(&st.acct.team_usage).enumerate() {
            if a == b {
                continue;
            }
            for k in 0..a.0.len().max(b.0.len()) {
                let fr = FrId(k as u32);
                let (x, y) = (a.get(fr), b.get(fr));
                if x == y {
                    continue;
                }
                pair(&mut t, k);
                if crate::reads::borrowing_moved(st, TeamId(i as u32), fr, x, y) {
                    t.shares = true;
                }
            }
        }
        for (old, new) in [
            (&self.pool_used, &st.acct.pool_used),
            (&self.pool_excess, &st.pool_excess),
            (&self.team_excess, &st.team_excess),
        ] {
            for (a, b) in old.iter().zip(new) {
                if a == b {
                    continue;
                }
                for k in 0..a.0.len().max(b.0.len()) {
                    if a.get(FrId(k as u32)) != b.get(FrId(k as u32)) {
                        pair(&mut t, k);
                    }
                }
            }
        }
        if self.idle_capacity != st.idle_capacity {
            let keys: BTreeSet<FrId> = self
                .idle_capacity
                .keys()
                .chain(st.idle_capacity.keys())
                .copied()
                .collect();
            for fr in keys {
                if self.idle_capacity.get(&fr) != st.idle_capacity.get(&fr) {
                    pair(&mut t, fr.idx());
                }
            }
        }
        let now = &st.acct.nodes.nodes;
        let mut nodes_same = self.nodes.len() == now.len();
        for (a, b) in now.changed_since(&self.nodes) {
            match a {
                Some(a) => {
                    nodes_same = false;
                    t.node(a, b)
                }
                None => t.whole_node(b),
            }
        }
        if self.nodes.len() > now.len() {
            t.all = true;
        }
        let teams = self.touch_admitted(st, &mut t);
        self.touch_readmitted(st, instant, &mut t);
        self.touch_run_time_ended(st, instant, &mut t);
        (
            t,
            Same {
                teams,
                nodes: nodes_same,
            },
        )
    }

    /// The admitted workloads that came, went or changed: what each one's admission uses.
    /// Returns, per team, whether none did.
    fn touch_admitted(&self, st: &State, t: &mut Touched) -> Vec<bool> {
        let mut same = vec![false; st.teams.len()];
        let touch = |t: &mut Touched, adm: Option<&Admission>| match adm {
            Some(adm) => t.admission(st, adm),
            None => t.all = true,
        };
        // What a held workload's admission uses: the planned one for an expected workload.
        fn admission<'b>(
            expected: &'b BTreeMap<WlId, Admission>,
            id: &WlId,
            w: &'b Workload,
        ) -> Option<&'b Admission> {
            expected.get(id).or(w.admission.as_ref())
        }
        let on_time = self.expected_on_time(st);
        // An expected admission made as planned, by the same workload, at the time it must be.
        let as_planned = |id: &WlId, was: &Workload, now: &Workload| {
            on_time
                && now.state == WlState::Admitted
                && now.priority == was.priority
                && self
                    .expected
                    .get(id)
                    .is_some_and(|e| now.admission.as_ref() == Some(e))
        };
        for (i, (old, team)) in self.admitted.iter().zip(&st.teams).enumerate() {
            let mut mine = old.iter().peekable();
            let mut theirs = team.admitted.iter().peekable();
            let mut unchanged = true;
            loop {
                match (mine.peek(), theirs.peek()) {
                    (None, None) => break,
                    (Some((a, w)), Some(b)) if a == *b => {
                        let now = st.workloads.get(b);
                        if !now.is_some_and(|x| Arc::ptr_eq(x, w)) {
                            unchanged = false;
                            if !now.is_some_and(|x| as_planned(a, w, x)) {
                                touch(t, admission(&self.expected, a, w));
                                touch(t, now.and_then(|x| x.admission.as_ref()));
                            }
                        }
                        mine.next();
                        theirs.next();
                    }
                    (Some((a, w)), b) if b.is_none_or(|b| a < *b) => {
                        unchanged = false;
                        touch(t, admission(&self.expected, a, w));
                        mine.next();
                    }
                    (_, Some(b)) => {
                        unchanged = false;
                        touch(t, st.workloads.get(b).and_then(|x| x.admission.as_ref()));
                        theirs.next();
                    }
                    (Some(_), None) => break,
                }
            }
            // An admitted id without a workload is not in the list: never shared then.
            same[i] = unchanged && old.len() == team.admitted.len();
        }
        same
    }

    /// The workloads whose protection from preemption at the instant (`State::readmitted_at`)
    /// differs between this basis and `st` at `now`: what each one's admission uses.
    fn touch_readmitted(&self, st: &State, now: Time, t: &mut Touched) {
        let now_ids = st.readmitted_at(now);
        if now_ids == self.readmitted {
            return;
        }
        // Both lists are short (the victims of one instant) and sorted.
        let only_in = |a: &[WlId], b: &[WlId]| -> Vec<WlId> {
            a.iter()
                .filter(|id| b.binary_search(id).is_err())
                .copied()
                .collect()
        };
        let mut differ = only_in(&self.readmitted, &now_ids);
        differ.extend(only_in(&now_ids, &self.readmitted));
        for id in differ {
            // One that left quota meanwhile is touched by `touch_admitted`.
            if let Some(adm) = st.workloads.get(&id).and_then(|w| w.admission.as_ref()) {
                t.admission(st, adm);
            }
        }
    }

    /// The admitted workloads whose minimum run time (`protection`) ended between this basis's
    /// instant and `now` (or, with a clock stepped back, began again): a search may take
    /// them now where it could not, as if they had been admitted anew. A workload planned in
    /// the cycle this basis ends (`expected`) counts as admitted at its instant.
    fn touch_run_time_ended(&self, st: &State, now: Time, t: &mut Touched) {
        let policy = &self.config.policy;
        let m = policy.stability.minimum_run_ms();
        if m == 0 || now == self.at {
            return;
        }
        let (lo, hi) = (self.at.min(now), self.at.max(now));
        for (id, w) in self.admitted.iter().flat_map(|l| l.iter()) {
            let admitted_at = match w.admitted_at {
                Some(a) if w.admission.is_some() => a,
                _ if self.expected.contains_key(id) => self.at,
                _ => continue,
            };
            let Some(until) = crate::protection::run_time_ends(policy, admitted_at) else {
                continue;
            };
            if lo < until && until <= hi {
                // One that left quota meanwhile is touched by `touch_admitted`.
                if let Some(adm) = st.workloads.get(id).and_then(|w| w.admission.as_ref()) {
                    t.admission(st, adm);
                }
            }
        }
    }

    /// Whether `st` admitted every expected workload it admits at one time, after every other
    /// admitted workload this basis holds: then a victim search orders them among the others
    /// as the cycle that planned them did. Where not, each expected one counts as changed.
    fn expected_on_time(&self, st: &State) -> bool {
        let mut at: Option<Time> = None;
        for id in self.expected.keys() {
            let Some(w) = st
                .workloads
                .get(id)
                .filter(|w| w.state == WlState::Admitted)
            else {
                continue;
            };
            match (w.admitted_at, at) {
                (Some(x), None) if x > self.newest => at = Some(x),
                (Some(x), Some(y)) if x == y => {}
                _ => return false,
            }
        }
        true
    }

    /// Whether every team's queue is the one this was taken from.
    fn same_queues(&self, st: &State) -> bool {
        self.pending.len() == st.teams.len()
            && self
                .pending
                .iter()
                .zip(&st.teams)
                .all(|(a, t)| *a == (t.pending.len(), t.queue_sum))
    }
}

/// Drops from `found` what `t` touched. The table is emptied and refilled rather than
/// retained: one emptied in place keeps its tombstones, and every later cycle's lookups probe
/// past them. Its room is kept: the cycle finds most of what was dropped again.
fn drop_touched<K: std::hash::Hash + Eq, T>(found: &mut ByShape<K, Found<T>>, t: &Touched) {
    let kept: Vec<_> = found.drain().filter(|(_, f)| !t.hits(&f.reads)).collect();
    found.extend(kept);
}

/// The most shapes whose reads a cache keeps (past it, it starts again).
const MAX_READS: usize = 100_000;

/// A plain shape's outcome or key part found in a cycle: in which generation (the first
/// one's are kept for the next cycle) and at which clock (`Changes`), what the judgement read,
/// and the last clock it was found to hold at.
#[derive(Clone)]
pub(crate) struct Found<T> {
    pub gen: u64,
    pub judged: u64,
    checked: Cell<u64>,
    pub reads: Arc<Reads>,
    pub value: T,
}

impl<T> Found<T> {
    pub fn new(gen: u64, judged: u64, reads: Arc<Reads>, value: T) -> Self {
        Found {
            gen,
            judged,
            checked: Cell::new(judged),
            reads,
            value,
        }
    }

    /// Whether it still holds: nothing it read changed since it was found.
    pub fn holds(&self, ch: &Changes) -> bool {
        if self.checked.get() == ch.clock {
            return true;
        }
        let ok = ch.unchanged_since(self.judged, &self.reads);
        if ok {
            self.checked.set(ch.clock);
        }
        ok
    }
}

/// Per plain shape, its tournament-key part: (borrows, share).
pub(crate) type KeyParts = ByShape<u128, Found<(u8, Share)>>;
/// Per fast shape, its outcome when found waiting (no capacity held): reason and message.
pub(crate) type FastMemo = ByShape<FastShape, Found<(Arc<str>, Arc<str>)>>;
/// Per fast shape (not a preemptor's), the last wait found for it that a `Witness` knows,
/// with that witness: kept across cycles while the configuration holds (it is compared by
/// value where it is used, so no change to the state makes it wrong).
pub(crate) type Witnessed = ByShape<FastShape, Known>;

/// A wait (reason and message) with the `Witness` that recognises it, and what its judgement
/// reads (`Reads`, for the `Found` it makes again).
pub(crate) struct Known {
    pub witness: Witness,
    pub wait: (Arc<str>, Arc<str>),
    pub reads: Arc<Reads>,
}

/// The first-generation outcomes of the last cycle run with this cache, and what they were
/// computed from. Keep one per scheduler (the simulator's loop, the leader) and pass it to
/// every cycle; any cycle may also run without it.
#[derive(Default)]
pub struct CycleCache {
    basis: Option<Arc<Basis>>,
    /// Plain shapes found waiting in a first generation, and their key parts (none of a
    /// preemptor: see `settled`).
    waits: FastMemo,
    key_parts: KeyParts,
    /// What each shape's judgement reads, per fingerprint: it changes only with what a basis
    /// compares whole (and the nodes' flavors).
    pub(crate) reads: ByShape<u128, Arc<Reads>>,
    /// Each shape's request fingerprint (what its fingerprint fixes: it never goes stale).
    pub(crate) requests: ByShape<u128, u128>,
    /// Waits known by what they read (`Witness`), for the next cycle to recognise.
    pub(crate) witnesses: Witnessed,
    /// Whether the last cycle found every pending workload waiting (`settled` gathers the
    /// proof).
    settled: bool,
    /// Cycles that started from some of the last one's outcomes, and cycles run.
    pub reused: u64,
    pub cycles: u64,
    /// How many waits were recognised by what they read (`Witness`) instead of judged.
    pub recognised: u64,
    /// How many heads (and entries foreseen ahead of their turn) were judged anew
    /// (`decision::process` run for them).
    pub judged: u64,
}

impl CycleCache {
    /// Keeps the outcomes that still hold on `st` (nothing they read was touched since the
    /// last cycle's state), drops the others, and returns the basis of `st` to `store` with
    /// this cycle's outcomes.
    pub(crate) fn start(&mut self, st: &State, now: Time) -> Arc<Basis> {
        self.cycles += 1;
        self.settled = false;
        let old = self.basis.take();
        let touched = old.as_ref().map(|b| b.touched_teams(st, now));
        let mut config = None;
        let mut same = Same::default();
        match (touched, &old) {
            (Some((t, teams)), Some(old)) if !t.all => {
                same = teams;
                if !t.is_empty() {
                    drop_touched(&mut self.waits, &t);
                    drop_touched(&mut self.key_parts, &t);
                }
                if !self.waits.is_empty() || !self.key_parts.is_empty() {
                    self.reused += 1;
                }
                if old.nodes.len() != st.acct.nodes.nodes.len() || self.reads.len() > MAX_READS {
                    self.reads.clear();
                    // They hold their waits' reads too.
                    self.witnesses.clear();
                }
                if self.witnesses.len() > MAX_READS {
                    self.witnesses.clear();
                }
                config = Some(old.config.clone());
            }
            _ => {
                self.waits.clear();
                self.key_parts.clear();
                self.reads.clear();
                self.witnesses.clear();
            }
        }
        if self.requests.len() > MAX_READS {
            self.requests.clear();
        }
        let same = old.as_deref().map(|b| (b, &same));
        Arc::new(Basis::of(st, now, config, same))
    }

    /// What the last cycle found that still holds (after `start`), for this cycle to go on
    /// from: each as found at clock 0 of a first generation.
    pub(crate) fn take_found(&mut self) -> (FastMemo, KeyParts) {
        let (mut waits, mut parts) = (
            std::mem::take(&mut self.waits),
            std::mem::take(&mut self.key_parts),
        );
        // Each was found at clock 0 already (a first generation's); said again, so that
        // nothing rests on the clock and the generation moving together.
        for f in waits.values_mut() {
            f.gen = 0;
            f.judged = 0;
            f.checked.set(0);
        }
        for f in parts.values_mut() {
            f.gen = 0;
            f.judged = 0;
            f.checked.set(0);
        }
        (waits, parts)
    }

    /// Keeps a cycle's first-generation outcomes, found on `basis` (what `start` returned):
    /// those of the first generation that are not a preemptor's.
    pub(crate) fn store(
        &mut self,
        basis: Arc<Basis>,
        mut waits: FastMemo,
        mut key_parts: KeyParts,
    ) {
        self.basis = Some(basis);
        waits.retain(|(_, _, preempting), f| f.gen == 0 && !preempting);
        key_parts.retain(|_, f| f.gen == 0);
        self.waits = waits;
        self.key_parts = key_parts;
    }

    /// Keeps what holds at the end of a cycle whose decisions were all admissions of
    /// workloads that preempt nothing (`admitted`, as planned), instead of its first
    /// generation's outcomes (`store`, called at its first decision): the outcomes found since
    /// its last decision, and those before that no decision touched, with the basis they hold
    /// on, the last one with `admitted` made (`acct`: the working accounting at the end).
    /// A cycle then starts from what the cycle before found after its admissions, instead of
    /// judging every shape they touched again. Where the basis cannot be taken, what `store`
    /// kept stays.
    pub(crate) fn store_after(
        &mut self,
        st: &State,
        admitted: &[PlannedAdmission],
        acct: &Acct,
        mut waits: FastMemo,
        mut key_parts: KeyParts,
        changes: &Changes,
    ) {
        let Some(after) = self
            .basis
            .as_ref()
            .and_then(|b| b.after(st, admitted, acct))
        else {
            return;
        };
        self.basis = Some(Arc::new(after));
        waits.retain(|(_, _, preempting), f| !preempting && f.holds(changes));
        key_parts.retain(|_, f| f.holds(changes));
        self.waits = waits;
        self.key_parts = key_parts;
    }

    /// Marks the last cycle as one that found every pending workload waiting.
    pub(crate) fn mark_settled(&mut self) {
        self.settled = true;
    }

    /// When the last cycle found every pending workload waiting: the proof, to check against
    /// a later state (`Settled::holds`). It gathers what every wait read, a pass over them:
    /// ask once per cycle, where the cycle ran (the simulator never asks).
    pub fn settled(&self) -> Option<Settled> {
        if !self.settled {
            return None;
        }
        // Shapes share few pairs: gathered in a set, not merged (and sorted) one by one.
        let mut all = Reads::default();
        let mut pairs = BTreeSet::new();
        for f in self.waits.values() {
            pairs.extend(f.reads.pairs.iter().copied());
            all.shares |= f.reads.shares;
            all.chain |= f.reads.chain;
        }
        all.pairs = pairs.into_iter().collect();
        Some(Settled {
            basis: self.basis.clone()?,
            reads: Arc::new(all),
        })
    }
}

/// A cycle found every pending workload waiting, on `basis`; `reads` is what their judgements
/// read. Cheap to clone (two shared pointers).
#[derive(Clone)]
pub struct Settled {
    basis: Arc<Basis>,
    reads: Arc<Reads>,
}

impl Settled {
    /// Whether every workload pending in `st` at `now` waits there too: the queues are the
    /// ones the cycle saw, and nothing their judgements read was touched since.
    pub fn holds(&self, st: &State, now: Time) -> bool {
        self.basis.same_queues(st)
            && self.basis.preemptors == st.preemptors
            && !self.basis.touched(st, now).hits(&self.reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_cluster::{cluster, submit};
    use allot_common::{ResourceName, Resources, WorkloadSpec};

    /// One cycle with `cache`, applied.
    fn cycle(st: &mut State, cache: &mut CycleCache, now: Time) {
        let plan = crate::scheduler::schedule_cached(st, now, cache);
        st.apply_plan(&plan, now);
    }

    fn basis(cache: &CycleCache) -> Arc<Basis> {
        cache.basis.clone().expect("a cycle ran")
    }

    #[test]
    fn a_basis_shares_what_did_not_change_since_the_last() {
        let mut st = cluster(&["a", "b"], 2);
        for (i, t) in ["a", "a", "b", "b"].iter().enumerate() {
            submit(&mut st, &format!("w{i}"), t, 4, 0);
        }
        // Full: the next two wait.
        submit(&mut st, "late-a", "a", 4, 0);
        submit(&mut st, "late-b", "b", 4, 0);
        let mut cache = CycleCache::default();
        cycle(&mut st, &mut cache, 0);
        cycle(&mut st, &mut cache, 0);
        let first = basis(&cache);
        assert_eq!(first.admitted.iter().map(|a| a.len()).sum::<usize>(), 4);
        // An arrival changes no admitted workload and no node: all is shared.
        submit(&mut st, "later-b", "b", 4, 1);
        cycle(&mut st, &mut cache, 1);
        let second = basis(&cache);
        assert!(first.nodes.shares_all(&second.nodes));
        for (x, y) in first.admitted.iter().zip(&second.admitted) {
            assert!(Arc::ptr_eq(x, y));
        }
        // A finish in team a: its list and the nodes are taken anew, team b's is still shared.
        let done = st
            .teams
            .iter()
            .find(|t| t.name() == "a")
            .and_then(|t| t.admitted.iter().next().copied())
            .expect("team a runs a workload");
        st.finish(done, true, 2).expect("it finishes");
        let a = st.teams.iter().position(|t| t.name() == "a").expect("a");
        let running: Vec<WlId> = st.teams[a].admitted.iter().copied().collect();
        cycle(&mut st, &mut cache, 2);
        let third = basis(&cache);
        let b = 1 - a;
        assert!(!second.nodes.shares_all(&third.nodes));
        // Only the finished workload's node changed.
        assert_eq!(third.nodes.changed_since(&second.nodes).count(), 1);
        assert!(!Arc::ptr_eq(&second.admitted[a], &third.admitted[a]));
        assert!(Arc::ptr_eq(&second.admitted[b], &third.admitted[b]));
        // The cycle admitted team a's waiting workload into the room: what it holds is the
        // state as the cycle left it, team a without the finished workload and with that one,
        // expected as planned.
        let now: Vec<WlId> = st.teams[a].admitted.iter().copied().collect();
        let new: Vec<WlId> = now
            .iter()
            .filter(|id| !running.contains(id))
            .copied()
            .collect();
        assert_eq!(
            new.len(),
            1,
            "one workload of team a admitted into the room"
        );
        let ids: Vec<WlId> = third.admitted[a].iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, now);
        assert!(!ids.contains(&done));
        assert_eq!(third.expected.keys().copied().collect::<Vec<_>>(), new);
        // The next state is that one: nothing the kept outcomes read counts as touched.
        assert!(third.touched(&st, 0).is_empty());
    }

    #[test]
    fn a_preemption_touches_what_it_moved_and_unsettles_the_backlog() {
        // Team a (one node of 8 GPUs) runs `low`; `high` preempts it, `late` waits.
        let mut st = cluster(&["a"], 1);
        let mut cache = CycleCache::default();
        submit(&mut st, "low", "a", 8, 0);
        cycle(&mut st, &mut cache, 0);
        let mut spec = {
            let mut req = Resources::new();
            req.set(ResourceName::gpu(), 8);
            WorkloadSpec::single("high", "a", 1, req)
        };
        spec.priority = allot_common::PriorityRef::Value(10);
        st.submit(spec, 1).expect("valid workload");
        submit(&mut st, "late", "a", 8, 1);
        cycle(&mut st, &mut cache, 1);
        let high = st.find_workload("high").expect("high exists");
        assert!(st.preemptors.contains(&high), "high preempts low");
        // What the preemption changed is what its victim and preemptor use: the pairs they
        // read, not everything (last cycle's preemptors are compared by what they change).
        let touched = basis(&cache).touched(&st, 1);
        assert!(!touched.all, "a new preemptor drops no kept wait by itself");
        // Once every pending workload waits, the proof holds only while the preemptors are
        // those it saw: one that loses its head start is judged as a plain workload again.
        let low = st.find_workload("low").expect("low exists");
        let ev = st.complete_eviction(low, 1);
        assert!(!ev.is_empty());
        cycle(&mut st, &mut cache, 1);
        cycle(&mut st, &mut cache, 1);
        let proof = cache.settled().expect("everything left waits");
        assert!(proof.holds(&st, 1));
        let mut other = st.clone();
        other.preemptors.insert(low);
        assert!(!proof.holds(&other, 1));
    }

    /// Team a (8 GPUs, one node of 8) runs `y` since time 0; `x` and `z` arrive at 0, a cycle
    /// at 0 plans `x` (`z` waits), and the plan is applied at `applied`. Returns the state and
    /// the cache after that cycle.
    fn admitted_at(applied: Time) -> (State, CycleCache) {
        let mut st = cluster(&["a"], 1);
        let mut cache = CycleCache::default();
        submit(&mut st, "y", "a", 4, 0);
        cycle(&mut st, &mut cache, 0);
        submit(&mut st, "x", "a", 4, 0);
        submit(&mut st, "z", "a", 4, 0);
        let plan = crate::scheduler::schedule_cached(&st, 0, &mut cache);
        let x = st.find_workload("x").expect("x exists");
        assert_eq!(
            plan.admissions.iter().map(|a| a.wl).collect::<Vec<_>>(),
            [x]
        );
        st.apply_plan(&plan, applied);
        (st, cache)
    }

    #[test]
    fn a_cycle_that_only_admits_keeps_what_holds_after_its_admissions() {
        // Applied later than every other admission: the state is the one the cycle left, and
        // `z`'s wait, found after `x` was planned, is kept.
        let (st, mut cache) = admitted_at(1);
        let end = basis(&cache);
        assert!(end.touched(&st, 0).is_empty());
        assert!(!cache.waits.is_empty());
        let reused = cache.reused;
        let plan = crate::scheduler::schedule_cached(&st, 1, &mut cache);
        assert!(!plan.has_decisions());
        assert_eq!(cache.reused, reused + 1);
        // Applied at the time `y` was admitted: a victim search would order `x` and `y` by
        // name, where the cycle took `x` as the most recent. What `x` uses counts as touched.
        let (st, cache) = admitted_at(0);
        let touched = basis(&cache).touched(&st, 0);
        assert!(!touched.all);
        assert!(!touched.pairs.is_empty());
    }
}

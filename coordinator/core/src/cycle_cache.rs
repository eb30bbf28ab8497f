//! What one cycle learned that the next can reuse: the outcomes of its first generation (the
//! working state before its first decision), per workload shape, each with what it read
//! (`Reads`), and the state they were computed from. The next cycle compares its state with
//! that one (`Basis::touched`) and starts from every outcome whose reads nothing touched: a
//! submit into a full cluster then costs the new workload's shape, and an admission or a
//! completion costs the shapes that read the pairs it used, not every shape waiting.
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
use crate::nodes::Node;
use crate::quota::Share;
use crate::reads::{Reads, Touched};
use crate::shapes::ByShape;
use crate::state::{CohortRt, State, Time, Workload};
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
    nodes: Arc<Vec<Arc<Node>>>,
    idle_capacity: BTreeMap<FrId, i64>,
    pool_excess: Vec<FrVec>,
    team_excess: Vec<FrVec>,
    names: (usize, usize, usize),
    forgotten: u64,
    preemptors: BTreeSet<WlId>,
    /// Each team's queue, as its length and sum (`TeamRt::queue_sum`): holding the queues
    /// themselves would make the state copy each one the next time it changes.
    pending: Vec<(usize, u128)>,
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
    fn of(st: &State, config: Option<Arc<Config>>, same: Option<(&Basis, &Same)>) -> Basis {
        Basis {
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
                _ => Arc::new(st.acct.nodes.nodes.clone()),
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
        }
    }

    /// What changed from the state this was taken from to `st`, as far as a waiting
    /// workload's judgement reads it (see `reads`).
    pub(crate) fn touched(&self, st: &State) -> Touched {
        self.touched_teams(st).0
    }

    /// `touched`, and what of this basis `st` holds exactly (nothing when everything is
    /// touched).
    fn touched_teams(&self, st: &State) -> (Touched, Same) {
        let mut t = Touched::default();
        if self.placement != st.placement
            || self.names != st.names.sizes()
            || !self.config.holds_for(st)
            || self.preemptors != st.preemptors
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
        for (i, b) in now.iter().enumerate() {
            match self.nodes.get(i) {
                Some(a) if Arc::ptr_eq(a, b) => {}
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
        let touch = |t: &mut Touched, w: Option<&Arc<Workload>>| match w
            .and_then(|w| w.admission.as_ref())
        {
            Some(adm) => t.admission(st, adm),
            None => t.all = true,
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
                            touch(t, Some(w));
                            touch(t, now);
                        }
                        mine.next();
                        theirs.next();
                    }
                    (Some((a, w)), b) if b.is_none_or(|b| a < *b) => {
                        unchanged = false;
                        touch(t, Some(w));
                        mine.next();
                    }
                    (_, Some(b)) => {
                        unchanged = false;
                        touch(t, st.workloads.get(b));
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
pub(crate) type KeyParts = ByShape<u128, Found<(bool, Share)>>;
/// Per fast shape, its outcome when found waiting (no capacity held): reason and message.
pub(crate) type FastMemo = ByShape<FastShape, Found<(Arc<str>, Arc<str>)>>;

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
    /// Whether the last cycle found every pending workload waiting (`settled` gathers the
    /// proof).
    settled: bool,
    /// Cycles that started from some of the last one's outcomes, and cycles run.
    pub reused: u64,
    pub cycles: u64,
}

impl CycleCache {
    /// Keeps the outcomes that still hold on `st` (nothing they read was touched since the
    /// last cycle's state), drops the others, and returns the basis of `st` to `store` with
    /// this cycle's outcomes.
    pub(crate) fn start(&mut self, st: &State) -> Arc<Basis> {
        self.cycles += 1;
        self.settled = false;
        let old = self.basis.take();
        let touched = old.as_ref().map(|b| b.touched_teams(st));
        let mut config = None;
        let mut same = Same::default();
        match (touched, &old) {
            (Some((t, teams)), Some(old)) if !t.all => {
                same = teams;
                if !t.is_empty() {
                    // Rebuilt rather than retained: a table emptied in place keeps its
                    // tombstones, and every later cycle's lookups probe past them.
                    self.waits = std::mem::take(&mut self.waits)
                        .into_iter()
                        .filter(|(_, f)| !t.hits(&f.reads))
                        .collect();
                    self.key_parts = std::mem::take(&mut self.key_parts)
                        .into_iter()
                        .filter(|(_, f)| !t.hits(&f.reads))
                        .collect();
                }
                if !self.waits.is_empty() || !self.key_parts.is_empty() {
                    self.reused += 1;
                }
                if old.nodes.len() != st.acct.nodes.nodes.len() || self.reads.len() > MAX_READS {
                    self.reads.clear();
                }
                config = Some(old.config.clone());
            }
            _ => {
                self.waits.clear();
                self.key_parts.clear();
                self.reads.clear();
            }
        }
        if self.requests.len() > MAX_READS {
            self.requests.clear();
        }
        let same = old.as_deref().map(|b| (b, &same));
        Arc::new(Basis::of(st, config, same))
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
            f.judged = 0;
            f.checked.set(0);
        }
        for f in parts.values_mut() {
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
    /// Whether every workload pending in `st` waits there too: the queues are the ones the
    /// cycle saw, and nothing their judgements read was touched since.
    pub fn holds(&self, st: &State) -> bool {
        self.basis.same_queues(st) && !self.basis.touched(st).hits(&self.reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_common::quota::ResourceQuota;
    use allot_common::{
        ClusterPolicy, FlavorQuota, ResourceName, Resources, TeamSpec, WorkloadSpec,
    };

    const FLAVOR: &str = "ml.p5.48xlarge";

    fn submit(st: &mut State, name: &str, team: &str, gpus: i64, now: Time) {
        let mut req = Resources::new();
        req.set(ResourceName::gpu(), gpus);
        st.submit(WorkloadSpec::single(name, team, 1, req), now)
            .expect("valid workload");
    }

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
        let mut st = State::new(ClusterPolicy::default());
        for t in ["a", "b"] {
            let spec = TeamSpec::new(
                t,
                vec![FlavorQuota {
                    flavor: FLAVOR.into(),
                    resources: vec![(ResourceName::gpu(), ResourceQuota::nominal(8))],
                }],
            );
            st.set_team(spec).expect("valid team");
        }
        let mut cap = Resources::new();
        cap.set(ResourceName::gpu(), 8);
        for n in 0..2 {
            st.add_node(&format!("p5-{n}"), FLAVOR, &cap)
                .expect("valid node");
        }
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
        assert!(Arc::ptr_eq(&first.nodes, &second.nodes));
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
        assert!(!Arc::ptr_eq(&second.nodes, &third.nodes));
        assert!(!Arc::ptr_eq(&second.admitted[a], &third.admitted[a]));
        assert!(Arc::ptr_eq(&second.admitted[b], &third.admitted[b]));
        // What it holds is what the cycle saw: team a without the finished workload.
        let ids: Vec<WlId> = third.admitted[a].iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, running);
        assert!(!ids.contains(&done));
    }
}

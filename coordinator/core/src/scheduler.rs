//! One scheduling cycle: `schedule(&state, now) -> Plan`.
//!
//! Every pending workload is considered in one cycle. Each team's queue is walked in its own
//! order (priority, submit time); across teams the next workload is picked by a tournament over
//! the teams' heads: preemptors whose victims are leaving first, then workloads that fit without
//! borrowing, then (fair sharing on) the lower weighted share after admission, then priority,
//! submit time and name. Decisions are applied to a working copy of the accounting as they are
//! made, so later workloads see earlier ones.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use allot_common::quota::QueueingStrategy;

use crate::cycle_cache::{
    CycleCache, FastMemo, FastShape, Found, KeyParts, Known, Settled, Witnessed,
};
use crate::decision::{
    assign, deferred, full_counts, process, try_assignment, withdraw, Mode, Outcome,
};
use crate::ids::{CohortId, FlavorId, ResId, TeamId, WlId};
use crate::plan::{Plan, PlannedAdmission, PlannedPreemption};
use crate::preemption::{self};
use crate::quota::{self, Acct, Share};
use crate::reads::{Reads, Touched};
use crate::shapes::{ByShape, ShapeQueue};
use crate::state::{QueueKey, State, Time, Workload};
#[cfg(debug_assertions)]
use crate::tree_order;
use crate::tree_order::{Contender, Rounds, Standings};
use crate::verdict::PendingReason;
use crate::witness::{Observer, Witness};
use crate::working::{Changes, Ctx};

/// The order key of a team's head in the cross-team tournament.
/// A pending workload's place in the cycle's order: preemptors first (by their head start),
/// then by borrow level (`quota::order_level`: 0 within nominal, lower first), weighted share after
/// admission, priority, submit time, name.
pub(crate) type EntryKey<'a> = (u32, u8, Share, i64, Time, &'a str, WlId);

impl Contender for EntryKey<'_> {
    fn id(&self) -> WlId {
        self.6
    }
    fn with_share(mut self, share: Share) -> Self {
        self.2 = share;
        self
    }
}

pub(crate) fn entry_key<'a>(ctx: &mut Ctx, wl: &'a Workload) -> EntryKey<'a> {
    let full = full_counts(wl);
    let a = assign(ctx, wl, &full, true);
    let share = if ctx.st.policy.fair_share {
        quota::share(ctx.st, &ctx.acct, wl.team, &a.usage)
    } else {
        Share::ZERO
    };
    (
        wl.preempting.unwrap_or(u32::MAX),
        quota::order_level(ctx.st.policy.fair_share, a.borrows),
        share,
        -i64::from(wl.priority),
        wl.submit_time,
        wl.spec.name.as_str(),
        wl.id,
    )
}

/// Workloads with the same shape get the same decision from the same working state (Kueue's
/// scheduling-equivalence idea): team, priority, pinned flavor, pod sets, the submit time only
/// where the team's policy compares it, whether it is a preemptor, who evicted it, and the
/// topology it asks for.
type ShapeKey = (
    TeamId,
    i32,
    Option<FlavorId>,
    Vec<(String, u32, Option<u32>, Vec<(ResId, i64)>)>,
    Time,
    bool,
    Option<WlId>,
    Option<TopologyKey>,
);

/// A topology ask, owned: level, required, and the slice's level and size.
type TopologyKey = (String, bool, Option<(String, u32)>);

fn shape_key(st: &State, wl: &Workload) -> ShapeKey {
    use allot_common::quota::WithinTeam;
    let team = &st.teams[wl.team.idx()];
    let time_matters = team.spec.preemption.within_team == WithinTeam::LowerOrNewerEqualPriority;
    (
        wl.team,
        wl.priority,
        wl.pinned,
        wl.spec
            .pod_sets
            .iter()
            .zip(&wl.pod_reqs)
            .map(|(p, r)| (p.name.clone(), p.count, p.min_count, r.clone()))
            .collect(),
        if time_matters { wl.submit_time } else { 0 },
        wl.preempting.is_some(),
        // The workload that evicted it is never its victim (`preemption::never_taken`): two
        // workloads alike in all else but this may not get the same decision.
        preemption::evicted_by(wl),
        wl.topology().map(|a| {
            (
                a.level.to_string(),
                a.required,
                a.slice.map(|s| (s.level.to_string(), s.size)),
            )
        }),
    )
}

/// The plan `schedule` would make right after `wl` (prepared with `State::prepare`) is
/// submitted, when nothing else is pending and that plan admits it; `None` otherwise. With no
/// other pending workload the cycle considers `wl` alone, so this runs the same `process`
/// without copying the state: the leader's fast path for a submit on an idle cluster.
pub fn schedule_alone(st: &State, wl: &Workload, now: Time) -> Option<Plan> {
    schedule_alone_with(st, wl, now, None)
}

/// `schedule_alone` on `acct`, a copy of `st.acct` made earlier (it must equal it), so the
/// copy need not be made on the submit's path.
pub fn schedule_alone_with(
    st: &State,
    wl: &Workload,
    now: Time,
    acct: Option<Acct>,
) -> Option<Plan> {
    if st.has_pending() {
        return None;
    }
    decide_first(st, wl, now, acct)
}

/// The plan `schedule` would make first right after `wl` (prepared with `State::prepare`) is
/// submitted behind a backlog, when the last cycle run with a cache found every pending
/// workload waiting, that still holds on `st` (`Settled::holds`), and it admits `wl`; `None`
/// otherwise. Every entry a cycle takes before `wl` then waits and changes nothing, so `wl` is
/// decided on the state as it is, by the same `process`; the next cycle decides what comes
/// after it on the state with it admitted. The leader's fast path for a submit behind a settled
/// backlog. A StrictFIFO team's newcomer waits behind its queue: `None`.
pub fn schedule_settled(
    st: &State,
    wl: &Workload,
    now: Time,
    acct: Option<Acct>,
    settled: &Settled,
) -> Option<Plan> {
    let team = &st.teams[wl.team.idx()];
    if team.spec.queueing == QueueingStrategy::StrictFIFO && !team.pending.is_empty() {
        return None;
    }
    if !settled.holds(st, now) {
        return None;
    }
    decide_first(st, wl, now, acct)
}

/// `wl` judged on `st` as it is (on `acct`, a copy of `st.acct`, when given): the plan that
/// admits it, or `None`.
fn decide_first(st: &State, wl: &Workload, now: Time, acct: Option<Acct>) -> Option<Plan> {
    let mut ctx = match acct {
        Some(acct) => Ctx::with_acct(st, now, acct),
        None => Ctx::new(st, now),
    };
    match process(&mut ctx, wl) {
        Outcome::Admitted(admission) => Some(Plan {
            admissions: vec![PlannedAdmission {
                wl: wl.id,
                admission,
            }],
            considered: 1,
            ..Plan::default()
        }),
        _ => None,
    }
}

/// A team's pending workloads in the order a cycle takes them: last cycle's preemptors first
/// (in the order they chose their victims), so each finds the room it freed even when older
/// workloads of its team that do not fit stand before it in the queue; then the team's queue
/// order (priority, submit time).
struct TeamCursor<'a> {
    /// Last cycle's preemptors of the team, by their order among them.
    first: std::vec::IntoIter<(u32, WlId)>,
    rest: std::iter::Peekable<Queue<'a>>,
    st: &'a State,
    /// The team has preemptors: the rest of its queue skips them.
    skip: bool,
}

impl<'a> TeamCursor<'a> {
    fn new(st: &'a State, t: TeamId) -> Self {
        let mut first: Vec<(u32, WlId)> = st
            .preemptors
            .iter()
            .filter_map(|id| {
                let wl = st.workloads.get(id)?;
                let order = wl.preempting?;
                (wl.team == t && wl.state == crate::state::WlState::Pending).then_some((order, *id))
            })
            .collect();
        first.sort_unstable();
        TeamCursor {
            skip: !first.is_empty(),
            first: first.into_iter(),
            rest: Queue::Whole(st.teams[t.idx()].pending.iter()).peekable(),
            st,
        }
    }

    /// A team's cursor that goes on after `q` (a plain entry: the team has no preemptors).
    fn after(st: &'a State, t: TeamId, q: &QueueKey) -> Self {
        use std::ops::Bound::{Excluded, Unbounded};
        Self::from(st, t, (Excluded(q), Unbounded))
    }

    /// A team's cursor that goes on from `q` (a plain entry: the team has no preemptors).
    fn at(st: &'a State, t: TeamId, q: &QueueKey) -> Self {
        use std::ops::Bound::{Included, Unbounded};
        Self::from(st, t, (Included(q), Unbounded))
    }

    fn from(
        st: &'a State,
        t: TeamId,
        range: (std::ops::Bound<&QueueKey>, std::ops::Bound<&QueueKey>),
    ) -> Self {
        TeamCursor {
            skip: false,
            first: Vec::new().into_iter(),
            rest: Queue::After(st.teams[t.idx()].pending.range(range)).peekable(),
            st,
        }
    }

    /// The next workload when it is a plain queue entry (no preemptor of the team is left
    /// first, and the team has none to skip), with its queue key: what a cycle can judge from
    /// the queue alone.
    fn peek_plain(&mut self) -> Option<&'a QueueKey> {
        if self.skip || self.first.len() > 0 {
            return None;
        }
        self.rest.peek().copied()
    }
}

/// A team's queue from its start (the common case: a plain iterator is the cheaper walk) or
/// from after an entry (a run taken back).
enum Queue<'a> {
    Whole(std::collections::btree_set::Iter<'a, QueueKey>),
    After(std::collections::btree_set::Range<'a, QueueKey>),
}

impl<'a> Iterator for Queue<'a> {
    type Item = &'a QueueKey;
    fn next(&mut self) -> Option<&'a QueueKey> {
        match self {
            Queue::Whole(it) => it.next(),
            Queue::After(it) => it.next(),
        }
    }
}

impl Iterator for TeamCursor<'_> {
    type Item = WlId;
    fn next(&mut self) -> Option<WlId> {
        if let Some((_, id)) = self.first.next() {
            return Some(id);
        }
        let (st, skip) = (self.st, self.skip);
        self.rest
            .by_ref()
            .map(|k| k.id)
            .find(|id| !skip || st.workload(*id).preempting.is_none())
    }
}

/// Runs one scheduling cycle over every pending workload. Pure: the state is not changed.
///
/// Its cost follows the shapes waiting and the decisions made more than the length of the
/// queues: a workload whose shape (team, priority, pinned flavor, pod sets; see `shape_key`) was
/// already found waiting, with nothing changed since, is settled from its queue entry alone, and
/// a team's run of such entries is settled ahead of its turn in the cross-team tournament (a
/// decision takes back those placed after it: see `Tournament`); where every entry of those
/// shapes already shows its wait, a stretch of them is settled in one step and not listed
/// (`Bulk`). It makes a plan with the effect of `schedule_reference`'s, which takes every
/// workload one at a time (`State::plan_effect`; the property test
/// `fast_cycle_equals_reference` checks it over seeded random histories).
pub fn schedule(st: &State, now: Time) -> Plan {
    schedule_with(st, now, true, None, RUN_AHEAD)
}

/// `schedule`, starting from what the last cycle run with `cache` found before its first
/// decision when the state reads the same apart from its queues (see `CycleCache`), and
/// leaving what this one found there. The plan is `schedule`'s.
pub fn schedule_cached(st: &State, now: Time, cache: &mut CycleCache) -> Plan {
    schedule_with(st, now, true, Some(cache), RUN_AHEAD)
}

/// `schedule_cached` (`schedule` without a cache) where a stretch of a queue settled in one
/// step may be as short as `min_stretch` entries (`schedule` takes `RUN_AHEAD`: a shorter one
/// costs less settled entry by entry). The plan is the same whatever it is: the equivalence
/// test runs it with 1, so that its small histories exercise every kind of stretch.
pub fn schedule_tuned(
    st: &State,
    now: Time,
    cache: Option<&mut CycleCache>,
    min_stretch: usize,
) -> Plan {
    schedule_with(st, now, true, cache, min_stretch.max(1))
}

/// The definition `schedule` must match: every pending workload taken one at a time through
/// the tournament, its key computed and its shape looked up on its own. Kept for the
/// equivalence test and the benchmarks' baseline.
pub fn schedule_reference(st: &State, now: Time) -> Plan {
    schedule_with(st, now, false, None, RUN_AHEAD)
}

fn time_matters(st: &State, t: TeamId) -> bool {
    st.teams[t.idx()].spec.preemption.within_team
        == allot_common::quota::WithinTeam::LowerOrNewerEqualPriority
}

fn schedule_with(
    st: &State,
    now: Time,
    fast: bool,
    mut cache: Option<&mut CycleCache>,
    min_stretch: usize,
) -> Plan {
    // Nothing to decide: skip the working copy (the node set is most of a cycle's cost then).
    if !st.has_pending() {
        return Plan::default();
    }
    let mut ctx = Ctx::new(st, now);
    let mut plan = Plan::default();
    let mut tour = Tournament::new(st, fast, min_stretch);
    // Bumped at every decision (the working state changes). The reference's memoised waits hold
    // for one generation; the fast cycle's hold until a decision touches what they read
    // (`Found::holds`, `Changes`).
    let mut generation: u64 = 0;
    // Fast path: the (borrows, share) part of plain workloads' tournament keys per shape, for
    // one generation (the rest of the key comes from the queue entry).
    let mut key_parts: KeyParts = KeyParts::default();
    let mut fast_memo: FastMemo = FastMemo::default();
    // The last cycle's first-generation outcomes that nothing has touched since.
    let fresh = cache.as_deref_mut().map(|c| {
        let fresh = c.start(st, now);
        tour.reads = std::mem::take(&mut c.reads);
        tour.requests = std::mem::take(&mut c.requests);
        tour.witnesses = std::mem::take(&mut c.witnesses);
        (fast_memo, key_parts) = c.take_found();
        fresh
    });
    for i in 0..st.teams.len() {
        if tour.cursors[i].is_some() {
            tour.advance(&mut ctx, TeamId(i as u32), generation, &mut key_parts);
        }
    }
    let mut victim_teams: BTreeSet<TeamId> = BTreeSet::new();
    let mut preemptor_teams: BTreeSet<TeamId> = BTreeSet::new();
    let mut memo: ShapeMemo = BTreeMap::new();
    // Whether a preemptor was judged (its outcome is not kept: see `CycleCache::settled`).
    let mut preemptor_judged = false;
    // Whether every decision so far admitted (what the cycle found at its end then holds on
    // the state with its plan applied: `CycleCache::store_after`).
    let mut admits_only = true;
    // Keeps this cycle's first-generation outcomes for the next (before any decision).
    let mut fresh = fresh;
    // At the first decision, a copy (what is found later is of another generation); at the
    // end of a cycle that made none, the maps themselves.
    let mut keep = |fast_memo: &mut FastMemo, key_parts: &mut KeyParts, last: bool| {
        if let (Some(c), Some(fresh)) = (cache.as_deref_mut(), fresh.take()) {
            if last {
                c.store(fresh, std::mem::take(fast_memo), std::mem::take(key_parts));
            } else {
                c.store(fresh, fast_memo.clone(), key_parts.clone());
            }
        }
    };
    while let Some((key, place, t, head_fp)) = tour.pop(&mut ctx) {
        // A plain queue entry whose shape was found waiting, with nothing it read changed
        // since, is settled from the entry alone, without reading the workload (with a deep
        // backlog, most are).
        if let (true, Some(fp)) = (fast, head_fp) {
            let fifo = st.teams[t.idx()].spec.queueing == QueueingStrategy::StrictFIFO;
            if let Some((reason, message)) =
                memo_wait(&fast_memo, fp, key.4, time_matters(st, t), &ctx.changes)
                    .filter(|_| !fifo)
            {
                plan.considered += 1;
                plan.pending.push((key.6, reason.clone(), message.clone()));
                let memos = Memos {
                    ctx: &mut ctx,
                    fast_memo: &mut fast_memo,
                    key_parts: &mut key_parts,
                    generation,
                    victim_teams: &victim_teams,
                    preemptor_teams: &preemptor_teams,
                };
                tour.move_on(t, memos, &mut plan);
                continue;
            }
        }
        let wl = st.workload(key.6);
        plan.considered += 1;
        preemptor_judged |= wl.preempting.is_some();
        let (outcome, how) = judge(
            &mut ctx,
            &mut tour,
            (&memo, &fast_memo),
            generation,
            wl,
            head_fp,
        );
        let outcome = deferred(st, wl, outcome, &victim_teams, &preemptor_teams);
        let found = (&mut memo, &mut fast_memo);
        keep_wait(&outcome, how, found, generation, &mut tour, &mut ctx, wl);
        if let Outcome::Preempting(victims, _) = &outcome {
            preemptor_teams.insert(wl.team);
            for v in victims {
                let vt = st.workload(v.id).team;
                if vt != wl.team {
                    victim_teams.insert(vt);
                }
            }
        }
        let decided = !matches!(&outcome, Outcome::Pending { hold, .. } if hold.is_empty());
        if decided {
            admits_only &= matches!(outcome, Outcome::Admitted(_));
            let touched = touched_by(&ctx, wl, &outcome);
            ctx.changes.record(&touched);
            if generation == 0 {
                keep(&mut fast_memo, &mut key_parts, false);
            }
            generation += 1;
            // Runs settled ahead of this decision's place in the tournament were settled on
            // the state before it: those of their entries that come after it are taken back.
            tour.take_back_after(&place, &mut plan);
            tour.new_window();
        }
        let (blocked, rekey) = carry_out(&mut ctx, &mut plan, wl, t, outcome);
        if blocked {
            block_team(&mut tour, &mut plan, wl, t);
        } else {
            let memos = Memos {
                ctx: &mut ctx,
                fast_memo: &mut fast_memo,
                key_parts: &mut key_parts,
                generation,
                victim_teams: &victim_teams,
                preemptor_teams: &preemptor_teams,
            };
            tour.move_on(t, memos, &mut plan);
        }
        for vt in rekey {
            tour.rekey(&mut ctx, vt);
        }
    }
    tour.commit_all(&mut plan);
    keep(&mut fast_memo, &mut key_parts, true);
    let found = (fast_memo, key_parts);
    let flags = (generation, admits_only, preemptor_judged);
    finish_cycle(cache, &mut tour, &plan, &ctx, found, flags);
    plan
}

/// A reference cycle's waits by exact shape, for one generation.
type ShapeMemo = BTreeMap<ShapeKey, (u64, Arc<str>, Arc<str>)>;

/// How a head's outcome was come by: its shape (the reference's exact key, or the fast one),
/// whether it was judged here, what its judgement reads where its wait was recognised, and
/// what was observed of it (`Witness`).
struct Judgement {
    shape: Result<ShapeKey, FastShape>,
    judged: bool,
    known_reads: Option<Arc<Reads>>,
    seen: Option<Option<Witness>>,
}

/// The outcome for head `wl`: a wait kept for its shape that still holds, one a witness
/// recognises, or its judgement (`process`).
fn judge(
    ctx: &mut Ctx,
    tour: &mut Tournament,
    (memo, fast_memo): (&ShapeMemo, &FastMemo),
    generation: u64,
    wl: &Workload,
    head_fp: Option<u128>,
) -> (Outcome, Judgement) {
    let st = ctx.st;
    let fast = tour.fast;
    let shape = if fast {
        Err((
            head_fp.unwrap_or_else(|| wl.shape_fingerprint()),
            if time_matters(st, wl.team) {
                wl.submit_time
            } else {
                0
            },
            wl.preempting.is_some(),
        ))
    } else {
        Ok(shape_key(st, wl))
    };
    let memoised = match &shape {
        Ok(k) => memo
            .get(k)
            .filter(|(g, _, _)| *g == generation)
            .map(|(_, r, m)| (r, m)),
        Err(k) => fast_memo
            .get(k)
            .filter(|f| f.holds(&ctx.changes))
            .map(|f| (&f.value.0, &f.value.1)),
    };
    // What was observed of it (`Witness`), where a wait kept for its shape was looked at.
    let mut seen = None;
    // Whether it is judged here (not a wait found before).
    let mut judged = false;
    // What its judgement reads, where its wait was recognised (`witnessed`).
    let mut known_reads = None;
    let outcome = match memoised {
        Some((reason, message)) => Outcome::Pending {
            reason: reason.clone(),
            message: message.clone(),
            hold: Vec::new(),
        },
        _ => match shape
            .as_ref()
            .err()
            .map(|k| (k, tour.request_of(k.0, wl)))
            .and_then(|(k, request)| {
                let (witnesses, observer) = (&tour.witnesses, &mut tour.observer);
                witnessed(witnesses, observer, ctx, (wl, request), k, &mut seen)
            }) {
            Some(known) => {
                tour.recognised += 1;
                known_reads = Some(known.reads.clone());
                Outcome::Pending {
                    reason: known.wait.0.clone(),
                    message: known.wait.1.clone(),
                    hold: Vec::new(),
                }
            }
            // The texts workloads already show, where they say the same (`Texts`).
            None => {
                judged = true;
                tour.judged_anew += 1;
                match process(ctx, wl) {
                    Outcome::Pending {
                        reason,
                        message,
                        hold,
                    } => Outcome::Pending {
                        reason: st.texts.shared(reason),
                        message: st.texts.shared(message),
                        hold,
                    },
                    o => o,
                }
            }
        },
    };
    let how = Judgement {
        shape,
        judged,
        known_reads,
        seen,
    };
    (outcome, how)
}

/// Keeps a wait that holds nothing for the head's shape: for this generation in the reference
/// cycle, and in the fast one with what it read (and its witness, where it was judged here).
fn keep_wait(
    outcome: &Outcome,
    how: Judgement,
    (memo, fast_memo): (&mut ShapeMemo, &mut FastMemo),
    generation: u64,
    tour: &mut Tournament,
    ctx: &mut Ctx,
    wl: &Workload,
) {
    let Judgement {
        shape,
        judged,
        known_reads,
        seen,
    } = how;
    if let Outcome::Pending {
        reason,
        message,
        hold,
    } = &outcome
    {
        if hold.is_empty() {
            match shape {
                Ok(k) => {
                    memo.insert(k, (generation, reason.clone(), message.clone()));
                }
                Err(k) => {
                    let reads = known_reads.unwrap_or_else(|| tour.reads_of(k.0, wl));
                    let found = (reason.clone(), message.clone());
                    if judged {
                        let request = tour.request_of(k.0, wl);
                        remember(
                            (&mut tour.witnesses, &mut tour.observer),
                            ctx,
                            (wl, request),
                            k,
                            seen,
                            (&found, &reads),
                        );
                    }
                    let clock = ctx.changes.clock;
                    fast_memo.insert(k, Found::new(generation, clock, reads, found));
                    if !k.2 {
                        tour.judged[wl.team.idx()].push(k.0);
                    }
                }
            }
        }
    }
}

/// Keeps what the next cycle can use: what this one found on the state its plan leaves (when
/// every decision admitted), the reads, requests and witnesses, and whether it settled.
fn finish_cycle(
    mut cache: Option<&mut CycleCache>,
    tour: &mut Tournament,
    plan: &Plan,
    ctx: &Ctx,
    (fast_memo, key_parts): (FastMemo, KeyParts),
    (generation, admits_only, preemptor_judged): (u64, bool, bool),
) {
    if let Some(c) = cache
        .as_deref_mut()
        .filter(|_| generation > 0 && admits_only)
    {
        c.store_after(
            ctx.st,
            &plan.admissions,
            &ctx.acct,
            fast_memo,
            key_parts,
            &ctx.changes,
        );
    }
    if let Some(c) = cache {
        c.reads = std::mem::take(&mut tour.reads);
        c.requests = std::mem::take(&mut tour.requests);
        c.witnesses = std::mem::take(&mut tour.witnesses);
        c.recognised += tour.recognised;
        c.judged += tour.judged_anew;
        if generation == 0 && !preemptor_judged {
            c.mark_settled();
        }
    }
}

/// StrictFIFO: a head that waits blocks the rest of its team for this cycle.
fn block_team(tour: &mut Tournament, plan: &mut Plan, wl: &Workload, t: TeamId) {
    let st = tour.st;
    let reason: Arc<str> = PendingReason::WaitingForQuota.as_str().into();
    let message: Arc<str> = format!(
        "StrictFIFO: waiting behind {} in team {}",
        wl.spec.name,
        st.teams[t.idx()].name()
    )
    .into();
    for id in tour.cursors[t.idx()].take().into_iter().flatten() {
        plan.pending.push((id, reason.clone(), message.clone()));
    }
}

/// Carries out one decision on the cycle's working state and its plan: an admission takes its
/// room; a preemption withdraws or evicts its victims and reserves what the preemptor will
/// take (at once, when every victim was a withdrawn admission of this cycle); a wait holds
/// what it must. Returns whether it blocks the rest of team `t` (StrictFIFO) and the victims'
/// teams whose queue keys changed.
fn carry_out(
    ctx: &mut Ctx,
    plan: &mut Plan,
    wl: &Workload,
    t: TeamId,
    outcome: Outcome,
) -> (bool, BTreeSet<TeamId>) {
    let st = ctx.st;
    let mut blocked = false;
    let mut rekey: BTreeSet<TeamId> = BTreeSet::new();
    // A preemption whose victims were all withdrawn admissions frees its room at once:
    // nothing has to stop, so the preemptor is admitted in this same cycle.
    let outcome = match outcome {
        Outcome::Preempting(victims, a)
            if victims.iter().all(|v| ctx.planned.contains_key(&v.id)) =>
        {
            for v in &victims {
                ctx.remove(v.id);
                let vt = st.workload(v.id).team;
                if vt != t {
                    rekey.insert(vt);
                }
                withdraw(ctx, plan, wl, v);
            }
            let mut fit = a.clone();
            fit.mode = Mode::Fit;
            fit.victims = None;
            match try_assignment(ctx, wl, &fit) {
                Some(o @ Outcome::Admitted(_)) => o,
                _ => Outcome::Pending {
                    reason: PendingReason::WaitingForQuota.as_str().into(),
                    message: a.messages.join("; ").into(),
                    hold: Vec::new(),
                },
            }
        }
        o => o,
    };
    match outcome {
        Outcome::Admitted(adm) => {
            for (_, p) in &adm.placement {
                let _ = ctx.acct.nodes.take_exact(p);
            }
            ctx.acct.add_all(st, wl.team, &adm.usage, 1);
            ctx.plan(wl.id, wl.team, adm.clone());
            plan.admissions.push(PlannedAdmission {
                wl: wl.id,
                admission: adm,
            });
        }
        Outcome::Preempting(victims, a) => {
            let names: Vec<String> = victims
                .iter()
                .map(|v| st.workload(v.id).spec.name.clone())
                .collect();
            for v in &victims {
                ctx.remove(v.id);
                let vt = st.workload(v.id).team;
                if vt != t {
                    rekey.insert(vt);
                }
                if ctx.planned.contains_key(&v.id) {
                    // Decided earlier in this cycle and not started: withdraw it instead.
                    withdraw(ctx, plan, wl, v);
                    continue;
                }
                if st.workload(v.id).state == crate::state::WlState::Evicting {
                    // Already on its way out (grace period running): waiting for it is not
                    // a new decision, so a settled cluster stays settled.
                    continue;
                }
                plan.preemptions.push(PlannedPreemption {
                    victim: v.id,
                    preemptor: wl.id,
                    reason: v.reason,
                    message: preemption::victim_message(st, wl, v),
                });
            }
            plan.targets.push((wl.id, a.flavors.clone()));
            // Reserve what the preemptor will take, so later workloads cannot.
            ctx.acct.add_all(st, wl.team, &a.usage, 1);
            if st.placement {
                if let Ok(p) = ctx.place_all(wl, &a.place) {
                    drop(p);
                }
            }
            // Victims hold their room until they are gone (those stopping now and those
            // already on their way out alike): nothing else may be planned into it in this
            // cycle. Withdrawn plans hold nothing (no admission in the state).
            for v in &victims {
                ctx.hold(v.id);
            }
            plan.pending.push((
                wl.id,
                crate::plan::WAITING_FOR_VICTIMS.into(),
                format!(
                    "{}. Pending the preemption of {} workload(s): {}",
                    if a.messages.is_empty() {
                        "waiting for room".to_string()
                    } else {
                        a.messages.join("; ")
                    },
                    victims.len(),
                    names.join(", ")
                )
                .into(),
            ));
            blocked = st.teams[t.idx()].spec.queueing == QueueingStrategy::StrictFIFO;
        }
        Outcome::Pending {
            reason,
            message,
            hold,
        } => {
            for (fr, h) in &hold {
                ctx.acct.add_usage(st, wl.team, *fr, *h);
            }
            plan.pending.push((wl.id, reason, message));
            blocked = st.teams[t.idx()].spec.queueing == QueueingStrategy::StrictFIFO;
        }
    }
    (blocked, rekey)
}

/// The wait last found for fast shape `k` (not a preemptor's), where what judging its entry
/// `wl` reads now is what it read then (`Witness`): what `process` would find again. `seen`
/// gets what was observed, when something was kept to compare it with.
fn witnessed<'w>(
    witnesses: &'w Witnessed,
    observer: &mut Observer,
    ctx: &mut Ctx,
    (wl, request): (&Workload, u128),
    k: &FastShape,
    seen: &mut Option<Option<Witness>>,
) -> Option<&'w Known> {
    let known = witnesses.get(k).filter(|_| !k.2)?;
    let now = seen.insert(observer.observe(ctx, wl, request));
    if now.as_ref() != Some(&known.witness) {
        return None;
    }
    // Debug builds (every test) check it against the judgement it stands for.
    #[cfg(debug_assertions)]
    {
        let judged = process(ctx, wl);
        let (reason, message) = &known.wait;
        assert!(
            matches!(&judged, Outcome::Pending { reason: r, message: m, hold }
                if r == reason && m == message && hold.is_empty()),
            "a witnessed wait of {} is not what judging it finds: {reason}: {message}",
            wl.spec.name
        );
    }
    Some(known)
}

/// Keeps the wait just found for fast shape `k` with its `Witness`, where it has one (`seen`,
/// when it was observed before the judgement; the state is the same).
fn remember(
    (witnesses, observer): (&mut Witnessed, &mut Observer),
    ctx: &mut Ctx,
    (wl, request): (&Workload, u128),
    k: FastShape,
    seen: Option<Option<Witness>>,
    (wait, reads): (&(Arc<str>, Arc<str>), &Arc<Reads>),
) {
    if k.2 {
        return;
    }
    match seen.unwrap_or_else(|| observer.observe(ctx, wl, request)) {
        Some(witness) => {
            let known = Known {
                witness,
                wait: wait.clone(),
                reads: reads.clone(),
            };
            witnesses.insert(k, known);
        }
        None => {
            witnesses.remove(&k);
        }
    }
}

/// The reason and message a plain shape was found waiting with in `generation`, if it was: the
/// submit time is part of the shape only where team policy compares it.
fn memo_wait<'m>(
    fast_memo: &'m FastMemo,
    shape: u128,
    submit: Time,
    time_matters: bool,
    ch: &Changes,
) -> Option<(&'m Arc<str>, &'m Arc<str>)> {
    fast_memo
        .get(&(shape, if time_matters { submit } else { 0 }, false))
        .filter(|f| f.holds(ch))
        .map(|f| (&f.value.0, &f.value.1))
}

/// A shape's pending reason and message.
type Wait<'m> = (&'m Arc<str>, &'m Arc<str>);

/// A plain shape's wait and the (borrows, share) part of its tournament key, where both were
/// found and still hold: what settles its entries from the queue alone.
fn held<'m>(
    fast_memo: &'m FastMemo,
    key_parts: &KeyParts,
    shape: u128,
    submit: Time,
    time_matters: bool,
    ch: &Changes,
) -> Option<(Wait<'m>, (u8, Share))> {
    let wait = memo_wait(fast_memo, shape, submit, time_matters, ch)?;
    let part = key_parts.get(&shape).filter(|f| f.holds(ch))?;
    Some((wait, part.value))
}

/// What a decision changes in the working state: for an admission, what it uses; for a
/// preemption, its victims' admissions and the preemptor's reservation (quota and nodes); for
/// capacity held, the pairs held. Shares are taken as changed when a team's borrowing may have.
fn touched_by(ctx: &Ctx, wl: &Workload, outcome: &Outcome) -> Touched {
    let st = ctx.st;
    let mut t = Touched::default();
    match outcome {
        Outcome::Admitted(adm) => {
            t.admission(st, adm);
            t.shares = adm.usage.iter().any(|(fr, v)| {
                let u = ctx.acct.usage(wl.team, *fr);
                crate::reads::borrowing_moved(st, wl.team, *fr, u, u + v)
            });
        }
        Outcome::Preempting(victims, a) => {
            for v in victims {
                match ctx.admission_of(v.id) {
                    Some(adm) => t.admission(st, adm),
                    None => t.all = true,
                }
            }
            for (fr, _) in &a.usage {
                t.pairs.insert(st.names.fr_parts(*fr));
            }
            for (i, f, _) in &a.place {
                for (r, _) in &wl.pod_reqs[*i] {
                    t.pairs.insert((*f, *r));
                }
            }
            t.shares = true;
        }
        Outcome::Pending { hold, .. } => {
            for (fr, _) in hold {
                t.pairs.insert(st.names.fr_parts(*fr));
            }
            t.shares = true;
        }
    }
    t
}

/// How many entries a team's run may settle ahead of the tournament at a time: what one decision
/// can make a cycle take back and settle again, per team.
const RUN_AHEAD: usize = 64;

/// A team's entries settled ahead of the tournament since its last turn, not yet in the plan:
/// plain queue entries whose shape was found waiting and still holds. Where each one
/// falls in the tournament is its place key: the highest tournament key of the team's entries
/// up to it in this window (the tournament merges the teams' queues, so an entry comes out
/// right after the others' entries below its place key: see `Tournament`).
#[derive(Default)]
struct Run<'a> {
    entries: Vec<(&'a QueueKey, Arc<str>, Arc<str>)>,
    /// Where the place key rises: (index into `entries`, that entry's own tournament key).
    rises: Vec<(usize, EntryKey<'a>)>,
    /// After `entries`: a stretch of the team's queue settled in one step (see `Bulk`).
    bulk: Option<Bulk<'a>>,
}

/// A run that is a stretch of a team's queue, from `start` up to `end` (or its end), in which
/// every entry's shape was found waiting, still holds, and every entry of that shape already
/// shows that wait (`ShapeIndex`): settling them changes nothing, so none is listed in the
/// plan. `end` is the first entry of a shape that is not so. A decision later in the cycle
/// takes back the entries placed after it, found per shape (`Tournament::bulk_cut`).
struct Bulk<'a> {
    start: &'a QueueKey,
    end: Option<&'a QueueKey>,
    /// Each of the team's settled shapes with the (borrows, share) part of its entries'
    /// tournament keys when the run was settled.
    parts: Vec<(u128, u8, Share)>,
}

/// What a team's bulk tries found, kept across them: each shape's first entry from where a
/// try started, once searched, and which shapes were found settled at the clock `clock` (a
/// shape settled stays so at one clock; one that was not is looked at again once judged).
#[derive(Default)]
struct BulkState<'a> {
    /// The team's shapes, in `ShapeIndex` order.
    shapes: Vec<(u128, &'a ShapeQueue)>,
    /// Per shape: from which entry it was searched, and its first entry from there.
    next: Vec<Option<(&'a QueueKey, Option<&'a QueueKey>)>>,
    clock: Option<u64>,
    settled: Vec<Option<(u128, u8, Share)>>,
    /// The end of the last stretch found too short to be worth a run of its own: tries from
    /// before it are not made again (at this clock), its entries are settled one by one.
    short_until: Option<&'a QueueKey>,
    /// Per shape, the clock at which it was last judged ahead of its turn (`foresee`).
    foreseen: Vec<Option<u64>>,
}

impl<'a> BulkState<'a> {
    /// The team's shapes, once.
    fn init(&mut self, team: &'a crate::state::TeamRt) {
        if self.shapes.is_empty() {
            self.shapes = team.shapes.shapes().collect();
            self.next = vec![None; self.shapes.len()];
            self.settled = vec![None; self.shapes.len()];
            self.foreseen = vec![None; self.shapes.len()];
        }
    }

    /// Shape `i`'s first entry from `start`: the one found from an earlier start not after
    /// this one, while it is not behind this one, else searched. (A team's runs mostly move
    /// forward, but a decision takes a run back to where it cut it, before later tries.)
    fn first_from(&mut self, i: usize, start: &'a QueueKey) -> Option<&'a QueueKey> {
        match self.next[i] {
            Some((from, k)) if from <= start && k.is_none_or(|k| k >= start) => k,
            _ => {
                // From the team's head, as most tries start, it is the shape's first entry.
                let q = self.shapes[i].1;
                let k = match q.first() {
                    Some(first) if first >= start => Some(first),
                    _ => q.keys.range(start..).next(),
                };
                self.next[i] = Some((start, k));
                k
            }
        }
    }
}

/// What a fast cycle's bulk tries read and add to: the working state, the shapes' waits and
/// key parts found so far, and the generation they are found in.
struct Memos<'c, 's> {
    ctx: &'c mut Ctx<'s>,
    fast_memo: &'c mut FastMemo,
    key_parts: &'c mut KeyParts,
    generation: u64,
    /// The teams that lost workloads to a preemption in this cycle, and those that preempted
    /// (`deferred`).
    victim_teams: &'c BTreeSet<TeamId>,
    preemptor_teams: &'c BTreeSet<TeamId>,
}

/// The first entry of `q` from `lo` (an entry or, excluded, a bound) that comes before
/// `end`, if one does (one search).
fn first_before<'a>(
    q: &'a ShapeQueue,
    lo: std::ops::Bound<&QueueKey>,
    end: Option<&QueueKey>,
) -> Option<&'a QueueKey> {
    q.keys
        .range((lo, std::ops::Bound::Unbounded))
        .next()
        .filter(|k| end.is_none_or(|e| *k < e))
}

/// The last entry of `q` before `end` that is not before `start`, if one is (one search).
fn last_before<'a>(q: &'a ShapeQueue, start: &QueueKey, end: &QueueKey) -> Option<&'a QueueKey> {
    q.keys.range(..end).next_back().filter(|k| *k >= start)
}

/// The cross-team tournament: each team's queue in the order a cycle takes it (`TeamCursor`),
/// and a heap of the teams' heads; the least head is taken next.
///
/// Between two decisions (a window: the working state does not change), heads' keys stay as
/// they were computed, and taking the least head each time merges the teams' sequences: an
/// entry comes out before another team's entry exactly when its place key (the highest key of
/// its team's entries in the window up to it) is below the other's. So the fast cycle may
/// settle a team's run of memoised waits ahead of its turn (`run_ahead`), keyed by place, and
/// when a decision comes, take back the entries placed after it (`take_back_after`): those
/// the reference takes after the state changed. The heap is keyed by place key in the fast
/// cycle (by the head's own key in the reference: the same order, as shown), and rekeyed to the
/// heads' own keys when a window starts.
struct Tournament<'a> {
    st: &'a State,
    fast: bool,
    cursors: Vec<Option<TeamCursor<'a>>>,
    /// Each team's head: its own tournament key, its place key, and its shape fingerprint when
    /// its queue entry gave it (a plain entry).
    heads: Vec<Option<(EntryKey<'a>, EntryKey<'a>, Option<u128>)>>,
    heap: BTreeSet<(EntryKey<'a>, TeamId)>,
    /// Each team's place key so far in this window.
    placed: Vec<Option<EntryKey<'a>>>,
    runs: Vec<Run<'a>>,
    /// The teams this window touched (a place key, a run, a head placed off its own key), each
    /// once: a decision takes back and rekeys only these. Rebuilding every team's head at
    /// each decision was most of an admission's cost with many teams and nothing waiting
    /// (issue 56: `allot bench`'s sustained admissions fell from about 65,000 to 25,000 a
    /// second with 100 teams).
    window: Vec<usize>,
    in_window: Vec<bool>,
    /// The fewest entries a stretch settled in one step may have (`schedule_tuned`).
    min_stretch: usize,
    /// Per team, what its bulk tries found so far (`bulk`).
    bulk_state: Vec<BulkState<'a>>,
    /// Per team, the shapes whose outcome or key part was found since its last bulk try.
    judged: Vec<Vec<u128>>,
    /// What each shape's judgement reads (see `reads`), per fingerprint: kept in the cache
    /// between cycles.
    reads: ByShape<u128, Arc<Reads>>,
    /// Each shape's request fingerprint (`Workload::request_fingerprint`): kept in the cache
    /// between cycles.
    requests: ByShape<u128, u128>,
    /// Waits known by what they read (`Witness`): kept in the cache between cycles.
    witnesses: Witnessed,
    /// What this cycle observed of requests (`Observer`).
    observer: Observer,
    /// How many waits were recognised so in this cycle.
    recognised: u64,
    /// How many heads (and entries foreseen ahead of their turn) were judged anew in this
    /// cycle.
    judged_anew: u64,
    /// Per request fingerprint, the key part found in this cycle (`key_part`).
    request_parts: ByShape<u128, Found<(u8, Share)>>,
    /// Under fair sharing, per team in a tree of cohorts: the tree's root. Such a team's head
    /// is taken by the tree's round (`tree_order`), not by its key alone: it is placed at its
    /// own key, and nothing of its queue is settled ahead.
    tree_root: Vec<Option<CohortId>>,
    /// Per tree root, its teams in id order (debug builds hold a round anew with them).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    tree_teams: BTreeMap<CohortId, Vec<TeamId>>,
    /// The heads' standings in their trees' rounds.
    standings: Standings,
    /// The trees' rounds, kept per cohort while no head below it changes.
    rounds: Rounds,
    /// Per team in a tree, its head's request fingerprint where the head is a plain entry.
    head_requests: Vec<Option<u128>>,
}

impl<'a> Tournament<'a> {
    fn new(st: &'a State, fast: bool, min_stretch: usize) -> Self {
        let n = st.teams.len();
        // Without a tree of cohorts under fair sharing (most clusters), nothing of the rounds
        // is built: a cycle's fixed cost counts with a cycle per admission.
        let trees = st.policy.fair_share && st.cohorts.iter().any(|c| c.tree.parent.is_some());
        let tree_root: Vec<Option<CohortId>> = (0..n)
            .filter(|_| trees)
            .map(|i| {
                preemption::in_tree(st, TeamId(i as u32))
                    .then(|| quota::ancestors(st, st.teams[i].cohort).last())
                    .flatten()
            })
            .collect();
        let mut tree_teams: BTreeMap<CohortId, Vec<TeamId>> = BTreeMap::new();
        for (i, root) in tree_root.iter().enumerate() {
            if let Some(r) = root {
                tree_teams.entry(*r).or_default().push(TeamId(i as u32));
            }
        }
        Tournament {
            st,
            fast,
            cursors: (0..n)
                .map(|i| {
                    (!st.teams[i].pending.is_empty()).then(|| TeamCursor::new(st, TeamId(i as u32)))
                })
                .collect(),
            heads: vec![None; n],
            heap: BTreeSet::new(),
            placed: vec![None; n],
            runs: (0..n).map(|_| Run::default()).collect(),
            window: Vec::new(),
            in_window: vec![false; n],
            min_stretch,
            bulk_state: (0..n).map(|_| BulkState::default()).collect(),
            judged: vec![Vec::new(); n],
            reads: ByShape::default(),
            requests: ByShape::default(),
            request_parts: HashMap::default(),
            witnesses: Witnessed::default(),
            observer: Observer::default(),
            recognised: 0,
            judged_anew: 0,
            rounds: Rounds::new(st, tree_teams.values().flatten().copied()),
            tree_root,
            tree_teams,
            standings: Standings::default(),
            head_requests: vec![None; if trees { n } else { 0 }],
        }
    }

    /// The request fingerprint of shape `shape`, whose entry `wl` is.
    fn request_of(&mut self, shape: u128, wl: &Workload) -> u128 {
        *self
            .requests
            .entry(shape)
            .or_insert_with(|| wl.request_fingerprint())
    }

    /// What judging `wl`, whose shape fingerprint is `fp`, reads.
    fn reads_of(&mut self, fp: u128, wl: &Workload) -> Arc<Reads> {
        let st = self.st;
        self.reads
            .entry(fp)
            .or_insert_with(|| Arc::new(Reads::of(st, wl)))
            .clone()
    }

    /// The (borrows, share) part of the tournament key of plain shape `shape`, whose entry `wl`
    /// is, found now and kept in `key_parts`. It reads what a flavor assignment reads of the
    /// workload, not its priority: shapes that differ only there (a team's priority classes)
    /// share it, found once per request while it holds.
    fn key_part(
        &mut self,
        ctx: &mut Ctx,
        shape: u128,
        wl: &Workload,
        generation: u64,
        key_parts: &mut KeyParts,
    ) -> (u8, Share) {
        let request = self.request_of(shape, wl);
        let found = match self.request_parts.get(&request) {
            Some(f) if f.holds(&ctx.changes) => {
                Found::new(f.gen, f.judged, f.reads.clone(), f.value)
            }
            _ => {
                let part = match crate::witness::key_part(ctx, wl) {
                    Some(part) => {
                        // Debug builds (every test) check the short-cut against the assignment.
                        #[cfg(debug_assertions)]
                        {
                            let k = entry_key(ctx, wl);
                            assert_eq!(part, (k.1, k.2), "key part of {}", wl.spec.name);
                        }
                        part
                    }
                    None => {
                        let k = entry_key(ctx, wl);
                        (k.1, k.2)
                    }
                };
                let reads = self.reads_of(shape, wl);
                let found = Found::new(generation, ctx.changes.clock, reads, part);
                let copy = Found::new(found.gen, found.judged, found.reads.clone(), found.value);
                self.request_parts.insert(request, copy);
                found
            }
        };
        let part = found.value;
        key_parts.insert(shape, found);
        part
    }

    /// The least head: its key, its place key, its team and its shape fingerprint (plain
    /// entries).
    /// The root of team `t`'s tree of cohorts, where it is in one under fair sharing.
    fn tree_of(&self, t: TeamId) -> Option<CohortId> {
        self.tree_root.get(t.idx()).copied().flatten()
    }

    /// In a tree of cohorts, the least head only says which tree goes next: the tree's round
    /// takes the head (`tree_order`), placed where the least one was (a decision takes back
    /// what was settled ahead after that place, as it would after the least head's).
    fn pop(&mut self, ctx: &mut Ctx) -> Option<(EntryKey<'a>, EntryKey<'a>, TeamId, Option<u128>)> {
        let (place, least) = self.heap.pop_first()?;
        let t = match self.tree_of(least) {
            None => least,
            Some(root) => {
                let (heads, requests) = (&self.heads, &self.head_requests);
                let head = |m: TeamId| {
                    let (key, _, fp) = heads[m.idx()]?;
                    Some((key, fp.and(requests[m.idx()])))
                };
                let t = self.rounds.winner(ctx, &mut self.standings, root, &head);
                #[cfg(debug_assertions)]
                {
                    // Debug builds (every test) check the kept rounds against a round anew.
                    let all: Vec<_> = (self.tree_teams[&root].iter())
                        .filter_map(|&m| head(m).map(|(key, request)| (m, key, request)))
                        .collect();
                    let anew = tree_order::winner(ctx, &mut self.standings, &all);
                    assert_eq!(t, anew, "the round kept at {root:?}");
                }
                let t = t.unwrap_or(least);
                if t != least {
                    self.heap.insert((place, least));
                    if let Some((_, own, _)) = self.heads[t.idx()] {
                        self.heap.remove(&(own, t));
                    }
                }
                t
            }
        };
        let (key, _, fp) = self.heads[t.idx()].take()?;
        match self.tree_of(t) {
            None => self.placed[t.idx()] = Some(place),
            Some(_) => self.rounds.touch(self.st, t),
        }
        self.touch(t.idx());
        Some((key, place, t, fp))
    }

    /// Team `i` has something of this window to take back or rekey (see `window`).
    fn touch(&mut self, i: usize) {
        if !self.in_window[i] {
            self.in_window[i] = true;
            self.window.push(i);
        }
    }

    /// Makes team `t`'s next workload its head.
    fn advance(&mut self, ctx: &mut Ctx, t: TeamId, generation: u64, key_parts: &mut KeyParts) {
        let st = self.st;
        if self.tree_of(t).is_some() {
            self.rounds.touch(st, t);
        }
        if let Some((_, place, _)) = self.heads[t.idx()].take() {
            self.heap.remove(&(place, t));
        }
        let Some(it) = self.cursors[t.idx()].as_mut() else {
            return;
        };
        let plain = it.peek_plain().filter(|q| self.fast && q.shape != 0);
        let Some(id) = it.next() else {
            self.cursors[t.idx()] = None;
            return;
        };
        let key = match plain {
            Some(q) => {
                let (b, share) = match key_parts.get(&q.shape) {
                    Some(f) if f.holds(&ctx.changes) => f.value,
                    _ => {
                        let part =
                            self.key_part(ctx, q.shape, st.workload(id), generation, key_parts);
                        self.judged[t.idx()].push(q.shape);
                        part
                    }
                };
                plain_key(q, b, share)
            }
            None => entry_key(ctx, st.workload(id)),
        };
        let place = match self.placed[t.idx()] {
            Some(p) if self.fast && !later_above(&key, &p) && self.tree_of(t).is_none() => p,
            _ => key,
        };
        self.heads[t.idx()] = Some((key, place, plain.map(|q| q.shape)));
        self.heap.insert((place, t));
        if let (Some(_), Some(q)) = (self.tree_of(t), plain) {
            self.head_requests[t.idx()] = Some(self.request_of(q.shape, st.workload(id)));
        }
    }

    /// Settles ahead, from the queue alone, up to `RUN_AHEAD` of team `t`'s next entries that
    /// are plain and whose shape was found waiting and still holds (fast cycle, teams that
    /// are not StrictFIFO). The team's previous run goes into the plan first: it is placed
    /// before the team's last turn, so no later decision can come before it.
    /// Past team `t`'s head: settles what follows it where it can (`run_ahead`), then moves the
    /// team's cursor on.
    fn move_on(&mut self, t: TeamId, mut memos: Memos<'_, '_>, plan: &mut Plan) {
        self.run_ahead(t, &mut memos, plan);
        self.advance(memos.ctx, t, memos.generation, memos.key_parts);
    }

    fn run_ahead(&mut self, t: TeamId, memos: &mut Memos<'_, '_>, plan: &mut Plan) {
        let st = self.st;
        if !self.fast
            || st.teams[t.idx()].spec.queueing == QueueingStrategy::StrictFIFO
            || self.tree_of(t).is_some()
        {
            return;
        }
        let run = std::mem::take(&mut self.runs[t.idx()]);
        commit(run.entries, plan);
        let time_matters = time_matters(st, t);
        let mut run = Run::default();
        loop {
            // At the run's start, and where it is long, the rest of a stretch in one step
            // where it can be.
            if run.entries.is_empty() || run.entries.len() >= self.min_stretch.min(RUN_AHEAD) {
                if let Some(bulk) = self.bulk(t, memos) {
                    self.cursors[t.idx()] = bulk.end.map(|e| TeamCursor::at(st, t, e));
                    run.bulk = Some(bulk);
                    break;
                }
            }
            if run.entries.len() >= RUN_AHEAD {
                break;
            }
            let Some(it) = self.cursors[t.idx()].as_mut() else {
                break;
            };
            let Some(q) = it.peek_plain().filter(|q| q.shape != 0) else {
                break;
            };
            let Some(((reason, message), (b, share))) = held(
                memos.fast_memo,
                memos.key_parts,
                q.shape,
                q.submit,
                time_matters,
                &memos.ctx.changes,
            ) else {
                break;
            };
            let key = plain_key(q, b, share);
            if self.placed[t.idx()].is_none_or(|p| later_above(&key, &p)) {
                run.rises.push((run.entries.len(), key));
                self.placed[t.idx()] = Some(key);
            }
            run.entries.push((q, reason.clone(), message.clone()));
            it.next();
        }
        self.touch(t.idx());
        self.runs[t.idx()] = run;
    }

    /// The stretch of team `t`'s queue from its next entry that can be settled in one step
    /// (`Bulk`), where there is one: the team is neither StrictFIFO (checked by the caller)
    /// nor compares submit times, its next entry is plain, and that entry's shape was found
    /// waiting and holds, with every entry showing it. Sets the team's place key to the run's.
    fn bulk(&mut self, t: TeamId, memos: &mut Memos<'_, '_>) -> Option<Bulk<'a>> {
        let st = self.st;
        let team = &st.teams[t.idx()];
        // A queue shorter than two runs costs less walked than tried.
        if !team.shapes.built || time_matters(st, t) || team.pending.len() < 2 * self.min_stretch {
            return None;
        }
        let start = self.cursors[t.idx()].as_mut()?.peek_plain()?;
        self.foresee(t, start, memos);
        let (ch, fast_memo, key_parts) = (&memos.ctx.changes, &*memos.fast_memo, &*memos.key_parts);
        let settled = |shape: u128, q: &ShapeQueue| {
            let ((reason, message), (b, share)) = held(fast_memo, key_parts, shape, 0, false, ch)?;
            (shape != 0 && q.all_show(reason, message)).then_some((shape, b, share))
        };
        let judged = std::mem::take(&mut self.judged[t.idx()]);
        let b = &mut self.bulk_state[t.idx()];
        if b.clock != Some(ch.clock) {
            for (i, &(shape, q)) in b.shapes.iter().enumerate() {
                b.settled[i] = settled(shape, q);
            }
            b.clock = Some(ch.clock);
            b.short_until = None;
        } else {
            for shape in judged {
                if let Ok(i) = b.shapes.binary_search_by_key(&shape, |(s, _)| *s) {
                    b.settled[i] = settled(shape, b.shapes[i].1);
                }
            }
        }
        if b.short_until.is_some_and(|e| start < e) {
            return None;
        }
        let at = b
            .shapes
            .binary_search_by_key(&start.shape, |(s, _)| *s)
            .ok()?;
        b.settled[at]?;
        let mut parts = Vec::with_capacity(b.shapes.len());
        let mut end: Option<&'a QueueKey> = None;
        for i in 0..b.shapes.len() {
            if let Some(part) = b.settled[i] {
                parts.push(part);
                continue;
            }
            if let Some(k) = b
                .first_from(i, start)
                .filter(|k| end.is_none_or(|e| *k < e))
            {
                end = Some(k);
            }
        }
        if let Some(end) = end {
            // A short stretch costs less settled one by one than its place key's searches.
            let short = team
                .pending
                .range(start..end)
                .nth(self.min_stretch - 1)
                .is_none();
            if short {
                b.short_until = Some(end);
                return None;
            }
            // The run's place key, needed where the team goes on after it: its highest entry
            // key (a shape's entries share the key's head and the rest is queue order, so the
            // last entry of the highest shape that has any), where that is not below the
            // team's place key so far (see `later_above`).
            parts.sort_by_key(|p| std::cmp::Reverse((p.1, p.2)));
            let mut top: Option<EntryKey<'a>> = None;
            for &(shape, borrows, share) in &parts {
                if top.is_some_and(|p| (p.1, p.2) > (borrows, share)) {
                    break;
                }
                let last = team
                    .shapes
                    .get(shape)
                    .and_then(|q| last_before(q, start, end));
                if let Some(k) = last {
                    let key = plain_key(k, borrows, share);
                    if top.is_none_or(|p| key > p) {
                        top = Some(key);
                    }
                }
            }
            if let Some(top) = top {
                if self.placed[t.idx()].is_none_or(|p| later_above(&top, &p)) {
                    self.placed[t.idx()] = Some(top);
                }
            }
        }
        Some(Bulk { start, end, parts })
    }

    /// Judges, ahead of its turn, team `t`'s shapes that have an entry from `start` on and no
    /// wait or key part that holds, on the working state as it is now, once per shape and
    /// clock, in the order of their first entries from `start`. The tournament would judge that
    /// entry later in this window, on this same state, or after a decision that `Found::holds`
    /// sees. So what is found is what the cycle would find, and a stretch need not end where a
    /// shape was not judged yet: with a deep backlog, that is where a cycle after a change
    /// walked most of its entries one by one. An outcome other than a wait holding nothing is
    /// a decision, taken in its turn: it is dropped, the stretch ends at that entry, and the
    /// shapes after it are left for a later try (judged now, most would be judged again after
    /// the decision: a deep backlog's cycle judged thousands of admissions it then dropped).
    fn foresee(&mut self, t: TeamId, start: &'a QueueKey, memos: &mut Memos<'_, '_>) {
        let st = self.st;
        self.bulk_state[t.idx()].init(&st.teams[t.idx()]);
        let clock = memos.ctx.changes.clock;
        // The shapes to judge, by their first entry from `start`: the stretch ends at the
        // first that is a decision, so those after it are judged later (after the decision,
        // which most often changes what they would be found to do).
        let mut todo: Vec<(&'a QueueKey, usize, bool, bool)> = Vec::new();
        let b = &mut self.bulk_state[t.idx()];
        for i in 0..b.shapes.len() {
            if b.foreseen[i] == Some(clock) {
                continue;
            }
            let shape = b.shapes[i].0;
            let ch = &memos.ctx.changes;
            let wait_holds = memo_wait(memos.fast_memo, shape, 0, false, ch).is_some();
            let part_holds = memos.key_parts.get(&shape).is_some_and(|f| f.holds(ch));
            if shape == 0 || (wait_holds && part_holds) {
                continue;
            }
            if let Some(first) = b.first_from(i, start) {
                todo.push((first, i, wait_holds, part_holds));
            }
        }
        todo.sort_unstable_by_key(|(first, i, _, _)| (*first, *i));
        for (first, i, wait_holds, part_holds) in todo {
            self.bulk_state[t.idx()].foreseen[i] = Some(clock);
            let shape = self.bulk_state[t.idx()].shapes[i].0;
            let wl = st.workload(first.id);
            if wl.preempting.is_some() {
                // Taken in its turn, where the stretch ends.
                break;
            }
            if !part_holds {
                self.key_part(memos.ctx, shape, wl, memos.generation, memos.key_parts);
            }
            self.judged[t.idx()].push(shape);
            if wait_holds {
                continue;
            }
            let k = (shape, 0, false);
            let mut seen = None;
            let request = self.request_of(shape, wl);
            let (witnesses, observer) = (&self.witnesses, &mut self.observer);
            if let Some(known) =
                witnessed(witnesses, observer, memos.ctx, (wl, request), &k, &mut seen)
            {
                self.recognised += 1;
                let found = Found::new(
                    memos.generation,
                    clock,
                    known.reads.clone(),
                    known.wait.clone(),
                );
                memos.fast_memo.insert(k, found);
                continue;
            }
            // A preemption deferred in its turn is a wait, as it would be found then (the sets
            // `deferred` reads change only with a decision).
            self.judged_anew += 1;
            let o = process(memos.ctx, wl);
            match deferred(st, wl, o, memos.victim_teams, memos.preemptor_teams) {
                Outcome::Pending {
                    reason,
                    message,
                    hold,
                } if hold.is_empty() => {
                    let reads = self.reads_of(shape, wl);
                    let found = (st.texts.shared(reason), st.texts.shared(message));
                    remember(
                        (&mut self.witnesses, &mut self.observer),
                        memos.ctx,
                        (wl, request),
                        k,
                        seen,
                        (&found, &reads),
                    );
                    let found = Found::new(memos.generation, clock, reads, found);
                    memos.fast_memo.insert(k, found);
                }
                // A decision: the stretch ends at this entry.
                _ => break,
            }
        }
    }

    /// The first entry of team `t`'s bulk run placed after `at`, with its tournament key: per
    /// shape, the first entry whose own key is above `at` (a run's place key rises exactly at
    /// such entries: see `Tournament`), the least of them in queue order. `bound` is `at`'s
    /// queue order as a queue key.
    fn bulk_cut(
        &self,
        t: usize,
        bulk: &Bulk<'a>,
        at: &EntryKey<'a>,
        bound: &QueueKey,
    ) -> Option<(&'a QueueKey, EntryKey<'a>)> {
        use std::cmp::Ordering;
        use std::ops::Bound::{Excluded, Included};
        let st = self.st;
        let at_head = (at.0, at.1, at.2);
        let mut cut: Option<(&'a QueueKey, EntryKey<'a>)> = None;
        for &(shape, borrows, share) in &bulk.parts {
            let Some(q) = st.teams[t].shapes.get(shape) else {
                continue;
            };
            let lo = match (u32::MAX, borrows, share).cmp(&at_head) {
                Ordering::Greater => Included(bulk.start),
                Ordering::Equal if bound >= bulk.start => Excluded(bound),
                Ordering::Equal => Included(bulk.start),
                Ordering::Less => continue,
            };
            let first = first_before(q, lo, bulk.end);
            if let Some(k) = first.filter(|k| cut.is_none_or(|(c, _)| *k < c)) {
                cut = Some((k, plain_key(k, borrows, share)));
            }
        }
        cut
    }

    /// A decision placed at `at` was made: every run's entries placed before it go into the
    /// plan, and those placed after it are taken back, their team's head again the first of
    /// them (with the key it had: it became head before the decision).
    fn take_back_after(&mut self, at: &EntryKey<'a>, plan: &mut Plan) {
        let at = *at;
        let mut bound: Option<QueueKey> = None;
        // Teams outside the window hold no run; team order, as the plan's entries have it.
        self.window.sort_unstable();
        for k in 0..self.window.len() {
            let i = self.window[k];
            let mut run = std::mem::take(&mut self.runs[i]);
            // A run's entries one by one come first, then its stretch settled in one step.
            if let Some(&(cut, key)) = run.rises.iter().find(|(_, k)| *k > at) {
                let back = run.entries.split_off(cut);
                commit(run.entries, plan);
                self.head_again(i, back[0].0, key);
                continue;
            }
            commit(run.entries, plan);
            if let Some(bulk) = run.bulk.take() {
                let bound = bound.get_or_insert_with(|| QueueKey {
                    neg_priority: at.3,
                    submit: at.4,
                    name: at.5.into(),
                    id: at.6,
                    shape: 0,
                });
                if let Some((first, key)) = self.bulk_cut(i, &bulk, &at, bound) {
                    self.head_again(i, first, key);
                }
            }
        }
    }

    /// Makes `first`, taken back, team `i`'s head again, with `key`.
    fn head_again(&mut self, i: usize, first: &'a QueueKey, key: EntryKey<'a>) {
        let t = TeamId(i as u32);
        if let Some((_, place, _)) = self.heads[i].take() {
            self.heap.remove(&(place, t));
        }
        self.cursors[i] = Some(TeamCursor::after(self.st, t, first));
        self.heads[i] = Some((key, key, Some(first.shape)));
        self.heap.insert((key, t));
        // Only a team settled ahead is taken back, and a tree's teams never are.
        debug_assert!(self.tree_of(t).is_none());
    }

    /// Recomputes team `vt`'s head key (its team lost workloads to a preemption).
    fn rekey(&mut self, ctx: &mut Ctx, vt: TeamId) {
        if self.tree_of(vt).is_some() {
            self.rounds.touch(self.st, vt);
        }
        if let Some((old, place, fp)) = self.heads[vt.idx()].take() {
            self.heap.remove(&(place, vt));
            let key = entry_key(ctx, self.st.workload(old.6));
            self.heads[vt.idx()] = Some((key, key, fp));
            self.heap.insert((key, vt));
        }
    }

    /// A decision changed the working state: a new window starts, with every head placed at
    /// its own key.
    fn new_window(&mut self) {
        if !self.fast {
            return;
        }
        // Only a touched team's head can sit at a place other than its own key, and only a
        // touched team has a place key.
        for i in std::mem::take(&mut self.window) {
            self.in_window[i] = false;
            self.placed[i] = None;
            if let Some((key, place, _)) = &mut self.heads[i] {
                if *place != *key {
                    let t = TeamId(i as u32);
                    self.heap.remove(&(*place, t));
                    *place = *key;
                    self.heap.insert((*key, t));
                }
            }
        }
        #[cfg(debug_assertions)]
        {
            let heads = self.heads.iter().enumerate();
            let want: BTreeSet<_> = heads
                .filter_map(|(i, h)| h.as_ref().map(|(key, _, _)| (*key, TeamId(i as u32))))
                .collect();
            assert!(
                want == self.heap,
                "a head outside the window was off its own key"
            );
            assert!(self.placed.iter().all(Option::is_none));
        }
    }

    fn commit_all(&mut self, plan: &mut Plan) {
        for run in &mut self.runs {
            commit(std::mem::take(&mut run.entries), plan);
        }
    }
}

/// `later > earlier`, for the keys of two of one team's entries in one window, `later`'s
/// taken after `earlier`'s (the tournament's place keys). The team's cursor gives its
/// preemptors first, each with its own order in the head, then its queue in order; the queue
/// order is the keys' tail (priority, submit time, name, id). So the (preemptor, borrows,
/// share) head decides, and equal heads leave the later entry above: no names are compared,
/// which with a deep backlog submitted in bursts was most of the run-ahead's cost.
fn later_above(later: &EntryKey<'_>, earlier: &EntryKey<'_>) -> bool {
    let above = (later.0, later.1, later.2) >= (earlier.0, earlier.1, earlier.2);
    debug_assert_eq!(above, later > earlier, "keys {later:?} after {earlier:?}");
    above
}

/// A plain entry's tournament key: its shape's (borrows, share) part, then its queue order.
fn plain_key(q: &QueueKey, borrows: u8, share: Share) -> EntryKey<'_> {
    (
        u32::MAX,
        borrows,
        share,
        q.neg_priority,
        q.submit,
        &q.name,
        q.id,
    )
}

/// Puts settled entries into the plan.
fn commit(entries: Vec<(&QueueKey, Arc<str>, Arc<str>)>, plan: &mut Plan) {
    plan.considered += entries.len();
    plan.pending
        .extend(entries.into_iter().map(|(q, r, m)| (q.id, r, m)));
}

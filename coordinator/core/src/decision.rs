//! The decision for one workload: which flavors it gets (`assign`: quota, borrowing, the
//! nodes' room, the modes Kueue ranks), whom it would preempt (`choose_victims`), and what a
//! cycle does with it (`process`: admit, preempt, or wait, with the reason). The scheduler's
//! incremental engine (`scheduler.rs`: the tournament over teams, runs of equal shapes, memos
//! of waits) asks this file and applies what it says; `explain` asks it the same questions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use allot_common::quota::{
    FungibilityPreference, ReclaimWithinCohort, WhenCanBorrow, WhenCanPreempt,
};

use crate::ids::{FlavorId, FrId, ResId, TeamId};
use crate::nodes::PodAlloc;
use crate::plan::Plan;
use crate::preemption::{self, Victim};
use crate::quota;
use crate::state::{Admission, PodSetAdmission, State, Time, Workload};
use crate::verdict::{
    self, Ask, Binding, Decided, Finding, MaxBound, PendingReason, WAITS_FOR_LEAVERS,
};
use crate::working::Ctx;
use crate::working::{node_shortfall, NodeShortfall};

/// Flavor-assignment modes, worst to best (Kueue's ranking).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    NoFit,
    NoCandidates,
    Preempt,
    Reclaim,
    Fit,
}

/// The flavors chosen for a workload at given pod counts, and how well they fit.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub counts: Vec<u32>,
    /// Per pod set: flavor per requested resource.
    pub flavors: Vec<Vec<(ResId, FlavorId)>>,
    pub usage: Vec<(FrId, i64)>,
    pub mode: Mode,
    /// How high in its cohort tree it borrows (`quota::borrow_level`): 0 within its nominal.
    pub borrows: u8,
    /// Pairs on which quota is short or nodes lack room, and flavors whose nodes lack room
    /// though each requested resource has room there on its own (see `NodeShortfall`).
    pub contested: BTreeSet<FrId>,
    pub contested_flavors: BTreeSet<FlavorId>,
    /// (pod set index, flavor, count) for placement.
    pub place: Vec<(usize, FlavorId, u32)>,
    /// Per pod set, why it does not fit as it stands.
    pub messages: Vec<String>,
    pub reason: PendingReason,
    /// Victims already found while choosing the flavor, when that search was for exactly this
    /// assignment (one pod set, one resource group).
    pub victims: Option<Vec<Victim>>,
}

struct FlavorEval {
    flavor: FlavorId,
    mode: Mode,
    borrows: u8,
    contested: BTreeSet<FrId>,
    placement_short: bool,
    /// What each check found, in order (`verdict`).
    findings: Vec<Finding>,
    /// A quick evaluation (ordering the tournament): its findings are never read, so none are
    /// recorded.
    quick: bool,
    exceeds_max: bool,
    victims: Option<Vec<Victim>>,
    /// What the pod set would use of each pair, its workload's earlier pod sets included.
    usage: Vec<(FrId, i64)>,
}

impl FlavorEval {
    /// Records what a check found (not in a quick evaluation).
    fn note(&mut self, finding: impl FnOnce() -> Finding) {
        if !self.quick {
            self.findings.push(finding());
        }
    }
}

fn preferred(a: &FlavorEval, b: &FlavorEval, pref: FungibilityPreference) -> bool {
    // Is `a` preferred over `b`?
    let viable = |m: Mode| m >= Mode::Preempt;
    if viable(a.mode) != viable(b.mode) {
        return viable(a.mode);
    }
    match pref {
        FungibilityPreference::BorrowingOverPreemption => {
            if a.mode != b.mode {
                return a.mode > b.mode;
            }
            a.borrows < b.borrows
        }
        FungibilityPreference::PreemptionOverBorrowing => {
            if a.borrows != b.borrows {
                return a.borrows < b.borrows;
            }
            a.mode > b.mode
        }
    }
}

/// Assigns flavors to every pod set at `counts` (Kueue's flavor assigner with fungibility), with
/// placement checks when the state has nodes. With `quick`, preemption is assumed possible where
/// the policy allows it, without searching for victims (used only to order the queue).
pub fn assign(ctx: &mut Ctx, wl: &Workload, counts: &[u32], quick: bool) -> Assignment {
    // A preemptor goes where its victims made room: the flavors its preemptions were chosen
    // for come first, as long as it fits there or can still preempt there. Without this, the
    // room the victims left can make another flavor look better to the greedy per-pod-set
    // choice, which may then not fit: the victims come back and are preempted again, forever.
    if let Some(kept) = &wl.preempting_flavors {
        let a = assign_among(ctx, wl, counts, quick, Some(kept));
        if a.mode >= Mode::Preempt {
            return a;
        }
    }
    assign_among(ctx, wl, counts, quick, None)
}

/// `assign`, with each pod set's resource groups limited to the flavor `kept` names for them
/// when given.
fn assign_among(
    ctx: &mut Ctx,
    wl: &Workload,
    counts: &[u32],
    quick: bool,
    kept: Option<&[Vec<(ResId, FlavorId)>]>,
) -> Assignment {
    let st = ctx.st;
    let team = &st.teams[wl.team.idx()];
    let mut acc: BTreeMap<FrId, i64> = BTreeMap::new();
    let mut flavors_out = Vec::new();
    let mut messages = Vec::new();
    let mut mode = Mode::Fit;
    let mut borrows = 0u8;
    let mut contested = BTreeSet::new();
    let mut contested_flavors = BTreeSet::new();
    let mut place = Vec::new();
    let mut victims_hint: Option<Vec<Victim>> = None;
    let single = wl.spec.pod_sets.len() == 1;
    let mut tentative: Vec<PodAlloc> = Vec::new();
    let mut reason = PendingReason::WaitingForQuota;
    for (i, ps) in wl.spec.pod_sets.iter().enumerate() {
        let count = counts[i];
        let reqs = &wl.pod_reqs[i];
        let mut chosen: Vec<(ResId, FlavorId)> = Vec::new();
        let mut ps_reasons: Vec<String> = Vec::new();
        let mut ps_mode = Mode::Fit;
        for r in uncovered(st, wl.team, reqs) {
            ps_reasons.push(format!(
                "resource {} unavailable in team {}",
                st.names.resource_name(r),
                team.name()
            ));
            ps_mode = Mode::NoFit;
            reason = PendingReason::NoMatchingFlavor;
        }
        let mut single_flavor: Option<FlavorId> = None;
        let mut placement_checked = false;
        for g in &team.groups {
            let group_reqs: Vec<(ResId, i64)> = reqs
                .iter()
                .filter(|(r, _)| g.resources.contains(r))
                .copied()
                .collect();
            if group_reqs.is_empty() || ps_mode == Mode::NoFit {
                continue;
            }
            let covers_all = group_reqs.len() == reqs.len();
            let kept_flavor = kept
                .and_then(|k| k.get(i))
                .and_then(|k| k.iter().find(|(r, _)| g.resources.contains(r)))
                .map(|(_, f)| *f);
            let here = (i, count, covers_all, quick);
            let (best, mut group_reasons) = best_flavor(
                ctx,
                wl,
                &g.flavors,
                kept_flavor,
                here,
                &group_reqs,
                &acc,
                &mut reason,
            );
            match best {
                Some(ev) if ev.mode > Mode::NoFit => {
                    if single && covers_all {
                        victims_hint = ev.victims.clone();
                    }
                    if ev.mode < Mode::Fit {
                        ps_reasons.extend(group_reasons);
                    }
                    ps_mode = ps_mode.min(ev.mode);
                    borrows = borrows.max(ev.borrows);
                    contested.extend(ev.contested.iter().copied());
                    if ev.placement_short {
                        contested_flavors.insert(ev.flavor);
                    }
                    for (r, v) in &group_reqs {
                        chosen.push((*r, ev.flavor));
                        if let Some(fr) = st.names.find_fr(ev.flavor, *r) {
                            *acc.entry(fr).or_insert(0) += v * i64::from(count);
                        }
                    }
                    if covers_all {
                        placement_checked = true;
                    }
                    single_flavor = match single_flavor {
                        None => Some(ev.flavor),
                        Some(prev) if prev == ev.flavor => Some(prev),
                        Some(_) => {
                            if st.placement {
                                ps_reasons.push(format!(
                                    "pod set {} would take resources from two flavors; a pod runs on one node",
                                    ps.name
                                ));
                                ps_mode = Mode::NoFit;
                            }
                            Some(ev.flavor)
                        }
                    };
                }
                _ => {
                    if !quick && group_reasons.is_empty() {
                        group_reasons.push(no_flavor(st, wl, &group_reqs));
                    }
                    ps_reasons.extend(group_reasons);
                    ps_mode = Mode::NoFit;
                }
            }
        }
        if st.placement && ps_mode == Mode::Fit {
            let here = (ps, count, placement_checked);
            if let Err(why) = hold_pods(ctx, wl, single_flavor, reqs, here, &mut tentative) {
                ps_reasons.push(why);
                ps_mode = Mode::NoFit;
            }
        }
        if let Some(f) = single_flavor {
            if !reqs.is_empty() {
                place.push((i, f, count));
            }
        }
        if !quick && !ps_reasons.is_empty() && ps_mode < Mode::Fit {
            messages.push(format!(
                "couldn't assign flavors to pod set {}: {}",
                ps.name,
                ps_reasons.join(", ")
            ));
        }
        mode = mode.min(ps_mode);
        flavors_out.push(chosen);
    }
    for a in tentative.iter().rev() {
        ctx.acct.nodes.release(a);
    }
    Assignment {
        counts: counts.to_vec(),
        flavors: flavors_out,
        usage: acc.into_iter().filter(|(_, v)| *v > 0).collect(),
        mode,
        borrows,
        contested,
        contested_flavors,
        place,
        messages,
        reason,
        victims: victims_hint,
    }
}

/// The resources of a pod set's requests `reqs` that no resource group of team `t` covers:
/// the workload cannot be admitted (`NoMatchingFlavor`).
pub(crate) fn uncovered(st: &State, t: TeamId, reqs: &[(ResId, i64)]) -> Vec<ResId> {
    let groups = &st.teams[t.idx()].groups;
    (reqs.iter())
        .map(|(r, _)| *r)
        .filter(|r| !groups.iter().any(|g| g.resources.contains(r)))
        .collect()
}

/// The flavors of a resource group's `flavors` that workload `wl` may use: its pinned one
/// alone where it names one.
pub(crate) fn offered<'f>(
    wl: &'f Workload,
    flavors: &'f [FlavorId],
) -> impl Iterator<Item = FlavorId> + 'f {
    (flavors.iter().copied()).filter(|f| wl.pinned.is_none_or(|p| p == *f))
}

/// The flavor a group's resources of one pod set go to: each of the group's flavors in order
/// (the pinned or kept one alone), until one may stop the search (flavor fungibility); the
/// best found, and every reason a flavor gave.
#[allow(clippy::too_many_arguments)]
fn best_flavor(
    ctx: &mut Ctx,
    wl: &Workload,
    flavors: &[FlavorId],
    kept_flavor: Option<FlavorId>,
    (i, count, covers_all, quick): (usize, u32, bool, bool),
    group_reqs: &[(ResId, i64)],
    acc: &BTreeMap<FrId, i64>,
    reason: &mut PendingReason,
) -> (Option<FlavorEval>, Vec<String>) {
    let fung = ctx.st.teams[wl.team.idx()].spec.flavor_fungibility;
    let mut best: Option<FlavorEval> = None;
    let mut group_reasons: Vec<String> = Vec::new();
    for f in offered(wl, flavors) {
        if kept_flavor.is_some_and(|k| k != f) {
            continue;
        }
        let ev = eval_flavor(ctx, wl, i, count, f, group_reqs, acc, covers_all, quick);
        group_reasons.extend(
            ev.findings
                .iter()
                .filter_map(|x| verdict::message(ctx.st, wl, i, f, x)),
        );
        let stop = match ev.mode {
            Mode::Fit => ev.borrows == 0 || fung.when_can_borrow == WhenCanBorrow::MayStopSearch,
            Mode::Preempt | Mode::Reclaim => fung.when_can_preempt == WhenCanPreempt::MayStopSearch,
            _ => false,
        };
        let better = match &best {
            None => ev.mode > Mode::NoFit,
            Some(b) => preferred(&ev, b, fung.preference),
        };
        if better {
            best = Some(ev);
        } else if best.is_none() && ev.exceeds_max {
            *reason = PendingReason::ExceedsMaxQuota;
        }
        if stop {
            break;
        }
    }
    (best, group_reasons)
}

/// Holds a fitting pod set's pods on its flavor's nodes so later pod sets see them; where its
/// resources span groups (`placement_checked` false), this is its placement check.
fn hold_pods(
    ctx: &mut Ctx,
    wl: &Workload,
    single_flavor: Option<FlavorId>,
    reqs: &[(ResId, i64)],
    (ps, count, placement_checked): (&allot_common::PodSet, u32, bool),
    tentative: &mut Vec<PodAlloc>,
) -> Result<(), String> {
    let st = ctx.st;
    let Some(f) = single_flavor else {
        return Ok(());
    };
    match ctx.acct.nodes.place_in(f, reqs, count, wl.topology()) {
        Ok(allocs) => tentative.extend(allocs),
        Err(_) if !placement_checked => {
            return Err(format!(
                "no room on nodes of flavor {} for pod set {}: {}",
                st.names.flavor_name(f),
                ps.name,
                ctx.acct
                    .nodes
                    .describe_room_in(f, reqs, count, wl.topology(), &st.names)
            ))
        }
        Err(_) => {}
    }
    Ok(())
}

/// Why no flavor of a group takes its resources, where no flavor said why.
fn no_flavor(st: &State, wl: &Workload, group_reqs: &[(ResId, i64)]) -> String {
    match wl.pinned {
        Some(p) => format!(
            "instance type {} is not among the flavors for {}",
            st.names.flavor_name(p),
            describe_res(st, group_reqs)
        ),
        None => format!("no flavor for {}", describe_res(st, group_reqs)),
    }
}

fn describe_res(st: &State, reqs: &[(ResId, i64)]) -> String {
    reqs.iter()
        .map(|(r, _)| st.names.resource_name(*r).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[allow(clippy::too_many_arguments)]
fn eval_flavor(
    ctx: &mut Ctx,
    wl: &Workload,
    ps: usize,
    count: u32,
    f: FlavorId,
    group_reqs: &[(ResId, i64)],
    acc: &BTreeMap<FrId, i64>,
    covers_all: bool,
    quick: bool,
) -> FlavorEval {
    let st = ctx.st;
    let t = wl.team;
    let mut ev = FlavorEval {
        flavor: f,
        mode: Mode::Fit,
        borrows: 0,
        contested: BTreeSet::new(),
        placement_short: false,
        findings: Vec::new(),
        quick,
        exceeds_max: false,
        victims: None,
        usage: Vec::new(),
    };
    let Some(usage_here) = flavor_quota(ctx, wl, (f, count), group_reqs, acc, &mut ev) else {
        return ev;
    };
    if ev.mode == Mode::NoFit {
        ev.usage = usage_here;
        return ev;
    }
    // Placement on the flavor's nodes, with this workload's earlier pod sets already placed.
    if st.placement && covers_all && !flavor_room(ctx, wl, (ps, f, count), &mut ev) {
        ev.usage = usage_here;
        return ev;
    }
    if ev.mode == Mode::Preempt && quick {
        // Without a search, assume preemption inside the team could bring it within nominal.
        ev.borrows = usage_here
            .iter()
            .map(|(fr, val)| quota::borrow_level(st, &ctx.acct, t, *fr, *val, 0))
            .max()
            .unwrap_or(0);
    }
    if ev.mode == Mode::Preempt && !quick {
        let here = (ps, f, count);
        choose_victims(ctx, wl, here, covers_all, &usage_here, &mut ev);
    }
    if ev.mode == Mode::Fit {
        ev.note(|| Finding::Fits);
    }
    ev.usage = usage_here;
    ev
}

/// The scheduler's own check of flavor `f` for pod set `ps` at `count` pods, with every
/// finding kept, and what the pod set would use of each pair: what `explain` renders.
pub(crate) fn judge_flavor(
    ctx: &mut Ctx,
    wl: &Workload,
    (ps, f, count): (usize, FlavorId, u32),
    group_reqs: &[(ResId, i64)],
    acc: &BTreeMap<FrId, i64>,
    covers_all: bool,
) -> (Vec<Finding>, Vec<(FrId, i64)>) {
    let ev = eval_flavor(ctx, wl, ps, count, f, group_reqs, acc, covers_all, false);
    (ev.findings, ev.usage)
}

/// The quota check of one flavor for one pod set, resource by resource: what it would use of
/// each pair (`None` where `ev` is decided already: no quota, or more than the team can ever
/// have); `ev` says whether it borrows, and which pairs it would preempt for.
fn flavor_quota(
    ctx: &mut Ctx,
    wl: &Workload,
    (f, count): (FlavorId, u32),
    group_reqs: &[(ResId, i64)],
    acc: &BTreeMap<FrId, i64>,
    ev: &mut FlavorEval,
) -> Option<Vec<(FrId, i64)>> {
    let st = ctx.st;
    let t = wl.team;
    let team = &st.teams[t.idx()];
    let mut usage_here: Vec<(FrId, i64)> = Vec::new();
    for (r, per_pod) in group_reqs {
        let Some(fr) = st
            .names
            .find_fr(f, *r)
            .filter(|fr| team.quota(*fr).is_some())
        else {
            ev.note(|| Finding::NoQuota { res: *r });
            ev.mode = Mode::NoFit;
            return None;
        };
        let q = team.quota(fr).copied().unwrap_or_default();
        let earlier = acc.get(&fr).copied().unwrap_or(0);
        let val = earlier + per_pod * i64::from(count);
        usage_here.push((fr, val));
        let usage = ctx.acct.usage(t, fr);
        let ask = Ask {
            res: *r,
            fr,
            requested: val,
            earlier,
            nominal: q.nominal,
        };
        let potential = quota::potential_available(st, t, fr);
        if val > potential {
            ev.exceeds_max = true;
            ev.mode = Mode::NoFit;
            ev.note(|| Finding::OverMax {
                ask,
                potential,
                reserved: team.reserved(fr),
                borrowed_now: (usage - q.nominal).max(0),
                bound: match q.borrowing_limit {
                    Some(bl) if q.nominal + bl <= potential => MaxBound::BorrowingLimit(bl),
                    _ => MaxBound::Cohort,
                },
            });
            return None;
        }
        ev.borrows = (ev.borrows).max(quota::borrow_level(st, &ctx.acct, t, fr, val, usage));
        let avail = quota::available(st, &ctx.acct, t, fr);
        if val > avail {
            // What is still available, and so how much more is needed, changes with every
            // admission and completion in the cohort: the pending message names neither (each
            // change would rewrite the message of every workload waiting so, in a plan and in
            // the replicated log); `explain` and `explain::now_note` say them when read.
            let may_preempt =
                preemption::may_preempt_for_quota(st, &ctx.acct, wl, (fr, q.nominal), val);
            ev.note(|| Finding::Short {
                ask,
                available: avail,
                usage,
                borrowing_limit: q.borrowing_limit,
                binding: Binding::of(st, &ctx.acct, t, &ask, (usage, q.borrowing_limit)),
                may_preempt,
            });
            if may_preempt {
                ev.mode = ev.mode.min(Mode::Preempt);
                ev.contested.insert(fr);
            } else {
                ev.mode = Mode::NoFit;
            }
        }
    }
    Some(usage_here)
}

/// Whether the flavor's nodes are there; where they lack room, what they add to the contested
/// pairs (or that the pods cannot be split over them).
fn flavor_room(
    ctx: &mut Ctx,
    wl: &Workload,
    (ps, f, count): (usize, FlavorId, u32),
    ev: &mut FlavorEval,
) -> bool {
    let st = ctx.st;
    let reqs = &wl.pod_reqs[ps];
    if !ctx.acct.nodes.has_flavor(f) {
        ev.note(|| Finding::NoNodes);
        ev.mode = Mode::NoFit;
        return false;
    }
    let shortfall = if ev.mode == Mode::Preempt {
        // Quota is short already: what the nodes add to the contested pairs.
        node_shortfall(st, &mut ctx.acct.nodes, f, reqs, count, wl.topology())
    } else if let Err(fail) = ctx.acct.nodes.try_place_in(f, reqs, count, wl.topology()) {
        // The room left on the flavor's nodes is said when the workload is read, as above.
        let borrows = ev.borrows;
        ev.note(|| Finding::NoRoom {
            placed: fail.placed,
            wanted: fail.wanted,
            borrows: borrows > 0,
        });
        ev.mode = Mode::Preempt;
        node_shortfall(st, &mut ctx.acct.nodes, f, reqs, count, wl.topology())
    } else {
        NodeShortfall::Room
    };
    match shortfall {
        NodeShortfall::Room => {}
        NodeShortfall::Pairs(pairs) => ev.contested.extend(pairs),
        NodeShortfall::Split => ev.placement_short = true,
    }
    true
}

/// The victims a pod set short of quota or room would preempt in this flavor, and whether it
/// then borrows; none found: it waits.
fn choose_victims(
    ctx: &mut Ctx,
    wl: &Workload,
    (ps, f, count): (usize, FlavorId, u32),
    covers_all: bool,
    usage_here: &[(FrId, i64)],
    ev: &mut FlavorEval,
) {
    let st = ctx.st;
    let t = wl.team;
    let place = if st.placement && covers_all {
        vec![(ps, f, count)]
    } else {
        Vec::new()
    };
    let contested_flavors: BTreeSet<FlavorId> = if ev.placement_short {
        [f].into()
    } else {
        BTreeSet::new()
    };
    match preemption::find_victims(
        ctx,
        wl,
        usage_here,
        &place,
        &ev.contested,
        &contested_flavors,
    ) {
        Some(v) if !v.is_empty() => {
            ev.note(|| Finding::Preempts(v.clone()));
            ev.victims = Some(v.clone());
            ev.mode = if v.iter().all(|x| ctx.st.workload(x.id).team != t) {
                Mode::Reclaim
            } else {
                Mode::Preempt
            };
            // The borrow level counts after the victims are gone (Kueue does the same).
            ev.borrows = level_after(ctx, t, usage_here, &v);
        }
        Some(_) => ev.mode = Mode::Fit,
        None => {
            // The pairs the search looked at: the contested ones, and every pair of a flavor
            // whose nodes are short as a whole (no quick evaluation searches).
            let mut pairs = ev.contested.clone();
            for (fr, _) in usage_here {
                if contested_flavors.contains(&st.names.fr_parts(*fr).0) {
                    pairs.insert(*fr);
                }
            }
            let waits_for_leavers = ctx.fits_once_victims_leave;
            ev.note(|| Finding::NoVictims {
                pairs,
                waits_for_leavers,
            });
            ev.mode = Mode::NoCandidates;
        }
    }
}

/// The borrow level of team `t` using `usage_here` once victims `v` are gone. In a flat
/// cohort only its own victims' usage counts (its level is its own usage against its
/// nominal); in a tree, every victim's leaves the cohorts' pools too.
fn level_after(ctx: &mut Ctx, t: TeamId, usage_here: &[(FrId, i64)], v: &[Victim]) -> u8 {
    let st = ctx.st;
    let nested = st.cohorts[st.teams[t.idx()].cohort.idx()]
        .tree
        .parent
        .is_some();
    if nested {
        for x in v {
            ctx.remove(x.id);
        }
        let level = (usage_here.iter())
            .map(|(fr, val)| {
                let usage = ctx.acct.usage(t, *fr);
                quota::borrow_level(st, &ctx.acct, t, *fr, *val, usage)
            })
            .max()
            .unwrap_or(0);
        for x in v.iter().rev() {
            ctx.restore(x.id);
        }
        return level;
    }
    (usage_here.iter())
        .map(|(fr, val)| {
            let freed: i64 = v
                .iter()
                .map(|x| st.workload(x.id))
                .filter(|w| w.team == t)
                .filter_map(|w| ctx.admission_of(w.id))
                .flat_map(|a| a.usage.iter())
                .filter(|(u, _)| u == fr)
                .map(|(_, q)| *q)
                .sum();
            let usage = ctx.acct.usage(t, *fr);
            quota::borrow_level(st, &ctx.acct, t, *fr, val - freed, usage)
        })
        .max()
        .unwrap_or(0)
}

/// What happened to one workload in the cycle.
pub(crate) enum Outcome {
    Admitted(Admission),
    Preempting(Vec<Victim>, Assignment),
    Pending {
        reason: Arc<str>,
        message: Arc<str>,
        hold: Vec<(FrId, i64)>,
    },
}

pub(crate) fn full_counts(wl: &Workload) -> Vec<u32> {
    wl.spec.pod_sets.iter().map(|p| p.count).collect()
}

/// Inside one cycle a team either takes by preemption or loses to it, never both: chains
/// such as A takes from B while B takes from C and C from A would churn across cycles. A
/// preemption by a team that lost workloads to one, or taking from a team that preempted, is
/// deferred to the next cycle.
pub(crate) fn deferred(
    st: &State,
    wl: &Workload,
    outcome: Outcome,
    victim_teams: &BTreeSet<TeamId>,
    preemptor_teams: &BTreeSet<TeamId>,
) -> Outcome {
    match outcome {
        Outcome::Preempting(victims, _)
            if victim_teams.contains(&wl.team)
                || victims.iter().any(|v| {
                    let vt = st.workload(v.id).team;
                    preemptor_teams.contains(&vt) && vt != wl.team
                }) =>
        {
            Outcome::Pending {
                reason: PendingReason::WaitingForQuota.as_str().into(),
                message: "preemption deferred to the next cycle: the teams involved already preempted or were preempted in this cycle".into(),
                hold: Vec::new(),
            }
        }
        o => o,
    }
}

/// What a cycle on `st` at `now` does with pending workload `wl` when it decides it first:
/// `process` on the state as it is. `explain` says this; the cycle does it.
pub fn decide(st: &State, wl: &Workload, now: Time) -> Decided {
    let mut ctx = Ctx::new(st, now);
    match process(&mut ctx, wl) {
        Outcome::Admitted(a) => Decided::Admits {
            counts: a.pod_sets.iter().map(|p| p.count).collect(),
            flavors: a.pod_sets.into_iter().map(|p| p.flavors).collect(),
        },
        Outcome::Preempting(victims, a) => Decided::Preempts {
            counts: a.counts,
            victims: victims.iter().map(|v| v.id).collect(),
        },
        Outcome::Pending {
            reason, message, ..
        } => Decided::Waits {
            reason: reason.to_string(),
            message: message.to_string(),
        },
    }
}

/// Decides one workload against the working state.
pub(crate) fn process(ctx: &mut Ctx, wl: &Workload) -> Outcome {
    let full = full_counts(wl);
    let a = assign(ctx, wl, &full, false);
    if let Some(o) = try_assignment(ctx, wl, &a) {
        return o;
    }
    // Partial admission: the largest counts >= min_count that fit or can preempt.
    let deltas: Vec<u32> = wl
        .spec
        .pod_sets
        .iter()
        .map(|p| p.count - p.min_count.unwrap_or(p.count))
        .collect();
    let total: u32 = deltas.iter().sum();
    if total > 0 {
        // With slices, a pod set is admitted in whole slices only (the fewest at or above its
        // min_count).
        let slice = wl
            .topology()
            .and_then(|a| a.slice)
            .map_or(1, |s| s.size.max(1));
        let counts_at = |i: u32| -> Vec<u32> {
            wl.spec
                .pod_sets
                .iter()
                .zip(&deltas)
                .map(|(p, d)| {
                    let c = p.count - ((u64::from(*d) * u64::from(i)) / u64::from(total)) as u32;
                    let least = p.min_count.unwrap_or(p.count).div_ceil(slice) * slice;
                    (c / slice * slice).max(least).min(p.count)
                })
                .collect()
        };
        // Smallest i in 1..=total whose counts fit or can preempt (binary search, as Kueue).
        let (mut lo, mut hi) = (1u32, total + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let m = assign(ctx, wl, &counts_at(mid), false).mode;
            if m >= Mode::Preempt {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if lo <= total {
            let pa = assign(ctx, wl, &counts_at(lo), false);
            if let Some(o) = try_assignment(ctx, wl, &pa) {
                return o;
            }
        }
    }
    // Pending: say why, and hold capacity when preemption was possible in principle.
    let team = &ctx.st.teams[wl.team.idx()];
    let mut hold = Vec::new();
    if a.mode == Mode::NoCandidates
        && team.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::Any
    {
        for (fr, v) in &a.usage {
            let q = team.quota(*fr).copied().unwrap_or_default();
            let u = ctx.acct.usage(wl.team, *fr);
            let h = if a.borrows > 0 {
                match q.borrowing_limit {
                    Some(bl) => (*v).min(q.nominal + bl - u),
                    None => *v,
                }
            } else {
                (*v).min(q.nominal - u).max(0)
            };
            if h > 0 {
                hold.push((*fr, h));
            }
        }
    }
    let mut message = if a.messages.is_empty() {
        "waiting for quota".to_string()
    } else {
        a.messages.join("; ")
    };
    if a.mode == Mode::NoCandidates && !a.messages.iter().any(|m| m.contains(WAITS_FOR_LEAVERS)) {
        message
            .push_str(". No workload may be preempted for it under the team's preemption policy");
    }
    Outcome::Pending {
        reason: a.reason.as_str().into(),
        message: message.into(),
        hold,
    }
}

pub(crate) fn try_assignment(ctx: &mut Ctx, wl: &Workload, a: &Assignment) -> Option<Outcome> {
    match a.mode {
        Mode::Fit => {
            let placement = if ctx.st.placement {
                match ctx.place_all(wl, &a.place) {
                    Ok(p) => {
                        for (_, al) in p.iter().rev() {
                            ctx.acct.nodes.release(al);
                        }
                        p
                    }
                    Err(_) => return None,
                }
            } else {
                Vec::new()
            };
            let borrowed = quota::borrowed_part(ctx.st, &ctx.acct, wl.team, &a.usage);
            Some(Outcome::Admitted(Admission {
                pod_sets: wl
                    .spec
                    .pod_sets
                    .iter()
                    .enumerate()
                    .map(|(i, p)| PodSetAdmission {
                        name: p.name.clone(),
                        count: a.counts[i],
                        flavors: a.flavors[i].clone(),
                    })
                    .collect(),
                usage: a.usage.clone(),
                placement,
                borrowed,
            }))
        }
        Mode::Preempt | Mode::Reclaim => {
            let mut contested = a.contested.clone();
            // Quota shortfalls of the whole workload (pod sets together) count as contested.
            for (fr, v) in &a.usage {
                if *v > quota::available(ctx.st, &ctx.acct, wl.team, *fr) {
                    contested.insert(*fr);
                }
            }
            let victims = match &a.victims {
                Some(v) => v.clone(),
                None => preemption::find_victims(
                    ctx,
                    wl,
                    &a.usage,
                    &a.place,
                    &contested,
                    &a.contested_flavors,
                )?,
            };
            if victims.is_empty() {
                // Fits after all (a victim search found room without evicting): admit.
                let mut fit = a.clone();
                fit.mode = Mode::Fit;
                return try_assignment(ctx, wl, &fit);
            }
            Some(Outcome::Preempting(victims, a.clone()))
        }
        Mode::NoFit | Mode::NoCandidates => None,
    }
}

/// Takes back an admission planned earlier in this cycle to make room for `wl`: it leaves the
/// plan and waits with a message that says why.
pub(crate) fn withdraw(ctx: &mut Ctx, plan: &mut Plan, wl: &Workload, v: &Victim) {
    ctx.unplan(v.id);
    plan.admissions.retain(|a| a.wl != v.id);
    plan.pending.push((
        v.id,
        "Pending".into(),
        format!(
            "admission withdrawn in the cycle that decided it, to make room for {}/{} ({})",
            ctx.st.teams[wl.team.idx()].name(),
            wl.spec.name,
            v.reason.phrase()
        )
        .into(),
    ));
}

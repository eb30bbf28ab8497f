//! `allot explain NAME`: why a workload is where it is, with numbers, recomputed from the
//! current state with the scheduler's own tests (`quota::fits` and its parts, node placement,
//! the victim search), not only the condition the last cycle recorded.
//!
//! Pending: the last recorded decision, then per flavor the first check that blocks it (no
//! quota, above nominal + borrowing limit, above what the cohort can ever lend, borrowing limit
//! reached, not enough unused quota in the cohort, no room on nodes, waiting for evictions, no
//! eligible victims), what would let it run, its place in its team's queue and in the cohort's
//! order, and the standing of the cohort's teams. Admitted: where, since when, whether it
//! borrows. Preempted: by whom, why, when. Pure: reads the state, changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use allot_common::quota::{QueueingStrategy, ReclaimWithinCohort, WithinTeam, DEFAULT_COHORT};
use allot_common::PriorityRef;

use crate::census;
use crate::conditions::ConditionType;
use crate::decision::{self, Assignment, Mode};
use crate::ids::{CohortId, FlavorId, FrId, NodeId, ResId, TeamId, WlId};
use crate::machine::Machine;
use crate::nodes::PodAlloc;
use crate::plan::PreemptReason;
use crate::preemption::{self, Victim};
use crate::protection::{self, Spared};
use crate::quota::{self, Share};
use crate::scheduler;
use crate::state::{PreemptedBy, State, Time, WlState, Workload};
use crate::verdict::{Ask, Binding, Decided, Finding, MaxBound, PendingReason, WAITS_FOR_LEAVERS};
use crate::working::Ctx;

/// The numbers a pending workload's last decision depends on, as they are now: per flavor
/// the team may use for it, each requested pair short of quota (how much more is needed, what
/// is available, what the team uses of its nominal), or where quota is not short, the room
/// left on the flavor's nodes. A cycle records why a workload waits (which pair is short, that
/// nodes have no room); these numbers change with every admission and completion in the
/// cohort, so they are derived when the workload is read instead of recorded: recorded, each
/// change rewrote the message of every workload waiting so, in the plan and the replicated
/// log. `None` where the workload does not wait for quota or room (`WaitingForQuota`):
/// where it never fits (`ExceedsMaxQuota`, `NoMatchingFlavor`), or was just evicted and not
/// looked at again yet.
pub fn now_note(st: &State, wl: &Workload) -> Option<String> {
    match wl.pending_status() {
        Some((reason, _))
            if wl.state == WlState::Pending
                && reason == PendingReason::WaitingForQuota.as_str() =>
        {
            numbers_now(st, wl)
        }
        _ => None,
    }
}

/// `now_note` for any workload, whether or not a decision was recorded for it: the parts,
/// `; `-separated.
fn numbers_now(st: &State, wl: &Workload) -> Option<String> {
    let t = wl.team;
    let team = &st.teams[t.idx()];
    let mut flavors: Vec<FlavorId> = Vec::new();
    for g in &team.groups {
        if wl
            .pod_reqs
            .iter()
            .flatten()
            .any(|(r, _)| g.resources.contains(r))
        {
            for f in &g.flavors {
                if wl.pinned.is_none_or(|p| p == *f) && !flavors.contains(f) {
                    flavors.push(*f);
                }
            }
        }
    }
    let mut parts = Vec::new();
    for f in flavors {
        let fname = st.names.flavor_name(f);
        // The whole workload's request per pair of this flavor (pod sets together).
        let mut want: BTreeMap<FrId, i64> = BTreeMap::new();
        for (ps, reqs) in wl.spec.pod_sets.iter().zip(&wl.pod_reqs) {
            for (r, per_pod) in reqs {
                if let Some(fr) = st
                    .names
                    .find_fr(f, *r)
                    .filter(|fr| team.quota(*fr).is_some())
                {
                    *want.entry(fr).or_insert(0) += per_pod * i64::from(ps.count);
                }
            }
        }
        let mut short = false;
        for (fr, val) in &want {
            // The one quota test (`quota::fits`), pair by pair: each short pair is said.
            let Err(shortfall) = quota::fits(st, &st.acct, t, &[(*fr, *val)], true) else {
                continue;
            };
            short = true;
            let (_, r) = st.names.fr_parts(*fr);
            let fmt = |v: i64| st.names.format_qty(r, v);
            let nominal = team.quota(*fr).map_or(0, |q| q.nominal);
            parts.push(format!(
                "{} in flavor {fname}: {} more needed (available {}; team uses {} of nominal {})",
                st.names.resource_name(r),
                fmt(shortfall.requested - shortfall.available),
                fmt(shortfall.available),
                fmt(st.acct.usage(t, *fr)),
                fmt(nominal)
            ));
        }
        if !short && st.placement && !want.is_empty() {
            // The flavor's requested resources, once each.
            let reqs: Vec<(ResId, i64)> = want
                .iter()
                .map(|(fr, v)| (st.names.fr_parts(*fr).1, *v))
                .collect();
            let mut room = st.acct.nodes.describe_room(f, &reqs, &st.names);
            if let (Some(ask), [ps]) = (wl.topology(), &wl.spec.pod_sets[..]) {
                room.push_str("; ");
                room.push_str(
                    &st.acct
                        .nodes
                        .describe_domains(f, &wl.pod_reqs[0], ps.count, ask),
                );
            }
            parts.push(format!("nodes of flavor {fname}: {room}"));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The message a workload's condition shows when read: as recorded, and for the decision a
/// pending workload waits on, with the numbers it depends on as they are now (`now_note`).
pub fn shown_message(st: &State, wl: &Workload, kind: &str, status: bool, message: &str) -> String {
    match now_note(st, wl).filter(|_| kind == ConditionType::QuotaReserved.as_str() && !status) {
        Some(note) if message.is_empty() => format!("Now: {note}"),
        Some(note) => format!("{message}. Now: {note}"),
        None => message.to_string(),
    }
}

/// Lines explaining workload `id` at `now` (the cluster's clock: the minimum run time that
/// spares a workload from preemption ends by it), most important first.
pub fn explain(m: &Machine, id: WlId, now: Time) -> Vec<String> {
    explain_state(&m.state, id, now)
}

/// `explain` on the scheduling state alone.
pub fn explain_state(st: &State, id: WlId, now: Time) -> Vec<String> {
    let Some(wl) = st.workloads.get(&id) else {
        return vec![format!("no workload with id {}", id.0)];
    };
    match wl.state {
        WlState::Succeeded | WlState::Failed | WlState::Cancelled => {
            let (t, msg) = wl
                .condition(ConditionType::Finished)
                .map(|c| (fmt_time(c.time), c.message.to_string()))
                .unwrap_or_else(|| ("at an unknown time".into(), String::new()));
            return vec![format!(
                "workload {} (team {}) is {} since {t}{}: it neither waits for nor holds quota",
                wl.spec.name,
                st.teams[wl.team.idx()].name(),
                wl.state.as_str(),
                if msg.is_empty() {
                    String::new()
                } else {
                    format!(" ({msg})")
                }
            )];
        }
        _ => {}
    }
    let mut out = vec![header(st, wl)];
    match wl.state {
        WlState::Pending => pending(st, wl, now, &mut out),
        WlState::Admitted | WlState::Running => admitted(st, wl, &mut out),
        WlState::Evicting => evicting(st, wl, &mut out),
        _ => {}
    }
    out
}

/// Times are milliseconds on the cluster's clock, shown in seconds: `t=12.3s`.
pub fn fmt_time(ms: Time) -> String {
    // A real cluster stamps entries with the leader's wall clock (ms since the Unix epoch);
    // simulations count from 0.
    if ms > 1_000_000_000_000 {
        return allot_common::timefmt::utc_ms(ms);
    }
    let sign = if ms < 0 { "-" } else { "" };
    let a = ms.unsigned_abs();
    let (s, frac) = (a / 1000, a % 1000);
    if frac == 0 {
        format!("t={sign}{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("t={sign}{s}.{}s", f.trim_end_matches('0'))
    }
}

/// `3 gpu`, `8Gi memory`.
fn qty(st: &State, r: ResId, v: i64) -> String {
    format!(
        "{} {}",
        st.names.format_qty(r, v),
        st.names.resource_name(r)
    )
}

/// `gpu in ml.g5.8xlarge`.
fn fr_name(st: &State, fr: FrId) -> String {
    let (f, r) = st.names.fr_parts(fr);
    format!(
        "{} in {}",
        st.names.resource_name(r),
        st.names.flavor_name(f)
    )
}

fn fmt_share(s: &Share) -> String {
    if s.num == 0 {
        return "0".into();
    }
    let v = if s.infinite { s.ratio() } else { s.value() };
    let txt = format!("{v:.1}");
    let txt = txt.strip_suffix(".0").unwrap_or(&txt).to_string();
    if s.infinite {
        format!("infinite (weight 0; unweighted {txt})")
    } else {
        txt
    }
}

fn per_pod(st: &State, reqs: &[(ResId, i64)]) -> String {
    reqs.iter()
        .map(|(r, v)| qty(st, *r, *v))
        .collect::<Vec<_>>()
        .join(", ")
}

fn who(st: &State, w: &Workload) -> String {
    format!(
        "{}/{} (priority {}, {})",
        st.teams[w.team.idx()].name(),
        w.spec.name,
        w.priority,
        w.state.as_str()
    )
}

fn header(st: &State, wl: &Workload) -> String {
    let class = match &wl.spec.priority {
        PriorityRef::Class(c) => format!(" (class {c})"),
        _ => String::new(),
    };
    format!(
        "workload {}: team {}, priority {}{class}, {}, submitted {}",
        wl.spec.name,
        st.teams[wl.team.idx()].name(),
        wl.priority,
        wl.state.as_str(),
        fmt_time(wl.submit_time)
    )
}

fn reason_detail(
    st: &State,
    victim: &Workload,
    preemptor: Option<&Workload>,
    r: PreemptReason,
) -> String {
    let vt = st.teams[victim.team.idx()].name();
    match (r, preemptor) {
        (PreemptReason::InClusterQueue, Some(p)) => format!(
            "a workload of its own team with higher priority needed the room (priority {} > {})",
            p.priority, victim.priority
        ),
        (PreemptReason::InCohortReclamation, Some(p)) => format!(
            "team {} took back quota it lends; team {vt} was borrowing it",
            st.teams[p.team.idx()].name()
        ),
        (PreemptReason::InCohortFairSharing, Some(p)) => format!(
            "fair sharing: team {vt}'s weighted share was above team {}'s",
            st.teams[p.team.idx()].name()
        ),
        (PreemptReason::InCohortReclaimWhileBorrowing, Some(p)) => format!(
            "team {} borrows too and may take lower-priority borrowed work (priority {} > {})",
            st.teams[p.team.idx()].name(),
            p.priority,
            victim.priority
        ),
        _ => r.phrase().to_string(),
    }
}

fn preempted_line(st: &State, wl: &Workload, p: &PreemptedBy, prefix: &str) -> Vec<String> {
    let by = st.workloads.get(&p.preemptor).map(|w| &**w);
    let by_txt = match by {
        Some(b) => who(st, b),
        None => format!("workload id {}", p.preemptor.0),
    };
    vec![
        format!(
            "{prefix} {} by {by_txt}: {} ({}); {}",
            fmt_time(p.time),
            p.reason.phrase(),
            p.reason.as_str(),
            reason_detail(st, wl, by, p.reason)
        ),
        format!("preemption message: {}", p.message),
    ]
}

// ---------------------------------------------------------------- admitted and evicting

fn admitted(st: &State, wl: &Workload, out: &mut Vec<String>) {
    let team = &st.teams[wl.team.idx()];
    let Some(adm) = &wl.admission else {
        out.push("admitted without a recorded admission".into());
        return;
    };
    let since = wl.admitted_at.map(fmt_time).unwrap_or_else(|| "?".into());
    let mut where_: Vec<String> = Vec::new();
    for (i, ps) in adm.pod_sets.iter().enumerate() {
        let flavors: BTreeSet<&str> = ps
            .flavors
            .iter()
            .map(|(_, f)| st.names.flavor_name(*f))
            .collect();
        let mut nodes: BTreeMap<NodeId, (u32, Vec<String>)> = BTreeMap::new();
        for (_, p) in adm.placement.iter().filter(|(k, _)| *k == i) {
            let e = nodes.entry(p.node).or_default();
            e.0 += 1;
            for (r, idx) in &p.devices {
                e.1.push(format!(
                    "{} {}",
                    st.names.resource_name(*r),
                    idx.iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ));
            }
        }
        let on = if nodes.is_empty() {
            String::new()
        } else {
            format!(
                " on {}",
                nodes
                    .iter()
                    .map(|(n, (pods, devs))| {
                        let mut s = format!("{} ({} pod(s)", st.acct.nodes.node(*n).name, pods);
                        if !devs.is_empty() {
                            s.push_str(&format!("; {}", devs.join("; ")));
                        }
                        s.push(')');
                        s
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        where_.push(format!(
            "pod set {}: {} pod(s) in {}{on}",
            ps.name,
            ps.count,
            flavors.into_iter().collect::<Vec<_>>().join("+")
        ));
    }
    out.push(format!(
        "admitted since {since} in team {}: {}",
        team.name(),
        where_.join("; ")
    ));
    if adm.borrowed.is_empty() {
        out.push(format!(
            "within team {}'s nominal quota when admitted (not borrowing)",
            team.name()
        ));
    } else {
        out.push(format!(
            "borrows {} above team {}'s nominal (at admission): lenders of the cohort may reclaim it",
            adm.borrowed
                .iter()
                .map(|(r, v)| qty(st, *r, *v))
                .collect::<Vec<_>>()
                .join(", "),
            team.name()
        ));
    }
    let now: Vec<String> = adm
        .usage
        .iter()
        .map(|(fr, _)| standing(st, &st.acct, wl.team, *fr))
        .collect();
    if !now.is_empty() {
        out.push(format!("team {} now: {}", team.name(), now.join("; ")));
    }
    if let Some(p) = &wl.preempted_by {
        out.extend(preempted_line(st, wl, p, "previously preempted"));
    }
}

fn evicting(st: &State, wl: &Workload, out: &mut Vec<String>) {
    match &wl.preempted_by {
        Some(p)
            if wl
                .condition(ConditionType::Preempted)
                .is_some_and(|c| c.status) =>
        {
            out.extend(preempted_line(st, wl, p, "preempted"));
        }
        _ => {
            if let Some(c) = wl.condition(ConditionType::Evicted).filter(|c| c.status) {
                out.push(format!(
                    "evicted {}: {}: {}",
                    fmt_time(c.time),
                    c.reason,
                    c.message
                ));
            }
        }
    }
    out.push(
        "eviction in progress: its quota and nodes are released once its pods are gone; it is then requeued with its original submit time"
            .into(),
    );
}

// ---------------------------------------------------------------- pending

/// Usage of a team on one pair: `gpu in ml.g5.8xlarge: uses 6 of nominal 4 (borrowing 2, borrowing limit 4)`.
fn standing(st: &State, acct: &quota::Acct, t: TeamId, fr: FrId) -> String {
    let team = &st.teams[t.idx()];
    let (_, r) = st.names.fr_parts(fr);
    let u = acct.usage(t, fr);
    let Some(q) = team.quota(fr) else {
        return format!(
            "{}: uses {}, no quota",
            fr_name(st, fr),
            st.names.format_qty(r, u)
        );
    };
    let f = |v: i64| st.names.format_qty(r, v);
    let mut s = format!(
        "{}: uses {} of nominal {}",
        fr_name(st, fr),
        f(u),
        f(q.nominal)
    );
    let mut extra = Vec::new();
    if u > q.nominal {
        extra.push(format!("borrowing {}", f(u - q.nominal)));
    }
    if let Some(bl) = q.borrowing_limit {
        extra.push(format!("borrowing limit {}", f(bl)));
    }
    if let Some(ll) = q.lending_limit {
        extra.push(format!("lending limit {}", f(ll)));
    }
    if !extra.is_empty() {
        s.push_str(&format!(" ({})", extra.join(", ")));
    }
    s
}

/// What one check found: lines for the reader and ways to let the workload run.
#[derive(Default)]
struct Diag {
    lines: Vec<String>,
    ifs: Vec<String>,
}

impl Diag {
    fn suggest(&mut self, s: String) {
        if !self.ifs.contains(&s) {
            self.ifs.push(s);
        }
    }
    /// A way that is already under way or decided (evictions): it goes first.
    fn suggest_first(&mut self, s: String) {
        self.ifs.retain(|x| *x != s);
        self.ifs.insert(0, s);
    }
}

/// When and why it was last evicted, if it was.
fn evicted_line(wl: &Workload) -> Option<String> {
    let e = wl.condition(ConditionType::Evicted).filter(|c| c.status)?;
    Some(format!(
        "evicted {}: {}: {}",
        fmt_time(e.time),
        e.reason,
        e.message
    ))
}

/// Why it is pending again after an eviction, and the last scheduling decision about it.
fn requeue_lines(st: &State, wl: &Workload, out: &mut Vec<String>) {
    if let Some(rq) = wl.condition(ConditionType::Requeued).filter(|c| c.status) {
        match &wl.preempted_by {
            Some(p) if &*rq.reason == "Preempted" => {
                out.extend(preempted_line(st, wl, p, "preempted"));
            }
            _ => {
                out.extend(evicted_line(wl));
            }
        }
        out.push(format!(
            "requeued {} with its original submit time {}",
            fmt_time(rq.time),
            fmt_time(wl.submit_time)
        ));
    }
    match wl
        .condition(ConditionType::QuotaReserved)
        .filter(|c| !c.status)
    {
        Some(c) if !c.message.is_empty() => out.push(format!(
            "last scheduling decision ({}): {}: {}",
            fmt_time(c.time),
            c.reason,
            c.message
        )),
        Some(c) => out.push(format!(
            "last scheduling decision ({}): {}",
            fmt_time(c.time),
            c.reason
        )),
        None => out.push("not considered by a scheduling cycle yet".into()),
    }
}

/// Victims it chose that are still leaving: whether there are any.
fn leaving_victims(st: &State, wl: &Workload, d: &mut Diag) -> bool {
    let leaving: Vec<&Workload> = st
        .workloads
        .values()
        .map(|v| &**v)
        .filter(|v| v.state == WlState::Evicting)
        .filter(|v| {
            v.preempted_by
                .as_ref()
                .is_some_and(|p| p.preemptor == wl.id)
        })
        .collect();
    if !leaving.is_empty() {
        d.lines.push(format!(
            "waiting for evictions to finish: {} workload(s) it preempted still hold their quota and nodes: {}",
            leaving.len(),
            leaving
                .iter()
                .map(|v| format!(
                    "{} (preempted {})",
                    who(st, v),
                    v.preempted_by.as_ref().map(|p| fmt_time(p.time)).unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        d.suggest(format!(
            "{} {} stopping",
            leaving
                .iter()
                .map(|v| v.spec.name.as_str())
                .collect::<Vec<_>>()
                .join(" and "),
            if leaving.len() == 1 {
                "finishes"
            } else {
                "finish"
            }
        ));
    } else if wl.preempting.is_some() {
        d.lines.push(
            "it chose victims in the last cycle; it goes first in the next cycle and takes the room they freed"
                .into(),
        );
    }
    !leaving.is_empty()
}

/// Under StrictFIFO, whether the first of the workloads `ahead` in the team's queue that does
/// not fit blocks it (and says which).
fn strict_fifo_blocked(
    st: &State,
    ctx: &mut Ctx,
    wl: &Workload,
    ahead: &[WlId],
    d: &mut Diag,
) -> bool {
    let team = &st.teams[wl.team.idx()];
    if team.spec.queueing != QueueingStrategy::StrictFIFO || ahead.is_empty() {
        return false;
    }
    let full_of = |w: &Workload| decision::full_counts(w);
    let mut blocker = None;
    for id in ahead {
        let w = st.workload(*id);
        let a = decision::assign(ctx, w, &full_of(w), false);
        if a.mode != Mode::Fit {
            let mut why = a.messages.join("; ");
            if let Some(now) = numbers_now(st, w) {
                why = if why.is_empty() {
                    format!("now: {now}")
                } else {
                    format!("{why}; now: {now}")
                };
            }
            blocker = Some((w, why));
            break;
        }
    }
    if let Some((b, why)) = blocker {
        d.lines.push(format!(
            "blocked by StrictFIFO: team {} admits in queue order and {} ahead of it does not fit{}",
            team.name(),
            b.spec.name,
            if why.is_empty() { String::new() } else { format!(" ({why})") }
        ));
        d.suggest(format!("{} is admitted or cancelled", b.spec.name));
        return true;
    }
    false
}

/// What the scheduler would do with it now (`decision::decide`), in words; `mode` is how
/// its full pod counts fit, `blocked` whether work ahead of it holds it back.
fn verdict(decided: &Decided, mode: Mode, blocked: bool) -> String {
    match decided {
        Decided::Admits { .. } if blocked => {
            "fits on its own (quota and nodes), but waits (see below)".to_string()
        }
        Decided::Admits { counts, .. } if mode < Mode::Fit => format!(
            "fits now with {} pod(s), fewer than it asks as its min_count allows: it would be admitted in the next cycle unless workloads ahead of it take the room",
            counts.iter().sum::<u32>()
        ),
        Decided::Admits { .. } => {
            "fits now (quota and nodes): it would be admitted in the next cycle unless workloads ahead of it take the room"
                .to_string()
        }
        Decided::Preempts { .. } => {
            "it can be admitted only by preempting other workloads (see below)".to_string()
        }
        Decided::Waits { .. } => match mode {
            Mode::NoCandidates => {
                "it does not fit and no workload may be preempted for it".to_string()
            }
            Mode::NoFit => "it does not fit in any of its team's flavors".to_string(),
            Mode::Fit | Mode::Preempt | Mode::Reclaim => {
                "it does not fit now and waits (see below)".to_string()
            }
        },
    }
}

/// A workload out of its queue until a gang-readiness backoff ends: why, and until when;
/// nothing is judged before then. False for any other.
fn parked_lines(wl: &Workload, out: &mut Vec<String>) -> bool {
    let Some(rq) = wl
        .condition(ConditionType::Requeued)
        .filter(|_| wl.is_parked())
    else {
        return false;
    };
    out.extend(evicted_line(wl));
    out.push(format!(
        "it is out of its team's queue: it {} ({}); then it is queued again with its original submit time {}",
        rq.message,
        rq.reason,
        fmt_time(wl.submit_time)
    ));
    true
}

fn pending(st: &State, wl: &Workload, now: Time, out: &mut Vec<String>) {
    if parked_lines(wl, out) {
        return;
    }
    let team = &st.teams[wl.team.idx()];
    let mut ctx = Ctx::new(st, now);
    let mut d = Diag::default();

    requeue_lines(st, wl, out);

    let leaving = leaving_victims(st, wl, &mut d);

    // StrictFIFO: the first workload ahead that does not fit blocks the team.
    let queue: Vec<WlId> = team.pending.iter().map(|k| k.id).collect();
    let pos = queue
        .iter()
        .position(|x| *x == wl.id)
        .unwrap_or(queue.len());
    // Both are said: the evictions and the workload ahead.
    let fifo_blocked = strict_fifo_blocked(st, &mut ctx, wl, &queue[..pos], &mut d);
    let blocked = leaving || fifo_blocked;

    // Per pod set and flavor: the scheduler's findings, with numbers; where it takes fewer
    // pods than asked (min_count), at those counts too.
    let full = decision::full_counts(wl);
    let decided = decision::decide(st, wl, now);
    let a = pod_set_lines(&mut ctx, wl, &full, &mut d);
    match &decided {
        Decided::Admits { counts, .. } | Decided::Preempts { counts, .. } if *counts != full => {
            d.lines.push(format!(
                "with {} pod(s), as its min_count allows:",
                counts.iter().sum::<u32>()
            ));
            pod_set_lines(&mut ctx, wl, counts, &mut d);
        }
        _ => {}
    }
    let total_pods: u32 = wl.spec.pod_sets.iter().map(|p| p.count).sum();
    if total_pods > 1 && a.mode < Mode::Fit {
        d.lines.push(format!(
            "gang: all {total_pods} pods{} are admitted and placed together or not at all",
            if wl.spec.pod_sets.len() > 1 {
                format!(" of its {} pod sets", wl.spec.pod_sets.len())
            } else {
                String::new()
            }
        ));
    }
    let verdict = verdict(&decided, a.mode, blocked);
    out.push(format!("now: {verdict}"));
    out.append(&mut d.lines);
    if !d.ifs.is_empty() && (a.mode != Mode::Fit || blocked) {
        out.push(format!("would be admitted if {}", d.ifs.join(", or if ")));
    }
    queue_lines(st, &mut ctx, wl, &queue, pos, out);
}

/// Per pod set of `wl` at `counts` pods, and per flavor its team may use for it: the
/// scheduler's findings in words (`check_flavor`), later pod sets seeing the earlier ones where
/// the scheduler would put them. Returns the scheduler's assignment at those counts.
fn pod_set_lines(ctx: &mut Ctx, wl: &Workload, counts: &[u32], d: &mut Diag) -> Assignment {
    let st = ctx.st;
    let team = &st.teams[wl.team.idx()];
    let full = decision::full_counts(wl);
    let a = decision::assign(ctx, wl, counts, false);
    let multi = wl.spec.pod_sets.len() > 1;
    let mut acc: BTreeMap<FrId, i64> = BTreeMap::new();
    let mut tentative: Vec<PodAlloc> = Vec::new();
    for (i, ps) in wl.spec.pod_sets.iter().enumerate() {
        let reqs = &wl.pod_reqs[i];
        let count = counts[i];
        let label = if multi {
            format!("pod set {} ({count} x {})", ps.name, per_pod(st, reqs))
        } else {
            format!("{count} pod(s) x {}", per_pod(st, reqs))
        };
        for r in decision::uncovered(st, wl.team, reqs) {
            let rn = st.names.resource_name(r);
            d.lines.push(format!(
                "{label}: no quota: team {} has no quota for {rn} in any flavor (NoMatchingFlavor)",
                team.name()
            ));
            d.suggest(format!("team {} had quota for {rn}", team.name()));
        }
        for g in &team.groups {
            let group_reqs: Vec<(ResId, i64)> = reqs
                .iter()
                .filter(|(r, _)| g.resources.contains(r))
                .copied()
                .collect();
            if group_reqs.is_empty() {
                continue;
            }
            let covers_all = group_reqs.len() == reqs.len();
            let flavors: Vec<FlavorId> = decision::offered(wl, &g.flavors).collect();
            if flavors.is_empty() {
                if let Some(p) = wl.pinned {
                    d.lines.push(format!(
                        "{label}: pinned instance type {} is not among team {}'s flavors for {}",
                        st.names.flavor_name(p),
                        team.name(),
                        group_reqs
                            .iter()
                            .map(|(r, _)| st.names.resource_name(*r).to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                continue;
            }
            for f in flavors {
                let head = format!("{label} in {}", st.names.flavor_name(f));
                check_flavor(
                    ctx,
                    wl,
                    i,
                    count,
                    f,
                    &group_reqs,
                    &acc,
                    covers_all,
                    &head,
                    d,
                );
            }
        }
        // Later pod sets see this one's usage and pods where the scheduler would put them.
        let chosen: BTreeSet<FlavorId> = a.flavors[i].iter().map(|(_, f)| *f).collect();
        for (r, f) in &a.flavors[i] {
            if let (Some(fr), Some((_, v))) =
                (st.names.find_fr(*f, *r), reqs.iter().find(|(x, _)| x == r))
            {
                *acc.entry(fr).or_insert(0) += v * i64::from(count);
            }
        }
        if st.placement && chosen.len() == 1 {
            if let Some(f) = chosen.first() {
                if let Ok(allocs) = ctx.acct.nodes.place_in(*f, reqs, count, wl.topology()) {
                    tentative.extend(allocs);
                }
            }
        }
        if let Some(min) = ps.min_count.filter(|m| *m < ps.count && counts == full) {
            if a.mode < Mode::Preempt {
                let mut counts = full.clone();
                counts[i] = min;
                let m = decision::assign(ctx, wl, &counts, false).mode;
                d.lines.push(format!(
                    "pod set {} may run with as few as {min} of {} pods (min_count): with {min} it {}",
                    ps.name,
                    ps.count,
                    if m >= Mode::Preempt {
                        "fits or can preempt"
                    } else {
                        "does not fit either"
                    }
                ));
            }
        }
    }
    for al in tentative.iter().rev() {
        ctx.acct.nodes.release(al);
    }
    a
}

/// The names a flavor's lines are written with.
struct Over<'a> {
    head: &'a str,
    tname: &'a str,
    rname: &'a str,
    fname: &'a str,
    earlier_txt: &'a str,
}

/// A request above the most the team can ever use (`Finding::OverMax`): its borrowing limit,
/// or all it could borrow from its cohort, with the quota that would let it run.
fn over_potential(
    st: &State,
    c: &Over,
    (ask, cohort): (&Ask, CohortId),
    (potential, reserved): (i64, i64),
    bound: MaxBound,
    d: &mut Diag,
) {
    let Over {
        head,
        tname,
        rname,
        fname,
        earlier_txt,
    } = *c;
    let (r, fr, val, nominal) = (ask.res, ask.fr, ask.requested, ask.nominal);
    let n = |v: i64| qty(st, r, v);
    // What the team's cohort could ever give it: its pool, or below a root what the tree
    // lets it draw.
    let pool = quota::cohort_potential(st, cohort, fr);
    match bound {
        MaxBound::BorrowingLimit(bl) => {
            d.lines.push(format!(
                "{head}: exceeds the borrowing limit: requests {}{earlier_txt}, team {tname}'s nominal {} + borrowing limit {} allow at most {}, over by {} (ExceedsMaxQuota)",
                n(val),
                n(nominal),
                n(bl),
                n(nominal + bl),
                n(val - nominal - bl)
            ));
            if val <= reserved + pool {
                d.suggest(format!(
                    "{tname}'s borrow limit for {rname} in {fname} were {}",
                    st.names.format_qty(r, val - nominal)
                ));
            } else {
                d.suggest(format!(
                    "{tname}'s nominal for {rname} in {fname} were {}",
                    st.names.format_qty(r, val)
                ));
            }
        }
        MaxBound::Cohort => {
            let owned = cohort_owned(st, cohort, fr);
            d.lines.push(format!(
                "{head}: exceeds the most team {tname} can ever use: requests {}{earlier_txt}, at most {} (the cohort's lendable pool {}{}, its own lendable nominal included, plus {} of nominal it never lends), over by {} (ExceedsMaxQuota)",
                n(val),
                n(potential),
                st.names.format_qty(r, pool),
                if owned > 0 {
                    format!(" of which {} owned by the cohort", st.names.format_qty(r, owned))
                } else {
                    String::new()
                },
                st.names.format_qty(r, reserved),
                n(val - potential)
            ));
            d.suggest(format!(
                "{tname}'s nominal for {rname} in {fname} were {}",
                st.names.format_qty(r, nominal + val - potential)
            ));
        }
    }
}

/// The other teams of its cohort holding some of `fr`'s lendable pool: (borrowed above their
/// nominal, in the pool, team), borrowers first.
fn pool_users(ctx: &Ctx, t: TeamId, fr: FrId) -> Vec<(i64, i64, TeamId)> {
    let st = ctx.st;
    let cohort = &st.cohorts[st.teams[t.idx()].cohort.idx()];
    let mut users: Vec<(i64, i64, TeamId)> = Vec::new();
    for m in cohort.sharing() {
        if *m == t {
            continue;
        }
        let mt = &st.teams[m.idx()];
        let mu = ctx.acct.usage(*m, fr);
        let in_pool = (mu - mt.reserved(fr)).max(0);
        if in_pool > 0 {
            let nominal = mt.quota(fr).map(|q| q.nominal).unwrap_or(0);
            users.push(((mu - nominal).max(0), in_pool, *m));
        }
    }
    users.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    users
}

/// Who holds the lendable pool of `fr`, in words.
fn pool_line(
    ctx: &Ctx,
    users: &[(i64, i64, TeamId)],
    r: ResId,
    fr: FrId,
    pool: i64,
    pool_used: i64,
) -> String {
    let st = ctx.st;
    let (f, _) = st.names.fr_parts(fr);
    let (rname, fname) = (st.names.resource_name(r), st.names.flavor_name(f));
    format!(
        "  lendable pool of {rname} in {fname}: {}, in use {}: {}",
        st.names.format_qty(r, pool),
        st.names.format_qty(r, pool_used),
        users
            .iter()
            .map(|(b, _, m)| {
                let mt = &st.teams[m.idx()];
                let mu = ctx.acct.usage(*m, fr);
                let nominal = mt.quota(fr).map(|q| q.nominal).unwrap_or(0);
                if *b > 0 {
                    format!(
                        "team {} uses {} (borrowing {} above its nominal {})",
                        mt.name(),
                        st.names.format_qty(r, mu),
                        st.names.format_qty(r, *b),
                        st.names.format_qty(r, nominal)
                    )
                } else {
                    format!(
                        "team {} uses {} of its nominal {}",
                        mt.name(),
                        st.names.format_qty(r, mu),
                        st.names.format_qty(r, nominal)
                    )
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Quota fits but the flavor's nodes have room for only `placed` of the pod set's `wanted`
/// pods (`Finding::NoRoom`): where the room is, and what room would let it run.
fn no_room_lines(
    ctx: &Ctx,
    wl: &Workload,
    (ps, f, count): (usize, FlavorId, u32),
    (placed, wanted, borrows): (u32, u32, bool),
    head: &str,
    d: &mut Diag,
) {
    let st = ctx.st;
    let fname = st.names.flavor_name(f);
    let reqs = &wl.pod_reqs[ps];
    let domains = wl
        .topology()
        .map(|ask| format!("; {}", ctx.acct.nodes.describe_domains(f, reqs, count, ask)))
        .unwrap_or_default();
    d.lines.push(
        format!(
            "{head}: quota fits{} but no node has room: {placed} of {wanted} pod(s) can be placed{}; {}",
            if borrows { " (by borrowing)" } else { "" },
            if domains.is_empty() { "" } else { " in one domain" },
            node_summary(st, &ctx.acct.nodes, f, reqs)
        ) + &domains,
    );
    d.suggest(match wl.topology() {
        Some(ask) => format!(
            "one {} domain of {fname} had room for {} more pod(s) of {}",
            ask.level,
            wanted - placed,
            per_pod(st, reqs)
        ),
        None => format!(
            "nodes of {fname} had room for {} more pod(s) of {}",
            wanted - placed,
            per_pod(st, reqs)
        ),
    });
}

/// Ways out when the cohort's pool or the borrowing limit binds: which other teams freeing
/// what is missing, or which borrowing limit, would let it run.
fn suggest_lenders(
    st: &State,
    c: &Over,
    r: ResId,
    users: &[(i64, i64, TeamId)],
    (miss_bl, miss_pool): (i64, i64),
    bl_needed: Option<i64>,
    d: &mut Diag,
) {
    let Over {
        tname,
        rname,
        fname,
        ..
    } = *c;
    let n = |v: i64| qty(st, r, v);
    if miss_bl == 0 {
        // The pool binds: another team freeing what is missing.
        let single: Vec<TeamId> = users
            .iter()
            .filter(|(_, p, _)| *p >= miss_pool)
            .map(|(_, _, m)| *m)
            .collect();
        for m in &single {
            d.suggest(format!(
                "team {} frees {} in {fname}",
                st.teams[m.idx()].name(),
                n(miss_pool)
            ));
        }
        let total: i64 = users.iter().map(|(_, p, _)| *p).sum();
        if single.is_empty() && total >= miss_pool && users.len() > 1 {
            d.suggest(format!(
                "teams {} free {} in {fname} together",
                users
                    .iter()
                    .map(|(_, _, m)| st.teams[m.idx()].name())
                    .collect::<Vec<_>>()
                    .join(" and "),
                n(miss_pool)
            ));
        }
    } else if miss_pool == 0 {
        if let Some(bl) = bl_needed {
            d.suggest(format!(
                "{tname}'s borrow limit for {rname} in {fname} were {}",
                st.names.format_qty(r, bl)
            ));
        }
    } else if let (Some(bl), Some(u)) = (bl_needed, users.iter().find(|(_, p, _)| *p >= miss_pool))
    {
        d.suggest(format!(
            "team {} frees {} in {fname} and {tname}'s borrow limit for {rname} in {fname} were {}",
            st.teams[u.2.idx()].name(),
            n(miss_pool),
            st.names.format_qty(r, bl)
        ));
    }
}

/// What a pod set requests of one resource beside what is available and what is missing,
/// and what binds: the borrowing limit, the cohort's pool, or no cohort.
fn short_line(
    st: &State,
    c: &Over,
    ask: &Ask,
    (avail, usage, borrowing_limit): (i64, i64, Option<i64>),
    b: &Binding,
    cohort: &crate::state::CohortRt,
) -> String {
    let Over {
        head,
        tname,
        earlier_txt,
        ..
    } = *c;
    let r = ask.res;
    let n = |v: i64| qty(st, r, v);
    let mut line = format!(
        "{head}: requests {}{earlier_txt}, available {}, missing {}; team {tname} uses {} of nominal {}",
        n(ask.requested),
        n(avail),
        n(ask.requested - avail),
        st.names.format_qty(r, usage),
        st.names.format_qty(r, ask.nominal)
    );
    if b.by_borrowing_limit > 0 {
        line.push_str(&format!(
            "; borrowing limit reached: borrowing {} of at most {}",
            st.names.format_qty(r, (usage - ask.nominal).max(0)),
            st.names.format_qty(r, borrowing_limit.unwrap_or(0))
        ));
    }
    if b.by_pool > 0 {
        if cohort.private {
            line.push_str("; the team has no cohort to borrow from");
        } else {
            line.push_str(&format!(
                "; cohort {} has not enough unused lendable quota: {} free of {}",
                cohort.name,
                st.names.format_qty(r, b.pool_free),
                st.names.format_qty(r, b.pool)
            ));
        }
    }
    line
}

/// The pod set fits in this flavor: within the team's nominal, or by borrowing how much.
fn fits_line(ctx: &Ctx, t: TeamId, usage_here: &[(FrId, i64)], head: &str) -> String {
    let st = ctx.st;
    let tname = st.teams[t.idx()].name();
    let borrowed = quota::borrowed_part(st, &ctx.acct, t, usage_here);
    if borrowed.is_empty() {
        format!("{head}: fits within team {tname}'s nominal quota")
    } else {
        format!(
            "{head}: fits by borrowing {} from the cohort",
            borrowed
                .iter()
                .map(|(r, v)| qty(st, *r, *v))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// One flavor for one pod set: the scheduler's own findings (`decision::judge_flavor`), each
/// in words with its numbers, and what would change it.
#[allow(clippy::too_many_arguments)]
fn check_flavor(
    ctx: &mut Ctx,
    wl: &Workload,
    ps: usize,
    count: u32,
    f: FlavorId,
    group_reqs: &[(ResId, i64)],
    acc: &BTreeMap<FrId, i64>,
    covers_all: bool,
    head: &str,
    d: &mut Diag,
) {
    let st = ctx.st;
    let here = (ps, f, count);
    let (findings, usage_here) = decision::judge_flavor(ctx, wl, here, group_reqs, acc, covers_all);
    let tname = st.teams[wl.team.idx()].name();
    let fname = st.names.flavor_name(f);
    let mut no_preempt: Vec<String> = Vec::new();
    let mut short = false;
    for finding in &findings {
        match finding {
            Finding::NoQuota { res } => {
                let rname = st.names.resource_name(*res);
                d.lines.push(format!(
                    "{head}: no quota: team {tname} has no quota for {rname} in {fname}"
                ));
                d.suggest(format!("team {tname} had quota for {rname} in {fname}"));
            }
            Finding::OverMax {
                ask,
                potential,
                reserved,
                bound,
                ..
            } => {
                let earlier_txt = earlier_txt(st, ask);
                let rname = st.names.resource_name(ask.res);
                let c = Over {
                    head,
                    tname,
                    rname: rname.as_str(),
                    fname,
                    earlier_txt: &earlier_txt,
                };
                let cohort = st.teams[wl.team.idx()].cohort;
                over_potential(st, &c, (ask, cohort), (*potential, *reserved), *bound, d);
            }
            Finding::Short { .. } => {
                short = true;
                short_lines(ctx, wl, finding, head, d, &mut no_preempt);
            }
            Finding::NoNodes => {
                d.lines.push(format!(
                    "{head}: {}the cluster has no nodes of {fname}",
                    if short { "" } else { "quota fits but " }
                ));
                d.suggest(format!("nodes of {fname} joined the cluster"));
            }
            Finding::NoRoom {
                placed,
                wanted,
                borrows,
            } => no_room_lines(ctx, wl, here, (*placed, *wanted, *borrows), head, d),
            Finding::Preempts(victims) => victims_lines(st, victims, d),
            Finding::NoVictims {
                waits_for_leavers: true,
                ..
            } => d.lines.push(format!("  {WAITS_FOR_LEAVERS}")),
            Finding::NoVictims { pairs, .. } => d.lines.push(format!(
                "  no workload may be preempted for it: {}",
                why_no_victims(ctx, wl, &usage_here, pairs)
            )),
            Finding::Fits => d.lines.push(fits_line(ctx, wl.team, &usage_here, head)),
        }
    }
    if !no_preempt.is_empty() {
        d.lines.push(format!(
            "  cannot preempt for it: {}",
            no_preempt.join("; ")
        ));
    }
}

/// " (its earlier pod sets take ...)" where they take some of the pair.
fn earlier_txt(st: &State, ask: &Ask) -> String {
    if ask.earlier > 0 {
        format!(
            " (its earlier pod sets take {})",
            qty(st, ask.res, ask.earlier)
        )
    } else {
        String::new()
    }
}

/// A request short of available quota (`Finding::Short`): what binds and by how much, who
/// holds the pool, and ways out; where the team may not preempt for it, why (into
/// `no_preempt`).
fn short_lines(
    ctx: &Ctx,
    wl: &Workload,
    finding: &Finding,
    head: &str,
    d: &mut Diag,
    no_preempt: &mut Vec<String>,
) {
    let Finding::Short {
        ask,
        available,
        usage,
        borrowing_limit,
        binding,
        may_preempt,
    } = finding
    else {
        return;
    };
    let st = ctx.st;
    let t = wl.team;
    let team = &st.teams[t.idx()];
    let cohort = &st.cohorts[team.cohort.idx()];
    let (r, fr, val, usage) = (ask.res, ask.fr, ask.requested, *usage);
    let tname = team.name();
    let (f, _) = st.names.fr_parts(fr);
    let fname = st.names.flavor_name(f);
    let rname = st.names.resource_name(r);
    let earlier_txt = earlier_txt(st, ask);
    let c = Over {
        head,
        tname,
        rname: rname.as_str(),
        fname,
        earlier_txt: &earlier_txt,
    };
    let n = |v: i64| qty(st, r, v);
    let now = (*available, usage, *borrowing_limit);
    d.lines.push(short_line(st, &c, ask, now, binding, cohort));
    // Who holds the pool, borrowers first.
    let users = pool_users(ctx, t, fr);
    if binding.by_pool > 0 && !cohort.private && !users.is_empty() {
        let pool_used = ctx.acct.pool_used[team.cohort.idx()].get(fr);
        d.lines
            .push(pool_line(ctx, &users, r, fr, binding.pool, pool_used));
    }
    // Ways out. The team's own workloads freeing what is missing always works. The
    // borrowing limit that leaves room for the request: own_free + room >= val.
    let reserved = team.reserved(fr);
    let own_free = (reserved - usage).max(0);
    let bl_needed = borrowing_limit.map(|_| val - own_free + usage.max(reserved) - ask.nominal);
    let binds = (binding.by_borrowing_limit, binding.by_pool);
    suggest_lenders(st, &c, r, &users, binds, bl_needed, d);
    let missing = val - available;
    if usage >= missing {
        d.suggest(format!("team {tname} frees {} in {fname}", n(missing)));
    }
    if !may_preempt {
        no_preempt.push(format!(
            "it requests {}, more than team {tname}'s nominal {} for {rname} in {fname}, and may then preempt only through borrow_within_cohort, which is Never{}",
            n(val),
            st.names.format_qty(r, ask.nominal),
            if cohort.tree.parent.is_some() {
                ", or where a cohort below the root has room for it in its own quota, which none has"
            } else {
                ""
            }
        ));
    }
}

/// Quota of `fr` the cohort itself owns (its own quota, and idle capacity under
/// `IdleResourceSharing`).
fn cohort_owned(st: &State, c: CohortId, fr: FrId) -> i64 {
    let cohort = &st.cohorts[c.idx()];
    let (f, r) = st.names.fr_parts(fr);
    let mut owned: i64 = cohort
        .spec
        .iter()
        .flat_map(|s| s.quotas.iter())
        .filter(|fq| fq.flavor == st.names.flavor_name(f))
        .filter_map(|fq| fq.get(st.names.resource_name(r)).map(|q| q.nominal))
        .sum();
    if st.policy.idle_resource_sharing && !cohort.private && cohort.name == DEFAULT_COHORT {
        owned += st.idle_capacity.get(&fr).copied().unwrap_or(0);
    }
    owned
}

/// Free room of a flavor's nodes: counts and the roomiest nodes.
fn node_summary(
    st: &State,
    nodes: &crate::nodes::NodeSet,
    f: FlavorId,
    reqs: &[(ResId, i64)],
) -> String {
    let of_flavor: Vec<&crate::nodes::Node> = nodes
        .nodes
        .iter()
        .map(|n| &**n)
        .filter(|n| n.flavor == f)
        .collect();
    let sched: Vec<&&crate::nodes::Node> = of_flavor.iter().filter(|n| n.schedulable()).collect();
    let unsched = of_flavor.len() - sched.len();
    let mut fit: Vec<(u32, &str, String)> = sched
        .iter()
        .map(|n| {
            let free = reqs
                .iter()
                .map(|(r, _)| {
                    format!(
                        "{} free of {}",
                        qty(st, *r, n.free(*r)),
                        st.names.format_qty(*r, n.capacity(*r))
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            (n.pods_fit(reqs, u32::MAX), &*n.name, free)
        })
        .collect();
    fit.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let takers = fit.iter().filter(|(k, _, _)| *k > 0).count();
    let mut s = format!(
        "{} schedulable node(s) of {}{}; {} can take a pod",
        sched.len(),
        st.names.flavor_name(f),
        if unsched > 0 {
            format!(" ({unsched} unhealthy or cordoned)")
        } else {
            String::new()
        },
        takers
    );
    let shown: Vec<String> = fit
        .iter()
        .take(4)
        .map(|(k, name, free)| format!("{name}: {free}, room for {k} pod(s)"))
        .collect();
    if !shown.is_empty() {
        s.push_str(&format!(
            "; roomiest: {}{}",
            shown.join("; "),
            if fit.len() > 4 {
                format!("; and {} more", fit.len() - 4)
            } else {
                String::new()
            }
        ));
    }
    s
}

fn victims_txt(st: &State, vs: &[Victim]) -> String {
    vs.iter()
        .map(|v| {
            let w = st.workload(v.id);
            format!(
                "{}/{} (priority {}, {}{})",
                st.teams[w.team.idx()].name(),
                w.spec.name,
                w.priority,
                v.reason.as_str(),
                if w.state == WlState::Evicting {
                    ", already Evicting"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The victims the scheduler's search picked (`Finding::Preempts`), or that it waits for
/// evictions to finish.
fn victims_lines(st: &State, v: &[Victim], d: &mut Diag) {
    let names = v
        .iter()
        .map(|x| st.workload(x.id).spec.name.as_str())
        .collect::<Vec<_>>()
        .join(" and ");
    let plural = v.len() > 1;
    if v.iter()
        .all(|x| st.workload(x.id).state == WlState::Evicting)
    {
        d.lines.push(format!(
            "  waiting for evictions to finish: {}",
            victims_txt(st, v)
        ));
        d.suggest_first(format!(
            "{names} {} stopping",
            if plural { "finish" } else { "finishes" }
        ));
    } else {
        d.lines.push(format!(
            "  can preempt: {} (the next cycle evicts them unless workloads ahead of it change the picture)",
            victims_txt(st, v)
        ));
        d.suggest_first(format!(
            "{names} {} evicted",
            if plural { "are" } else { "is" }
        ));
    }
}

/// Why the victim search found nothing: the policies and priorities that rule candidates out.
fn why_no_victims(
    ctx: &Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    f_set: &BTreeSet<FrId>,
) -> String {
    let st = ctx.st;
    let team = &st.teams[wl.team.idx()];
    let policy = team.spec.preemption;
    let what = f_set
        .iter()
        .map(|fr| fr_name(st, *fr))
        .collect::<Vec<_>>()
        .join(", ");
    // The search's own tests, counted (`census`): this only says which rule each count shows.
    let found = census::census(ctx, wl, usage, f_set);
    let took_it = preemption::evicted_by(wl);
    // Why a workload is never one of its candidates (the rules against preemption loops).
    let never_line = |id: &WlId| {
        let c = st.workload(*id);
        if Some(c.id) == took_it {
            format!(
                "{} evicted it and is never taken back by it (no back and forth)",
                c.spec.name
            )
        } else {
            format!(
                "{} led to its eviction through the workloads it evicted, and is not taken while it borrows {what} (no preemption loops)",
                c.spec.name
            )
        }
    };
    let mut parts: Vec<String> = found.own.never.iter().map(never_line).collect();
    let (own, own_ok) = (found.own.users.len(), found.own.allowed);
    parts.push(match policy.within_team {
        WithinTeam::Never => format!(
            "team {} never preempts its own workloads (PreemptTeamTasks=Never)",
            team.name()
        ),
        _ if own == 0 => format!("no workload of team {} uses {what}", team.name()),
        WithinTeam::LowerPriority if own_ok == 0 => format!(
            "team {}'s {own} workload(s) on {what} have priority >= {}",
            team.name(),
            wl.priority
        ),
        WithinTeam::LowerOrNewerEqualPriority if own_ok == 0 => format!(
            "team {}'s {own} workload(s) on {what} have higher priority, or equal priority and an earlier submit time",
            team.name(),
        ),
        _ => format!(
            "{own_ok} of team {}'s workloads on {what} have lower priority",
            team.name()
        ),
    });
    let cohort = &st.cohorts[team.cohort.idx()];
    match &found.reach {
        census::Reach::NoCohort => parts.push(format!("team {} has no cohort", team.name())),
        census::Reach::ReclaimNever => parts.push(format!(
            "team {} does not reclaim from the cohort (reclaim_within_cohort Never)",
            team.name()
        )),
        census::Reach::Teams(teams) if teams.is_empty() => parts.push(format!(
            "no other team of cohort {} borrows {what}",
            cohort.name
        )),
        census::Reach::Teams(teams) => {
            for m in teams {
                parts.extend(m.never.iter().map(never_line));
                let name = st.teams[m.team.idx()].name();
                let by_priority =
                    policy.reclaim_within_cohort == ReclaimWithinCohort::LowerPriority;
                parts.push(if m.allowed == 0 && !m.users.is_empty() && by_priority {
                    format!(
                        "team {name} borrows {what} but its {} workload(s) there have priority >= {} (reclaim_within_cohort LowerPriority)",
                        m.users.len(),
                        wl.priority
                    )
                } else {
                    format!(
                        "team {name} borrows {what}: {} of its workloads there are candidates",
                        m.allowed
                    )
                });
            }
        }
    }
    let rivals: Vec<&Workload> = (found.rivals())
        .flat_map(|m| m.users.iter().map(|id| st.workload(*id)))
        .collect();
    let spared = spared_lines(ctx, &rivals);
    if !spared.is_empty() {
        parts.push(format!(
            "spared from the preemptions that rebalance borrowed capacity: {}",
            spared.join("; ")
        ));
    }
    if own_ok + found.rivals().map(|m| m.allowed).sum::<usize>() > 0 {
        parts.push(candidates_short(st).to_string());
    }
    parts.join("; ")
}

/// Why allowed candidates were not enough: the rule that bounds what they may be taken for.
fn candidates_short(st: &State) -> &'static str {
    if st.policy.fair_share {
        "no set of candidates makes room within the rules (candidates of other teams are taken only while the preemptor's weighted share stays at or below theirs, in a tree of cohorts the shares of the cohorts where the two teams' paths part, or it is within its nominal after admission)"
    } else {
        "evicting every allowed candidate would still not make room without breaking the rules for borrowing (a borrowing workload takes only lower-priority borrowed work)"
    }
}

/// Which of other teams' `candidates` the stability rules spare now (`protection::spared`),
/// and until when: at most a line per rule.
fn spared_lines(ctx: &Ctx, candidates: &[&Workload]) -> Vec<String> {
    let mut young: Vec<(Time, &str)> = Vec::new();
    let mut spent: Vec<&str> = Vec::new();
    for c in candidates {
        match protection::spared(&ctx.st.policy, c, c.admitted_at, ctx.now) {
            Some(Spared::MinimumRunTime { until }) => young.push((until, &c.spec.name)),
            Some(Spared::Budget { .. }) => spent.push(&c.spec.name),
            None => {}
        }
    }
    young.sort();
    let names = |ns: &[&str]| {
        let shown = ns.iter().take(3).copied().collect::<Vec<_>>().join(", ");
        match ns.len() {
            n if n > 3 => format!("{shown} and {} more", n - 3),
            _ => shown,
        }
    };
    let mut out = Vec::new();
    if let Some((first, _)) = young.first() {
        let ns: Vec<&str> = young.iter().map(|(_, n)| *n).collect();
        out.push(format!(
            "{} {} run less than the cluster's minimum run time ({}until {})",
            names(&ns),
            if ns.len() > 1 { "have" } else { "has" },
            if ns.len() > 1 { "the first " } else { "" },
            fmt_time(*first)
        ));
    }
    if !spent.is_empty() {
        out.push(format!(
            "{} {} preempted as often as the cluster's preemption budget allows ({})",
            names(&spent),
            if spent.len() > 1 { "were" } else { "was" },
            ctx.st.policy.stability.preemption_budget
        ));
    }
    out
}

/// A borrow level in words: whether it borrows, and in a tree of cohorts how high.
fn borrow_words(st: &State, level: u8) -> String {
    let nested = st.cohorts.iter().any(|c| c.tree.parent.is_some());
    match level {
        0 => "not borrowing".to_string(),
        l if nested => format!("borrowing at level {l} of its cohort tree"),
        _ => "borrowing".to_string(),
    }
}

/// Its place in its team's queue, and the first few ahead of it.
fn team_queue_line(st: &State, wl: &Workload, queue: &[WlId], pos: usize) -> String {
    let team = &st.teams[wl.team.idx()];
    let ahead: Vec<String> = queue[..pos]
        .iter()
        .take(3)
        .map(|id| {
            let w = st.workload(*id);
            format!(
                "{} (priority {}, submitted {})",
                w.spec.name,
                w.priority,
                fmt_time(w.submit_time)
            )
        })
        .collect();
    format!(
        "queue: position {} of {} in team {}'s queue ({}; by priority, then submit time){}",
        pos + 1,
        queue.len(),
        team.name(),
        match team.spec.queueing {
            QueueingStrategy::StrictFIFO => "StrictFIFO",
            QueueingStrategy::BestEffortFIFO => "BestEffortFIFO",
        },
        if ahead.is_empty() {
            String::new()
        } else {
            format!(
                "; ahead: {}{}",
                ahead.join(", "),
                if pos > 3 {
                    format!(" and {} more", pos - 3)
                } else {
                    String::new()
                }
            )
        }
    )
}

/// Its place in the cohort's order: the teams' queues merged by the scheduler's own entry key.
fn cohort_order_line(st: &State, ctx: &mut Ctx, wl: &Workload) -> String {
    let team = &st.teams[wl.team.idx()];
    let cohort = &st.cohorts[team.cohort.idx()];
    let mut queues: Vec<(TeamId, Vec<scheduler::EntryKey>)> = Vec::new();
    for m in cohort.sharing() {
        let keys: Vec<scheduler::EntryKey> = st.teams[m.idx()]
            .pending
            .iter()
            .map(|k| scheduler::entry_key(ctx, st.workload(k.id)))
            .collect();
        if !keys.is_empty() {
            queues.push((*m, keys));
        }
    }
    let total: usize = queues.iter().map(|(_, k)| k.len()).sum();
    let mut heads = vec![0usize; queues.len()];
    let mut order: Vec<(TeamId, scheduler::EntryKey)> = Vec::with_capacity(total);
    loop {
        let mut best: Option<usize> = None;
        for (qi, (_, keys)) in queues.iter().enumerate() {
            if let Some(k) = keys.get(heads[qi]) {
                if best.is_none_or(|b| *k < queues[b].1[heads[b]]) {
                    best = Some(qi);
                }
            }
        }
        let Some(b) = best else { break };
        order.push((queues[b].0, queues[b].1[heads[b]]));
        heads[b] += 1;
    }
    let cpos = order.iter().position(|(_, k)| k.6 == wl.id).unwrap_or(0);
    let mine = order.get(cpos).map(|(_, k)| *k);
    let criteria = if st.policy.fair_share {
        "preemptors first, then fits without borrowing, lower weighted share after admission, higher priority, earlier submit time"
    } else {
        "preemptors first, then by how high in its cohort tree it borrows (not at all first), higher priority, earlier submit time (fair sharing off)"
    };
    let cname = if cohort.private {
        format!("team {} (no cohort)", team.name())
    } else {
        format!("cohort {}", cohort.name)
    };
    let mut line = format!(
        "cohort order: position {} of {} pending in {cname} ({criteria})",
        cpos + 1,
        total
    );
    if let Some(k) = &mine {
        line.push_str(&format!("; it ranks as {}", borrow_words(st, k.1)));
        if st.policy.fair_share {
            line.push_str(&format!(
                ", team {}'s weighted share after admitting it would be {}",
                team.name(),
                fmt_share(&k.2)
            ));
        }
    }
    let before: Vec<String> = order[..cpos]
        .iter()
        .take(3)
        .map(|(tm, k)| {
            let w = st.workload(k.6);
            format!(
                "{}/{} ({}{})",
                st.teams[tm.idx()].name(),
                w.spec.name,
                borrow_words(st, k.1),
                if st.policy.fair_share {
                    format!(", share after {}", fmt_share(&k.2))
                } else {
                    String::new()
                }
            )
        })
        .collect();
    if !before.is_empty() {
        line.push_str(&format!(
            "; ahead: {}{}",
            before.join(", "),
            if cpos > 3 {
                format!(" and {} more", cpos - 3)
            } else {
                String::new()
            }
        ));
    }
    line
}

/// The standing of the cohort's teams on the pairs this workload could use, and the cohort's
/// lendable pool of each.
fn standing_lines(st: &State, wl: &Workload, out: &mut Vec<String>) {
    let team = &st.teams[wl.team.idx()];
    let cohort = &st.cohorts[team.cohort.idx()];
    let mut frs: Vec<FrId> = Vec::new();
    for g in &team.groups {
        for f in &g.flavors {
            if wl.pinned.is_some_and(|p| p != *f) {
                continue;
            }
            for r in &g.resources {
                if !wl.pod_reqs.iter().any(|rs| rs.iter().any(|(x, _)| x == r)) {
                    continue;
                }
                if let Some(fr) = st.names.find_fr(*f, *r) {
                    if !frs.contains(&fr) {
                        frs.push(fr);
                    }
                }
            }
        }
    }
    let mut members: Vec<TeamId> = cohort.sharing().to_vec();
    members.sort_by(|a, b| st.teams[a.idx()].name().cmp(st.teams[b.idx()].name()));
    for m in members {
        let mt = &st.teams[m.idx()];
        let parts: Vec<String> = frs
            .iter()
            .filter(|fr| mt.quota(**fr).is_some() || st.acct.usage(m, **fr) > 0)
            .map(|fr| standing(st, &st.acct, m, *fr))
            .collect();
        if parts.is_empty() {
            continue;
        }
        let mut s = format!("team {}: {}", mt.name(), parts.join("; "));
        if st.policy.fair_share && !cohort.private {
            s.push_str(&format!(
                "; weighted share {} (weight {})",
                fmt_share(&quota::share(st, &st.acct, m, &[])),
                match mt.spec.weight_ratio() {
                    (n, 1) => n.to_string(),
                    (n, d) => format!("{}", f64::from(n) / f64::from(d)),
                }
            ));
        }
        out.push(s);
    }
    if !cohort.private {
        for fr in &frs {
            let pool = cohort.pool.get(*fr);
            let used = st.acct.pool_used[team.cohort.idx()].get(*fr);
            let (_, r) = st.names.fr_parts(*fr);
            let owned = cohort_owned(st, team.cohort, *fr);
            out.push(format!(
                "cohort {} lendable pool of {}: {} ({}in use {}, free {})",
                cohort.name,
                fr_name(st, *fr),
                st.names.format_qty(r, pool),
                if owned > 0 {
                    format!("{} owned by the cohort; ", st.names.format_qty(r, owned))
                } else {
                    String::new()
                },
                st.names.format_qty(r, used),
                st.names.format_qty(
                    r,
                    quota::cohort_available(st, &st.acct, team.cohort, *fr).max(0)
                )
            ));
        }
    }
}

/// Its place in its team's queue and in the cohort's order, and the cohort's standing.
fn queue_lines(
    st: &State,
    ctx: &mut Ctx,
    wl: &Workload,
    queue: &[WlId],
    pos: usize,
    out: &mut Vec<String>,
) {
    out.push(team_queue_line(st, wl, queue, pos));
    out.push(cohort_order_line(st, ctx, wl));
    standing_lines(st, wl, out);
}

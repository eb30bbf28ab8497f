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

use crate::decision::{self, Mode};
use crate::ids::{CohortId, FlavorId, FrId, NodeId, ResId, TeamId, WlId};
use crate::machine::Machine;
use crate::nodes::PodAlloc;
use crate::plan::PreemptReason;
use crate::preemption::{self, Victim};
use crate::quota::{self, Share};
use crate::scheduler;
use crate::state::{PreemptedBy, State, Time, WlState, Workload};
use crate::working::{self, Ctx};

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
        Some((reason, _)) if wl.state == WlState::Pending && reason == "WaitingForQuota" => {
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
            let avail = quota::available(st, &st.acct, t, *fr);
            if *val <= avail {
                continue;
            }
            short = true;
            let (_, r) = st.names.fr_parts(*fr);
            let fmt = |v: i64| st.names.format_qty(r, v);
            let nominal = team.quota(*fr).map_or(0, |q| q.nominal);
            parts.push(format!(
                "{} in flavor {fname}: {} more needed (available {}; team uses {} of nominal {})",
                st.names.resource_name(r),
                fmt(val - avail),
                fmt(avail),
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
    match now_note(st, wl).filter(|_| kind == "QuotaReserved" && !status) {
        Some(note) if message.is_empty() => format!("Now: {note}"),
        Some(note) => format!("{message}. Now: {note}"),
        None => message.to_string(),
    }
}

/// Lines explaining workload `id`, most important first.
pub fn explain(m: &Machine, id: WlId) -> Vec<String> {
    explain_state(&m.state, id)
}

/// `explain` on the scheduling state alone.
pub fn explain_state(st: &State, id: WlId) -> Vec<String> {
    let Some(wl) = st.workloads.get(&id) else {
        return vec![format!("no workload with id {}", id.0)];
    };
    match wl.state {
        WlState::Succeeded | WlState::Failed | WlState::Cancelled => {
            let (t, msg) = wl
                .condition("Finished")
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
        WlState::Pending => pending(st, wl, &mut out),
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
        Some(p) if wl.condition("Preempted").is_some_and(|c| c.status) => {
            out.extend(preempted_line(st, wl, p, "preempted"));
        }
        _ => {
            if let Some(c) = wl.condition("Evicted").filter(|c| c.status) {
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
    let e = wl.condition("Evicted").filter(|c| c.status)?;
    Some(format!(
        "evicted {}: {}: {}",
        fmt_time(e.time),
        e.reason,
        e.message
    ))
}

/// Why it is pending again after an eviction, and the last scheduling decision about it.
fn requeue_lines(st: &State, wl: &Workload, out: &mut Vec<String>) {
    if let Some(rq) = wl.condition("Requeued").filter(|c| c.status) {
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
    match wl.condition("QuotaReserved").filter(|c| !c.status) {
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

/// What the scheduler would do with it now, in words.
fn verdict(mode: Mode, blocked: bool) -> String {
    match mode {
        Mode::Fit if blocked => "fits on its own (quota and nodes), but waits (see below)".to_string(),
        Mode::Fit => {
            "fits now (quota and nodes): it would be admitted in the next cycle unless workloads ahead of it take the room"
                .to_string()
        }
        Mode::Preempt | Mode::Reclaim => {
            "it can be admitted only by preempting other workloads (see below)".to_string()
        }
        Mode::NoCandidates => {
            "it does not fit and no workload may be preempted for it".to_string()
        }
        Mode::NoFit => "it does not fit in any of its team's flavors".to_string(),
    }
}

/// A workload out of its queue until a gang-readiness backoff ends: why, and until when;
/// nothing is judged before then. False for any other.
fn parked_lines(wl: &Workload, out: &mut Vec<String>) -> bool {
    let Some(rq) = wl.condition("Requeued").filter(|_| wl.is_parked()) else {
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

fn pending(st: &State, wl: &Workload, out: &mut Vec<String>) {
    if parked_lines(wl, out) {
        return;
    }
    let team = &st.teams[wl.team.idx()];
    let mut ctx = Ctx::new(st, 0);
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

    // Per pod set and flavor: the first blocking check, with numbers.
    let full = decision::full_counts(wl);
    let a = decision::assign(&mut ctx, wl, &full, false);
    let multi = wl.spec.pod_sets.len() > 1;
    let mut acc: BTreeMap<FrId, i64> = BTreeMap::new();
    let mut tentative: Vec<PodAlloc> = Vec::new();
    for (i, ps) in wl.spec.pod_sets.iter().enumerate() {
        let reqs = &wl.pod_reqs[i];
        let label = if multi {
            format!("pod set {} ({} x {})", ps.name, ps.count, per_pod(st, reqs))
        } else {
            format!("{} pod(s) x {}", ps.count, per_pod(st, reqs))
        };
        for (r, _) in reqs {
            if !team.groups.iter().any(|g| g.resources.contains(r)) {
                let rn = st.names.resource_name(*r);
                d.lines.push(format!(
                    "{label}: no quota: team {} has no quota for {rn} in any flavor (NoMatchingFlavor)",
                    team.name()
                ));
                d.suggest(format!("team {} had quota for {rn}", team.name()));
            }
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
            let flavors: Vec<FlavorId> = g
                .flavors
                .iter()
                .copied()
                .filter(|f| wl.pinned.is_none_or(|p| p == *f))
                .collect();
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
                    &mut ctx,
                    wl,
                    i,
                    ps.count,
                    f,
                    &group_reqs,
                    &acc,
                    covers_all,
                    &head,
                    &mut d,
                );
            }
        }
        // Later pod sets see this one's usage and pods where the scheduler would put them.
        let chosen: BTreeSet<FlavorId> = a.flavors[i].iter().map(|(_, f)| *f).collect();
        for (r, f) in &a.flavors[i] {
            if let (Some(fr), Some((_, v))) =
                (st.names.find_fr(*f, *r), reqs.iter().find(|(x, _)| x == r))
            {
                *acc.entry(fr).or_insert(0) += v * i64::from(ps.count);
            }
        }
        if st.placement && chosen.len() == 1 {
            if let Some(f) = chosen.first() {
                if let Ok(allocs) = ctx.acct.nodes.place_in(*f, reqs, ps.count, wl.topology()) {
                    tentative.extend(allocs);
                }
            }
        }
        if let Some(min) = ps.min_count.filter(|m| *m < ps.count) {
            if a.mode < Mode::Preempt {
                let mut counts = full.clone();
                counts[i] = min;
                let m = decision::assign(&mut ctx, wl, &counts, false).mode;
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
    let total_pods: u32 = wl.spec.pod_sets.iter().map(|p| p.count).sum();
    if total_pods > 1 && a.mode < Mode::Fit {
        d.lines.push(format!(
            "gang: all {total_pods} pods{} are admitted and placed together or not at all",
            if multi {
                format!(" of its {} pod sets", wl.spec.pod_sets.len())
            } else {
                String::new()
            }
        ));
    }
    let verdict = verdict(a.mode, blocked);
    out.push(format!("now: {verdict}"));
    out.append(&mut d.lines);
    if !d.ifs.is_empty() && (a.mode != Mode::Fit || blocked) {
        out.push(format!("would be admitted if {}", d.ifs.join(", or if ")));
    }
    queue_lines(st, &mut ctx, wl, &queue, pos, out);
}

/// The names a flavor's lines are written with.
struct Over<'a> {
    head: &'a str,
    tname: &'a str,
    rname: &'a str,
    fname: &'a str,
    earlier_txt: &'a str,
}

/// A request above the most the team can ever use: its borrowing limit, or all it could
/// borrow from its cohort, with the quota that would let it run.
fn over_potential(
    st: &State,
    c: &Over,
    (r, fr, cohort): (ResId, FrId, CohortId),
    val: i64,
    q: allot_common::ResourceQuota,
    (potential, reserved, pool): (i64, i64, i64),
    d: &mut Diag,
) {
    let Over {
        head,
        tname,
        rname,
        fname,
        earlier_txt,
    } = *c;
    let n = |v: i64| qty(st, r, v);
    match q.borrowing_limit {
        Some(bl) if q.nominal + bl <= potential => {
            d.lines.push(format!(
                "{head}: exceeds the borrowing limit: requests {}{earlier_txt}, team {tname}'s nominal {} + borrowing limit {} allow at most {}, over by {} (ExceedsMaxQuota)",
                n(val),
                n(q.nominal),
                n(bl),
                n(q.nominal + bl),
                n(val - q.nominal - bl)
            ));
            if val <= reserved + pool {
                d.suggest(format!(
                    "{tname}'s borrow limit for {rname} in {fname} were {}",
                    st.names.format_qty(r, val - q.nominal)
                ));
            } else {
                d.suggest(format!(
                    "{tname}'s nominal for {rname} in {fname} were {}",
                    st.names.format_qty(r, val)
                ));
            }
        }
        _ => {
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
                st.names.format_qty(r, q.nominal + val - potential)
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

/// Whether nodes of the flavor have room for the pod set once its quota fits; if not, says
/// why and what preemption could free.
fn node_room(
    ctx: &mut Ctx,
    wl: &Workload,
    (ps, f, count): (usize, FlavorId, u32),
    usage_here: &[(FrId, i64)],
    borrows: bool,
    head: &str,
    d: &mut Diag,
) -> bool {
    let st = ctx.st;
    let fname = st.names.flavor_name(f);
    let reqs = &wl.pod_reqs[ps];
    if !ctx.acct.nodes.has_flavor(f) {
        d.lines.push(format!(
            "{head}: quota fits but the cluster has no nodes of {fname}"
        ));
        d.suggest(format!("nodes of {fname} joined the cluster"));
        return false;
    }
    match ctx.acct.nodes.try_place_in(f, reqs, count, wl.topology()) {
        Ok(()) => true,
        Err(fail) => {
            let domains = wl
                .topology()
                .map(|ask| format!("; {}", ctx.acct.nodes.describe_domains(f, reqs, count, ask)))
                .unwrap_or_default();
            d.lines.push(
                format!(
                "{head}: quota fits{} but no node has room: {} of {} pod(s) can be placed{}; {}",
                if borrows { " (by borrowing)" } else { "" },
                fail.placed,
                fail.wanted,
                if domains.is_empty() { "" } else { " in one domain" },
                node_summary(st, &ctx.acct.nodes, f, reqs)
            ) + &domains,
            );
            d.suggest(match wl.topology() {
                Some(ask) => format!(
                    "one {} domain of {fname} had room for {} more pod(s) of {}",
                    ask.level,
                    fail.wanted - fail.placed,
                    per_pod(st, reqs)
                ),
                None => format!(
                    "nodes of {fname} had room for {} more pod(s) of {}",
                    fail.wanted - fail.placed,
                    per_pod(st, reqs)
                ),
            });
            let here = (ps, f, count);
            preemption_lines_for(ctx, wl, usage_here, here, BTreeSet::new(), true, d);
            false
        }
    }
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
    r: ResId,
    (val, avail, usage): (i64, i64, i64),
    q: allot_common::ResourceQuota,
    (miss_bl, miss_pool, pool_free, pool): (i64, i64, i64, i64),
    cohort: &crate::state::CohortRt,
) -> String {
    let Over {
        head,
        tname,
        earlier_txt,
        ..
    } = *c;
    let n = |v: i64| qty(st, r, v);
    let missing = val - avail;
    let mut line = format!(
        "{head}: requests {}{earlier_txt}, available {}, missing {}; team {tname} uses {} of nominal {}",
        n(val),
        n(avail),
        n(missing),
        st.names.format_qty(r, usage),
        st.names.format_qty(r, q.nominal)
    );
    if miss_bl > 0 {
        let bl = q.borrowing_limit.unwrap_or(0);
        line.push_str(&format!(
            "; borrowing limit reached: borrowing {} of at most {}",
            st.names.format_qty(r, (usage - q.nominal).max(0)),
            st.names.format_qty(r, bl)
        ));
    }
    if miss_pool > 0 {
        if cohort.private {
            line.push_str("; the team has no cohort to borrow from");
        } else {
            line.push_str(&format!(
                "; cohort {} has not enough unused lendable quota: {} free of {}",
                cohort.name,
                st.names.format_qty(r, pool_free),
                st.names.format_qty(r, pool)
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

/// The first blocking check of one flavor for one pod set, with numbers.
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
    let t = wl.team;
    let team = &st.teams[t.idx()];
    let tname = team.name();
    let fname = st.names.flavor_name(f);
    let cohort = &st.cohorts[team.cohort.idx()];
    let mut usage_here: Vec<(FrId, i64)> = Vec::new();
    let mut short: BTreeSet<FrId> = BTreeSet::new();
    let mut no_preempt: Vec<String> = Vec::new();
    for (r, per) in group_reqs {
        let rname = st.names.resource_name(*r);
        let Some(fr) = st
            .names
            .find_fr(f, *r)
            .filter(|fr| team.quota(*fr).is_some())
        else {
            d.lines.push(format!(
                "{head}: no quota: team {tname} has no quota for {rname} in {fname}"
            ));
            d.suggest(format!("team {tname} had quota for {rname} in {fname}"));
            return;
        };
        let q = team.quota(fr).copied().unwrap_or_default();
        let earlier = acc.get(&fr).copied().unwrap_or(0);
        let val = earlier + per * i64::from(count);
        usage_here.push((fr, val));
        let n = |v: i64| qty(st, *r, v);
        let earlier_txt = if earlier > 0 {
            format!(" (its earlier pod sets take {})", n(earlier))
        } else {
            String::new()
        };
        let usage = ctx.acct.usage(t, fr);
        let reserved = team.reserved(fr);
        let pool = cohort.pool.get(fr);
        let potential = quota::potential_available(st, t, fr);
        let c = Over {
            head,
            tname,
            rname: rname.as_str(),
            fname,
            earlier_txt: &earlier_txt,
        };
        if val > potential {
            over_potential(
                st,
                &c,
                (*r, fr, team.cohort),
                val,
                q,
                // What the team's cohort could ever give it: its pool, or below a root what
                // the tree lets it draw.
                (
                    potential,
                    reserved,
                    quota::cohort_potential(st, team.cohort, fr),
                ),
                d,
            );
            return;
        }
        let avail = quota::available(st, &ctx.acct, t, fr);
        if val <= avail {
            continue;
        }
        short.insert(fr);
        let missing = val - avail;
        let pool_used = ctx.acct.pool_used[team.cohort.idx()].get(fr);
        // Below a root cohort, what its parent has free and its borrowing limit count too.
        let pool_free = quota::cohort_available(st, &ctx.acct, team.cohort, fr).max(0);
        let own_free = (reserved - usage).max(0);
        let bl_room = q
            .borrowing_limit
            .map(|bl| (q.nominal + bl - usage.max(reserved)).max(0));
        let miss_pool = (val - own_free - pool_free).max(0);
        let miss_bl = bl_room
            .map(|room| (val - own_free - room).max(0))
            .unwrap_or(0);
        let limits = (miss_bl, miss_pool, pool_free, pool);
        d.lines.push(short_line(
            st,
            &c,
            *r,
            (val, avail, usage),
            q,
            limits,
            cohort,
        ));
        // Who holds the pool, borrowers first.
        let users = pool_users(ctx, t, fr);
        if miss_pool > 0 && !cohort.private && !users.is_empty() {
            d.lines
                .push(pool_line(ctx, &users, *r, fr, pool, pool_used));
        }
        // Ways out. The team's own workloads freeing `missing` always works.
        // The borrowing limit that leaves room for the request: own_free + room >= val.
        let bl_needed = q
            .borrowing_limit
            .map(|_| val - own_free + usage.max(reserved) - q.nominal);
        suggest_lenders(st, &c, *r, &users, (miss_bl, miss_pool), bl_needed, d);
        if usage >= missing {
            d.suggest(format!("team {tname} frees {} in {fname}", n(missing)));
        }
        if !preemption::may_preempt_for_quota(st, wl, q.nominal, val) {
            no_preempt.push(format!(
                "it requests {}, more than team {tname}'s nominal {} for {rname} in {fname}, and may then preempt only through borrow_within_cohort, which is Never",
                n(val),
                st.names.format_qty(*r, q.nominal)
            ));
        }
    }
    if !short.is_empty() {
        if !no_preempt.is_empty() {
            d.lines.push(format!(
                "  cannot preempt for it: {}",
                no_preempt.join("; ")
            ));
            return;
        }
        let on_nodes = st.placement && covers_all;
        preemption_lines_for(ctx, wl, &usage_here, (ps, f, count), short, on_nodes, d);
        return;
    }
    // Quota fits: room on nodes.
    let borrows = usage_here
        .iter()
        .any(|(fr, v)| quota::borrows_with(st, &ctx.acct, t, *fr, *v));
    if st.placement
        && covers_all
        && !node_room(ctx, wl, (ps, f, count), &usage_here, borrows, head, d)
    {
        return;
    }
    d.lines.push(fits_line(ctx, t, &usage_here, head));
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

/// `preemption_lines` for pod set `ps` on flavor `f`: the quota pairs in `contested`, and
/// with `on_nodes` also where its `count` pods fall short on the flavor's nodes (the pod set is
/// then placed there).
fn preemption_lines_for(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    (ps, f, count): (usize, FlavorId, u32),
    mut contested: BTreeSet<FrId>,
    on_nodes: bool,
    d: &mut Diag,
) {
    let mut contested_flavors = BTreeSet::new();
    let place = if on_nodes {
        working::node_shortfall(
            ctx.st,
            &mut ctx.acct.nodes,
            f,
            &wl.pod_reqs[ps],
            count,
            wl.topology(),
        )
        .contest(f, &mut contested, &mut contested_flavors);
        vec![(ps, f, count)]
    } else {
        Vec::new()
    };
    preemption_lines(ctx, wl, usage, &place, &contested, &contested_flavors, d);
}

/// Runs the scheduler's victim search for one flavor and says what it found, or why nothing.
fn preemption_lines(
    ctx: &mut Ctx,
    wl: &Workload,
    usage: &[(FrId, i64)],
    place: &[(usize, FlavorId, u32)],
    contested: &BTreeSet<FrId>,
    contested_flavors: &BTreeSet<FlavorId>,
    d: &mut Diag,
) {
    let st = ctx.st;
    match preemption::find_victims(ctx, wl, usage, place, contested, contested_flavors) {
        Some(v) if v.is_empty() => {}
        Some(v) => {
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
                    victims_txt(st, &v)
                ));
                d.suggest_first(format!(
                    "{names} {} stopping",
                    if plural { "finish" } else { "finishes" }
                ));
            } else {
                d.lines.push(format!(
                    "  can preempt: {} (the next cycle evicts them unless workloads ahead of it change the picture)",
                    victims_txt(st, &v)
                ));
                d.suggest_first(format!(
                    "{names} {} evicted",
                    if plural { "are" } else { "is" }
                ));
            }
        }
        None => {
            let mut f_set = contested.clone();
            for (fr, _) in usage {
                let (f, _) = st.names.fr_parts(*fr);
                if contested_flavors.contains(&f) {
                    f_set.insert(*fr);
                }
            }
            d.lines.push(format!(
                "  no workload may be preempted for it: {}",
                why_no_victims(ctx, wl, usage, &f_set)
            ));
        }
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
    let t = wl.team;
    let team = &st.teams[t.idx()];
    let policy = team.spec.preemption;
    let uses = |id: WlId| {
        ctx.admission_of(id)
            .is_some_and(|a| a.usage.iter().any(|(fr, v)| *v > 0 && f_set.contains(fr)))
    };
    let what = f_set
        .iter()
        .map(|fr| fr_name(st, *fr))
        .collect::<Vec<_>>()
        .join(", ");
    let never = preemption::never_taken(ctx, wl, usage, f_set);
    let took_it = preemption::evicted_by(wl);
    // Why a workload is never one of its candidates (the rules against preemption loops).
    let never_line = |c: &Workload| {
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
    let mut parts = Vec::new();
    let own: Vec<&Workload> = team
        .admitted
        .iter()
        .filter(|id| uses(**id))
        .map(|id| st.workload(*id))
        .collect();
    for c in own.iter().filter(|c| never.contains(&c.id)) {
        parts.push(never_line(c));
    }
    let own_ok = own
        .iter()
        .filter(|c| !never.contains(&c.id))
        .filter(|c| preemption::own_allowed(policy.within_team, wl, c))
        .count();
    parts.push(match policy.within_team {
        WithinTeam::Never => format!(
            "team {} never preempts its own workloads (PreemptTeamTasks=Never)",
            team.name()
        ),
        _ if own.is_empty() => format!("no workload of team {} uses {what}", team.name()),
        WithinTeam::LowerPriority if own_ok == 0 => format!(
            "team {}'s {} workload(s) on {what} have priority >= {}",
            team.name(),
            own.len(),
            wl.priority
        ),
        WithinTeam::LowerOrNewerEqualPriority if own_ok == 0 => format!(
            "team {}'s {} workload(s) on {what} have higher priority, or equal priority and an earlier submit time",
            team.name(),
            own.len()
        ),
        _ => format!(
            "{own_ok} of team {}'s workloads on {what} have lower priority",
            team.name()
        ),
    });
    let cohort = &st.cohorts[team.cohort.idx()];
    let mut others_ok = 0;
    if cohort.private {
        parts.push(format!("team {} has no cohort", team.name()));
    } else if policy.reclaim_within_cohort == ReclaimWithinCohort::Never {
        parts.push(format!(
            "team {} does not reclaim from the cohort (reclaim_within_cohort Never)",
            team.name()
        ));
    } else {
        let borrowers: Vec<TeamId> = cohort
            .sharing()
            .iter()
            .copied()
            .filter(|m| *m != t)
            .filter(|m| {
                f_set
                    .iter()
                    .any(|fr| quota::is_borrowing(st, &ctx.acct, *m, *fr))
            })
            .collect();
        if borrowers.is_empty() {
            parts.push(format!(
                "no other team of cohort {} borrows {what}",
                cohort.name
            ));
        }
        for m in borrowers {
            let ws: Vec<&Workload> = st.teams[m.idx()]
                .admitted
                .iter()
                .filter(|id| uses(**id))
                .map(|id| st.workload(*id))
                .collect();
            for c in ws.iter().filter(|c| never.contains(&c.id)) {
                parts.push(never_line(c));
            }
            let ok = ws
                .iter()
                .filter(|c| !never.contains(&c.id))
                .filter(|c| {
                    policy.reclaim_within_cohort == ReclaimWithinCohort::Any
                        || c.priority < wl.priority
                })
                .count();
            others_ok += ok;
            parts.push(if ok == 0 && !ws.is_empty() {
                format!(
                    "team {} borrows {what} but its {} workload(s) there have priority >= {} (reclaim_within_cohort LowerPriority)",
                    st.teams[m.idx()].name(),
                    ws.len(),
                    wl.priority
                )
            } else {
                format!(
                    "team {} borrows {what}: {ok} of its workloads there are candidates",
                    st.teams[m.idx()].name()
                )
            });
        }
    }
    if own_ok + others_ok > 0 {
        parts.push(if st.policy.fair_share {
            "no set of candidates makes room within the rules (candidates of other teams are taken only while the preemptor's weighted share stays at or below theirs, or it is within its nominal after admission)".to_string()
        } else {
            "evicting every allowed candidate would still not make room without breaking the rules for borrowing (a borrowing workload takes only lower-priority borrowed work)".to_string()
        });
    }
    parts.join("; ")
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
        "preemptors first, then fits without borrowing, higher priority, earlier submit time (fair sharing off)"
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
        line.push_str(&format!(
            "; it ranks as {}",
            if k.1 { "borrowing" } else { "not borrowing" }
        ));
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
                if k.1 { "borrowing" } else { "not borrowing" },
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

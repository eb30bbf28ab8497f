//! Invariants that must hold after every step; checked by the simulation tests after every
//! command and cycle.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{CohortId, FrId, FrVec, NodeId, ResId};
use crate::quota;
use crate::state::State;

impl State {
    /// Checks the invariants that must hold after every step; returns the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        check(self)
    }
}

pub fn check(st: &State) -> Result<(), String> {
    st.acct.nodes.check_derived()?;
    check_shapes(st)?;
    // Accounted usage equals the sum of what holders were admitted with.
    let mut held = Held {
        usage: vec![FrVec::default(); st.teams.len()],
        devices: BTreeMap::new(),
        node_used: BTreeMap::new(),
    };
    for wl in st.workloads.values() {
        check_workload(st, wl, &mut held)?;
    }
    check_team_usage(st, &held.usage)?;
    check_pool_used(st)?;
    for c in 0..st.cohorts.len() {
        quota::cohort_within_pool(st, &st.acct, CohortId(c as u32))?;
    }
    check_nodes(st, &held)
}

/// Each cohort's pool usage is what its teams use beyond what they never lend, plus, up a
/// tree, what each child cohort's subtree uses beyond its `local`: the accounting kept as
/// usage changes agrees with the one counted afresh.
fn check_pool_used(st: &State) -> Result<(), String> {
    let want = st.pool_usage();
    for (c, w) in want.iter().enumerate() {
        let kept = &st.acct.pool_used[c];
        let pairs = w.0.len().max(kept.0.len());
        if let Some(k) = (0..pairs).find(|&k| w.get(FrId(k as u32)) != kept.get(FrId(k as u32))) {
            let fr = FrId(k as u32);
            return Err(format!(
                "cohort {} accounts {} of {} in use, and its teams and child cohorts add up to {}",
                st.cohorts[c].name,
                kept.get(fr),
                st.names.describe_fr(fr),
                w.get(fr)
            ));
        }
    }
    Ok(())
}

/// What admitted workloads hold, added up: usage per team, devices and node use.
struct Held {
    usage: Vec<FrVec>,
    /// (node, resource, device index) -> the workload given it.
    devices: BTreeMap<(NodeId, ResId, u8), String>,
    node_used: BTreeMap<(NodeId, ResId), i64>,
}

/// Each team's shape index groups its queue as it is, with what each entry shows.
fn check_shapes(st: &State) -> Result<(), String> {
    for t in &st.teams {
        if !t.shapes.built {
            continue;
        }
        let whole = crate::shapes::ShapeIndex::build(t.pending.iter().map(|k| {
            let w = st.workloads.get(&k.id);
            (k, w.and_then(|w| w.shown()))
        }));
        if let Some(k) = t.pending.iter().find(|k| {
            k.shape != 0
                && st
                    .workloads
                    .get(&k.id)
                    .is_none_or(|w| w.shape_fingerprint() != k.shape)
        }) {
            return Err(format!(
                "team {}: queue entry {} carries a stale shape",
                t.name(),
                k.name
            ));
        }
        t.shapes
            .differs_from(&whole)
            .map_err(|e| format!("team {}: shape index: {e}", t.name()))?;
    }
    Ok(())
}

/// One workload: its state, queue and admitted-set membership agree; a holder's gang is whole
/// and placed; what it holds is added to `held`.
fn check_workload(st: &State, wl: &crate::state::Workload, held: &mut Held) -> Result<(), String> {
    let holds = st.teams[wl.team.idx()].admitted.contains(&wl.id);
    if holds != wl.state.holds_quota() {
        return Err(format!(
            "workload {} is {} but admitted-set membership is {holds}",
            wl.spec.name,
            wl.state.as_str()
        ));
    }
    let key = wl.queue_key();
    let queued = st.teams[wl.team.idx()].pending.contains(&key);
    if queued != (wl.state == crate::state::WlState::Pending && !wl.is_parked()) {
        return Err(format!(
            "workload {} is {} but queue membership is {queued}",
            wl.spec.name,
            wl.state.as_str()
        ));
    }
    if queued && wl.queued_shape != 0 && wl.queued_shape != key.shape {
        return Err(format!(
            "workload {} changed shape while queued",
            wl.spec.name
        ));
    }
    if !wl.state.holds_quota() {
        if wl.admission.is_some() {
            return Err(format!(
                "workload {} is {} yet has an admission",
                wl.spec.name,
                wl.state.as_str()
            ));
        }
        return Ok(());
    }
    let Some(adm) = &wl.admission else {
        return Err(format!(
            "workload {} holds quota without an admission",
            wl.spec.name
        ));
    };
    // Gang: every pod set admitted, at a count within min..=count, every pod placed.
    if adm.pod_sets.len() != wl.spec.pod_sets.len() {
        return Err(format!(
            "workload {}: {} of {} pod sets admitted",
            wl.spec.name,
            adm.pod_sets.len(),
            wl.spec.pod_sets.len()
        ));
    }
    for (i, (a, ps)) in adm.pod_sets.iter().zip(&wl.spec.pod_sets).enumerate() {
        if a.count > ps.count || a.count < ps.min_count.unwrap_or(ps.count) {
            return Err(format!(
                "workload {} pod set {}: count {} outside its range",
                wl.spec.name, ps.name, a.count
            ));
        }
        if st.placement && !wl.pod_reqs[i].is_empty() {
            let placed = adm.placement.iter().filter(|(k, _)| *k == i).count();
            if placed != a.count as usize {
                return Err(format!(
                    "workload {} pod set {}: {placed} pods placed, {} admitted",
                    wl.spec.name, ps.name, a.count
                ));
            }
        }
    }
    for (fr, v) in &adm.usage {
        held.usage[wl.team.idx()].add(*fr, *v);
    }
    for (_, p) in &adm.placement {
        let node = st.acct.nodes.node(p.node);
        for (r, v) in &p.req {
            *held.node_used.entry((p.node, *r)).or_insert(0) += v;
        }
        for (r, idx) in &p.devices {
            for d in idx {
                if let Some(other) = held.devices.insert((p.node, *r, *d), wl.spec.name.clone()) {
                    return Err(format!(
                        "device {} {} on node {} given to both {} and {}",
                        st.names.resource_name(*r),
                        d,
                        node.name,
                        other,
                        wl.spec.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Each team's accounted usage is what its admitted workloads use, within its limits.
fn check_team_usage(st: &State, usage: &[FrVec]) -> Result<(), String> {
    for (i, t) in st.teams.iter().enumerate() {
        let n = usage[i].0.len().max(st.acct.team_usage[i].0.len());
        for k in 0..n {
            let fr = FrId(k as u32);
            if usage[i].get(fr) != st.acct.team_usage[i].get(fr) {
                return Err(format!(
                    "team {}: accounted usage {} of {} but admitted workloads use {}",
                    t.name(),
                    st.acct.team_usage[i].get(fr),
                    st.names.describe_fr(fr),
                    usage[i].get(fr)
                ));
            }
            let team_excess = st.team_excess.get(i).map(|e| e.get(fr)).unwrap_or(0);
            if let Some(q) = t.quota(fr) {
                if let Some(bl) = q.borrowing_limit {
                    if usage[i].get(fr) > q.nominal + bl + team_excess {
                        return Err(format!(
                            "team {} uses {} of {}, above nominal {} + borrowing limit {}",
                            t.name(),
                            usage[i].get(fr),
                            st.names.describe_fr(fr),
                            q.nominal,
                            bl
                        ));
                    }
                }
                // A pool that shrank under running work (see `State::pool_excess`) may leave a
                // team above what it could be admitted to now; never more than that excess.
                let excess = st
                    .pool_excess
                    .get(t.cohort.idx())
                    .map(|e| e.get(fr))
                    .unwrap_or(0);
                if usage[i].get(fr)
                    > quota::potential_available(st, crate::ids::TeamId(i as u32), fr)
                        + excess
                        + team_excess
                {
                    return Err(format!(
                        "team {} uses more {} than it could ever have",
                        t.name(),
                        st.names.describe_fr(fr)
                    ));
                }
            } else if usage[i].get(fr) > team_excess {
                return Err(format!(
                    "team {} uses {} without quota for it",
                    t.name(),
                    st.names.describe_fr(fr)
                ));
            }
        }
    }
    Ok(())
}

/// Nodes: never over capacity, and accounting matches the placements.
fn check_nodes(st: &State, held: &Held) -> Result<(), String> {
    let (devices, node_used) = (&held.devices, &held.node_used);
    for (id, node) in st.acct.nodes.nodes.iter().enumerate() {
        let nid = NodeId(id as u32);
        for r in &node.res {
            // Unhealthy devices held out of use count as used but belong to no pod.
            let used = node_used.get(&(nid, r.res)).copied().unwrap_or(0) + r.parked();
            if used != r.used {
                return Err(format!(
                    "node {}: {} used {} but placements add up to {used}",
                    node.name,
                    st.names.resource_name(r.res),
                    r.used
                ));
            }
            if r.used > r.cap {
                return Err(format!(
                    "node {} over capacity for {}: {} > {}",
                    node.name,
                    st.names.resource_name(r.res),
                    r.used,
                    r.cap
                ));
            }
        }
        let used: BTreeSet<(ResId, u8)> = st.acct.nodes.used_devices(nid).into_iter().collect();
        let held: BTreeSet<(ResId, u8)> = devices
            .keys()
            .filter(|(n, _, _)| *n == nid)
            .map(|(_, r, d)| (*r, *d))
            .collect();
        if used != held {
            return Err(format!(
                "node {}: device masks disagree with placements",
                node.name
            ));
        }
        for r in &node.res {
            let given_bad = devices
                .keys()
                .any(|(n, res, d)| *n == nid && *res == r.res && r.parked_mask & (1u64 << d) != 0);
            if given_bad || r.parked_mask & !r.bad_mask != 0 {
                return Err(format!(
                    "node {}: a device held out of use is also given to a pod, or is not unhealthy",
                    node.name
                ));
            }
        }
    }
    Ok(())
}

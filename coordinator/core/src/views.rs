//! Read-only views of the machine for the API: workloads, nodes, teams.

use std::collections::BTreeMap;

use allot_common::api::{
    ConditionView, NodeAssignments, NodeView, PodAssignment, PodView, TeamView, WorkloadFilter,
    WorkloadView,
};
use allot_common::{PriorityRef, Resources};

use crate::ids::{TeamId, WlId};
use crate::machine::Machine;
use crate::quota;
use crate::state::WlState;

pub fn workload(m: &Machine, id: WlId) -> WorkloadView {
    let st = &m.state;
    let w = st.workload(id);
    let mut flavors = BTreeMap::new();
    let mut pods = Vec::new();
    if let Some(a) = &w.admission {
        for ps in &a.pod_sets {
            let per_res: BTreeMap<String, String> = ps
                .flavors
                .iter()
                .map(|(r, f)| {
                    (
                        st.names.resource_name(*r).to_string(),
                        st.names.flavor_name(*f).to_string(),
                    )
                })
                .collect();
            flavors.insert(ps.name.clone(), per_res);
        }
        let mut idx_in_set: BTreeMap<usize, u32> = BTreeMap::new();
        let times = m
            .history
            .get(&id)
            .filter(|h| h.attempt == w.attempt)
            .map(|h| &h.pods);
        for (rank, (ps, alloc)) in a.placement.iter().enumerate() {
            let i = idx_in_set.entry(*ps).or_insert(0);
            let t = times.and_then(|t| t.get(&(rank as u32)));
            pods.push(PodView {
                pod_set: a
                    .pod_sets
                    .get(*ps)
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                index: *i,
                node: st.acct.nodes.node(alloc.node).name.to_string(),
                devices: alloc
                    .devices
                    .iter()
                    .map(|(r, d)| (st.names.resource_name(*r).to_string(), d.clone()))
                    .collect(),
                started_ms: t.and_then(|t| t.started),
                ended_ms: t.and_then(|t| t.ended),
                exit_code: t.and_then(|t| t.exit_code),
                outcome: t.and_then(|t| t.outcome.clone()),
                status: None,
            });
            *i += 1;
        }
    }
    if w.admission.is_none() && w.state.is_finished() {
        // Finished: its last attempt's pods as their agents reported them.
        if let Some(h) = m.history.get(&id) {
            let sets: Vec<(&str, u32)> = w
                .spec
                .pod_sets
                .iter()
                .flat_map(|p| (0..p.count).map(move |i| (p.name.as_str(), i)))
                .collect();
            for (rank, t) in &h.pods {
                let (set, index) = sets.get(*rank as usize).copied().unwrap_or(("", *rank));
                pods.push(PodView {
                    pod_set: set.to_string(),
                    index,
                    node: t.node.clone(),
                    devices: BTreeMap::new(),
                    started_ms: t.started,
                    ended_ms: t.ended,
                    exit_code: t.exit_code,
                    outcome: t.outcome.clone(),
                    status: None,
                });
            }
        }
    }
    let (requests, count) = match w.spec.pod_sets.first() {
        Some(ps) if w.spec.pod_sets.len() == 1 => (ps.requests.clone(), ps.count),
        _ => (
            w.spec.total_requests(),
            w.spec.pod_sets.iter().map(|p| p.count).sum(),
        ),
    };
    WorkloadView {
        id: id.0,
        name: w.spec.name.clone(),
        team: st.teams[w.team.idx()].name().to_string(),
        priority: w.priority,
        priority_class: match &w.spec.priority {
            PriorityRef::Class(c) => Some(c.clone()),
            _ => None,
        },
        state: w.state.as_str().to_string(),
        submitted_ms: w.submit_time,
        admitted_ms: w.admitted_at,
        flavors,
        pods,
        requests,
        count,
        preemptions: w.preemptions,
        lost_run_ms: w.lost_run_ms,
        conditions: w
            .conditions
            .iter()
            .map(|c| ConditionView {
                kind: c.kind.clone(),
                status: c.status,
                reason: c.reason.to_string(),
                message: crate::explain::shown_message(st, w, &c.kind, c.status, &c.message),
                time_ms: c.time,
            })
            .collect(),
        run: m
            .runs
            .get(&id)
            .map(|r| allot_common::api::RunSpec::clone(r)),
        labels: w.spec.labels.clone(),
        array: w.spec.array.as_ref().map(|a| (a.name.clone(), a.index)),
        finished_ms: m.history.get(&id).and_then(|h| h.finished),
    }
}

pub fn workloads(m: &Machine, f: &WorkloadFilter) -> Vec<WorkloadView> {
    let team: Option<TeamId> = match &f.team {
        Some(t) => match m.state.team_ids.get(t) {
            Some(id) => Some(*id),
            None => return Vec::new(),
        },
        None => None,
    };
    match team {
        // One team's active workloads are its queue and what holds its quota: read those
        // alone, in id order as the scan gives them, not every workload of the cluster (a
        // watcher of one team is asked again after every change, with any backlog waiting).
        Some(t) if !f.all => {
            let team = &m.state.teams[t.idx()];
            // Workloads waiting out a gang-readiness backoff are out of the queue, not gone.
            let parked = (m.pods_ready.backoff.keys())
                .filter(|id| {
                    m.state
                        .workloads
                        .get(id)
                        .is_some_and(|w| w.team == t && w.is_parked())
                })
                .copied();
            let mut ids: Vec<WlId> = team
                .pending
                .iter()
                .map(|k| k.id)
                .chain(team.admitted.iter().copied())
                .chain(parked)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter()
                .filter(|id| m.state.workloads.contains_key(id))
                .map(|id| workload(m, id))
                .collect()
        }
        _ => m
            .state
            .workloads
            .values()
            .filter(|w| team.is_none_or(|t| w.team == t))
            .filter(|w| f.all || !w.state.is_finished())
            .map(|w| workload(m, w.id))
            .collect(),
    }
}

pub fn nodes(m: &Machine) -> Vec<NodeView> {
    let st = &m.state;
    let mut out = st
        .acct
        .nodes
        .nodes
        .iter()
        .filter(|n| !m.removed_nodes.contains(&*n.name))
        .map(|n| {
            let report = m.nodes_meta.get(&*n.name).and_then(|x| x.report.as_ref());
            let mut capacity = Resources::new();
            let mut used = Resources::new();
            for r in &n.res {
                let name = st.names.resource_name(r.res);
                capacity.add(name, r.cap);
                used.add(name, r.used);
            }
            NodeView {
                status: allot_common::api::node_status(n.healthy, n.cordoned).to_string(),
                name: n.name.to_string(),
                instance_type: st.names.flavor_name(n.flavor).to_string(),
                healthy: n.healthy,
                cordoned: n.cordoned,
                capacity,
                used,
                reason: m
                    .nodes_meta
                    .get(&*n.name)
                    .map(|x| x.reason.clone())
                    .unwrap_or_default(),
                devices: report.map(|r| r.devices.clone()).unwrap_or_default(),
                http: report.map(|r| r.http.clone()).unwrap_or_default(),
                sources: match report {
                    Some(r) if !r.sources.is_empty() => r.sources.clone(),
                    // An agent that does not say, or a node registered by hand.
                    Some(_) => [("*".to_string(), "agent".to_string())].into(),
                    None => [("*".to_string(), "registered".to_string())].into(),
                },
            }
        })
        .collect::<Vec<NodeView>>();
    // Natural name order: node-2 before node-10.
    out.sort_by_key(|n| natural_key(&n.name));
    out
}

/// Every topology domain (`topology.rs`): its nodes and their room, by level and domain name.
pub fn topology(m: &Machine) -> Vec<allot_common::api::DomainView> {
    let st = &m.state;
    let ns = &st.acct.nodes;
    let mut out = Vec::new();
    for (level, l) in ns.topo.levels() {
        for d in l.domains.iter().filter(|d| !d.nodes.is_empty()) {
            let mut view = allot_common::api::DomainView {
                level: level.to_string(),
                domain: d.name.to_string(),
                nodes: Vec::new(),
                schedulable: 0,
                capacity: Resources::new(),
                free: Resources::new(),
            };
            for id in &d.nodes {
                let n = ns.node(*id);
                if m.removed_nodes.contains(&*n.name) {
                    continue;
                }
                view.nodes.push(n.name.to_string());
                if !n.schedulable() {
                    continue;
                }
                view.schedulable += 1;
                for r in &n.res {
                    let name = st.names.resource_name(r.res);
                    view.capacity.add(name, r.cap);
                    view.free.add(name, r.cap - r.used);
                }
            }
            view.nodes.sort_by_key(|n| natural_key(n));
            out.push(view);
        }
    }
    out.sort_by(|a, b| (&a.level, natural_key(&a.domain)).cmp(&(&b.level, natural_key(&b.domain))));
    out
}

/// Splits a name into text and number chunks so that numbers compare by value.
pub fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for ch in s.chars() {
        match (ch.to_digit(10), num) {
            (Some(d), Some(n)) => num = Some(n.saturating_mul(10).saturating_add(u64::from(d))),
            (Some(d), None) => num = Some(u64::from(d)),
            (None, Some(n)) => {
                out.push((std::mem::take(&mut text), n));
                num = None;
                text.push(ch);
            }
            (None, None) => text.push(ch),
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

pub fn teams(m: &Machine) -> Vec<TeamView> {
    let st = &m.state;
    st.team_ids
        .values()
        .map(|&t| {
            let team = &st.teams[t.idx()];
            let mut nominal = Resources::new();
            let mut usage = Resources::new();
            let mut lent = Resources::new();
            for (fr, q) in &team.quotas {
                let (_, r) = st.names.fr_parts(*fr);
                let name = st.names.resource_name(r);
                let u = st.acct.usage(t, *fr);
                nominal.add(name, q.nominal);
                usage.add(name, u);
                // Lent: the unused part of nominal that others use (bounded by what they borrow
                // in the pool; shown as the team's idle lendable nominal in use by others).
                let idle = (q.nominal - u)
                    .max(0)
                    .min(q.lending_limit.unwrap_or(q.nominal));
                let cohort_used = cohort_borrowed(m, t, *fr);
                let l = idle.min(cohort_used);
                if l > 0 {
                    lent.add(name, l);
                }
            }
            let mut borrowed = Resources::new();
            for (r, b) in quota::borrowed_by_resource(st, &st.acct, t) {
                borrowed.add(st.names.resource_name(r), b);
            }
            let share = quota::share(st, &st.acct, t, &[]);
            TeamView {
                name: team.name().to_string(),
                cohort: team.spec.cohort.clone(),
                fair_share_weight: team.spec.fair_share_weight,
                nominal,
                usage,
                borrowed,
                lent,
                weighted_share: if share.infinite {
                    None
                } else {
                    Some(share.value())
                },
                pending: team.pending.len() as u32,
                admitted: team.admitted.len() as u32,
            }
        })
        .collect()
}

/// What the other teams of `t`'s cohort (of its whole tree) borrow of `fr`'s flavor and
/// resource.
fn cohort_borrowed(m: &Machine, t: TeamId, fr: crate::ids::FrId) -> i64 {
    let st = &m.state;
    let c = st.teams[t.idx()].cohort;
    st.cohorts[c.idx()]
        .sharing()
        .iter()
        .filter(|&&o| o != t)
        .map(|&o| {
            let q = st.teams[o.idx()].quota(fr).map(|q| q.nominal).unwrap_or(0);
            (st.acct.usage(o, fr) - q).max(0)
        })
        .sum()
}

/// The port gang members rendezvous on: stable for one attempt of one workload, spread so that
/// workloads sharing a node rarely collide.
pub fn master_port(id: WlId, attempt: u32) -> u16 {
    let spread = (id.0.wrapping_mul(31).wrapping_add(u64::from(attempt))) % 10_000;
    20_000 + spread as u16
}

/// Everything `node` should run (or stop), as committed: one entry per pod of every admitted,
/// running or evicting workload placed there, minus pods already reported gone.
pub fn assignments(m: &Machine, node: &str) -> NodeAssignments {
    let st = &m.state;
    let Some(nid) = st.acct.nodes.find(node) else {
        return NodeAssignments {
            digest: 0,
            registered: false,
            healthy: false,
            health_reason: "not registered".into(),
            pods: Vec::new(),
        };
    };
    let n = st.acct.nodes.node(nid);
    let meta = m.nodes_meta.get(node);
    let address_of = |id: crate::ids::NodeId| {
        let name: &str = &st.acct.nodes.node(id).name;
        m.nodes_meta
            .get(name)
            .and_then(|x| x.report.as_ref())
            .map(|r| r.address.clone())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| name.to_string())
    };
    let mut pods = Vec::new();
    for w in st.workloads.values().filter(|w| w.state.holds_quota()) {
        let Some(a) = &w.admission else { continue };
        if !a.placement.iter().any(|(_, p)| p.node == nid) {
            continue;
        }
        let gone = m.pods.get(&w.id).filter(|r| r.attempt == w.attempt);
        let master_addr = a
            .placement
            .first()
            .map(|(_, p)| address_of(p.node))
            .unwrap_or_default();
        let stop = (w.state == WlState::Evicting).then(|| {
            w.eviction
                .as_ref()
                .map(|(r, msg)| format!("{r}: {msg}"))
                .unwrap_or_else(|| "Evicted".into())
        });
        let mut local = 0u32;
        for (rank, (ps, p)) in a.placement.iter().enumerate() {
            if p.node != nid {
                continue;
            }
            let rank = rank as u32;
            let local_rank = local;
            local += 1;
            if gone.is_some_and(|r| r.exited.contains_key(&rank)) {
                continue;
            }
            let mut requests = Resources::new();
            for (r, v) in &p.req {
                requests.add(st.names.resource_name(*r), *v);
            }
            let run = m
                .runs
                .get(&w.id)
                .map(|r| allot_common::api::RunSpec::clone(r))
                .unwrap_or_default();
            pods.push(PodAssignment {
                workload: w.spec.name.clone(),
                workload_id: w.id.0,
                attempt: w.attempt,
                team: st.teams[w.team.idx()].name().to_string(),
                rank,
                local_rank,
                world_size: a.placement.len() as u32,
                pod_set: a
                    .pod_sets
                    .get(*ps)
                    .map(|x| x.name.clone())
                    .unwrap_or_default(),
                devices: p
                    .devices
                    .iter()
                    .map(|(r, idx)| (st.names.resource_name(*r).to_string(), idx.clone()))
                    .collect(),
                requests,
                master_addr: master_addr.clone(),
                master_port: master_port(w.id, w.attempt),
                stop: stop.clone(),
                registry_credentials: run
                    .image
                    .as_deref()
                    .and_then(|i| allot_common::image::Reference::parse(i).ok())
                    .and_then(|r| {
                        m.registry_credentials
                            .get(st.teams[w.team.idx()].name())
                            .and_then(|regs| regs.get(&r.domain))
                            .cloned()
                    }),
                run,
            });
        }
    }
    let mut out = NodeAssignments {
        digest: 0,
        registered: meta.and_then(|x| x.report.as_ref()).is_some(),
        healthy: n.healthy,
        health_reason: meta.map(|x| x.reason.clone()).unwrap_or_default(),
        pods,
    };
    // Equal assignments, equal digest, on every replica.
    out.digest = allot_common::api::digest_of(&(
        &out.registered,
        &out.healthy,
        &out.health_reason,
        &out.pods,
    ));
    out
}

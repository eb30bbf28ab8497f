//! `allot simulate`: runs the real scheduler (`allot_core::schedule` and `State::apply_plan`)
//! on a described cluster with a simulated clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use allot_common::workload::MAIN_POD_SET;
use allot_common::{ClusterPolicy, ResourceName, Stability};
use allot_core::cycle_cache::CycleCache;
use allot_core::ids::{ResId, WlId};
use allot_core::protection::run_time_ends;
use allot_core::quota;
use allot_core::scheduler::schedule_cached;
use allot_core::state::{Event, State, Time, WlState};
use serde_json::{json, Map, Value};

use crate::scenario::{self, err, ScenarioError, ScenarioIn};

/// Most scheduling cycles run at one instant before the simulator reports a livelock.
const MAX_CYCLES_PER_INSTANT: usize = 10_000;

#[derive(Debug, Clone)]
enum Action {
    Submit(Box<scenario::WorkloadIn>, String),
    Cancel(String),
    Finish(String),
    NodeDown(String),
    NodeUp(String),
    SetTeam(Box<scenario::TeamIn>, String),
    SetPolicy(Box<scenario::PolicyIn>, String),
    /// Internal: a workload's duration ran out (valid only for that admission).
    Complete(WlId, Time),
    /// Internal: an eviction's grace period ended.
    EvictionDone(WlId),
    /// Internal: a minimum run time ends; a cycle runs if anything waits.
    Wake,
}

/// The simulator's result, ready to print.
pub struct Outcome {
    pub events: Vec<Value>,
    pub final_state: Value,
    pub stats: Value,
    pub warnings: Vec<String>,
}

struct Sim {
    state: State,
    queue: BTreeMap<(Time, u64), Action>,
    seq: u64,
    durations: BTreeMap<WlId, Time>,
    graces: BTreeMap<WlId, Time>,
    rejected: BTreeMap<String, (String, String)>,
    out: Vec<Value>,
    cycles: u64,
    /// Cycles that ran after the first at their instant (the last one's decisions changed
    /// the state), and the heads they judged anew.
    follow_ups: u64,
    judged_in_follow_ups: u64,
    /// What each cycle found before its first decision, for the next when nothing but the
    /// queues changed in between.
    cache: CycleCache,
    admitted: u64,
    preempted: u64,
    /// The instants a `Wake` is queued for.
    wakes: BTreeSet<Time>,
}

fn time_json(t: Time) -> Value {
    if t % 1000 == 0 {
        json!(t / 1000)
    } else {
        json!(t as f64 / 1000.0)
    }
}

/// A quantity as a JSON number in the unit users write: cores for cpu, bytes, counts.
pub fn qty_json(r: &ResourceName, v: i64) -> Value {
    if r.as_str() == allot_common::resource::CPU {
        if v % 1000 == 0 {
            json!(v / 1000)
        } else {
            json!(v as f64 / 1000.0)
        }
    } else {
        json!(v)
    }
}

impl Sim {
    /// An empty simulation with the scenario's policy.
    fn new(sc: &ScenarioIn) -> Result<Sim, ScenarioError> {
        // A scenario file that names no stability rule runs without them, as it did before
        // they existed (the format is a contract; docs/scenario-format.md).
        let base = ClusterPolicy {
            stability: Stability::OFF,
            ..Default::default()
        };
        let policy = match &sc.policy {
            Some(p) => scenario::policy("policy", p, &base)?,
            None => base,
        };
        Ok(Sim {
            state: State::new(policy),
            queue: BTreeMap::new(),
            seq: 0,
            durations: BTreeMap::new(),
            graces: BTreeMap::new(),
            rejected: BTreeMap::new(),
            out: Vec::new(),
            cycles: 0,
            cache: CycleCache::default(),
            follow_ups: 0,
            judged_in_follow_ups: 0,
            admitted: 0,
            preempted: 0,
            wakes: BTreeSet::new(),
        })
    }

    fn push(&mut self, t: Time, a: Action) {
        self.seq += 1;
        self.queue.insert((t, self.seq), a);
    }

    /// Queues a `Wake` at `end`, once per instant.
    fn wake_at(&mut self, end: Time) {
        if self.wakes.insert(end) {
            self.push(end, Action::Wake);
        }
    }

    fn name(&self, id: WlId) -> String {
        self.state.workload(id).spec.name.clone()
    }

    fn res(&self, r: ResId) -> &ResourceName {
        self.state.names().resource_name(r)
    }

    fn record(&mut self, t: Time, events: Vec<Event>) {
        for e in events {
            let v = match &e {
                Event::Submitted { wl } => {
                    json!({"t": time_json(t), "type": "submitted", "workload": self.name(*wl), "team": self.team_of(*wl)})
                }
                Event::Admitted { wl } => {
                    self.admitted += 1;
                    if let Some(d) = self.durations.get(wl).copied() {
                        self.push(t + d, Action::Complete(*wl, t));
                    }
                    // A live leader cycles on a timer; here time moves only with events, so a
                    // preemptor that waits on this minimum run time needs one at its end.
                    if let Some(end) = run_time_ends(self.state.policy(), t) {
                        self.wake_at(end);
                    }
                    self.admitted_json(t, *wl)
                }
                Event::Preempted {
                    wl,
                    by,
                    reason,
                    message,
                } => {
                    self.preempted += 1;
                    json!({"t": time_json(t), "type": "preempted", "workload": self.name(*wl), "by": self.name(*by),
                           "reason": reason.as_str(), "message": message})
                }
                Event::Evicted {
                    wl,
                    reason,
                    message,
                } => {
                    json!({"t": time_json(t), "type": "evicted", "workload": self.name(*wl), "reason": reason, "message": message})
                }
                Event::Requeued { wl } => {
                    json!({"t": time_json(t), "type": "requeued", "workload": self.name(*wl)})
                }
                Event::Finished { wl, succeeded } => {
                    json!({"t": time_json(t), "type": "finished", "workload": self.name(*wl),
                    "result": if *succeeded { "Succeeded" } else { "Failed" }})
                }
                Event::Cancelled { wl } => {
                    json!({"t": time_json(t), "type": "cancelled", "workload": self.name(*wl)})
                }
                Event::AdmissionRetried { wl, message } => {
                    json!({"t": time_json(t), "type": "retried", "workload": self.name(*wl), "message": message})
                }
            };
            self.out.push(v);
        }
    }

    fn team_of(&self, id: WlId) -> String {
        let wl = self.state.workload(id);
        self.state.teams()[wl.team.idx()].name().to_string()
    }

    fn flavors_counts(&self, id: WlId) -> (Value, Value) {
        let wl = self.state.workload(id);
        let Some(adm) = &wl.admission else {
            return (Value::Null, Value::Null);
        };
        let mut flavors = Map::new();
        let mut counts = Map::new();
        for ps in &adm.pod_sets {
            for (r, f) in &ps.flavors {
                let key = self.res(*r).to_string();
                if !flavors.contains_key(&key) {
                    flavors.insert(key, json!(self.state.names().flavor_name(*f)));
                }
            }
            counts.insert(ps.name.clone(), json!(ps.count));
        }
        (Value::Object(flavors), Value::Object(counts))
    }

    fn admitted_json(&self, t: Time, id: WlId) -> Value {
        let wl = self.state.workload(id);
        let (flavors, counts) = self.flavors_counts(id);
        let mut v = json!({"t": time_json(t), "type": "admitted", "workload": wl.spec.name, "team": self.team_of(id),
                           "flavors": flavors, "counts": counts});
        if let Some(adm) = &wl.admission {
            let borrowed: Map<String, Value> = adm
                .borrowed
                .iter()
                .map(|(r, q)| (self.res(*r).to_string(), qty_json(self.res(*r), *q)))
                .collect();
            v["borrowed"] = Value::Object(borrowed);
            if self.state.placement() {
                let mut per_ps: BTreeMap<usize, u32> = BTreeMap::new();
                let pods: Vec<Value> = adm
                    .placement
                    .iter()
                    .map(|(i, p)| {
                        let k = per_ps.entry(*i).or_insert(0);
                        let ps_name = &wl.spec.pod_sets[*i].name;
                        let pod = if wl.spec.pod_sets.len() == 1 && ps_name == MAIN_POD_SET {
                            format!("{}-{}", wl.spec.name, k)
                        } else {
                            format!("{}-{}-{}", wl.spec.name, ps_name, k)
                        };
                        *k += 1;
                        let devices: Map<String, Value> =
                            p.devices.iter().map(|(r, idx)| (self.res(*r).to_string(), json!(idx))).collect();
                        json!({"pod": pod, "node": self.state.acct().nodes.node(p.node).name, "devices": devices})
                    })
                    .collect();
                v["placement"] = Value::Array(pods);
            }
        }
        v
    }

    /// Applies one queued action at time `t`.
    fn apply(&mut self, t: Time, a: Action) -> Result<(), ScenarioError> {
        match a {
            Action::Submit(w, path) => self.submit(t, &w, &path, None)?,
            Action::Cancel(name) => {
                let id = self.lookup(&name)?;
                let ev = self
                    .state
                    .cancel(id, t)
                    .map_err(|e| err("events", e.to_string()))?;
                self.record(t, ev);
            }
            Action::Finish(name) => {
                let id = self.lookup(&name)?;
                let ev = self
                    .state
                    .finish(id, true, t)
                    .map_err(|e| err("events", e.to_string()))?;
                self.record(t, ev);
            }
            Action::Complete(id, admitted_at) => {
                let wl = self.state.workload(id);
                if wl.state.holds_quota() && wl.admitted_at == Some(admitted_at) {
                    let ev = self
                        .state
                        .finish(id, true, t)
                        .map_err(|e| err("events", e.to_string()))?;
                    self.record(t, ev);
                }
            }
            Action::EvictionDone(id) => {
                // The timer is stale if the workload left Evicting some other way (a node
                // failure requeued it, and it may even run again).
                if self.state.workload(id).state == WlState::Evicting {
                    let ev = self.state.complete_eviction(id, t);
                    self.record(t, ev);
                }
            }
            Action::NodeDown(n) | Action::NodeUp(n)
                if self.state.acct().nodes.find(&n).is_none() =>
            {
                return Err(err("events", format!("unknown node {n:?}")));
            }
            Action::NodeDown(n) => {
                let ev = self
                    .state
                    .set_node_health(&n, false, t)
                    .map_err(|e| err("events", e.to_string()))?;
                self.record(t, ev);
            }
            Action::NodeUp(n) => {
                let ev = self
                    .state
                    .set_node_health(&n, true, t)
                    .map_err(|e| err("events", e.to_string()))?;
                self.record(t, ev);
            }
            Action::SetTeam(team, path) => {
                let spec = scenario::team(&path, &team)?;
                self.state
                    .set_team(spec)
                    .map_err(|e| err(&path, e.to_string()))?;
            }
            Action::Wake => {
                self.wakes.remove(&t);
            }
            Action::SetPolicy(p, path) => {
                let pol = scenario::policy(&path, &p, self.state.policy())?;
                self.state
                    .set_policy(pol)
                    .map_err(|e| err(&path, e.to_string()))?;
                // A minimum run time turned on or changed ends at new times for the work that
                // runs now.
                let ends: Vec<Time> = (self.state.workloads().values())
                    .filter(|w| w.state.holds_quota())
                    .filter_map(|w| run_time_ends(self.state.policy(), w.admitted_at?))
                    .filter(|end| *end > t)
                    .collect();
                for end in ends {
                    self.wake_at(end);
                }
            }
        }
        Ok(())
    }

    fn lookup(&self, name: &str) -> Result<WlId, ScenarioError> {
        self.state.find_workload(name).map_err(|_| {
            err(
                "events",
                format!("unknown workload {name:?} (it must be submitted before this event)"),
            )
        })
    }

    fn submit(
        &mut self,
        t: Time,
        w: &scenario::WorkloadIn,
        path: &str,
        admitted_at: Option<Time>,
    ) -> Result<(), ScenarioError> {
        let spec = scenario::workload(path, w)?;
        if self.rejected.contains_key(&spec.name) || self.state.named(&spec.name).next().is_some() {
            return Err(err(
                format!("{path}.name"),
                format!("workload {:?} is defined twice", spec.name),
            ));
        }
        if let Err(e) = self.state.team_id(&spec.team) {
            return Err(err(format!("{path}.team"), e.to_string()));
        }
        let name = spec.name.clone();
        let team = spec.team.clone();
        match self.state.submit(spec, t) {
            Ok((id, ev)) => {
                if let Some(d) = w.duration {
                    self.durations
                        .insert(id, scenario::seconds_to_ms(&format!("{path}.duration"), d)?);
                }
                if let Some(g) = w.grace {
                    self.graces
                        .insert(id, scenario::seconds_to_ms(&format!("{path}.grace"), g)?);
                }
                self.record(t, ev);
                if let (Some(a), Some(at)) = (&w.admitted, admitted_at) {
                    let flavors = scenario::admitted_flavors(a);
                    let lookup = |r: &ResourceName| {
                        flavors
                            .get(r.as_str())
                            .or_else(|| flavors.get("*"))
                            .cloned()
                    };
                    let adm = self
                        .state
                        .admission_on(id, &lookup)
                        .map_err(|e| err(format!("{path}.admitted"), e))?;
                    let ev = self.state.admit_over_quota(id, &adm, at).map_err(|e| {
                        err(
                            format!("{path}.admitted"),
                            format!("does not fit the initial state: {e}"),
                        )
                    })?;
                    self.record(at, ev);
                }
            }
            Err(e) => {
                let message = e.to_string();
                self.out.push(json!({"t": time_json(t), "type": "rejected", "workload": name, "team": team, "message": message}));
                self.rejected.insert(name, (team, message));
            }
        }
        Ok(())
    }

    /// Runs scheduling cycles at `t` until nothing changes.
    fn settle(&mut self, t: Time) -> Result<(), ScenarioError> {
        for i in 0..MAX_CYCLES_PER_INSTANT {
            let judged = self.cache.judged;
            let plan = schedule_cached(&self.state, t, &mut self.cache);
            self.cycles += 1;
            if i > 0 {
                self.follow_ups += 1;
                self.judged_in_follow_ups += self.cache.judged - judged;
            }
            let events = self.state.apply_plan(&plan, t);
            let evicting: Vec<WlId> = events.iter().filter_map(Event::preempted).collect();
            let changed = plan.has_decisions();
            self.record(t, events);
            for id in evicting {
                match self.graces.get(&id).copied() {
                    Some(g) if g > 0 => self.push(t + g, Action::EvictionDone(id)),
                    _ => {
                        let ev = self.state.complete_eviction(id, t);
                        self.record(t, ev);
                    }
                }
            }
            if !changed {
                return Ok(());
            }
        }
        Err(err(
            "",
            format!(
                "the scheduler did not settle after {MAX_CYCLES_PER_INSTANT} cycles at t={}s",
                t as f64 / 1000.0
            ),
        ))
    }
}

/// How far a run has got, for a progress line.
pub struct Progress {
    /// Simulated time reached, and the last event's time (ms).
    pub now: Time,
    pub end: Time,
    pub cycles: u64,
    pub pending: usize,
    pub elapsed: std::time::Duration,
}

/// Runs a parsed scenario, calling `progress` about twice a second of wall time.
pub fn run_with_progress(
    sc: &ScenarioIn,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome, ScenarioError> {
    let started = Instant::now();
    let mut sim = Sim::new(sc)?;
    for (i, c) in sc.cohorts.iter().flatten().enumerate() {
        let path = format!("cohorts[{i}]");
        let spec = scenario::cohort(&path, c)?;
        sim.state
            .set_cohort(spec)
            .map_err(|e| err(&path, e.to_string()))?;
    }
    let mut team_names = BTreeSet::new();
    for (i, t) in sc.teams.iter().enumerate() {
        let path = format!("teams[{i}]");
        if !team_names.insert(t.name.clone()) {
            return Err(err(
                format!("{path}.name"),
                format!("duplicate team {:?}", t.name),
            ));
        }
        let spec = scenario::team(&path, t)?;
        sim.state
            .set_team(spec)
            .map_err(|e| err(&path, e.to_string()))?;
    }
    let nodes = scenario::nodes(sc.nodes.as_deref().unwrap_or(&[]))?;
    sim.state
        .add_nodes(nodes.iter().map(|(n, f, c, _)| (n.as_str(), f.as_str(), c)))
        .map_err(|e| err("nodes", e.to_string()))?;
    for (name, _, _, topology) in nodes.iter().filter(|n| !n.3.is_empty()) {
        sim.state
            .set_node_topology(name, topology)
            .map_err(|e| err("nodes", e.to_string()))?;
    }
    let until = sc
        .until
        .map(|u| scenario::seconds_to_ms("until", u))
        .transpose()?;
    // Already-admitted workloads first, in file order; the rest queue at their submit times.
    let workloads = sc.workloads.clone().unwrap_or_default();
    let mut admitted_first: Vec<(usize, Time, Time)> = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        let path = format!("workloads[{i}]");
        let t = scenario::seconds_to_ms(&format!("{path}.submit_at"), w.submit_at.unwrap_or(0.0))?;
        match &w.admitted {
            Some(a) => {
                let at = scenario::seconds_to_ms(
                    &format!("{path}.admitted.at"),
                    a.at.unwrap_or(w.submit_at.unwrap_or(0.0)),
                )?;
                admitted_first.push((i, t, at));
            }
            None => sim.push(t, Action::Submit(Box::new(w.clone()), path)),
        }
    }
    for (i, t, at) in admitted_first {
        sim.submit(t, &workloads[i], &format!("workloads[{i}]"), Some(at))?;
    }
    for (i, e) in sc.events.iter().flatten().enumerate() {
        let path = format!("events[{i}]");
        let t = scenario::seconds_to_ms(&format!("{path}.at"), e.at)?;
        let mut actions = Vec::new();
        if let Some(n) = &e.cancel {
            actions.push(Action::Cancel(n.clone()));
        }
        if let Some(n) = &e.finish {
            actions.push(Action::Finish(n.clone()));
        }
        if let Some(n) = &e.node_down {
            actions.push(Action::NodeDown(n.clone()));
        }
        if let Some(n) = &e.node_up {
            actions.push(Action::NodeUp(n.clone()));
        }
        if let Some(w) = &e.submit {
            actions.push(Action::Submit(
                Box::new(w.clone()),
                format!("{path}.submit"),
            ));
        }
        if let Some(tm) = &e.set_team {
            actions.push(Action::SetTeam(
                Box::new(tm.clone()),
                format!("{path}.set_team"),
            ));
        }
        if let Some(p) = &e.set_policy {
            actions.push(Action::SetPolicy(
                Box::new(p.clone()),
                format!("{path}.set_policy"),
            ));
        }
        if actions.len() != 1 {
            return Err(err(&path, "an event needs exactly one of cancel, finish, node_down, node_up, submit, set_team, set_policy"));
        }
        sim.push(t, actions.remove(0));
    }
    let start = sim.queue.keys().next().map(|(t, _)| *t).unwrap_or(0).min(0);
    let mut now = start;
    sim.settle(now)?;
    let end = until.unwrap_or_else(|| sim.queue.keys().last().map(|(t, _)| *t).unwrap_or(0));
    let mut next_report = started + std::time::Duration::from_millis(500);
    while let Some(((t, _), _)) = sim.queue.first_key_value() {
        let t = *t;
        if until.is_some_and(|u| t > u) {
            break;
        }
        let wall = Instant::now();
        if wall >= next_report {
            next_report = wall + std::time::Duration::from_millis(500);
            progress(&Progress {
                now: t,
                end: end.max(t),
                cycles: sim.cycles,
                pending: sim.state.teams().iter().map(|t| t.pending.len()).sum(),
                elapsed: started.elapsed(),
            });
        }
        let mut only_wakes = true;
        while let Some(entry) = sim.queue.first_entry() {
            if entry.key().0 != t {
                break;
            }
            let a = entry.remove();
            only_wakes &= matches!(a, Action::Wake);
            sim.apply(t, a)?;
        }
        // A wake with nothing waiting changes nothing, and is no instant of the outcome.
        if only_wakes && sim.state.teams().iter().all(|t| t.pending.is_empty()) {
            continue;
        }
        now = t;
        sim.settle(t)?;
    }
    let final_time = until.unwrap_or(now);
    let final_state = final_json(&sim, final_time);
    let warnings = sim.state.warnings().to_vec();
    let stats = stats_json(&sim, started);
    Ok(Outcome {
        events: sim.out,
        final_state,
        stats,
        warnings,
    })
}

/// The run's counts: cycles, admissions, preemptions, its wall time, and the scheduler's work
/// (the heads judged anew, a victim search most of them in a full cohort; those recognised by
/// what they read; the cycles an instant needed after its first, and what they judged).
fn stats_json(sim: &Sim, started: Instant) -> Value {
    let work = json!({"judged": sim.cache.judged, "recognised": sim.cache.recognised,
                      "follow_up_cycles": sim.follow_ups,
                      "judged_in_follow_ups": sim.judged_in_follow_ups});
    json!({"cycles": sim.cycles, "admitted": sim.admitted, "preempted": sim.preempted, "work": work,
           "wall_ms": started.elapsed().as_millis() as u64})
}

fn final_json(sim: &Sim, t: Time) -> Value {
    let st = &sim.state;
    let mut wls = Map::new();
    for wl in st.workloads().values() {
        let (flavors, counts) = sim.flavors_counts(wl.id);
        let state = match wl.state {
            WlState::Running => WlState::Admitted,
            WlState::Evicting => WlState::Admitted,
            s => s,
        };
        let mut v = json!({"state": state.as_str(), "team": st.teams()[wl.team.idx()].name(), "priority": wl.priority,
                           "flavors": flavors, "counts": counts, "preemptions": wl.preemptions});
        if wl.lost_run_ms > 0 {
            v["lost_run_s"] = time_json(wl.lost_run_ms);
        }
        if let Some((reason, message)) =
            wl.pending_status().filter(|_| wl.state == WlState::Pending)
        {
            v["reason"] = json!(reason);
            // With the numbers it depends on at the end of the run.
            v["message"] = json!(allot_core::explain::shown_message(
                st,
                wl,
                allot_core::conditions::ConditionType::QuotaReserved.as_str(),
                false,
                message
            ));
        }
        wls.insert(wl.spec.name.clone(), v);
    }
    for (name, (team, message)) in &sim.rejected {
        wls.insert(
            name.clone(),
            json!({"state": "Rejected", "team": team, "reason": "Rejected", "message": message,
                                        "flavors": null, "counts": null, "preemptions": 0}),
        );
    }
    let mut teams = Map::new();
    for (i, team) in st.teams().iter().enumerate() {
        let tid = allot_core::TeamId(i as u32);
        let mut usage: Map<String, Value> = Map::new();
        for (fr, _) in &team.quotas {
            let (f, r) = st.names().fr_parts(*fr);
            let entry = usage
                .entry(st.names().flavor_name(f).to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            entry[st.names().resource_name(r).as_str()] =
                qty_json(st.names().resource_name(r), st.acct().usage(tid, *fr));
        }
        let borrowed: Map<String, Value> = quota::borrowed_by_resource(st, st.acct(), tid)
            .into_iter()
            .map(|(r, q)| {
                (
                    st.names().resource_name(r).to_string(),
                    qty_json(st.names().resource_name(r), q),
                )
            })
            .collect();
        let share = quota::share(st, st.acct(), tid, &[]);
        let ws = if share.infinite {
            json!(i64::MAX)
        } else {
            json!(share.value())
        };
        teams.insert(team.name().to_string(), json!({"usage": usage, "borrowed": borrowed, "weighted_share": ws,
            "cohort": if st.cohorts()[team.cohort.idx()].private { Value::Null } else { json!(st.cohorts()[team.cohort.idx()].name) }}));
    }
    json!({"time": time_json(t), "workloads": wls, "teams": teams})
}

/// Renders the outcome as a readable timeline and final tables.
pub fn table(o: &Outcome) -> String {
    let mut s = String::new();
    for w in &o.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s.push_str("TIMELINE\n");
    for e in &o.events {
        let t = e["t"].to_string();
        let kind = e["type"].as_str().unwrap_or("");
        let wl = e["workload"].as_str().unwrap_or("");
        let detail = match kind {
            "admitted" => {
                let mut d = format!("flavors {} counts {}", e["flavors"], e["counts"]);
                if e["borrowed"].as_object().is_some_and(|m| !m.is_empty()) {
                    d.push_str(&format!(" borrowed {}", e["borrowed"]));
                }
                if let Some(p) = e["placement"].as_array() {
                    let nodes: BTreeSet<&str> =
                        p.iter().filter_map(|x| x["node"].as_str()).collect();
                    d.push_str(&format!(
                        " on {}",
                        nodes.into_iter().collect::<Vec<_>>().join(",")
                    ));
                }
                d
            }
            "preempted" => format!(
                "by {} [{}] {}",
                e["by"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            ),
            "finished" => e["result"].as_str().unwrap_or("").to_string(),
            "rejected" | "evicted" | "retried" => e["message"].as_str().unwrap_or("").to_string(),
            _ => String::new(),
        };
        s.push_str(&format!("  t={t:<6} {kind:<10} {wl:<28} {detail}\n"));
    }
    s.push_str(&format!("\nFINAL (t={})\n", o.final_state["time"]));
    s.push_str(&format!(
        "  {:<28} {:<10} {:<14} {:<24} {}\n",
        "WORKLOAD", "STATE", "TEAM", "FLAVORS", "WHY"
    ));
    if let Some(m) = o.final_state["workloads"].as_object() {
        for (name, w) in m {
            let flavors = match w["flavors"].as_object() {
                Some(f) => f
                    .iter()
                    .map(|(r, v)| format!("{r}:{}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(","),
                None => "-".into(),
            };
            s.push_str(&format!(
                "  {:<28} {:<10} {:<14} {:<24} {}\n",
                name,
                w["state"].as_str().unwrap_or(""),
                w["team"].as_str().unwrap_or(""),
                flavors,
                w["message"].as_str().unwrap_or("")
            ));
        }
    }
    s.push_str(&format!(
        "\n  {:<16} {:<40} {:<24} {}\n",
        "TEAM", "USAGE", "BORROWED", "WEIGHTED SHARE"
    ));
    if let Some(m) = o.final_state["teams"].as_object() {
        for (name, t) in m {
            s.push_str(&format!(
                "  {:<16} {:<40} {:<24} {}\n",
                name,
                t["usage"].to_string(),
                t["borrowed"].to_string(),
                t["weighted_share"]
            ));
        }
    }
    s.push_str(&format!(
        "\n{} cycles, {} admissions, {} preemptions, {} ms\n",
        o.stats["cycles"], o.stats["admitted"], o.stats["preempted"], o.stats["wall_ms"]
    ));
    let w = &o.stats["work"];
    s.push_str(&format!(
        "scheduler work: {} heads judged anew, {} recognised by what they read; {} cycles after the first at their instant judged {}\n",
        w["judged"], w["recognised"], w["follow_up_cycles"], w["judged_in_follow_ups"]
    ));
    s
}

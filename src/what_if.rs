//! `allot what-if`: the cluster's own recorded history replayed by the simulator, under the
//! policy and quotas it has and under proposed ones, side by side per team, with how closely the
//! unchanged replay reproduces what really happened.
//!
//! The coordinator gives what it recorded over the period (`Body::Recorded`: the workloads
//! submitted in it, with their submission, first admission, end and last run's length, and the
//! policy, teams and nodes as they are). That becomes an `allot simulate` scenario (`--save`
//! writes it, to edit and run again): each workload submitted at its time, running as long as
//! its last run held quota (one that had not ended runs to the end of the period), cancelled
//! when it was. Workloads submitted before the period that had not ended at its start are
//! carried in: the replay submits them at the start, in their order, and a run under way then
//! counts from there; their waits began before the period and are left out of the wait
//! figures and the fidelity. The recorded GPU-hours (held, and borrowed above the team's
//! nominal) are the usage ledger's for the whole hours the period touches; the replays' are
//! counted from their admissions to their releases.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use allot_common::api::{Body, Reply};
use allot_common::recorded::{Recorded, RecordedWorkload};
use allot_common::usage::{UsageBy, UsageQuery, UsageReport};
use allot_common::workload::PriorityRef;
use allot_common::{Resources, TeamSpec};
use anyhow::{anyhow, bail, Context};
use serde_json::{json, Map, Value};

use crate::client::{api, Client};
use crate::simulate::{qty_json, Outcome};

/// What to change for the second replay.
pub struct Changes {
    /// A new `--scheduler-config`, as `update-cluster-scheduler-config` takes it.
    pub scheduler_config: Option<String>,
    /// `TEAM=COMPUTE-QUOTA-CONFIG`: a team's quota, as `create-compute-quota` takes it.
    pub quotas: Vec<(String, String)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.scheduler_config.is_none() && self.quotas.is_empty()
    }
}

pub async fn run(
    c: &mut Client,
    since_ms: i64,
    until_ms: i64,
    changes: &Changes,
    save: Option<PathBuf>,
) -> anyhow::Result<()> {
    let q = allot_common::recorded::RecordedQuery { since_ms, until_ms };
    let Reply::Recorded(rec) = api(c.call(Body::Recorded(q)).await)? else {
        bail!("unexpected answer to what-if");
    };
    let (base, names) = scenario(&rec);
    if let Some(path) = &save {
        let text = serde_json::to_string_pretty(&base)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!(
            "scenario written to {} (allot simulate runs it)",
            path.display()
        );
    }
    let as_is = replay(&base).context("replaying the recorded period")?;
    let changed = if changes.is_empty() {
        None
    } else {
        let v = changed(&base, changes)?;
        Some(replay(&v).context("replaying with the changes")?)
    };
    let q = UsageQuery {
        since_ms,
        until_ms,
        team: None,
        by: vec![UsageBy::Team],
    };
    let Reply::Usage(usage) = api(c.call(Body::Usage(q)).await)? else {
        bail!("unexpected answer to usage");
    };
    print!(
        "{}",
        report(&rec, &names, &base, &usage, &as_is, changed.as_ref())
    );
    Ok(())
}

/// The recorded period as a scenario, and each scenario name's recorded workload.
fn scenario(rec: &Recorded) -> (Value, BTreeMap<String, usize>) {
    let s = |ms: i64| (ms - rec.since_ms) as f64 / 1000.0;
    let p = &rec.policy;
    let policy = json!({
        "priority_classes": p.priority_classes.iter()
            .map(|c| json!({"name": c.name, "weight": c.weight})).collect::<Vec<_>>(),
        "fair_share": if p.fair_share { "Enabled" } else { "Disabled" },
        "fair_sharing_strategies": p.fair_sharing_strategies,
        "idle_resource_sharing": if p.idle_resource_sharing { "Enabled" } else { "Disabled" },
        "minimum_run_time": p.stability.minimum_run_time_s,
        "preemption_budget": p.stability.preemption_budget,
    });
    let nodes: Vec<Value> = (rec.nodes.iter())
        .map(|(name, it, cap)| json!({"name": name, "instance_type": it, "resources": res_json(cap)}))
        .collect();
    let teams: Vec<Value> = rec.teams.iter().map(team_json).collect();
    let mut names = BTreeMap::new();
    let mut workloads = Vec::new();
    let mut events = Vec::new();
    for (i, w) in rec.workloads.iter().enumerate() {
        // A name used again after its first workload ended is told apart.
        let mut name = w.spec.name.clone();
        if names.contains_key(&name) {
            name = format!("{name}~{i}");
        }
        names.insert(name.clone(), i);
        let mut o = workload_json(w, &name, s(w.submitted_ms.max(rec.since_ms)));
        match (w.state.as_str(), w.ran_ms, w.ended_ms) {
            ("Succeeded" | "Failed", Some(ran), _) => {
                o.insert("duration".into(), json!(ran as f64 / 1000.0));
            }
            ("Cancelled", _, Some(end)) => events.push(json!({"at": s(end), "cancel": name})),
            _ => {}
        }
        workloads.push(Value::Object(o));
    }
    let v = json!({
        "version": 1,
        "until": s(rec.until_ms),
        "policy": policy,
        "nodes": nodes,
        "teams": teams,
        "workloads": workloads,
        "events": events,
    });
    (v, names)
}

fn res_json(r: &Resources) -> Value {
    Value::Object(
        r.iter()
            .map(|(n, v)| (n.to_string(), qty_json(n, v)))
            .collect(),
    )
}

fn team_json(t: &TeamSpec) -> Value {
    let mut quota = Map::new();
    for fq in &t.quotas {
        let res: Map<String, Value> = (fq.resources.iter())
            .map(|(r, q)| {
                let mut o = Map::new();
                o.insert("nominal".into(), qty_json(r, q.nominal));
                if let Some(b) = q.borrowing_limit {
                    o.insert("borrowing_limit".into(), qty_json(r, b));
                }
                if let Some(l) = q.lending_limit {
                    o.insert("lending_limit".into(), qty_json(r, l));
                }
                (r.to_string(), Value::Object(o))
            })
            .collect();
        quota.insert(fq.flavor.clone(), Value::Object(res));
    }
    let mut o = json!({
        "name": t.name,
        "cohort": t.cohort,
        "fair_share_weight": t.fair_share_weight,
        "quota": quota,
        "preemption": t.preemption,
        "queueing": t.queueing,
        "flavor_fungibility": t.flavor_fungibility,
    });
    if !t.resource_groups.is_empty() {
        o["resource_groups"] = (t.resource_groups.iter())
            .map(|g| json!({"covered": g.covered, "flavors": g.flavors}))
            .collect();
    }
    o
}

fn workload_json(w: &RecordedWorkload, name: &str, submit_at: f64) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("name".into(), json!(name));
    o.insert("team".into(), json!(w.spec.team));
    match &w.spec.priority {
        PriorityRef::Class(c) => o.insert("priority".into(), json!(c)),
        PriorityRef::Value(v) => o.insert("priority".into(), json!(v)),
        PriorityRef::None => None,
    };
    o.insert("submit_at".into(), json!(submit_at));
    if let Some(it) = &w.spec.instance_type {
        o.insert("instance_type".into(), json!(it));
    }
    let podsets: Vec<Value> = (w.spec.pod_sets.iter())
        .map(|p| {
            let mut ps =
                json!({"name": p.name, "count": p.count, "requests": res_json(&p.requests)});
            if let Some(m) = p.min_count {
                ps["min_count"] = json!(m);
            }
            ps
        })
        .collect();
    o.insert("podsets".into(), Value::Array(podsets));
    o
}

/// `base` with the changes made.
fn changed(base: &Value, ch: &Changes) -> anyhow::Result<Value> {
    let mut v = base.clone();
    if let Some(text) = &ch.scheduler_config {
        let keep = |k: &str| base["policy"][k].clone();
        v["policy"] = json!({
            "scheduler_config": text,
            "minimum_run_time": keep("minimum_run_time"),
            "preemption_budget": keep("preemption_budget"),
        });
    }
    for (team, config) in &ch.quotas {
        let teams = v["teams"]
            .as_array_mut()
            .ok_or_else(|| anyhow!("no teams"))?;
        let t = (teams.iter_mut())
            .find(|t| t["name"] == json!(team))
            .ok_or_else(|| anyhow!("--compute-quota: the cluster has no team {team:?}"))?;
        let cohort = t["cohort"].clone();
        let weight = t["fair_share_weight"].clone();
        *t = json!({"name": team, "cohort": cohort, "fair_share_weight": weight,
                    "compute_quota": config});
    }
    Ok(v)
}

fn replay(v: &Value) -> anyhow::Result<Outcome> {
    let text = serde_json::to_string(v)?;
    let sc = crate::scenario::parse(&text).map_err(|e| anyhow!("{e}"))?;
    crate::simulate::run_with_progress(&sc, &mut |_| {}).map_err(|e| anyhow!("{e}"))
}

/// Per team: workloads, admitted, waits (mean, p90), GPU-hours held and borrowed, preemptions.
#[derive(Default)]
struct TeamFigures {
    workloads: usize,
    admitted: usize,
    /// Waits of the workloads submitted in the period (a carried one's began before it).
    waits: Vec<f64>,
    gpu_s: f64,
    borrowed_s: f64,
    preemptions: u64,
}

impl TeamFigures {
    fn cells(&self) -> Vec<String> {
        let mut w = self.waits.clone();
        w.sort_by(f64::total_cmp);
        let mean = if w.is_empty() {
            0.0
        } else {
            w.iter().sum::<f64>() / w.len() as f64
        };
        let p90 = w
            .get((w.len() * 9 / 10).min(w.len().saturating_sub(1)))
            .copied();
        vec![
            format!("{}/{}", self.admitted, self.workloads),
            format!("{mean:.0}s"),
            p90.map_or("-".into(), |p| format!("{p:.0}s")),
            format!("{:.2}", self.gpu_s / 3600.0),
            format!("{:.2}", self.borrowed_s / 3600.0),
            self.preemptions.to_string(),
        ]
    }
}

/// The replay's figures per team, and each workload's first admission (seconds).
fn replayed(
    base: &Value,
    o: &Outcome,
    carried: &BTreeSet<String>,
) -> (BTreeMap<String, TeamFigures>, BTreeMap<String, f64>) {
    let mut teams: BTreeMap<String, TeamFigures> = BTreeMap::new();
    let mut info: BTreeMap<String, (String, f64, f64)> = BTreeMap::new();
    for w in base["workloads"].as_array().into_iter().flatten() {
        let name = w["name"].as_str().unwrap_or_default().to_string();
        let team = w["team"].as_str().unwrap_or_default().to_string();
        let gpus: f64 = (w["podsets"].as_array().into_iter().flatten())
            .map(|p| {
                p["count"].as_f64().unwrap_or(0.0) * p["requests"]["gpu"].as_f64().unwrap_or(0.0)
            })
            .sum();
        teams.entry(team.clone()).or_default().workloads += 1;
        info.insert(name, (team, w["submit_at"].as_f64().unwrap_or(0.0), gpus));
    }
    let end = base["until"].as_f64().unwrap_or(0.0);
    let mut first = BTreeMap::new();
    // Since when each workload holds quota, and the GPUs of it borrowed.
    let mut holding: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for e in &o.events {
        let (Some(name), Some(t)) = (e["workload"].as_str(), e["t"].as_f64()) else {
            continue;
        };
        let Some((team, submit, gpus)) = info.get(name) else {
            continue;
        };
        let f = teams.entry(team.clone()).or_default();
        match e["type"].as_str() {
            Some("admitted") => {
                if !first.contains_key(name) {
                    first.insert(name.to_string(), t);
                    f.admitted += 1;
                    if !carried.contains(name) {
                        f.waits.push(t - submit);
                    }
                }
                let borrowed = e["borrowed"]["gpu"].as_f64().unwrap_or(0.0);
                holding.insert(name.to_string(), (t, borrowed));
            }
            Some("preempted") => f.preemptions += 1,
            Some("requeued" | "finished" | "cancelled" | "evicted") => {
                if let Some((from, borrowed)) = holding.remove(name) {
                    f.gpu_s += (t - from) * gpus;
                    f.borrowed_s += (t - from) * borrowed;
                }
            }
            _ => {}
        }
    }
    for (name, (from, borrowed)) in holding {
        if let Some((team, _, gpus)) = info.get(&name) {
            let f = teams.entry(team.clone()).or_default();
            f.gpu_s += (end - from) * gpus;
            f.borrowed_s += (end - from) * borrowed;
        }
    }
    (teams, first)
}

fn report(
    rec: &Recorded,
    names: &BTreeMap<String, usize>,
    base: &Value,
    usage: &UsageReport,
    as_is: &Outcome,
    changed: Option<&Outcome>,
) -> String {
    let carried: BTreeSet<String> = (names.iter())
        .filter(|(_, &i)| rec.workloads[i].carried)
        .map(|(n, _)| n.clone())
        .collect();
    let (now, first) = replayed(base, as_is, &carried);
    let mut real: BTreeMap<String, TeamFigures> = BTreeMap::new();
    let (mut err, mut close, mut both) = (Vec::new(), 0usize, 0usize);
    for (name, &i) in names {
        let w = &rec.workloads[i];
        let f = real.entry(w.spec.team.clone()).or_default();
        f.workloads += 1;
        f.preemptions += u64::from(w.preemptions);
        f.admitted += usize::from(w.admitted_ms.is_some());
        if w.carried {
            continue;
        }
        if let Some(a) = w.admitted_ms {
            let wait = (a - w.submitted_ms) as f64 / 1000.0;
            f.waits.push(wait);
            if let Some(sim) = first.get(name) {
                let sim_wait = sim - (w.submitted_ms - rec.since_ms) as f64 / 1000.0;
                both += 1;
                err.push((sim_wait - wait).abs());
                close += usize::from((sim_wait - wait).abs() <= 1.0);
            }
        }
    }
    // GPU-hours held and borrowed as the usage ledger counted them (whole hours).
    for l in usage.lines.iter().filter(|l| l.resource == "gpu") {
        let f = real.entry(l.group[0].clone()).or_default();
        f.gpu_s = l.amounts.used as f64 / 1000.0;
        f.borrowed_s = l.amounts.quota.map_or(0.0, |q| q.borrowed as f64 / 1000.0);
    }
    let mut out = format!(
        "Recorded {} to {} (UTC): {} workloads submitted, {} carried in from before, replayed on {} nodes\n",
        allot_common::timefmt::utc(rec.since_ms),
        allot_common::timefmt::utc(rec.until_ms),
        rec.workloads.len() - carried.len(),
        carried.len(),
        rec.nodes.len()
    );
    let header = [
        "TEAM",
        "RUN",
        "ADMITTED",
        "MEAN WAIT",
        "P90 WAIT",
        "GPU-H",
        "BORROWED GPU-H",
        "PREEMPTED",
    ];
    let mut rows = Vec::new();
    let teams: std::collections::BTreeSet<&String> = now.keys().chain(real.keys()).collect();
    let later = changed.map(|o| replayed(base, o, &carried).0);
    let empty = TeamFigures::default();
    for t in teams {
        let recorded = real.get(t).unwrap_or(&empty).cells();
        let mut runs = vec![
            ("recorded", recorded),
            ("replayed", now.get(t).unwrap_or(&empty).cells()),
        ];
        if let Some(l) = &later {
            runs.push(("with the changes", l.get(t).unwrap_or(&empty).cells()));
        }
        for (run, cells) in runs {
            let mut row = vec![t.clone(), run.to_string()];
            row.extend(cells);
            rows.push(row);
        }
    }
    out.push_str(&crate::cli::render::table(&header, &rows));
    err.sort_by(f64::total_cmp);
    let mean = if err.is_empty() {
        0.0
    } else {
        err.iter().sum::<f64>() / err.len() as f64
    };
    out.push_str(&format!(
        "fidelity: of {both} workloads admitted both in the cluster and in the unchanged replay, \
         {close} waited within 1 s of what they really waited; mean difference {mean:.1}s, \
         largest {:.1}s\n",
        err.last().copied().unwrap_or(0.0)
    ));
    out
}

/// `TEAM=CONFIG` for `--compute-quota`.
pub fn parse_team_quota(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(t, c)| (t.trim().to_string(), c.to_string()))
        .filter(|(t, c)| !t.is_empty() && !c.is_empty())
        .ok_or_else(|| {
            format!(
                "{s:?}: give TEAM=CONFIG, the config as create-compute-quota's \
                 --compute-quota-config takes it"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_common::ResourceName;

    #[test]
    fn team_quota_arguments_name_the_team_and_the_config() {
        assert_eq!(
            parse_team_quota("team-a=ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]"),
            Ok((
                "team-a".into(),
                "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]".into()
            ))
        );
        assert!(parse_team_quota("team-a")
            .unwrap_err()
            .contains("TEAM=CONFIG"));
    }

    #[test]
    fn a_resource_map_reads_back_as_the_scenario_reads_it() {
        let mut r = Resources::new();
        r.add(&ResourceName::cpu(), 1500);
        r.add(&ResourceName::gpu(), 2);
        let v = res_json(&r);
        assert_eq!(v["cpu"], json!(1.5));
        assert_eq!(v["gpu"], json!(2));
    }
}

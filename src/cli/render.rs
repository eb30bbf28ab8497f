//! What the commands print: tables, the AWS API's JSON shapes, `describe`'s text, history in
//! three formats. Reads the API's views only; the commands (`cli`) call it.

use std::collections::BTreeMap;

use allot_common::api::{
    ArrayView, ComputeQuotaView, HistoryRow, NodeView, Reply, TeamView, WorkloadView,
};
use allot_common::hyperpod::ComputeQuotaConfig;
use clap::ValueEnum;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HistoryFormat {
    Table,
    Json,
    Csv,
}

pub(crate) const WORKLOAD_HEADER: [&str; 7] = [
    "NAME", "TEAM", "PRIORITY", "STATE", "PODS", "NODES", "REASON",
];

pub(crate) fn workload_row(w: &WorkloadView) -> Vec<String> {
    let mut nodes: Vec<String> = w.pods.iter().map(|p| p.node.clone()).collect();
    nodes.dedup();
    let reason = w
        .conditions
        .iter()
        .find(|c| c.kind == "QuotaReserved" && !c.status)
        .map(|c| c.reason.clone())
        .or_else(|| {
            w.conditions
                .iter()
                .find(|c| c.kind == "Evicted" && c.status)
                .map(|c| c.reason.clone())
        })
        .unwrap_or_default();
    vec![
        w.name.clone(),
        w.team.clone(),
        match &w.priority_class {
            Some(c) => format!("{c} ({})", w.priority),
            None => w.priority.to_string(),
        },
        w.state.clone(),
        w.count.to_string(),
        nodes.join(","),
        reason,
    ]
}

/// A cell as a terminal should show it: control characters (a newline in a name) escaped, so
/// every row stays one line whatever the server returns.
pub(crate) fn cell(c: &str) -> String {
    if c.chars().any(char::is_control) {
        c.chars()
            .map(|ch| {
                if ch.is_control() {
                    ch.escape_default().to_string()
                } else {
                    ch.to_string()
                }
            })
            .collect()
    } else {
        c.to_string()
    }
}

/// Columns padded to their widest cell. Padding is written out, not formatted with a width,
/// which `format!` limits to 65,535 and panics past.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cell(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            s.push_str(c);
            if i + 1 < cells.len() {
                let w = widths.get(i).copied().unwrap_or(0);
                let pad = w.saturating_sub(c.chars().count()) + 3;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in &rows {
        out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
    }
    out
}

pub(crate) fn fmt_res(r: &allot_common::Resources) -> String {
    r.iter()
        .map(|(k, v)| format!("{k}={}", k.format(v)))
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn ms_time(ms: i64) -> String {
    allot_common::timefmt::utc(ms)
}

/// The account and region in the ARNs allot prints: it governs one cluster, its own.
pub(crate) const ARN_PREFIX: &str = "arn:aws:sagemaker:local:000000000000";
/// The cluster's id in `ClusterArn`.
pub(crate) const CLUSTER_ID: &str = "allotcluster";

/// A time as the AWS CLI prints a timestamp (Python's `isoformat()` of a UTC datetime).
pub(crate) fn aws_time(ms: i64) -> String {
    let base = ms_time(ms).trim_end_matches('Z').to_string();
    if ms.rem_euclid(1000) == 0 {
        format!("{base}+00:00")
    } else {
        format!("{base}.{:03}000+00:00", ms.rem_euclid(1000))
    }
}

/// The scheduler config's id: 12 lowercase hex digits of its name's fingerprint (the API's
/// ClusterSchedulerConfigId pattern, `[a-z0-9]{12}`).
pub(crate) fn scheduler_config_id(name: &str) -> String {
    format!(
        "{:012x}",
        allot_common::api::fnv1a(name.bytes()) & 0xffff_ffff_ffff
    )
}

/// A compute quota as DescribeComputeQuota returns it (`summary`: as ListComputeQuotas lists
/// it, without Description).
pub(crate) fn quota_json(q: &ComputeQuotaView, summary: bool) -> Value {
    let config = ComputeQuotaConfig::parse_shorthand(&q.config)
        .map(|c| c.to_aws_json())
        .unwrap_or_else(|_| Value::String(q.config.clone()));
    let mut v = json!({
        "ComputeQuotaArn": format!("{ARN_PREFIX}:compute-quota/{}", q.id),
        "ComputeQuotaId": q.id,
        "Name": q.name,
        "ComputeQuotaVersion": q.version,
        "Status": "Created",
        "ClusterArn": format!("{ARN_PREFIX}:cluster/{CLUSTER_ID}"),
        "ComputeQuotaConfig": config,
        "ComputeQuotaTarget": {"TeamName": q.team, "FairShareWeight": q.fair_share_weight},
        "ActivationState": q.activation.as_str(),
        "CreationTime": aws_time(q.created_ms),
        "LastModifiedTime": aws_time(q.updated_ms),
    });
    if let (Some(d), false) = (&q.description, summary) {
        v["Description"] = json!(d);
    }
    v
}

pub(crate) fn scheduler_config_json(s: &allot_common::api::SchedulerConfigView) -> Value {
    let id = scheduler_config_id(&s.name);
    let config = allot_common::hyperpod::parse_scheduler_config(&s.config)
        .map(|p| {
            json!({
                "PriorityClasses": p.priority_classes.iter()
                    .map(|c| json!({"Name": c.name, "Weight": c.weight}))
                    .collect::<Vec<_>>(),
                "FairShare": if p.fair_share { "Enabled" } else { "Disabled" },
                "IdleResourceSharing": if p.idle_resource_sharing { "Enabled" } else { "Disabled" },
            })
        })
        .unwrap_or_else(|_| Value::String(s.config.clone()));
    let mut v = json!({
        "ClusterSchedulerConfigArn": format!("{ARN_PREFIX}:cluster-scheduler-config/{id}"),
        "ClusterSchedulerConfigId": id,
        "Name": s.name,
        "ClusterSchedulerConfigVersion": s.version,
        "Status": "Created",
        "ClusterArn": format!("{ARN_PREFIX}:cluster/{CLUSTER_ID}"),
        "SchedulerConfig": config,
        "CreationTime": aws_time(s.created_ms),
        "LastModifiedTime": aws_time(s.updated_ms),
        "AdmissionLimits": {
            "MaxPendingPerTeam": s.limits.max_pending_per_team,
            "SubmitsPerSecond": s.limits.submits_per_second,
            "SubmitBurst": s.limits.submit_burst,
        },
        "Stability": {
            "MinimumRunTimeSeconds": s.stability.minimum_run_time_s,
            "PreemptionBudget": s.stability.preemption_budget,
        },
    });
    if let Some(d) = &s.description {
        v["Description"] = json!(d);
    }
    v
}

pub(crate) fn print_reply(r: Reply, format: Format) {
    match format {
        Format::Json => {
            let v = match &r {
                Reply::Quota(q) => quota_json(q, false),
                Reply::Quotas(qs) => json!({
                    "ComputeQuotaSummaries":
                        qs.iter().map(|q| quota_json(q, true)).collect::<Vec<_>>()
                }),
                Reply::SchedulerConfig(s) => scheduler_config_json(s),
                other => serde_json::to_value(other).unwrap_or(Value::Null),
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
            );
        }
        Format::Table => print!("{}", render(&r)),
    }
}

pub(crate) fn render(r: &Reply) -> String {
    match r {
        Reply::Hello {
            replica, leader, ..
        } => format!("replica {replica}, leader {leader:?}\n"),
        Reply::Done => "done\n".into(),
        Reply::Format { reads } => format!("reads formats up to {reads}\n"),
        Reply::Backup { data, .. } => format!("a backup of {} bytes\n", data.len()),
        Reply::BackupStream { size, .. } => format!("a backup of {size} bytes follows\n"),
        Reply::GangScheduling(p) => render_gang_scheduling(p.as_ref()),
        Reply::Topology(ds) => render_topology(ds),
        Reply::Members(ms) => render_members(ms),
        Reply::Cohorts(cs) => render_cohorts(cs, &BTreeMap::new()),
        Reply::CohortWeights(ws) => table(
            &["COHORT", "WEIGHT"],
            &(ws.iter())
                .map(|w| vec![w.cohort.clone(), w.fair_share_weight.clone()])
                .collect::<Vec<_>>(),
        ),
        Reply::Explanation(lines) => lines.iter().map(|l| format!("{l}\n")).collect(),
        Reply::LogChunk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::LogRequests(rs) => format!("{} log requests\n", rs.len()),
        Reply::WebTicket { http, .. } => format!("a dashboard ticket for http://{http}\n"),
        Reply::WorkloadsAt { workloads, .. } => table(
            &WORKLOAD_HEADER,
            &workloads.iter().map(workload_row).collect::<Vec<_>>(),
        ),
        Reply::Assignments(a) => {
            format!("{} pods assigned (digest {:x})\n", a.pods.len(), a.digest)
        }
        Reply::Quota(q) => render_quotas(std::slice::from_ref(q)),
        Reply::Quotas(qs) => render_quotas(qs),
        Reply::SchedulerConfig(s) => {
            let mut out = table(
                &[
                    "NAME",
                    "VERSION",
                    "SCHEDULER CONFIG",
                    "ADMISSION LIMITS",
                    "STABILITY",
                ],
                &[vec![
                    s.name.clone(),
                    s.version.to_string(),
                    s.config.clone(),
                    format!(
                        "max-pending-per-team={},submits-per-second={},submit-burst={}",
                        s.limits.max_pending_per_team,
                        s.limits.submits_per_second,
                        s.limits.submit_burst
                    ),
                    format!(
                        "minimum-run-time={}s,preemption-budget={}",
                        s.stability.minimum_run_time_s, s.stability.preemption_budget
                    ),
                ]],
            );
            if let Some(d) = &s.description {
                out.push_str(&format!("Description: {d}\n"));
            }
            out
        }
        Reply::Submitted {
            name,
            id,
            existing,
            state,
        } => {
            if *existing {
                format!("workload {name} already submitted (id {id}): {state}\n")
            } else {
                format!("workload {name} submitted (id {id}): {state}\n")
            }
        }
        Reply::SubmittedBatch(v) => format!(
            "{} submitted, {} refused\n",
            v.iter().filter(|r| r.is_ok()).count(),
            v.iter().filter(|r| r.is_err()).count()
        ),
        Reply::Workloads(ws) => table(
            &WORKLOAD_HEADER,
            &ws.iter().map(workload_row).collect::<Vec<_>>(),
        ),
        Reply::Workload(w) => describe_workload(w),
        Reply::Nodes(ns) => render_nodes(ns),
        Reply::Teams(ts) => render_teams(ts),
        Reply::Cancelled { count, names } => cancel_summary(*count, names, "Cancelled") + "\n",
        Reply::ArraySubmitted {
            name,
            elements,
            queued,
            existing,
        } => format!(
            "array {name} {}: {elements} elements ({name}-INDEX), {queued} queued{}\n",
            if *existing {
                "already submitted"
            } else {
                "submitted"
            },
            if queued < elements {
                format!(", {} held by its limit", elements - queued)
            } else {
                String::new()
            }
        ),
        Reply::Arrays(a) => render_arrays(a),
        Reply::RegistryCredentials(v) => table(
            &["TEAM", "REGISTRY", "USERNAME"],
            &v.iter()
                .map(|c| vec![c.team.clone(), c.registry.clone(), c.username.clone()])
                .collect::<Vec<_>>(),
        ),
        Reply::History(rows) => render_history(rows, HistoryFormat::Table).unwrap_or_default(),
        // `allot usage` renders its report itself (usage.rs).
        Reply::Usage(u) => format!("{} usage lines\n", u.lines.len()),
        Reply::Recorded(r) => format!("{} workloads recorded\n", r.workloads.len()),
    }
}

/// When a pod started and ended, and how: `, started 2026-…Z, ended 2026-…Z (exit 0, Succeeded)`.
pub(crate) fn pod_times(p: &allot_common::api::PodView) -> String {
    let mut s = String::new();
    if let Some(st) = &p.status {
        s.push_str(&format!(", {st}"));
    }
    if let Some(t) = p.started_ms {
        s.push_str(&format!(", started {}", allot_common::timefmt::utc_ms(t)));
    }
    if let Some(t) = p.ended_ms {
        s.push_str(&format!(", ended {}", allot_common::timefmt::utc_ms(t)));
        let how: Vec<String> = p
            .exit_code
            .map(|c| format!("exit {c}"))
            .into_iter()
            .chain(p.outcome.clone())
            .collect();
        if !how.is_empty() {
            s.push_str(&format!(" ({})", how.join(", ")));
        }
    }
    s
}

/// `Cancelled 3 workloads: team-a/w1, team-a/w2, team-a/w3`.
pub(crate) fn cancel_summary(count: u64, names: &[String], what: &str) -> String {
    let more = count.saturating_sub(names.len() as u64);
    let mut s = format!(
        "{what} {count} workload{}",
        if count == 1 { "" } else { "s" }
    );
    if !names.is_empty() {
        s.push_str(": ");
        s.push_str(&names.join(", "));
    }
    if more > 0 {
        s.push_str(&format!(
            " and {more} more (array elements not queued yet among them)"
        ));
    }
    s
}

pub(crate) fn render_arrays(a: &[ArrayView]) -> String {
    table(
        &["NAME", "TEAM", "INDICES", "ELEMENTS", "HELD", "SUBMITTED"],
        &a.iter()
            .map(|a| {
                vec![
                    a.name.clone(),
                    a.team.clone(),
                    a.indices.clone(),
                    a.total.to_string(),
                    a.held.to_string(),
                    allot_common::timefmt::utc(a.submitted_ms),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

/// The workload table with each job array's elements as one row: `NAME[INDICES]`, and how
/// many elements are in each state (held: not queued yet, for the array's limit).
pub(crate) fn render_collapsed(ws: &[WorkloadView], arrays: &[ArrayView]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    // (team, array) → row index, element states, pods, nodes.
    type Group = (usize, BTreeMap<String, u32>, u32, Vec<String>);
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for w in ws {
        let Some((array, _)) = &w.array else {
            rows.push(workload_row(w));
            continue;
        };
        let key = (w.team.clone(), array.clone());
        let g = groups.entry(key).or_insert_with(|| {
            rows.push(Vec::new());
            (rows.len() - 1, BTreeMap::new(), 0, Vec::new())
        });
        *g.1.entry(w.state.clone()).or_default() += 1;
        g.2 += w.count;
        for p in &w.pods {
            if !g.3.contains(&p.node) {
                g.3.push(p.node.clone());
            }
        }
        if rows[g.0].is_empty() {
            rows[g.0] = workload_row(w);
        }
    }
    for a in arrays {
        let key = (a.team.clone(), a.name.clone());
        if a.held > 0 {
            let g = groups.entry(key).or_insert_with(|| {
                rows.push(vec![
                    String::new(),
                    a.team.clone(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                (rows.len() - 1, BTreeMap::new(), 0, Vec::new())
            });
            g.1.insert("Held".into(), a.held);
        }
    }
    for ((team, name), (i, states, pods, nodes)) in &groups {
        let indices = arrays
            .iter()
            .find(|a| &a.team == team && &a.name == name)
            .map(|a| a.indices.clone())
            .unwrap_or_default();
        let row = &mut rows[*i];
        row[0] = format!("{name}[{indices}]");
        const ORDER: [&str; 8] = [
            "Running",
            "Admitted",
            "Evicting",
            "Pending",
            "Held",
            "Succeeded",
            "Failed",
            "Cancelled",
        ];
        let mut counts: Vec<(&String, &u32)> = states.iter().collect();
        counts.sort_by_key(|(s, _)| ORDER.iter().position(|o| o == s));
        row[3] = counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ");
        row[4] = pods.to_string();
        row[5] = nodes.join(",");
        row[6] = String::new();
    }
    table(&WORKLOAD_HEADER, &rows)
}

pub(crate) const HISTORY_HEADER: [&str; 12] = [
    "NAME",
    "TEAM",
    "STATE",
    "EXIT",
    "SUBMITTED",
    "WAIT",
    "RUN",
    "ENDED",
    "PODS",
    "NODES",
    "PREEMPTED",
    "REASON",
];

pub(crate) fn secs(ms: Option<i64>) -> String {
    ms.map(|m| format!("{:.1}s", m as f64 / 1000.0))
        .unwrap_or_default()
}

pub(crate) fn history_row(r: &HistoryRow) -> Vec<String> {
    vec![
        r.name.clone(),
        r.team.clone(),
        r.state.clone(),
        r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        allot_common::timefmt::utc(r.submitted_ms),
        secs(r.wait_ms),
        secs(r.run_ms),
        allot_common::timefmt::utc(r.ended_ms),
        r.pods.to_string(),
        r.nodes.join(","),
        match r.preemptions {
            0 => "0".into(),
            n => format!("{n} ({} lost)", secs(Some(r.lost_run_ms))),
        },
        r.reason.clone(),
    ]
}

/// A CSV field: quoted when it holds a comma, a quote or a line break.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub(crate) fn render_history(rows: &[HistoryRow], format: HistoryFormat) -> anyhow::Result<String> {
    Ok(match format {
        HistoryFormat::Table => table(
            &HISTORY_HEADER,
            &rows.iter().map(history_row).collect::<Vec<_>>(),
        ),
        HistoryFormat::Json => serde_json::to_string_pretty(rows)? + "\n",
        HistoryFormat::Csv => {
            let field = csv_field;
            let mut out = String::from(
                "id,name,team,priority_class,state,exit_code,submitted,admitted,started,ended,wait_s,run_s,pods,nodes,preemptions,reason,lost_run_s\n",
            );
            let t = |ms: Option<i64>| ms.map(allot_common::timefmt::utc_ms).unwrap_or_default();
            let s3 = |ms: Option<i64>| {
                ms.map(|m| format!("{:.3}", m as f64 / 1000.0))
                    .unwrap_or_default()
            };
            for r in rows {
                let cells = [
                    r.id.to_string(),
                    field(&r.name),
                    field(&r.team),
                    field(r.priority_class.as_deref().unwrap_or("")),
                    r.state.clone(),
                    r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    t(Some(r.submitted_ms)),
                    t(r.admitted_ms),
                    t(r.started_ms),
                    t(Some(r.ended_ms)),
                    s3(r.wait_ms),
                    s3(r.run_ms),
                    r.pods.to_string(),
                    field(&r.nodes.join(" ")),
                    r.preemptions.to_string(),
                    field(&r.reason),
                    s3(Some(r.lost_run_ms)),
                ];
                out.push_str(&cells.join(","));
                out.push('\n');
            }
            out
        }
    })
}

pub(crate) fn render_quotas(qs: &[ComputeQuotaView]) -> String {
    table(
        &[
            "ID",
            "NAME",
            "TEAM",
            "WEIGHT",
            "VERSION",
            "STATE",
            "COMPUTE QUOTA CONFIG",
        ],
        &qs.iter()
            .map(|q| {
                vec![
                    q.id.clone(),
                    q.name.clone(),
                    q.team.clone(),
                    q.fair_share_weight.to_string(),
                    q.version.to_string(),
                    q.activation.as_str().to_string(),
                    q.config.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

pub(crate) fn render_nodes(ns: &[NodeView]) -> String {
    // A column of free GPU partitions when some node has any.
    let partitions = ns.iter().any(|n| !partition_rows(n).is_empty());
    let mut head = vec![
        "NAME",
        "INSTANCE TYPE",
        "STATUS",
        "CAPACITY",
        "USED",
        "SOURCES",
    ];
    if partitions {
        head.push("FREE PARTITIONS");
    }
    table(
        &head,
        &ns.iter()
            .map(|n| {
                let mut row = vec![
                    n.name.clone(),
                    n.instance_type.clone(),
                    n.status.clone(),
                    fmt_res(&n.capacity),
                    fmt_res(&n.used),
                    fmt_sources(n),
                ];
                if partitions {
                    let free: Vec<String> = partition_rows(n)
                        .iter()
                        .map(|p| format!("{}={}", p.profile, p.total - p.used))
                        .collect();
                    row.push(if free.is_empty() {
                        "-".into()
                    } else {
                        free.join(",")
                    });
                }
                row
            })
            .collect::<Vec<_>>(),
    )
}

/// `coordinator members list`: each replica as the leader sees it.
pub(crate) fn render_members(ms: &[allot_common::api::MemberView]) -> String {
    table(
        &["ID", "ADDRESS", "ROLE", "MATCHED", "BEHIND", "ACTIVE"],
        &ms.iter()
            .map(|m| {
                vec![
                    m.id.to_string(),
                    m.address.clone(),
                    m.role.clone(),
                    m.matched.to_string(),
                    m.behind.to_string(),
                    if m.active { "yes" } else { "no" }.to_string(),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

/// `get cohorts`: each cohort's place, teams and weight (`-` where the coordinator does not
/// say), then each pair's quota and use.
pub(crate) fn render_cohorts(
    cs: &[allot_common::api::CohortView],
    weights: &BTreeMap<String, String>,
) -> String {
    if cs.is_empty() {
        return "no cohorts: every team shares its quota in shared-pool once it has one (allot create-cohort builds a tree)\n".into();
    }
    let mut out = table(
        &["COHORT", "PARENT", "WEIGHT", "CHILDREN", "TEAMS"],
        &cs.iter()
            .map(|c| {
                let list = |v: &[String]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        v.join(",")
                    }
                };
                vec![
                    c.name.clone(),
                    c.parent.clone().unwrap_or_else(|| "-".into()),
                    weights.get(&c.name).cloned().unwrap_or_else(|| "-".into()),
                    list(&c.children),
                    list(&c.teams),
                ]
            })
            .collect::<Vec<_>>(),
    );
    let rows: Vec<Vec<String>> = cs
        .iter()
        .flat_map(|c| {
            c.pairs.iter().map(|p| {
                vec![
                    c.name.clone(),
                    p.flavor.clone(),
                    p.resource.clone(),
                    p.nominal.clone(),
                    p.borrowing_limit.clone().unwrap_or_else(|| "-".into()),
                    p.lending_limit.clone().unwrap_or_else(|| "-".into()),
                    p.pool.clone(),
                    p.in_use.clone(),
                ]
            })
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &[
                "COHORT",
                "FLAVOR",
                "RESOURCE",
                "OWN",
                "BORROW LIMIT",
                "LEND LIMIT",
                "POOL",
                "IN USE",
            ],
            &rows,
        ));
    }
    out
}

/// `get topology`: each domain, its nodes and the free room of the schedulable ones.
pub(crate) fn render_topology(ds: &[allot_common::api::DomainView]) -> String {
    if ds.is_empty() {
        return "no node reports a topology level (allot agent --topology, or the node's topology.k8s.aws/* labels)\n".into();
    }
    table(
        &[
            "LEVEL",
            "DOMAIN",
            "NODES",
            "SCHEDULABLE",
            "FREE",
            "CAPACITY",
        ],
        &ds.iter()
            .map(|d| {
                let nodes = if d.nodes.len() > 4 {
                    format!("{},... ({})", d.nodes[..3].join(","), d.nodes.len())
                } else {
                    d.nodes.join(",")
                };
                vec![
                    d.level.clone(),
                    d.domain.clone(),
                    nodes,
                    d.schedulable.to_string(),
                    fmt_res(&d.free),
                    fmt_res(&d.capacity),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

/// `get gang-scheduling`: the settings, or that it is off.
pub(crate) fn render_gang_scheduling(
    p: Option<&allot_common::pods_ready::PodsReadyPolicy>,
) -> String {
    match p {
        None => "gang scheduling: off (admitted workloads are not timed until their pods start)\n"
            .into(),
        Some(p) => format!(
            "gang scheduling: on\ntimeout:          {} s (every pod of an admitted workload starts within it, or the workload is evicted and queued again)\nblock admission:  {}\nbackoff:          {} s, doubling up to {} s\n",
            p.timeout_s,
            if p.block_admission { "on (nothing else is admitted while a workload's pods start)" } else { "off" },
            p.backoff_base_s,
            p.backoff_max_s
        ),
    }
}

/// One MIG profile of a node: its GPUs, and how many partitions it has and are used.
pub(crate) struct PartitionRow {
    pub profile: String,
    pub gpus: Vec<u32>,
    pub total: i64,
    pub used: i64,
}

/// The node's GPU partitions per profile, from its capacity, use and reported devices.
pub(crate) fn partition_rows(n: &NodeView) -> Vec<PartitionRow> {
    n.capacity
        .iter()
        .filter(|(r, _)| r.is_partition())
        .map(|(r, total)| {
            let buses: Vec<&str> = (n.devices.iter())
                .filter(|d| d.resource == r.as_str())
                .map(|d| d.pci_bus_id.as_str())
                .collect();
            let mut gpus: Vec<u32> = (n.devices.iter())
                .filter(|d| {
                    d.resource == allot_common::resource::GPU
                        && buses.contains(&d.pci_bus_id.as_str())
                })
                .map(|d| d.index)
                .collect();
            gpus.dedup();
            PartitionRow {
                profile: r.as_str().to_string(),
                gpus,
                total,
                used: n.used.get(r),
            }
        })
        .collect()
}

/// `describe node`: the node, its devices, and the pods of `ws` placed on it.
pub(crate) fn render_node(n: &NodeView, ws: &[WorkloadView], topology: &[String]) -> String {
    let mut out = format!(
        "Name:           {}\nInstance type:  {}\nStatus:         {}{}\nCapacity:       {}\nUsed:           {}\nSources:        {}\n",
        n.name,
        n.instance_type,
        n.status,
        if n.reason.is_empty() { String::new() } else { format!(" ({})", n.reason) },
        fmt_res(&n.capacity),
        fmt_res(&n.used),
        fmt_sources(n),
    );
    if !topology.is_empty() {
        out.push_str(&format!("Topology:       {}\n", topology.join(", ")));
    }
    // Devices counted in Used that no pod holds: a GPU in MIG mode (its partitions are
    // handed out instead) and unhealthy ones.
    let held: Vec<String> = (n.devices.iter())
        .filter_map(|d| {
            let why = if !d.healthy {
                "unhealthy"
            } else if d.mig && d.resource == allot_common::resource::GPU {
                "MIG mode"
            } else {
                return None;
            };
            Some(format!("{}{} ({why})", d.resource, d.index))
        })
        .collect();
    if !held.is_empty() {
        out.push_str(&format!("Held out:       {}\n", held.join(", ")));
    }
    if !n.devices.is_empty() {
        out.push_str("Devices:\n");
        let rows: Vec<Vec<String>> = (n.devices.iter())
            .map(|d| {
                vec![
                    format!("{}{}", d.resource, d.index),
                    d.id.clone(),
                    d.model.clone(),
                    match (
                        d.healthy,
                        d.mig && d.resource == allot_common::resource::GPU,
                    ) {
                        (true, true) => "healthy; MIG mode: handed out as its partitions".into(),
                        (true, false) => "healthy".into(),
                        (false, _) => format!("unhealthy: {}", d.reason),
                    },
                ]
            })
            .collect();
        out.push_str(&indent(&table(&["DEVICE", "ID", "MODEL", "HEALTH"], &rows)));
    }
    let parts = partition_rows(n);
    if !parts.is_empty() {
        out.push_str("Partitions:\n");
        let rows: Vec<Vec<String>> = parts
            .iter()
            .map(|p| {
                vec![
                    p.profile.clone(),
                    p.gpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    p.total.to_string(),
                    p.used.to_string(),
                    (p.total - p.used).to_string(),
                ]
            })
            .collect();
        out.push_str(&indent(&table(
            &["PROFILE", "GPUS", "TOTAL", "USED", "FREE"],
            &rows,
        )));
    }
    let pods: Vec<Vec<String>> = (ws.iter())
        .flat_map(|w| {
            (w.pods.iter().enumerate())
                .filter(|(_, p)| p.node == n.name)
                .map(move |(rank, p)| {
                    let devices: Vec<String> = (p.devices.iter())
                        .map(|(r, ix)| {
                            format!(
                                "{r}={}",
                                ix.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
                            )
                        })
                        .collect();
                    vec![
                        w.name.clone(),
                        w.team.clone(),
                        rank.to_string(),
                        w.state.clone(),
                        devices.join(" "),
                    ]
                })
        })
        .collect();
    if pods.is_empty() {
        out.push_str("Pods:           none\n");
    } else {
        out.push_str("Pods:\n");
        out.push_str(&indent(&table(
            &["WORKLOAD", "TEAM", "RANK", "STATE", "DEVICES"],
            &pods,
        )));
    }
    out
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

/// Where a node's figures came from, by source: `catalog: cpu,memory; nvml: gpu`. Only the
/// resources the node has are named.
pub(crate) fn fmt_sources(n: &NodeView) -> String {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (res, src) in &n.sources {
        let has = res == "*" || n.capacity.0.keys().any(|r| r.as_str() == res.as_str());
        if has {
            by.entry(src.as_str()).or_default().push(res.as_str());
        }
    }
    by.iter()
        .map(|(src, res)| {
            if res == &["*"] {
                src.to_string()
            } else {
                format!("{src}: {}", res.join(","))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) fn render_teams(ts: &[TeamView]) -> String {
    table(
        &[
            "TEAM", "WEIGHT", "NOMINAL", "USAGE", "BORROWED", "LENT", "SHARE", "PENDING",
            "ADMITTED",
        ],
        &ts.iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.fair_share_weight.to_string(),
                    fmt_res(&t.nominal),
                    fmt_res(&t.usage),
                    fmt_res(&t.borrowed),
                    fmt_res(&t.lent),
                    match t.weighted_share {
                        Some(s) => format!("{s:.0}"),
                        None => "inf".into(),
                    },
                    t.pending.to_string(),
                    t.admitted.to_string(),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

pub(crate) fn describe_workload(w: &WorkloadView) -> String {
    let mut s = String::new();
    s.push_str(&format!("Name:         {}\n", w.name));
    s.push_str(&format!("Team:         {}\n", w.team));
    s.push_str(&format!(
        "Priority:     {}{}\n",
        w.priority,
        w.priority_class
            .as_ref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    ));
    s.push_str(&format!("State:        {}\n", w.state));
    s.push_str(&format!("Submitted:    {}\n", ms_time(w.submitted_ms)));
    if let Some(a) = w.admitted_ms {
        s.push_str(&format!("Admitted:     {}\n", ms_time(a)));
    }
    s.push_str(&format!(
        "Pods:         {} x {}\n",
        w.count,
        fmt_res(&w.requests)
    ));
    if w.preemptions > 0 {
        s.push_str(&format!(
            "Preemptions:  {}, run time lost {}\n",
            w.preemptions,
            secs(Some(w.lost_run_ms))
        ));
    }
    if let Some(run) = &w.run {
        if let Some(i) = &run.image {
            s.push_str(&format!("Image:        {i}\n"));
        }
        if !run.command.is_empty() || !run.args.is_empty() {
            s.push_str(&format!("Command:      {}\n", run.program().join(" ")));
        }
    }
    if !w.flavors.is_empty() {
        s.push_str("Flavors:\n");
        for (ps, m) in &w.flavors {
            let f: Vec<String> = m.iter().map(|(r, f)| format!("{r}: {f}")).collect();
            s.push_str(&format!("  {ps}: {}\n", f.join(", ")));
        }
    }
    if !w.pods.is_empty() {
        s.push_str("Placement:\n");
        for p in &w.pods {
            let d: Vec<String> = p
                .devices
                .iter()
                .map(|(r, ix)| {
                    format!(
                        "{r} [{}]",
                        ix.iter()
                            .map(|i| i.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                })
                .collect();
            let devices = if d.is_empty() {
                String::new()
            } else {
                format!(" {}", d.join(" "))
            };
            s.push_str(&format!(
                "  {}[{}] on {}{devices}{}\n",
                p.pod_set,
                p.index,
                p.node,
                pod_times(p)
            ));
        }
    }
    if !w.labels.is_empty() {
        let l: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("Labels: {}\n", l.join(",")));
    }
    if let Some((array, index)) = &w.array {
        s.push_str(&format!("Array: {array}, index {index}\n"));
    }
    if let Some(f) = w.finished_ms {
        s.push_str(&format!("Finished: {}\n", allot_common::timefmt::utc_ms(f)));
    }
    s.push_str("Conditions:\n");
    s.push_str(&table(
        &["  TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"],
        &w.conditions
            .iter()
            .map(|c| {
                vec![
                    format!("  {}", c.kind),
                    if c.status { "True" } else { "False" }.to_string(),
                    c.reason.clone(),
                    ms_time(c.time_ms),
                    c.message.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    ));
    s
}

//! Following the cluster: pod logs streamed from the agents, `get --watch`, and `wait` until a
//! workload or an array reaches a state.

use std::collections::BTreeMap;

use allot_common::api::{ArrayView, Body, NodeView, Reply, WorkloadFilter, WorkloadView};
use allot_net::log_stream::{read_log_stream, LogStreamError};
use anyhow::bail;

use super::render::{table, workload_row, WORKLOAD_HEADER};
use crate::client::{api, watch_once, Client};

/// Finds the node a pod ran on (its current placement first, then every other node) and
/// streams its log from that node's agent through the cluster into `out`, piece by piece.
pub struct LogTarget<'a> {
    pub name: &'a str,
    pub team: Option<String>,
    pub rank: u32,
    pub attempt: Option<u32>,
    pub follow: bool,
}

pub async fn pod_logs(
    c: &mut Client,
    which: LogTarget<'_>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let LogTarget {
        name,
        team,
        rank,
        attempt,
        follow,
    } = which;
    let w = fetch_workload(c, name, team.clone()).await?;
    let nodes = match api(c.call(Body::GetNodes).await)? {
        Reply::Nodes(n) => n,
        other => bail!("unexpected answer: {other:?}"),
    };
    let placed = w.pods.get(rank as usize).map(|p| p.node.clone());
    let mut candidates: Vec<&NodeView> = nodes.iter().collect();
    candidates.sort_by_key(|n| Some(&n.name) != placed.as_ref());
    let mut last = format!("no node has a log for {name} rank {rank}");
    for n in candidates {
        let body = Body::Logs {
            workload: name.into(),
            team: team.clone(),
            node: n.name.clone(),
            rank,
            attempt,
            follow,
        };
        let (first, mut rest) = c.stream(body).await?;
        let read = read_log_stream(first, &mut rest, |b| {
            out.write_all(&b)?;
            out.flush()
        })
        .await;
        match read {
            Ok(()) => return Ok(()),
            // This node has no such log: try the next.
            Err(LogStreamError::Refused(e)) if e.kind == allot_common::api::ErrorKind::NotFound => {
                last = e.message;
            }
            Err(LogStreamError::Broke(e)) => {
                bail!("the log stream from node {} broke: {e}", n.name)
            }
            Err(e) => bail!("{e}"),
        }
    }
    bail!("{last}")
}

/// Prints the list, then each change as it happens: the server holds each request until the
/// list differs from what this watcher last saw.
pub(crate) async fn watch_workloads(c: &mut Client, filter: WorkloadFilter) -> anyhow::Result<()> {
    use std::io::Write;
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut first = true;
    let mut digest = 0u64;
    loop {
        let (d, workloads) = watch_once(c, filter.clone(), digest, 20_000).await?;
        digest = d;
        let mut rows = Vec::new();
        for w in &workloads {
            let row = workload_row(w);
            let key = row.join("\u{1f}");
            if seen.get(&w.name) != Some(&key) {
                seen.insert(w.name.clone(), key);
                rows.push(row);
            }
        }
        if first && rows.is_empty() {
            println!("no workloads yet; waiting for changes (Ctrl-C to stop)");
        }
        if !rows.is_empty() {
            let t = table(&WORKLOAD_HEADER, &rows);
            if first {
                print!("{t}");
            } else {
                // Only the changed rows, without the header.
                print!("{}", t.split_once('\n').map(|x| x.1).unwrap_or(""));
            }
        }
        first = false;
        let _ = std::io::stdout().flush();
    }
}

/// One workload as `describe workload` shows it.
pub(crate) async fn fetch_workload(
    c: &mut Client,
    name: &str,
    team: Option<String>,
) -> anyhow::Result<Box<WorkloadView>> {
    match api(c
        .call(Body::DescribeWorkload {
            name: name.into(),
            team,
        })
        .await)?
    {
        Reply::Workload(w) => Ok(w),
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// What `allot wait --for` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitFor {
    Admitted,
    Running,
    Finished,
}

/// `90`, `90s`, `5m`, `1h`: a duration for `--timeout`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => {
            return Err(format!(
                "{s:?}: use a number of seconds, or one with ms, s, m, h or d"
            ))
        }
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale <= 1e9 => {
            Ok(std::time::Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!(
            "{s:?}: use a number of seconds, or one with ms, s, m or h"
        )),
    }
}

/// Whether `state` is what `until` waits for (`Ok(true)`), not yet (`Ok(false)`), or never
/// will be (an error saying how it ended).
pub(crate) fn reached(until: WaitFor, state: &str) -> Result<bool, String> {
    let done = matches!(state, "Succeeded" | "Failed" | "Cancelled");
    Ok(match (until, state) {
        (_, "Failed" | "Cancelled") => return Err(format!("it ended {state}")),
        (WaitFor::Admitted, "Admitted" | "Running" | "Succeeded") => true,
        (WaitFor::Running, "Running" | "Succeeded") => true,
        (WaitFor::Finished, _) => done,
        _ => false,
    })
}

/// Follows `name` with the server's long poll until `until` holds; its state then.
pub(crate) async fn wait_for_state(
    c: &mut Client,
    name: &str,
    team: Option<String>,
    until: WaitFor,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<String> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    // Which team's (a user's certificate means its own): resolve once, then watch that team.
    let w = match fetch_workload(c, name, team.clone()).await {
        Ok(w) => w,
        Err(e) => {
            // Not a workload: a job array of that name waits for all its elements.
            let Reply::Arrays(arrays) = api(c.call(Body::GetArrays { team }).await)? else {
                return Err(e);
            };
            match arrays.into_iter().find(|a| a.name == name) {
                Some(a) => return wait_for_array(c, a, until, deadline, timeout).await,
                None => return Err(e),
            }
        }
    };
    let filter = WorkloadFilter {
        team: Some(w.team.clone()),
        all: true,
    };
    let mut state = w.state.clone();
    let mut digest = 0u64;
    loop {
        match reached(until, &state) {
            Ok(true) => return Ok(format!("workload {name}: {state}")),
            Ok(false) => {}
            // It finished, but not well: said as a success would be, with a failing status.
            Err(_) if until == WaitFor::Finished => bail!("workload {name}: {state}"),
            Err(e) => bail!("workload {name} will not be {until:?}: {e}"),
        }
        let Some(wait_ms) = poll_ms(deadline, 20_000) else {
            bail!(
                "timed out: workload {name} is {state}, not {until:?}, after {:?}",
                timeout.unwrap_or_default()
            );
        };
        let (d, workloads) = watch_once(c, filter.clone(), digest, wait_ms).await?;
        digest = d;
        // By id: the name may belong to an earlier, finished workload too.
        state = match workloads.iter().find(|x| x.id == w.id) {
            Some(x) => x.state.clone(),
            None => bail!("workload {name} is gone (cancelled and forgotten)"),
        };
    }
}

/// How long the next long poll may wait: at most `cap_ms`, and no later than `deadline`;
/// `None` once the deadline has passed.
pub(crate) fn poll_ms(deadline: Option<tokio::time::Instant>, cap_ms: u32) -> Option<u32> {
    match deadline {
        Some(d) => {
            let left = d.saturating_duration_since(tokio::time::Instant::now());
            (!left.is_zero()).then(|| left.as_millis().min(u128::from(cap_ms)) as u32)
        }
        None => Some(cap_ms),
    }
}

/// `wait ARRAY --for finished`: until every element of the array ran and ended; exits 1
/// unless all succeeded.
pub(crate) async fn wait_for_array(
    c: &mut Client,
    array: ArrayView,
    until: WaitFor,
    deadline: Option<tokio::time::Instant>,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<String> {
    let name = &array.name;
    if !matches!(until, WaitFor::Finished) {
        bail!("{name} is a job array: wait for it with --for finished, or for one element (NAME-INDEX)");
    }
    let filter = WorkloadFilter {
        team: Some(array.team.clone()),
        all: true,
    };
    let mut digest = 0u64;
    loop {
        let Some(wait_ms) = poll_ms(deadline, 2_000) else {
            bail!(
                "timed out: array {name} has not finished after {:?}",
                timeout.unwrap_or_default()
            );
        };
        let (d, _) = watch_once(c, filter.clone(), digest, wait_ms).await?;
        digest = d;
        let Reply::Arrays(arrays) = api(c
            .call(Body::GetArrays {
                team: Some(array.team.clone()),
            })
            .await)?
        else {
            bail!("unexpected answer to get arrays");
        };
        if arrays
            .iter()
            .any(|a| &a.name == name && a.submitted_ms == array.submitted_ms)
        {
            continue;
        }
        // The array is done: every element queued and finished (or cancelled while held). Read
        // the elements again: the last may have ended after the watch above answered.
        let Reply::Workloads(workloads) = api(c.call(Body::GetWorkloads(filter.clone())).await)?
        else {
            bail!("unexpected answer to get workloads");
        };
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for w in workloads.iter().filter(|w| {
            w.array.as_ref().is_some_and(|(a, _)| a == name) && w.submitted_ms >= array.submitted_ms
        }) {
            *counts.entry(w.state.clone()).or_default() += 1;
        }
        let summary = counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ");
        if counts.keys().any(|s| s != "Succeeded") {
            bail!("array {name} ended with {summary}");
        }
        return Ok(format!("array {name}: {summary}"));
    }
}

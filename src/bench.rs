//! `allot bench`: starts three real coordinator processes on loopback (fsync on), and measures
//! the disk's fsync latency (the baseline), submit-to-admit latency on an idle cluster, and
//! sustained durable admissions per second with many nodes and teams.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use allot_common::api::{
    ActivationState, Body, ComputeQuotaInput, Reply, RunSpec, SubmitInput, WorkloadFilter,
};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::{Catalog, ResourceName, Resources, WorkloadSpec};
use allot_coordinator::priority::RaftPriority;
use allot_net::tls::{self, Identity};
use anyhow::{anyhow, bail, Context};

pub use crate::bench_args::BenchArgs;
use crate::bench_args::{free_port, ms, pct, peers_arg};
use crate::client::{call, watch_once, Client, ClientOpts};

struct Cluster {
    children: Vec<Child>,
    dir: PathBuf,
    keep: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The p99 of `lat` over the p99 of `base` (both sorted).
fn p99_ratio(lat: &[Duration], base: &[Duration]) -> f64 {
    pct(lat, 0.99).as_secs_f64() / pct(base, 0.99).as_secs_f64().max(1e-9)
}

/// fsync latency of the disk the data lives on: 4 KiB appended and fdatasync'ed.
fn fsync_baseline(dir: &Path, n: usize) -> anyhow::Result<Vec<Duration>> {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let buf = vec![7u8; 4096];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&buf)?;
        f.sync_data()?;
        out.push(t.elapsed());
    }
    let _ = std::fs::remove_file(&path);
    out.sort();
    Ok(out)
}

/// Three coordinators; returns them, their API addresses and their HTTP (metrics) addresses.
fn start_cluster(
    dir: &Path,
    keep: bool,
    raft_priority: RaftPriority,
) -> anyhow::Result<(Cluster, Vec<String>, Vec<String>)> {
    let certs = dir.join("certs");
    tls::init_ca(&certs, false)?;
    tls::issue(
        &certs,
        &Identity::Admin {
            name: "admin".into(),
        },
        &[],
        &[],
        30,
    )?;
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let http: Vec<String> = (0..3)
        .map(|_| free_port().map(|p| format!("127.0.0.1:{p}")))
        .collect::<Result<_, _>>()?;
    let peers = peers_arg(&addrs);
    let exe = std::env::current_exe().context("finding the allot binary")?;
    let mut cluster = Cluster {
        children: Vec::new(),
        dir: dir.to_path_buf(),
        keep,
    };
    for (i, addr) in addrs.iter().enumerate() {
        let id = i as u64 + 1;
        tls::issue(&certs, &Identity::Coordinator { id }, &[], &[], 30)?;
        let log = std::fs::File::create(dir.join(format!("coordinator-{id}.log")))?;
        let child = Command::new(&exe)
            .args(["coordinator", "--id", &id.to_string(), "--listen", addr])
            .args(["--peers", &peers, "--http", &http[i]])
            .args(["--raft-priority", &raft_priority.to_string()])
            .arg("--data-dir")
            .arg(dir.join(format!("data-{id}")))
            .arg("--certs")
            .arg(&certs)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting a coordinator")?;
        cluster.children.push(child);
    }
    Ok((cluster, addrs, http))
}

/// The scheduling policy of replica `id`'s raft thread (process `pid`), read from /proc: what
/// it got, not what it asked for.
fn raft_policy(pid: u32, id: u64) -> String {
    let name = format!("raft-{id}");
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "unknown (no /proc)".into();
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the command name (which ends at the last ')'): the policy is field 41
        // of the line, the 39th after it.
        let policy = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(38))
            .and_then(|p| p.parse::<u32>().ok());
        return match policy {
            Some(0) => "normal".into(),
            Some(1) => "SCHED_FIFO".into(),
            Some(2) => "SCHED_RR".into(),
            Some(p) => format!("policy {p}"),
            None => "unknown".into(),
        };
    }
    format!("unknown (no thread {name})")
}

fn job(name: String, team: String, res: &ResourceName, qty: i64) -> SubmitInput {
    let mut r = Resources::new();
    r.add(res, qty);
    SubmitInput {
        client_token: Some(name.clone()),
        spec: WorkloadSpec::single(&name, &team, 1, r),
        run: Some(RunSpec::default()),
    }
}

/// What `latency_rounds` measured, each sorted.
struct Latency {
    lat: Vec<Duration>,
    fs: Vec<Duration>,
    ratios: Vec<f64>,
    in_one: usize,
}

impl Latency {
    fn print(&self, what: &str) {
        let (lat, fs, ratios) = (&self.lat, &self.fs, &self.ratios);
        println!(
            "disk fsync over the rounds ({} samples): p50 {}, p99 {}",
            fs.len(),
            ms(pct(fs, 0.5)),
            ms(pct(fs, 0.99))
        );
        println!(
            "{what} over the rounds ({} samples, {} admitted in the submit's own commit): p50 {}, p90 {}, p99 {}, max {} ({:.1}x the fsync p99 over the same rounds; rounds {:.1}x to {:.1}x, median {:.1}x)",
            lat.len(),
            self.in_one,
            ms(pct(lat, 0.5)),
            ms(pct(lat, 0.9)),
            ms(pct(lat, 0.99)),
            ms(lat.last().copied().unwrap_or_default()),
            p99_ratio(lat, fs),
            ratios.first().copied().unwrap_or_default(),
            ratios.last().copied().unwrap_or_default(),
            ratios.get(ratios.len() / 2).copied().unwrap_or_default(),
        );
    }
}

/// The latency rounds: each takes the disk's fsync baseline, then submits one-cpu workloads
/// to team-0 one at a time and waits for each admission (the submit's reply says whether it
/// came in the same commit; otherwise the server's long poll, watching team-0 only).
async fn latency_rounds(
    c: &mut Client,
    base: &Path,
    a: &BenchArgs,
    tag: &str,
) -> anyhow::Result<Latency> {
    let cpu = ResourceName::cpu();
    let mut lat = Vec::new();
    let mut fs = Vec::new();
    let mut ratios = Vec::new();
    let mut in_one = 0usize;
    for r in 0..a.rounds {
        let probes = fsync_baseline(base, a.samples as usize)?;
        let mut round = Vec::with_capacity(a.samples as usize);
        for i in 0..a.samples {
            let name = format!("{tag}-{r}-{i}");
            let t = Instant::now();
            let reply = call(c, Body::Submit(job(name.clone(), "team-0".into(), &cpu, 1))).await?;
            if matches!(&reply, Reply::Submitted { state, .. } if state != "Pending") {
                in_one += 1;
            } else {
                wait_admitted(c, &name, t).await?;
            }
            round.push(t.elapsed());
            call(c, Body::Cancel { name, team: None }).await?;
        }
        round.sort();
        let ratio = p99_ratio(&round, &probes);
        println!(
            "  round {}: fsync p50 {}, p99 {}; submit-to-admit p50 {}, p99 {} ({ratio:.1}x)",
            r + 1,
            ms(pct(&probes, 0.5)),
            ms(pct(&probes, 0.99)),
            ms(pct(&round, 0.5)),
            ms(pct(&round, 0.99)),
        );
        ratios.push(ratio);
        lat.extend(round);
        fs.extend(probes);
    }
    lat.sort();
    fs.sort();
    ratios.sort_by(f64::total_cmp);
    Ok(Latency {
        lat,
        fs,
        ratios,
        in_one,
    })
}

/// The leader's `allot_schedule_cycle_seconds` histogram: (upper bound in seconds, count).
async fn cycle_histogram(http: &str) -> anyhow::Result<Vec<(f64, u64)>> {
    let (status, body) = http_get(http, "/metrics").await?;
    if status != 200 {
        bail!("GET {http}/metrics answered {status}");
    }
    let mut out = Vec::new();
    for line in body.lines() {
        // allot_schedule_cycle_seconds_bucket{le="0.0001",replica="1"} 3 (labels in any order)
        let Some(rest) = line.strip_prefix("allot_schedule_cycle_seconds_bucket{") else {
            continue;
        };
        let Some((labels, count)) = rest.split_once("} ") else {
            continue;
        };
        let Some(le) = labels
            .split(',')
            .find_map(|l| l.strip_prefix("le=\""))
            .and_then(|l| l.strip_suffix('"'))
        else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().map_err(|e| anyhow!("bucket {le:?}: {e}"))?
        };
        out.push((
            le,
            count
                .trim()
                .parse()
                .map_err(|e| anyhow!("count {count:?}: {e}"))?,
        ));
    }
    Ok(out)
}

/// The bucket bound under which a fraction `q` of the cycles between two scrapes fell.
fn histogram_pct(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> Option<f64> {
    let diff: Vec<(f64, u64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before
                .iter()
                .find(|(b, _)| b == le)
                .map(|(_, n)| *n)
                .unwrap_or(0);
            (*le, n.saturating_sub(was))
        })
        .collect();
    let total = diff.last()?.1;
    if total == 0 {
        return None;
    }
    let want = (total as f64 * q).ceil() as u64;
    diff.iter().find(|(_, n)| *n >= want).map(|(le, _)| *le)
}

/// The replica every address agrees leads, if one does.
async fn leader_of(opts: &ClientOpts) -> Option<u64> {
    let mut c = opts.connect().ok()?;
    match c.call(Body::Hello).await {
        Ok(Ok(Reply::Hello { leader, .. })) => leader,
        _ => None,
    }
}

/// `--pending`: the latency rounds again with a deep contended backlog waiting.
async fn deep_backlog(
    c: &mut Client,
    opts: &ClientOpts,
    base: &Path,
    a: &BenchArgs,
    http: &[String],
    n: u32,
    idle: &Latency,
) -> anyhow::Result<()> {
    if a.teams < 2 {
        bail!("--pending needs --teams 2 or more: team-0 takes the probes, the others the backlog");
    }
    let leader = leader_of(opts).await.ok_or_else(|| anyhow!("no leader"))?;
    // Watch the leadership for the whole phase.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (opts, stop) = (opts.clone(), stop.clone());
        tokio::spawn(async move {
            let mut changes = 0u32;
            let mut last = leader;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(l) = leader_of(&opts).await {
                    if l != last {
                        changes += 1;
                        last = l;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            changes
        })
    };
    let gpu = ResourceName::gpu();
    let per_node = Catalog::builtin()
        .get(&a.instance_type)
        .map_err(|e| anyhow!("--instance-type: {e}"))?
        .resources()
        .get(&gpu);
    if per_node <= 0 {
        bail!(
            "--pending needs an instance type with GPUs ({} has none)",
            a.instance_type
        );
    }
    let t0 = Instant::now();
    let batch = 500u32;
    let mut k = 0u32;
    while k < n {
        let end = (k + batch).min(n);
        let jobs = (k..end)
            .map(|i| {
                let team = 1 + i % (a.teams - 1);
                job(format!("deep-{i}"), format!("team-{team}"), &gpu, per_node)
            })
            .collect();
        call(c, Body::SubmitBatch(jobs)).await?;
        k = end;
    }
    // Settled: the pending count unchanged over three seconds.
    let mut last = usize::MAX;
    let mut still = 0;
    let pending = loop {
        let p = pending_now(c).await?;
        still = if p == last { still + 1 } else { 0 };
        last = p;
        if still >= 3 {
            break p;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("the backlog did not settle within 600s ({p} pending)");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    println!(
        "backlog: {n} workloads of {per_node} GPUs submitted to {} teams and settled in {}: {pending} pending",
        a.teams - 1,
        ms(t0.elapsed())
    );
    let leader_http = http
        .get(leader as usize - 1)
        .ok_or_else(|| anyhow!("leader {leader} has no metrics address"))?;
    let before = cycle_histogram(leader_http).await?;
    let deep = latency_rounds(c, base, a, "deep-probe").await?;
    let after = cycle_histogram(leader_http).await?;
    let reclaims = reclaim_probes(c, a, &gpu, per_node, pending).await?;
    let after_reclaims = cycle_histogram(leader_http).await?;
    let drain = drain_probes(c, a).await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let changes = watcher.await.map_err(|e| anyhow!("leader watcher: {e}"))?;
    deep.print(&format!("submit-to-admit with {pending} pending"));
    print_cycles("those rounds", &before, &after);
    println!(
        "submit-to-admit p99 with the backlog / idle p99: {:.2}x ({} / {}); leadership changes: {changes}",
        pct(&deep.lat, 0.99).as_secs_f64() / pct(&idle.lat, 0.99).as_secs_f64().max(1e-9),
        ms(pct(&deep.lat, 0.99)),
        ms(pct(&idle.lat, 0.99)),
    );
    reclaims.print(pending);
    print_cycles("the reclaims", &after, &after_reclaims);
    drain.print();
    if changes > 0 {
        bail!("the leadership changed {changes} time(s) with the backlog waiting");
    }
    Ok(())
}

/// The leader's scheduling cycles between two readings of its histogram, p50 and p99 as
/// bucket bounds.
fn print_cycles(during: &str, before: &[(f64, u64)], after: &[(f64, u64)]) {
    let show = |q| match histogram_pct(before, after, q) {
        Some(s) if s.is_finite() => format!("<= {}", ms(Duration::from_secs_f64(s))),
        Some(_) => "above the histogram's largest bucket".into(),
        None => "no cycle".into(),
    };
    println!(
        "leader's scheduling cycles during {during}: p50 {}, p99 {} (histogram buckets)",
        show(0.5),
        show(0.99)
    );
}

/// What `reclaim_probes` measured, each sorted.
struct Reclaims {
    /// Submit to the scheduler's plan committed: the victim chosen and evicting.
    planned: Vec<Duration>,
    /// Submit to admitted, the victim's end reported as its node's agent would.
    admitted: Vec<Duration>,
    /// Probes that found a node free (a backlog workload had not taken it back yet).
    free: usize,
}

impl Reclaims {
    fn print(&self, pending: usize) {
        let show = |lat: &[Duration]| {
            format!(
                "p50 {}, p90 {}, p99 {}, max {}",
                ms(pct(lat, 0.5)),
                ms(pct(lat, 0.9)),
                ms(pct(lat, 0.99)),
                ms(lat.last().copied().unwrap_or_default())
            )
        };
        println!(
            "a node's GPUs for team-0, reclaimed by preempting a borrower, with {pending} pending ({} samples; {} found a node free and are left out): plan committed {}; admitted once the victim's end is reported {}",
            self.planned.len(),
            self.free,
            show(&self.planned),
            show(&self.admitted),
        );
    }
}

/// Probes that must preempt: team-0 asks for a whole node's GPUs while the other teams'
/// backlog borrows every GPU, team-0's nominal share included. Each is timed to the plan that
/// preempts a borrower (committed: the probe's pending condition names the victim), then, with the
/// victim's end reported as its node's agent would (the bench's nodes have none), to its
/// admission. Each probe is then cancelled, and the next waits until a backlog workload has
/// taken the freed node back.
async fn reclaim_probes(
    c: &mut Client,
    a: &BenchArgs,
    gpu: &ResourceName,
    per_node: i64,
    pending: usize,
) -> anyhow::Result<Reclaims> {
    let mut out = Reclaims {
        planned: Vec::new(),
        admitted: Vec::new(),
        free: 0,
    };
    let mut waiting = pending;
    for i in 0..a.samples.min(200) {
        let full = refilled(c, waiting).await?;
        let name = format!("reclaim-{i}");
        let t = Instant::now();
        let reply = call(
            c,
            Body::Submit(job(name.clone(), "team-0".into(), gpu, per_node)),
        )
        .await?;
        if matches!(&reply, Reply::Submitted { state, .. } if state != "Pending") || !full {
            out.free += 1;
        } else {
            let victim = victim_of(c, &name, t).await?;
            out.planned.push(t.elapsed());
            call(
                c,
                Body::WorkloadExited {
                    name: victim,
                    succeeded: false,
                },
            )
            .await?;
            wait_admitted(c, &name, t).await?;
            out.admitted.push(t.elapsed());
        }
        waiting = pending_now(c).await?.saturating_sub(1);
        call(c, Body::Cancel { name, team: None }).await?;
    }
    out.planned.sort();
    out.admitted.sort();
    Ok(out)
}

/// The workload `name`'s last scheduling decision preempts, as its pending condition says
/// (`describe`, a cheap read): polled until it names the victim (or 10 s have passed).
async fn victim_of(c: &mut Client, name: &str, since: Instant) -> anyhow::Result<String> {
    const MARK: &str = "Pending the preemption of ";
    loop {
        let w = match call(
            c,
            Body::DescribeWorkload {
                name: name.into(),
                team: None,
            },
        )
        .await?
        {
            Reply::Workload(w) => w,
            other => bail!("unexpected answer to describe: {other:?}"),
        };
        let victim = w.conditions.iter().find_map(|cond| {
            let m = &cond.message;
            let rest = &m[m.find(MARK)? + MARK.len()..];
            let names = rest.split_once(": ")?.1;
            names.split(", ").next().map(|v| v.trim().to_string())
        });
        if let Some(v) = victim.filter(|v| !v.is_empty()) {
            return Ok(v);
        }
        if since.elapsed() > Duration::from_secs(10) {
            bail!(
                "{name}: no preemption planned within 10s: {:?}",
                w.conditions
            );
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// Workloads pending in the cluster.
async fn pending_now(c: &mut Client) -> anyhow::Result<usize> {
    Ok(match call(c, Body::GetTeams).await? {
        Reply::Teams(ts) => ts.iter().map(|t| t.pending as usize).sum::<usize>(),
        _ => 0,
    })
}

/// What `drain_probes` measured.
struct Drain {
    /// From a running workload's end reported to the next pending workload admitted on the
    /// room it freed, sorted.
    next: Vec<Duration>,
    /// Ends reported at once, and how long until as many pending workloads were admitted.
    burst: (usize, Duration),
    /// Pending when the probes began.
    pending: usize,
}

impl Drain {
    fn print(&self) {
        let (n, took) = self.burst;
        println!(
            "a deep queue drains as its capacity frees, with {} pending: a running workload's end to the next admission p50 {}, p99 {}, max {} ({} samples); {n} ends at once taken back in {} ({:.0} admissions/s)",
            self.pending,
            ms(pct(&self.next, 0.5)),
            ms(pct(&self.next, 0.99)),
            ms(self.next.last().copied().unwrap_or_default()),
            self.next.len(),
            ms(took),
            n as f64 / took.as_secs_f64().max(1e-9),
        );
    }
}

/// The workloads of `team` that hold their room (admitted or running).
async fn holding(c: &mut Client, team: String) -> anyhow::Result<Vec<String>> {
    let filter = WorkloadFilter {
        team: Some(team),
        all: false,
    };
    Ok(match call(c, Body::GetWorkloads(filter)).await? {
        Reply::Workloads(ws) => ws
            .into_iter()
            .filter(|w| w.state == "Admitted" || w.state == "Running")
            .map(|w| w.name)
            .collect(),
        _ => Vec::new(),
    })
}

/// Deep queues draining (issue 56, item 3): the backlog's teams hold every node and wait with
/// thousands more; each probe reports one running workload's end (as its node's agent would)
/// and times until a pending one is admitted on the room it freed. Then as many ends as there
/// are nodes' worth in the samples at once, timed until as many were admitted.
async fn drain_probes(c: &mut Client, a: &BenchArgs) -> anyhow::Result<Drain> {
    let pending = pending_now(c).await?;
    let mut next = Vec::new();
    let samples = a.samples.min(200) as usize;
    let teams = a.teams as usize - 1;
    // Each team's holders, read once and again only when used up (a team's list is thousands
    // of workloads deep: reading it for every probe cost more than the probes).
    let mut holders: Vec<Vec<String>> = vec![Vec::new(); teams];
    for i in 0..samples {
        let t = i % teams;
        if holders[t].is_empty() {
            holders[t] = holding(c, format!("team-{}", 1 + t)).await?;
            holders[t].reverse();
        }
        let Some(name) = holders[t].pop() else {
            continue;
        };
        let before = pending_now(c).await?;
        let t = Instant::now();
        call(
            c,
            Body::WorkloadExited {
                name,
                succeeded: true,
            },
        )
        .await?;
        while pending_now(c).await? >= before {
            if t.elapsed() > Duration::from_secs(10) {
                bail!("no pending workload was admitted within 10s of an end ({before} pending)");
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        next.push(t.elapsed());
    }
    next.sort();
    // A burst: ends across the teams at once.
    let mut ends = Vec::new();
    for t in 1..a.teams {
        ends.extend(holding(c, format!("team-{t}")).await?);
    }
    ends.truncate(samples.max(1));
    let before = pending_now(c).await?;
    let t = Instant::now();
    for name in &ends {
        call(
            c,
            Body::WorkloadExited {
                name: name.clone(),
                succeeded: true,
            },
        )
        .await?;
    }
    let want = before.saturating_sub(ends.len());
    while pending_now(c).await? > want {
        if t.elapsed() > Duration::from_secs(30) {
            bail!("{} ends were not taken back within 30s", ends.len());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(Drain {
        next,
        burst: (ends.len(), t.elapsed()),
        pending,
    })
}

/// Waits up to 5 s until no more than `target` workloads are pending; says whether it came.
async fn refilled(c: &mut Client, target: usize) -> anyhow::Result<bool> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if pending_now(c).await? <= target {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(false)
}

/// Waits, with the server's long poll, until workload `name` leaves Pending.
async fn wait_admitted(c: &mut Client, name: &str, since: Instant) -> anyhow::Result<()> {
    let mut digest = 0u64;
    loop {
        // Team-0 only: a reply listing a deep backlog would be large (and past the frame limit).
        let filter = WorkloadFilter {
            team: Some("team-0".into()),
            all: false,
        };
        let (d, workloads) = watch_once(c, filter, digest, 2_000).await?;
        digest = d;
        if workloads
            .iter()
            .any(|w| w.name == name && w.state != "Pending")
        {
            return Ok(());
        }
        if since.elapsed() > Duration::from_secs(10) {
            bail!("{name} not admitted within 10s");
        }
    }
}

pub async fn run(a: BenchArgs) -> anyhow::Result<()> {
    if let Some(kills) = a.failover {
        return crate::failover::run(&a, kills).await;
    }
    let it = Catalog::builtin()
        .get(&a.instance_type)
        .map_err(|e| anyhow!("--instance-type: {e}"))?
        .clone();
    let base = std::env::temp_dir().join(format!("allot-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    disk_baselines(&base)?;
    let (cluster, addrs, http) = start_cluster(&base, a.keep, a.raft_priority)?;
    if a.keep {
        println!("data and logs in {}", base.display());
    }
    let opts = ClientOpts {
        coordinators: addrs.clone(),
        certs: Some(base.join("certs")),
        identity: Some("admin-admin".into()),
    };
    let mut c = opts.connect()?;
    // Wait for a leader.
    let t = Instant::now();
    loop {
        match c.call(Body::GetNodes).await {
            Ok(Ok(_)) => break,
            _ if t.elapsed() > Duration::from_secs(20) => bail!("no leader after 20s"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    println!("3 replicas up, leader elected in {}", ms(t.elapsed()));
    println!(
        "raft threads (--raft-priority {}): {}",
        a.raft_priority,
        cluster
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| format!("replica {}: {}", i + 1, raft_policy(c.id(), i as u64 + 1)))
            .collect::<Vec<_>>()
            .join(", ")
    );

    setup_teams_and_nodes(&mut c, &a, &it).await?;

    // The API round trip alone (no log, no disk): the floor under any write's latency.
    let mut hello = Vec::new();
    for _ in 0..a.samples {
        let t = Instant::now();
        call(&mut c, Body::Hello).await?;
        hello.push(t.elapsed());
    }
    hello.sort();
    println!(
        "API round trip to the leader (QUIC, mutual TLS; no log write): p50 {}, p99 {}",
        ms(pct(&hello, 0.5)),
        ms(pct(&hello, 0.99))
    );
    // The disk's fsync latency drifts from one minute to the next here (its p99 over 1000
    // samples moves by a third between consecutive runs), so a baseline taken at another time
    // would decide the ratio as much as the cluster does. Each round takes the baseline, then
    // the latency samples, and the ratio compares the two pooled over the same rounds.
    // Submit-to-admit latency, one workload at a time on the idle cluster (`latency_rounds`).
    println!(
        "submit-to-admit on an idle cluster, {} rounds of {} fsync probes (4 KiB append + fdatasync, the cluster idle) then {} submits:",
        a.rounds, a.samples, a.samples
    );
    let idle = latency_rounds(&mut c, &base, &a, "lat").await?;
    idle.print("submit-to-admit");
    if let Some(n) = a.pending {
        return deep_backlog(&mut c, &opts, &base, &a, &http, n, &idle).await;
    }

    sustained(&mut c, &opts, &a).await
}

/// The disk's fsync latency, alone and with three writers at once (as three local replicas
/// write), printed before the cluster starts.
fn disk_baselines(base: &Path) -> anyhow::Result<()> {
    let before = fsync_baseline(base, 1000)?;
    println!(
        "disk fsync (4 KiB append + fdatasync, {} samples before the cluster starts): p50 {}, p99 {}",
        before.len(),
        ms(pct(&before, 0.5)),
        ms(pct(&before, 0.99))
    );
    // Three local replicas share this disk: what its fsync costs with three writers at once.
    let dirs: Vec<PathBuf> = (0..3).map(|i| base.join(format!("fsync-{i}"))).collect();
    let mut shared = std::thread::scope(|s| {
        let hs: Vec<_> = dirs
            .iter()
            .map(|d| {
                s.spawn(move || {
                    std::fs::create_dir_all(d)?;
                    fsync_baseline(d, 1000)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in hs {
            all.extend(
                h.join()
                    .map_err(|_| anyhow!("fsync probe thread panicked"))??,
            );
        }
        anyhow::Ok(all)
    })?;
    shared.sort();
    println!(
        "  the same with 3 writers at once, as 3 local replicas write: p50 {}, p99 {}",
        ms(pct(&shared, 0.5)),
        ms(pct(&shared, 0.99))
    );
    Ok(())
}

/// Teams with an equal share of the nodes, and the nodes registered.
async fn setup_teams_and_nodes(
    c: &mut Client,
    a: &BenchArgs,
    it: &allot_common::InstanceType,
) -> anyhow::Result<()> {
    let per_team = (a.nodes / a.teams).max(1);
    for t in 0..a.teams {
        let cfg = ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType={},Count={per_team}}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}},PreemptTeamTasks=LowerPriority",
            a.instance_type
        ))
        .map_err(|e| anyhow!("{e}"))?;
        call(
            c,
            Body::CreateComputeQuota(ComputeQuotaInput {
                name: format!("quota-{t}"),
                description: None,
                team: format!("team-{t}"),
                fair_share_weight: 10,
                config: cfg,
                activation: ActivationState::Enabled,
            }),
        )
        .await?;
    }
    let caps = it.resources();
    for n in 0..a.nodes {
        call(
            c,
            Body::RegisterNode {
                name: format!("node-{n:05}"),
                instance_type: a.instance_type.clone(),
                capacity: caps.clone(),
            },
        )
        .await?;
    }
    println!(
        "{} teams, {} nodes of {} registered",
        a.teams, a.nodes, a.instance_type
    );

    Ok(())
}

/// Sustained admissions: many submitters, batches of 500, until every workload is admitted.
async fn sustained(c: &mut Client, opts: &ClientOpts, a: &BenchArgs) -> anyhow::Result<()> {
    let total = a.workloads;
    let batch = 500u32;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    let submitters = 8u32;
    for s in 0..submitters {
        let opts = opts.clone();
        let teams = a.teams;
        tasks.push(tokio::spawn(async move {
            let mut c = opts.connect()?;
            let cpu = ResourceName::cpu();
            let mut i = s * batch;
            while i < total {
                let end = (i + batch).min(total);
                let jobs = (i..end)
                    .map(|k| job(format!("tp-{k}"), format!("team-{}", k % teams), &cpu, 1))
                    .collect();
                call(&mut c, Body::SubmitBatch(jobs)).await?;
                i += submitters * batch;
            }
            c.close().await;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| anyhow!("submitter: {e}"))??;
    }
    let submitted_in = t0.elapsed();
    let target = total as usize;
    let admitted = loop {
        let n = match call(c, Body::GetTeams).await? {
            Reply::Teams(ts) => ts.iter().map(|t| t.admitted as usize).sum::<usize>(),
            _ => 0,
        };
        if n >= target {
            break n;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            bail!("only {n} of {target} admitted after 300s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let el = t0.elapsed();
    let pending = pending_now(c).await?;
    println!(
        "sustained: {admitted} workloads submitted (in {}) and admitted durably in {} = {:.0} admissions/s ({} still pending)",
        ms(submitted_in),
        ms(el),
        admitted as f64 / el.as_secs_f64(),
        pending
    );
    Ok(())
}

/// A minimal HTTP/1.1 GET (a coordinator's `/metrics`): status and body.
pub(crate) async fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .map_err(|_| anyhow!("no answer within 3s"))??;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    // De-chunk the raw bytes before any text conversion: a chunk boundary may fall inside a
    // multi-byte character, and chunk sizes count bytes.
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(i) => (&buf[..i], &buf[i + 4..]),
        None => (&buf[..], &[][..]),
    };
    let head = String::from_utf8_lossy(head);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("not an HTTP answer"))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Decodes an HTTP/1.1 chunked body (RFC 9112 7.1) from raw bytes: `<hex size>[;ext]\r\n`,
/// that many bytes, `\r\n`, until a chunk of size 0. A malformed or truncated body is an
/// error naming what was wrong.
fn dechunk(mut s: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = s.windows(2).position(|w| w == b"\r\n") else {
            bail!(
                "the chunked answer ended after {} byte(s), before its last chunk (a chunk of \
                 size 0)",
                out.len()
            );
        };
        let line = String::from_utf8_lossy(&s[..eol]);
        let size = line.split(';').next().unwrap_or("").trim();
        let n = if !size.is_empty() && size.bytes().all(|b| b.is_ascii_hexdigit()) {
            usize::from_str_radix(size, 16).ok()
        } else {
            None
        };
        let Some(n) = n else {
            bail!(
                "bad chunk size {line:?} in a chunked answer: expected a hexadecimal number of \
                 bytes from 0 to {:x}",
                usize::MAX
            );
        };
        let rest = &s[eol + 2..];
        if n == 0 {
            return Ok(out);
        }
        if rest.len() < n {
            bail!(
                "a chunk of {n} byte(s) (size {size:?}) in a chunked answer has only {} byte(s) \
                 after it",
                rest.len()
            );
        }
        out.extend_from_slice(&rest[..n]);
        s = rest[n..].strip_prefix(b"\r\n").ok_or_else(|| {
            anyhow!("a chunk of {n} byte(s) in a chunked answer is not followed by \\r\\n")
        })?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunk_splits_characters_across_chunks() {
        // "é" is 0xC3 0xA9: the first chunk ends between its two bytes.
        let body = b"2\r\na\xC3\r\n3\r\n\xA9b\n\r\n0\r\n\r\n";
        let out = dechunk(body).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a\u{e9}b\n");
        // Chunk extensions are ignored; upper-case hex is accepted.
        assert_eq!(
            dechunk(b"A;x=1\r\n0123456789\r\n0\r\n\r\n").unwrap(),
            b"0123456789"
        );
    }

    #[test]
    fn dechunk_refuses_malformed_chunks() {
        let e = dechunk(b"zz\r\nabc\r\n0\r\n\r\n").unwrap_err().to_string();
        assert!(
            e.contains("\"zz\"") && e.contains("hexadecimal number of bytes"),
            "{e}"
        );
        // A size too large for the machine is refused, not wrapped.
        let e = dechunk(b"fffffffffffffffffffff\r\nabc\r\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fffffffffffffffffffff") && e.contains("from 0 to"),
            "{e}"
        );
        let e = dechunk(b"10\r\nabc\r\n0\r\n\r\n").unwrap_err().to_string();
        assert!(
            e.contains("16 byte(s)") && e.contains("only 10 byte(s)"),
            "{e}"
        );
        let e = dechunk(b"3\r\nabcX\r\n0\r\n\r\n").unwrap_err().to_string();
        assert!(e.contains("not followed by"), "{e}");
        let e = dechunk(b"3\r\nabc\r\n").unwrap_err().to_string();
        assert!(e.contains("before its last chunk"), "{e}");
    }
}

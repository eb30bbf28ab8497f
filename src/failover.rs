//! `allot bench --failover N`: three coordinator processes and four agents (fake GPUs, real
//! processes) on loopback, a long-running workload on every node, then N times: SIGKILL the
//! leader, measure how long until the survivors elect another and how long until a workload
//! submitted by a fresh client (as one `allot submit` is) is admitted, then restart the killed
//! replica. Afterwards every workload must be there exactly once, and the long-running ones
//! must still run their first attempt: a leader change may not restart anything. The agents
//! hold 5 s leases, and their lease files are watched all along (`lease_watch`): the longest
//! gap between two renewals and the least lease left are printed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use allot_common::api::{
    ActivationState, Body, ComputeQuotaInput, Reply, RunSpec, SubmitInput, WorkloadFilter,
};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::{ResourceName, Resources, WorkloadSpec};
use allot_net::tls::{self, Identity};
use anyhow::{anyhow, bail, Context};

use crate::bench_args::{free_port, ms, pct, peers_arg, BenchArgs};
use crate::client::{call, watch_once, Client, ClientOpts};
use crate::dev::{spawn, terminate, Proc};
use crate::lease_watch::LeaseWatch;

const NODES: usize = 4;
const INSTANCE_TYPE: &str = "ml.g5.8xlarge";
/// The agents' lease: half the default, so that a renewal slow across a leader change shows
/// (the pods would stop, and `check` finds them restarted).
const AGENT_LEASE: Duration = Duration::from_secs(5);

/// The processes, stopped (agents first, so they stop their pods) when dropped.
struct Procs {
    coordinators: Vec<Option<Proc>>,
    agents: Vec<Proc>,
    dir: PathBuf,
    keep: bool,
}

impl Drop for Procs {
    fn drop(&mut self) {
        terminate(&mut self.agents, Duration::from_secs(15));
        let mut cs: Vec<Proc> = self
            .coordinators
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        terminate(&mut cs, Duration::from_secs(5));
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn workload(name: &str, res: &ResourceName, command: &[&str]) -> SubmitInput {
    let mut r = Resources::new();
    r.add(res, 1);
    SubmitInput {
        client_token: Some(format!("token-{name}")),
        spec: WorkloadSpec::single(name, "team-a", 1, r),
        run: Some(RunSpec {
            command: command.iter().map(|s| s.to_string()).collect(),
            ..RunSpec::default()
        }),
    }
}

fn coordinator_args(i: usize, addrs: &[String], dir: &Path, a: &BenchArgs) -> Vec<String> {
    let peers = peers_arg(addrs);
    vec![
        "coordinator".into(),
        "--id".into(),
        (i + 1).to_string(),
        "--listen".into(),
        addrs[i].clone(),
        "--peers".into(),
        peers,
        "--http".into(),
        "off".into(),
        "--raft-priority".into(),
        a.raft_priority.to_string(),
        "--data-dir".into(),
        dir.join(format!("data-{}", i + 1)).display().to_string(),
        "--certs".into(),
        dir.join("certs").display().to_string(),
    ]
}

/// The leader some replica names, asking each directly.
async fn leader_named(c: &mut Client, addrs: &[String], not: Option<u64>) -> Option<u64> {
    for addr in addrs {
        let asked =
            tokio::time::timeout(Duration::from_millis(200), c.call_one(addr, Body::Hello)).await;
        if let Ok(Ok(Ok(Reply::Hello {
            leader: Some(l), ..
        }))) = asked
        {
            if Some(l) != not {
                return Some(l);
            }
        }
    }
    None
}

/// Submits `input` as one `allot submit` does (a new client that asks the last leader first),
/// repeating it with the same key while its outcome is unknown, and returns when it is
/// admitted (in its own commit, or as the long poll shows).
async fn submit_until_admitted(
    opts: &ClientOpts,
    input: SubmitInput,
    since: Instant,
) -> anyhow::Result<u32> {
    let mut repeats = 0;
    loop {
        let mut c = opts.connect()?;
        let r = c.call(Body::Submit(input.clone())).await;
        opts.remember(&c);
        match r {
            Ok(Ok(Reply::Submitted { state, .. })) => {
                if state == "Pending" {
                    wait_admitted(&mut c, &input.spec.name, since).await?;
                }
                return Ok(repeats);
            }
            Ok(Ok(other)) => bail!("unexpected reply to a submit: {other:?}"),
            Ok(Err(e)) => {
                if e.kind != allot_common::api::ErrorKind::Unavailable {
                    bail!("submit refused: {e:?}");
                }
            }
            Err(_) => {}
        }
        if since.elapsed() > Duration::from_secs(30) {
            bail!("{} not admitted within 30s of the kill", input.spec.name);
        }
        repeats += 1;
    }
}

async fn wait_admitted(c: &mut Client, name: &str, since: Instant) -> anyhow::Result<()> {
    let mut digest = 0u64;
    loop {
        if let Ok((d, ws)) = watch_once(c, WorkloadFilter::default(), digest, 1_000).await {
            digest = d;
            if ws.iter().any(|w| w.name == name && w.state != "Pending") {
                return Ok(());
            }
        }
        if since.elapsed() > Duration::from_secs(30) {
            bail!("{name} not admitted within 30s of the kill");
        }
    }
}

/// One long-running workload's name, state and admission time: a restart changes the last.
type Since = (String, String, Option<i64>);

fn running_since(ws: &[allot_common::api::WorkloadView]) -> Vec<Since> {
    ws.iter()
        .filter(|w| w.name.starts_with("long-"))
        .map(|w| (w.name.clone(), w.state.clone(), w.admitted_ms))
        .collect()
}

/// The cluster under test: its processes, addresses and an admin client.
struct Bench {
    dir: PathBuf,
    addrs: Vec<String>,
    procs: Procs,
    opts: ClientOpts,
    c: Client,
}

impl Bench {
    fn log(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{what}.log"))
    }

    /// Certificates, three coordinators and `NODES` agents, up and registered.
    async fn start(a: &BenchArgs) -> anyhow::Result<Bench> {
        let dir = std::env::temp_dir().join(format!("allot-failover-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let certs = dir.join("certs");
        tls::init_ca(&certs, false)?;
        let nodes: Vec<String> = (1..=NODES).map(|i| format!("node-{i}")).collect();
        let mut ids = vec![Identity::Admin {
            name: "admin".into(),
        }];
        ids.extend((1..=3).map(|id| Identity::Coordinator { id }));
        ids.extend(nodes.iter().map(|n| Identity::Node { node: n.clone() }));
        for id in &ids {
            tls::issue(&certs, id, &[], &[], 30)?;
        }
        let addrs: Vec<String> = (0..3)
            .map(|_| free_port().map(|p| format!("127.0.0.1:{p}")))
            .collect::<Result<_, _>>()?;
        let opts = ClientOpts {
            coordinators: addrs.clone(),
            certs: Some(certs.clone()),
            identity: Some("admin-admin".into()),
        };
        let procs = Procs {
            coordinators: Vec::new(),
            agents: Vec::new(),
            dir: dir.clone(),
            keep: a.keep,
        };
        let c = opts.connect()?;
        let mut b = Bench {
            dir,
            addrs,
            procs,
            opts,
            c,
        };
        for i in 0..3 {
            b.spawn_coordinator(i, a)?;
        }
        if a.keep {
            println!("data and logs in {}", b.dir.display());
        }
        b.wait_leader().await?;
        for n in &nodes {
            b.spawn_agent(n, &certs)?;
        }
        b.wait_nodes().await?;
        Ok(b)
    }

    fn spawn_coordinator(&mut self, i: usize, a: &BenchArgs) -> anyhow::Result<()> {
        let args = coordinator_args(i, &self.addrs, &self.dir, a);
        let p = spawn(
            &format!("coordinator {}", i + 1),
            &args,
            &self.log(&format!("coordinator-{}", i + 1)),
        )?;
        if i < self.procs.coordinators.len() {
            self.procs.coordinators[i] = Some(p);
        } else {
            self.procs.coordinators.push(Some(p));
        }
        Ok(())
    }

    fn spawn_agent(&mut self, n: &str, certs: &Path) -> anyhow::Result<()> {
        let args: Vec<String> = vec![
            "agent".into(),
            "--node".into(),
            n.into(),
            "--instance-type".into(),
            INSTANCE_TYPE.into(),
            "--fake-gpus".into(),
            "1".into(),
            "--data-dir".into(),
            self.dir.join("agents").join(n).display().to_string(),
            "--http".into(),
            "off".into(),
            "--lease".into(),
            AGENT_LEASE.as_secs().to_string(),
            "--coordinators".into(),
            self.addrs.join(","),
            "--certs".into(),
            certs.display().to_string(),
            "--stop-pods-on-exit".into(),
        ];
        let p = spawn(
            &format!("agent {n}"),
            &args,
            &self.log(&format!("agent-{n}")),
        )?;
        self.procs.agents.push(p);
        Ok(())
    }

    async fn wait_leader(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        while !matches!(
            self.c.call(Body::Hello).await,
            Ok(Ok(Reply::Hello {
                leader: Some(_),
                ..
            }))
        ) {
            if t.elapsed() > Duration::from_secs(20) {
                bail!(
                    "no leader after 20s; see the logs in {}",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn wait_nodes(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        loop {
            let ready = match self.c.call(Body::GetNodes).await {
                Ok(Ok(Reply::Nodes(ns))) => ns.iter().filter(|n| n.healthy).count(),
                _ => 0,
            };
            if ready == NODES {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!(
                    "only {ready} of {NODES} nodes registered after 30s; see {}",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A quota for team-a and one long-running workload per node (each takes the node's GPU),
    /// all running: what they look like before the kills.
    async fn long_running(&mut self) -> anyhow::Result<Vec<Since>> {
        let quota = ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType={INSTANCE_TYPE},Count={NODES}}}]"
        ))
        .map_err(|e| anyhow!("{e}"))?;
        call(
            &mut self.c,
            Body::CreateComputeQuota(ComputeQuotaInput {
                name: "team-a".into(),
                description: None,
                team: "team-a".into(),
                fair_share_weight: 1,
                config: quota,
                activation: ActivationState::Enabled,
            }),
        )
        .await?;
        let gpu = ResourceName::gpu();
        for i in 1..=NODES {
            let w = workload(&format!("long-{i}"), &gpu, &["sleep", "3600"]);
            call(&mut self.c, Body::Submit(w)).await?;
        }
        let t = Instant::now();
        loop {
            let all = Body::GetWorkloads(WorkloadFilter::default());
            if let Reply::Workloads(ws) = call(&mut self.c, all).await? {
                let r = running_since(&ws);
                if r.len() == NODES && r.iter().all(|(_, s, _)| s == "Running") {
                    return Ok(r);
                }
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!(
                    "the long-running workloads did not all start within 30s; see {}",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kill `k`: SIGKILL the leader, time the election and the first admission of a workload
    /// a fresh client submits, then bring the replica back. Returns both times and how many
    /// submits were repeated with their key.
    async fn kill_leader(
        &mut self,
        k: u32,
        a: &BenchArgs,
    ) -> anyhow::Result<(Duration, Duration, u32)> {
        let Some(leader) = leader_named(&mut self.c, &self.addrs, None).await else {
            bail!("no replica names a leader before kill {k}");
        };
        let idx = (leader - 1) as usize;
        let mut p = self.procs.coordinators[idx]
            .take()
            .context("the leader's process is not running")?;
        let t0 = Instant::now();
        p.child.kill()?;
        let _ = p.child.wait();
        // Elections are watched on their own: the survivors are asked directly.
        let survivors: Vec<String> = (self.addrs.iter().enumerate())
            .filter(|(i, _)| *i != idx)
            .map(|(_, a)| a.clone())
            .collect();
        let watch_opts = self.opts.clone();
        let election = tokio::spawn(async move {
            let mut w = watch_opts.connect()?;
            loop {
                if leader_named(&mut w, &survivors, Some(leader))
                    .await
                    .is_some()
                {
                    return anyhow::Ok(t0.elapsed());
                }
                if t0.elapsed() > Duration::from_secs(30) {
                    bail!("no new leader within 30s");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let probe = workload(&format!("probe-{k}"), &ResourceName::cpu(), &["sleep", "1"]);
        let repeated = submit_until_admitted(&self.opts, probe, t0).await?;
        let admitted = t0.elapsed();
        let elected = election.await.map_err(|e| anyhow!("{e}"))??;
        println!(
            "  kill {k}: replica {leader} SIGKILLed; new leader in {}, first submit admitted {} after the kill",
            ms(elected),
            ms(admitted)
        );
        // The killed replica comes back and catches up before the next kill.
        self.spawn_coordinator(idx, a)?;
        let back = Instant::now();
        loop {
            let hello = self.c.call_one(&self.addrs[idx], Body::Hello);
            let asked = tokio::time::timeout(Duration::from_millis(300), hello).await;
            if let Ok(Ok(Ok(Reply::Hello {
                leader: Some(_), ..
            }))) = asked
            {
                break;
            }
            if back.elapsed() > Duration::from_secs(20) {
                bail!("replica {leader} did not come back within 20s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok((elected, admitted, repeated))
    }

    /// Nothing lost, nothing twice, nothing restarted.
    async fn check(&mut self, kills: u32, before: &[Since]) -> anyhow::Result<()> {
        let every = Body::GetWorkloads(WorkloadFilter {
            team: None,
            all: true,
        });
        let Reply::Workloads(all) = call(&mut self.c, every).await? else {
            bail!("listing the workloads failed");
        };
        let mut names: Vec<&str> = all.iter().map(|w| w.name.as_str()).collect();
        names.sort_unstable();
        let listed = names.len();
        names.dedup();
        let duplicated = listed - names.len();
        let lost = (1..=kills)
            .map(|k| format!("probe-{k}"))
            .chain((1..=NODES).map(|i| format!("long-{i}")))
            .filter(|n| names.binary_search(&n.as_str()).is_err())
            .count();
        let after = running_since(&all);
        let restarted = (before.iter())
            .filter(|b| {
                !after
                    .iter()
                    .any(|x| x.0 == b.0 && x.1 == "Running" && x.2 == b.2)
            })
            .count();
        println!(
            "workloads lost: {lost}, duplicated: {duplicated}, long-running ones restarted: {restarted} of {NODES}"
        );
        if lost + duplicated + restarted > 0 {
            self.procs.keep = true;
            bail!(
                "failover broke a guarantee: {lost} lost, {duplicated} duplicated, {restarted} restarted (before {before:?}, after {after:?}); logs in {}",
                self.dir.display()
            );
        }
        Ok(())
    }
}

pub async fn run(a: &BenchArgs, kills: u32) -> anyhow::Result<()> {
    let mut b = Bench::start(a).await?;
    let before = b.long_running().await?;
    let leases = LeaseWatch::start(
        (1..=NODES)
            .map(|i| b.dir.join("agents").join(format!("node-{i}")).join("lease"))
            .collect(),
    );
    println!(
        "3 replicas, {NODES} agents ({INSTANCE_TYPE}, 1 fake GPU each), {NODES} long-running workloads running; {kills} leader kills:"
    );
    let mut elections = Vec::new();
    let mut admits = Vec::new();
    let mut repeated = 0;
    for k in 1..=kills {
        let (elected, admitted, again) = b.kill_leader(k, a).await?;
        elections.push(elected);
        admits.push(admitted);
        repeated += again;
    }
    elections.sort();
    admits.sort();
    println!(
        "elections: p50 {}, p99 {}, max {}",
        ms(pct(&elections, 0.5)),
        ms(pct(&elections, 0.99)),
        ms(elections.last().copied().unwrap_or_default())
    );
    println!(
        "kill to first admission (a new client per submit, as the CLI): p50 {}, p99 {}, max {} ({repeated} submits repeated with their key)",
        ms(pct(&admits, 0.5)),
        ms(pct(&admits, 0.99)),
        ms(admits.last().copied().unwrap_or_default())
    );
    let seen = leases.finish();
    println!(
        "agents' leases ({} s): {} renewals, longest gap between two {}, least left {}",
        AGENT_LEASE.as_secs(),
        seen.renewals,
        ms(Duration::from_millis(seen.longest_gap_ms.max(0) as u64)),
        seen.least_left_ms
            .map_or("none seen".to_string(), |l| format!("{l} ms"))
    );
    b.check(kills, &before).await?;
    Ok(())
}

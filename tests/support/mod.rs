//! What the end-to-end tests share: a coordinator cluster of real processes on loopback,
//! the CLI against it, and small HTTP and timing helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_common::api::{Body, ErrorKind, Reply, RunSpec, SubmitInput};
use allot_common::{ResourceName, Resources, WorkloadSpec};
use allot_net::client::Client;
use allot_net::tls::{self, Identity};

pub const BIN: &str = env!("CARGO_BIN_EXE_allot");

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub addrs: Vec<String>,
    pub http: Vec<u16>,
    pub procs: Vec<Option<Child>>,
    pub snapshot_every: u64,
    /// Where the replicas' data directories are (the test's directory unless said otherwise).
    pub data_root: PathBuf,
    /// More `allot coordinator` arguments.
    pub extra: Vec<String>,
    /// The build each replica runs (`BIN` unless a test says otherwise: an upgrade).
    pub builds: Vec<Build>,
}

/// An `allot` binary and the environment it runs with.
#[derive(Clone, Debug)]
pub struct Build {
    pub bin: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Build {
    /// This checkout's build.
    pub fn current() -> Build {
        Build {
            bin: BIN.into(),
            env: Vec::new(),
        }
    }
}

pub fn udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

pub fn tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free TCP port")
}

impl Cluster {
    pub fn new(n: usize, snapshot_every: u64) -> Cluster {
        Self::with(n, snapshot_every, None, &[])
    }

    /// `new`, with the data directories under `data_root` and `extra` coordinator arguments.
    pub fn with(
        n: usize,
        snapshot_every: u64,
        data_root: Option<PathBuf>,
        extra: &[&str],
    ) -> Cluster {
        Self::with_builds(
            n,
            snapshot_every,
            data_root,
            extra,
            vec![Build::current(); n],
        )
    }

    /// `with`, replica `i` running `builds[i]`.
    pub fn with_builds(
        n: usize,
        snapshot_every: u64,
        data_root: Option<PathBuf>,
        extra: &[&str],
        builds: Vec<Build>,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = dir.path().join("certs");
        tls::init_ca(&certs, false).expect("CA");
        tls::issue(
            &certs,
            &Identity::Admin {
                name: "admin".into(),
            },
            &[],
            &[],
            2,
        )
        .expect("admin");
        for t in ["team-a", "team-b"] {
            tls::issue(&certs, &Identity::User { team: t.into() }, &[], &[], 2).expect("user");
        }
        tls::issue(
            &certs,
            &Identity::Node {
                node: "node-1".into(),
            },
            &[],
            &[],
            2,
        )
        .expect("node");
        for id in 1..=n as u64 {
            tls::issue(&certs, &Identity::Coordinator { id }, &[], &[], 2).expect("coordinator");
        }
        // As `allot certs init` makes it: the dashboard's key, shared by every replica.
        allot_coordinator::web_session::ensure_key(&certs).expect("web session key");
        let mut c = Cluster {
            addrs: (0..n)
                .map(|_| format!("127.0.0.1:{}", udp_port()))
                .collect(),
            http: (0..n).map(|_| tcp_port()).collect(),
            procs: (0..n).map(|_| None).collect(),
            snapshot_every,
            data_root: data_root.unwrap_or_else(|| dir.path().to_path_buf()),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            builds,
            dir,
        };
        for i in 0..n {
            c.start(i);
        }
        c
    }

    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    pub fn start(&mut self, i: usize) {
        self.start_args(i, &[]);
    }

    /// Room for one more replica (the next id): its certificate, address and ports; not
    /// started.
    pub fn add_slot(&mut self) -> usize {
        let id = self.addrs.len() as u64 + 1;
        tls::issue(&self.certs(), &Identity::Coordinator { id }, &[], &[], 2).expect("coordinator");
        self.addrs.push(format!("127.0.0.1:{}", udp_port()));
        self.http.push(tcp_port());
        self.procs.push(None);
        self.builds.push(Build::current());
        self.addrs.len() - 1
    }

    /// Starts replica `i` with more arguments (`--join`).
    pub fn start_args(&mut self, i: usize, more: &[&str]) {
        let peers = self
            .addrs
            .iter()
            .enumerate()
            .map(|(k, a)| format!("{}={a}", k + 1))
            .collect::<Vec<_>>()
            .join(",");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("coordinator-{}.log", i + 1)))
            .expect("log file");
        let build = &self.builds[i];
        let child = Command::new(&build.bin)
            .envs(build.env.iter().map(|(k, v)| (k, v)))
            .args(["coordinator", "--id", &(i + 1).to_string()])
            .args(["--listen", &self.addrs[i], "--peers", &peers])
            .args(["--http", &format!("127.0.0.1:{}", self.http[i])])
            .args(["--snapshot-every", &self.snapshot_every.to_string()])
            .arg("--data-dir")
            .arg(self.data_root.join(format!("data-{}", i + 1)))
            .arg("--certs")
            .arg(self.certs())
            .args(&self.extra)
            .args(more)
            .env("ALLOT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start coordinator");
        self.procs[i] = Some(child);
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.procs[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn client(&self, stem: &str) -> Client {
        Client::new(self.addrs.clone(), &self.certs(), stem).expect("client")
    }

    /// `allot ARGS` as `stem`'s certificate against this cluster, not started yet.
    pub fn cli_command(&self, stem: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("ALLOT_COORDINATORS", self.addrs.join(","))
            .env("ALLOT_CERTS", self.certs())
            .env("ALLOT_AS", stem)
            // The CLI remembers the last leader under $HOME/.allot: the test's, not the user's.
            .env("HOME", self.dir.path());
        cmd
    }

    pub fn cli(&self, stem: &str, args: &[&str]) -> Output {
        self.cli_command(stem, args).output().expect("run allot")
    }

    pub fn cli_ok(&self, stem: &str, args: &[&str]) -> String {
        let o = self.cli(stem, args);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "allot {args:?} failed: {}{}\nlogs:\n{}",
            out,
            String::from_utf8_lossy(&o.stderr),
            self.logs()
        );
        out
    }

    pub fn logs(&self) -> String {
        self.logs_tail(15)
    }

    /// The last `n` lines of each replica's log.
    pub fn logs_tail(&self, n: usize) -> String {
        let mut s = String::new();
        for i in 0..self.addrs.len() {
            let p = self.dir.path().join(format!("coordinator-{}.log", i + 1));
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(n).collect();
            s.push_str(&format!("--- coordinator {} ---\n", i + 1));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    /// Replica `i`'s `/metrics` page.
    pub fn metrics(&self, i: usize) -> Option<String> {
        http_get(&format!("127.0.0.1:{}", self.http[i]), "/metrics")
    }

    /// Each replica's raft view as its `/metrics` page gives it (running or not, leads, term,
    /// commit and applied indexes): what a failing cluster test prints beside the logs.
    pub fn raft_views(&self) -> String {
        let mut s = String::new();
        for i in 0..self.addrs.len() {
            let running = self.procs[i].is_some();
            // One page per replica: a replica that does not answer costs one read timeout.
            let page = self.metrics(i);
            let m = |name: &str| {
                page.as_deref()
                    .and_then(|p| metric_in(p, name))
                    .map_or_else(|| "?".to_string(), |v| v.to_string())
            };
            s.push_str(&format!(
                "replica {} ({}, {}): leads {} term {} commit {} applied {}\n",
                i + 1,
                self.addrs[i],
                if running { "running" } else { "stopped" },
                m("allot_raft_is_leader"),
                m("allot_raft_term"),
                m("allot_raft_commit_index"),
                m("allot_raft_applied_index"),
            ));
        }
        s
    }

    pub fn metric(&self, i: usize, name: &str) -> Option<f64> {
        metric_in(&self.metrics(i)?, name)
    }
}

/// The value of the first sample of `name` on a `/metrics` page.
fn metric_in(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failing test says what each replica saw: the end of its log and its raft view.
        if std::thread::panicking() {
            eprintln!(
                "the cluster when the test failed:\n{}{}",
                self.raft_views(),
                self.logs_tail(40)
            );
        }
        for i in 0..self.procs.len() {
            self.kill(i);
        }
    }
}

/// A child process killed when the guard goes, so a failing test leaves none behind.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Every workload, finished ones included, as the admin sees them.
pub fn all_workloads(c: &Cluster) -> Vec<allot_common::api::WorkloadView> {
    rt().block_on(async {
        let mut client = c.client("admin-admin");
        let r = client
            .call(Body::GetWorkloads(allot_common::api::WorkloadFilter {
                team: None,
                all: true,
            }))
            .await;
        // The runtime goes with this call: closed now, the connection does not count against
        // the certificate's 32 until the idle timeout (tests poll this in loops).
        client.close().await;
        match r {
            Ok(Ok(allot_common::api::Reply::Workloads(w))) => w,
            other => panic!("get workloads: {other:?}"),
        }
    })
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

pub fn job(name: &str, team: &str) -> SubmitInput {
    let mut r = Resources::new();
    r.add(&ResourceName::gpu(), 1);
    SubmitInput {
        spec: WorkloadSpec::single(name, team, 1, r),
        run: Some(RunSpec::default()),
        client_token: Some(format!("token-{name}")),
    }
}

pub const QUOTA: &str = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},PreemptTeamTasks=LowerPriority";

/// Waits for a leader, then creates the cluster scheduler config `default` with `config`.
pub fn create_scheduler_config(c: &Cluster, config: &str) {
    rt().block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    c.cli_ok(
        "admin-admin",
        &[
            "create-cluster-scheduler-config",
            "--name",
            "default",
            "--scheduler-config",
            config,
        ],
    );
}

/// One replica with the scheduler config `default` (class `training`, weight 70), teams
/// team-a and team-b, and one agent of one fake GPU (ml.g5.8xlarge), registered.
pub fn one_gpu_cluster() -> (Cluster, AgentProc) {
    let c = Cluster::new(1, 10_000);
    create_scheduler_config(
        &c,
        "PriorityClasses=[{Name=training,Weight=70}],FairShare=Enabled",
    );
    setup_team(&c, "team-a");
    setup_team(&c, "team-b");
    let agent = c.start_agent("g5-1", "ml.g5.8xlarge", 1, 3.0);
    wait_for(30, "a registered node", || {
        c.cli_ok("admin-admin", &["get", "nodes"])
            .contains("Ready")
            .then_some(())
    });
    (c, agent)
}

/// Two one-GPU nodes (ml.g5.8xlarge) `g5-1` and `g5-2`, registered and ready.
pub fn two_gpu_nodes(c: &Cluster) -> (AgentProc, AgentProc) {
    two_gpu_nodes_with(c, &[])
}

/// `two_gpu_nodes`, each agent started with `extra` flags too.
pub fn two_gpu_nodes_with(c: &Cluster, extra: &[String]) -> (AgentProc, AgentProc) {
    let a1 = c.start_agent_with("g5-1", "ml.g5.8xlarge", 1, 3.0, extra);
    let a2 = c.start_agent_with("g5-2", "ml.g5.8xlarge", 1, 3.0, extra);
    wait_for(30, "two registered nodes", || {
        (c.cli_ok("admin-admin", &["get", "nodes"])
            .matches("Ready")
            .count()
            == 2)
            .then_some(())
    });
    (a1, a2)
}

pub fn setup_team(c: &Cluster, team: &str) {
    let o = create_quota(c, team, QUOTA);
    assert!(
        o.status.success(),
        "create-compute-quota for {team}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `allot create-compute-quota` for `team` (`TEAM-quota`, weight 10) with `config`, as an
/// admin; its output.
pub fn create_quota(c: &Cluster, team: &str, config: &str) -> Output {
    let name = format!("{team}-quota");
    let target = format!("TeamName={team},FairShareWeight=10");
    c.cli(
        "admin-admin",
        &[
            "create-compute-quota",
            "--name",
            &name,
            "--compute-quota-config",
            config,
            "--compute-quota-target",
            &target,
        ],
    )
}

pub async fn wait_leader(c: &mut Client) {
    let t = Instant::now();
    loop {
        if let Ok(Ok(_)) = c.call(Body::GetNodes).await {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no leader within 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One `allot agent` process with fake GPUs.
pub struct AgentProc {
    /// The build it runs (`start` uses the one set last).
    pub build: Build,
    pub name: String,
    pub http: u16,
    pub data: PathBuf,
    pub child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
}

impl Cluster {
    /// Issues a node certificate and starts an agent for `name` with `gpus` fake GPUs.
    pub fn start_agent(
        &self,
        name: &str,
        instance_type: &str,
        gpus: u32,
        lease_s: f64,
    ) -> AgentProc {
        self.start_agent_with(name, instance_type, gpus, lease_s, &[])
    }

    /// `start_agent` with more flags (`--driver containerd ...`).
    pub fn start_agent_with(
        &self,
        name: &str,
        instance_type: &str,
        gpus: u32,
        lease_s: f64,
        extra: &[String],
    ) -> AgentProc {
        self.start_agent_build(name, instance_type, gpus, lease_s, extra, Build::current())
    }

    /// `start_agent_with`, the agent running `build`.
    pub fn start_agent_build(
        &self,
        name: &str,
        instance_type: &str,
        gpus: u32,
        lease_s: f64,
        extra: &[String],
        build: Build,
    ) -> AgentProc {
        let _ = tls::issue(
            &self.certs(),
            &Identity::Node { node: name.into() },
            &[],
            &[],
            2,
        );
        let http = tcp_port();
        let data = self.dir.path().join(format!("agent-{name}"));
        let args: Vec<String> = vec![
            "agent".into(),
            "--node".into(),
            name.into(),
            "--instance-type".into(),
            instance_type.into(),
            "--fake-gpus".into(),
            gpus.to_string(),
            "--lease".into(),
            lease_s.to_string(),
            "--http".into(),
            format!("127.0.0.1:{http}"),
            "--data-dir".into(),
            data.display().to_string(),
            "--coordinators".into(),
            self.addrs.join(","),
            "--certs".into(),
            self.certs().display().to_string(),
            "--stop-pods-on-exit".into(),
        ];
        let args: Vec<String> = args.into_iter().chain(extra.iter().cloned()).collect();
        let mut a = AgentProc {
            build,
            name: name.into(),
            http,
            data,
            child: None,
            args,
            log: self.dir.path().join(format!("agent-{name}.log")),
        };
        a.start();
        a
    }
}

impl AgentProc {
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("agent log");
        self.child = Some(
            Command::new(&self.build.bin)
                .envs(self.build.env.iter().map(|(k, v)| (k, v)))
                .args(&self.args)
                .env("ALLOT_LOG", "info")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start agent"),
        );
    }

    /// SIGKILL: the agent gets no chance to stop its pods.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metrics(&self) -> String {
        http_get(&format!("127.0.0.1:{}", self.http), "/metrics").unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM: the agent stops its pods (--stop-pods-on-exit) before it exits.
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A pod process seen in /proc: which node, devices and run it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeenPod {
    pub node: String,
    pub gpus: String,
    pub workload: String,
    pub attempt: String,
    pub rank: String,
    pub pid: u32,
}

/// Pods whose processes (not their shims) carry `TEST_RUN=<run>` in their environment.
pub fn pod_processes(run: &str) -> Vec<SeenPod> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let vars: std::collections::BTreeMap<String, String> = env
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let s = String::from_utf8_lossy(kv);
                s.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        if vars.get("TEST_RUN").map(String::as_str) != Some(run) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("agent-shim") {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        let get = |k: &str| vars.get(k).cloned().unwrap_or_default();
        out.push(SeenPod {
            node: get("ALLOT_NODE"),
            gpus: get("CUDA_VISIBLE_DEVICES"),
            workload: get("ALLOT_WORKLOAD"),
            attempt: get("ALLOT_ATTEMPT"),
            rank: get("RANK"),
            pid,
        });
    }
    // One entry per pod: its first process (the program; its children share the pod).
    out.sort_by_key(|p| {
        (
            p.node.clone(),
            p.workload.clone(),
            p.attempt.clone(),
            p.rank.clone(),
            p.pid,
        )
    });
    out.dedup_by(|b, a| {
        (&a.node, &a.workload, &a.attempt, &a.rank) == (&b.node, &b.workload, &b.attempt, &b.rank)
    });
    out
}

/// Watches pod processes in the background and records every moment one GPU index of one
/// node was used by two different pods.
pub struct GpuWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
}

impl GpuWatch {
    pub fn start(run: &str) -> GpuWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let run = run.to_string();
        let handle = std::thread::spawn(move || {
            let mut samples = 0;
            let mut bad = Vec::new();
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                let mut holder: std::collections::BTreeMap<
                    (String, String),
                    (String, String, String),
                > = Default::default();
                for p in pod_processes(&run) {
                    for g in p.gpus.split(',').filter(|g| !g.is_empty()) {
                        let who = (p.workload.clone(), p.attempt.clone(), p.rank.clone());
                        if let Some(other) =
                            holder.insert((p.node.clone(), g.to_string()), who.clone())
                        {
                            if other != who {
                                bad.push(format!(
                                    "gpu {g} of {} used by {other:?} and {who:?}",
                                    p.node
                                ));
                            }
                        }
                    }
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            (samples, bad)
        });
        GpuWatch {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops watching: (samples taken, violations).
    pub fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or((0, vec!["the watcher panicked".into()]))
    }
}

/// Polls `f` every 100 ms until it returns `Some`, or panics after `secs` with `what`.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Samples pod processes and records every moment two attempts of one workload were alive.
pub struct AttemptWatch {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
}

impl AttemptWatch {
    pub fn start(run: &str) -> AttemptWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let run = run.to_string();
        let handle = std::thread::spawn(move || {
            let (mut samples, mut bad) = (0, Vec::new());
            while !s.load(Ordering::SeqCst) {
                let mut attempts: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
                for p in pod_processes(&run) {
                    attempts
                        .entry(p.workload.clone())
                        .or_default()
                        .insert(p.attempt.clone(), p.node.clone());
                }
                for (w, a) in attempts {
                    if a.len() > 1 {
                        bad.push(format!("{w} runs attempts {a:?} (attempt -> node) at once"));
                    }
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (samples, bad)
        });
        AttemptWatch {
            stop,
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or((0, vec!["the watcher panicked".into()]))
    }
}

/// Submits a stream of workloads (`make` names each) until `done`, each repeated with its key while its
/// outcome is unknown; any other error fails the test (nothing may be refused).
/// A `submit_stream` of one-second one-CPU jobs of `run`: what it acknowledged, the flag that
/// stops it, and its thread.
pub fn one_second_stream(
    c: &Cluster,
    run: &str,
) -> (
    Arc<Mutex<Vec<String>>>,
    Arc<AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let run = run.to_string();
    let stream = submit_stream(c, acked.clone(), done.clone(), move |name| {
        sleep_job(name, ResourceName::cpu(), 1, &run)
    });
    (acked, done, stream)
}

pub fn submit_stream(
    c: &Cluster,
    acked: Arc<Mutex<Vec<String>>>,
    done: Arc<AtomicBool>,
    make: impl Fn(&str) -> SubmitInput + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let (addrs, certs) = (c.addrs.clone(), c.certs());
    std::thread::spawn(move || {
        rt().block_on(async move {
            let mut i = 0;
            while !done.load(Ordering::SeqCst) && i < 2000 {
                i += 1;
                let name = format!("s-{i:04}");
                let input = make(&name);
                let t = Instant::now();
                loop {
                    let mut cl =
                        allot_net::client::Client::new(addrs.clone(), &certs, "admin-admin")
                            .expect("client");
                    match cl.call(Body::Submit(input.clone())).await {
                        Ok(Ok(Reply::Submitted { .. })) => {
                            acked.lock().expect("lock").push(name.clone());
                            break;
                        }
                        Ok(Err(e)) if e.kind == ErrorKind::Unavailable => {}
                        Ok(other) => panic!("{name} was refused: {other:?}"),
                        Err(_) => {}
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(30),
                        "{name} never answered"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        })
    })
}

/// A one-pod workload of team-a that runs `command`, its processes marked with
/// `TEST_RUN=run` (`pod_processes`), submitted with a key.
pub fn run_job(name: &str, res: ResourceName, command: Vec<String>, run: &str) -> SubmitInput {
    let mut r = Resources::new();
    r.add(&res, 1);
    SubmitInput {
        client_token: Some(format!("key-{name}")),
        spec: WorkloadSpec::single(name, "team-a", 1, r),
        run: Some(RunSpec {
            command,
            env: [("TEST_RUN".to_string(), run.to_string())].into(),
            grace_seconds: Some(1),
            ..RunSpec::default()
        }),
    }
}

/// `run_job` of `sleep secs`.
pub fn sleep_job(name: &str, res: ResourceName, secs: u32, run: &str) -> SubmitInput {
    run_job(name, res, vec!["sleep".into(), secs.to_string()], run)
}

/// The leader's index, asking the replicas (within 20 s).
pub async fn leader_index(c: &Cluster) -> usize {
    let mut cl = c.client("admin-admin");
    let t = Instant::now();
    loop {
        if let Ok(Ok(Reply::Hello {
            leader: Some(l), ..
        })) = cl.call(Body::Hello).await
        {
            return (l - 1) as usize;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until replica `i` has applied what the leader had committed when asked.
pub fn caught_up(c: &Cluster, i: usize, rt: &tokio::runtime::Runtime) {
    let leader = rt.block_on(leader_index(c));
    let target = wait_for(10, "the leader's commit index", || {
        c.metric(leader, "allot_raft_commit_index")
    });
    wait_for(
        30,
        &format!("replica {} to catch up to {target}", i + 1),
        || (c.metric(i, "allot_raft_applied_index")? >= target).then_some(()),
    );
}

/// Team-a's quota of `nodes` one-GPU g5 nodes, then `long-1` to `long-N` as `long` makes them.
pub async fn quota_and_long_jobs(c: &Cluster, nodes: usize, long: impl Fn(&str) -> SubmitInput) {
    use allot_common::api::{ActivationState, ComputeQuotaInput};
    let mut cl = c.client("admin-admin");
    let quota = allot_common::hyperpod::ComputeQuotaConfig::parse_shorthand(&format!(
        "ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count={nodes}}}]"
    ))
    .expect("quota");
    let r = cl
        .call(Body::CreateComputeQuota(ComputeQuotaInput {
            name: "team-a".into(),
            description: None,
            team: "team-a".into(),
            fair_share_weight: 1,
            config: quota,
            activation: ActivationState::Enabled,
        }))
        .await;
    assert!(matches!(r, Ok(Ok(_))), "{r:?}");
    for i in 1..=nodes {
        let r = cl.call(Body::Submit(long(&format!("long-{i}")))).await;
        assert!(matches!(r, Ok(Ok(_))), "{r:?}");
    }
}

/// Every workload is listed once, and every name in `acked` is among them: the names listed,
/// sorted.
pub fn assert_each_acknowledged_once(c: &Cluster, acked: &[String]) -> Vec<String> {
    let all = all_workloads(c);
    let mut names: Vec<String> = all.into_iter().map(|w| w.name).collect();
    names.sort_unstable();
    let listed = names.len();
    names.dedup();
    assert_eq!(listed, names.len(), "a workload is listed twice");
    for a in acked {
        assert!(
            names.binary_search(a).is_ok(),
            "acknowledged {a} is missing"
        );
    }
    names
}

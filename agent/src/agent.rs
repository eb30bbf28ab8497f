//! The agent's main loop: discover the inventory, keep a lease with the coordinator cluster,
//! and converge the node's pods to the assignments the cluster has committed for it.
//!
//! Three tasks share the work. The *sync* task holds the lease: it registers the node, then
//! long-polls `AgentSync`, which renews the lease and returns the node's assignments; after
//! every answer (confirmed by a quorum through a read index) it moves the lease file forward.
//! The *report* task tells the cluster about pods that started or ended, retrying until the
//! cluster acknowledges. The main task reconciles: it starts what is assigned and not running,
//! stops what runs and is not assigned (or is assigned with `stop`), and never starts a pod
//! while a device it needs is still held by a pod that has not ended.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use allot_common::api::{
    ApiError, Body, DeviceInfo, ErrorKind, NodeAssignments, NodeReport, PodAssignment, PodExit,
    Reply,
};
use allot_net::client::Client;
use allot_net::tls::{Identity, TlsFiles};
use tokio::sync::{mpsc, watch};

use crate::containerd::{self, ContainerdConfig};
use crate::executor::{ExecConfig, Executor, Pod, PodPhase};
use crate::inventory::{Discovery, InventoryConfig, NodeInventory};
use crate::metrics::AgentMetrics;
use crate::reconcile::{devices_of, key_of, Action, PodKey, Reconciler, Seen};
use crate::shim;

#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub node: String,
    pub coordinators: Vec<String>,
    pub certs: PathBuf,
    pub data_dir: PathBuf,
    pub http: Option<SocketAddr>,
    /// The address gang peers use to reach this node.
    pub advertise: String,
    pub inventory: InventoryConfig,
    pub lease: Duration,
    pub discover_every: Duration,
    pub cgroup_root: Option<PathBuf>,
    /// Stop every pod when the agent stops (`allot dev`); otherwise pods outlive a restart.
    pub stop_pods_on_exit: bool,
    /// The program that runs `agent-shim` (this binary).
    pub shim_program: PathBuf,
    /// The `containerd` driver for workloads with an image; `None`: processes only.
    pub containerd: Option<ContainerdConfig>,
    /// Images no pod used for this long leave the node's image cache.
    pub image_max_age: Duration,
    /// The node's network topology, level → domain (`allot_common::topology`).
    pub topology: allot_common::topology::NodeTopology,
}

pub use allot_common::BoxError;

/// What the report task sends.
#[derive(Debug)]
enum Report {
    Started(PodKey, String, Vec<u32>),
    Exited(PodKey, String, PodExit),
    /// What a pod that does not run yet is doing; sent once, not retried (the next says more).
    Progress(PodKey, String),
}

impl Report {
    /// An assigned pod that ended here without running (or without running any longer).
    fn failed(k: PodKey, p: &allot_common::api::PodAssignment, detail: String) -> Report {
        let exit = PodExit {
            rank: p.rank,
            succeeded: false,
            lost: false,
            detail,
            exit_code: None,
        };
        Report::Exited(k, p.workload.clone(), exit)
    }
}

/// Devices once seen and no longer discovered stay in the report, unhealthy, so a GPU that
/// fell off the bus is not silently forgotten (and its index not reused).
fn merge_seen(seen: &mut BTreeMap<(String, u32), DeviceInfo>, inv: &mut NodeInventory) {
    let now: BTreeSet<(String, u32)> = inv
        .devices
        .iter()
        .map(|d| (d.resource.clone(), d.index))
        .collect();
    for d in &inv.devices {
        seen.insert((d.resource.clone(), d.index), d.clone());
    }
    for (k, d) in seen.iter_mut() {
        if !now.contains(k) {
            d.healthy = false;
            if d.reason.is_empty() {
                d.reason = "no longer discovered".into();
            }
            inv.devices.push(d.clone());
            let res = allot_common::ResourceName::parse(&d.resource).ok();
            if let Some(r) = res {
                let have = inv.capacity.get(&r);
                if have <= i64::from(d.index) {
                    inv.capacity.set(r, i64::from(d.index) + 1);
                }
            }
        }
    }
    inv.devices
        .sort_by(|a, b| (&a.resource, a.index).cmp(&(&b.resource, b.index)));
}

fn jitter(base: Duration, seed: &mut u64) -> Duration {
    // xorshift: spreads reconnects of many agents; not security relevant.
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let f = 0.5 + (*seed % 1000) as f64 / 1000.0;
    base.mul_f64(f)
}

pub struct Agent {
    cfg: AgentConfig,
    exec: Executor,
    metrics: Arc<AgentMetrics>,
    /// Container pods started and not yet running (pulling their image, being created): the
    /// cluster hears they started once they run.
    awaiting_start: BTreeSet<PodKey>,
    /// The progress last told to the cluster, per pod awaiting its start.
    told: BTreeMap<PodKey, String>,
    /// What to start and stop (`reconcile.rs`), from the assignments and the pods here.
    reconciler: Reconciler,
}

impl Agent {
    pub fn open(cfg: AgentConfig) -> Result<Agent, BoxError> {
        std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
            format!(
                "could not create the agent's data directory {}: {e}",
                cfg.data_dir.display()
            )
        })?;
        let exec = Executor::open(ExecConfig {
            node: cfg.node.clone(),
            data_dir: cfg.data_dir.clone(),
            shim_program: cfg.shim_program.clone(),
            lease_ms: cfg.lease.as_millis() as u64,
            neuron_cores_per_device: 0,
            cgroup_root: cfg.cgroup_root.clone(),
            containerd: cfg.containerd.clone(),
        })?;
        // Container pods an earlier agent started that had not reached their container yet.
        let awaiting_start = exec
            .pods
            .iter()
            .filter(|(_, p)| p.spec.run.image.is_some() && p.holds_devices())
            .filter(|(_, p)| {
                containerd::run::read_status(&p.dir).is_none_or(|s| s.phase != "Running")
            })
            .map(|(k, _)| *k)
            .collect();
        Ok(Agent {
            cfg,
            exec,
            metrics: Arc::new(AgentMetrics::new()),
            awaiting_start,
            told: BTreeMap::new(),
            reconciler: Reconciler::default(),
        })
    }

    /// Runs until `shutdown` resolves.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), BoxError> {
        let cfg = self.cfg.clone();
        let mut discovery =
            Discovery::new(&cfg.inventory).map_err(|e| format!("inventory: {e}"))?;
        let mut seen = BTreeMap::new();
        let mut inv = discovery.discover();
        merge_seen(&mut seen, &mut inv);
        for w in &inv.warnings {
            tracing::warn!("inventory: {w}");
        }
        self.exec_inventory(&inv);
        self.metrics.set_inventory(&inv.devices);
        let report = self.report_of(&inv);
        tracing::info!(
            "node {} ({}): {} devices, capacity {:?}",
            cfg.node,
            inv.instance_type,
            inv.devices.len(),
            inv.capacity
        );
        let mut inv_rx = start_discovery(discovery, seen, cfg.discover_every)?;
        let (sync_client, report_client, logs_client) = node_clients(&cfg)?;
        tokio::spawn(crate::logs::serve(
            cfg.node.clone(),
            logs_client,
            cfg.data_dir.clone(),
        ));

        if let Some(c) = cfg.containerd.clone() {
            // Containers of pods this agent no longer has (their shim died, or they belong to an
            // attempt whose records are gone) are removed now; the rest are adopted through
            // their shims.
            let live: BTreeSet<String> = self
                .exec
                .pods
                .values()
                .filter(|p| p.holds_devices())
                .map(|p| p.dir.display().to_string())
                .collect();
            // Before anything starts: a new pod's container must not be taken for a stray.
            if let Some(ctd) = sweep_containers(&c, &live).await {
                tokio::spawn(image_cache_task(ctd, cfg.image_max_age));
            }
        }
        let (report_tx, report_rx) = watch::channel(report);
        let (assign_tx, mut assign_rx) = watch::channel::<Option<NodeAssignments>>(None);
        let (out_tx, out_rx) = mpsc::unbounded_channel::<Report>();
        let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<PodKey>();
        let lease_file = self.exec.lease_file();
        tokio::spawn(sync_task(
            cfg.clone(),
            sync_client,
            report_rx,
            assign_tx,
            lease_file,
            self.metrics.clone(),
        ));
        tokio::spawn(report_task(cfg.node.clone(), report_client, out_rx, ack_tx));
        for r in started_before(&self.exec.pods, &self.awaiting_start) {
            let _ = out_tx.send(r);
        }
        if let Some(addr) = cfg.http {
            crate::http::serve(addr, self.metrics.clone()).await?;
        }

        let mut queued: BTreeSet<PodKey> = BTreeSet::new();
        let mut last: Option<NodeAssignments> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                c = assign_rx.changed() => {
                    if c.is_err() { break; }
                    last = assign_rx.borrow_and_update().clone();
                }
                _ = tick.tick() => {}
                // A container pod that is being created is looked at often, so the cluster
                // hears it runs within milliseconds, not a tick later.
                _ = tokio::time::sleep(Duration::from_millis(10)), if !self.awaiting_start.is_empty() => {}
                Some(k) = ack_rx.recv() => {
                    self.exec.mark_reported(&k);
                    queued.remove(&k);
                }
                Some(inv) = inv_rx.recv() => {
                    self.metrics.set_inventory(&inv.devices);
                    self.exec_inventory(&inv);
                    let r = self.report_of(&inv);
                    if *report_tx.borrow() != r {
                        tracing::info!("inventory changed; reporting it");
                        for w in &inv.warnings {
                            tracing::warn!("inventory: {w}");
                        }
                        let _ = report_tx.send(r);
                    }
                }
            }
            // Pods that ended.
            for k in self.exec.poll() {
                self.metrics.stops.inc();
                tracing::info!("pod {k:?} ended");
            }
            self.report_starting(&out_tx);
            self.report_exits(&mut queued, &out_tx);
            if let Some(a) = &last {
                self.reconcile(a, &out_tx);
            }
            self.metrics.set_pods(&self.exec);
        }
        if cfg.stop_pods_on_exit {
            self.stop_pods(&out_tx).await;
        }
        Ok(())
    }

    /// Container pods being created: each that now runs is reported started, the others'
    /// progress (pulling, creating) when it changed.
    fn report_starting(&mut self, out_tx: &mpsc::UnboundedSender<Report>) {
        let told = &mut self.told;
        self.awaiting_start.retain(|k| {
            let Some(p) = self.exec.pods.get(k) else {
                return false;
            };
            if !p.holds_devices() {
                return false;
            }
            let status = containerd::run::read_status(&p.dir);
            let running = status.as_ref().is_some_and(|s| s.phase == "Running");
            if running {
                let _ = out_tx.send(Report::Started(
                    *k,
                    p.spec.workload.clone(),
                    vec![p.spec.rank],
                ));
            } else if let Some(s) = status {
                let text = describe_status(&s);
                if told.get(k) != Some(&text) {
                    told.insert(*k, text.clone());
                    let _ = out_tx.send(Report::Progress(*k, text));
                }
            }
            !running
        });
        let waiting = &self.awaiting_start;
        self.told.retain(|k, _| waiting.contains(k));
    }

    /// Pods that ended and are not reported yet: queued for the report task once.
    fn report_exits(&self, queued: &mut BTreeSet<PodKey>, out_tx: &mpsc::UnboundedSender<Report>) {
        for (k, p) in &self.exec.pods {
            if p.reported || queued.contains(k) {
                continue;
            }
            if let Some(e) = p.exit() {
                queued.insert(*k);
                let _ = out_tx.send(Report::Exited(*k, p.spec.workload.clone(), e));
            }
        }
    }

    /// `--stop-pods-on-exit`: stops every pod, waits up to 35 s for them, reports how they
    /// ended.
    async fn stop_pods(&mut self, out_tx: &mpsc::UnboundedSender<Report>) {
        self.exec.stop_all("the agent is stopping");
        let deadline = Instant::now() + Duration::from_secs(35);
        while self.exec.pods.values().any(|p| p.holds_devices()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.exec.poll();
        }
        // Give the cluster a moment to hear about them.
        for (k, p) in &self.exec.pods {
            if let (false, Some(e)) = (p.reported, p.exit()) {
                let _ = out_tx.send(Report::Exited(*k, p.spec.workload.clone(), e));
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    /// What the executor needs of the inventory: cores per Neuron device, GPU partitions.
    fn exec_inventory(&mut self, inv: &NodeInventory) {
        let cores = inv
            .devices
            .iter()
            .find(|d| d.resource == "neuron")
            .map(|d| d.cores)
            .unwrap_or(0);
        self.exec.set_neuron_cores(cores);
        self.exec.set_partitions(&inv.partitions);
    }

    fn report_of(&self, inv: &NodeInventory) -> NodeReport {
        NodeReport {
            name: self.cfg.node.clone(),
            instance_type: inv.instance_type.clone(),
            capacity: inv.capacity.clone(),
            devices: inv.devices.clone(),
            address: self.cfg.advertise.clone(),
            http: self.cfg.http.map(|a| a.to_string()).unwrap_or_default(),
            lease_ms: self.cfg.lease.as_millis() as u64,
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            sources: inv.sources.clone(),
            topology: self.cfg.topology.clone(),
        }
    }

    /// Converges the node's pods to `a`.
    /// Applies what the reconciler decides from the assignments and the pods here.
    fn reconcile(&mut self, a: &NodeAssignments, out: &mpsc::UnboundedSender<Report>) {
        let seen: BTreeMap<PodKey, Seen> = self
            .exec
            .pods
            .iter()
            .map(|(k, p)| {
                let seen = Seen {
                    running: matches!(p.phase, PodPhase::Running),
                    holds: if p.holds_devices() {
                        devices_of(&p.spec)
                    } else {
                        Vec::new()
                    },
                };
                (*k, seen)
            })
            .collect();
        for action in self.reconciler.plan(a, &seen) {
            match action {
                Action::Stop { key, why } => self.exec.stop(&key, &why),
                Action::Gone(p) => {
                    // Asked to stop a pod that never ran here: say it is gone so the eviction
                    // completes.
                    let _ = out.send(Report::failed(
                        key_of(&p),
                        &p,
                        "not running on this node".into(),
                    ));
                }
                Action::Wait { pod, device } => tracing::info!(
                    "{} rank {} waits: {} {} is still held by a pod that is stopping",
                    pod.workload,
                    pod.rank,
                    device.0,
                    device.1
                ),
                Action::Start(p) => self.start(&p, out),
            }
        }
        let assigned: BTreeSet<PodKey> = a.pods.iter().map(key_of).collect();
        self.exec.prune(&assigned);
    }

    fn start(&mut self, p: &PodAssignment, out: &mpsc::UnboundedSender<Report>) {
        let k = key_of(p);
        match self.exec.start(p) {
            Ok(()) => {
                self.metrics.starts.inc();
                if p.run.image.is_some() {
                    // Reported once its container runs (after the pull).
                    self.awaiting_start.insert(k);
                } else {
                    let _ = out.send(Report::Started(k, p.workload.clone(), vec![p.rank]));
                }
            }
            Err(e) => {
                tracing::error!("could not start {} rank {}: {e}", p.workload, p.rank);
                let detail = format!("the agent could not start it: {e}");
                let _ = out.send(Report::failed(k, p, detail));
                self.reconciler.start_failed(k);
            }
        }
    }
}

/// Discovery on its own thread: NVML calls block, and its event wait returns as soon as a GPU
/// turns unhealthy, so the change is reported at once.
fn start_discovery(
    mut discovery: Discovery,
    mut seen: BTreeMap<(String, u32), DeviceInfo>,
    every: Duration,
) -> Result<mpsc::UnboundedReceiver<NodeInventory>, BoxError> {
    let (inv_tx, inv_rx) = mpsc::unbounded_channel::<NodeInventory>();
    std::thread::Builder::new()
        .name("discovery".into())
        .spawn(move || loop {
            discovery.watch(every);
            let mut inv = discovery.discover();
            merge_seen(&mut seen, &mut inv);
            if inv_tx.send(inv).is_err() {
                return;
            }
        })?;
    Ok(inv_rx)
}

/// The node's three connections: assignments and the lease, reports, logs.
fn node_clients(cfg: &AgentConfig) -> Result<(Client, Client, Client), BoxError> {
    let files = TlsFiles::for_identity(
        &cfg.certs,
        &Identity::Node {
            node: cfg.node.clone(),
        },
    );
    let stem = files
        .cert
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let client = || Client::new(cfg.coordinators.clone(), &cfg.certs, &stem);
    Ok((client()?, client()?, client()?))
}

/// A pod's status as users read it: `Pulling 48.0 MiB: 25%`, `Creating`. Whole percents, so a
/// pull reports at most a hundred changes.
fn describe_status(s: &containerd::run::PodStatus) -> String {
    if s.phase == "Pulling" && s.total_bytes > 0 {
        let pct = s.pulled_bytes.saturating_mul(100) / s.total_bytes;
        format!(
            "Pulling {:.1} MiB: {pct}%",
            s.total_bytes as f64 / (1024.0 * 1024.0)
        )
    } else if s.phase == "Creating" && s.image_cached {
        "Creating (image cached)".into()
    } else {
        s.phase.clone()
    }
}

/// Removes the containers in allot's namespace that no pod of this agent owns (their records
/// are gone); returns the connection, or `None` when containerd cannot be reached.
async fn sweep_containers(
    c: &ContainerdConfig,
    live: &BTreeSet<String>,
) -> Option<containerd::Containerd> {
    let ctd = match containerd::Containerd::connect(&c.socket, &c.namespace).await {
        Ok(ctd) => ctd,
        Err(e) => {
            tracing::warn!("{e}; pods with an image wait until containerd is reachable");
            return None;
        }
    };
    match ctd.containers().await {
        Ok(list) => {
            for (id, pod) in list {
                if !live.contains(&pod) {
                    tracing::info!("removing container {id}: no pod of this agent owns it ({pod})");
                    if let Err(e) = ctd.remove_container(&id, &c.snapshotter).await {
                        tracing::warn!("removing container {id}: {e}");
                    }
                }
            }
        }
        Err(e) => tracing::warn!("listing containers: {e}"),
    }
    Some(ctd)
}

/// Applies the image cache's rule every ten minutes.
async fn image_cache_task(ctd: containerd::Containerd, max_age: Duration) {
    let mut every = tokio::time::interval(Duration::from_secs(600));
    loop {
        every.tick().await;
        match containerd::pull::gc_images(&ctd, max_age, crate::shim::now_ms()).await {
            Ok(gone) if !gone.is_empty() => tracing::info!("image cache: removed {gone:?}"),
            Ok(_) => {}
            Err(e) => tracing::warn!("image cache: {e}"),
        }
    }
}

/// How long a sync waits for a change (`wait`), and how much longer its answer may take
/// before the replica holding it is given up on (`grace`).
///
/// The lease is renewed when an answer arrives and counts from when its request left. The
/// worst moment for a leader to die is just after it answered one sync and took the next: the
/// lease counts from the answered one's sending, one `wait` before; the next is given up
/// `wait + grace` later; and the sync after it carries no digest, so the new leader answers it
/// as soon as it can confirm a read. That leaves `lease - 2 × wait - grace` for the election
/// and one round trip: 2.5 s of a 5 s lease (wait 1 s, grace 0.5 s), 5 s of a 10 s one.
fn sync_timing(lease: Duration) -> (Duration, Duration) {
    let wait = (lease / 5).min(Duration::from_secs(5));
    let grace = (lease / 10).clamp(Duration::from_millis(200), Duration::from_secs(1));
    (wait, grace)
}

/// How long a node reports without its topology levels after the cluster refused them.
const TOPOLOGY_RETRY: Duration = Duration::from_secs(60);

/// Whether the cluster refused a report for its topology levels: a coordinator that does not
/// speak their protocol, or a cluster whose format is older than theirs.
fn refuses_topology(e: &ApiError) -> bool {
    e.kind == ErrorKind::Version || e.message.contains("needs format")
}

/// Holds the lease: registers, long-polls for assignments, renews the lease file.
async fn sync_task(
    cfg: AgentConfig,
    mut client: Client,
    mut report_rx: watch::Receiver<NodeReport>,
    assign_tx: watch::Sender<Option<NodeAssignments>>,
    lease_file: PathBuf,
    metrics: Arc<AgentMetrics>,
) {
    let lease = cfg.lease;
    let (wait, grace) = sync_timing(lease);
    let mut registered = false;
    let mut digest = 0u64;
    let mut backoff = Duration::from_millis(100);
    let mut seed = (std::process::id() as u64) << 20 | (shim::now_ms() as u64 & 0xfffff) | 1;
    // While the cluster does not take topology levels yet (a coordinator of the release
    // before, or a cluster not yet raised to their format), the node reports without them,
    // and tries them again now and then: an upgrade never loses a node over its topology.
    let mut topology_refused: Option<Instant> = None;
    loop {
        let retry_topology = topology_refused.is_some_and(|t| t.elapsed() >= TOPOLOGY_RETRY);
        if retry_topology {
            topology_refused = None;
        }
        if !registered || retry_topology || report_rx.has_changed().unwrap_or(false) {
            let mut r = report_rx.borrow_and_update().clone();
            if topology_refused.is_some() {
                r.topology.clear();
            }
            let with_topology = !r.topology.is_empty();
            match tokio::time::timeout(Duration::from_secs(5), client.call(Body::ReportNode(r)))
                .await
            {
                Ok(Ok(Err(e))) if with_topology && refuses_topology(&e) => {
                    tracing::warn!(
                        "the cluster does not take topology levels yet ({e}); reporting without them, and trying them again in {TOPOLOGY_RETRY:?}"
                    );
                    topology_refused = Some(Instant::now());
                    continue;
                }
                Ok(Ok(Ok(_))) => {
                    if !registered {
                        tracing::info!("node {} registered", cfg.node);
                    }
                    registered = true;
                    backoff = Duration::from_millis(100);
                }
                Ok(Ok(Err(e))) => {
                    tracing::error!("the cluster refused this node's report: {e}");
                    tokio::time::sleep(jitter(Duration::from_secs(5), &mut seed)).await;
                    continue;
                }
                Ok(Err(e)) => {
                    metrics.sync_errors.inc();
                    tracing::warn!("registering: {e}; retrying in {backoff:?}");
                    tokio::time::sleep(jitter(backoff, &mut seed)).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
                Err(_) => {
                    client.reset();
                    continue;
                }
            }
        }
        let sent_wall = shim::now_ms();
        let sent = Instant::now();
        let call = client.call(Body::AgentSync {
            node: cfg.node.clone(),
            known_digest: digest,
            wait_ms: wait.as_millis() as u32,
        });
        let res = tokio::select! {
            r = tokio::time::timeout(wait + grace, call) => r,
            _ = report_rx.changed() => {
                // The inventory changed: report it first (the report is marked unseen again).
                report_rx.mark_changed();
                continue;
            }
        };
        match res {
            Ok(Ok(Ok(Reply::Assignments(a)))) => {
                metrics.syncs.inc();
                backoff = Duration::from_millis(100);
                // The answer was confirmed by a quorum after `sent`: the lease runs from then.
                let until = sent_wall + lease.as_millis() as i64;
                if let Err(e) = shim::write_atomic(&lease_file, until.to_string().as_bytes()) {
                    tracing::error!(
                        "could not renew the lease file {}: {e}",
                        lease_file.display()
                    );
                }
                metrics.lease_renewed(sent + lease);
                if !a.registered || !a.healthy {
                    if registered {
                        tracing::warn!(
                            "the cluster counts this node as {}: {}; registering again",
                            if a.registered {
                                "unhealthy"
                            } else {
                                "unregistered"
                            },
                            a.health_reason
                        );
                    }
                    registered = false;
                }
                digest = a.digest;
                let _ = assign_tx.send(Some(a));
            }
            Ok(Ok(Ok(other))) => {
                tracing::error!("unexpected answer to a sync: {other:?}");
                tokio::time::sleep(jitter(backoff, &mut seed)).await;
            }
            Ok(Ok(Err(e))) => {
                metrics.sync_errors.inc();
                digest = 0;
                tracing::warn!("sync refused: {e}");
                if e.kind == ErrorKind::NotFound {
                    registered = false;
                }
                tokio::time::sleep(jitter(backoff, &mut seed)).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Ok(Err(e)) => {
                metrics.sync_errors.inc();
                digest = 0;
                tracing::warn!("no coordinator reachable: {e}; retrying in {backoff:?}");
                tokio::time::sleep(jitter(backoff, &mut seed)).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(_) => {
                metrics.sync_errors.inc();
                // The replica that held the wait is gone or cut off (a leader killed): the
                // next sync, wherever it lands, is answered as soon as a quorum confirms it.
                digest = 0;
                tracing::warn!("sync timed out; reconnecting");
                client.reset();
            }
        }
    }
}

/// Pods an earlier agent started that still run here. The cluster may never have heard they
/// started (that agent died before its report went out, and the workload would stay Admitted
/// for good), so they are reported again; a start the cluster already heard changes nothing.
/// Container pods still being created are reported once their container runs.
fn started_before(pods: &BTreeMap<PodKey, Pod>, awaiting: &BTreeSet<PodKey>) -> Vec<Report> {
    pods.iter()
        .filter(|(k, p)| matches!(p.phase, PodPhase::Running) && !awaiting.contains(k))
        .map(|(k, p)| Report::Started(*k, p.spec.workload.clone(), vec![p.spec.rank]))
        .collect()
}

/// Sends pod reports until the cluster acknowledges them.
async fn report_task(
    node: String,
    mut client: Client,
    mut rx: mpsc::UnboundedReceiver<Report>,
    ack: mpsc::UnboundedSender<PodKey>,
) {
    let mut seed = (std::process::id() as u64) << 16 | 7;
    while let Some(r) = rx.recv().await {
        if let Report::Progress(k, status) = r {
            let body = Body::PodProgress {
                node: node.clone(),
                workload_id: k.0,
                rank: k.2,
                status,
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), client.call(body)).await;
            continue;
        }
        let (key, body) = match r {
            Report::Started(k, workload, ranks) => (
                None,
                Body::PodsStarted {
                    node: node.clone(),
                    workload,
                    workload_id: k.0,
                    attempt: k.1,
                    ranks,
                },
            ),
            Report::Progress(..) => continue,
            Report::Exited(k, workload, exit) => (
                Some(k),
                Body::PodsExited {
                    node: node.clone(),
                    workload,
                    workload_id: k.0,
                    attempt: k.1,
                    exits: vec![exit],
                },
            ),
        };
        let mut backoff = Duration::from_millis(100);
        loop {
            match tokio::time::timeout(Duration::from_secs(5), client.call(body.clone())).await {
                Ok(Ok(Ok(_))) => break,
                Ok(Ok(Err(ApiError {
                    kind: ErrorKind::NotFound | ErrorKind::Invalid | ErrorKind::Forbidden,
                    message,
                    ..
                }))) => {
                    // The workload is gone or moved on: nothing left to tell.
                    tracing::info!("report dropped: {message}");
                    break;
                }
                Ok(Ok(Err(e))) => tracing::warn!("report refused: {e}; retrying"),
                Ok(Err(e)) => tracing::warn!("report not delivered: {e}; retrying"),
                Err(_) => {
                    tracing::warn!("report timed out; reconnecting");
                    client.reset();
                }
            }
            tokio::time::sleep(jitter(backoff, &mut seed)).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        if let Some(k) = key {
            let _ = ack.send(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent killed between starting a pod and reporting it: its successor reports every
    /// pod it finds running, except a container still being created, and nothing that ended.
    #[test]
    fn a_restarted_agent_reports_the_pods_it_found_running() {
        use crate::shim::ExitRecord;
        use allot_common::api::PodAssignment;
        let spec = |workload: &str, workload_id: u64, rank: u32| PodAssignment {
            workload: workload.into(),
            workload_id,
            attempt: 2,
            rank,
            ..crate::executor::test_assignment(1000)
        };
        let exit = ExitRecord {
            code: Some(0),
            signal: None,
            succeeded: true,
            lease_expired: false,
            stopped: false,
            lost: false,
            detail: String::new(),
            ended_ms: 0,
        };
        let mut pods = BTreeMap::new();
        for (w, id, rank, phase) in [
            ("running", 1, 0, PodPhase::Running),
            ("running", 1, 1, PodPhase::Running),
            ("creating", 2, 0, PodPhase::Running),
            ("stopping", 3, 0, PodPhase::Stopping),
            ("ended", 4, 0, PodPhase::Exited(exit)),
            ("lost", 5, 0, PodPhase::Lost("gone".into())),
        ] {
            let s = spec(w, id, rank);
            pods.insert(key_of(&s), Pod::found(s, phase));
        }
        let awaiting = BTreeSet::from([(2, 2, 0)]);
        let told: Vec<String> = started_before(&pods, &awaiting)
            .into_iter()
            .map(|r| format!("{r:?}"))
            .collect();
        assert_eq!(
            told,
            [
                r#"Started((1, 2, 0), "running", [0])"#,
                r#"Started((1, 2, 1), "running", [1])"#
            ]
        );
    }

    #[test]
    fn vanished_devices_stay_reported_unhealthy() {
        let gpu = |i: u32| DeviceInfo {
            resource: "gpu".into(),
            index: i,
            id: format!("GPU-{i}"),
            healthy: true,
            ..Default::default()
        };
        let mut seen = BTreeMap::new();
        let mut cap = allot_common::Resources::new();
        cap.set(allot_common::ResourceName::gpu(), 2);
        let mut inv = NodeInventory {
            instance_type: "ml.g5.12xlarge".into(),
            capacity: cap.clone(),
            devices: vec![gpu(0), gpu(1)],
            warnings: vec![],
            sources: Default::default(),
            partitions: Vec::new(),
        };
        merge_seen(&mut seen, &mut inv);
        assert_eq!(inv.devices.len(), 2);
        cap.set(allot_common::ResourceName::gpu(), 1);
        let mut later = NodeInventory {
            instance_type: "ml.g5.12xlarge".into(),
            capacity: cap,
            devices: vec![gpu(0)],
            warnings: vec![],
            sources: Default::default(),
            partitions: Vec::new(),
        };
        merge_seen(&mut seen, &mut later);
        assert_eq!(later.devices.len(), 2);
        assert!(!later.devices[1].healthy);
        assert_eq!(later.devices[1].reason, "no longer discovered");
        assert_eq!(later.capacity.get(&allot_common::ResourceName::gpu()), 2);
    }

    #[test]
    fn pull_progress_reads_in_whole_percents() {
        let s = containerd::run::PodStatus {
            phase: "Pulling".into(),
            pulled_bytes: 12 << 20,
            total_bytes: 48 << 20,
            image_cached: false,
        };
        assert_eq!(describe_status(&s), "Pulling 48.0 MiB: 25%");
        let s = containerd::run::PodStatus {
            phase: "Creating".into(),
            image_cached: true,
            ..Default::default()
        };
        assert_eq!(describe_status(&s), "Creating (image cached)");
    }

    #[test]
    fn a_sync_given_up_leaves_half_the_lease_for_the_election() {
        for (lease_ms, wait_ms, grace_ms) in [
            (2_000, 400, 200),
            (5_000, 1_000, 500),
            (10_000, 2_000, 1_000),
            (60_000, 5_000, 1_000),
        ] {
            let (wait, grace) = sync_timing(Duration::from_millis(lease_ms));
            assert_eq!(
                (wait.as_millis(), grace.as_millis()),
                (wait_ms, grace_ms),
                "lease {lease_ms} ms"
            );
            let left = lease_ms as u128 - 2 * wait_ms - grace_ms;
            assert!(
                left * 2 >= lease_ms as u128,
                "lease {lease_ms} ms leaves {left} ms"
            );
        }
    }

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half() {
        let mut seed = 42;
        for _ in 0..100 {
            let d = jitter(Duration::from_millis(1000), &mut seed);
            assert!(d >= Duration::from_millis(500) && d <= Duration::from_millis(1500));
        }
    }
}

//! The executor: pods as processes, each under its own shim (`shim.rs`), with its devices
//! made visible only to it, and a directory per pod that outlives the agent.
//!
//! A pod is named by (workload id, attempt, rank): `pods/<id>-<attempt>-<rank>/` holds
//! `spec.json` (the assignment it was started for), `shim.lock` (the claim its shim holds while
//! it lives), `shim.pid`, `child.pid`, `output.log`, and once it ends `exit.json`, then
//! `reported` when the coordinator has acknowledged the exit. A restarted agent rebuilds its
//! table from these directories: a pod whose claim is held is adopted, a pod that ended is
//! reported, a pod nothing runs is recorded lost (so a shim started just before the earlier
//! agent died cannot start it late) and reported.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use allot_common::api::{PodAssignment, PodExit};

use crate::containerd::run::{ContainerJob, JobMount, JOB_FILE};
use crate::containerd::ContainerdConfig;
use crate::inventory::sysfs::MAX_CORES_PER_DEVICE;
use crate::inventory::Partition;
use crate::shim::{self, ExitRecord, ShimArgs};

pub use crate::reconcile::{key_of, PodKey};

#[derive(Debug)]
pub enum PodPhase {
    Running,
    /// Asked to stop (SIGTERM sent to the shim).
    Stopping,
    Exited(ExitRecord),
    /// The shim vanished without recording an exit (the node rebooted, someone killed it).
    Lost(String),
}

#[derive(Debug)]
pub struct Pod {
    pub spec: PodAssignment,
    pub dir: PathBuf,
    pub shim_pid: u32,
    child: Option<Child>,
    pub phase: PodPhase,
    pub reported: bool,
}

impl Pod {
    /// A pod as an agent finds it on disk after a restart, for tests.
    #[cfg(test)]
    pub(crate) fn found(spec: PodAssignment, phase: PodPhase) -> Pod {
        Pod {
            dir: PathBuf::from(format!("/nonexistent/{}-{}", spec.workload, spec.rank)),
            spec,
            shim_pid: 0,
            child: None,
            phase,
            reported: false,
        }
    }

    pub fn holds_devices(&self) -> bool {
        matches!(self.phase, PodPhase::Running | PodPhase::Stopping)
    }

    /// The exit to report to the coordinator, once the pod ended.
    pub fn exit(&self) -> Option<PodExit> {
        match &self.phase {
            PodPhase::Exited(r) => Some(PodExit {
                rank: self.spec.rank,
                succeeded: r.succeeded,
                lost: r.lease_expired || r.lost,
                detail: r.detail.clone(),
                exit_code: r.code.or(r.signal.map(|s| 128 + s)),
            }),
            PodPhase::Lost(why) => Some(PodExit {
                rank: self.spec.rank,
                succeeded: false,
                lost: true,
                detail: why.clone(),
                exit_code: None,
            }),
            _ => None,
        }
    }
}

/// Where and how pods are started.
#[derive(Clone, Debug)]
pub struct ExecConfig {
    pub node: String,
    pub data_dir: PathBuf,
    /// The program that runs `agent-shim` (this binary).
    pub shim_program: PathBuf,
    pub lease_ms: u64,
    /// Cores per Neuron device (for `NEURON_RT_VISIBLE_CORES`).
    pub neuron_cores_per_device: u32,
    /// cgroup v2 directory under which pods get `cpu.max` / `memory.max`; `None`: no limits.
    pub cgroup_root: Option<PathBuf>,
    /// Where workloads with an image run (the `containerd` driver); `None`: this node runs
    /// processes only, and refuses workloads with an image.
    pub containerd: Option<ContainerdConfig>,
}

pub struct Executor {
    cfg: ExecConfig,
    pub pods: BTreeMap<PodKey, Pod>,
    cgroup_warned: bool,
    /// The node's GPU partitions by (profile, index): what a pod's partition indices stand
    /// for (from the last inventory).
    partitions: BTreeMap<(String, u32), Partition>,
}

/// Default seconds between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE_SECONDS: u32 = 30;

impl Executor {
    pub fn lease_file(&self) -> PathBuf {
        self.cfg.data_dir.join("lease")
    }

    fn pods_dir(&self) -> PathBuf {
        self.cfg.data_dir.join("pods")
    }

    /// Opens the executor, finding the pods an earlier agent left.
    pub fn open(cfg: ExecConfig) -> std::io::Result<Executor> {
        fs::create_dir_all(cfg.data_dir.join("pods"))?;
        let mut ex = Executor {
            cfg,
            pods: BTreeMap::new(),
            cgroup_warned: false,
            partitions: BTreeMap::new(),
        };
        ex.recover()?;
        Ok(ex)
    }

    fn recover(&mut self) -> std::io::Result<()> {
        for entry in fs::read_dir(self.pods_dir())? {
            let dir = entry?.path();
            let Ok(spec_bytes) = fs::read(dir.join("spec.json")) else {
                continue;
            };
            let Ok(spec) = serde_json::from_slice::<PodAssignment>(&spec_bytes) else {
                tracing::warn!("{}: unreadable spec.json; ignored", dir.display());
                continue;
            };
            let reported = dir.join("reported").exists();
            let (phase, shim_pid, child) = self.found(&spec, &dir);
            let key = key_of(&spec);
            self.pods.insert(
                key,
                Pod {
                    spec,
                    dir,
                    shim_pid,
                    child,
                    phase,
                    reported,
                },
            );
        }
        Ok(())
    }

    /// What became of a pod an earlier agent started: it ended (its record), a shim still runs
    /// it (its claim is held), or nothing does. A shim the earlier agent spawned just before it
    /// died may not have taken the claim yet: the pod is then recorded lost while this agent
    /// holds the claim, and that shim, finding the record, does not start it.
    fn found(&mut self, spec: &PodAssignment, dir: &Path) -> (PodPhase, u32, Option<Child>) {
        if let Some(r) = read_exit(dir) {
            return (PodPhase::Exited(r), 0, None);
        }
        let what = format!(
            "{} rank {} (attempt {})",
            spec.workload, spec.rank, spec.attempt
        );
        let claim = match shim::try_claim(dir) {
            Ok(Some(claim)) => claim,
            Ok(None) => {
                let pid = wait_for_shim_pid(dir);
                tracing::info!("found {what} still running under shim {pid}");
                return (PodPhase::Running, pid, None);
            }
            Err(e) => {
                // Without a claim to ask, a live shim is trusted by its pid alone.
                tracing::warn!("{}: {e}", dir.join(shim::CLAIM_FILE).display());
                return match shim_pid_of(dir) {
                    Some(pid) => (PodPhase::Running, pid, None),
                    None => (PodPhase::Lost(GONE_AT_RESTART.into()), 0, None),
                };
            }
        };
        // A shim of an earlier version runs without a claim.
        if let Some(pid) = shim_pid_of(dir) {
            tracing::info!("found {what} still running under shim {pid}");
            return (PodPhase::Running, pid, None);
        }
        // It may have ended between the first look and the claim.
        if let Some(r) = read_exit(dir) {
            return (PodPhase::Exited(r), 0, None);
        }
        if spec.run.image.is_some() && self.cfg.containerd.is_some() {
            // Its container may still run: a new shim adopts it, and takes the claim.
            drop(claim);
            if let Some((pid, c)) = self.readopt(spec, dir) {
                tracing::info!("{what}: its shim is gone; shim {pid} adopts its container");
                return (PodPhase::Running, pid, Some(c));
            }
            return (PodPhase::Lost(GONE_AT_RESTART.into()), 0, None);
        }
        let r = ExitRecord {
            code: None,
            signal: None,
            succeeded: false,
            lease_expired: false,
            stopped: false,
            lost: true,
            detail: GONE_AT_RESTART.into(),
            ended_ms: shim::now_ms(),
        };
        if let Err(e) = shim::write_exit(dir, &r) {
            tracing::warn!("{what}: recording it lost: {e}");
        }
        drop(claim);
        (PodPhase::Exited(r), 0, None)
    }

    /// The environment a pod's program sees: its devices, its rank in the gang, its identity.
    pub fn environment(&self, a: &PodAssignment) -> BTreeMap<String, String> {
        let mut env = a.run.env.clone();
        let list = |v: &[u8]| {
            v.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        // Whole GPUs by index, then partitions by their MIG UUID, as CUDA takes them.
        let mut visible: Vec<String> = a
            .devices
            .get("gpu")
            .into_iter()
            .flatten()
            .map(|i| i.to_string())
            .collect();
        visible.extend(
            self.partitions_of(a)
                .unwrap_or_default()
                .into_iter()
                .map(|p| p.uuid),
        );
        let gpus = visible.join(",");
        env.insert("CUDA_VISIBLE_DEVICES".into(), gpus.clone());
        env.insert(
            "NVIDIA_VISIBLE_DEVICES".into(),
            if gpus.is_empty() { "none".into() } else { gpus },
        );
        if let Some(n) = a.devices.get("neuron") {
            // Discovery refuses counts above MAX_CORES_PER_DEVICE; the clamp keeps a count set
            // some other way from overflowing `index × per` (255 × 256 + 256 fits a u32).
            let per = self
                .cfg
                .neuron_cores_per_device
                .clamp(1, MAX_CORES_PER_DEVICE);
            let cores: Vec<String> = n
                .iter()
                .flat_map(|d| {
                    let first = u32::from(*d) * per;
                    first..first + per
                })
                .map(|c| c.to_string())
                .collect();
            env.insert("NEURON_RT_VISIBLE_CORES".into(), cores.join(","));
        }
        if let Some(e) = a.devices.get("efa") {
            env.insert("ALLOT_EFA_DEVICES".into(), list(e));
        }
        env.insert("MASTER_ADDR".into(), a.master_addr.clone());
        env.insert("MASTER_PORT".into(), a.master_port.to_string());
        env.insert("WORLD_SIZE".into(), a.world_size.to_string());
        env.insert("RANK".into(), a.rank.to_string());
        env.insert("LOCAL_RANK".into(), a.local_rank.to_string());
        env.insert("ALLOT_WORKLOAD".into(), a.workload.clone());
        env.insert("ALLOT_NODE".into(), self.cfg.node.clone());
        env.insert("ALLOT_TEAM".into(), a.team.clone());
        env.insert("ALLOT_ATTEMPT".into(), a.attempt.to_string());
        env
    }

    /// Starts a pod under a new shim. The shim runs in its own session so that it outlives the
    /// agent; only the lease file and SIGTERM stop it.
    pub fn start(&mut self, a: &PodAssignment) -> Result<(), String> {
        let key = key_of(a);
        if self.pods.contains_key(&key) {
            return Ok(());
        }
        // Refused before anything is written: limits that cannot be expressed mean a bogus
        // assignment, whether or not this node applies limits; so is a partition not here.
        let limits = cgroup_limits(a)?;
        self.partitions_of(a)?;
        let dir = self
            .pods_dir()
            .join(format!("{}-{}-{}", a.workload_id, a.attempt, a.rank));
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let spec = serde_json::to_vec_pretty(a).map_err(|e| e.to_string())?;
        shim::write_atomic(&dir.join("spec.json"), &spec)
            .map_err(|e| format!("writing {}: {e}", dir.display()))?;
        let container = a.run.image.is_some();
        let program = if container {
            self.write_container_job(a, &dir)?;
            Vec::new()
        } else if a.run.command.is_empty() && a.run.args.is_empty() {
            // A workload with no command only holds its allocation until it is stopped.
            vec!["sleep".to_string(), "infinity".to_string()]
        } else {
            a.run.program()
        };
        let args = ShimArgs {
            dir: dir.clone(),
            lease_file: self.lease_file(),
            lease_ms: self.cfg.lease_ms,
            grace_ms: u64::from(a.run.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS)) * 1000,
            // containerd gives a container its own cgroup with the limits in its spec.
            cgroup: if container {
                None
            } else {
                self.cgroup_for(&limits, &dir)
            },
            workdir: if container {
                None
            } else {
                a.run.workdir.as_ref().map(PathBuf::from)
            },
            container,
            adopt: false,
            program,
        };
        let child = self.spawn_shim(a, &args, "w")?;
        let pid = child.id();
        tracing::info!(
            "started {} rank {} (attempt {}) with devices {:?}",
            a.workload,
            a.rank,
            a.attempt,
            a.devices
        );
        self.pods.insert(
            key,
            Pod {
                spec: a.clone(),
                dir,
                shim_pid: pid,
                child: Some(child),
                phase: PodPhase::Running,
                reported: false,
            },
        );
        Ok(())
    }

    /// Starts `allot agent-shim` in its own session (so it outlives the agent) and records its
    /// pid; `log_mode` `w` starts the shim's log afresh, `a` appends (a shim that adopts).
    fn spawn_shim(
        &self,
        a: &PodAssignment,
        args: &ShimArgs,
        log_mode: &str,
    ) -> Result<Child, String> {
        let dir = &args.dir;
        let log = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(log_mode == "a")
            .truncate(log_mode != "a")
            .open(dir.join("shim.log"));
        let mut cmd = Command::new(&self.cfg.shim_program);
        cmd.arg("agent-shim")
            .args(args.to_args())
            .env_clear()
            .envs(inherited_env())
            .envs(self.environment(a))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.map(Stdio::from).unwrap_or_else(|_| Stdio::null()));
        // SAFETY: setsid(2) in the child before exec; async-signal-safe, touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting the shim {}: {e}", self.cfg.shim_program.display()))?;
        // The shim writes its pid itself once it holds the pod's claim: one writer, and a pid
        // on disk always belongs to a shim that got that far.
        Ok(child)
    }

    /// A container pod whose shim is gone (it died with the agent's container on Kubernetes,
    /// or was killed) gets a new shim that adopts its container: it supervises the task that
    /// still runs, records the exit of one that ended, or says the container is gone.
    fn readopt(&mut self, spec: &PodAssignment, dir: &Path) -> Option<(u32, Child)> {
        self.cfg.containerd.as_ref()?;
        let args = ShimArgs {
            dir: dir.to_path_buf(),
            lease_file: self.lease_file(),
            lease_ms: self.cfg.lease_ms,
            grace_ms: u64::from(spec.run.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS)) * 1000,
            cgroup: None,
            workdir: None,
            container: true,
            adopt: true,
            program: Vec::new(),
        };
        match self.spawn_shim(spec, &args, "a") {
            Ok(child) => Some((child.id(), child)),
            Err(e) => {
                tracing::warn!("could not adopt the container of {}: {e}", dir.display());
                None
            }
        }
    }

    /// Writes what the shim needs to run the pod as a container (`container.json`, readable by
    /// root only: it may hold the team's registry credentials).
    fn write_container_job(&self, a: &PodAssignment, dir: &Path) -> Result<(), String> {
        let Some(c) = &self.cfg.containerd else {
            return Err(format!(
                "it runs from image {} and this node's agent runs pods as processes; start the \
                 agent with --driver containerd to run images",
                a.run.image.as_deref().unwrap_or("")
            ));
        };
        let hostname: String = format!("{}-{}", a.workload, a.rank)
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() || ch == '-' {
                    ch.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(63)
            .collect();
        let job = ContainerJob {
            socket: c.socket.clone(),
            namespace: c.namespace.clone(),
            snapshotter: c.snapshotter.clone(),
            plain_http: c.plain_http.clone(),
            dev_dir: c.dev_dir.clone(),
            cdi_dirs: c.cdi_dirs.clone(),
            sysfs_root: Some(c.sysfs_root.clone()),
            image: a.run.image.clone().unwrap_or_default(),
            credentials: a.registry_credentials.clone(),
            command: a.run.command.clone(),
            args: a.run.args.clone(),
            env: self.environment(a),
            workdir: a.run.workdir.clone(),
            user: a.run.user.clone(),
            mounts: a
                .run
                .mounts
                .iter()
                .map(|m| JobMount {
                    host_path: m.host_path.clone(),
                    container_path: m.container_path.clone(),
                    read_only: m.read_only,
                })
                .collect(),
            shm_bytes: a.run.shm_size.unwrap_or(0),
            host_network: a.run.host_network,
            memory_limit: a.requests.get(&allot_common::ResourceName::memory()),
            cpu_millis: a.requests.get(&allot_common::ResourceName::cpu()),
            devices: a.devices.clone(),
            hostname,
            lock_dir: self.cfg.data_dir.clone(),
            partitions: self.partitions_of(a)?,
            mig_minors: c.mig_minors.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&job).map_err(|e| e.to_string())?;
        let path = dir.join(JOB_FILE);
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            f.write_all(&bytes)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Asks a pod to stop: SIGTERM to its shim, which gives the program its grace period.
    pub fn stop(&mut self, key: &PodKey, why: &str) {
        if let Some(p) = self.pods.get_mut(key) {
            if matches!(p.phase, PodPhase::Running) {
                tracing::info!(
                    "stopping {} rank {} (attempt {}): {why}",
                    p.spec.workload,
                    p.spec.rank,
                    p.spec.attempt
                );
                if p.shim_pid == 0 {
                    p.shim_pid = shim_pid_of(&p.dir).unwrap_or(0);
                }
                if p.shim_pid != 0 {
                    // SAFETY: kill(2) on the shim's pid; no memory is touched.
                    unsafe {
                        libc::kill(p.shim_pid as i32, libc::SIGTERM);
                    }
                }
                p.phase = PodPhase::Stopping;
            }
        }
    }

    /// Notices pods that ended; returns their keys.
    pub fn poll(&mut self) -> Vec<PodKey> {
        let mut ended = Vec::new();
        for (k, p) in self.pods.iter_mut() {
            if !p.holds_devices() {
                continue;
            }
            let shim_done = match p.child.as_mut() {
                Some(c) => !matches!(c.try_wait(), Ok(None)),
                None => !shim_alive(p.shim_pid, &p.dir),
            };
            if let Some(r) = read_exit(&p.dir) {
                p.phase = PodPhase::Exited(r);
                ended.push(*k);
            } else if shim_done && shim::claim_held(&p.dir) {
                // Our shim is gone but another runs the pod (one an earlier agent started, which
                // won the claim over ours): follow that one.
                if let Some(mut c) = p.child.take() {
                    let _ = c.wait();
                }
                p.shim_pid = shim_pid_of(&p.dir).unwrap_or(0);
            } else if shim_done {
                // The shim ended without a record: it was killed.
                p.phase = PodPhase::Lost("its shim was killed before the pod ended".into());
                ended.push(*k);
            }
        }
        for k in &ended {
            if let Some(c) = self.pods.get_mut(k).and_then(|p| p.child.as_mut()) {
                let _ = c.wait();
            }
        }
        ended
    }

    /// Records that the coordinator acknowledged a pod's exit.
    pub fn mark_reported(&mut self, key: &PodKey) {
        if let Some(p) = self.pods.get_mut(key) {
            p.reported = true;
            let _ = fs::write(p.dir.join("reported"), b"");
        }
    }

    /// Forgets pods that ended, were reported and are no longer assigned.
    pub fn prune(&mut self, assigned: &BTreeSet<PodKey>) {
        let gone: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(k, p)| p.reported && !p.holds_devices() && !assigned.contains(k))
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Some(p) = self.pods.remove(&k) {
                // Keep the log for `allot logs`; drop the bookkeeping.
                let logs = self.cfg.data_dir.join("logs");
                let _ = fs::create_dir_all(&logs);
                let _ = fs::rename(p.dir.join(shim::LOG_FILE), logs.join(log_name(&p.spec)));
                let _ = fs::remove_dir_all(&p.dir);
            }
        }
    }

    /// Stops every pod and waits for them (used when the agent is told to stop its pods on exit).
    pub fn stop_all(&mut self, why: &str) {
        let keys: Vec<PodKey> = self.pods.keys().copied().collect();
        for k in &keys {
            self.stop(k, why);
        }
    }

    pub fn set_neuron_cores(&mut self, cores: u32) {
        self.cfg.neuron_cores_per_device = cores;
    }

    /// The node's GPU partitions, as the last inventory found them.
    pub fn set_partitions(&mut self, parts: &[Partition]) {
        self.partitions = parts
            .iter()
            .map(|p| ((p.resource.clone(), p.index), p.clone()))
            .collect();
    }

    /// The partitions `a` is given, in (profile, index) order; an index this node does not
    /// have is an error naming the ones it has.
    pub fn partitions_of(&self, a: &PodAssignment) -> Result<Vec<Partition>, String> {
        let mut out = Vec::new();
        for (res, indices) in &a.devices {
            if allot_common::mig::profile(res).is_none() {
                continue;
            }
            for i in indices {
                match self.partitions.get(&(res.clone(), u32::from(*i))) {
                    Some(p) => out.push(p.clone()),
                    None => {
                        let have: Vec<String> = self
                            .partitions
                            .keys()
                            .map(|(r, i)| format!("{r} {i}"))
                            .collect();
                        return Err(format!(
                            "it is given GPU partition {res} {i}, which this node does not have \
                             (its partitions: {})",
                            if have.is_empty() {
                                "none".to_string()
                            } else {
                                have.join(", ")
                            }
                        ));
                    }
                }
            }
        }
        Ok(out)
    }

    fn cgroup_for(&mut self, limits: &[(&'static str, String)], dir: &Path) -> Option<PathBuf> {
        let root = self.cfg.cgroup_root.clone()?;
        let name = dir.file_name()?.to_string_lossy().to_string();
        match make_cgroup(&root, &name, limits) {
            Ok(p) => Some(p),
            Err(e) => {
                if !self.cgroup_warned {
                    self.cgroup_warned = true;
                    tracing::warn!(
                        "pods run without cpu and memory limits: {e} (limits need a writable cgroup v2 directory, --cgroup-root)"
                    );
                }
                None
            }
        }
    }
}

/// The log file of a workload's pod on this node, live or finished: the given attempt, else the
/// latest one. With the workload's id, only that run's (a name is used again once its workload
/// finished); without, the latest under the name.
pub fn find_log(
    data_dir: &Path,
    workload: &str,
    workload_id: Option<u64>,
    rank: u32,
    attempt: Option<u32>,
) -> Option<PathBuf> {
    // Ranked by (workload id, attempt): without an id, the latest run's latest attempt.
    let mut best: Option<((u64, u32), PathBuf)> = None;
    let mut consider = |id: u64, n: u32, p: PathBuf| {
        if attempt.is_some_and(|a| a != n) || workload_id.is_some_and(|w| w != id) {
            return;
        }
        if best.as_ref().is_none_or(|(b, _)| (id, n) > *b) {
            best = Some(((id, n), p));
        }
    };
    for e in fs::read_dir(data_dir.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(b) = fs::read(e.path().join("spec.json")) else {
            continue;
        };
        if let Ok(spec) = serde_json::from_slice::<PodAssignment>(&b) {
            if spec.workload == workload && spec.rank == rank {
                consider(
                    spec.workload_id,
                    spec.attempt,
                    e.path().join(shim::LOG_FILE),
                );
            }
        }
    }
    // Finished pods' logs: NAME.idID.rankR.attemptN.log (NAME.rankR.attemptN.log before ids).
    let rank_part = format!("rank{rank}.attempt");
    for e in fs::read_dir(data_dir.join("logs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name
            .strip_prefix(workload)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(".log"))
        else {
            continue;
        };
        let (id, rest) = match rest.strip_prefix("id").and_then(|r| r.split_once('.')) {
            Some((id, rest)) => match id.parse::<u64>() {
                Ok(id) => (id, rest),
                Err(_) => continue,
            },
            None => (0, rest),
        };
        if let Some(n) = rest
            .strip_prefix(&rank_part)
            .and_then(|n| n.parse::<u32>().ok())
        {
            consider(id, n, e.path());
        }
    }
    best.map(|(_, p)| p)
}

fn log_name(a: &PodAssignment) -> String {
    format!(
        "{}.id{}.rank{}.attempt{}.log",
        a.workload, a.workload_id, a.rank, a.attempt
    )
}

/// The variables a pod inherits from the agent's environment (the rest is cleared so that one
/// pod's settings never leak into another).
fn inherited_env() -> Vec<(String, String)> {
    ["PATH", "HOME", "LANG", "LD_LIBRARY_PATH", "TMPDIR", "USER"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// cgroup v2 limits for one pod: `cpu.max` as quota and period (millicores × 100 µs), and
/// `memory.max` in bytes. A cpu request whose quota overflows is an error naming the request
/// and the largest one accepted.
pub fn cgroup_limits(a: &PodAssignment) -> Result<Vec<(&'static str, String)>, String> {
    let mut out = Vec::new();
    let cpu = a.requests.get(&allot_common::ResourceName::cpu());
    if cpu > 0 {
        let quota = cpu.checked_mul(100).ok_or_else(|| {
            format!(
                "its cpu request of {cpu} millicores does not fit a cgroup cpu.max quota; at \
                 most {} millicores can be limited",
                i64::MAX / 100
            )
        })?;
        out.push(("cpu.max", format!("{quota} 100000")));
    }
    let mem = a.requests.get(&allot_common::ResourceName::memory());
    if mem > 0 {
        out.push(("memory.max", mem.to_string()));
    }
    Ok(out)
}

fn make_cgroup(
    root: &Path,
    name: &str,
    limits: &[(&'static str, String)],
) -> Result<PathBuf, String> {
    if !root.join("cgroup.controllers").exists() {
        return Err(format!("{} is not a cgroup v2 directory", root.display()));
    }
    let dir = root.join(name);
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (file, value) in limits {
        fs::write(dir.join(file), value)
            .map_err(|e| format!("writing {value} to {}: {e}", dir.join(file).display()))?;
    }
    Ok(dir)
}

/// Why a pod that nothing runs any more after an agent restart is reported lost.
const GONE_AT_RESTART: &str =
    "its process was gone when the agent restarted, with no exit recorded";

/// The pid in `dir`'s `shim.pid`, when it is a live shim of that pod.
fn shim_pid_of(dir: &Path) -> Option<u32> {
    let pid = fs::read_to_string(dir.join(shim::SHIM_PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    shim_alive(pid, dir).then_some(pid)
}

/// The pid of the shim that holds `dir`'s claim; it writes it right after taking the claim, so
/// the wait is short. 0 if it never shows (the pid is looked up again when it is needed).
fn wait_for_shim_pid(dir: &Path) -> u32 {
    for _ in 0..50 {
        if let Some(pid) = shim_pid_of(dir) {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    0
}

fn read_exit(dir: &Path) -> Option<ExitRecord> {
    let b = fs::read(dir.join(shim::EXIT_FILE)).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Whether `pid` is a live shim of the pod in `dir` (guards against pid reuse).
fn shim_alive(pid: u32, dir: &Path) -> bool {
    if pid == 0 {
        return false;
    }
    match fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmd) => {
            let cmd = String::from_utf8_lossy(&cmd);
            let zombie = fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(false);
            !zombie && cmd.contains("agent-shim") && cmd.contains(&*dir.to_string_lossy())
        }
        Err(_) => false,
    }
}

/// A one-pod assignment asking `cpu` millicores and 1 GiB, for tests here and in the agent.
#[cfg(test)]
pub(crate) fn test_assignment(cpu: i64) -> PodAssignment {
    use allot_common::api::RunSpec;
    use allot_common::{ResourceName, Resources};
    let mut requests = Resources::default();
    requests.set(ResourceName::cpu(), cpu);
    requests.set(ResourceName::memory(), 1 << 30);
    PodAssignment {
        workload: "w".into(),
        workload_id: 7,
        attempt: 1,
        team: "team-a".into(),
        rank: 0,
        local_rank: 0,
        world_size: 1,
        pod_set: "main".into(),
        devices: BTreeMap::new(),
        requests,
        master_addr: "127.0.0.1".into(),
        master_port: 29500,
        run: RunSpec::default(),
        stop: None,
        registry_credentials: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor(dir: &Path, cores: u32) -> Executor {
        Executor::open(ExecConfig {
            node: "n1".into(),
            data_dir: dir.to_path_buf(),
            shim_program: PathBuf::from("/nonexistent/allot"),
            lease_ms: 10_000,
            neuron_cores_per_device: cores,
            cgroup_root: None,
            containerd: None,
        })
        .unwrap()
    }

    #[test]
    fn cpu_limits_that_overflow_refuse_the_pod() {
        assert_eq!(
            cgroup_limits(&test_assignment(1500)).unwrap(),
            [
                ("cpu.max", "150000 100000".to_string()),
                ("memory.max", (1u64 << 30).to_string())
            ]
        );
        let max = i64::MAX / 100;
        assert!(cgroup_limits(&test_assignment(max)).is_ok());
        let e = cgroup_limits(&test_assignment(max + 1)).unwrap_err();
        assert!(
            e.contains(&format!("{} millicores", max + 1)) && e.contains(&format!("at most {max}")),
            "{e}"
        );
        // start() refuses it before writing anything or running the shim.
        let dir = tempfile::tempdir().unwrap();
        let mut ex = executor(dir.path(), 0);
        let e = ex.start(&test_assignment(i64::MAX)).unwrap_err();
        assert!(e.contains(&i64::MAX.to_string()), "{e}");
        assert!(ex.pods.is_empty());
        assert_eq!(fs::read_dir(ex.pods_dir()).unwrap().count(), 0);
    }

    /// A pod directory as `start` leaves it before its shim runs.
    fn pod_dir(data: &Path) -> (PathBuf, PodKey) {
        let a = test_assignment(1000);
        let dir = data.join("pods").join("7-1-0");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("spec.json"), serde_json::to_vec(&a).unwrap()).unwrap();
        (dir, key_of(&a))
    }

    #[test]
    fn a_pod_whose_claim_is_held_is_adopted_even_before_its_shim_wrote_its_pid() {
        let data = tempfile::tempdir().unwrap();
        let (dir, key) = pod_dir(data.path());
        // A shim that holds the claim and has not written its pid yet (the earlier agent died
        // right after starting it): a process whose command line names it a shim of this pod.
        let claim = shim::try_claim(&dir).unwrap().expect("free");
        let mut fake = Command::new("sh")
            .args(["-c", "sleep 30; true", "agent-shim"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = fake.id();
        let late = dir.join(shim::SHIM_PID_FILE);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            shim::write_atomic(&late, pid.to_string().as_bytes()).unwrap();
        });
        let mut ex = executor(data.path(), 0);
        writer.join().unwrap();
        let p = &ex.pods[&key];
        assert!(matches!(p.phase, PodPhase::Running), "{:?}", p.phase);
        assert_eq!(p.shim_pid, pid);
        assert!(!dir.join(shim::EXIT_FILE).exists());
        assert!(ex.poll().is_empty());
        // Once the shim is gone and its claim with it, the pod ended without a record.
        // SAFETY: kill(2) on the test's own process group (sh and its sleep).
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
        fake.wait().unwrap();
        assert!(ex.poll().is_empty(), "the claim is still held");
        drop(claim);
        assert_eq!(ex.poll(), vec![key]);
        assert!(ex.pods[&key].exit().unwrap().lost);
    }

    #[test]
    fn a_pod_nothing_runs_is_recorded_lost_and_a_late_shim_does_not_start_it() {
        let data = tempfile::tempdir().unwrap();
        let (dir, key) = pod_dir(data.path());
        let ex = executor(data.path(), 0);
        let exit = ex.pods[&key].exit().expect("ended");
        assert!(exit.lost && !exit.succeeded, "{exit:?}");
        assert!(
            exit.detail.contains("gone when the agent restarted"),
            "{exit:?}"
        );
        assert!(read_exit(&dir).is_some_and(|r| r.lost));
        // The shim the earlier agent started just before it died gets there now.
        let marker = dir.join("ran");
        let marker_arg = marker.display().to_string();
        let lease = data.path().join("lease");
        let args = shim::test_args(&dir, &lease, &["touch", &marker_arg]);
        assert_eq!(shim::run(&args), shim::EXIT_CLAIMED);
        assert!(!marker.exists(), "the late shim started the pod");
        // A second agent restart finds the same record.
        let exit2 = executor(data.path(), 0).pods[&key].exit().expect("ended");
        assert_eq!(exit2, exit);
    }

    #[test]
    fn neuron_core_numbers_cannot_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = test_assignment(1000);
        a.devices.insert("neuron".into(), vec![1, 255]);
        let env = executor(dir.path(), 2).environment(&a);
        assert_eq!(env["NEURON_RT_VISIBLE_CORES"], "2,3,510,511");
        // A count above the limit (discovery refuses those) is clamped, not multiplied.
        let env = executor(dir.path(), u32::MAX).environment(&a);
        let cores: Vec<&str> = env["NEURON_RT_VISIBLE_CORES"].split(',').collect();
        assert_eq!(cores.len(), 2 * MAX_CORES_PER_DEVICE as usize);
        assert_eq!(cores.last(), Some(&"65535"));
    }
}

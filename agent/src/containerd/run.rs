//! One pod as a container, run by the pod's shim (`allot agent-shim --container`): pull the
//! image, create the container and its task, wait for it while watching the node's lease and
//! the agent's stop signal, then record how it ended in `exit.json` and remove the container.
//!
//! The shim outlives the agent as it does for processes, so the same rules hold: a restarted
//! agent adopts the pod through its shim; an expired lease stops the container; SIGTERM to the
//! shim (an eviction) sends SIGTERM to the container's first process, then SIGKILL to all of
//! its processes after the grace period. Output goes to the pod's `output.log`, written by
//! containerd's runtime shim itself, so `allot logs` reads it as for processes.
//!
//! containerd may go away while a container runs (stopped, crashed, upgraded): the container
//! goes on under its runtime shim, and so does the pod's shim, which then watches and signals
//! the container's first process itself (`task_process`) until containerd is back. An expired
//! lease or a stop still ends the container; an end while containerd is away is recorded with
//! its exit code unknown, and the container is removed once containerd returns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use super::output::{self, OutputEnd};
use super::registry::Credentials;
use super::spec::{self, BindMount, PodContainer};
use super::task_process::TaskProcess;
use super::{api, container_id, CallError, Containerd, POD_LABEL, RUNTIME};
use crate::pod_dir::{self as shim, ExitRecord, ShimArgs};

/// What the agent writes for the shim: `container.json` in the pod's directory (mode 0600: it
/// may hold the team's registry credentials).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerJob {
    pub socket: PathBuf,
    pub namespace: String,
    pub snapshotter: String,
    pub plain_http: Vec<String>,
    pub dev_dir: PathBuf,
    pub image: String,
    pub credentials: Option<Credentials>,
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// The pod's variables (the workload's and the gang's); the image's come under them.
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub mounts: Vec<JobMount>,
    pub shm_bytes: u64,
    pub host_network: bool,
    pub memory_limit: i64,
    pub cpu_millis: i64,
    pub devices: BTreeMap<String, Vec<u8>>,
    pub hostname: String,
    /// Where the node's pull locks live (the agent's data directory; default: the pod
    /// directory's parent).
    #[serde(default)]
    pub lock_dir: PathBuf,
    /// Where the node's CDI specs are (none: the plain device nodes).
    #[serde(default)]
    pub cdi_dirs: Vec<PathBuf>,
    /// Root of the sysfs that maps EFA interfaces to their verbs devices (none: `/`).
    #[serde(default)]
    pub sysfs_root: Option<PathBuf>,
    /// The GPU partitions among `devices`, with what their device nodes need.
    #[serde(default)]
    pub partitions: Vec<crate::inventory::Partition>,
    /// The driver's table of MIG capability minors (none: `/proc/driver/nvidia-caps/mig-minors`).
    #[serde(default)]
    pub mig_minors: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMount {
    pub host_path: String,
    pub container_path: String,
    pub read_only: bool,
}

pub const JOB_FILE: &str = "container.json";
pub const STATUS_FILE: &str = "status.json";

/// What the pod is doing before it runs: written by the shim, read by the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodStatus {
    /// `WaitingForContainerd`, `Pulling`, `Creating`, `Running`.
    pub phase: String,
    pub pulled_bytes: u64,
    pub total_bytes: u64,
    pub image_cached: bool,
}

pub fn read_status(dir: &Path) -> Option<PodStatus> {
    serde_json::from_slice(&std::fs::read(dir.join(STATUS_FILE)).ok()?).ok()
}

fn write_status(dir: &Path, s: &PodStatus) {
    if let Ok(b) = serde_json::to_vec(s) {
        let _ = shim::write_atomic(&dir.join(STATUS_FILE), &b);
    }
}

fn record(dir: &Path, r: ExitRecord) {
    if let Err(e) = shim::write_exit(dir, &r) {
        eprintln!("agent-shim: could not record the exit: {e}");
    }
}

fn failed(dir: &Path, reason: &str, detail: String) -> i32 {
    let lost = reason == "ContainerLost";
    record(
        dir,
        ExitRecord {
            code: None,
            signal: None,
            succeeded: false,
            lease_expired: false,
            stopped: false,
            lost,
            detail: format!("{reason}: {detail}"),
            ended_ms: shim::now_ms(),
        },
    );
    1
}

/// The shim's container mode; returns the shim's exit code.
pub fn run(args: &ShimArgs) -> i32 {
    let dir = args.dir.clone();
    let job: ContainerJob = match std::fs::read(dir.join(JOB_FILE))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(j) => j,
        Err(e) => return failed(&dir, "ContainerCannotRun", format!("{JOB_FILE}: {e}")),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return failed(&dir, "ContainerCannotRun", format!("runtime: {e}")),
    };
    rt.block_on(run_async(args, &job))
}

async fn run_async(args: &ShimArgs, job: &ContainerJob) -> i32 {
    let dir = &args.dir;
    let ctd = match Containerd::connect(&job.socket, &job.namespace).await {
        Ok(c) => c,
        // containerd is away: the container may still run, and `adopt` supervises it without
        // containerd until it is back.
        Err(e) if args.adopt => match Containerd::connect_lazy(&job.socket, &job.namespace) {
            Ok(c) => c,
            Err(_) => return failed(dir, "ContainerLost", e),
        },
        // containerd is away (restarting, upgraded): the pod waits for it, as it would for a
        // slow pull, until it is back or the pod is stopped.
        Err(e) => {
            eprintln!("agent-shim: {e}; waiting for containerd");
            write_status(
                dir,
                &PodStatus {
                    phase: "WaitingForContainerd".into(),
                    ..Default::default()
                },
            );
            let back = async {
                loop {
                    tokio::time::sleep(CONTAINERD_RETRY).await;
                    if let Ok(c) = Containerd::connect(&job.socket, &job.namespace).await {
                        return c;
                    }
                }
            };
            tokio::select! {
                c = back => c,
                why = stop_requested(args) => return stopped_before_start(dir, why),
            }
        }
    };
    let id = container_id(dir);
    if args.adopt {
        return adopt(args, &ctd, job, &id).await;
    }
    // Pull, telling the agent how far it got (at most every 500 ms).
    let mut status = PodStatus {
        phase: "Pulling".into(),
        ..Default::default()
    };
    write_status(dir, &status);
    let mut last = Instant::now();
    let dir2 = dir.clone();
    let mut progress = |done: u64, total: u64| {
        if last.elapsed() >= Duration::from_millis(500) || done == total {
            last = Instant::now();
            write_status(
                &dir2,
                &PodStatus {
                    phase: "Pulling".into(),
                    pulled_bytes: done,
                    total_bytes: total,
                    image_cached: false,
                },
            );
        }
    };
    // One pull of an image at a time on a node: a second pod of the same image waits for the
    // first and then finds it cached, instead of racing it for containerd's content refs.
    let lock_path = node_dir(job, dir).join(format!("{}.lock", super::pull::lease_of(&job.image)));
    let pull = async {
        let _held = tokio::task::spawn_blocking(move || lock_file(&lock_path))
            .await
            .map_err(|e| e.to_string())??;
        super::pull::pull(
            &ctd,
            &job.image,
            &job.snapshotter,
            &job.plain_http,
            job.credentials.clone(),
            &mut progress,
        )
        .await
    };
    // A stop or an expired lease while pulling ends the pod without running it.
    let pulled = tokio::select! {
        p = pull => p,
        why = stop_requested(args) => {
            return stopped_before_start(dir, why);
        }
    };
    let pulled = match pulled {
        Ok(p) => p,
        Err(e) => return failed(dir, "ImagePullFailed", e),
    };
    status.phase = "Creating".into();
    status.image_cached = pulled.cached;
    write_status(dir, &status);
    super::pull::touch(&ctd, &pulled.name).await;
    // OOM kills are reported as events; listen before anything can be killed. (containerd
    // answers a subscription only with its first event, so it runs on its own task.)
    let ooms = watch_ooms(ctd.clone(), job.namespace.clone());
    let (task_pid, output) = match create_and_start(&ctd, job, &pulled, &id, dir).await {
        Ok(started) => started,
        Err(e) => {
            let _ = ctd.remove_container(&id, &job.snapshotter).await;
            return failed(dir, "ContainerCannotRun", e);
        }
    };
    let _ = shim::write_atomic(
        &dir.join(shim::CHILD_PID_FILE),
        task_pid.to_string().as_bytes(),
    );
    status.phase = "Running".into();
    write_status(dir, &status);
    let process = TaskProcess::of(task_pid);
    if let Some(p) = process {
        p.record(dir);
    }
    let code = supervise(args, &ctd, job, &id, process, ooms, output).await;
    super::pull::touch(&ctd, &pulled.name).await;
    code
}

/// Takes over a pod's container after its first shim died: supervises the task if it runs,
/// records its exit if it ended, says the container is gone otherwise.
async fn adopt(args: &ShimArgs, ctd: &Containerd, job: &ContainerJob, id: &str) -> i32 {
    let dir = &args.dir;
    let ooms = watch_ooms(ctd.clone(), job.namespace.clone());
    // Watched before the task is asked for: if it runs then, its writers' closes are ahead.
    let output = OutputEnd::watch(&dir.join(shim::LOG_FILE));
    match ctd.task(id).await {
        Ok(Some(task)) => {
            let output = output.filter(|_| task.status == api::STATUS_RUNNING);
            if task.status == api::STATUS_RUNNING {
                let _ = shim::write_atomic(
                    &dir.join(shim::CHILD_PID_FILE),
                    task.pid.to_string().as_bytes(),
                );
            }
            let mut status = read_status(dir).unwrap_or_default();
            status.phase = "Running".into();
            write_status(dir, &status);
            // containerd says which process runs now; the record says it too, unless the
            // first shim died before it wrote it.
            let process = (task.status == api::STATUS_RUNNING)
                .then(|| {
                    TaskProcess::recorded(dir)
                        .filter(|p| u32::try_from(p.pid).ok() == Some(task.pid))
                        .or_else(|| TaskProcess::of(task.pid))
                })
                .flatten();
            if let Some(p) = process {
                p.record(dir);
            }
            supervise(args, ctd, job, id, process, ooms, output).await
        }
        Ok(None) => {
            // Created but never started, or removed: nothing runs; clean what is left.
            let _ = ctd.remove_container(id, &job.snapshotter).await;
            failed(
                dir,
                "ContainerLost",
                "its container was gone when the agent restarted, with no exit recorded".into(),
            )
        }
        Err(e) => match TaskProcess::recorded(dir).filter(TaskProcess::alive) {
            // containerd is away but the container runs: supervise it without containerd
            // until it is back (reporting it lost would run the pod twice).
            Some(p) => supervise(args, ctd, job, id, Some(p), ooms, output).await,
            None => failed(dir, "ContainerLost", e.to_string()),
        },
    }
}

/// Container ids of OOM kills in the namespace, as containerd reports them.
fn watch_ooms(ctd: Containerd, namespace: String) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let filter = format!("namespace=={namespace},topic==\"/tasks/oom\"");
        let Ok(mut events) = ctd
            .call_streaming::<_, api::Envelope>(
                "/containerd.services.events.v1.Events/Subscribe",
                api::SubscribeRequest {
                    filters: vec![filter],
                },
            )
            .await
        else {
            return;
        };
        while let Some(Ok(env)) = events.next().await {
            let oom = env
                .event
                .as_ref()
                .and_then(|a| <api::TaskOom as prost::Message>::decode(a.value.as_slice()).ok());
            if let Some(e) = oom {
                if tx.send(e.container_id).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Opens and exclusively locks `path` (flock), waiting for another holder; the lock goes with
/// the file.
fn lock_file(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("pull lock {}: {e}", path.display()))?;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is touched.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "pull lock {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(f)
}

/// Resolves when the agent asks the pod to stop or the node's lease runs out: true for the lease.
async fn stop_requested(args: &ShimArgs) -> bool {
    loop {
        if shim::term_requested() {
            return false;
        }
        if args.lease_ms > 0 && shim::now_ms() > shim::read_lease(&args.lease_file) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn stopped_before_start(dir: &Path, lease_expired: bool) -> i32 {
    record(
        dir,
        ExitRecord {
            code: None,
            signal: None,
            succeeded: false,
            lease_expired,
            stopped: !lease_expired,
            lost: false,
            detail: if lease_expired {
                "stopped before it started: the node's lease expired".into()
            } else {
                "stopped by the agent before it started".into()
            },
            ended_ms: shim::now_ms(),
        },
    );
    0
}

/// The node's directory for what its pods share (pull locks, image users): the agent's data
/// directory, or the pod directory's parent for a job written before it was recorded.
fn node_dir(job: &ContainerJob, pod_dir: &Path) -> PathBuf {
    if job.lock_dir.as_os_str().is_empty() {
        pod_dir.parent().unwrap_or(pod_dir).to_path_buf()
    } else {
        job.lock_dir.clone()
    }
}
/// What the container is made of: the image's process and user as the job overrides them, the
/// assigned devices (GPUs through the node's CDI specs where it has them), mounts and limits.
async fn pod_container(
    ctd: &Containerd,
    job: &ContainerJob,
    pulled: &super::pull::Pulled,
    id: &str,
    dir: &Path,
) -> Result<PodContainer, String> {
    let args = spec::process_args(&pulled.config, &job.command, &job.args)?;
    let user = job
        .user
        .clone()
        .or_else(|| pulled.config.user.clone())
        .unwrap_or_default();
    // Names come from the image's /etc/passwd and /etc/group (read once per image and node).
    let (uid, gid) =
        super::users::uid_gid(ctd, &pulled.manifest_digest, &user, &node_dir(job, dir)).await?;
    // GPUs from the node's CDI specs where it has them, named by index as the toolkit does,
    // and partitions as `<gpu>:<slot>`.
    let gpus: Vec<String> = job
        .devices
        .get("gpu")
        .into_iter()
        .flatten()
        .map(|i| i.to_string())
        .chain(
            job.partitions
                .iter()
                .map(|p| format!("{}:{}", p.gpu, p.slot)),
        )
        .collect();
    let mut warnings = Vec::new();
    let cdi = if gpus.is_empty() {
        None
    } else {
        super::cdi::resolve(&job.cdi_dirs, super::cdi::NVIDIA_GPU, &gpus, &mut warnings)?
    };
    for w in warnings {
        eprintln!("agent-shim: {w}");
    }
    let efa_verbs = if job.devices.get("efa").is_some_and(|e| !e.is_empty()) {
        let root = job.sysfs_root.clone().unwrap_or_else(|| PathBuf::from("/"));
        crate::inventory::EfaSysfs::new(&root).verbs_devices()
    } else {
        Vec::new()
    };
    let mut devices =
        spec::assigned_devices(&job.dev_dir, &job.devices, cdi.is_some(), &efa_verbs)?;
    if cdi.is_none() && !job.partitions.is_empty() {
        let minors = job
            .mig_minors
            .clone()
            .unwrap_or_else(|| PathBuf::from(spec::MIG_MINORS));
        devices.extend(spec::partition_devices(
            &job.dev_dir,
            &minors,
            &job.partitions,
            &devices,
        )?);
    }
    let cdi = cdi.unwrap_or_default();
    devices.extend(cdi.oci_devices(&job.dev_dir)?);
    let mut env = spec::merge_env(&pulled.config, &job.env);
    super::cdi::apply_env(&mut env, &cdi.env);
    let cwd = job
        .workdir
        .clone()
        .or_else(|| pulled.config.working_dir.clone().filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    Ok(PodContainer {
        hostname: job.hostname.clone(),
        args,
        env,
        cwd,
        uid,
        gid,
        devices,
        mounts: job
            .mounts
            .iter()
            .map(|m| BindMount {
                host: m.host_path.clone(),
                container: m.container_path.clone(),
                read_only: m.read_only,
            })
            .collect(),
        shm_bytes: if job.shm_bytes == 0 {
            spec::DEFAULT_SHM_BYTES
        } else {
            job.shm_bytes
        },
        host_network: job.host_network,
        memory_limit: job.memory_limit,
        cpu_millis: job.cpu_millis,
        cgroups_path: format!("/{}/{id}", job.namespace),
        memlock_unlimited: job.devices.get("efa").is_some_and(|e| !e.is_empty()),
        nofile: spec::nofile_limit(),
        cdi,
    })
}

async fn create_and_start(
    ctd: &Containerd,
    job: &ContainerJob,
    pulled: &super::pull::Pulled,
    id: &str,
    dir: &Path,
) -> Result<(u32, Option<OutputEnd>), String> {
    let pod = pod_container(ctd, job, pulled, id, dir).await?;
    let spec_json = serde_json::to_vec(&spec::render(&pod)).map_err(|e| e.to_string())?;
    // A container left by an earlier try of this same pod goes first.
    ctd.remove_container(id, &job.snapshotter)
        .await
        .map_err(|e| e.to_string())?;
    let mounts: api::MountsResponse = ctd
        .call(
            "/containerd.services.snapshots.v1.Snapshots/Prepare",
            api::PrepareSnapshotRequest {
                snapshotter: job.snapshotter.clone(),
                key: id.into(),
                parent: pulled.chain_id.clone(),
                labels: Default::default(),
            },
            Some(&super::pull::lease_of(&pulled.name)),
        )
        .await
        .map_err(|e| e.to_string())?;
    let container = api::Container {
        id: id.into(),
        labels: [(POD_LABEL.to_string(), dir.display().to_string())].into(),
        image: pulled.name.clone(),
        runtime: Some(api::Runtime {
            name: RUNTIME.into(),
            options: None,
        }),
        spec: Some(prost_types::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".into(),
            value: spec_json,
        }),
        snapshotter: job.snapshotter.clone(),
        snapshot_key: id.into(),
    };
    ctd.call::<_, api::Empty>(
        "/containerd.services.containers.v1.Containers/Create",
        api::CreateContainerRequest {
            container: Some(container),
        },
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    let log = dir.join(shim::LOG_FILE);
    let (stdout, stderr) = output::prepare(&log)?;
    // containerd opens the log twice while it creates the task, and closes each copy's
    // descriptor once its stream is drained.
    let output = OutputEnd::watch(&log);
    ctd.call::<_, api::CreateTaskResponse>(
        "/containerd.services.tasks.v1.Tasks/Create",
        api::CreateTaskRequest {
            container_id: id.into(),
            rootfs: mounts.mounts,
            stdin: String::new(),
            stdout,
            stderr,
            terminal: false,
        },
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    let started: api::StartResponse = ctd
        .call(
            "/containerd.services.tasks.v1.Tasks/Start",
            api::TaskRequest {
                container_id: id.into(),
                exec_id: String::new(),
            },
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((started.pid, output))
}

pub(crate) async fn kill(ctd: &Containerd, id: &str, signal: i32, all: bool) {
    let _ = ctd
        .call::<_, api::Empty>(
            "/containerd.services.tasks.v1.Tasks/Kill",
            api::KillRequest {
                container_id: id.into(),
                exec_id: String::new(),
                signal: signal as u32,
                all,
            },
            None,
        )
        .await;
}

/// Waits until containerd's copy of the container's output has reached `log`: until one of
/// its descriptors of the log is closed (`output`, at most 5 s after the exit; both streams
/// end when the container's last process does, and deleting the task waits for a copy still
/// running), or without a watch until the log's size has held for 100 ms (at most a second).
/// The task's exit can be reported while the last lines are still in its pipes, which
/// deleting the task closes, and the exit record is what tells readers the log is whole.
async fn output_settled(log: &Path, output: Option<OutputEnd>) {
    if let Some(end) = output {
        if !end.wait(Duration::from_secs(5)).await {
            eprintln!(
                "agent-shim: the output had not all reached {} 5 s after the exit",
                log.display()
            );
        }
        return;
    }
    let size = || std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let mut last = size();
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = size();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Waits for the task to end, stopping it when asked; records the exit and removes the container.
async fn supervise(
    args: &ShimArgs,
    ctd: &Containerd,
    job: &ContainerJob,
    id: &str,
    process: Option<TaskProcess>,
    mut ooms: mpsc::UnboundedReceiver<String>,
    output: Option<OutputEnd>,
) -> i32 {
    let dir = &args.dir;
    // `process`: the container's first process, for when containerd cannot be asked.
    let mut wait = Box::pin(wait_for_task(ctd, id));
    // While containerd cannot be reached: the process watched directly, and when to look for
    // containerd again.
    let mut away: Option<(TaskProcess, tokio::time::Instant)> = None;
    let mut stopped = false;
    let mut lease_expired = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut oom = false;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let exit = loop {
        tokio::select! {
            r = &mut wait, if away.is_none() => match (r, process) {
                (Err(e), Some(p)) if p.alive() => {
                    eprintln!(
                        "agent-shim: lost containerd ({e}); watching the container's process {} itself until containerd is back",
                        p.pid
                    );
                    away = Some((p, tokio::time::Instant::now() + CONTAINERD_RETRY));
                }
                (r, _) => break r.map_err(|e| format!("lost track of the container: {e}")),
            },
            Some(c) = ooms.recv() => oom |= c == id,
            _ = tick.tick() => {
                if let Some((p, next)) = away {
                    if !p.alive() {
                        break Err(
                            "its process ended while containerd was away, so its exit code is unknown"
                                .to_string(),
                        );
                    }
                    if tokio::time::Instant::now() >= next {
                        if ctd.task(id).await.is_ok() {
                            eprintln!("agent-shim: containerd is back; waiting for the container through it again");
                            wait = Box::pin(wait_for_task(ctd, id));
                            away = None;
                        } else {
                            away = Some((p, tokio::time::Instant::now() + CONTAINERD_RETRY));
                        }
                    }
                }
                let direct = away.map(|(p, _)| p);
                if kill_at.is_none() {
                    let mut grace = args.grace_ms;
                    if shim::term_requested() {
                        stopped = true;
                    } else if args.lease_ms > 0 && shim::now_ms() > shim::read_lease(&args.lease_file) {
                        lease_expired = true;
                        grace = grace.min(args.lease_ms * 4 / 5);
                    }
                    if stopped || lease_expired {
                        signal(ctd, id, direct, libc::SIGTERM).await;
                        kill_at = Some(tokio::time::Instant::now() + Duration::from_millis(grace));
                    }
                } else if kill_at.is_some_and(|t| tokio::time::Instant::now() >= t) {
                    signal(ctd, id, direct, libc::SIGKILL).await;
                    // Again a second later, should containerd have gone in between.
                    kill_at = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                }
            }
        }
    };
    // The event can trail the exit by a moment.
    if !oom {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
        while let Ok(Some(c)) = tokio::time::timeout_at(deadline, ooms.recv()).await {
            oom |= c == id;
        }
    }
    let ended_away = away.is_some();
    let (code, mut detail) = match exit {
        Ok(w) => {
            let c = w.exit_status as i32;
            (Some(c), format!("exit code {c}"))
        }
        Err(e) => (None, e),
    };
    if oom {
        detail = format!(
            "OOMKilled: the container went over its memory limit of {} bytes ({detail})",
            job.memory_limit
        );
    } else if lease_expired {
        detail = format!("{detail} (stopped: the node's lease expired)");
    } else if stopped {
        detail = format!("{detail} (stopped by the agent)");
    }
    let signal = code.filter(|c| *c > 128 && *c < 128 + 65).map(|c| c - 128);
    let succeeded = code == Some(0) && !stopped && !lease_expired;
    // Deleting the task closes its pipes: what containerd has not copied yet would be lost.
    output_settled(&dir.join(shim::LOG_FILE), output).await;
    if !ended_away {
        if let Err(e) = ctd.remove_container(id, &job.snapshotter).await {
            eprintln!("agent-shim: removing container {id}: {e}");
        }
    }
    record(
        dir,
        ExitRecord {
            code,
            signal,
            succeeded,
            lease_expired,
            stopped,
            lost: false,
            detail,
            ended_ms: shim::now_ms(),
        },
    );
    if ended_away {
        remove_when_back(ctd, id, &job.snapshotter).await;
    }
    0
}

/// How often a shim that lost containerd looks for it again.
const CONTAINERD_RETRY: Duration = Duration::from_secs(1);
/// How long a shim whose container ended while containerd was away waits for containerd, to
/// remove the container, before it leaves that to the agent's clean-up of strays.
const REMOVE_WHEN_BACK_FOR: Duration = Duration::from_secs(600);

async fn wait_for_task(ctd: &Containerd, id: &str) -> Result<api::WaitResponse, CallError> {
    ctd.call::<_, api::WaitResponse>(
        "/containerd.services.tasks.v1.Tasks/Wait",
        api::TaskRequest {
            container_id: id.into(),
            exec_id: String::new(),
        },
        None,
    )
    .await
}

/// Sends `sig` to the container: through containerd (SIGKILL to all of its processes), or
/// while containerd is away straight to its first process (SIGKILL to it ends the container's
/// pid namespace; SIGTERM reaches it where it has a handler, as through containerd).
async fn signal(ctd: &Containerd, id: &str, away: Option<TaskProcess>, sig: i32) {
    match away {
        Some(p) => p.signal(sig),
        None => kill(ctd, id, sig, sig == libc::SIGKILL).await,
    }
}

/// Removes a container that ended while containerd was away, once containerd is back.
async fn remove_when_back(ctd: &Containerd, id: &str, snapshotter: &str) {
    let give_up = tokio::time::Instant::now() + REMOVE_WHEN_BACK_FOR;
    loop {
        match ctd.remove_container(id, snapshotter).await {
            Ok(()) => return,
            Err(e) if tokio::time::Instant::now() >= give_up => {
                eprintln!(
                    "agent-shim: removing container {id}: {e}; the agent removes it as a stray"
                );
                return;
            }
            Err(_) => tokio::time::sleep(CONTAINERD_RETRY).await,
        }
    }
}

//! `allot agent`: flags and a YAML config file (flags win), then the agent until Ctrl-C or
//! SIGTERM. Also the hidden `allot agent-shim` that runs one pod.

use std::path::PathBuf;
use std::time::Duration;

use allot_agent::agent::{Agent, AgentConfig};
use allot_agent::inventory::InventoryConfig;
use anyhow::{anyhow, bail, Context};
use serde::Deserialize;

use crate::client::ClientOpts;

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// YAML config file with the same keys as the flags (snake_case); flags override it.
    #[arg(long, env = "ALLOT_AGENT_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's name, as the cluster knows it [default: the host name].
    #[arg(long, env = "ALLOT_NODE_NAME")]
    pub node: Option<String>,
    /// Instance type (ml.p5.48xlarge, ...); else --instance-type-file, else the
    /// NODE_INSTANCE_TYPE environment variable (the node's instance-type label).
    #[arg(long, env = "ALLOT_INSTANCE_TYPE")]
    pub instance_type: Option<String>,
    /// File holding the instance type (written by an init container from the node label).
    #[arg(long)]
    pub instance_type_file: Option<PathBuf>,
    /// Where pod records and logs live [default: ./allot-agent/<node>].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// HTTP address for /metrics, /healthz, /readyz and /logs, or "off" [default: 127.0.0.1:9500].
    #[arg(long)]
    pub http: Option<String>,
    /// Address gang peers use to reach this node (MASTER_ADDR) [default: 127.0.0.1].
    #[arg(long)]
    pub advertise: Option<String>,
    /// Root under which sys/class/neuron_device and sys/class/infiniband are read [default: /].
    #[arg(long)]
    pub sysfs_root: Option<PathBuf>,
    /// Simulate N GPUs instead of asking NVML (pods are still real processes).
    #[arg(long)]
    pub fake_gpus: Option<u32>,
    /// Seconds the node keeps running pods without reaching a coordinator quorum [default: 10].
    #[arg(long)]
    pub lease: Option<f64>,
    /// Seconds between inventory discoveries [default: 30].
    #[arg(long)]
    pub discover_every: Option<f64>,
    /// cgroup v2 directory for per-pod cpu and memory limits (no limits without it).
    #[arg(long)]
    pub cgroup_root: Option<PathBuf>,
    /// Stop every pod when the agent stops (otherwise pods outlive an agent restart).
    #[arg(long)]
    pub stop_pods_on_exit: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    node: Option<String>,
    instance_type: Option<String>,
    instance_type_file: Option<PathBuf>,
    coordinators: Option<Vec<String>>,
    certs: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    http: Option<String>,
    advertise: Option<String>,
    sysfs_root: Option<PathBuf>,
    fake_gpus: Option<u32>,
    lease: Option<f64>,
    discover_every: Option<f64>,
    cgroup_root: Option<PathBuf>,
    stop_pods_on_exit: Option<bool>,
}

fn seconds(flag: &str, v: f64) -> anyhow::Result<Duration> {
    if !v.is_finite() || v <= 0.0 || v > 86_400.0 {
        bail!("--{flag} {v} must be a number of seconds above 0 and at most 86400");
    }
    Ok(Duration::from_secs_f64(v))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub fn resolve(a: AgentArgs, opts: &ClientOpts) -> anyhow::Result<AgentConfig> {
    let f: FileConfig = crate::config::load(a.config.as_deref())?;
    let node = a.node.or(f.node).unwrap_or_else(hostname);
    if node.is_empty() || node.contains(['/', ' ']) {
        bail!("--node {node:?}: a node name is non-empty, without spaces or slashes");
    }
    let coordinators = if !opts.coordinators.is_empty() {
        opts.coordinators.clone()
    } else {
        f.coordinators
            .unwrap_or_else(|| vec!["127.0.0.1:7400".to_string()])
    };
    let http = crate::config::http_addr(a.http.or(f.http).as_deref(), 9500)?;
    let shim_program =
        std::env::current_exe().context("cannot find the allot binary to run pod shims with")?;
    Ok(AgentConfig {
        coordinators,
        certs: opts
            .certs
            .clone()
            .or(f.certs)
            .unwrap_or_else(|| PathBuf::from("certs")),
        data_dir: a
            .data_dir
            .or(f.data_dir)
            .unwrap_or_else(|| PathBuf::from(format!("allot-agent/{node}"))),
        http,
        advertise: a
            .advertise
            .or(f.advertise)
            .unwrap_or_else(|| "127.0.0.1".into()),
        inventory: InventoryConfig {
            instance_type: a.instance_type.or(f.instance_type),
            instance_type_file: a.instance_type_file.or(f.instance_type_file),
            sysfs_root: a
                .sysfs_root
                .or(f.sysfs_root)
                .unwrap_or_else(|| PathBuf::from("/")),
            fake_gpus: a.fake_gpus.or(f.fake_gpus),
            nvml: true,
        },
        lease: seconds("lease", a.lease.or(f.lease).unwrap_or(10.0))?,
        discover_every: seconds(
            "discover-every",
            a.discover_every.or(f.discover_every).unwrap_or(30.0),
        )?,
        cgroup_root: a.cgroup_root.or(f.cgroup_root),
        stop_pods_on_exit: a.stop_pods_on_exit || f.stop_pods_on_exit.unwrap_or(false),
        shim_program,
        node,
    })
}

pub fn run(a: AgentArgs, opts: &ClientOpts) -> anyhow::Result<()> {
    let cfg = resolve(a, opts)?;
    // One thread is plenty for an agent, and keeps its footprint small.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let node = cfg.node.clone();
        let http = cfg.http;
        let agent = Agent::open(cfg).map_err(|e| anyhow!("agent {node}: {e}"))?;
        eprintln!(
            "allot agent {node} running{}",
            http.map(|a| format!(", metrics on http://{a}/metrics"))
                .unwrap_or_default()
        );
        agent
            .run(crate::coordinator_cmd::shutdown_signal())
            .await
            .map_err(|e| anyhow!("agent {node}: {e}"))?;
        eprintln!("allot agent {node}: stopped");
        Ok(())
    })
}

//! `allot agent`: flags and a YAML config file (flags win), then the agent until Ctrl-C or
//! SIGTERM. Also the hidden `allot agent-shim` that runs one pod.

use std::path::PathBuf;
use std::time::Duration;

use allot_agent::agent::{Agent, AgentConfig};
use allot_agent::inventory::nvml::{self, open_nvml};
use allot_agent::inventory::{check_fake_gpus, Discovery, InventoryConfig};
use allot_net::tls::Identity;
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
    /// Simulate N GPUs (0 to 64) instead of asking NVML (pods are still real processes).
    #[arg(long)]
    pub fake_gpus: Option<u32>,
    /// Put a fake GPU in MIG mode with these MIG devices: GPU=PROFILE[*N][+PROFILE[*N]...],
    /// such as 0=1g.10gb*7 (repeat for several GPUs; needs --fake-gpus).
    #[arg(long)]
    pub fake_mig: Vec<String>,
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
    /// How pods with an image run: `containerd` (the node's containerd) or `process` (refused:
    /// only pods without an image run, as processes) [default: process]. Pods without an image
    /// run as processes under either.
    #[arg(long)]
    pub driver: Option<String>,
    /// containerd's socket [default: /run/containerd/containerd.sock].
    #[arg(long)]
    pub containerd_socket: Option<PathBuf>,
    /// The containerd namespace allot's containers and images live in [default: allot].
    #[arg(long)]
    pub containerd_namespace: Option<String>,
    /// A registry (host[:port]) pulled from over plain HTTP; loopback registries always are.
    #[arg(long)]
    pub plain_http_registry: Vec<String>,
    /// Where the GPU, Neuron and EFA device nodes are [default: /dev; with --fake-gpus and the
    /// containerd driver, fake nodes the agent makes in its data directory].
    #[arg(long)]
    pub device_dir: Option<PathBuf>,
    /// A directory of CDI specs (repeat for several; later ones win): a pod's GPUs come from
    /// the `nvidia.com/gpu` devices named by their indices, with the spec's mounts, variables
    /// and hooks [default: /etc/cdi and /var/run/cdi; none with --fake-gpus].
    #[arg(long)]
    pub cdi_dir: Vec<PathBuf>,
    /// Hours after which an image no pod used leaves the node's image cache [default: 24].
    #[arg(long)]
    pub image_max_age_hours: Option<f64>,
    /// This node's network topology: LEVEL=DOMAIN[,LEVEL=DOMAIN...], such as
    /// topology.k8s.aws/network-node-layer-3=nn-1a (repeat for more); placement puts a
    /// workload that asks for a level in one domain of it.
    #[arg(long)]
    pub topology: Vec<String>,
    /// A file of the node's labels, one LEVEL=DOMAIN a line (written by the DaemonSet's init
    /// step from the node's labels): those whose key starts with a --topology-label prefix
    /// are its topology.
    #[arg(long)]
    pub topology_file: Option<PathBuf>,
    /// The label key prefixes --topology-file takes (repeat for several)
    /// [default: topology.k8s.aws/].
    #[arg(long)]
    pub topology_label: Vec<String>,
    /// Discover this node's inventory once, print it as JSON (capacity, devices, warnings, and
    /// what NVML reports: driver, GPUs, MIG mode and MIG devices) and exit, without contacting
    /// the cluster. Read-only: nothing on the GPUs is changed.
    #[arg(long)]
    pub discover: bool,
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
    fake_mig: Option<Vec<String>>,
    lease: Option<f64>,
    discover_every: Option<f64>,
    cgroup_root: Option<PathBuf>,
    stop_pods_on_exit: Option<bool>,
    driver: Option<String>,
    containerd_socket: Option<PathBuf>,
    containerd_namespace: Option<String>,
    plain_http_registry: Option<Vec<String>>,
    device_dir: Option<PathBuf>,
    cdi_dirs: Option<Vec<PathBuf>>,
    image_max_age_hours: Option<f64>,
    topology: Option<std::collections::BTreeMap<String, String>>,
    topology_file: Option<PathBuf>,
    topology_labels: Option<Vec<String>>,
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
    let (node, from) = match (a.node, f.node) {
        (Some(n), _) => (n, "--node"),
        (None, Some(n)) => (n, "the config's node: key"),
        (None, None) => (hostname(), "the host name, the default for --node"),
    };
    // The node's certificate is issued for this name, so it follows the certificate rule.
    Identity::Node { node: node.clone() }
        .validate()
        .map_err(|e| anyhow!("node name {node:?} from {from}: {e}; set it with --node"))?;
    let fake_gpus = a.fake_gpus.or(f.fake_gpus);
    let fake_mig = if a.fake_mig.is_empty() {
        f.fake_mig.clone().unwrap_or_default()
    } else {
        a.fake_mig.clone()
    }
    .iter()
    .map(|spec| allot_agent::inventory::fake::parse_fake_mig(spec).map_err(|e| anyhow!(e)))
    .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(n) = fake_gpus {
        check_fake_gpus("--fake-gpus", n).map_err(|e| anyhow!(e))?;
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
    let data_dir = a
        .data_dir
        .or(f.data_dir)
        .unwrap_or_else(|| PathBuf::from(format!("allot-agent/{node}")));
    let partition_indices = data_dir.join("mig-indices.json");
    let containerd = match a.driver.or(f.driver).as_deref().unwrap_or("process") {
        "process" => None,
        "containerd" => {
            let (dev_dir, mig_minors) = match (a.device_dir.or(f.device_dir), fake_gpus) {
                (Some(d), _) => (d, None),
                (None, Some(n)) => {
                    let dir = fake_device_dir(&data_dir, n)?;
                    let minors = fake_mig_nodes(&dir, &fake_mig)?;
                    (dir, Some(minors))
                }
                (None, None) => (PathBuf::from("/dev"), None),
            };
            let namespace = a
                .containerd_namespace
                .or(f.containerd_namespace)
                .unwrap_or_else(|| allot_agent::containerd::DEFAULT_NAMESPACE.into());
            if namespace == "k8s.io" || namespace.is_empty() {
                bail!(
                    "--containerd-namespace {namespace:?}: use a namespace of allot's own \
                     (default allot), so the kubelet's containers are never touched"
                );
            }
            // Fake GPUs have no specs: the host's would name its real devices.
            let cdi_dirs = match (a.cdi_dir, f.cdi_dirs, fake_gpus) {
                (flag, _, _) if !flag.is_empty() => flag,
                (_, Some(file), _) => file,
                (_, None, Some(_)) => Vec::new(),
                (_, None, None) => allot_agent::containerd::cdi::DEFAULT_DIRS
                    .iter()
                    .map(PathBuf::from)
                    .collect(),
            };
            let mut plain_http = a.plain_http_registry;
            plain_http.extend(f.plain_http_registry.unwrap_or_default());
            Some(allot_agent::containerd::ContainerdConfig {
                socket: a
                    .containerd_socket
                    .or(f.containerd_socket)
                    .unwrap_or_else(|| allot_agent::containerd::DEFAULT_SOCKET.into()),
                namespace,
                snapshotter: allot_agent::containerd::DEFAULT_SNAPSHOTTER.into(),
                plain_http,
                dev_dir,
                cdi_dirs,
                sysfs_root: a
                    .sysfs_root
                    .clone()
                    .or(f.sysfs_root.clone())
                    .unwrap_or_else(|| PathBuf::from("/")),
                mig_minors,
            })
        }
        other => bail!("--driver {other:?}: use process or containerd"),
    };
    let max_age = a
        .image_max_age_hours
        .or(f.image_max_age_hours)
        .unwrap_or(24.0);
    if !max_age.is_finite() || max_age <= 0.0 || max_age > 24.0 * 365.0 {
        bail!("--image-max-age-hours {max_age}: a number of hours above 0 and at most 8760");
    }
    let topology = topology(
        &a.topology,
        f.topology,
        a.topology_file.or(f.topology_file),
        {
            let p = a.topology_label;
            if p.is_empty() {
                f.topology_labels.unwrap_or_default()
            } else {
                p
            }
        },
    )?;
    Ok(AgentConfig {
        topology,
        containerd,
        image_max_age: Duration::from_secs_f64(max_age * 3600.0),
        coordinators,
        certs: opts
            .certs
            .clone()
            .or(f.certs)
            .unwrap_or_else(|| PathBuf::from("certs")),
        data_dir,
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
            fake_gpus,
            fake_mig,
            nvml: true,
            partition_indices: Some(partition_indices),
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

/// The node's topology: the file's labels with a taken prefix, then the config file's levels,
/// then the flags' (later ones win), checked.
fn topology(
    flags: &[String],
    file_config: Option<std::collections::BTreeMap<String, String>>,
    labels_file: Option<PathBuf>,
    prefixes: Vec<String>,
) -> anyhow::Result<allot_common::topology::NodeTopology> {
    use allot_common::topology as topo;
    let prefixes = if prefixes.is_empty() {
        vec![topo::HYPERPOD_PREFIX.to_string()]
    } else {
        prefixes
    };
    let mut t = topo::NodeTopology::new();
    if let Some(path) = labels_file {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("--topology-file {}", path.display()))?;
        t.extend(labels_of_file(&text, &prefixes));
    }
    t.extend(file_config.unwrap_or_default());
    for f in flags {
        t.extend(topo::parse_node(f).map_err(|e| anyhow!("--topology {f:?}: {e}"))?);
    }
    topo::check_node(&t).map_err(|e| anyhow!("this node's topology: {e}"))?;
    Ok(t)
}

/// The `key=value` lines of a labels file (values may be quoted) whose key starts with one of
/// `prefixes`.
fn labels_of_file(text: &str, prefixes: &[String]) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.trim().split_once('='))
        .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
        .filter(|(k, v)| !v.is_empty() && prefixes.iter().any(|p| k.starts_with(p.as_str())))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Device nodes for fake GPUs, so that containers of a node with `--fake-gpus` get a node
/// per assigned GPU as on a real one: `nvidia0..N-1` and `nvidiactl` in the data directory,
/// with /dev/null's device numbers (harmless to open). Needs root (mknod), as containerd does.
fn fake_device_dir(data_dir: &std::path::Path, gpus: u32) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("fake-dev");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating fake device nodes in {}", dir.display()))?;
    let names = (0..gpus)
        .map(|i| format!("nvidia{i}"))
        .chain(std::iter::once("nvidiactl".to_string()));
    for n in names {
        let p = dir.join(&n);
        if p.exists() {
            continue;
        }
        make_null_node(&p)?;
    }
    Ok(dir)
}

/// A character device node at `p` with /dev/null's numbers (harmless to open).
fn make_null_node(p: &std::path::Path) -> anyhow::Result<()> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| anyhow!("device path {} holds a NUL byte", p.display()))?;
    // SAFETY: mknod(2) with a valid NUL-terminated path; creates one device node.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    if rc != 0 {
        bail!(
            "could not make fake device node {}: {} (the containerd driver with --fake-gpus \
             runs as root)",
            p.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// For fake GPUs in MIG mode, what the driver has on a real node: a `mig-minors` table and
/// the `nvidia-caps/nvidia-capN` node of each GPU and compute instance (/dev/null's numbers,
/// as `fake_device_dir` makes them). Fake instances are GPU instance `slot + 1`, compute
/// instance 0 (`inventory::fake`). Returns the table's path.
fn fake_mig_nodes(
    dir: &std::path::Path,
    fake_mig: &[(u32, Vec<String>)],
) -> anyhow::Result<PathBuf> {
    let caps = dir.join("nvidia-caps");
    std::fs::create_dir_all(&caps)
        .with_context(|| format!("creating fake MIG nodes in {}", caps.display()))?;
    let mut table = String::from("config 1\nmonitor 2\n");
    let mut minors = Vec::new();
    for (gpu, profiles) in fake_mig {
        for slot in 0..profiles.len() as u32 {
            let gi = slot + 1;
            let base = 3 + (gpu * 8 + gi) * 2;
            table.push_str(&format!("gpu{gpu}/gi{gi}/access {base}\n"));
            table.push_str(&format!("gpu{gpu}/gi{gi}/ci0/access {}\n", base + 1));
            minors.extend([base, base + 1]);
        }
    }
    for m in minors {
        let p = caps.join(format!("nvidia-cap{m}"));
        if !p.exists() {
            make_null_node(&p)?;
        }
    }
    let path = dir.join("mig-minors");
    std::fs::write(&path, table).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// `allot agent --discover`: what the agent would report, and what NVML says, as JSON.
pub fn discover(cfg: &AgentConfig) -> anyhow::Result<serde_json::Value> {
    // Read-only: the running agent's index book is left alone.
    let inventory = InventoryConfig {
        partition_indices: None,
        ..cfg.inventory.clone()
    };
    let mut d = Discovery::new(&inventory).map_err(|e| anyhow!(e))?;
    let inv = d.discover();
    let nvml = if cfg.inventory.fake_gpus.is_some() {
        serde_json::json!({ "fake_gpus": cfg.inventory.fake_gpus })
    } else {
        match open_nvml().and_then(|api| nvml::report(api.as_ref())) {
            Ok(r) => serde_json::to_value(r)?,
            Err(e) => serde_json::json!({ "error": d.nvml_error().unwrap_or(&e) }),
        }
    };
    Ok(serde_json::json!({
        "node": cfg.node,
        "instance_type": inv.instance_type,
        "capacity": inv.capacity,
        "devices": inv.devices,
        "warnings": inv.warnings,
        "nvml": nvml,
    }))
}

/// `allot agent-fence`: stops allot's containers on this node when the agent's lease has run
/// out and no shim is left to (see `allot_agent::containerd::fence`).
#[derive(Debug, clap::Args)]
pub struct FenceArgs {
    /// The agent's config file; the fence reads data_dir, lease, containerd_socket and
    /// containerd_namespace from it.
    #[arg(long, env = "ALLOT_AGENT_CONFIG")]
    pub config: Option<PathBuf>,
    /// The agent's data directory, where it writes its lease [default: the config's].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The agent's lease in seconds [default: the config's, else 10].
    #[arg(long)]
    pub lease: Option<f64>,
    /// containerd's socket [default: /run/containerd/containerd.sock].
    #[arg(long)]
    pub containerd_socket: Option<PathBuf>,
    /// The agent's containerd namespace [default: allot].
    #[arg(long)]
    pub containerd_namespace: Option<String>,
}

pub fn run_fence(a: FenceArgs) -> anyhow::Result<()> {
    let f: FileConfig = crate::config::load(a.config.as_deref())?;
    let Some(data_dir) = a.data_dir.or(f.data_dir) else {
        bail!("--data-dir: the agent's data directory is needed (or data_dir in --config)");
    };
    let cfg = allot_agent::containerd::fence::FenceConfig {
        socket: a
            .containerd_socket
            .or(f.containerd_socket)
            .unwrap_or_else(|| allot_agent::containerd::DEFAULT_SOCKET.into()),
        namespace: a
            .containerd_namespace
            .or(f.containerd_namespace)
            .unwrap_or_else(|| allot_agent::containerd::DEFAULT_NAMESPACE.into()),
        lease_file: data_dir.join("lease"),
        lease: seconds("lease", a.lease.or(f.lease).unwrap_or(10.0))?,
    };
    eprintln!(
        "agent-fence: watching {} (lease {:?}); containers in containerd namespace {:?} at {}",
        cfg.lease_file.display(),
        cfg.lease,
        cfg.namespace,
        cfg.socket.display()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(allot_agent::containerd::fence::run(
        &cfg,
        crate::signals::shutdown_signal(),
    ));
    Ok(())
}

pub fn run(a: AgentArgs, opts: &ClientOpts) -> anyhow::Result<()> {
    let only_discover = a.discover;
    let cfg = resolve(a, opts)?;
    if only_discover {
        println!("{}", serde_json::to_string_pretty(&discover(&cfg)?)?);
        return Ok(());
    }
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
            .run(crate::signals::shutdown_signal())
            .await
            .map_err(|e| anyhow!("agent {node}: {e}"))?;
        eprintln!("allot agent {node}: stopped");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_agent::inventory::MAX_FAKE_GPUS;

    fn args(node: &str, fake_gpus: Option<u32>) -> AgentArgs {
        AgentArgs {
            config: None,
            node: Some(node.to_string()),
            instance_type: None,
            instance_type_file: None,
            data_dir: None,
            http: None,
            advertise: None,
            sysfs_root: None,
            fake_gpus,
            fake_mig: Vec::new(),
            lease: None,
            discover_every: None,
            cgroup_root: None,
            stop_pods_on_exit: false,
            driver: None,
            containerd_socket: None,
            containerd_namespace: None,
            plain_http_registry: Vec::new(),
            device_dir: None,
            cdi_dir: Vec::new(),
            image_max_age_hours: None,
            topology: Vec::new(),
            topology_file: None,
            topology_label: Vec::new(),
            discover: false,
        }
    }

    #[test]
    fn topology_comes_from_the_labels_file_and_the_flags() {
        let dir = std::env::temp_dir().join(format!("allot-topo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("labels");
        std::fs::write(
            &file,
            "kubernetes.io/arch=amd64\ntopology.k8s.aws/network-node-layer-1=\"nn-a\"\ntopology.k8s.aws/network-node-layer-3=nn-c\n",
        )
        .unwrap();
        let mut a = args("gpu-1", None);
        a.topology_file = Some(file.clone());
        a.topology = vec!["rack=r7".into()];
        let cfg = resolve(a, &opts()).unwrap();
        let t: Vec<(&str, &str)> = cfg
            .topology
            .iter()
            .map(|(l, d)| (l.as_str(), d.as_str()))
            .collect();
        assert_eq!(
            t,
            vec![
                ("rack", "r7"),
                ("topology.k8s.aws/network-node-layer-1", "nn-a"),
                ("topology.k8s.aws/network-node-layer-3", "nn-c"),
            ]
        );
        let mut a = args("gpu-1", None);
        a.topology = vec!["rack".into()];
        let e = resolve(a, &opts()).unwrap_err().to_string();
        assert!(e.contains("LEVEL=DOMAIN"), "{e}");
        let mut a = args("gpu-1", None);
        a.topology_file = Some(dir.join("absent"));
        let e = format!("{:#}", resolve(a, &opts()).unwrap_err());
        assert!(e.contains("absent"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    fn opts() -> ClientOpts {
        ClientOpts {
            coordinators: vec!["127.0.0.1:7400".into()],
            certs: None,
            identity: None,
        }
    }

    #[test]
    fn node_names_follow_the_certificate_rule() {
        let cfg = resolve(args("gpu-1", None), &opts()).unwrap();
        assert_eq!(cfg.node, "gpu-1");
        for bad in ["GPU_1", "a b", "x/y", "-node", ""] {
            let e = resolve(args(bad, None), &opts()).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("1 to 63 lowercase letters"), "{e}");
            assert!(e.contains("--node"), "{e}");
        }
        let long = "a".repeat(64);
        let e = resolve(args(&long, None), &opts()).unwrap_err().to_string();
        assert!(e.contains("64 characters") && e.contains("1 to 63"), "{e}");
    }

    #[test]
    fn fake_gpus_are_limited_to_what_the_coordinator_accepts() {
        assert_eq!(i64::from(MAX_FAKE_GPUS), allot_core::nodes::MAX_DEVICES);
        for ok in [0, 8, MAX_FAKE_GPUS] {
            let cfg = resolve(args("n1", Some(ok)), &opts()).unwrap();
            assert_eq!(cfg.inventory.fake_gpus, Some(ok));
        }
        for bad in [MAX_FAKE_GPUS + 1, u32::MAX] {
            let e = resolve(args("n1", Some(bad)), &opts())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("--fake-gpus {bad}")), "{e}");
            assert!(e.contains("use 0 to 64"), "{e}");
        }
    }

    #[test]
    fn discover_prints_what_the_agent_would_report() {
        let mut a = args("n1", Some(2));
        a.instance_type = Some("ml.p5.48xlarge".into());
        let cfg = resolve(a, &opts()).unwrap();
        let v = discover(&cfg).unwrap();
        assert_eq!(v["node"], "n1");
        assert_eq!(v["instance_type"], "ml.p5.48xlarge");
        assert_eq!(v["capacity"]["gpu"], 2, "{v}");
        assert_eq!(v["capacity"]["cpu"], 192_000, "{v}");
        let devs = v["devices"].as_array().unwrap();
        assert_eq!(devs.len(), 2);
        assert_eq!(devs[1]["id"], "GPU-fake-1");
        assert_eq!(devs[1]["model"], "NVIDIA H100");
        assert_eq!(v["nvml"]["fake_gpus"], 2);
    }
}

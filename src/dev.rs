//! `allot dev`: a whole cluster on this machine in one command. Coordinator replicas and agents
//! with fake GPUs (which still run real processes) as child processes, certificates and data in
//! one directory that is reused on the next start, and the CLI pointed at it without flags.
//! Ctrl-C stops the agents (which stop their pods), then the coordinators.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use allot_agent::inventory::check_fake_gpus;
use allot_common::api::{Body, Reply};
use allot_common::Catalog;
use allot_net::tls::{self, Identity};
use anyhow::{anyhow, bail, Context};

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Nodes (agents) to start.
    #[arg(long, default_value_t = 4)]
    pub nodes: u32,
    /// Their instance type.
    #[arg(long, default_value = "ml.g5.8xlarge")]
    pub instance_type: String,
    /// Fake GPUs per node, 0 to 64 [default: what the instance type has].
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Coordinator replicas (1 or 3 make sense).
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// First QUIC port; replica i listens on PORT+i-1 (HTTP on PORT+2000+i-1).
    #[arg(long, default_value_t = 7400)]
    pub port: u16,
    /// Where certificates, raft data, pod records and logs live [default: ~/.allot/dev].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seconds an agent keeps its pods without reaching the coordinators.
    #[arg(long, default_value_t = 10.0)]
    pub lease: f64,
    /// How the agents run workloads with an image: `containerd` runs them as containers
    /// (needs root and a containerd); `process` refuses them.
    #[arg(long, default_value = "process")]
    pub driver: String,
    /// containerd's socket, with --driver containerd [default: /run/containerd/containerd.sock].
    #[arg(long)]
    pub containerd_socket: Option<PathBuf>,
    /// The containerd namespace of the dev cluster's containers and images [default: allot].
    #[arg(long)]
    pub containerd_namespace: Option<String>,
    /// A registry (host[:port]) pulled from over plain HTTP (repeat for several).
    #[arg(long)]
    pub plain_http_registry: Vec<String>,
    /// Put a fake GPU of every node in MIG mode with these partitions: GPU=PROFILE[*N][+...],
    /// such as 0=1g.10gb*7 (repeat for several GPUs; as `allot agent --fake-mig`).
    #[arg(long)]
    pub mig: Vec<String>,
    /// Put the nodes in racks of this many (`rack=r0` for the first ones, `rack=r1` for the
    /// next, ...), so that `--topology rack` places a gang in one rack.
    #[arg(long)]
    pub rack_size: Option<u32>,
}

/// The directory `allot dev` uses by default, and where the CLI looks for it.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() => PathBuf::from(h).join(".allot").join("dev"),
        _ => PathBuf::from(".allot-dev"),
    }
}

/// The file that tells the CLI where the local cluster listens.
pub const CLUSTER_FILE: &str = "coordinators";

/// What the CLI uses when no --coordinators or --certs is given: the local `allot dev`
/// cluster, if one was started.
pub fn local_cluster() -> Option<(Vec<String>, PathBuf)> {
    let dir = default_dir();
    let addrs = std::fs::read_to_string(dir.join(CLUSTER_FILE)).ok()?;
    let addrs: Vec<String> = addrs
        .split([',', '\n'])
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    (!addrs.is_empty()).then(|| (addrs, dir.join("certs")))
}

/// Where the ports `allot dev` uses start, relative to --port: replica i (from 0) listens on
/// PORT+i, its HTTP on PORT+2000+i; agent i (from 0) serves HTTP on PORT+2100+i.
const COORDINATOR_HTTP_OFFSET: u32 = 2000;
const AGENT_HTTP_OFFSET: u32 = 2100;

/// Checks that every port derived from `port` fits in a u16: an error names --port and the
/// range that works for this many replicas and nodes.
fn check_port(port: u16, replicas: u32, nodes: u32) -> anyhow::Result<()> {
    let span = (COORDINATOR_HTTP_OFFSET + replicas.saturating_sub(1))
        .max(AGENT_HTTP_OFFSET + nodes.saturating_sub(1));
    let highest = u32::from(u16::MAX).saturating_sub(span);
    if port == 0 || u32::from(port) > highest {
        bail!(
            "--port {port}: use 1 to {highest} with {replicas} replica(s) and {nodes} node(s); \
             the ports from --port to --port+{span} are used"
        );
    }
    Ok(())
}

pub(crate) struct Proc {
    pub what: String,
    pub child: Child,
}

pub(crate) fn spawn(what: &str, args: &[String], log: &Path) -> anyhow::Result<Proc> {
    let exe = std::env::current_exe().context("cannot find the allot binary")?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(
            "ALLOT_LOG",
            std::env::var("ALLOT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(out);
    // Own process group: Ctrl-C in the terminal reaches `allot dev` only, which then stops
    // the agents first (so they stop their pods) and the coordinators last.
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {what}"))?;
    Ok(Proc {
        what: what.to_string(),
        child,
    })
}

pub(crate) fn terminate(procs: &mut [Proc], within: Duration) {
    for p in procs.iter() {
        // SAFETY: kill(2) on a child's pid.
        unsafe {
            libc::kill(p.child.id() as i32, libc::SIGTERM);
        }
    }
    let t = Instant::now();
    for p in procs.iter_mut() {
        loop {
            if let Ok(Some(_)) = p.child.try_wait() {
                break;
            }
            if t.elapsed() > within {
                eprintln!("  {} did not stop in time; killing it", p.what);
                let _ = p.child.kill();
                let _ = p.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn ensure_certs(certs: &Path, replicas: u32, nodes: &[String]) -> anyhow::Result<()> {
    if !certs.join(tls::CA_CERT_FILE).exists() {
        tls::init_ca(certs, false).map_err(|e| anyhow!("creating the dev CA: {e}"))?;
    }
    // One dashboard key for every replica: a session from one is taken by the others.
    allot_coordinator::web_session::ensure_key(certs).map_err(|e| anyhow!("{e}"))?;
    let mut ids: Vec<Identity> = vec![
        Identity::Admin {
            name: "admin".into(),
        },
        Identity::User {
            team: "team-a".into(),
        },
        Identity::User {
            team: "team-b".into(),
        },
    ];
    ids.extend((1..=u64::from(replicas)).map(|id| Identity::Coordinator { id }));
    ids.extend(nodes.iter().map(|n| Identity::Node { node: n.clone() }));
    for id in ids {
        if tls::TlsFiles::for_identity(certs, &id).cert.exists() {
            continue;
        }
        tls::issue(certs, &id, &[], &[], tls::DEFAULT_DAYS)
            .map_err(|e| anyhow!("issuing a certificate for {id}: {e}"))?;
    }
    Ok(())
}

/// The arguments checked; the fake GPUs per node.
fn checked_gpus(a: &DevArgs) -> anyhow::Result<u32> {
    if !(1..=7).contains(&a.replicas) {
        bail!("--replicas {}: use 1 to 7 (1 or 3 make sense)", a.replicas);
    }
    if !(1..=64).contains(&a.nodes) {
        bail!("--nodes {}: use 1 to 64", a.nodes);
    }
    check_port(a.port, a.replicas, a.nodes)?;
    if !matches!(a.driver.as_str(), "process" | "containerd") {
        bail!("--driver {:?}: use process or containerd", a.driver);
    }
    let it = Catalog::builtin()
        .get(&a.instance_type)
        .map_err(|e| anyhow!("--instance-type: {e}"))?;
    let gpus = a.gpus.unwrap_or(it.accelerators());
    check_fake_gpus("--gpus", gpus).map_err(|e| anyhow!(e))?;
    for spec in &a.mig {
        let (gpu, _) = allot_agent::inventory::fake::parse_fake_mig(spec)
            .map_err(|e| anyhow!(e.replace("--fake-mig", "--mig")))?;
        if gpu >= gpus {
            bail!(
                "--mig {spec:?}: the nodes have GPUs 0 to {}",
                gpus.saturating_sub(1)
            );
        }
    }
    Ok(gpus)
}

pub async fn run(a: DevArgs) -> anyhow::Result<()> {
    let gpus = checked_gpus(&a)?;
    let dir = a.dir.clone().unwrap_or_else(default_dir);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let certs = dir.join("certs");
    let nodes: Vec<String> = (1..=a.nodes).map(|i| format!("node-{i}")).collect();
    ensure_certs(&certs, a.replicas, &nodes)?;
    let addrs: Vec<String> = (0..a.replicas)
        .map(|i| format!("127.0.0.1:{}", u32::from(a.port) + i))
        .collect();
    let peers = addrs
        .iter()
        .enumerate()
        .map(|(i, x)| format!("{}={x}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    // Ctrl-C (or SIGTERM) during start-up stops what was started, too: the handler is
    // installed now, before the first child.
    let mut stop = Box::pin(crate::signals::shutdown_signal());
    tokio::select! {
        biased;
        _ = &mut stop => return Ok(()),
        _ = std::future::ready(()) => {}
    }
    let mut coordinators = Vec::new();
    for i in 1..=a.replicas {
        let args = coordinator_args(&a, i, &addrs[i as usize - 1], &peers, &dir, &certs);
        coordinators.push(spawn(
            &format!("coordinator {i}"),
            &args,
            &logs.join(format!("coordinator-{i}.log")),
        )?);
    }
    std::fs::write(dir.join(CLUSTER_FILE), addrs.join(","))
        .with_context(|| format!("cannot write {}", dir.join(CLUSTER_FILE).display()))?;
    eprint!("starting {} coordinator replica(s)", a.replicas);
    let mut client = allot_net::client::Client::new(addrs.clone(), &certs, "admin-admin")?;
    let t = Instant::now();
    loop {
        if let Ok(Ok(Reply::Hello {
            leader: Some(_), ..
        })) = client.call(Body::Hello).await
        {
            break;
        }
        if let Some(p) = coordinators
            .iter_mut()
            .find_map(|p| p.child.try_wait().ok().flatten().map(|_| p.what.clone()))
        {
            terminate(&mut coordinators, Duration::from_secs(5));
            bail!("{p} exited during start-up; see {}", logs.display());
        }
        if t.elapsed() > Duration::from_secs(30) {
            terminate(&mut coordinators, Duration::from_secs(5));
            bail!(
                "no coordinator leader after 30s; see the logs in {} (is port {} in use? try --port)",
                logs.display(),
                a.port
            );
        }
        eprint!(".");
        tokio::select! {
            _ = &mut stop => {
                eprintln!("\nstopping {} coordinator replica(s)...", coordinators.len());
                terminate(&mut coordinators, Duration::from_secs(10));
                let _ = std::fs::remove_file(dir.join(CLUSTER_FILE));
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
    eprintln!(" leader elected");
    let mut agents = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let args = agent_args(&a, i as u32, n, gpus, &dir, &addrs, &certs);
        agents.push(spawn(
            &format!("agent {n}"),
            &args,
            &logs.join(format!("agent-{n}.log")),
        )?);
    }
    eprint!("starting {} agent(s)", a.nodes);
    let t = Instant::now();
    loop {
        let ready = match client.call(Body::GetNodes).await {
            Ok(Ok(Reply::Nodes(ns))) => ns
                .iter()
                .filter(|x| x.healthy && nodes.contains(&x.name))
                .count(),
            _ => 0,
        };
        if ready == nodes.len() {
            break;
        }
        if t.elapsed() > Duration::from_secs(30) {
            eprintln!();
            terminate(&mut agents, Duration::from_secs(10));
            terminate(&mut coordinators, Duration::from_secs(5));
            bail!(
                "only {ready} of {} nodes registered after 30s; see {}",
                nodes.len(),
                logs.display()
            );
        }
        eprint!(".");
        tokio::select! {
            _ = &mut stop => {
                eprintln!("\nstopping {} agent(s) and {} coordinator replica(s)...",
                          agents.len(), coordinators.len());
                terminate(&mut agents, Duration::from_secs(40));
                terminate(&mut coordinators, Duration::from_secs(10));
                let _ = std::fs::remove_file(dir.join(CLUSTER_FILE));
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
    eprintln!(" {} node(s) ready", nodes.len());
    print_banner(&a, &addrs, gpus, &dir, &logs);
    // Run until Ctrl-C / SIGTERM, or until a child dies.
    let died = tokio::select! {
        _ = &mut stop => None,
        d = watch_children(&mut coordinators, &mut agents) => Some(d),
    };
    if let Some(what) = &died {
        eprintln!(
            "{what} exited unexpectedly; stopping everything (see {})",
            logs.display()
        );
    }
    eprintln!("stopping {} agent(s) and their pods...", agents.len());
    terminate(&mut agents, Duration::from_secs(40));
    eprintln!("stopping {} coordinator replica(s)...", coordinators.len());
    terminate(&mut coordinators, Duration::from_secs(10));
    let _ = std::fs::remove_file(dir.join(CLUSTER_FILE));
    eprintln!("stopped");
    match died {
        Some(w) => bail!("{w} exited unexpectedly"),
        None => Ok(()),
    }
}

/// `allot coordinator` arguments for replica `i` of the development cluster.
fn coordinator_args(
    a: &DevArgs,
    i: u32,
    listen: &str,
    peers: &str,
    dir: &Path,
    certs: &Path,
) -> Vec<String> {
    vec![
        "coordinator".into(),
        "--id".into(),
        i.to_string(),
        "--listen".into(),
        listen.into(),
        "--peers".into(),
        peers.into(),
        "--http".into(),
        format!(
            "127.0.0.1:{}",
            u32::from(a.port) + COORDINATOR_HTTP_OFFSET + i - 1
        ),
        "--data-dir".into(),
        dir.join(format!("data-{i}")).display().to_string(),
        "--certs".into(),
        certs.display().to_string(),
        // A development cluster on a workstation: its replicas do not need real-time
        // threads (see `allot coordinator --raft-priority`).
        "--raft-priority".into(),
        "normal".into(),
    ]
}

/// `allot agent` arguments for node `n`, the `i`th.
fn agent_args(
    a: &DevArgs,
    i: u32,
    n: &str,
    gpus: u32,
    dir: &Path,
    addrs: &[String],
    certs: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "agent".into(),
        "--node".into(),
        n.into(),
        "--instance-type".into(),
        a.instance_type.clone(),
        "--fake-gpus".into(),
        gpus.to_string(),
    ];
    for spec in &a.mig {
        args.extend(["--fake-mig".to_string(), spec.clone()]);
    }
    if let Some(size) = a.rack_size.filter(|s| *s > 0) {
        args.extend(["--topology".to_string(), format!("rack=r{}", i / size)]);
    }
    args.extend([
        "--data-dir".to_string(),
        dir.join("agents").join(n).display().to_string(),
        "--http".into(),
        format!("127.0.0.1:{}", u32::from(a.port) + AGENT_HTTP_OFFSET + i),
        "--lease".into(),
        a.lease.to_string(),
        "--coordinators".into(),
        addrs.join(","),
        "--certs".into(),
        certs.display().to_string(),
        "--stop-pods-on-exit".into(),
        "--driver".into(),
        a.driver.clone(),
    ]);
    if let Some(sock) = &a.containerd_socket {
        args.push("--containerd-socket".into());
        args.push(sock.display().to_string());
    }
    if let Some(ns) = &a.containerd_namespace {
        args.push("--containerd-namespace".into());
        args.push(ns.clone());
    }
    for r in &a.plain_http_registry {
        args.push("--plain-http-registry".into());
        args.push(r.clone());
    }
    args
}

fn print_banner(a: &DevArgs, addrs: &[String], gpus: u32, dir: &Path, logs: &Path) {
    println!(
        "allot dev is running: {} coordinator replica(s) at {}, {} node(s) of {} with {} fake GPU(s) each.\n\
         \n  state:  {} (kept across restarts; delete it to start afresh)\n  logs:   {}\n\
         \nThe allot CLI finds this cluster without flags (as admin; --as user-team-a acts as team-a). Try:\n\
         \n  allot get nodes\n  allot dashboard     (prints a link that signs a browser in to the web dashboard)\n\nCtrl-C stops everything.",
        a.replicas,
        addrs.join(","),
        a.nodes,
        a.instance_type,
        gpus,
        dir.display(),
        logs.display()
    );
}

async fn watch_children(coordinators: &mut [Proc], agents: &mut [Proc]) -> String {
    loop {
        for p in coordinators.iter_mut().chain(agents.iter_mut()) {
            if let Ok(Some(status)) = p.child.try_wait() {
                return format!("{} ({status})", p.what);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_must_fit_below_65536() {
        // 4 nodes: agents up to PORT+2103.
        check_port(7400, 1, 4).unwrap();
        check_port(65535 - 2103, 1, 4).unwrap();
        let e = check_port(65535 - 2102, 1, 4).unwrap_err().to_string();
        assert!(
            e.contains(&format!("--port {}", 65535 - 2102)) && e.contains("use 1 to 63432"),
            "{e}"
        );
        // 64 nodes: agents up to PORT+2163.
        let e = check_port(65000, 3, 64).unwrap_err().to_string();
        assert!(
            e.contains("--port 65000") && e.contains("use 1 to 63372"),
            "{e}"
        );
        check_port(63372, 7, 64).unwrap();
        let e = check_port(0, 1, 1).unwrap_err().to_string();
        assert!(
            e.contains("--port 0") && e.contains("use 1 to 63435"),
            "{e}"
        );
    }
}

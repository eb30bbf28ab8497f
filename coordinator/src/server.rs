//! The coordinator process: one replica on a raft thread, QUIC for peers and clients (mutual
//! TLS), and HTTP for `/metrics`, `/healthz` and `/readyz`. This file starts them: the replica
//! on its durable log, the raft thread (`raft_loop.rs`, around the sans-I/O `node.rs`), the
//! peer senders and the connections it accepts (`connections.rs`), and the HTTP side.
//!
//! The raft thread owns the `Replica` and is the only place the state machine lives. Everything
//! else talks to it through `Input`s: raft messages from peers, API requests (which the node
//! routes into writes and reads), and reads, which wait for a read index confirmed by a quorum
//! before they run against the applied state. The leader also runs the scheduler there and
//! proposes each cycle's plan as one log entry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use allot_common::BoxError;
use allot_net::tls::{self, Identity, TlsFiles};
use tokio::sync::{mpsc, oneshot};

use crate::connections::serve_conn;
use crate::leader::LeaderConfig;
use crate::metrics::Metrics;
use crate::node::{Node, NodeConfig};
pub use crate::priority::RaftPriority;
use crate::raft_inputs::Input;
pub use crate::raft_inputs::Status;
use crate::raft_loop::{wait_for_disk, DiskSpace, RaftLoop, Stop};
use crate::raftlog::RedbDisk;
use crate::replica::{Replica, ReplicaConfig, SnapshotCodec};
use crate::shared::{Shared, WRITE_TIMEOUT};

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub id: u64,
    pub listen: SocketAddr,
    /// Every replica's address, this one's included.
    pub peers: BTreeMap<u64, String>,
    pub data_dir: PathBuf,
    pub certs: PathBuf,
    pub http: Option<SocketAddr>,
    pub tick_ms: u64,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub snapshot_every: u64,
    pub schedule_interval_ms: u64,
    /// How the raft thread is scheduled (see `priority`).
    pub raft_priority: RaftPriority,
    /// Free space the data directory's file system keeps: below it the leader refuses writes.
    pub disk_reserve_bytes: u64,
    /// A backup to start a new cluster from (`--restore`): written into the empty data
    /// directory before the replica opens.
    pub restore: Option<PathBuf>,
    /// This replica joins a running cluster (`--join`, after `allot coordinator members
    /// add`): it starts with no configuration and waits for the leader's snapshot.
    pub join: bool,
}

/// A running coordinator; dropping the handle does not stop it, `shutdown` does.
pub struct Running {
    pub status: Arc<Mutex<Status>>,
    pub endpoint: quinn::Endpoint,
    pub http_addr: Option<SocketAddr>,
    /// How the raft thread is scheduled, in words (a refused real-time priority says why).
    pub raft_priority: String,
}

pub async fn start(cfg: ServerConfig) -> Result<Running, BoxError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        format!(
            "could not create data directory {}: {e}",
            cfg.data_dir.display()
        )
    })?;
    let files = TlsFiles::for_identity(&cfg.certs, &Identity::Coordinator { id: cfg.id });
    let server_tls = tls::server_config(&files)?;
    let client_tls = tls::client_config(&files)?;
    if let Some(file) = &cfg.restore {
        let voters: Vec<u64> = cfg.peers.keys().copied().collect();
        let what = crate::backup::restore(&cfg.data_dir, file, &voters, cfg.join)?;
        tracing::info!("coordinator {}: {what}", cfg.id);
    }
    let format_reads = crate::format::reads_from_env()?;
    if format_reads < crate::format::CURRENT {
        tracing::warn!(
            "{}={format_reads}: this replica reads and writes format {format_reads} only, as an older release would (for upgrade tests)",
            crate::format::EMULATE_ENV
        );
    }
    let rep = open_replica(&cfg, format_reads)?;
    let (input_tx, input_rx) = mpsc::unbounded_channel::<Input>();
    let (applied_tx, applied_rx) = tokio::sync::watch::channel(0u64);
    let status = Arc::new(Mutex::new(Status {
        id: cfg.id,
        ..Default::default()
    }));
    let metrics = Arc::new(Metrics::new(cfg.id));
    let progress = Arc::new(Mutex::new(BTreeMap::new()));
    let lp = RaftLoop {
        progress: progress.clone(),
        encode_machine: rep.codec().encode_machine,
        snapshot_files: rep.disk().snapshot_store(),
        node: Node::new(rep, node_config(&cfg)),
        disk_failed: None,
        reads: crate::raft_loop::HeavyReads::start(cfg.id),
        peers: BTreeMap::new(),
        links: None,
        origin: Instant::now(),
        space: DiskSpace {
            dir: cfg.data_dir.clone(),
            reserve: cfg.disk_reserve_bytes,
            seen: None,
        },
        status: status.clone(),
        metrics: metrics.clone(),
        applied_tx,
        input: input_tx.clone(),
    };
    let web_sessions = Arc::new(crate::web_session::WebSessions::open(
        &cfg.certs,
        &cfg.data_dir,
    )?);
    let http_bound = Arc::new(std::sync::OnceLock::new());
    let web = Arc::new(crate::web::Web::new(
        web_sessions.clone(),
        cfg.peers.values().cloned().collect(),
        cfg.certs.clone(),
        cfg.id,
    ));
    let budgets = Arc::new(crate::budget::Budgets::default());
    tokio::spawn(crate::budget::release_memory(budgets.clone()));
    let shared = Shared {
        id: cfg.id,
        input: input_tx,
        status: status.clone(),
        peers: Arc::new(std::sync::RwLock::new(cfg.peers.clone())),
        applied: applied_rx,
        budgets: budgets.clone(),
        logs: Arc::new(crate::logs::LogRelay::default()),
        progress,
        web: web_sessions.clone(),
        http: http_bound.clone(),
        format_reads,
        cluster_id: crate::backup::cluster_id(&cfg.data_dir),
        protocol: crate::format::protocol(format_reads),
    };
    let refresh_metrics = shared.input.clone();
    let up_rx = spawn_raft_thread(
        &cfg,
        format_reads,
        lp,
        shared,
        input_rx,
        (server_tls, client_tls),
    )?;
    let (endpoint, raft_priority) = up_rx
        .await
        .map_err(|_| "the raft thread stopped while starting".to_string())??;
    let http_addr = match cfg.http {
        Some(addr) => {
            let bound =
                crate::http::serve(addr, status.clone(), metrics, refresh_metrics, Some(web))
                    .await?;
            let _ = http_bound.set(bound);
            Some(bound)
        }
        None => None,
    };
    tracing::info!(
        "coordinator {} listening on {} (QUIC){}",
        cfg.id,
        cfg.listen,
        http_addr
            .map(|a| format!(", http on {a}"))
            .unwrap_or_default()
    );
    Ok(Running {
        status,
        endpoint,
        http_addr,
        raft_priority,
    })
}

/// How the node's leader driver and waiters are set.
fn node_config(cfg: &ServerConfig) -> NodeConfig {
    NodeConfig {
        leader: LeaderConfig {
            schedule_interval_ms: cfg.schedule_interval_ms,
            retry_ms: WRITE_TIMEOUT.as_millis() as u64,
            ..LeaderConfig::default()
        },
        write_timeout_ms: WRITE_TIMEOUT.as_millis() as u64,
    }
}

/// The replica on its durable log in `cfg.data_dir` (repaired first if a write was torn).
fn open_replica(cfg: &ServerConfig, format_reads: u32) -> Result<Replica<RedbDisk>, BoxError> {
    let disk = RedbDisk::open(&cfg.data_dir.join("raft.redb"))?;
    if let Some(what) = disk.repaired() {
        tracing::warn!("{what}");
    }
    let mut rcfg = ReplicaConfig::new(cfg.id, cfg.peers.keys().copied().collect());
    rcfg.join = cfg.join;
    rcfg.addresses = cfg.peers.clone();
    rcfg.election_tick = cfg.election_ticks;
    rcfg.max_election_tick = cfg.election_ticks * 2;
    rcfg.heartbeat_tick = cfg.heartbeat_ticks;
    rcfg.snapshot_every = cfg.snapshot_every;
    // Followers further behind than this get a snapshot instead of entries.
    rcfg.keep_behind_snapshot = cfg.snapshot_every.min(1000);
    rcfg.background_snapshots = true;
    rcfg.format_reads = format_reads;
    let logger = slog::Logger::root(tracing_slog::TracingSlogDrain, slog::o!());
    Ok(Replica::open(rcfg, disk, SnapshotCodec::wire(), &logger)?)
}

/// What the raft thread reports once it listens: its endpoint and how it is scheduled.
type Up = Result<(quinn::Endpoint, String), String>;

/// Starts the raft thread. The replica, QUIC (its endpoint, the peer senders, every connection
/// and request) and the raft loop share it: a message crosses no thread on its way in or out,
/// and on this path each crossing costs more than the work it carries.
fn spawn_raft_thread(
    cfg: &ServerConfig,
    format_reads: u32,
    lp: RaftLoop,
    shared: Shared,
    input_rx: mpsc::UnboundedReceiver<Input>,
    (server_tls, client_tls): (quinn::ServerConfig, quinn::ClientConfig),
) -> Result<oneshot::Receiver<Up>, BoxError> {
    let tick = Duration::from_millis(cfg.tick_ms);
    let listen = cfg.listen;
    let id = cfg.id;
    let want_priority = cfg.raft_priority;
    let cfg = cfg.clone();
    let (up_tx, up_rx) = oneshot::channel::<Up>();
    let mut input_rx = input_rx;
    std::thread::Builder::new()
        .name(format!("raft-{id}"))
        .spawn(move || {
            // Only this thread: threads it starts get the normal policy back.
            let priority = crate::priority::apply(want_priority);
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = up_tx.send(Err(format!("cannot start the raft thread's runtime: {e}")));
                    return;
                }
            };
            // A panic here would leave a process that answers /healthz but serves nothing:
            // stop it instead, so its supervisor restarts it from the durable log (as a failed
            // disk write does).
            let run = std::panic::AssertUnwindSafe(|| {
                rt.block_on(async move {
                    let endpoint = match quinn::Endpoint::server(server_tls, listen) {
                        Ok(e) => e,
                        Err(e) => {
                            let _ =
                                up_tx.send(Err(format!("could not listen on {listen} (UDP): {e}")));
                            return;
                        }
                    };
                    let mut lp = lp;
                    let links = crate::peer_links::PeerLinks::new(
                        endpoint.clone(),
                        client_tls,
                        shared.clone(),
                        cfg.peers.clone(),
                    );
                    lp.links = Some(links);
                    lp.sync_peers();
                    accept_connections(endpoint.clone(), shared);
                    let _ = up_tx.send(Ok((endpoint, priority)));
                    // A failed write takes the replica out until its disk takes writes again.
                    let reopen = || {
                        open_replica(&cfg, format_reads)
                            .map(|rep| Node::new(rep, node_config(&cfg)))
                            .map_err(|e| e.to_string())
                    };
                    while let Stop::Disk(why) = lp.run(&mut input_rx, tick).await {
                        match wait_for_disk(lp, &mut input_rx, why, &cfg.data_dir, &reopen).await {
                            Some(again) => lp = again,
                            None => return,
                        }
                    }
                })
            });
            if std::panic::catch_unwind(run).is_err() {
                tracing::error!("the raft loop of coordinator {id} panicked; stopping the process");
                std::process::exit(70);
            }
        })?;
    Ok(up_rx)
}

/// Serves every connection that comes in, each on its own task.
fn accept_connections(endpoint: quinn::Endpoint, shared: Shared) {
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let sh = shared.clone();
            tokio::spawn(async move {
                match incoming.await {
                    Ok(conn) => serve_conn(conn, sh).await,
                    Err(e) => tracing::info!("refused a connection: {e}"),
                }
            });
        }
    });
}

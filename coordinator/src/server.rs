//! The coordinator process: one replica on a raft thread, QUIC for peers and clients (mutual
//! TLS), and HTTP for `/metrics`, `/healthz` and `/readyz`.
//!
//! The raft thread owns the `Replica` and is the only place the state machine lives. Everything
//! else talks to it through `Input`s: raft messages from peers, proposals (writes), and reads,
//! which wait for a read index confirmed by a quorum before they run against the applied state.
//! The leader also runs the scheduler there and proposes each cycle's plan as one log entry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_common::api::{
    ApiError, Body, ErrorKind, LogPiece, LogRequest, Reply, Request, Response,
};
use allot_common::timefmt::now_ms;
pub use allot_common::BoxError;
use allot_core::machine::Machine;
use allot_net::tls::{self, Identity, TlsFiles};
use allot_net::wire;
use raft::eraftpb::{Message, MessageType};
use tokio::sync::{mpsc, oneshot};

use crate::auth::{node_scope, on_behalf, workload_scope};
use crate::leader::{CycleDone, CycleJob, LeaderConfig, Lost, Millis};
use crate::metrics::Metrics;
use crate::node::{Io, Node, NodeConfig, Proposed};
pub use crate::priority::RaftPriority;
pub use crate::raft_inputs::Status;
use crate::raft_inputs::{Input, SnapshotDone};
use crate::raftlog::{RedbDisk, SnapshotStore};
use crate::replica::{
    decode_message, encode_message, EncodedSnapshot, Replica, ReplicaConfig, SnapshotCodec,
    SnapshotJob,
};
use crate::requests::handle_request;
use crate::shared::{Shared, WRITE_TIMEOUT};

/// Largest raft message accepted from a peer (snapshots included).
const MAX_PEER_FRAME: usize = wire::MAX_SNAPSHOT + 1024;

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
}

/// A disk that cannot be written must not acknowledge anything: the replica stops, and its
/// supervisor restarts it from what is durable.
fn storage_failed(e: impl std::fmt::Display) -> ! {
    tracing::error!("raft storage failed, stopping the replica: {e}");
    std::process::exit(70);
}

// ------------------------------------------------------------------------------ raft thread

/// The raft thread's shell around the sans-I/O `Node`: the clock, the peer senders, the
/// threads that encode snapshots and compute large cycles, and what the rest of the process
/// sees (status, metrics, the applied index).
struct RaftLoop {
    node: Node<RedbDisk, oneshot::Sender<Response>>,
    /// The monotonic clock's origin for the driver's `Millis`.
    origin: Instant,
    peers: BTreeMap<u64, mpsc::UnboundedSender<Message>>,
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
    applied_tx: tokio::sync::watch::Sender<u64>,
    /// Where snapshots encoded and cycles computed off the raft thread come back.
    input: mpsc::UnboundedSender<Input>,
    space: DiskSpace,
    /// How snapshots are encoded, and where their files go.
    encode_machine: fn(&Machine) -> Result<Vec<u8>, String>,
    snapshot_files: SnapshotStore,
}

/// The free space of the data directory's file system, looked at no more than every 100 ms.
/// Below the reserve the leader refuses writes with an error that says so, and reads go on:
/// a disk that fills up then never fails a write half-way (which stops the replica), and
/// writes are taken again as soon as space is freed.
struct DiskSpace {
    dir: PathBuf,
    reserve: u64,
    /// When it was last looked at, and what was free then.
    seen: Option<(Instant, u64)>,
}

impl DiskSpace {
    fn free(&mut self) -> u64 {
        if let Some((at, free)) = self.seen {
            if at.elapsed() < Duration::from_millis(100) {
                return free;
            }
        }
        let free = free_bytes(&self.dir).unwrap_or(u64::MAX);
        self.seen = Some((Instant::now(), free));
        free
    }

    /// The refusal for a write, if the disk is below its reserve.
    fn refusal(&mut self, id: u64) -> Option<ApiError> {
        if self.reserve == 0 {
            return None;
        }
        let free = self.free();
        (free < self.reserve).then(|| {
            ApiError::new(
                ErrorKind::NoSpace,
                format!(
                    "the disk of coordinator {id} ({}) has {} MiB free, below the {} MiB it keeps in reserve (--disk-reserve-mb): writes are refused until space is freed; reads are served",
                    self.dir.display(),
                    free >> 20,
                    self.reserve >> 20
                ),
            )
        })
    }
}

/// Bytes an unprivileged process may still write on the file system holding `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `st` a buffer statvfs fills on success.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // Both are u64 on 64-bit Linux, narrower elsewhere.
    #[allow(clippy::unnecessary_cast)]
    let (blocks, size) = (st.f_bavail as u64, st.f_frsize as u64);
    Some(blocks.saturating_mul(size))
}

/// Cycles with at most this many pending workloads run on the raft thread (a thread hop costs
/// more than they do); larger ones on a thread of their own, so commits and heartbeats never
/// wait for a long cycle.
const INLINE_CYCLE_BACKLOG: usize = 256;

impl RaftLoop {
    fn now(&self) -> Millis {
        self.origin.elapsed().as_millis() as Millis
    }

    fn handle(&mut self, input: Input) {
        let now = self.now();
        match input {
            Input::Raft(m) => self.node.handle_raft(m),
            Input::Request { body, who, reply } => {
                let wall = now_ms();
                let route =
                    match Node::<RedbDisk, oneshot::Sender<Response>>::route(*body, &who, wall) {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            return;
                        }
                    };
                if route.writes() && self.node.is_leader() {
                    if let Some(e) = self.space.refusal(self.node.replica().id()) {
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
                let t0 = Instant::now();
                if self.node.handle_route(route, &who, reply, now, wall) == Proposed::Planned {
                    self.metrics
                        .cycle_seconds
                        .observe(t0.elapsed().as_secs_f64());
                }
            }
            Input::Read { query, reply } => self.node.handle_read(query, reply),
            Input::Unreachable(id) => self.node.handle_unreachable(id),
            Input::SnapshotStatus(id, ok) => self.node.handle_snapshot_status(id, ok),
            Input::Heartbeat(node) => self.node.handle_heartbeat(&node, now),
            Input::CycleDone(done, took) => {
                self.metrics.cycle_seconds.observe(took.as_secs_f64());
                self.node.handle_cycle_done(done, now);
            }
            Input::RefreshMetrics(done) => {
                self.metrics.update(self.node.replica());
                let _ = done.send(());
            }
            Input::SnapshotEncoded(done) => self.finish_snapshot(done),
        }
    }

    fn finish_snapshot(&mut self, done: SnapshotDone) {
        let SnapshotDone {
            index,
            term,
            data,
            file,
            took,
        } = done;
        let data = match data {
            Ok(d) => d,
            Err(e) => {
                self.node.snapshot_failed(index);
                tracing::error!(
                    "could not encode the snapshot at index {index}: {e}; the next attempt comes at index {}",
                    self.node.replica().next_snapshot_at()
                );
                return;
            }
        };
        let bytes = data.len();
        let in_file = file.is_some();
        let t0 = Instant::now();
        if let Err(e) = self.node.handle_snapshot_encoded(EncodedSnapshot {
            index,
            term,
            data,
            file,
        }) {
            storage_failed(e);
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        tracing::info!(
            "snapshot at index {index}: {bytes} bytes; recorded on the raft thread in {:.1} ms; on its own thread encoded in {:.1} ms{}",
            ms(t0.elapsed()),
            ms(took[0]),
            if in_file {
                format!(" and written to its file in {:.1} ms", ms(took[1]))
            } else {
                String::new()
            }
        );
    }

    /// What the rest of the process sees, after each turn.
    fn publish(&mut self) {
        let rep = self.node.replica();
        if let Ok(mut s) = self.status.lock() {
            s.leader = rep.leader();
            s.term = rep.term();
            s.commit = rep.commit_index();
            s.applied = rep.applied_index();
            s.is_leader = rep.is_leader();
            s.beat = Some(Instant::now());
            s.limits = rep.machine.limits;
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Input>, tick: Duration) {
        let mut next_tick = Instant::now() + tick;
        loop {
            match tokio::time::timeout_at(next_tick.into(), rx.recv()).await {
                Ok(Some(i)) => self.handle(i),
                Ok(None) => return,
                Err(_) => {}
            }
            // Everything queued goes into the same Ready: one fsync for many writes.
            for _ in 0..50_000 {
                match rx.try_recv() {
                    Ok(i) => self.handle(i),
                    Err(_) => break,
                }
            }
            if Instant::now() >= next_tick {
                self.node.tick();
                next_tick += tick;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + tick;
                }
            }
            let now = self.now();
            let mut io = ServerIo {
                id: self.node.replica().id(),
                peers: &self.peers,
                metrics: &self.metrics,
                applied_tx: &self.applied_tx,
                input: &self.input,
                encode_machine: self.encode_machine,
                snapshot_files: &self.snapshot_files,
            };
            if let Err(e) = self.node.turn(&mut io, now, now_ms()).await {
                storage_failed(e);
            }
            self.publish();
        }
    }
}

/// The turn's outputs on the raft thread: peer senders on this thread's runtime (the thread
/// yields to them where the node says it may), replies through their oneshot channels, large
/// cycles and snapshot encoding on threads of their own.
struct ServerIo<'a> {
    id: u64,
    peers: &'a BTreeMap<u64, mpsc::UnboundedSender<Message>>,
    metrics: &'a Metrics,
    applied_tx: &'a tokio::sync::watch::Sender<u64>,
    input: &'a mpsc::UnboundedSender<Input>,
    encode_machine: fn(&Machine) -> Result<Vec<u8>, String>,
    snapshot_files: &'a SnapshotStore,
}

impl Io for ServerIo<'_> {
    type Reply = oneshot::Sender<Response>;

    async fn send_early(&mut self, msgs: Vec<Message>) {
        self.send(msgs);
        // The leader's appends leave before its own write blocks this thread: the peer
        // senders and QUIC run on it, and get their turn here.
        tokio::task::yield_now().await;
    }

    async fn written(&mut self, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        self.send(msgs);
        // A follower's acknowledgement is what the leader waits on: it leaves before this
        // replica spends time applying.
        tokio::task::yield_now().await;
        // Sending it woke the leader, often onto this CPU when replicas share a machine (and
        // the kernel packs threads onto few CPUs). Giving the CPU up here lets the leader
        // commit and answer before this replica applies; with nothing else to run it returns
        // at once. Measured with `allot bench`: submit-to-admit p50 0.50 ms before, 0.45 ms
        // after.
        std::thread::yield_now();
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if let Some(tx) = self.peers.get(&m.to) {
                let _ = tx.send(m);
            }
        }
    }

    fn answer(&mut self, to: Self::Reply, response: Response) {
        let _ = to.send(response);
    }

    async fn drained(&mut self, applied: u64, answered: bool) {
        self.applied_tx.send_if_modified(|a| {
            let changed = *a != applied;
            *a = applied;
            changed
        });
        if answered {
            // The replies go out (their tasks share this thread) before the scheduler runs.
            tokio::task::yield_now().await;
        }
    }

    /// On this thread when the backlog is small, else on a thread of its own, whose plan comes
    /// back as `Input::CycleDone`.
    fn cycle(&mut self, job: CycleJob) -> Option<CycleDone> {
        if job.backlog() <= INLINE_CYCLE_BACKLOG {
            let t0 = Instant::now();
            let done = job.run();
            self.metrics
                .cycle_seconds
                .observe(t0.elapsed().as_secs_f64());
            return Some(done);
        }
        let back = self.input.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("cycle-{}", self.id))
            .spawn(move || {
                let t0 = Instant::now();
                let done = job.run();
                let _ = back.send(Input::CycleDone(done, t0.elapsed()));
            });
        if let Err(e) = spawned {
            // The driver gives the cycle up after its retry interval and asks again.
            tracing::warn!("could not start a thread for a scheduling cycle: {e}");
        }
        None
    }

    /// Encodes the snapshot on its own thread: the raft thread only copied the machine
    /// (copy-on-write, a few milliseconds), and writes the bytes when they come back
    /// (`Input::SnapshotEncoded`). Encoding on the raft thread held every commit up for as
    /// long as it took: tens of milliseconds with a thousand nodes.
    fn snapshot(&mut self, job: SnapshotJob) {
        let done = self.input.clone();
        let encode_machine = self.encode_machine;
        let files = self.snapshot_files.clone();
        let (index, term) = (job.index, job.term);
        let spawned = crate::priority::in_background(format!("snapshot-{}", self.id), move || {
            let t0 = Instant::now();
            let data = encode_machine(&job.machine);
            let encode = t0.elapsed();
            drop(job);
            let t1 = Instant::now();
            let file = match &data {
                Ok(d) => match files.write(index, d) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        tracing::warn!(
                            "{e}; the snapshot at {index} goes into the log's database instead"
                        );
                        None
                    }
                },
                Err(_) => None,
            };
            let _ = done.send(Input::SnapshotEncoded(SnapshotDone {
                index,
                term,
                data,
                file,
                took: [encode, t1.elapsed()],
            }));
        });
        if let Err(e) = spawned {
            tracing::warn!("could not start a thread to encode the snapshot at {index}: {e}");
            let _ = self.input.send(Input::SnapshotEncoded(SnapshotDone {
                index,
                term,
                data: Err(format!("no thread to encode it: {e}")),
                file: None,
                took: [Duration::ZERO; 2],
            }));
        }
    }

    fn lost(&mut self, l: Lost) {
        tracing::warn!("node {} declared lost: {}", l.node, l.reason);
    }
}

// ------------------------------------------------------------------------------ network

async fn peer_sender(
    to: u64,
    addr: String,
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    mut rx: mpsc::UnboundedReceiver<Message>,
    input: mpsc::UnboundedSender<Input>,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let conn = match connect(&endpoint, &client, &addr).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("peer {to} at {addr}: {e}");
                // Raft resends; drop what queued up and tell it about lost snapshots.
                while let Ok(m) = rx.try_recv() {
                    if m.get_msg_type() == MessageType::MsgSnapshot {
                        let _ = input.send(Input::SnapshotStatus(to, false));
                    }
                }
                let _ = input.send(Input::Unreachable(to));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let mut stream = match conn.open_uni().await {
            Ok(s) => s,
            Err(_) => continue,
        };
        while let Some(m) = rx.recv().await {
            let snap = m.get_msg_type() == MessageType::MsgSnapshot;
            let ok = match encode_message(&m) {
                Ok(b) => wire::write_frame_bytes_large(&mut stream, &b).await.is_ok(),
                Err(_) => false,
            };
            if snap {
                let _ = input.send(Input::SnapshotStatus(to, ok));
            }
            if !ok {
                let _ = input.send(Input::Unreachable(to));
                break;
            }
        }
        if rx.is_closed() {
            return;
        }
    }
}

async fn connect(
    endpoint: &quinn::Endpoint,
    client: &quinn::ClientConfig,
    addr: &str,
) -> Result<quinn::Connection, BoxError> {
    let sock = tokio::net::lookup_host(addr)
        .await?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))?;
    let c = endpoint
        .connect_with(client.clone(), sock, tls::SERVER_NAME)?
        .await?;
    Ok(c)
}

async fn serve_conn(conn: quinn::Connection, shared: Shared) {
    let who = match tls::identity_of(&conn) {
        Ok(i) => i,
        Err(e) => {
            tracing::info!("refused {}: {e}", conn.remote_address());
            conn.close(1u32.into(), b"certificate has no allot identity");
            return;
        }
    };
    let budget = match shared.budgets.connect(&who) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            tracing::warn!(identity = %who, "refused a connection from {}: {e}", conn.remote_address());
            conn.close(wire::CLOSE_OVER_LIMIT.into(), e.as_bytes());
            return;
        }
    };
    loop {
        tokio::select! {
            bi = conn.accept_bi() => {
                let Ok((send, recv)) = bi else { return };
                let shared = shared.clone();
                let who = who.clone();
                let budget = budget.clone();
                tokio::spawn(async move { serve_request(send, recv, who, shared, &budget).await });
            }
            uni = conn.accept_uni() => {
                let Ok(recv) = uni else { return };
                let Identity::Coordinator { id } = who else {
                    conn.close(2u32.into(), b"only coordinators send raft messages");
                    return;
                };
                let shared = shared.clone();
                tokio::spawn(async move { serve_raft(recv, id, shared).await });
            }
        }
    }
}

async fn serve_raft(mut recv: quinn::RecvStream, peer: u64, shared: Shared) {
    loop {
        match wire::read_frame_bytes_limited(&mut recv, MAX_PEER_FRAME).await {
            Ok(Some(b)) => match decode_message(&b) {
                Ok(m) if m.from == peer && m.to == shared.id => {
                    if shared.input.send(Input::Raft(m)).is_err() {
                        return;
                    }
                }
                Ok(m) => {
                    tracing::warn!(
                        "coordinator {peer} sent a raft message from {} to {}; dropped",
                        m.from,
                        m.to
                    );
                }
                Err(e) => {
                    tracing::warn!("coordinator {peer} sent an undecodable raft message: {e}");
                    return;
                }
            },
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("raft stream from {peer}: {e}");
                return;
            }
        }
    }
}

async fn serve_request(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    who: Identity,
    shared: Shared,
    budget: &crate::budget::Connection,
) {
    let request = match budget.read_request(&mut recv).await {
        Ok(Some((bytes, reserved))) => {
            let req = wire::decode::<Request>(&bytes).map_err(|e| e.to_string());
            // The request's bytes go before it is handled (a long poll may wait minutes).
            drop((bytes, reserved));
            req.map(Some)
        }
        Ok(None) => Ok(None),
        Err(e) => {
            tracing::debug!(identity = %who, "request dropped: {e}");
            Err(e)
        }
    };
    // A replica's dashboard forwards its browsers' reads as theirs.
    let (request, who) = match request {
        Ok(Some(Request {
            version,
            body: Body::OnBehalf { identity, body },
        })) => match on_behalf(&who, &identity, *body) {
            Ok((body, as_who)) => (Ok(Some(Request { version, body })), as_who),
            Err(e) => return respond(&mut send, &who, Err(e)).await,
        },
        other => (other, who),
    };
    // Logs stream: their handlers own the streams.
    let request = match request {
        Ok(Some(req)) if req.version == wire::PROTOCOL_VERSION => match req.body {
            Body::Logs {
                workload,
                team,
                node,
                rank,
                attempt,
                follow,
            } => {
                let req = LogRequest {
                    id: 0,
                    workload_id: None,
                    workload,
                    rank,
                    attempt,
                    follow,
                };
                return serve_logs(send, &node, team, req, &who, &shared).await;
            }
            Body::LogData { node, id } => {
                let delivered = match node_scope(&who, &node, "send logs") {
                    Ok(_) => shared.logs.deliver(id, recv),
                    Err(e) => return respond(&mut send, &who, Err(e)).await,
                };
                if !delivered {
                    let e = ApiError::new(
                        ErrorKind::NotFound,
                        format!("no reader waits for log request {id} (it went, or timed out)"),
                    );
                    return respond(&mut send, &who, Err(e)).await;
                }
                let _ = send.finish();
                return;
            }
            body => Ok(Some(Request {
                version: req.version,
                body,
            })),
        },
        other => other,
    };
    let resp: Response = match request {
        Ok(Some(req)) if req.version != wire::PROTOCOL_VERSION => Err(ApiError::new(
            ErrorKind::Version,
            format!(
                "client speaks protocol version {}, this coordinator speaks {}; use a matching allot",
                req.version,
                wire::PROTOCOL_VERSION
            ),
        )),
        Ok(Some(req)) => handle_request(req.body, &who, &shared).await,
        Ok(None) => return,
        Err(e) => Err(ApiError::new(
            ErrorKind::Invalid,
            format!("could not read the request: {e}"),
        )),
    };
    respond(&mut send, &who, resp).await;
}

/// Writes `resp` as the stream's one reply and ends the stream.
async fn respond(send: &mut quinn::SendStream, who: &Identity, resp: Response) {
    if let Err(e) = &resp {
        if e.kind == ErrorKind::Forbidden {
            // An audit trail: who tried what they may not (a node reporting another's pods, a
            // user touching another team).
            tracing::warn!(identity = %who, "refused: {}", e.message);
        }
    }
    let bytes = match wire::encode(&resp) {
        Ok(b) => b,
        Err(e) => {
            let too_big: Response = Err(ApiError::new(
                ErrorKind::Invalid,
                format!(
                    "the reply does not fit in one frame ({e}); narrow the request (for example get workloads --team T)"
                ),
            ));
            match wire::encode(&too_big) {
                Ok(b) => b,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = wire::write_frame_bytes(send, &bytes).await {
        tracing::debug!("reply to {who}: {e}");
    }
    let _ = send.finish();
}

/// `allot logs`: checks the reader may read `req.workload`, asks `node`'s agent for the log,
/// and copies its pieces to the reader one at a time until the agent's stream ends, the agent
/// reports an error, or the reader goes.
async fn serve_logs(
    mut send: quinn::SendStream,
    node: &str,
    team: Option<String>,
    req: LogRequest,
    who: &Identity,
    sh: &Shared,
) {
    let pending = async {
        sh.leader_only()?;
        let scope = workload_scope(who, team, "read logs")?;
        let name = req.workload.clone();
        let on = node.to_string();
        // The id of the workload the name resolves to now: its run's logs, not those of an
        // earlier workload of the same name.
        let resolved = Arc::new(std::sync::OnceLock::new());
        let found = resolved.clone();
        // Only the workload's team (or an admin) may read it; a forgotten workload's logs are
        // for admins. Only nodes with an agent keep logs.
        sh.read(Box::new(move |m: &Machine| {
            if m.nodes_meta
                .get(&on)
                .and_then(|n| n.report.as_ref())
                .is_none()
            {
                return Err(ApiError::new(
                    ErrorKind::NotFound,
                    format!("node {on:?} has no agent, so no logs"),
                ));
            }
            match (m.state.find_scoped(&name, scope.as_deref()), scope) {
                (Ok(id), _) => {
                    let _ = found.set(id.0);
                }
                (Err(_), None) => {}
                (Err(e), Some(_)) => return Err(e.into()),
            }
            Ok(Reply::Done)
        }))
        .await?;
        let mut req = req;
        req.workload_id = resolved.get().copied();
        sh.logs
            .request(node, req)
            .map_err(|e| ApiError::new(ErrorKind::LimitExceeded, e))
    };
    let mut pending = match pending.await {
        Ok(p) => p,
        Err(e) => return respond(&mut send, who, Err(e)).await,
    };
    let mut from_agent =
        match tokio::time::timeout(crate::logs::AGENT_ANSWER, &mut pending.stream).await {
            Ok(Ok(s)) => s,
            _ => {
                let e = ApiError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "node {node:?}'s agent did not answer within {} s (is it running and \
                     connected to the cluster?)",
                        crate::logs::AGENT_ANSWER.as_secs()
                    ),
                );
                return respond(&mut send, who, Err(e)).await;
            }
        };
    // Every answer has a first frame: an empty log is one empty piece.
    let mut answered = false;
    let mut ended = false;
    loop {
        let frame = tokio::select! {
            f = wire::read_frame_bytes_limited(&mut from_agent, crate::logs::MAX_PIECE_FRAME) => f,
            // The reader went (Ctrl-C on `logs --follow`): stop, which stops the agent.
            _ = send.stopped() => return,
        };
        let reply: Response = match frame {
            Ok(None) if !answered => {
                ended = true;
                Ok(Reply::LogChunk(Vec::new()))
            }
            Ok(Some(b)) => match wire::decode::<LogPiece>(&b) {
                Ok(Ok(bytes)) => Ok(Reply::LogChunk(bytes)),
                Ok(Err(msg)) => Err(ApiError::new(
                    ErrorKind::NotFound,
                    format!("node {node:?}: {msg}"),
                )),
                Err(e) => Err(ApiError::new(
                    ErrorKind::Unavailable,
                    format!("node {node:?} sent a bad log piece: {e}"),
                )),
            },
            Ok(None) => break,
            Err(e) => Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("node {node:?}'s log stream broke: {e}"),
            )),
        };
        let last = reply.is_err() || ended;
        answered = true;
        let bytes = match wire::encode(&reply) {
            Ok(b) => b,
            Err(_) => return,
        };
        if wire::write_frame_bytes(&mut send, &bytes).await.is_err() || last {
            break;
        }
    }
    let _ = send.finish();
}

// ------------------------------------------------------------------------------ startup

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
    let rep = open_replica(&cfg)?;
    let (input_tx, input_rx) = mpsc::unbounded_channel::<Input>();
    let (applied_tx, applied_rx) = tokio::sync::watch::channel(0u64);
    let status = Arc::new(Mutex::new(Status {
        id: cfg.id,
        ..Default::default()
    }));
    let metrics = Arc::new(Metrics::new(cfg.id));
    let lp = RaftLoop {
        encode_machine: rep.codec().encode_machine,
        snapshot_files: rep.disk().snapshot_store(),
        node: Node::new(
            rep,
            NodeConfig {
                leader: LeaderConfig {
                    schedule_interval_ms: cfg.schedule_interval_ms,
                    retry_ms: WRITE_TIMEOUT.as_millis() as u64,
                    ..LeaderConfig::default()
                },
                write_timeout_ms: WRITE_TIMEOUT.as_millis() as u64,
            },
        ),
        peers: BTreeMap::new(),
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
        peers: Arc::new(cfg.peers.clone()),
        applied: applied_rx,
        budgets: budgets.clone(),
        logs: Arc::new(crate::logs::LogRelay::default()),
        progress: Arc::new(Mutex::new(BTreeMap::new())),
        web: web_sessions.clone(),
        http: http_bound.clone(),
    };
    let refresh_metrics = shared.input.clone();
    let up_rx = spawn_raft_thread(&cfg, lp, shared, input_rx, (server_tls, client_tls))?;
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

/// The replica on its durable log in `cfg.data_dir` (repaired first if a write was torn).
fn open_replica(cfg: &ServerConfig) -> Result<Replica<RedbDisk>, BoxError> {
    let disk = RedbDisk::open(&cfg.data_dir.join("raft.redb"))?;
    if let Some(what) = disk.repaired() {
        tracing::warn!("{what}");
    }
    let mut rcfg = ReplicaConfig::new(cfg.id, cfg.peers.keys().copied().collect());
    rcfg.election_tick = cfg.election_ticks;
    rcfg.max_election_tick = cfg.election_ticks * 2;
    rcfg.heartbeat_tick = cfg.heartbeat_ticks;
    rcfg.snapshot_every = cfg.snapshot_every;
    // Followers further behind than this get a snapshot instead of entries.
    rcfg.keep_behind_snapshot = cfg.snapshot_every.min(1000);
    rcfg.background_snapshots = true;
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
    lp: RaftLoop,
    shared: Shared,
    input_rx: mpsc::UnboundedReceiver<Input>,
    (server_tls, client_tls): (quinn::ServerConfig, quinn::ClientConfig),
) -> Result<oneshot::Receiver<Up>, BoxError> {
    let tick = Duration::from_millis(cfg.tick_ms);
    let listen = cfg.listen;
    let id = cfg.id;
    let want_priority = cfg.raft_priority;
    let (up_tx, up_rx) = oneshot::channel::<Up>();
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
                    connect_peers(&mut lp, &shared, &endpoint, &client_tls);
                    accept_connections(endpoint.clone(), shared);
                    let _ = up_tx.send(Ok((endpoint, priority)));
                    lp.run(input_rx, tick).await;
                })
            });
            if std::panic::catch_unwind(run).is_err() {
                tracing::error!("the raft loop of coordinator {id} panicked; stopping the process");
                std::process::exit(70);
            }
        })?;
    Ok(up_rx)
}

/// A sender task per peer, fed by the raft loop.
fn connect_peers(
    lp: &mut RaftLoop,
    shared: &Shared,
    endpoint: &quinn::Endpoint,
    client_tls: &quinn::ClientConfig,
) {
    for (&peer, addr) in shared.peers.iter() {
        if peer == shared.id {
            continue;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        lp.peers.insert(peer, tx);
        tokio::spawn(peer_sender(
            peer,
            addr.clone(),
            endpoint.clone(),
            client_tls.clone(),
            rx,
            shared.input.clone(),
        ));
    }
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

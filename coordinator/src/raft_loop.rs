//! The raft thread's loop: the shell around the sans-I/O `Node` (`node.rs`). It takes the
//! inputs the network side and the worker threads send (`Input`), hands them to the node with
//! the time, runs a turn, and carries out what comes out (`ServerIo`): messages to the peer
//! senders, answers through their channels, large cycles and snapshot encoding on threads of
//! their own. It also refuses writes while the data directory's disk is below its reserve.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_common::api::{ApiError, ErrorKind, Response};
use allot_common::timefmt::now_ms;
use allot_core::machine::Machine;
use raft::eraftpb::Message;
use tokio::sync::{mpsc, oneshot};

use crate::leader::{CycleDone, CycleJob, Lost, Millis};
use crate::metrics::Metrics;
use crate::node::{route, Io, Node, Proposed};
use crate::raft_inputs::{Input, SnapshotDone, Status};
use crate::raftlog::{RedbDisk, SnapshotStore};
use crate::replica::{EncodedSnapshot, SnapshotJob};

/// The raft thread's shell around the sans-I/O `Node`: the clock, the peer senders, the
/// threads that encode snapshots and compute large cycles, and what the rest of the process
/// sees (status, metrics, the applied index).
pub(crate) struct RaftLoop {
    pub(crate) node: Node<RedbDisk, oneshot::Sender<Response>>,
    /// The monotonic clock's origin for the driver's `Millis`.
    pub(crate) origin: Instant,
    pub(crate) peers: BTreeMap<u64, mpsc::UnboundedSender<Message>>,
    /// Starts and stops the peer senders as the membership changes (set once the endpoint
    /// listens).
    pub(crate) links: Option<crate::peer_links::PeerLinks>,
    pub(crate) status: Arc<Mutex<Status>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) applied_tx: tokio::sync::watch::Sender<u64>,
    /// Where snapshots encoded and cycles computed off the raft thread come back.
    pub(crate) input: mpsc::UnboundedSender<Input>,
    pub(crate) space: DiskSpace,
    /// How snapshots are encoded, and where their files go.
    pub(crate) encode_machine: fn(&Machine) -> Result<Vec<u8>, String>,
    pub(crate) snapshot_files: SnapshotStore,
    /// A write to the data directory failed: the loop stops at the end of its turn, and the
    /// shell waits for the disk (`server::wait_for_disk`).
    pub(crate) disk_failed: Option<String>,
    /// Where heavy reads run (`Route::HeavyRead`).
    pub(crate) reads: HeavyReads,
    /// What agents last said of pods that have not started (the shell's `Shared::progress`),
    /// for gang readiness's messages.
    pub(crate) progress: Arc<Mutex<crate::shared::Progress>>,
}

/// A heavy read, its copy of the machine, and where its answer goes.
type ReadJob = (crate::route::Query, Machine, oneshot::Sender<Response>);

/// Threads that answer heavy reads on copies of the machine, off the raft thread. Two, so a
/// burst of explanations cannot take more than two cores from the rest; the queue is bounded by
/// the requests' own budgets.
#[derive(Clone)]
pub(crate) struct HeavyReads(std::sync::mpsc::Sender<ReadJob>);

impl HeavyReads {
    pub(crate) fn start(id: u64) -> HeavyReads {
        let (tx, rx) = std::sync::mpsc::channel::<ReadJob>();
        let rx = Arc::new(Mutex::new(rx));
        for k in 0..2 {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("reads-{id}-{k}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    let Ok((query, machine, reply)) = job else {
                        return;
                    };
                    let _ = reply.send(query(&machine));
                });
        }
        HeavyReads(tx)
    }
}

/// Why `RaftLoop::run` returned.
pub(crate) enum Stop {
    /// Every sender of inputs is gone: the process is shutting down.
    Closed,
    /// Writing to the data directory failed (the disk is full, or failing): nothing after the
    /// failed write was acknowledged, so the replica can be opened again from its disk.
    Disk(String),
}

/// The free space of the data directory's file system, looked at no more than every 100 ms.
/// Below the reserve the leader refuses writes with an error that says so, and reads go on:
/// a disk that fills up then never fails a write half-way (which stops the replica), and
/// writes are taken again as soon as space is freed.
pub(crate) struct DiskSpace {
    pub(crate) dir: PathBuf,
    pub(crate) reserve: u64,
    /// When it was last looked at, and what was free then.
    pub(crate) seen: Option<(Instant, u64)>,
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
                let route = match route(*body, &who, wall) {
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
            Input::PeerFormat { peer, reads } => self.node.handle_peer_format(peer, reads, now),
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
            self.disk_failed = Some(format!("writing the snapshot at index {index}: {e}"));
            return;
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

    /// The peer senders, in line with the membership.
    pub(crate) fn sync_peers(&mut self) {
        if let Some(links) = &mut self.links {
            links.sync(self.node.replica(), &mut self.peers);
        }
    }

    /// What the rest of the process sees, after each turn.
    fn publish(&mut self) {
        let rep = self.node.replica();
        if let Ok(mut s) = self.status.lock() {
            s.leader = rep.leader();
            s.term = rep.term();
            s.commit = rep.commit_index();
            s.applied = rep.applied_index();
            let was_leader = s.is_leader;
            s.is_leader = rep.is_leader();
            s.beat = Some(Instant::now());
            s.limits = rep.machine.limits;
            s.wants_formats = self.node.wants_peer_formats();
            s.disk_wait = None;
            let members = rep.voters().len() + rep.learners().len();
            if s.members.len() != members || s.is_leader || was_leader {
                // Refilled in place: no allocation per turn.
                s.members.clear();
                s.members.extend(rep.member_progress());
            }
        }
    }

    /// Goes round until the inputs close or a write fails (`Stop`).
    pub(crate) async fn run(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Input>,
        tick: Duration,
    ) -> Stop {
        let mut next_tick = Instant::now() + tick;
        loop {
            match tokio::time::timeout_at(next_tick.into(), rx.recv()).await {
                Ok(Some(i)) => self.handle(i),
                Ok(None) => return Stop::Closed,
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
                reads: &self.reads,
                progress: &self.progress,
            };
            match self.node.turn(&mut io, now, now_ms()).await {
                Ok(()) => {}
                Err(e @ crate::replica::ReplicaError::Format { .. }) => {
                    tracing::error!("stopping the replica: {e}");
                    std::process::exit(70);
                }
                Err(e) => self.disk_failed = Some(e.to_string()),
            }
            if let Some(why) = self.disk_failed.take() {
                return Stop::Disk(why);
            }
            self.publish();
            self.sync_peers();
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
    reads: &'a HeavyReads,
    progress: &'a Mutex<crate::shared::Progress>,
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
            match self.peers.get(&m.to) {
                Some(tx) => {
                    let _ = tx.send(m);
                }
                // A member with no address (`peer_links` warned): raft-rs is told, or a
                // snapshot for it would keep its progress paused for good.
                None => {
                    if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                        let _ = self.input.send(Input::SnapshotStatus(m.to, false));
                    }
                    let _ = self.input.send(Input::Unreachable(m.to));
                }
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

    fn pod_progress(&self, workload: u64, rank: u32) -> Option<String> {
        crate::shared::progress_of(self.progress, workload, rank)
    }

    fn not_ready(&mut self, n: crate::leader::NotReady) {
        tracing::warn!("workload {}: {}", n.workload, n.message);
    }

    fn read_elsewhere(&mut self, query: crate::route::Query, machine: Machine, reply: Self::Reply) {
        if let Err(std::sync::mpsc::SendError((query, machine, reply))) =
            self.reads.0.send((query, machine, reply))
        {
            // The read threads are gone (they never end on their own): answer here.
            let _ = reply.send(query(&machine));
        }
    }
}

/// How long a replica whose write failed waits between two looks at its disk.
const DISK_RETRY: Duration = Duration::from_secs(1);

/// A replica whose write failed (`Stop::Disk`), out of the cluster until its disk takes writes
/// again: it neither acknowledges nor votes (its raft state is closed), answers requests that
/// it waits for its disk, says so in `/readyz` and its log, and every second tries a write in
/// `dir`; once one succeeds it opens the replica again from its disk (`reopen`), as after a
/// restart, and catches up from its peers. `None` when the inputs closed meanwhile.
pub(crate) async fn wait_for_disk(
    lp: RaftLoop,
    rx: &mut mpsc::UnboundedReceiver<Input>,
    why: String,
    dir: &std::path::Path,
    reopen: &dyn Fn() -> Result<Node<RedbDisk, oneshot::Sender<Response>>, String>,
) -> Option<RaftLoop> {
    let RaftLoop {
        node,
        origin,
        peers,
        mut links,
        status,
        metrics,
        applied_tx,
        input,
        space,
        encode_machine: _,
        snapshot_files: _,
        disk_failed: _,
        reads,
        progress,
    } = lp;
    let id = node.replica().id();
    // Closes the log's files: nothing more is written, acknowledged or voted.
    drop(node);
    tracing::error!(
        "coordinator {id}: a write to its data directory failed ({why}); it stops acknowledging and voting, and waits for the disk (a write is tried every {}s)",
        DISK_RETRY.as_secs()
    );
    let waiting = format!("coordinator {id} waits for its disk, where a write failed: {why}");
    let mut tried = 0u64;
    loop {
        if let Ok(mut s) = status.lock() {
            s.leader = 0;
            s.is_leader = false;
            s.beat = Some(Instant::now());
            s.disk_wait = Some(waiting.clone());
        }
        let next = Instant::now() + DISK_RETRY;
        loop {
            match tokio::time::timeout_at(next.into(), rx.recv()).await {
                Ok(Some(i)) => refuse_while_waiting(i, &waiting),
                Ok(None) => return None,
                Err(_) => break,
            }
        }
        tried += 1;
        if let Err(e) = probe_write(dir) {
            if tried % 60 == 1 {
                tracing::warn!("coordinator {id}: its disk still fails a write: {e}");
            }
            continue;
        }
        match reopen() {
            Ok(node) => {
                tracing::info!(
                    "coordinator {id}: its disk takes writes again; the replica is open again and catches up from its peers"
                );
                if let Some(l) = &mut links {
                    l.forget();
                }
                return Some(RaftLoop {
                    encode_machine: node.replica().codec().encode_machine,
                    snapshot_files: node.replica().disk().snapshot_store(),
                    node,
                    origin,
                    peers,
                    links,
                    status,
                    metrics,
                    applied_tx,
                    input,
                    space,
                    disk_failed: None,
                    reads,
                    progress,
                });
            }
            Err(e) => tracing::warn!("coordinator {id}: opening the replica again failed: {e}"),
        }
    }
}

/// An input that reaches a replica waiting for its disk: requests are told so; peers' messages,
/// finished cycles and snapshots are dropped (raft sends again, the next leader decides again).
fn refuse_while_waiting(input: Input, why: &str) {
    let busy = || ApiError::new(ErrorKind::Unavailable, why.to_string());
    match input {
        Input::Request { reply, .. } | Input::Read { reply, .. } => {
            let _ = reply.send(Err(busy()));
        }
        Input::RefreshMetrics(done) => {
            let _ = done.send(());
        }
        _ => {}
    }
}

/// Writes a 1 MiB file in `dir`, syncs and removes it: whether the disk takes writes now.
fn probe_write(dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join("disk-probe.tmp");
    let result = (|| {
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&vec![0u8; 1 << 20])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&path);
    result
}

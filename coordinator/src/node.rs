//! One coordinator replica without I/O, in the manner of raft-rs's `RawNode` and quinn-proto's
//! `Connection`: the replica (`replica.rs`), the leader's driver (`leader.rs`), the writes and
//! reads waiting for their answers, and the order in which a turn does things. Inputs come in
//! through `handle_*` with the time passed in; everything that leaves (messages to peers,
//! answers to callers, cycles and snapshots to compute) leaves through the shell's `Io` during a
//! `turn`. Nothing here reads a clock, sleeps or touches a socket: the server (`server.rs`)
//! drives it with sockets and threads, the seeded simulation (`tests/raft_sim.rs`) with a
//! simulated network and disk, and both run this code as it is.
//!
//! A turn, after the shell has handed in whatever arrived (and `tick` when a tick is due):
//! 1. agents' leases (leader only: `NodeLost` for nodes silent too long);
//! 2. twice: a scheduling cycle if one is due (run at once or elsewhere, as the shell decides),
//!    then the Ready loop: the leader's appends leave before the local write, votes and
//!    acknowledgements after it, then committed entries are applied, their writers answered,
//!    and the reads whose index is applied answered;
//! 3. a lost leadership fails every waiting write (its outcome is unknown: it may still commit
//!    under the new leader, and clients retry with their idempotency key) and read (asked again
//!    of the new leader); writes waited on for longer than the write timeout are forgotten
//!    (their callers have given up);
//! 4. a snapshot job when one is due, and the copy of the accounting the submit fast path
//!    starts from.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use allot_common::api::{ApiError, Body, ErrorKind, Reply, Response};
use allot_core::machine::{Command, Entry as Cmd, Machine};
use allot_net::tls::Identity;
use raft::eraftpb::Message;

use crate::budget::SubmitRates;

use crate::leader::{CycleDone, CycleJob, Leader, LeaderConfig, Lost, Millis};
use crate::raftlog::Disk;
use crate::replica::{Applied, EncodedSnapshot, Replica, ReplicaError, SnapshotJob};

pub use crate::route::{Query, Route};

/// What becomes of an answer before its caller gets it.
type Post = Box<dyn FnOnce(Response) -> Response + Send>;

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub leader: LeaderConfig,
    /// How long a write is waited on before its waiter is forgotten.
    pub write_timeout_ms: u64,
}

/// How a turn's outputs leave: the shell's sockets and threads, or the simulation's network.
/// The `async` steps are where a shell that shares its thread with the network lets it run (the
/// server yields there); the simulation's complete at once.
#[allow(async_fn_in_trait)] // Driven on one thread by the server and by the simulation.
pub trait Io {
    /// How an answer reaches its caller.
    type Reply;
    /// The leader's appends, which may leave before this replica's own write.
    async fn send_early(&mut self, msgs: Vec<Message>);
    /// The write of a Ready is done (the shell's disk makes it durable here if it has not):
    /// `msgs` needed it (votes, acknowledgements). Called once per Ready, `msgs` maybe empty.
    async fn written(&mut self, msgs: Vec<Message>);
    /// Messages made while applying; they need nothing more.
    fn send(&mut self, msgs: Vec<Message>);
    fn answer(&mut self, to: Self::Reply, response: Response);
    /// The Ready loop is drained up to `applied`; `answered` if callers were answered in it.
    async fn drained(&mut self, applied: u64, answered: bool);
    /// A cycle to compute: its result now, or `None` when it runs elsewhere and comes back
    /// through `Node::handle_cycle_done`.
    fn cycle(&mut self, job: CycleJob) -> Option<CycleDone>;
    /// A snapshot to encode; it comes back through `Node::handle_snapshot_encoded` (or
    /// `snapshot_failed`).
    fn snapshot(&mut self, job: SnapshotJob);
    /// An entry was applied (for the shell's own accounts).
    fn applied(&mut self, _a: &Applied) {}
    /// The driver declared a node lost.
    fn lost(&mut self, _l: Lost) {}
    /// What the agent of a pod that has not started last said of it (`Pulling 120 MiB: 40%`),
    /// for gang readiness's messages.
    fn pod_progress(&self, _workload: u64, _rank: u32) -> Option<String> {
        None
    }
    /// The leader evicted a workload whose pods were not ready in time.
    fn not_ready(&mut self, _n: crate::leader::NotReady) {}
    /// A heavy read (`Route::HeavyRead`) to answer from `machine`, a copy of the applied
    /// state that shares its workloads with it: the server runs it on a thread of its own;
    /// by default it runs here.
    fn read_elsewhere(&mut self, query: Query, machine: Machine, reply: Self::Reply) {
        let r = query(&machine);
        self.answer(reply, r);
    }
}

/// Runs a turn to its end where the shell's `Io` never waits (the simulation's, a test's): one
/// poll completes it. Panics if it would wait, which such an `Io` never does.
pub fn run_now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a turn waited, but its Io never waits"),
    }
}

/// What an API request from `who` becomes (`Route`), or why `who` may not make it: the
/// admin's, the agents' and the users' handlers, in turn. `wall` is the time reads of
/// usage count to. A request only the shell serves (streams, long polls, its soft state)
/// is refused as unknown here.
pub fn route(body: Body, who: &Identity, wall: i64) -> Result<Route, ApiError> {
    let body = match crate::admin_requests::route(body, who) {
        ControlFlow::Break(r) => return r,
        ControlFlow::Continue(b) => b,
    };
    let body = match crate::agent_requests::route(body, who) {
        ControlFlow::Break(r) => return r,
        ControlFlow::Continue(b) => b,
    };
    match crate::user_requests::route(body, who, wall) {
        ControlFlow::Break(r) => r,
        ControlFlow::Continue(_) => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request the coordinator's network side serves (a stream, a long poll, a login), not the cluster's state",
        )),
    }
}

/// What `handle_propose` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proposed {
    /// Into the log; answered once applied.
    Waiting,
    /// A submit the fast path admitted in its own entry (it ran a small cycle to plan it).
    Planned,
    /// Refused at once (not the leader, too large); the answer goes out in the next turn.
    Refused,
}

pub struct Node<D: Disk, R> {
    rep: Replica<D>,
    leader: Leader,
    write_timeout_ms: u64,
    /// Writes waiting to be applied, by token: who to answer, since when, and what becomes
    /// of the answer.
    waiters: BTreeMap<u64, (R, Millis, Option<Post>)>,
    /// Reads waiting for their read index, by token (heavy ones marked).
    pending_reads: BTreeMap<u64, (Query, bool, R)>,
    /// Reads with their index, waiting for it to be applied.
    ready_reads: Vec<(u64, Query, bool, R)>,
    /// Answers made outside a turn, given to the shell in the next.
    outbox: Vec<(R, Response)>,
    /// The term this replica led in at the end of its last turn, if it led. The leader's
    /// driver notices role changes too, at its own entry points; this is the node's own view,
    /// so that what waited on a leadership is failed whichever of them noticed first.
    led_in: Option<u64>,
    /// Each user certificate's submissions, against the submission rate (while leading).
    rates: SubmitRates,
    /// The formats each peer said it reads, and when (`handle_peer_format`).
    peer_formats: BTreeMap<u64, (u32, Millis)>,
    /// When this leader last proposed raising the cluster's format.
    format_proposed: Option<Millis>,
}

/// How long a peer's word on the formats it reads counts: a replica may be replaced by an
/// older build before the cluster's format is raised, so only recent answers raise it.
const FORMAT_WORD_MS: Millis = 10_000;
/// How long a proposal to raise the format is given before it is made again.
const FORMAT_RETRY_MS: Millis = 5_000;

impl<D: Disk, R> Node<D, R> {
    pub fn new(rep: Replica<D>, cfg: NodeConfig) -> Self {
        Node {
            rep,
            leader: Leader::new(cfg.leader),
            write_timeout_ms: cfg.write_timeout_ms,
            waiters: BTreeMap::new(),
            pending_reads: BTreeMap::new(),
            ready_reads: Vec::new(),
            outbox: Vec::new(),
            led_in: None,
            rates: SubmitRates::default(),
            peer_formats: BTreeMap::new(),
            format_proposed: None,
        }
    }

    pub fn replica(&self) -> &Replica<D> {
        &self.rep
    }

    /// The replica, for what a shell does outside the protocol (a test's direct reads).
    pub fn replica_mut(&mut self) -> &mut Replica<D> {
        &mut self.rep
    }

    pub fn is_leader(&self) -> bool {
        self.rep.is_leader()
    }

    /// Writes and reads waiting for an answer.
    pub fn waiting(&self) -> usize {
        self.waiters.len() + self.pending_reads.len() + self.ready_reads.len()
    }

    /// A tick of the raft clock (elections, heartbeats).
    pub fn tick(&mut self) {
        self.rep.tick();
    }

    /// A raft message from a peer. raft-rs refuses stale or unexpected ones; nothing changes
    /// then.
    pub fn handle_raft(&mut self, m: Message) {
        let _ = self.rep.step(m);
    }

    pub fn handle_unreachable(&mut self, peer: u64) {
        self.rep.report_unreachable(peer);
    }

    /// Whether a snapshot sent to `peer` got there.
    pub fn handle_snapshot_status(&mut self, peer: u64, delivered: bool) {
        self.rep.report_snapshot(peer, delivered);
    }

    /// A peer replica said it reads formats up to `reads` (the shell asks while
    /// `wants_peer_formats`).
    pub fn handle_peer_format(&mut self, peer: u64, reads: u32, now: Millis) {
        self.peer_formats.insert(peer, (reads, now));
    }

    /// Whether this replica leads a cluster whose format is below the one it reads: then the
    /// shell asks the peers which they read, and the turn raises the format once all do.
    pub fn wants_peer_formats(&self) -> bool {
        self.rep.is_leader() && self.rep.machine.format < self.rep.format_reads()
    }

    /// The format every voter reads, by its own recent word (this replica's own, the peers'
    /// answers within `FORMAT_WORD_MS`; a voter not heard from reads only format 0).
    fn voters_read(&self, now: Millis) -> u32 {
        let id = self.rep.id();
        // Learners too: one still catching up must read what it will be sent.
        self.rep
            .voters()
            .iter()
            .chain(self.rep.learners())
            .map(|&v| match self.peer_formats.get(&v) {
                _ if v == id => self.rep.format_reads(),
                Some(&(reads, at)) if now.saturating_sub(at) <= FORMAT_WORD_MS => reads,
                _ => 0,
            })
            .min()
            .unwrap_or(0)
    }

    /// Leader only: proposes raising the cluster's format once every voter reads a newer one.
    fn raise_format(&mut self, now: Millis, wall: i64) {
        if !self.wants_peer_formats() {
            return;
        }
        let version = self.voters_read(now);
        let retry = self
            .format_proposed
            .is_none_or(|at| now.saturating_sub(at) >= FORMAT_RETRY_MS);
        if version <= self.rep.machine.format || !retry {
            return;
        }
        let token = self.leader.token();
        let cmd = Cmd {
            now: wall,
            cmd: Command::SetFormat { version },
        };
        if self.rep.propose(token, &cmd).is_ok() {
            self.format_proposed = Some(now);
        }
    }

    /// An agent's heartbeat (counted while this replica leads).
    pub fn handle_heartbeat(&mut self, node: &str, now: Millis) {
        self.leader.handle_heartbeat(&self.rep, node, now);
    }

    /// A write: a submit the leader can admit at once is planned in its own entry (the fast
    /// path); everything goes into the log stamped with `wall` and is answered once applied.
    pub fn handle_propose(&mut self, cmd: Command, reply: R, now: Millis, wall: i64) -> Proposed {
        self.propose(cmd, reply, None, now, wall)
    }

    fn propose(
        &mut self,
        cmd: Command,
        reply: R,
        post: Option<Post>,
        now: Millis,
        wall: i64,
    ) -> Proposed {
        let token = self.leader.token();
        let cmd = self.leader.fast_path(&self.rep, cmd, wall, token, now);
        let planned = matches!(cmd, Command::SubmitPlanned { .. });
        match self.rep.propose(token, &Cmd { now: wall, cmd }) {
            Ok(()) => {
                self.waiters.insert(token, (reply, now, post));
                if planned {
                    Proposed::Planned
                } else {
                    Proposed::Waiting
                }
            }
            Err(e) => {
                self.leader.handle_refused(token);
                self.outbox.push((reply, Err(e)));
                Proposed::Refused
            }
        }
    }

    /// An API request from `who`: routed (`route`), then carried out (`handle_route`); a
    /// refusal is answered in the next turn.
    pub fn handle_request(
        &mut self,
        body: Body,
        who: &Identity,
        reply: R,
        now: Millis,
        wall: i64,
    ) -> Proposed {
        match route(body, who, wall) {
            Ok(route) => self.handle_route(route, who, reply, now, wall),
            Err(e) => {
                self.outbox.push((reply, Err(e)));
                Proposed::Refused
            }
        }
    }

    /// Carries out a routed request: submissions are counted against a user's rate first
    /// (while leading; a follower's answer is a redirect), an agent's registration is heard as
    /// a heartbeat, writes are proposed and reads wait for their read index.
    pub fn handle_route(
        &mut self,
        route: Route,
        who: &Identity,
        reply: R,
        now: Millis,
        wall: i64,
    ) -> Proposed {
        match route {
            Route::Propose(cmd) => self.propose(cmd, reply, None, now, wall),
            Route::Submits { cmd, count } => {
                if let (Identity::User { .. }, true) = (who, self.rep.is_leader()) {
                    let limits = self.rep.machine.limits;
                    let who = who.to_string();
                    if let Err(e) = self.rates.take(&who, count, &limits, now) {
                        let e = ApiError::new(ErrorKind::LimitExceeded, format!("{who}: {e}"));
                        self.outbox.push((reply, Err(e)));
                        return Proposed::Refused;
                    }
                }
                self.propose(cmd, reply, None, now, wall)
            }
            Route::Config { cmd, policy } => {
                let post: Post = Box::new(move |r| match r {
                    Ok(Reply::SchedulerConfig(view)) => Ok(Reply::SchedulerConfig(
                        crate::config_text::with_text(view, &policy),
                    )),
                    other => other,
                });
                self.propose(cmd, reply, Some(post), now, wall)
            }
            Route::Report { node, cmd } => {
                self.handle_heartbeat(&node, now);
                self.propose(cmd, reply, None, now, wall)
            }
            Route::Member(change) if self.rep.member_change_done(&change) => {
                self.outbox.push((reply, Ok(Reply::Done)));
                Proposed::Refused
            }
            Route::Member(change) => {
                let token = self.leader.token();
                match self.rep.propose_member_change(token, &change) {
                    Ok(()) => {
                        self.waiters.insert(token, (reply, now, None));
                        Proposed::Waiting
                    }
                    Err(e) => {
                        self.outbox.push((reply, Err(e)));
                        Proposed::Refused
                    }
                }
            }
            Route::Read(q) => {
                self.handle_read(q, reply);
                Proposed::Waiting
            }
            Route::HeavyRead(q) => {
                self.read(q, true, reply);
                Proposed::Waiting
            }
        }
    }

    /// A linearizable read: answered once a quorum confirms the read index and it is applied.
    pub fn handle_read(&mut self, query: Query, reply: R) {
        self.read(query, false, reply);
    }

    fn read(&mut self, query: Query, heavy: bool, reply: R) {
        let token = self.leader.token();
        match self.rep.read_index(token) {
            Ok(()) => {
                self.pending_reads.insert(token, (query, heavy, reply));
            }
            Err(e) => self.outbox.push((reply, Err(e))),
        }
    }

    /// A cycle computed elsewhere came back.
    pub fn handle_cycle_done(&mut self, done: CycleDone, now: Millis) {
        self.leader.handle_cycle_done(&mut self.rep, done, now);
    }

    /// A snapshot job came back encoded (and maybe written to its file).
    pub fn handle_snapshot_encoded(&mut self, s: EncodedSnapshot) -> Result<(), ReplicaError> {
        self.rep.finish_snapshot(s)
    }

    /// A snapshot job could not be encoded; the next comes at `next_snapshot_at`.
    pub fn snapshot_failed(&mut self, index: u64) {
        self.rep.snapshot_failed(index);
    }

    /// One turn, in the order the module's comment gives. A storage error means nothing of
    /// what follows may be acknowledged: the shell stops the replica.
    pub async fn turn<I: Io<Reply = R>>(
        &mut self,
        io: &mut I,
        now: Millis,
        wall: i64,
    ) -> Result<(), ReplicaError> {
        for (to, r) in self.outbox.drain(..) {
            io.answer(to, r);
        }
        for l in self.leader.poll_leases(&mut self.rep, now, wall) {
            io.lost(l);
        }
        let progress = |id: u64, rank: u32| io.pod_progress(id, rank);
        let not_ready = self
            .leader
            .poll_pods_ready(&mut self.rep, now, wall, &progress);
        for n in not_ready {
            io.not_ready(n);
        }
        // Schedule as soon as something changed, not at the next turn.
        for _ in 0..2 {
            if let Some(job) = self.leader.poll_cycle(&self.rep, now, wall) {
                if let Some(done) = io.cycle(job) {
                    self.leader.handle_cycle_done(&mut self.rep, done, now);
                }
            }
            self.drain_ready(io).await?;
        }
        self.leader.sync_role(&self.rep, now);
        let leads = self.rep.is_leader().then(|| self.rep.term());
        if self.led_in.is_some() && leads != self.led_in {
            // A write in the log may still commit under the next leader: its outcome is
            // unknown, and only the caller can tell whether it is safe to send again (submits
            // with a client token are). A read is simply asked again of the leader.
            let unknown = ApiError::new(
                ErrorKind::Unavailable,
                "leadership changed before the write was applied; it may or may not have been: retry (submits with the same client token are idempotent)",
            );
            for (_, (w, _, _)) in std::mem::take(&mut self.waiters) {
                io.answer(w, Err(unknown.clone()));
            }
            let again = if leads.is_some() {
                ApiError::new(
                    ErrorKind::Unavailable,
                    "leadership changed during the read: retry",
                )
            } else {
                self.rep.not_leader()
            };
            for (_, (_, _, r)) in std::mem::take(&mut self.pending_reads) {
                io.answer(r, Err(again.clone()));
            }
        }
        self.led_in = leads;
        self.raise_format(now, wall);
        self.rep.promote_caught_up();
        let timeout = self.write_timeout_ms;
        self.waiters
            .retain(|_, (_, since, _)| now.saturating_sub(*since) <= timeout);
        if let Some(job) = self.rep.take_snapshot_job()? {
            io.snapshot(job);
        }
        self.leader.prepare_scratch(&self.rep);
        Ok(())
    }

    /// The Ready loop until raft-rs has nothing more, then the reads whose index is applied.
    async fn drain_ready<I: Io<Reply = R>>(&mut self, io: &mut I) -> Result<(), ReplicaError> {
        let mut answered = false;
        while let Some((rd, early)) = self.rep.ready_begin() {
            if !early.is_empty() {
                io.send_early(early).await;
            }
            let (rd, persisted) = self.rep.ready_write(rd)?;
            io.written(persisted).await;
            self.rep.ready_apply(rd)?;
            io.send(self.rep.take_messages());
            for a in self.rep.take_applied() {
                self.leader.handle_applied(&a);
                io.applied(&a);
                if let Some(t) = a.token {
                    if let Some((w, _, post)) = self.waiters.remove(&t) {
                        let answer = match post {
                            Some(p) => p(a.result),
                            None => a.result,
                        };
                        io.answer(w, answer);
                        answered = true;
                    }
                }
            }
            for (token, index) in self.rep.take_reads() {
                if let Some((q, heavy, r)) = self.pending_reads.remove(&token) {
                    self.ready_reads.push((index, q, heavy, r));
                }
            }
        }
        let applied = self.rep.applied_index();
        for (index, q, heavy, r) in std::mem::take(&mut self.ready_reads) {
            if index > applied {
                self.ready_reads.push((index, q, heavy, r));
            } else if heavy {
                io.read_elsewhere(q, self.rep.machine.clone(), r);
            } else {
                io.answer(r, q(&self.rep.machine));
                answered = true;
            }
        }
        io.drained(applied, answered).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raftlog::MemDisk;
    use crate::replica::{ReplicaConfig, SnapshotCodec};
    use allot_core::machine::Machine;

    /// What a test's turns put out: messages for the peers and answers by caller.
    #[derive(Default)]
    struct TestIo {
        out: Vec<Message>,
        answers: Vec<(u32, Response)>,
        /// Callers whose reads were handed out to run elsewhere.
        elsewhere: Vec<u32>,
    }

    impl Io for TestIo {
        type Reply = u32;
        async fn send_early(&mut self, msgs: Vec<Message>) {
            self.out.extend(msgs);
        }
        async fn written(&mut self, msgs: Vec<Message>) {
            self.out.extend(msgs);
        }
        fn send(&mut self, msgs: Vec<Message>) {
            self.out.extend(msgs);
        }
        fn answer(&mut self, to: u32, response: Response) {
            self.answers.push((to, response));
        }
        async fn drained(&mut self, _applied: u64, _answered: bool) {}
        fn cycle(&mut self, job: CycleJob) -> Option<CycleDone> {
            Some(job.run())
        }
        fn snapshot(&mut self, _job: SnapshotJob) {}
        fn read_elsewhere(&mut self, query: Query, machine: Machine, reply: u32) {
            self.elsewhere.push(reply);
            let r = query(&machine);
            self.answer(reply, r);
        }
    }

    /// Three nodes; `cut` is a node whose messages are dropped both ways.
    struct Cluster {
        nodes: Vec<Node<MemDisk, u32>>,
        answers: Vec<Vec<(u32, Response)>>,
        cut: Option<usize>,
    }

    impl Cluster {
        fn new() -> Self {
            let logger = slog::Logger::root(slog::Discard, slog::o!());
            let nodes = (1..=3)
                .map(|id| {
                    let mut cfg = ReplicaConfig::new(id, vec![1, 2, 3]);
                    // Distinct timeouts, so two never campaign at once.
                    cfg.election_tick = 5 + 4 * id as usize;
                    cfg.max_election_tick = cfg.election_tick + 1;
                    let rep =
                        Replica::open(cfg, MemDisk::new(false), SnapshotCodec::wire(), &logger)
                            .expect("opens");
                    Node::new(
                        rep,
                        NodeConfig {
                            leader: LeaderConfig::default(),
                            write_timeout_ms: 10_000,
                        },
                    )
                })
                .collect();
            Cluster {
                nodes,
                answers: vec![Vec::new(); 3],
                cut: None,
            }
        }

        /// Turns on every node at `now` until no message is left in flight.
        fn settle(&mut self, now: Millis) {
            for _ in 0..50 {
                let mut out = Vec::new();
                for (i, n) in self.nodes.iter_mut().enumerate() {
                    let mut io = TestIo::default();
                    run_now(n.turn(&mut io, now, now as i64)).expect("turn");
                    self.answers[i].extend(io.answers);
                    out.extend(io.out);
                }
                if out.is_empty() {
                    return;
                }
                for m in out {
                    let (from, to) = (m.from as usize - 1, m.to as usize - 1);
                    if self.cut != Some(from) && self.cut != Some(to) {
                        self.nodes[to].handle_raft(m);
                    }
                }
            }
            panic!("messages still in flight after 50 rounds");
        }

        fn elect(&mut self, i: usize, now: Millis) {
            self.nodes[i].replica_mut().campaign().expect("campaigns");
            self.settle(now);
            assert!(self.nodes[i].is_leader());
        }
    }

    fn cancel(name: &str) -> Command {
        Command::Cancel {
            name: name.into(),
            team: None,
        }
    }

    #[test]
    fn a_write_is_answered_in_the_turn_that_applies_it_and_a_follower_refuses_in_its_next() {
        let mut c = Cluster::new();
        c.elect(0, 0);
        assert_eq!(
            c.nodes[0].handle_propose(cancel("w"), 7, 10, 10),
            Proposed::Waiting
        );
        assert_eq!(
            c.nodes[1].handle_propose(cancel("w"), 8, 10, 10),
            Proposed::Refused
        );
        // Nothing leaves outside a turn.
        assert!(c.answers.iter().all(Vec::is_empty));
        c.settle(10);
        // The cancel of an unknown workload is applied, and its error is the answer.
        assert_eq!(c.answers[0].len(), 1);
        assert_eq!(c.answers[0][0].0, 7);
        assert_eq!(c.answers[1].len(), 1);
        let (to, refused) = &c.answers[1][0];
        assert_eq!(*to, 8);
        assert_eq!(
            refused.as_ref().map_err(|e| e.kind),
            Err(ErrorKind::NotLeader)
        );
        // A read is answered from the applied state once a quorum confirms it.
        c.nodes[0].handle_read(Box::new(|_m: &Machine| Ok(Reply::Done)), 9);
        c.settle(20);
        assert!(matches!(c.answers[0].last(), Some((9, Ok(Reply::Done)))));
        assert_eq!(c.nodes[0].waiting(), 0);
    }

    #[test]
    fn heavy_reads_are_answered_from_a_copy_handed_out_and_light_ones_in_the_turn() {
        let mut c = Cluster::new();
        c.elect(0, 0);
        let admin = Identity::Admin { name: "a".into() };
        let all = Body::GetWorkloads(allot_common::api::WorkloadFilter::default());
        c.nodes[0].handle_request(all, &admin, 11, 5, 5);
        c.nodes[0].handle_request(Body::GetNodes, &admin, 12, 5, 5);
        let mut elsewhere = Vec::new();
        for _ in 0..50 {
            let mut out = Vec::new();
            for (i, n) in c.nodes.iter_mut().enumerate() {
                let mut io = TestIo::default();
                run_now(n.turn(&mut io, 5, 5)).expect("turn");
                if i == 0 {
                    elsewhere.extend(io.elsewhere);
                }
                c.answers[i].extend(io.answers);
                out.extend(io.out);
            }
            for m in out {
                c.nodes[m.to as usize - 1].handle_raft(m);
            }
        }
        assert_eq!(
            elsewhere,
            vec![11],
            "only the list of every workload is heavy"
        );
        assert!(c.answers[0]
            .iter()
            .any(|(to, r)| *to == 11 && matches!(r, Ok(Reply::Workloads(_)))));
        assert!(c.answers[0]
            .iter()
            .any(|(to, r)| *to == 12 && matches!(r, Ok(Reply::Nodes(_)))));
    }

    #[test]
    fn a_lost_leadership_fails_what_waited_and_a_stale_write_is_forgotten() {
        let mut c = Cluster::new();
        c.elect(0, 0);
        // Cut off, the leader cannot commit: the write and the read wait.
        c.cut = Some(0);
        c.nodes[0].handle_propose(cancel("w"), 1, 100, 100);
        c.nodes[0].handle_read(Box::new(|_m: &Machine| Ok(Reply::Done)), 2);
        c.settle(100);
        assert_eq!(c.nodes[0].waiting(), 2);
        assert!(c.answers[0].is_empty());
        // Past the write timeout the write is forgotten (its caller gave up); the read waits on.
        c.settle(100 + 10_001);
        assert_eq!(c.nodes[0].waiting(), 1);
        assert!(c.answers[0].is_empty());
        // Another write waits; then replica 2 is elected and the old leader hears of it.
        c.nodes[0].handle_propose(cancel("w"), 3, 20_000, 20_000);
        c.settle(20_000);
        // The others hear nothing from it for longer than an election timeout and elect one
        // of themselves; then the old leader hears of the new term.
        for _ in 0..40 {
            c.nodes[1].tick();
            c.nodes[2].tick();
            c.settle(20_000);
        }
        assert!(c.nodes[1].is_leader() || c.nodes[2].is_leader());
        c.cut = None;
        for _ in 0..3 {
            c.nodes[1].tick();
            c.nodes[2].tick();
            c.settle(20_100);
        }
        assert!(!c.nodes[0].is_leader());
        let mut failed: Vec<(u32, ErrorKind)> = c.answers[0]
            .iter()
            .map(|(to, r)| (*to, r.as_ref().map_err(|e| e.kind).expect_err("failed")))
            .collect();
        failed.sort_by_key(|(to, _)| *to);
        // The read goes to the new leader; the write's outcome is unknown.
        assert_eq!(
            failed,
            vec![(2, ErrorKind::NotLeader), (3, ErrorKind::Unavailable)]
        );
        assert_eq!(c.nodes[0].waiting(), 0);
    }
}

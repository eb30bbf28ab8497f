//! Deterministic simulation of 3 and 5 coordinator replicas: the real `Replica` (raft-rs, the
//! log cache, the state machine, the scheduler's plans) on a simulated network and disks, with
//! message loss, delay, reordering, partitions, and crashes that lose unsynced writes. After
//! every step it checks:
//! - at most one leader per term;
//! - no committed entry is lost or changed (every replica applies the same entry at an index,
//!   and every leader holds every entry committed before its term);
//! - replicas at the same applied index have the same state (digest of the encoded machine);
//! - the applied state never over-commits a quota or a device (`State::check_invariants`).
//!
//! Some replicas (drawn by the seed) snapshot as the server does: a copy of the machine is
//! encoded "elsewhere" and its bytes come back a few steps later, by which time the replica
//! may have applied more, installed a newer snapshot from the leader, or crashed.
//!
//! A failure prints the seed; `ALLOT_SIM_SEED=<seed> cargo test -p allot-coordinator --test
//! raft_sim replay -- --nocapture` replays it. `ALLOT_SIM_SEEDS=N` runs more seeds.

use std::collections::{BTreeMap, BTreeSet};

use allot_common::api::{ActivationState, ComputeQuotaInput, RunSpec, SubmitInput};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::{Catalog, PodSet, PriorityRef, ResourceName, Resources, WorkloadSpec};
use allot_coordinator::raftlog::MemDisk;
use allot_coordinator::replica::{
    EncodedSnapshot, Replica, ReplicaConfig, Sent, SnapshotCodec, SnapshotJob,
};
use allot_core::machine::{Command, Entry as Cmd};
use allot_core::WlState;
use raft::eraftpb::Message;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

struct Committed {
    term: u64,
    data: Vec<u8>,
    seen_in_term: u64,
}

struct InFlight {
    at: u64,
    seq: u64,
    msg: Message,
}

struct Sim {
    seed: u64,
    rng: Rng,
    n: usize,
    nodes: Vec<Option<Replica<MemDisk>>>,
    disks: Vec<MemDisk>,
    net: Vec<InFlight>,
    seq: u64,
    step: u64,
    /// Replica ids in each side of the current partition (empty = none).
    partition: Option<BTreeSet<u64>>,
    leaders: BTreeMap<u64, u64>,
    /// Each committed index: its entry's term and data, and the term of the replica that first
    /// applied it. The entry was committed in that term or earlier (the replica learned of the
    /// commit from a leader no newer than itself), so every leader of a later term must hold it.
    committed: BTreeMap<u64, Committed>,
    digests: BTreeMap<u64, u64>,
    next_token: u64,
    acknowledged: BTreeSet<String>,
    /// Submits acknowledged as admitted by their own entry (the fast path's plan applied).
    admitted_in_submit: usize,
    submitted: u64,
    plan_at: u64,
    /// Off while the cluster heals at the end.
    faults_on: bool,
    logger: slog::Logger,
    log: Vec<String>,
    /// Snapshot jobs being encoded: (replica, its incarnation, the step they finish, the job).
    jobs: Vec<(usize, u64, u64, SnapshotJob)>,
    /// Per replica: bumped at every crash, so a job never finishes on a later incarnation.
    incarnation: Vec<u64>,
    /// Snapshots written from background jobs, over the run.
    background_written: u64,
}

fn codec() -> SnapshotCodec {
    SnapshotCodec::wire()
}

fn encode_machine(m: &allot_core::machine::Machine) -> Vec<u8> {
    allot_common::wire::encode_snapshot(m).expect("machine encodes")
}

impl Sim {
    fn new(seed: u64, n: usize) -> Self {
        let mut sim = Sim {
            seed,
            rng: Rng(seed),
            n,
            nodes: Vec::new(),
            disks: (0..n).map(|_| MemDisk::new(true)).collect(),
            net: Vec::new(),
            seq: 0,
            step: 0,
            partition: None,
            leaders: BTreeMap::new(),
            committed: BTreeMap::new(),
            digests: BTreeMap::new(),
            next_token: 1,
            acknowledged: BTreeSet::new(),
            admitted_in_submit: 0,
            submitted: 0,
            plan_at: 0,
            faults_on: true,
            logger: slog::Logger::root(slog::Discard, slog::o!()),
            log: Vec::new(),
            jobs: Vec::new(),
            incarnation: vec![0; n],
            background_written: 0,
        };
        for i in 0..n {
            let r = sim.open(i);
            sim.nodes.push(Some(r));
        }
        sim
    }

    fn cfg(&mut self, i: usize) -> ReplicaConfig {
        let mut c = ReplicaConfig::new(i as u64 + 1, (1..=self.n as u64).collect());
        // raft-rs draws the election timeout from a thread RNG; a one-tick range makes it
        // deterministic, and the seed picks each replica's.
        let e = 10 + self.rng.below(10) as usize;
        c.election_tick = e;
        c.max_election_tick = e + 1;
        c.heartbeat_tick = 2;
        c.snapshot_every = 40 + self.rng.below(40);
        c.keep_behind_snapshot = self.rng.below(20);
        c.background_snapshots = self.rng.chance(500);
        c
    }

    /// Takes replica `i`'s due snapshot job, to finish a few steps from now.
    fn take_job(&mut self, i: usize) {
        let Some(r) = self.nodes[i].as_mut() else {
            return;
        };
        match r.take_snapshot_job() {
            Ok(Some(job)) => {
                let at = self.step + 1 + self.rng.below(8);
                self.jobs.push((i, self.incarnation[i], at, job));
            }
            Ok(None) => {}
            Err(e) => {
                let msg = format!("replica {} take_snapshot_job: {e}", i + 1);
                self.fail(&msg)
            }
        }
    }

    /// Finishes the jobs due now: encodes the copy and writes it (synced, or lost in a crash).
    fn finish_jobs(&mut self) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.jobs)
            .into_iter()
            .partition(|(_, _, at, _)| *at <= self.step);
        self.jobs = later;
        for (i, inc, _, job) in due {
            if inc != self.incarnation[i] {
                continue;
            }
            let Some(r) = self.nodes[i].as_mut() else {
                continue;
            };
            let data = encode_machine(&job.machine);
            let before = r.snapshot_index();
            if let Err(e) = r.finish_snapshot(EncodedSnapshot {
                index: job.index,
                term: job.term,
                data,
                file: None,
            }) {
                let msg = format!("replica {} finish_snapshot: {e}", i + 1);
                self.fail(&msg)
            }
            if r.snapshot_index() != before {
                self.background_written += 1;
            }
            self.disks[i].sync();
        }
    }

    /// Replica `i` crashed: its disk loses what was not synced, its jobs are gone.
    fn crash(&mut self, i: usize) {
        self.disks[i].crash();
        self.nodes[i] = None;
        self.incarnation[i] += 1;
    }

    fn open(&mut self, i: usize) -> Replica<MemDisk> {
        let cfg = self.cfg(i);
        Replica::open(cfg, self.disks[i].clone(), codec(), &self.logger)
            .unwrap_or_else(|e| self.fail(&format!("replica {} failed to open: {e}", i + 1)))
    }

    fn fail(&self, what: &str) -> ! {
        let tail: Vec<&String> = self.log.iter().rev().take(30).collect();
        panic!(
            "seed {} ({} replicas), step {}: {what}\nlast events (newest first): {tail:#?}\nreplay: ALLOT_SIM_SEED={} ALLOT_SIM_REPLICAS={} cargo test -p allot-coordinator --test raft_sim replay -- --nocapture",
            self.seed, self.n, self.step, self.seed, self.n
        );
    }

    fn connected(&self, a: u64, b: u64) -> bool {
        match &self.partition {
            None => true,
            Some(side) => side.contains(&a) == side.contains(&b),
        }
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if self.faults_on && self.rng.chance(30) {
                self.lost(&m);
                continue;
            }
            let delay = 1 + self.rng.below(4);
            let dup = self.rng.chance(5);
            self.seq += 1;
            self.net.push(InFlight {
                at: self.step + delay,
                seq: self.seq,
                msg: m.clone(),
            });
            if dup {
                self.seq += 1;
                self.net.push(InFlight {
                    at: self.step + delay + 1,
                    seq: self.seq,
                    msg: m,
                });
            }
        }
    }

    /// A lost snapshot is reported to its sender, as the real transport does.
    fn lost(&mut self, m: &Message) {
        if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
            if let Some(r) = self.nodes[(m.from - 1) as usize].as_mut() {
                r.report_snapshot(m.to, false);
            }
        }
    }

    fn deliver(&mut self) {
        let now = self.step;
        let mut due: Vec<InFlight> = Vec::new();
        let mut rest = Vec::new();
        for f in std::mem::take(&mut self.net) {
            if f.at <= now {
                due.push(f);
            } else {
                rest.push(f);
            }
        }
        self.net = rest;
        // Reorder the due messages deterministically.
        due.sort_by_key(|f| (f.seq.wrapping_mul(0x9e37_79b9) ^ self.seed, f.seq));
        for f in due {
            let (from, to) = (f.msg.from, f.msg.to);
            if !self.connected(from, to) || self.nodes[(to - 1) as usize].is_none() {
                self.lost(&f.msg);
                continue;
            }
            let is_snap = f.msg.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot;
            if let Some(r) = self.nodes[(to - 1) as usize].as_mut() {
                // Errors here are raft-rs refusing a stale message; they change nothing.
                let _ = r.step(f.msg);
            }
            if is_snap {
                if let Some(r) = self.nodes[(from - 1) as usize].as_mut() {
                    r.report_snapshot(to, true);
                }
            }
        }
    }

    fn leader(&self) -> Option<usize> {
        (0..self.n).find(|&i| self.nodes[i].as_ref().is_some_and(|r| r.is_leader()))
    }

    fn propose(&mut self, i: usize, cmd: Command) {
        let token = self.next_token;
        self.next_token += 1;
        let now = self.step as i64 * 100;
        if let Some(r) = self.nodes[i].as_mut() {
            let _ = r.propose(token, &Cmd { now, cmd });
        }
    }

    fn random_command(&mut self, i: usize) {
        let k = self.rng.below(100);
        let cmd = if k < 8 {
            let t = self.rng.below(4);
            let count = 1 + self.rng.below(3);
            let cfg = ComputeQuotaConfig::parse_shorthand(&format!(
                "ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count={count}}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}},PreemptTeamTasks=LowerPriority"
            ))
            .expect("valid shorthand");
            let input = ComputeQuotaInput {
                name: format!("q-team-{t}"),
                description: None,
                team: format!("team-{t}"),
                fair_share_weight: 1 + self.rng.below(10) as u32,
                config: cfg,
                activation: ActivationState::Enabled,
            };
            if self.rng.chance(500) {
                Command::CreateComputeQuota(input)
            } else {
                Command::UpdateComputeQuota {
                    input,
                    target_version: 1 + self.rng.below(3),
                }
            }
        } else if k < 14 {
            let it = Catalog::builtin().get("ml.g5.8xlarge").expect("in catalog");
            Command::RegisterNode {
                name: format!("node-{}", self.rng.below(6)),
                instance_type: "ml.g5.8xlarge".into(),
                capacity: it.resources(),
            }
        } else if k < 17 {
            Command::SetNodeHealth {
                name: format!("node-{}", self.rng.below(6)),
                healthy: self.rng.chance(600),
                reason: "sim".into(),
            }
        } else if k < 70 {
            self.submitted += 1;
            let mut req = Resources::new();
            req.add(&ResourceName::gpu(), 1);
            let name = format!("w-{}-{}", self.seed % 1000, self.submitted);
            let input = SubmitInput {
                spec: WorkloadSpec {
                    name,
                    team: format!("team-{}", self.rng.below(4)),
                    priority: PriorityRef::Value(self.rng.below(3) as i32),
                    instance_type: None,
                    pod_sets: vec![PodSet {
                        name: "main".into(),
                        count: 1 + self.rng.below(2) as u32,
                        min_count: None,
                        requests: req,
                    }],
                },
                run: Some(RunSpec::default()),
                client_token: Some(format!("tok-{}", self.submitted)),
            };
            // Half the submits take the leader's fast path: the plan for the state right
            // after the submit, computed on this replica's applied state whether or not other
            // entries are in flight (the server waits until none is), so the apply-time check
            // of the expected id and the plan's verification are both exercised.
            let now = self.step as i64 * 100;
            let planned = match self.nodes[i].as_ref() {
                Some(r) if self.rng.chance(500) => r.machine.plan_submit(&input, now),
                _ => None,
            };
            match planned {
                Some((id, plan)) => Command::SubmitPlanned {
                    input,
                    id: id.0,
                    plan,
                },
                None => Command::Submit(input),
            }
        } else if k < 78 {
            // An agent reports an end: finish a running one, or complete an eviction.
            let Some(name) = self.pick_workload(i, |s| s.holds_quota()) else {
                return;
            };
            Command::WorkloadExited {
                name,
                succeeded: true,
                node: None,
            }
        } else if k < 82 {
            let Some(name) = self.pick_workload(i, |s| s == WlState::Pending) else {
                return;
            };
            Command::Cancel { name, team: None }
        } else {
            return;
        };
        self.propose(i, cmd);
    }

    /// A random workload, as replica `i` sees it, whose state passes `pred`.
    fn pick_workload(&mut self, i: usize, pred: impl Fn(WlState) -> bool) -> Option<String> {
        let ws: Vec<String> = self.nodes[i]
            .as_ref()?
            .machine
            .state
            .workloads
            .values()
            .filter(|w| pred(w.state))
            .map(|w| w.spec.name.clone())
            .collect();
        if ws.is_empty() {
            return None;
        }
        Some(ws[self.rng.below(ws.len() as u64) as usize].clone())
    }

    fn schedule(&mut self, i: usize) {
        if self.step < self.plan_at {
            return;
        }
        let Some(r) = self.nodes[i].as_ref() else {
            return;
        };
        let plan = allot_core::schedule(&r.machine.state, self.step as i64 * 100);
        if plan.has_decisions() {
            self.plan_at = self.step + 3;
            self.propose(i, Command::Plan(plan));
        }
    }

    fn ready(&mut self, i: usize) {
        let Some(r) = self.nodes[i].as_mut() else {
            return;
        };
        let mut early = Vec::new();
        let mut after_write = Vec::new();
        let res = r.handle_ready_with(&mut |m, when| match when {
            Sent::BeforeWrite => early.extend(m),
            Sent::AfterWrite => after_write.extend(m),
        });
        // The leader's appends leave before its own write; they are on the network even if
        // the write is then lost. What needs the write waits for the sync below.
        self.send(early);
        match res {
            Ok(_) => {}
            Err(e) => {
                let msg = format!("replica {} handle_ready: {e}", i + 1);
                self.fail(&msg)
            }
        }
        // Crash after the write and before the fsync returns: nothing staged survives, nothing
        // of this Ready was sent or acknowledged.
        if self.faults_on && self.rng.chance(3) {
            self.crash(i);
            self.log.push(format!(
                "step {}: replica {} crashed mid-write",
                self.step,
                i + 1
            ));
            return;
        }
        self.disks[i].sync();
        self.send(after_write);
        let r = self.nodes[i].as_mut().expect("present");
        let msgs = r.take_messages();
        let applied = r.take_applied();
        let applied_index = r.applied_index();
        let id = r.id();
        self.send(msgs);
        self.take_job(i);
        for a in applied {
            if a.token.is_some() {
                if let Ok(allot_common::api::Reply::Submitted { name, state, .. }) = &a.result {
                    self.acknowledged.insert(name.clone());
                    if state == "Admitted" {
                        self.admitted_in_submit += 1;
                    }
                }
            }
        }
        // State machine safety: every replica applies the same entry at an index.
        let entries: Vec<(u64, u64, Vec<u8>)> = self.nodes[i]
            .as_ref()
            .expect("present")
            .log_entries()
            .iter()
            .filter(|e| e.index <= applied_index)
            .map(|e| (e.index, e.term, e.data.to_vec()))
            .collect();
        let seen_in_term = self.nodes[i].as_ref().expect("present").term();
        for (index, term, data) in entries {
            match self.committed.get(&index) {
                Some(c) if c.term != term || c.data != data => self.fail(&format!(
                    "replica {id} applied index {index} with term {term}, but term {} was committed there",
                    c.term
                )),
                Some(_) => {}
                None => {
                    self.committed.insert(
                        index,
                        Committed {
                            term,
                            data,
                            seen_in_term,
                        },
                    );
                }
            }
        }
        // Equal state at equal applied index.
        let r = self.nodes[i].as_ref().expect("present");
        let digest = r.machine.digest(encode_machine);
        match self.digests.get(&applied_index) {
            Some(d) if *d != digest => self.fail(&format!(
                "replica {id} at applied index {applied_index} has state digest {digest:x}, another had {d:x}"
            )),
            Some(_) => {}
            None => {
                self.digests.insert(applied_index, digest);
            }
        }
        if let Err(e) = r.machine.state.check_invariants() {
            self.fail(&format!(
                "replica {id} at applied index {applied_index}: invariant broken: {e}"
            ));
        }
    }

    fn check_leaders(&mut self) {
        for i in 0..self.n {
            let Some(r) = self.nodes[i].as_ref() else {
                continue;
            };
            if !r.is_leader() {
                continue;
            }
            let (term, id) = (r.term(), r.id());
            match self.leaders.get(&term) {
                Some(other) if *other != id => self.fail(&format!(
                    "two leaders in term {term}: replica {other} and replica {id}"
                )),
                Some(_) => {}
                None => {
                    self.leaders.insert(term, id);
                    self.log.push(format!(
                        "step {}: replica {id} leads term {term}",
                        self.step
                    ));
                }
            }
            // Leader completeness: a leader holds every entry committed in an earlier term (that
            // it has not compacted). A deposed leader that has not heard of its successor yet
            // may hold other entries at indexes its successor committed.
            let r = self.nodes[i].as_ref().expect("present");
            let must_hold = |c: &Committed| c.seen_in_term < term;
            let max_committed = self
                .committed
                .iter()
                .rev()
                .find(|(_, c)| must_hold(c))
                .map_or(0, |(i, _)| *i);
            if r.last_index() < max_committed {
                self.fail(&format!(
                    "leader {id} (term {term}) ends its log at {} but index {max_committed} was committed before its term",
                    r.last_index()
                ));
            }
            for e in r.log_entries() {
                if let Some(c) = self.committed.get(&e.index) {
                    if must_hold(c) && (c.term != e.term || c.data.as_slice() != &e.data[..]) {
                        self.fail(&format!(
                            "leader {id} (term {term}) holds a different entry at index {}, committed before its term",
                            e.index
                        ));
                    }
                }
            }
        }
    }

    fn faults(&mut self) {
        // Crash a live replica (a clean crash: everything synced survives).
        if self.rng.chance(4) {
            let i = self.rng.below(self.n as u64) as usize;
            if self.nodes[i].is_some() {
                self.crash(i);
                self.log
                    .push(format!("step {}: replica {} crashed", self.step, i + 1));
            }
        }
        // Restart a crashed one.
        for i in 0..self.n {
            if self.nodes[i].is_none() && self.rng.chance(40) {
                let r = self.open(i);
                self.nodes[i] = Some(r);
                self.log
                    .push(format!("step {}: replica {} restarted", self.step, i + 1));
            }
        }
        // Partitions come and go.
        if self.partition.is_none() && self.rng.chance(5) {
            let side: BTreeSet<u64> = (1..=self.n as u64)
                .filter(|_| self.rng.chance(500))
                .collect();
            self.log
                .push(format!("step {}: partition {side:?}", self.step));
            self.partition = Some(side);
        } else if self.partition.is_some() && self.rng.chance(20) {
            self.partition = None;
            self.log.push(format!("step {}: healed", self.step));
        }
    }

    fn run(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step += 1;
            self.faults();
            for i in 0..self.n {
                if let Some(r) = self.nodes[i].as_mut() {
                    r.tick();
                }
            }
            self.deliver();
            self.finish_jobs();
            if let Some(l) = self.leader() {
                for _ in 0..self.rng.below(3) {
                    self.random_command(l);
                }
                self.schedule(l);
            }
            for i in 0..self.n {
                self.ready(i);
            }
            self.check_leaders();
        }
        // Heal everything and let the cluster converge; then every acknowledged submission
        // is present exactly once on every replica.
        self.partition = None;
        self.faults_on = false;
        for i in 0..self.n {
            if self.nodes[i].is_none() {
                let r = self.open(i);
                self.nodes[i] = Some(r);
            }
        }
        for _ in 0..400 {
            self.step += 1;
            for i in 0..self.n {
                if let Some(r) = self.nodes[i].as_mut() {
                    r.tick();
                }
            }
            self.deliver();
            self.finish_jobs();
            for i in 0..self.n {
                self.ready(i);
            }
            self.check_leaders();
        }
        let Some(l) = self.leader() else {
            self.fail("no leader after healing every fault");
        };
        let commit = self.nodes[l].as_ref().expect("leader").commit_index();
        for i in 0..self.n {
            let r = self.nodes[i].as_ref().expect("all up");
            if r.applied_index() < commit {
                self.fail(&format!(
                    "replica {} applied {} after healing, the leader committed {commit}",
                    i + 1,
                    r.applied_index()
                ));
            }
            for name in &self.acknowledged {
                if r.machine.state.find_workload(name).is_err() {
                    self.fail(&format!(
                        "acknowledged submission {name} is missing on replica {}",
                        i + 1
                    ));
                }
            }
        }
    }
}

fn seeds(default: u64) -> u64 {
    std::env::var("ALLOT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn three_replicas_many_seeds() {
    let mut fast = 0;
    let mut background = 0;
    for seed in 0..seeds(12) {
        let mut sim = Sim::new(seed, 3);
        sim.run(600);
        assert!(!sim.leaders.is_empty(), "seed {seed}: no leader ever");
        fast += sim.admitted_in_submit;
        background += sim.background_written;
    }
    // The fast path's plans must have applied for some submits, or it went untested.
    assert!(fast > 0, "no submit was admitted by its own entry");
    // So must snapshots encoded off the raft thread.
    assert!(
        background > 0,
        "no snapshot was written from a background job"
    );
}

#[test]
fn five_replicas_many_seeds() {
    for seed in 1000..1000 + seeds(8) {
        let mut sim = Sim::new(seed, 5);
        sim.run(600);
        assert!(!sim.leaders.is_empty(), "seed {seed}: no leader ever");
    }
}

#[test]
fn snapshots_are_taken_and_installed() {
    // With frequent snapshots and crashes, some replica must have caught up from a snapshot
    // and the run still passes every check.
    let mut sim = Sim::new(7, 3);
    sim.run(800);
    let snaps: Vec<u64> = sim
        .nodes
        .iter()
        .map(|r| r.as_ref().map_or(0, |r| r.snapshot_index()))
        .collect();
    assert!(snaps.iter().all(|&s| s > 0), "snapshot indexes {snaps:?}");
    assert!(
        sim.acknowledged.len() > 20,
        "only {} acknowledged",
        sim.acknowledged.len()
    );
}

#[test]
fn replay() {
    let Some(seed) = std::env::var("ALLOT_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    else {
        return;
    };
    let n = std::env::var("ALLOT_SIM_REPLICAS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut sim = Sim::new(seed, n);
    sim.run(600);
    println!(
        "seed {seed}: {} terms with a leader, {} committed entries, {} acknowledged submissions",
        sim.leaders.len(),
        sim.committed.len(),
        sim.acknowledged.len()
    );
}

#[test]
fn replicas_take_their_snapshots_at_different_indexes() {
    // Voter k of n snapshots at k * every / n past each multiple of `every`, so no two write
    // one at the same time and the other two always form a quorum.
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let due: Vec<u64> = (1..=3u64)
        .map(|id| {
            let mut c = ReplicaConfig::new(id, vec![1, 2, 3]);
            c.snapshot_every = 300;
            Replica::open(c, MemDisk::new(false), codec(), &logger)
                .expect("open")
                .next_snapshot_at()
        })
        .collect();
    assert_eq!(due, vec![300, 100, 200]);
}

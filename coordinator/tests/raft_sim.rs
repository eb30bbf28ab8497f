//! Deterministic simulation of 3 and 5 coordinator replicas and the agents of three nodes: the
//! server's own sans-I/O node (`node::Node`: the replica with raft-rs, the log cache and the state
//! machine; the leader driver with agent leases, cycles, plan proposals, the submit fast path and
//! the hand-over of leadership; waiting writes and their answers; one turn in the order the server
//! runs it) on a simulated network and disks, with message loss, delay, reordering, partitions,
//! crashes that lose unsynced writes, and agents that crash, restart and are cut off. Time is
//! passed in (a step is 100 ms); cycles are computed at once or a few steps later, as the server
//! computes large ones on their own thread. The simulated agents behave as `agent/` does: they sync
//! with the replica they believe leads (a heartbeat and a read of their assignments, through the
//! node's own read index: answered only once a quorum confirms it), renew their lease from when a
//! confirmed answer's request left, decide what to start and stop with the agent's own reconciler
//! (`allot_agent::reconcile`), start and stop pods (with a grace period) and report how they ended;
//! their pods outlive the agent process and are killed when the node's lease runs out. After
//! every step it checks:
//! - at most one leader per term;
//! - no committed entry is lost or changed (every replica applies the same entry at an index,
//!   and every leader holds every entry committed before its term);
//! - replicas at the same applied index have the same state (digest of the encoded machine);
//! - the applied state never over-commits a quota or a device (`State::check_invariants`);
//! - no two attempts of one workload run at the same time on the nodes.
//!
//! With only leader crashes, no workload may be evicted for a node failure.
//!
//! Some replicas (drawn by the seed) snapshot as the server does: a copy of the machine is
//! encoded "elsewhere" and its bytes come back a few steps later, by which time the replica
//! may have applied more, installed a newer snapshot from the leader, or crashed.
//!
//! A failure prints the seed; `ALLOT_SIM_SEED=<seed> cargo test -p allot-coordinator --test
//! raft_sim replay -- --nocapture` replays it. `ALLOT_SIM_SEEDS=N` runs more seeds.

use std::collections::{BTreeMap, BTreeSet};

use allot_agent::reconcile::{key_of, Action as ReconcileAction, PodKey, Reconciler, Seen};
use allot_common::api::{
    ActivationState, ComputeQuotaInput, NodeAssignments, NodeReport, PodExit, RunSpec, SubmitInput,
};
use allot_common::api::{Body, Reply, Response};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::{Catalog, PodSet, PriorityRef, ResourceName, Resources, WorkloadSpec};
use allot_coordinator::leader::{CycleDone, CycleJob, LeaderConfig, Lost};
use allot_coordinator::node::{run_now, Io, Node, NodeConfig, Proposed};
use allot_coordinator::raftlog::MemDisk;
use allot_coordinator::replica::{
    Applied, EncodedSnapshot, Replica, ReplicaConfig, SnapshotCodec, SnapshotJob,
};
use allot_core::machine::{Command, Machine};
use allot_core::{Event, WlState};
use allot_net::tls::Identity;
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
    /// Each replica as the server runs it (`node::Node`: the replica, the leader's driver,
    /// waiting writes and reads), or `None` while it is down.
    nodes: Vec<Option<Node<MemDisk, Caller>>>,
    disks: Vec<MemDisk>,
    net: Vec<InFlight>,
    seq: u64,
    step: u64,
    /// Replica ids in each side of the current partition (empty = none).
    partition: Option<BTreeSet<u64>>,
    /// The newest format each replica's build reads (`format.rs`): an upgrade changes it
    /// and restarts the replica.
    format_reads: Vec<u32>,
    leaders: BTreeMap<u64, u64>,
    /// Each committed index: its entry's term and data, and the term of the replica that first
    /// applied it. The entry was committed in that term or earlier (the replica learned of the
    /// commit from a leader no newer than itself), so every leader of a later term must hold it.
    committed: BTreeMap<u64, Committed>,
    digests: BTreeMap<u64, u64>,
    /// Per replica: the incarnation and applied index its applied entries and state were last
    /// checked at. Only what it applied since is checked again; a restart checks all anew.
    checked: Vec<(u64, u64)>,
    acknowledged: BTreeSet<String>,
    /// Submits acknowledged as admitted by their own entry (the fast path's plan applied).
    admitted_in_submit: usize,
    /// Submits the leader's fast path planned in their own entry (`Proposed::Planned`).
    planned_in_submit: usize,
    /// The last hundred steps whose lull had its submit (`run`).
    lull_at: u64,
    submitted: u64,
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
    /// Cycles being computed "elsewhere": (replica, incarnation, the step they finish, job).
    cycles: Vec<(usize, u64, u64, CycleJob)>,
    agents: Vec<Agent>,
    /// Syncs, answers and reports between agents and replicas.
    agent_net: Vec<AgentMsg>,
    /// Which faults this run injects.
    faults: Faults,
    /// Workloads evicted because an agent's node was declared failed, over the run (counted
    /// once per replica that applied it).
    node_failures: u64,
    /// Pods started by agents over the run.
    pods_started: u64,
    /// The replicas the cluster starts with (ids 1 to `initial`); the slots after them start
    /// when a membership change adds them.
    initial: usize,
    /// Slots started to join a running cluster (`ReplicaConfig::join`).
    joining: Vec<bool>,
    /// Slots that are not running and must not be restarted: not yet added, or removed.
    retired: Vec<bool>,
    /// Snapshots only far apart, with a thousand entries kept behind each.
    rare_snapshots: bool,
}

/// Nodes with a simulated agent; the random commands use `node-N` names, never these.
const AGENTS: usize = 3;
/// The agents' lease: above an election (10 to 20 steps, more with pre-votes refused) plus
/// a sync that hangs on the leader that died, as the default 10 s is in the server.
const LEASE_MS: u64 = 5_000;
/// One simulation step, in milliseconds of the clocks handed to the replicas' drivers.
const STEP_MS: u64 = 100;

#[derive(Clone, Copy)]
struct Faults {
    /// Message loss, delay and duplication between replicas, partitions, crashes mid-write.
    network: bool,
    /// Replica crashes (always of the leader when `only_leaders`).
    crashes: bool,
    only_leaders: bool,
    /// Agents crash and restart, and are cut off from every replica for a while.
    agents: bool,
}

impl Faults {
    fn all() -> Self {
        Faults {
            network: true,
            crashes: true,
            only_leaders: false,
            agents: true,
        }
    }
    fn none() -> Self {
        Faults {
            network: false,
            crashes: false,
            only_leaders: false,
            agents: false,
        }
    }
}

/// One pod a simulated node runs, as its shim would.
#[derive(Clone, Debug)]
struct SimPod {
    workload: String,
    attempt: u32,
    /// Set when it was told to stop (or finished, or lost its lease): the step it is gone, and
    /// how it ended (succeeded, lost).
    stopping: Option<(u64, bool, bool)>,
}

/// A node's agent and the pods its shims run. The pods and the lease file outlive the agent
/// process; what the agent knew of the cluster does not.
struct Agent {
    node: String,
    alive: bool,
    incarnation: u64,
    /// The lease file: wall-clock milliseconds until which pods may run.
    lease_until: i64,
    /// The pods that run or stop, by (workload id, attempt, rank).
    pods: BTreeMap<PodKey, SimPod>,
    /// Pods that ended: -> (workload, succeeded, lost). Reported while the cluster still lists
    /// them, and never started again.
    done: BTreeMap<PodKey, (String, bool, bool)>,
    /// The agent's own decisions (`allot_agent::reconcile`), afresh with each process.
    reconciler: Reconciler,
    /// The replica it talks to (index).
    target: usize,
    /// A sync in flight since this step.
    syncing: Option<u64>,
    next_sync: u64,
    registered: bool,
    /// Its last report carried its rack (a report before the cluster took topology did not:
    /// it reports again once the cluster does, as a real agent tries its levels again).
    with_topology: bool,
    /// Cut off from every replica until this step.
    cut_until: u64,
}

/// Who a replica answers.
#[derive(Clone, Copy, Debug)]
enum Caller {
    /// A client's or an agent's write.
    Writer,
    /// An agent's sync: the read of its node's assignments.
    Sync {
        agent: usize,
        incarnation: u64,
        sent: u64,
    },
}

enum AgentMsg {
    Sync {
        agent: usize,
        incarnation: u64,
        replica: usize,
        sent: u64,
        at: u64,
    },
    Answer {
        agent: usize,
        incarnation: u64,
        sent: u64,
        at: u64,
        answer: Result<Box<NodeAssignments>, u64>,
    },
    /// An agent's request (a registration, the pods that ended), as its node's certificate
    /// sends it.
    Report {
        replica: usize,
        at: u64,
        node: String,
        body: Box<Body>,
    },
}

impl AgentMsg {
    fn at(&self) -> u64 {
        match self {
            AgentMsg::Sync { at, .. }
            | AgentMsg::Answer { at, .. }
            | AgentMsg::Report { at, .. } => *at,
        }
    }
}

fn codec() -> SnapshotCodec {
    SnapshotCodec::wire()
}

fn encode_machine(m: &allot_core::machine::Machine) -> Vec<u8> {
    (SnapshotCodec::wire().encode_machine)(m).expect("machine encodes")
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
            format_reads: vec![allot_coordinator::format::CURRENT; n],
            leaders: BTreeMap::new(),
            committed: BTreeMap::new(),
            digests: BTreeMap::new(),
            checked: vec![(0, 0); n],
            acknowledged: BTreeSet::new(),
            admitted_in_submit: 0,
            planned_in_submit: 0,
            lull_at: 0,
            submitted: 0,
            faults_on: true,
            logger: slog::Logger::root(slog::Discard, slog::o!()),
            log: Vec::new(),
            jobs: Vec::new(),
            incarnation: vec![0; n],
            background_written: 0,
            cycles: Vec::new(),
            agents: (0..AGENTS)
                .map(|k| Agent {
                    node: format!("agent-{k}"),
                    alive: true,
                    incarnation: 0,
                    lease_until: 0,
                    pods: BTreeMap::new(),
                    done: BTreeMap::new(),
                    reconciler: Reconciler::default(),
                    target: k % n,
                    syncing: None,
                    next_sync: 1,
                    registered: false,
                    with_topology: false,
                    cut_until: 0,
                })
                .collect(),
            agent_net: Vec::new(),
            faults: Faults::all(),
            node_failures: 0,
            pods_started: 0,
            initial: n,
            joining: vec![false; n],
            retired: vec![false; n],
            rare_snapshots: false,
        };
        for i in 0..n {
            let r = sim.open(i);
            sim.nodes.push(Some(r));
        }
        sim
    }

    fn with_faults(seed: u64, n: usize, faults: Faults) -> Self {
        let mut sim = Sim::new(seed, n);
        sim.faults = faults;
        sim
    }

    fn cfg(&mut self, i: usize) -> ReplicaConfig {
        let mut c = ReplicaConfig::new(i as u64 + 1, (1..=self.initial as u64).collect());
        c.join = self.joining[i];
        c.addresses = (1..=self.n as u64)
            .map(|id| (id, format!("sim-{id}:7000")))
            .collect();
        // raft-rs draws the election timeout from a thread RNG; a one-tick range makes it
        // deterministic, and the seed picks each replica's.
        let e = 10 + self.rng.below(10) as usize;
        c.election_tick = e;
        c.max_election_tick = e + 1;
        c.heartbeat_tick = 2;
        c.snapshot_every = 40 + self.rng.below(40);
        c.keep_behind_snapshot = self.rng.below(20);
        c.background_snapshots = self.rng.chance(500);
        c.format_reads = self.format_reads[i];
        if self.rare_snapshots {
            c.snapshot_every = 1_000_000;
            c.keep_behind_snapshot = 1_000;
        }
        c
    }

    /// A leader that asks its peers which formats they read gets the answers of those it
    /// reaches (the server's prober asks every two seconds; here every tenth step).
    fn answer_format_probes(&mut self) {
        if !self.step.is_multiple_of(10) {
            return;
        }
        let now = self.now();
        for i in 0..self.n {
            if !self.nodes[i]
                .as_ref()
                .is_some_and(|r| r.wants_peer_formats())
            {
                continue;
            }
            for j in 0..self.n {
                let up = self.nodes[j].is_some();
                if j != i && up && self.connected(i as u64 + 1, j as u64 + 1) {
                    let reads = self.format_reads[j];
                    if let Some(r) = self.nodes[i].as_mut() {
                        r.handle_peer_format(j as u64 + 1, reads, now);
                    }
                }
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
            let before = r.replica().snapshot_index();
            if let Err(e) = r.handle_snapshot_encoded(EncodedSnapshot {
                index: job.index,
                term: job.term,
                data,
                file: None,
            }) {
                let msg = format!("replica {} finish_snapshot: {e}", i + 1);
                self.fail(&msg)
            }
            if r.replica().snapshot_index() != before {
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

    fn node_config() -> NodeConfig {
        NodeConfig {
            leader: LeaderConfig {
                schedule_interval_ms: 1_000,
                lease_check_ms: 100,
                retry_ms: 2_000,
            },
            write_timeout_ms: 2_000,
        }
    }

    /// Replica `i`, if it is up.
    fn rep(&self, i: usize) -> Option<&Replica<MemDisk>> {
        self.nodes[i].as_ref().map(Node::replica)
    }

    fn now(&self) -> u64 {
        self.step * STEP_MS
    }

    fn wall(&self) -> i64 {
        (self.step * STEP_MS) as i64
    }

    /// Replica `i` started anew: a new process, its driver and waiters afresh too.
    fn open(&mut self, i: usize) -> Node<MemDisk, Caller> {
        let cfg = self.cfg(i);
        let rep = Replica::open(cfg, self.disks[i].clone(), codec(), &self.logger)
            .unwrap_or_else(|e| self.fail(&format!("replica {} failed to open: {e}", i + 1)));
        Node::new(rep, Self::node_config())
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
            if self.faults_on && self.faults.network && self.rng.chance(30) {
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
                r.handle_snapshot_status(m.to, false);
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
                r.handle_raft(f.msg);
            }
            if is_snap {
                if let Some(r) = self.nodes[(from - 1) as usize].as_mut() {
                    r.handle_snapshot_status(to, true);
                }
            }
        }
    }

    fn leader(&self) -> Option<usize> {
        (0..self.n).find(|&i| self.nodes[i].as_ref().is_some_and(|r| r.is_leader()))
    }

    /// An API request from `who` to replica `i`, as the server hands it to its node (its
    /// answer comes out of a later turn).
    fn request(&mut self, i: usize, body: Body, who: &Identity) {
        let (now, wall) = (self.now(), self.wall());
        if let Some(r) = self.nodes[i].as_mut() {
            if r.handle_request(body, who, Caller::Writer, now, wall) == Proposed::Planned {
                self.planned_in_submit += 1;
            }
        }
    }

    /// A command proposed to replica `i` as it is: a test input the API would not make (a
    /// plan computed here, an end reported for a node without an agent).
    fn propose(&mut self, i: usize, cmd: Command) {
        let (now, wall) = (self.now(), self.wall());
        if let Some(r) = self.nodes[i].as_mut() {
            r.handle_propose(cmd, Caller::Writer, now, wall);
        }
    }

    /// A one-CPU submit of a random team's user, the kind that fits beside GPU work.
    fn lull_submit(&mut self, i: usize) {
        let team = self.rng.below(4);
        let input = self.submit_input(team, 0, 1, ResourceName::cpu(), 100);
        let who = Identity::User {
            team: input.spec.team.clone(),
        };
        self.request(i, Body::Submit(input), &who);
    }

    /// The next submission: `count` pods of `qty` of `res` for `team-{team}`, named and keyed
    /// by the submission's number.
    fn submit_input(
        &mut self,
        team: u64,
        priority: i32,
        count: u32,
        res: ResourceName,
        qty: i64,
    ) -> SubmitInput {
        self.submitted += 1;
        let mut req = Resources::new();
        req.add(&res, qty);
        SubmitInput {
            spec: WorkloadSpec {
                name: format!("w-{}-{}", self.seed % 1000, self.submitted),
                team: format!("team-{team}"),
                priority: PriorityRef::Value(priority),
                instance_type: None,
                pod_sets: vec![PodSet {
                    name: "main".into(),
                    count,
                    min_count: None,
                    requests: req,
                }],
                labels: Default::default(),
                array: None,
            },
            run: Some(RunSpec::default()),
            client_token: Some(format!("tok-{}", self.submitted)),
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
        } else if k < 18 && self.faults.agents {
            // An admin marks an agent's node failed while its agent and pods run on: the
            // workloads there must not start elsewhere before their pods stopped.
            Command::SetNodeHealth {
                name: format!("agent-{}", self.rng.below(AGENTS as u64)),
                healthy: false,
                reason: "marked failed by an admin".into(),
            }
        } else if k < 70 {
            // Drawn in the order the seeds' histories were made with.
            let team = self.rng.below(4);
            let priority = self.rng.below(3) as i32;
            let count = 1 + self.rng.below(2) as u32;
            let mut input = self.submit_input(team, priority, count, ResourceName::gpu(), 1);
            // Every third two-pod gang asks for one rack, where the cluster takes topology (a
            // client of an older cluster is refused and does not ask): no random draw added.
            if count > 1 && self.submitted.is_multiple_of(3) && self.takes_topology(i) {
                input
                    .spec
                    .labels
                    .insert(allot_common::topology::REQUIRED_LABEL.into(), "rack".into());
            }
            // Half the submits come with a plan made here, a test input: the plan for the
            // state right after the submit, computed on this replica's applied state whether
            // or not other entries are in flight (the leader's fast path waits until none is),
            // so the apply-time check of the expected id and the plan's verification see stale
            // plans. The others go through the node's own fast path.
            let now = self.step as i64 * 100;
            let planned = match self.nodes[i].as_ref().map(Node::replica) {
                Some(r) if self.rng.chance(500) => r.machine.plan_submit(&input, now),
                _ => None,
            };
            match planned {
                Some((id, plan)) => Command::SubmitPlanned {
                    input,
                    id: id.0,
                    plan,
                },
                None => {
                    // A team's user submits, as the API takes it: checked against who asks
                    // and the submission rate, then the fast path.
                    let who = Identity::User {
                        team: input.spec.team.clone(),
                    };
                    self.request(i, Body::Submit(input), &who);
                    return;
                }
            }
        } else if k < 78 {
            // An agent reports an end: finish a running one, or complete an eviction.
            // Only for workloads with no pod on a simulated agent's node: those report their own.
            let Some(name) = self.pick_workload(i, |s| s.holds_quota()) else {
                return;
            };
            if self.on_agent_node(i, &name) {
                return;
            }
            Command::WorkloadExited {
                name,
                succeeded: true,
                node: None,
            }
        } else if k < 82 {
            let Some(name) = self.pick_workload(i, |s| s == WlState::Pending) else {
                return;
            };
            let admin = Identity::Admin {
                name: "admin".into(),
            };
            self.request(i, Body::Cancel { name, team: None }, &admin);
            return;
        } else {
            return;
        };
        self.propose(i, cmd);
    }

    /// Whether workload `name` has a pod on a simulated agent's node, as replica `i` sees it.
    fn on_agent_node(&self, i: usize, name: &str) -> bool {
        let Some(r) = self.rep(i) else {
            return false;
        };
        let st = &r.machine.state;
        let Ok(id) = st.find_workload(name) else {
            return false;
        };
        st.workload(id).admission.as_ref().is_some_and(|a| {
            a.placement
                .iter()
                .any(|(_, p)| st.acct().nodes.node(p.node).name.starts_with("agent-"))
        })
    }

    /// A random workload, as replica `i` sees it, whose state passes `pred`.
    fn pick_workload(&mut self, i: usize, pred: impl Fn(WlState) -> bool) -> Option<String> {
        let ws: Vec<String> = self
            .rep(i)?
            .machine
            .state
            .workloads()
            .values()
            .filter(|w| pred(w.state))
            .map(|w| w.spec.name.clone())
            .collect();
        if ws.is_empty() {
            return None;
        }
        Some(ws[self.rng.below(ws.len() as u64) as usize].clone())
    }

    /// Replica `i`'s turn (`Node::turn`, as the server's raft loop runs it): leases, cycles
    /// (computed now or a few steps later, "on another thread"), the Ready loop, answers. The
    /// replica may crash after its write and before the sync: then nothing of the turn after
    /// the write leaves.
    fn turn(&mut self, i: usize) {
        let (now, wall) = (self.now(), self.wall());
        let mut io = SimIo {
            crash: self.faults_on && self.faults.network && self.rng.chance(3),
            inline_cycle: self.rng.chance(500),
            record_applied: !self.faults_on,
            ..SimIo::quiet(self.disks[i].clone())
        };
        let Some(r) = self.nodes[i].as_mut() else {
            return;
        };
        if let Err(e) = run_now(r.turn(&mut io, now, wall)) {
            let msg = format!("replica {} turn: {e}", i + 1);
            self.fail(&msg)
        }
        // The leader's appends are on the network even if the write is then lost.
        self.send(std::mem::take(&mut io.early));
        for l in &io.lost {
            self.log.push(format!(
                "step {}: replica {} declares {} lost: {}",
                self.step,
                i + 1,
                l.node,
                l.reason
            ));
        }
        if io.crashed {
            self.crash(i);
            self.log.push(format!(
                "step {}: replica {} crashed mid-write",
                self.step,
                i + 1
            ));
            return;
        }
        self.send(std::mem::take(&mut io.after));
        for job in io.cycles {
            let at = self.step + 1 + self.rng.below(5);
            self.cycles.push((i, self.incarnation[i], at, job));
        }
        for job in io.snapshots {
            let at = self.step + 1 + self.rng.below(8);
            self.jobs.push((i, self.incarnation[i], at, job));
        }
        for (index, kind, ev) in &io.applied {
            self.log.push(format!(
                "step {}: replica {} applied {kind} at {index}: {ev}",
                self.step,
                i + 1
            ));
        }
        for message in io.evicted {
            self.node_failures += 1;
            self.log
                .push(format!("step {}: replica {}: {message}", self.step, i + 1));
        }
        for (to, answer) in io.answers {
            match (to, answer) {
                (Caller::Writer, Ok(Reply::Submitted { name, state, .. })) => {
                    self.acknowledged.insert(name);
                    if state == "Admitted" {
                        self.admitted_in_submit += 1;
                    }
                }
                (Caller::Writer, _) => {}
                (
                    Caller::Sync {
                        agent,
                        incarnation,
                        sent,
                    },
                    answer,
                ) => {
                    // A refusal names the leader this replica knows of, as the shell's does.
                    let answer = match answer {
                        Ok(Reply::Assignments(a)) => Ok(Box::new(a)),
                        _ => Err(self.rep(i).map_or(0, |r| r.leader())),
                    };
                    let at = self.step + 1 + self.rng.below(3);
                    self.agent_send(AgentMsg::Answer {
                        agent,
                        incarnation,
                        sent,
                        at,
                        answer,
                    });
                }
            }
        }
        self.check_applied(i);
    }

    /// Cycles computed elsewhere come back (to a replica that may have crashed or lost its
    /// leadership meanwhile).
    fn finish_cycles(&mut self) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.cycles)
            .into_iter()
            .partition(|(_, _, at, _)| *at <= self.step);
        self.cycles = later;
        let now = self.now();
        for (i, inc, _, job) in due {
            if inc != self.incarnation[i] {
                continue;
            }
            if let Some(r) = self.nodes[i].as_mut() {
                r.handle_cycle_done(job.run(), now);
            }
        }
    }

    /// What replica `i` applied since it was last checked: the same entries as every other
    /// replica at each index, the same state at each applied index, the state's invariants.
    fn check_applied(&mut self, i: usize) {
        let Some(r) = self.rep(i) else {
            return;
        };
        let (applied_index, id) = (r.applied_index(), r.id());
        // Nothing applied since the last check of this incarnation: nothing new to check.
        let since = match self.checked[i] {
            (inc, at) if inc == self.incarnation[i] && at <= applied_index => {
                if at == applied_index {
                    return;
                }
                at
            }
            _ => 0,
        };
        self.checked[i] = (self.incarnation[i], applied_index);
        // State machine safety: every replica applies the same entry at an index.
        let r = self.nodes[i].as_ref().expect("present").replica();
        let seen_in_term = r.term();
        let mut differs = None;
        for e in r.log_entries() {
            if e.index <= since || e.index > applied_index {
                continue;
            }
            match self.committed.get(&e.index) {
                Some(c) if c.term != e.term || c.data.as_slice() != &e.data[..] => {
                    differs = Some((e.index, e.term, c.term));
                    break;
                }
                Some(_) => {}
                None => {
                    self.committed.insert(
                        e.index,
                        Committed {
                            term: e.term,
                            data: e.data.to_vec(),
                            seen_in_term,
                        },
                    );
                }
            }
        }
        if let Some((index, term, committed)) = differs {
            self.fail(&format!(
                "replica {id} applied an entry at index {index} (term {term}) other than the one committed there (term {committed})"
            ));
        }
        // Equal state at equal applied index.
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
            let Some(r) = self.rep(i) else {
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
            let r = self.nodes[i].as_ref().expect("present").replica();
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
        let rate = if self.faults.only_leaders { 15 } else { 4 };
        if self.faults.crashes && self.rng.chance(rate) {
            let i = if self.faults.only_leaders {
                self.leader()
            } else {
                Some(self.rng.below(self.n as u64) as usize)
            };
            if let Some(i) = i.filter(|&i| self.nodes[i].is_some()) {
                self.crash(i);
                self.log
                    .push(format!("step {}: replica {} crashed", self.step, i + 1));
            }
        }
        // Restart a crashed one.
        for i in 0..self.n {
            if self.nodes[i].is_none() && !self.retired[i] && self.rng.chance(40) {
                let r = self.open(i);
                self.nodes[i] = Some(r);
                self.log
                    .push(format!("step {}: replica {} restarted", self.step, i + 1));
            }
        }
        if self.faults.network {
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
        if self.faults.agents {
            for k in 0..AGENTS {
                if self.agents[k].alive && self.rng.chance(3) {
                    // The agent process dies; its pods and lease file stay.
                    let a = &mut self.agents[k];
                    a.alive = false;
                    a.incarnation += 1;
                    a.syncing = None;
                    self.log
                        .push(format!("step {}: agent {} crashed", self.step, a.node));
                } else if !self.agents[k].alive && self.rng.chance(50) {
                    let a = &mut self.agents[k];
                    a.alive = true;
                    a.registered = false;
                    a.reconciler = Reconciler::default();
                    a.next_sync = self.step;
                    self.log
                        .push(format!("step {}: agent {} restarted", self.step, a.node));
                } else if self.rng.chance(2) {
                    // Cut off from every replica for up to three leases.
                    let steps = self.rng.below(3 * LEASE_MS / STEP_MS);
                    self.agents[k].cut_until = self.step + steps;
                    self.log.push(format!(
                        "step {}: agent {} cut off for {steps} steps",
                        self.step, self.agents[k].node
                    ));
                }
            }
        }
    }

    /// Whether agent `k` and replica `i` can exchange messages now.
    fn agent_reaches(&self, k: usize, i: usize) -> bool {
        self.agents[k].cut_until <= self.step && self.nodes[i].is_some()
    }

    fn agent_send(&mut self, msg: AgentMsg) {
        if self.faults_on && self.faults.agents && self.rng.chance(20) {
            return;
        }
        self.agent_net.push(msg);
    }

    /// The agents and their nodes take one step: pods end, leases run out, syncs go out, and
    /// whatever arrived is handled.
    fn agents_step(&mut self) {
        let (step, wall, now) = (self.step, self.wall(), self.now());
        // The shims: pods stop when told to (after their grace), finish by themselves, and are
        // killed when the node's lease runs out, whether or not the agent process lives.
        for k in 0..AGENTS {
            let finish: Vec<PodKey> = self.agents[k]
                .pods
                .iter()
                .filter(|(_, p)| p.stopping.is_none())
                .map(|(key, _)| *key)
                .filter(|_| self.rng.chance(10))
                .collect();
            let a = &mut self.agents[k];
            for key in finish {
                if let Some(p) = a.pods.get_mut(&key) {
                    p.stopping = Some((step + 1, true, false));
                }
            }
            if wall >= a.lease_until {
                for p in a.pods.values_mut() {
                    if p.stopping.is_none_or(|(at, _, _)| at > step) {
                        p.stopping = Some((step, false, true));
                    }
                }
            }
            let gone: Vec<PodKey> = a
                .pods
                .iter()
                .filter(|(_, p)| p.stopping.is_some_and(|(at, _, _)| at <= step))
                .map(|(key, _)| *key)
                .collect();
            for key in gone {
                if let Some(p) = a.pods.remove(&key) {
                    let (_, ok, lost) = p.stopping.expect("stopping");
                    a.done.insert(key, (p.workload, ok, lost));
                }
            }
        }
        // Syncs go out.
        for k in 0..AGENTS {
            let a = &self.agents[k];
            if !a.alive {
                continue;
            }
            if let Some(since) = a.syncing {
                // Given up a second after its wait, as the agent does; at once (the client's
                // connect timeout) when the replica it asked is down, as a dial to a dead
                // address fails while the others answer.
                let down = self.nodes[a.target].is_none() || a.cut_until > step;
                let limit = if down { 500 } else { LEASE_MS / 5 + 1_000 };
                if step.saturating_sub(since) * STEP_MS > limit {
                    // The next address, as the client tries them in turn.
                    self.agents[k].syncing = None;
                    self.agents[k].target = (self.agents[k].target + 1) % self.n;
                }
                continue;
            }
            if step < a.next_sync {
                continue;
            }
            let (target, incarnation, registered) = (a.target, a.incarnation, a.registered);
            if !registered || (!self.agents[k].with_topology && self.takes_topology(target)) {
                let report = self.report_of(k, target);
                self.agents[k].with_topology = !report.topology.is_empty();
                let body = Body::ReportNode(report);
                let at = step + 1 + self.rng.below(3);
                self.agent_send(AgentMsg::Report {
                    replica: target,
                    at,
                    node: self.agents[k].node.clone(),
                    body: Box::new(body),
                });
            }
            let at = step + 1 + self.rng.below(3);
            self.agents[k].syncing = Some(step);
            self.agent_send(AgentMsg::Sync {
                agent: k,
                incarnation,
                replica: target,
                sent: step,
                at,
            });
        }
        // Deliveries.
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.agent_net)
            .into_iter()
            .partition(|m| m.at() <= step);
        self.agent_net = later;
        for m in due {
            match m {
                AgentMsg::Sync {
                    agent,
                    incarnation,
                    replica,
                    sent,
                    ..
                } => {
                    if !self.agent_reaches(agent, replica) {
                        continue;
                    }
                    let node = self.agents[agent].node.clone();
                    let r = self.nodes[replica].as_mut().expect("reached");
                    // As the server's sync handler: the heartbeat counts first, then a read of
                    // the assignments confirmed by a quorum (its answer leaves in a later turn).
                    r.handle_heartbeat(&node, now);
                    r.handle_read(
                        Box::new(move |m: &Machine| {
                            Ok(Reply::Assignments(allot_core::views::assignments(m, &node)))
                        }),
                        Caller::Sync {
                            agent,
                            incarnation,
                            sent,
                        },
                    );
                }
                AgentMsg::Answer {
                    agent,
                    incarnation,
                    sent,
                    answer,
                    ..
                } => {
                    let a = &self.agents[agent];
                    if !a.alive || a.incarnation != incarnation || a.cut_until > step {
                        continue;
                    }
                    self.agents[agent].syncing = None;
                    self.agents[agent].next_sync = step + 1 + self.rng.below(5);
                    match answer {
                        Ok(assigned) => self.reconcile(agent, sent, *assigned),
                        Err(hint) => {
                            self.agents[agent].target = if hint == 0 {
                                self.rng.below(self.n as u64) as usize
                            } else {
                                hint as usize - 1
                            };
                        }
                    }
                }
                AgentMsg::Report {
                    replica,
                    node,
                    body,
                    ..
                } => {
                    if let Some(r) = self.nodes[replica].as_mut() {
                        let who = Identity::Node { node };
                        r.handle_request(*body, &who, Caller::Writer, now, wall);
                    }
                }
            }
        }
    }

    /// Agent `k`'s report, sent to replica `target`: its rack (the three agents share one, which
    /// nodes registered by hand are not in) where the cluster takes topology
    /// levels (a real agent reports without them while they are refused, and tries them
    /// again later).
    fn report_of(&self, k: usize, target: usize) -> NodeReport {
        let it = Catalog::builtin().get("ml.g5.8xlarge").expect("in catalog");
        let topology = if self.takes_topology(target) {
            [("rack".to_string(), format!("r{}", k / 3))].into()
        } else {
            Default::default()
        };
        NodeReport {
            name: self.agents[k].node.clone(),
            instance_type: "ml.g5.8xlarge".into(),
            capacity: it.resources(),
            devices: Vec::new(),
            address: String::new(),
            http: String::new(),
            lease_ms: LEASE_MS,
            agent_version: String::new(),
            sources: Default::default(),
            topology,
        }
    }

    /// Gangs placed by a rack on any live replica: each has its pods in one rack (agents
    /// `3r` to `3r+2` are rack `r`; nodes registered by hand have none). Returns how many
    /// there are.
    fn racks_checked(&self) -> usize {
        let mut seen = 0;
        for i in 0..self.n {
            let Some(r) = self.rep(i) else {
                continue;
            };
            let st = &r.machine.state;
            for (_, w) in st.workloads().iter() {
                let (Some(adm), Some(_)) = (&w.admission, w.topology()) else {
                    continue;
                };
                let racks: std::collections::BTreeSet<String> = adm
                    .placement
                    .iter()
                    .map(|(_, p)| {
                        let name = &st.acct().nodes.node(p.node).name;
                        let k: usize = name.trim_start_matches("agent-").parse().expect("agent-K");
                        format!("r{}", k / 3)
                    })
                    .collect();
                assert!(
                    racks.len() <= 1,
                    "seed {}: {} asks for one rack and runs on {racks:?}",
                    self.seed,
                    w.spec.name
                );
                seen += 1;
            }
        }
        seen
    }

    /// Whether replica `i`'s cluster format takes topology levels.
    fn takes_topology(&self, i: usize) -> bool {
        self.rep(i).is_some_and(|r| r.machine.format >= 6)
    }

    /// Agent `k` got its assignments for a sync sent at step `sent`: its lease runs from then;
    /// it starts what it should run, stops what it should not, and reports what ended.
    fn reconcile(&mut self, k: usize, sent: u64, assigned: NodeAssignments) {
        let step = self.step;
        let target = self.agents[k].target;
        let grace = 1 + self.rng.below(5);
        let mut reports = Vec::new();
        let node = self.agents[k].node.clone();
        let a = &mut self.agents[k];
        a.lease_until = (sent * STEP_MS + LEASE_MS) as i64;
        if !assigned.registered || !assigned.healthy {
            a.registered = false;
        }
        let wall = (step * STEP_MS) as i64;
        // What ended and the cluster still lists is reported (as the agent's exit reports).
        for p in &assigned.pods {
            if let Some((w, ok, lost)) = a.done.get(&key_of(p)) {
                reports.push((w.clone(), p.workload_id, p.attempt, p.rank, *ok, *lost));
            }
        }
        // The rest is the agent's own reconciler, applied to the simulated node.
        let seen: BTreeMap<PodKey, Seen> = a
            .pods
            .iter()
            .map(|(k, p)| {
                let running = p.stopping.is_none();
                (
                    *k,
                    Seen {
                        running,
                        holds: Vec::new(),
                    },
                )
            })
            .chain(a.done.keys().map(|k| (*k, Seen::default())))
            .collect();
        for action in a.reconciler.plan(&assigned, &seen) {
            match action {
                ReconcileAction::Stop { key, .. } => {
                    if let Some(pod) = a.pods.get_mut(&key) {
                        pod.stopping = Some((step + grace, false, false));
                    }
                }
                ReconcileAction::Gone(p) => {
                    a.done
                        .insert(key_of(&p), (p.workload.clone(), false, false));
                    reports.push((
                        p.workload.clone(),
                        p.workload_id,
                        p.attempt,
                        p.rank,
                        false,
                        false,
                    ));
                }
                ReconcileAction::Wait { .. } => {}
                // A shim does not start a pod once the node's lease has run out.
                ReconcileAction::Start(p) if wall < a.lease_until => {
                    a.pods.insert(
                        key_of(&p),
                        SimPod {
                            workload: p.workload.clone(),
                            attempt: p.attempt,
                            stopping: None,
                        },
                    );
                    self.pods_started += 1;
                    self.log.push(format!(
                        "step {step}: {node} starts {} attempt {} rank {} (sync sent at step {sent})",
                        p.workload, p.attempt, p.rank
                    ));
                }
                // Planned again at the next answer.
                ReconcileAction::Start(_) => {}
            }
        }
        for (workload, workload_id, attempt, rank, succeeded, lost) in reports {
            self.log.push(format!(
                "step {step}: {node} reports {workload} attempt {attempt} rank {rank} ended (ok {succeeded}, lost {lost})"
            ));
            let body = Body::PodsExited {
                node: node.clone(),
                workload,
                workload_id,
                attempt,
                exits: vec![PodExit {
                    rank,
                    succeeded,
                    lost,
                    detail: "sim".into(),
                    exit_code: None,
                }],
            };
            let at = step + 1 + self.rng.below(3);
            self.agent_send(AgentMsg::Report {
                replica: target,
                at,
                node: node.clone(),
                body: Box::new(body),
            });
        }
    }

    /// No two attempts of one workload run at the same time anywhere in the cluster.
    fn check_no_overlap(&self) {
        let mut running: BTreeMap<&str, BTreeMap<u32, Vec<&str>>> = BTreeMap::new();
        for a in &self.agents {
            for p in a.pods.values() {
                running
                    .entry(p.workload.as_str())
                    .or_default()
                    .entry(p.attempt)
                    .or_default()
                    .push(a.node.as_str());
            }
        }
        for (w, attempts) in running {
            if attempts.len() > 1 {
                self.fail(&format!(
                    "workload {w} runs two attempts at once: {attempts:?} (attempt -> nodes)"
                ));
            }
        }
    }

    /// One step with faults and load: the network, the agents, commands to the leader, a turn
    /// of every replica, and the checks.
    fn step_once(&mut self) {
        self.step += 1;
        self.faults();
        self.tick_and_deliver();
        self.agents_step();
        self.answer_format_probes();
        if let Some(l) = self.leader() {
            // Commands arrive a step apart while entries take steps to commit, so the
            // leader's log is rarely idle, which its fast path needs: in a lull of 20
            // steps in every 100, a small submit comes the first time it is.
            match self.step % 100 {
                80..=99 => {
                    let idle = self
                        .rep(l)
                        .is_some_and(|r| r.last_index() == r.applied_index());
                    if idle && self.lull_at != self.step / 100 {
                        self.lull_at = self.step / 100;
                        self.lull_submit(l);
                    }
                }
                _ => {
                    for _ in 0..self.rng.below(3) {
                        self.random_command(l);
                    }
                }
            }
        }
        for i in 0..self.n {
            self.turn(i);
        }
        self.check_leaders();
        self.check_no_overlap();
    }

    /// A tick of every replica running, then what is due: messages, snapshot jobs, cycles.
    fn tick_and_deliver(&mut self) {
        for i in 0..self.n {
            if let Some(r) = self.nodes[i].as_mut() {
                r.tick();
            }
        }
        self.deliver();
        self.finish_jobs();
        self.finish_cycles();
    }

    /// A cluster of `initial` replicas with room for `slots - initial` more, which start only
    /// when a test adds them.
    fn with_slots(seed: u64, slots: usize, initial: usize) -> Self {
        let mut sim = Sim::new(seed, slots);
        sim.initial = initial;
        for i in 0..slots {
            sim.crash(i);
            sim.retired[i] = i >= initial;
            if i < initial {
                let r = sim.open(i);
                sim.nodes[i] = Some(r);
            }
        }
        sim
    }

    /// The leader's configuration: its voters and learners.
    fn membership(&self) -> Option<(Vec<u64>, Vec<u64>)> {
        let r = self.rep(self.leader()?)?;
        Some((r.voters().to_vec(), r.learners().to_vec()))
    }

    /// Asks whichever replica leads for a membership change, again every second (an answer
    /// may be lost with its leader, or be "ask again"), while the cluster runs with its faults
    /// and load, until the leader's configuration is as `done` says.
    fn change_members(&mut self, body: Body, done: impl Fn(&[u64], &[u64]) -> bool) {
        let admin = Identity::Admin {
            name: "admin".into(),
        };
        let start = self.step;
        self.faults_on = true;
        loop {
            if let Some((v, l)) = self.membership() {
                if done(&v, &l) {
                    self.log.push(format!(
                        "step {}: {body:?} done: voters {v:?}, learners {l:?}",
                        self.step
                    ));
                    return;
                }
            }
            if self.step - start > 3_000 {
                let now = self.membership();
                self.fail(&format!(
                    "{body:?} not done after 3000 steps; the leader's voters and learners: {now:?}"
                ));
            }
            if let Some(l) = self.leader().filter(|_| self.step.is_multiple_of(10)) {
                self.request(l, body.clone(), &admin);
            }
            self.step_once();
        }
    }

    /// Starts slot `i` as a replica that joins the running cluster, then adds it and waits
    /// until it votes.
    fn add_replica(&mut self, i: usize) {
        let id = i as u64 + 1;
        self.retired[i] = false;
        self.joining[i] = true;
        let r = self.open(i);
        self.nodes[i] = Some(r);
        let body = Body::AddMember {
            id,
            address: format!("sim-{id}:7000"),
        };
        self.change_members(body, |v, _| v.contains(&id));
    }

    /// Removes replica `i` and stops it for good.
    fn remove_replica(&mut self, i: usize) {
        let id = i as u64 + 1;
        let body = Body::RemoveMember { id };
        self.change_members(body, |v, l| !v.contains(&id) && !l.contains(&id));
        self.crash(i);
        self.retired[i] = true;
    }

    fn run(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step_once();
        }
        // Heal everything and let the cluster converge; then every acknowledged submission
        // is present exactly once on every replica.
        self.partition = None;
        self.faults_on = false;
        for i in 0..self.n {
            if self.nodes[i].is_none() && !self.retired[i] {
                let r = self.open(i);
                self.nodes[i] = Some(r);
            }
        }
        for a in &mut self.agents {
            a.cut_until = 0;
            if !a.alive {
                a.alive = true;
                a.registered = false;
                a.reconciler = Reconciler::default();
                a.next_sync = self.step;
            }
        }
        let end = self.step + 400;
        // What the leader had committed 2 s before the end: every replica must have applied
        // it by then. (The leader's driver goes on deciding to the end, so the log may still
        // grow in the last steps.)
        let mut committed_before_end = None;
        for _ in 0..400 {
            self.step += 1;
            self.tick_and_deliver();
            // The agents go quiet for the last 3 s (with a sync's round trip before it, less
            // than a lease, so no node is lost), so that what they report has settled.
            let quiet = self.step >= end - 30;
            if self.step == end - 20 {
                committed_before_end = self
                    .leader()
                    .and_then(|l| self.rep(l))
                    .map(|r| r.commit_index());
            }
            if !quiet {
                self.agents_step();
            }
            self.answer_format_probes();
            for i in 0..self.n {
                self.turn(i);
            }
            self.check_leaders();
            self.check_no_overlap();
        }
        if self.leader().is_none() {
            self.fail("no leader after healing every fault");
        }
        let Some(commit) = committed_before_end else {
            self.fail("no leader 2 s before the end, after healing every fault");
        };
        for i in (0..self.n).filter(|&i| !self.retired[i]) {
            let r = self.rep(i).expect("all up");
            if r.applied_index() < commit {
                self.fail(&format!(
                    "replica {} applied {} after healing, the leader had committed {commit} 2 s before",
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

/// A turn's outputs in the simulation, handed on to the simulated network and threads once
/// the turn is over.
struct SimIo {
    disk: MemDisk,
    /// Drawn before the turn: the replica crashes after its (first) write, before the sync.
    crash: bool,
    crashed: bool,
    /// Drawn before the turn: a cycle due now runs at once (as the server runs small ones).
    inline_cycle: bool,
    early: Vec<Message>,
    after: Vec<Message>,
    answers: Vec<(Caller, Response)>,
    /// Evictions of agents' nodes for node failures, as applied.
    evicted: Vec<String>,
    /// Whether to keep what was applied (for the log, while the cluster heals at the end).
    record_applied: bool,
    /// What was applied: (index, kind, events).
    applied: Vec<(u64, &'static str, String)>,
    cycles: Vec<CycleJob>,
    snapshots: Vec<SnapshotJob>,
    lost: Vec<Lost>,
}

impl SimIo {
    /// An `Io` that never crashes and keeps nothing but what it is handed.
    fn quiet(disk: MemDisk) -> Self {
        SimIo {
            disk,
            crash: false,
            crashed: false,
            inline_cycle: true,
            early: Vec::new(),
            after: Vec::new(),
            answers: Vec::new(),
            evicted: Vec::new(),
            record_applied: false,
            applied: Vec::new(),
            cycles: Vec::new(),
            snapshots: Vec::new(),
            lost: Vec::new(),
        }
    }
}

impl Io for SimIo {
    type Reply = Caller;

    async fn send_early(&mut self, msgs: Vec<Message>) {
        if !self.crashed {
            self.early.extend(msgs);
        }
    }

    async fn written(&mut self, msgs: Vec<Message>) {
        if self.crash {
            // Crash after the write and before the fsync returns: nothing staged survives,
            // nothing of this Ready is sent or acknowledged.
            self.crash = false;
            self.crashed = true;
        }
        if !self.crashed {
            self.disk.sync();
            self.after.extend(msgs);
        }
    }

    fn send(&mut self, msgs: Vec<Message>) {
        if !self.crashed {
            self.after.extend(msgs);
        }
    }

    fn answer(&mut self, to: Caller, response: Response) {
        if !self.crashed {
            self.answers.push((to, response));
        }
    }

    async fn drained(&mut self, _applied: u64, _answered: bool) {}

    fn cycle(&mut self, job: CycleJob) -> Option<CycleDone> {
        if self.inline_cycle {
            return Some(job.run());
        }
        self.cycles.push(job);
        None
    }

    fn snapshot(&mut self, job: SnapshotJob) {
        self.snapshots.push(job);
    }

    fn applied(&mut self, a: &Applied) {
        if self.record_applied {
            self.applied
                .push((a.index, a.kind, format!("{:?}", a.events)));
        }
        for e in &a.events {
            // Only agents' nodes: the random commands fail `node-N`s on purpose.
            if let Event::Evicted {
                reason, message, ..
            } = e
            {
                if reason == "NodeFailures" && message.starts_with("node agent-") {
                    self.evicted.push(message.clone());
                }
            }
        }
    }

    fn lost(&mut self, l: Lost) {
        self.lost.push(l);
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
    let mut admitted = 0;
    let mut background = 0;
    let mut started = 0;
    let mut by_rack = 0;
    for seed in 0..seeds(12) {
        let mut sim = Sim::new(seed, 3);
        sim.run(600);
        assert!(!sim.leaders.is_empty(), "seed {seed}: no leader ever");
        by_rack += sim.racks_checked();
        fast += sim.planned_in_submit;
        admitted += sim.admitted_in_submit;
        background += sim.background_written;
        started += sim.pods_started;
    }
    // The agents must have run pods, or the no-overlap check checked nothing.
    assert!(
        started > 100,
        "only {started} pods started by the simulated agents"
    );
    // Gangs that ask for a rack must have run, or the rack check checked nothing.
    assert!(by_rack > 0, "no gang that asks for a rack was admitted");
    // The fast path must have planned some submits in their own entries, or it went untested.
    eprintln!("the fast path planned {fast} submits; {admitted} were admitted by their entry");
    assert!(fast > 0, "the fast path planned no submit");
    // So must snapshots encoded off the raft thread.
    assert!(
        background > 0,
        "no snapshot was written from a background job"
    );
}

#[test]
fn leader_changes_never_restart_running_work() {
    // Only leaders crash (and restart): agents, their links and the replicas' network stay
    // sound, so no node is ever silent and no running workload may be evicted for a node
    // failure, however often leadership moves.
    let mut changes = 0;
    let mut started = 0;
    for seed in 0..seeds(8) {
        let mut sim = Sim::with_faults(
            500 + seed,
            3,
            Faults {
                network: false,
                crashes: true,
                only_leaders: true,
                agents: false,
            },
        );
        sim.run(600);
        if sim.node_failures > 0 {
            sim.fail(&format!(
                "{} evictions for node failures with only leader changes",
                sim.node_failures
            ));
        }
        changes += sim.leaders.len();
        started += sim.pods_started;
    }
    assert!(changes > 8 * 3, "only {changes} terms had a leader");
    assert!(started > 40, "only {started} pods started");
}

#[test]
fn a_follower_that_lost_acknowledged_entries_catches_up() {
    // A follower's disk loses its last durable entries (a journal cut short, or a torn record
    // dropped at start) after it acknowledged them. It must start, take the commit index only
    // as far as its log goes, be sent the entries again and catch up; and nothing committed
    // may be lost. Only this fault is injected, so the quorum that committed them holds.
    let mut cut = 0;
    let n = seeds(6);
    for seed in 0..n {
        let quiet = Faults {
            network: false,
            crashes: false,
            only_leaders: false,
            agents: false,
        };
        let mut sim = Sim::with_faults(900 + seed, 3, quiet);
        sim.run(200);
        let Some(l) = sim.leader() else {
            sim.fail("no leader");
        };
        let f = (l + 1) % 3;
        let before = sim.rep(f).expect("up").last_index();
        sim.crash(f);
        let lost = sim.disks[f].lose_tail(5 + (seed as usize % 10));
        let r = sim.open(f);
        let after = r.replica().last_index();
        sim.nodes[f] = Some(r);
        sim.log.push(format!(
            "step {}: replica {} restarted with its log cut from {before} to {after}",
            sim.step,
            f + 1
        ));
        if lost > 0 {
            cut += 1;
            assert!(after < before, "seed {seed}: nothing was cut ({before})");
        }
        // The checks of `run` (every replica applies what the leader committed, every
        // acknowledged submission is on every replica) cover the catch-up.
        sim.faults_on = true;
        sim.run(200);
        let r = sim.rep(f).expect("up");
        assert!(
            r.last_index() > before,
            "seed {seed}: replica {} did not catch up ({} <= {before})",
            f + 1,
            r.last_index()
        );
    }
    // A follower right after a snapshot has nothing after it to lose; most have.
    assert!(cut * 2 > n, "only {cut} of {n} seeds cut a log");
}

#[test]
fn five_replicas_many_seeds() {
    for seed in 1000..1000 + seeds(8) {
        let mut sim = Sim::new(seed, 5);
        sim.run(600);
        assert!(!sim.leaders.is_empty(), "seed {seed}: no leader ever");
    }
}

/// The cluster's format on each live replica.
fn formats(sim: &Sim) -> Vec<u32> {
    (0..sim.n)
        .filter_map(|i| sim.rep(i).map(|r| r.machine.format))
        .collect()
}

#[test]
fn a_rolling_upgrade_raises_the_format_only_once_every_replica_reads_it() {
    use allot_coordinator::format::CURRENT;
    for seed in 0..seeds(4) {
        // Three replicas of the release before versioned formats (they read format 0 only).
        let mut sim = Sim::new(900 + seed, 3);
        sim.format_reads = vec![0; 3];
        for i in 0..3 {
            sim.crash(i);
            let r = sim.open(i);
            sim.nodes[i] = Some(r);
        }
        sim.run(300);
        // Upgraded one at a time, under faults and load: while any replica reads format 0
        // only, nothing in a newer format is written (it would stop at such an entry).
        for i in 0..3 {
            sim.format_reads[i] = CURRENT;
            sim.crash(i);
            let r = sim.open(i);
            sim.nodes[i] = Some(r);
            sim.faults_on = true;
            sim.run(300);
            let want = if i < 2 { 0 } else { CURRENT };
            assert!(
                formats(&sim).iter().all(|&f| f == want),
                "seed {seed}: after upgrading {} replicas the formats are {:?}, expected {want}",
                i + 1,
                formats(&sim)
            );
        }
        assert!(sim.acknowledged.len() > 20, "seed {seed}: too little load");
        // A replica of the old build can no longer join: it stops at the first entry or
        // snapshot in the new format instead of skipping it.
        sim.format_reads[0] = 0;
        sim.crash(0);
        let cfg = sim.cfg(0);
        let reopened = Replica::open(cfg, sim.disks[0].clone(), codec(), &sim.logger);
        let stopped = match reopened {
            Err(e) => e.to_string(),
            Ok(rep) => {
                let mut node = Node::new(rep, Sim::node_config());
                let mut io = SimIo::quiet(sim.disks[0].clone());
                (0..3)
                    .find_map(|_| run_now(node.turn(&mut io, sim.now(), sim.wall())).err())
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            }
        };
        assert!(
            stopped.contains("this build reads formats up to 0"),
            "seed {seed}: the old build went on: {stopped:?}"
        );
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
        .map(|r| r.as_ref().map_or(0, |r| r.replica().snapshot_index()))
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

/// The voters of the leader's configuration at the end of a run, and every live replica's.
fn final_voters(sim: &Sim) -> Vec<Vec<u64>> {
    (0..sim.n)
        .filter_map(|i| sim.rep(i).map(|r| r.voters().to_vec()))
        .collect()
}

#[test]
fn a_dead_replica_is_replaced_by_one_at_a_new_address() {
    for seed in 0..seeds(4) {
        let mut sim = Sim::with_slots(3000 + seed, 4, 3);
        sim.run(300);
        // Replica 3's machine dies for good: a new replica 4 takes its place, under faults
        // (crashes of the others, lost and reordered messages, partitions) and submits.
        sim.crash(2);
        sim.retired[2] = true;
        sim.add_replica(3);
        sim.remove_replica(2);
        sim.faults_on = true;
        sim.run(300);
        for v in final_voters(&sim) {
            assert_eq!(v, vec![1, 2, 4], "seed {seed}");
        }
        let added = sim.rep(3).expect("replica 4 runs");
        assert_eq!(
            added.machine.members.get(&4).map(String::as_str),
            Some("sim-4:7000"),
            "seed {seed}: the added replica's address is in the replicated state"
        );
        // So are those of the replicas the cluster started with, taken from the proposer's
        // --peers; the removed one's is gone.
        let ids: Vec<u64> = added.machine.members.keys().copied().collect();
        assert_eq!(ids, vec![1, 2, 4], "seed {seed}");
        assert!(sim.acknowledged.len() > 20, "seed {seed}: too little load");
    }
}

#[test]
fn a_cluster_grows_from_three_to_five_and_shrinks_back() {
    for seed in 0..seeds(3) {
        let mut sim = Sim::with_slots(3100 + seed, 5, 3);
        sim.run(200);
        sim.add_replica(3);
        sim.add_replica(4);
        sim.faults_on = true;
        sim.run(200);
        for v in final_voters(&sim) {
            assert_eq!(v, vec![1, 2, 3, 4, 5], "seed {seed}");
        }
        // Back to three, the first two replicas leaving (the leader among them hands over).
        sim.remove_replica(0);
        sim.remove_replica(1);
        sim.faults_on = true;
        sim.run(300);
        for v in final_voters(&sim) {
            assert_eq!(v, vec![3, 4, 5], "seed {seed}");
        }
        assert!(sim.acknowledged.len() > 20, "seed {seed}: too little load");
    }
}

#[test]
fn a_change_that_would_lose_the_quorum_is_refused() {
    let mut sim = Sim::with_slots(3200, 3, 3);
    sim.faults = Faults::none();
    sim.run(300);
    // Replica 3 is down: removing replica 2 would leave 1 of the voters 1 and 3 reachable.
    sim.crash(2);
    sim.retired[2] = true;
    // Long enough for the leader to notice it hears nothing from replica 3.
    for _ in 0..100 {
        sim.step_once();
    }
    let l = sim.leader().expect("a leader");
    let leader_id = l as u64 + 1;
    let other = if leader_id == 1 { 2 } else { 1 };
    let r = sim.nodes[l].as_mut().expect("the leader runs");
    let e = r
        .replica_mut()
        .propose_member_change(
            1,
            &allot_coordinator::members::MemberChange::Remove { id: other },
        )
        .expect_err("refused");
    assert!(
        e.message.contains("below their quorum of 2"),
        "{}",
        e.message
    );
    // Adding a replica twice, or one at a bad address, is refused too.
    let add = |id: u64, address: &str| allot_coordinator::members::MemberChange::Add {
        id,
        address: address.into(),
    };
    let e = r
        .replica_mut()
        .propose_member_change(2, &add(1, "sim-1:7000"))
        .expect_err("refused");
    assert!(e.message.contains("already a member"), "{}", e.message);
    let e = r
        .replica_mut()
        .propose_member_change(3, &add(9, "nowhere"))
        .expect_err("refused");
    assert!(e.message.contains("HOST:PORT"), "{}", e.message);
    // Removing the dead replica keeps a quorum (1 and 2 of 1 and 2).
    r.replica_mut()
        .propose_member_change(
            4,
            &allot_coordinator::members::MemberChange::Remove { id: 3 },
        )
        .expect("accepted");
}

#[test]
fn a_replica_joins_a_cluster_that_keeps_its_log() {
    // Regular snapshots far off and a thousand entries kept behind each: the leader still holds
    // every entry, and the joiner must still get the snapshot taken where it was added.
    for seed in 0..seeds(2) {
        let mut sim = Sim::with_slots(3300 + seed, 4, 3);
        sim.faults = Faults::none();
        sim.rare_snapshots = true;
        for i in 0..3 {
            sim.crash(i);
            let r = sim.open(i);
            sim.nodes[i] = Some(r);
        }
        sim.run(100);
        sim.add_replica(3);
        let joined = sim.rep(3).expect("replica 4 runs");
        assert!(
            joined.snapshots_installed() >= 1,
            "seed {seed}: no snapshot installed"
        );
        sim.run(100);
        for v in final_voters(&sim) {
            assert_eq!(v, vec![1, 2, 3, 4], "seed {seed}");
        }
    }
}

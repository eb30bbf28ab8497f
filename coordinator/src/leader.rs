//! The leader's decisions, without I/O: agent leases, when to run a scheduling cycle, which plan
//! to propose, the submit fast path. Time comes in as an argument (`Millis` on a monotonic clock
//! for leases and cadence, wall-clock milliseconds for the entries' timestamps) and nothing here
//! reads a clock, sleeps, or touches the network. It lives inside the sans-I/O node
//! (`node.rs`), which the server (`server.rs`) and the seeded simulation (`tests/raft_sim.rs`)
//! both drive: the node calls it in its turn and hands cycle jobs to the shell, which runs them
//! (on a thread of their own when the backlog is large).
//!
//! Every entry point first brings the driver's view of leadership up to date
//! (`sync_role`): a replica that has just become leader starts every node's lease afresh from
//! that moment, before anything can look at a lease. (The loop this replaced checked leases
//! before noticing a leadership change, and so declared every node lost at once, counting from
//! when the process started.)

use std::collections::BTreeMap;

use allot_core::cycle_cache::{CycleCache, Settled};
use allot_core::machine::{Command, Entry as Cmd};
use allot_core::quota::Acct;
use allot_core::state::State;
use allot_core::Plan;

use crate::raftlog::Disk;
use crate::replica::{Applied, Replica};

/// Milliseconds on a monotonic clock with an arbitrary origin.
pub type Millis = u64;

/// A node is marked failed after this many leases without a heartbeat (its agent has stopped
/// its pods, or is stopping them, by then): its workloads are evicted but keep their room.
pub const LEASES_BEFORE_FAILED: u64 = 1;
/// A failed node is declared lost, and the workloads still waiting on it requeued, after this
/// many leases without a heartbeat: its agent's lease has run out for certain, even if a sync
/// answered just before the node was marked failed renewed it.
pub const LEASES_BEFORE_LOST: u64 = 2;

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// The longest between two cycles while nothing changes (a cycle also runs as soon as
    /// something that can change a decision is applied).
    pub schedule_interval_ms: u64,
    /// How often leases are checked.
    pub lease_check_ms: u64,
    /// How long a proposal (a plan, a `NodeLost`) is waited on before it is given up as lost
    /// with a leadership change and made again.
    pub retry_ms: u64,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            schedule_interval_ms: 1000,
            lease_check_ms: 100,
            retry_ms: 10_000,
        }
    }
}

/// What changed in this replica's leadership since the driver last looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleChange {
    None,
    Gained,
    Lost,
}

/// A scheduling cycle to compute: a copy of the state (copy-on-write, cheap) and the time the
/// plan will be stamped with. The shell runs it where it likes (`run`), then hands the result
/// to `Leader::handle_cycle_done`.
pub struct CycleJob {
    pub id: u64,
    pub wall: i64,
    pub state: State,
    /// What the last cycle found before its first decision (`CycleCache`), travelling with
    /// the job and back so the next cycle may start from it.
    pub cache: CycleCache,
}

/// A computed cycle.
pub struct CycleDone {
    pub id: u64,
    pub wall: i64,
    /// The plan, without the pending messages the state already showed (the leader logs
    /// only what changes something).
    pub plan: Plan,
    /// Whether any pending message changed.
    pub messages_changed: bool,
    pub cache: CycleCache,
    /// The cache's proof that every pending workload waits (`CycleCache::settled`), taken
    /// here, off the raft thread: it is a pass over every wait.
    pub settled: Option<Settled>,
}

impl CycleJob {
    /// Pending workloads in the copy: the shell runs small cycles inline, large ones elsewhere.
    pub fn backlog(&self) -> usize {
        self.state.teams().iter().map(|t| t.pending.len()).sum()
    }

    /// Computes the plan and compares its pending messages with the copy's, both here: with
    /// a deep backlog each is a pass over every pending workload, kept off the raft thread.
    /// No other plan applies while a cycle is out, so the messages the copy shows are those
    /// the plan will apply to.
    pub fn run(mut self) -> CycleDone {
        let mut plan =
            allot_core::scheduler::schedule_cached(&self.state, self.wall, &mut self.cache);
        self.state.retain_changed_pending(&mut plan);
        // Every entry left is a change, but for preemptors' (kept whatever they say).
        let messages_changed = plan.pending.iter().any(|(id, r, m)| {
            self.state
                .workloads()
                .get(id)
                .is_some_and(|w| !w.shows_pending(r, m))
        });
        CycleDone {
            id: self.id,
            wall: self.wall,
            plan,
            messages_changed,
            settled: self.cache.settled(),
            cache: self.cache,
        }
    }
}

mod pods_ready;
pub use pods_ready::NotReady;

/// A node the driver declared lost, for the shell's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub node: String,
    pub reason: String,
}

/// The leader's state that is not replicated: it starts afresh on every replica that becomes
/// leader.
pub struct Leader {
    cfg: LeaderConfig,
    was_leader: bool,
    /// When this replica last became leader.
    leader_since: Millis,
    /// The last heartbeat heard from each node's agent while this replica led.
    heard: BTreeMap<String, Millis>,
    /// Nodes whose `NodeLost` was proposed: whether the node was healthy then (the first
    /// `NodeLost` fails a node, the second releases its workloads), and when (made again after
    /// `retry_ms`).
    lost_proposed: BTreeMap<String, (bool, Millis)>,
    last_lease_check: Option<Millis>,
    next_token: u64,
    /// The plan (or planned submit) in flight: its token and when it was proposed.
    plan: Option<(u64, Millis)>,
    /// The cycle being computed: its id and when it was handed out.
    cycle: Option<(u64, Millis)>,
    next_cycle: u64,
    /// Something that can change a decision was applied since the last cycle.
    dirty: bool,
    last_cycle: Option<Millis>,
    /// A copy of the accounting at an applied index, made while idle, for the next submit's
    /// fast path (copying it costs tens of µs at a thousand nodes).
    scratch: Option<(u64, Acct)>,
    /// The scheduler's cache between cycles; out with the job while a cycle runs.
    cache: Option<CycleCache>,
    /// From the last cycle that found every pending workload waiting: the submit fast path
    /// behind a backlog checks it against the state (`Settled::holds`), so it stays here
    /// while the next cycle runs.
    settled: Option<Settled>,
    /// Gang readiness: the proposals in flight (`PodsReadyTimeout` by workload and attempt,
    /// `BackoffFinished` by workload) and when they were made; see `pods_ready.rs`.
    ready_proposed: BTreeMap<(u64, u32), Millis>,
    last_ready_check: Option<Millis>,
}

impl Leader {
    pub fn new(cfg: LeaderConfig) -> Self {
        Leader {
            cfg,
            was_leader: false,
            leader_since: 0,
            heard: BTreeMap::new(),
            lost_proposed: BTreeMap::new(),
            last_lease_check: None,
            next_token: 1,
            plan: None,
            cycle: None,
            next_cycle: 1,
            dirty: true,
            last_cycle: None,
            scratch: None,
            cache: None,
            settled: None,
            ready_proposed: BTreeMap::new(),
            last_ready_check: None,
        }
    }

    /// A fresh token for a proposal or a read; tokens come back with what they named.
    pub fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }

    /// Brings the driver's view of leadership up to date. Every other entry point calls it
    /// first; the shell calls it once per turn to learn of changes (to fail its waiters).
    pub fn sync_role<D: Disk>(&mut self, rep: &Replica<D>, now: Millis) -> RoleChange {
        let leader = rep.is_leader();
        let change = match (self.was_leader, leader) {
            (false, true) => {
                // Every lease starts afresh from now: silence before this replica led was not
                // watched by it, so it proves nothing.
                self.leader_since = now;
                self.heard.clear();
                self.lost_proposed.clear();
                self.last_lease_check = None;
                self.dirty = true;
                RoleChange::Gained
            }
            (true, false) => {
                self.plan = None;
                self.cycle = None;
                self.scratch = None;
                self.settled = None;
                RoleChange::Lost
            }
            _ => RoleChange::None,
        };
        self.was_leader = leader;
        change
    }

    /// An agent's heartbeat reached this replica (counted only while it leads).
    pub fn handle_heartbeat<D: Disk>(&mut self, rep: &Replica<D>, node: &str, now: Millis) {
        self.sync_role(rep, now);
        if self.was_leader {
            match self.heard.get_mut(node) {
                Some(t) => *t = (*t).max(now),
                None => {
                    self.heard.insert(node.to_string(), now);
                }
            }
        }
    }

    /// An entry was applied on this replica.
    pub fn handle_applied(&mut self, a: &Applied) {
        if a.kind != "plan" || a.result.is_err() || !a.events.is_empty() {
            self.dirty = true;
        }
        if let Some(t) = a.token {
            if self.plan.is_some_and(|(p, _)| p == t) {
                self.plan = None;
            }
        }
    }

    /// A proposal made with `token` was refused before it entered the log.
    pub fn handle_refused(&mut self, token: u64) {
        if self.plan.is_some_and(|(p, _)| p == token) {
            self.plan = None;
            // Its pending messages were not applied: the next cycle must run to say them.
            self.settled = None;
        }
    }

    /// Leader only: proposes `NodeLost` for every healthy node whose agent this replica has not
    /// heard from for `LEASES_BEFORE_FAILED` leases, and for every failed node that workloads
    /// still hold room on after `LEASES_BEFORE_LOST`; silence counts from the last heartbeat or
    /// from when this replica became leader, whichever is later. Returns the nodes declared
    /// lost.
    pub fn poll_leases<D: Disk>(
        &mut self,
        rep: &mut Replica<D>,
        now: Millis,
        wall: i64,
    ) -> Vec<Lost> {
        self.sync_role(rep, now);
        if !self.was_leader
            || self
                .last_lease_check
                .is_some_and(|t| now.saturating_sub(t) < self.cfg.lease_check_ms)
        {
            return Vec::new();
        }
        self.last_lease_check = Some(now);
        let st = &rep.machine.state;
        let mut lost = Vec::new();
        for (name, meta) in &rep.machine.nodes_meta {
            let Some(report) = &meta.report else { continue };
            if report.lease_ms == 0 {
                continue;
            }
            let Some(n) = st.acct().nodes.find(name) else {
                continue;
            };
            // A failed node is watched while workloads wait on it for their pods to stop
            // (`State::fail_node_fenced`); its `NodeLost` releases them.
            let healthy = st.acct().nodes.node(n).healthy;
            if !healthy && st.workloads_on(n).is_empty() {
                self.lost_proposed.remove(name);
                continue;
            }
            let since = self
                .heard
                .get(name)
                .copied()
                .unwrap_or(self.leader_since)
                .max(self.leader_since);
            let silent = now.saturating_sub(since);
            let leases = if healthy {
                LEASES_BEFORE_FAILED
            } else {
                LEASES_BEFORE_LOST
            };
            if silent <= report.lease_ms * leases {
                continue;
            }
            if self
                .lost_proposed
                .get(name)
                .is_some_and(|&(h, t)| h == healthy && now.saturating_sub(t) < self.cfg.retry_ms)
            {
                continue;
            }
            lost.push((
                healthy,
                Lost {
                    node: name.clone(),
                    reason: format!(
                        "no heartbeat from its agent for {:.1}s (lease {:.1}s): {}",
                        silent as f64 / 1000.0,
                        report.lease_ms as f64 / 1000.0,
                        if healthy {
                            "its agent stops its pods"
                        } else {
                            "its pods were stopped by its agent"
                        }
                    ),
                },
            ));
        }
        for (healthy, l) in &lost {
            let token = self.token();
            let cmd = Command::NodeLost {
                name: l.node.clone(),
                reason: l.reason.clone(),
            };
            if rep.propose(token, &Cmd { now: wall, cmd }).is_ok() {
                self.lost_proposed.insert(l.node.clone(), (*healthy, now));
            }
        }
        lost.into_iter().map(|(_, l)| l).collect()
    }

    /// A submit goes into the log with the plan that admits it (one commit instead of the
    /// submit's and then the plan's) on an idle cluster, and behind a backlog that the last
    /// cycle found all waiting when that still holds (`Settled`): the workload is then decided
    /// on the state as it is, as the next cycle would decide it first. Only when no plan or
    /// other entry is in flight, so the plan is computed on exactly the state the entry will
    /// apply to (a cycle may be running: its plan, computed before, is verified when it
    /// applies); otherwise, or when the workload would not be admitted at once, the submit goes
    /// alone and the next cycle decides. The entry counts as the plan in flight. `token` is the
    /// one the shell will propose the returned command with.
    pub fn fast_path<D: Disk>(
        &mut self,
        rep: &Replica<D>,
        cmd: Command,
        wall: i64,
        token: u64,
        now: Millis,
    ) -> Command {
        self.sync_role(rep, now);
        let Command::Submit(input) = cmd else {
            return cmd;
        };
        if !self.nothing_proposed(rep) || rep.machine.blocks_admission() {
            return Command::Submit(input);
        }
        let applied = rep.applied_index();
        let acct = self
            .scratch
            .take()
            .filter(|(at, _)| *at == applied)
            .map(|(_, a)| a);
        match rep
            .machine
            .plan_submit_settled(&input, wall, acct, self.settled.as_ref())
        {
            Some((id, plan)) => {
                self.plan = Some((token, now));
                Command::SubmitPlanned {
                    input,
                    id: id.0,
                    plan,
                }
            }
            None => Command::Submit(input),
        }
    }

    /// Leader only: the next cycle to compute, when one is due (something changed, or the
    /// interval passed) and no plan or cycle is in flight.
    pub fn poll_cycle<D: Disk>(
        &mut self,
        rep: &Replica<D>,
        now: Millis,
        wall: i64,
    ) -> Option<CycleJob> {
        self.sync_role(rep, now);
        if !self.was_leader {
            return None;
        }
        let retry = self.cfg.retry_ms;
        if let Some((_, since)) = self.plan {
            // One plan in flight at a time; give up on one lost with a leadership change.
            if now.saturating_sub(since) < retry {
                return None;
            }
            self.plan = None;
            self.settled = None;
        }
        if let Some((_, since)) = self.cycle {
            if now.saturating_sub(since) < retry {
                return None;
            }
            self.cycle = None;
        }
        let idle = self
            .last_cycle
            .is_some_and(|t| now.saturating_sub(t) < self.cfg.schedule_interval_ms);
        if !self.dirty && idle {
            return None;
        }
        // Gang readiness with block admission: nothing is decided while an admitted
        // workload's pods are starting (`dirty` stays, so the cycle runs once they have).
        if rep.machine.blocks_admission() {
            return None;
        }
        self.dirty = false;
        self.last_cycle = Some(now);
        // The last cycle found every pending workload waiting and nothing any of them reads has
        // changed since, nor any queue: a cycle now would find the same and change nothing.
        if self
            .settled
            .as_ref()
            .is_some_and(|s| s.holds(&rep.machine.state, wall))
        {
            return None;
        }
        let id = self.next_cycle;
        self.next_cycle += 1;
        self.cycle = Some((id, now));
        Some(CycleJob {
            id,
            wall,
            state: rep.machine.state.clone(),
            cache: self.cache.take().unwrap_or_default(),
        })
    }

    /// A cycle came back: proposes its plan if it decides anything or changes a pending
    /// workload's message, and returns the token it was proposed with. A cycle handed out
    /// before a leadership change, or superseded, is dropped. A plan computed on an older
    /// applied state is still proposed: it is verified against the state it applies to, and
    /// whatever no longer fits is left for the next cycle, which the entries applied meanwhile
    /// have already asked for.
    pub fn handle_cycle_done<D: Disk>(
        &mut self,
        rep: &mut Replica<D>,
        done: CycleDone,
        now: Millis,
    ) -> Option<u64> {
        self.sync_role(rep, now);
        let CycleDone {
            id,
            wall,
            plan,
            messages_changed,
            cache,
            settled,
        } = done;
        // Whatever became of the cycle, its cache is good: a cycle checks it against the state
        // (and so does the fast path, `settled`).
        self.settled = settled;
        self.cache = Some(cache);
        if !self.was_leader || self.cycle.map(|(c, _)| c) != Some(id) {
            return None;
        }
        self.cycle = None;
        if !plan.has_decisions() && !messages_changed {
            return None;
        }
        let token = self.token();
        let entry = Cmd {
            now: wall,
            cmd: Command::Plan(plan),
        };
        match rep.propose(token, &entry) {
            Ok(()) => {
                self.plan = Some((token, now));
                Some(token)
            }
            Err(_) => None,
        }
    }

    /// While nothing is pending, or the backlog is settled, the leader keeps a copy of the
    /// accounting for the next submit's fast path (made before waiting for input, not on the
    /// submit's path).
    pub fn prepare_scratch<D: Disk>(&mut self, rep: &Replica<D>) {
        let applied = rep.applied_index();
        if !self.nothing_proposed(rep)
            || self.scratch.as_ref().is_some_and(|(at, _)| *at == applied)
            || (rep.machine.state.has_pending() && self.settled.is_none())
        {
            return;
        }
        self.scratch = Some((applied, rep.machine.state.acct().clone()));
    }

    /// The leader, with no plan in flight and every entry applied: a plan computed now is
    /// computed on exactly the state the next entry applies to.
    fn nothing_proposed<D: Disk>(&self, rep: &Replica<D>) -> bool {
        self.was_leader && self.plan.is_none() && rep.last_index() == rep.applied_index()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raftlog::MemDisk;
    use crate::replica::{ReplicaConfig, SnapshotCodec};
    use allot_common::api::NodeReport;
    use allot_common::Catalog;

    const LEASE_MS: u64 = 10_000;

    /// A single-voter replica that leads, with `nodes` registered by their agents.
    fn leading(nodes: &[&str]) -> Replica<MemDisk> {
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let cfg = ReplicaConfig::new(1, vec![1]);
        let mut rep =
            Replica::open(cfg, MemDisk::new(false), SnapshotCodec::wire(), &logger).expect("opens");
        rep.campaign().expect("campaigns");
        rep.handle_ready().expect("ready");
        assert!(rep.is_leader());
        let it = Catalog::builtin().get("ml.g5.8xlarge").expect("in catalog");
        for (i, n) in nodes.iter().enumerate() {
            let report = NodeReport {
                name: n.to_string(),
                instance_type: "ml.g5.8xlarge".into(),
                capacity: it.resources(),
                devices: Vec::new(),
                address: String::new(),
                http: String::new(),
                lease_ms: LEASE_MS,
                agent_version: String::new(),
                sources: Default::default(),
                topology: Default::default(),
            };
            let cmd = Cmd {
                now: 0,
                cmd: Command::ReportNode(report),
            };
            rep.propose(100 + i as u64, &cmd).expect("proposed");
        }
        while rep.handle_ready().expect("ready") {}
        assert_eq!(rep.machine.nodes_meta.len(), nodes.len());
        rep
    }

    /// Team `team-a` with the quota of one ml.g5.8xlarge.
    fn team_a_one_g5() -> Command {
        let config = allot_common::hyperpod::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]",
        )
        .expect("valid");
        Command::CreateComputeQuota(allot_common::api::ComputeQuotaInput {
            name: "q".into(),
            description: None,
            team: "team-a".into(),
            fair_share_weight: 1,
            config,
            activation: allot_common::api::ActivationState::Enabled,
        })
    }

    fn lost_nodes(rep: &Replica<MemDisk>) -> Vec<String> {
        let st = &rep.machine.state;
        rep.machine
            .nodes_meta
            .keys()
            .filter(|n| {
                st.acct()
                    .nodes
                    .find(n)
                    .is_some_and(|id| !st.acct().nodes.node(id).healthy)
            })
            .cloned()
            .collect()
    }

    #[test]
    fn a_new_leader_counts_every_lease_from_its_election() {
        // The replica process has been up for 35.7 s (the driver's clock started then) and has
        // just become leader: no agent has been silent *under it* for any time at all. The loop
        // this driver replaced declared both nodes lost here, "for 35.7s".
        let mut rep = leading(&["node-1", "node-2"]);
        let mut leader = Leader::new(LeaderConfig::default());
        let elected = 35_700;
        assert!(leader.poll_leases(&mut rep, elected, 0).is_empty());
        assert_eq!(leader.sync_role(&rep, elected), RoleChange::None);
        // node-1's agent keeps heartbeating; node-2's is silent from the election on.
        let mut t = elected;
        while t <= elected + LEASE_MS {
            leader.handle_heartbeat(&rep, "node-1", t);
            assert!(
                leader.poll_leases(&mut rep, t, 0).is_empty(),
                "declared a node lost {} ms after the election",
                t - elected
            );
            t += 500;
        }
        // Past a lease of silence under this leader, node-2 (only) is declared lost.
        let lost = leader.poll_leases(&mut rep, elected + LEASE_MS + 600, 0);
        assert_eq!(
            lost.iter().map(|l| l.node.as_str()).collect::<Vec<_>>(),
            vec!["node-2"]
        );
        assert!(lost[0].reason.contains("for 10.6s"), "{}", lost[0].reason);
        while rep.handle_ready().expect("ready") {}
        assert_eq!(lost_nodes(&rep), vec!["node-2".to_string()]);
    }

    #[test]
    fn a_gang_not_ready_in_time_is_evicted_with_what_its_agent_said() {
        let mut rep = leading(&["node-1"]);
        let apply = |rep: &mut Replica<MemDisk>, token: u64, now: i64, cmd: Command| {
            rep.propose(token, &Cmd { now, cmd }).expect("proposed");
            while rep.handle_ready().expect("ready") {}
        };
        let version = crate::format::CURRENT;
        apply(&mut rep, 9, 0, Command::SetFormat { version });
        apply(&mut rep, 1, 0, team_a_one_g5());
        let policy = allot_common::pods_ready::PodsReadyPolicy {
            timeout_s: 10,
            ..Default::default()
        };
        apply(&mut rep, 2, 0, Command::SetPodsReady(Some(policy)));
        let mut r = allot_common::Resources::new();
        r.add(&allot_common::ResourceName::gpu(), 1);
        let spec = allot_common::WorkloadSpec::single("gang", "team-a", 1, r);
        let submit = allot_common::api::SubmitInput {
            spec,
            run: None,
            client_token: None,
        };
        apply(&mut rep, 3, 1_000, Command::Submit(submit));
        let plan = allot_core::schedule(&rep.machine.state, 2_000);
        apply(&mut rep, 4, 2_000, Command::Plan(plan));
        let id = rep.machine.state.find_workload("gang").expect("submitted");
        let said =
            |w: u64, rank: u32| (w == id.0 && rank == 0).then(|| "Pulling 10 MiB: 5%".to_string());
        let mut leader = Leader::new(LeaderConfig::default());
        assert!(leader
            .poll_pods_ready(&mut rep, 100, 11_000, &said)
            .is_empty());
        let evicted = leader.poll_pods_ready(&mut rep, 5_000, 12_000, &said);
        assert_eq!(evicted.len(), 1);
        assert!(
            evicted[0]
                .message
                .contains("pod 0 on node-1 has not started (Pulling 10 MiB: 5%)"),
            "{}",
            evicted[0].message
        );
        // Not proposed twice while the first is in flight.
        assert!(leader
            .poll_pods_ready(&mut rep, 10_000, 13_000, &said)
            .is_empty());
        while rep.handle_ready().expect("ready") {}
        assert_eq!(
            rep.machine.state.workload(id).state,
            allot_core::WlState::Evicting
        );
    }

    #[test]
    fn heartbeats_heard_before_leading_do_not_count() {
        // A heartbeat that reached this replica while it followed proves nothing to it as
        // leader, and one heard under an earlier term is forgotten when it leads again.
        let mut rep = leading(&["node-1"]);
        let mut leader = Leader::new(LeaderConfig::default());
        leader.handle_heartbeat(&rep, "node-1", 1_000);
        // Leadership lost and regained later: its clock starts again at the new election.
        leader.was_leader = false;
        assert_eq!(leader.sync_role(&rep, 50_000), RoleChange::Gained);
        assert!(leader
            .poll_leases(&mut rep, 50_000 + LEASE_MS, 0)
            .is_empty());
        assert_eq!(
            leader
                .poll_leases(&mut rep, 50_000 + LEASE_MS + 200, 0)
                .len(),
            1
        );
    }

    #[test]
    fn a_lost_proposal_is_made_again_after_the_retry_interval() {
        let mut rep = leading(&["node-1"]);
        let cfg = LeaderConfig::default();
        let retry = cfg.retry_ms;
        let mut leader = Leader::new(cfg);
        leader.sync_role(&rep, 0);
        let t = 2 * LEASE_MS + 1;
        assert_eq!(leader.poll_leases(&mut rep, t, 0).len(), 1);
        // Not applied yet (no Ready handled): not proposed again within the retry interval.
        assert!(leader.poll_leases(&mut rep, t + 200, 0).is_empty());
        assert_eq!(leader.poll_leases(&mut rep, t + retry + 1, 0).len(), 1);
    }

    #[test]
    fn cycles_run_when_something_changed_and_one_plan_is_in_flight_at_a_time() {
        let mut rep = leading(&["node-1"]);
        let mut leader = Leader::new(LeaderConfig::default());
        let job = leader
            .poll_cycle(&rep, 0, 0)
            .expect("the first cycle is due");
        assert!(
            leader.poll_cycle(&rep, 1, 0).is_none(),
            "one cycle at a time"
        );
        let done = job.run();
        // Nothing pending, nothing decided: no plan proposed, and no cycle until something
        // changes or the interval passes.
        assert_eq!(leader.handle_cycle_done(&mut rep, done, 2), None);
        assert!(leader.poll_cycle(&rep, 3, 0).is_none());
        let job = leader
            .poll_cycle(&rep, 1_001, 0)
            .expect("due after the interval");
        assert_eq!(leader.handle_cycle_done(&mut rep, job.run(), 1_002), None);
        // A cycle handed out before a leadership change is dropped when it comes back.
        let job = leader.poll_cycle(&rep, 5_000, 0).expect("due again");
        leader.was_leader = false;
        leader.sync_role(&rep, 5_001);
        assert_eq!(leader.handle_cycle_done(&mut rep, job.run(), 5_002), None);
    }

    #[test]
    fn a_settled_backlog_runs_no_cycle_and_admits_what_fits_in_the_submits_entry() {
        let mut rep = leading(&["node-1"]);
        let mut leader = Leader::new(LeaderConfig::default());
        leader.sync_role(&rep, 0);
        let job = |name: &str, res: allot_common::ResourceName, qty: i64| {
            let mut req = allot_common::Resources::new();
            req.add(&res, qty);
            allot_common::api::SubmitInput {
                spec: allot_common::WorkloadSpec::single(name, "team-a", 1, req),
                run: None,
                client_token: None,
            }
        };
        let gpu = allot_common::ResourceName::gpu;
        let cmds = [
            team_a_one_g5(),
            Command::Submit(job("first", gpu(), 1)),
            Command::Submit(job("second", gpu(), 1)),
        ];
        for (i, cmd) in cmds.into_iter().enumerate() {
            rep.propose(200 + i as u64, &Cmd { now: 0, cmd })
                .expect("proposed");
        }
        let apply = |rep: &mut Replica<MemDisk>, leader: &mut Leader| {
            while rep.handle_ready().expect("ready") {}
            for a in rep.take_applied() {
                leader.handle_applied(&a);
            }
        };
        apply(&mut rep, &mut leader);
        // The first takes the node's only GPU; the second waits, and the next cycle finds
        // every pending workload waiting.
        let job1 = leader.poll_cycle(&rep, 1, 0).expect("a cycle");
        leader.handle_cycle_done(&mut rep, job1.run(), 1);
        apply(&mut rep, &mut leader);
        let cycle = leader
            .poll_cycle(&rep, 2, 0)
            .expect("due: the admission applied");
        assert_eq!(leader.handle_cycle_done(&mut rep, cycle.run(), 2), None);
        assert!(leader.settled.is_some());
        // Due by the interval, but nothing the waiting workload reads changed: no cycle.
        assert!(leader.poll_cycle(&rep, 5_000, 0).is_none());
        // A CPU-only submit fits beside it: admitted in the submit's own entry.
        let token = leader.token();
        let cmd = leader.fast_path(
            &rep,
            Command::Submit(job("cpu", allot_common::ResourceName::cpu(), 1000)),
            0,
            token,
            5_001,
        );
        assert!(matches!(cmd, Command::SubmitPlanned { .. }), "{cmd:?}");
        rep.propose(token, &Cmd { now: 0, cmd }).expect("proposed");
        apply(&mut rep, &mut leader);
        let st = &rep.machine.state;
        let state = |n: &str| st.workload(st.find_workload(n).expect("exists")).state;
        assert_eq!(state("cpu"), allot_core::WlState::Admitted);
        assert_eq!(state("second"), allot_core::WlState::Pending);
        // It touched the CPU, not the GPU the waiting one reads: still no cycle, and a GPU
        // submit, which would wait, goes alone.
        assert!(leader.poll_cycle(&rep, 5_002, 0).is_none());
        let token = leader.token();
        let cmd = leader.fast_path(
            &rep,
            Command::Submit(job("third", gpu(), 1)),
            0,
            token,
            5_003,
        );
        assert!(matches!(cmd, Command::Submit(_)), "{cmd:?}");
        rep.propose(token, &Cmd { now: 0, cmd }).expect("proposed");
        apply(&mut rep, &mut leader);
        // A new queue entry: the proof no longer holds, and a cycle runs.
        assert!(leader.poll_cycle(&rep, 5_004, 0).is_some());
    }

    #[test]
    fn a_silent_node_is_failed_after_a_lease_and_its_workloads_released_after_two() {
        let mut rep = leading(&["node-1"]);
        let mut leader = Leader::new(LeaderConfig::default());
        leader.sync_role(&rep, 0);
        // A workload running on node-1.
        let mut req = allot_common::Resources::new();
        req.add(&allot_common::ResourceName::gpu(), 1);
        let cmds = [
            team_a_one_g5(),
            Command::Submit(allot_common::api::SubmitInput {
                spec: allot_common::WorkloadSpec::single("w", "team-a", 1, req),
                run: None,
                client_token: None,
            }),
        ];
        for (i, cmd) in cmds.into_iter().enumerate() {
            rep.propose(200 + i as u64, &Cmd { now: 0, cmd })
                .expect("proposed");
        }
        while rep.handle_ready().expect("ready") {}
        let job = leader.poll_cycle(&rep, 0, 0).expect("a cycle");
        leader.handle_cycle_done(&mut rep, job.run(), 0);
        while rep.handle_ready().expect("ready") {}
        let state = |rep: &Replica<MemDisk>| {
            let st = &rep.machine.state;
            st.workload(st.find_workload("w").expect("exists")).state
        };
        assert_eq!(state(&rep), allot_core::WlState::Admitted);
        leader.handle_heartbeat(&rep, "node-1", 1_000);
        // One lease of silence: failed, the workload evicted but holding its room.
        assert_eq!(
            leader
                .poll_leases(&mut rep, 1_000 + LEASE_MS + 100, 0)
                .len(),
            1
        );
        while rep.handle_ready().expect("ready") {}
        assert_eq!(lost_nodes(&rep), vec!["node-1".to_string()]);
        assert_eq!(state(&rep), allot_core::WlState::Evicting);
        // Not released before two leases of silence.
        assert!(leader
            .poll_leases(&mut rep, 1_000 + 2 * LEASE_MS, 0)
            .is_empty());
        let lost = leader.poll_leases(&mut rep, 1_000 + 2 * LEASE_MS + 100, 0);
        assert_eq!(lost.len(), 1);
        assert!(
            lost[0].reason.contains("were stopped"),
            "{}",
            lost[0].reason
        );
        while rep.handle_ready().expect("ready") {}
        assert_eq!(state(&rep), allot_core::WlState::Pending);
        // Nothing holds room on the failed node any more: it is not declared lost again.
        assert!(leader
            .poll_leases(&mut rep, 1_000 + 5 * LEASE_MS, 0)
            .is_empty());
    }
}

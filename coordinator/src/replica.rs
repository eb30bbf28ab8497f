//! One coordinator replica, sans-I/O: raft-rs's `RawNode` driven through its Ready loop, the
//! durable log, and the state machine it applies. Inputs are `tick`, `step`, `propose` and
//! `read_index`; `handle_ready` persists (fsync) and applies; outputs are taken with
//! `take_messages`, `take_applied` and `take_reads`. The real server and the deterministic
//! simulation drive the same code.

use allot_common::api::{ApiError, ErrorKind, Reply};
use allot_core::machine::{Entry as Cmd, Machine};
use allot_core::Event;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, Message, MessageType, Snapshot,
};
use raft::{RawNode, StateRole};

use crate::format::{self, FormatError};
use crate::members::{self, MemberChange};
use crate::raftlog::{Batch, Disk, DiskError, LogCache, SnapshotFile};

#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    pub id: u64,
    /// The voters a cluster starts with (`--peers`), this replica among them; afterwards the
    /// configuration in the log and snapshots holds.
    pub voters: Vec<u64>,
    /// This replica joins a running cluster (`members add`): it starts with no configuration,
    /// never campaigns, and waits for the leader's snapshot.
    pub join: bool,
    /// Where the replicas of `--peers` are reached: a membership change it proposes carries
    /// those the replicated state lacks (`members::context`).
    pub addresses: std::collections::BTreeMap<u64, String>,
    /// Ticks without a heartbeat before a follower campaigns. The election timeout is drawn in
    /// `[election_tick, max_election_tick)`.
    pub election_tick: usize,
    pub max_election_tick: usize,
    pub heartbeat_tick: usize,
    /// Take a snapshot after this many applied entries.
    pub snapshot_every: u64,
    /// Entries kept behind a snapshot for followers that lag a little.
    pub keep_behind_snapshot: u64,
    /// Hand snapshots out as `SnapshotJob`s (a copy of the machine to encode elsewhere) instead
    /// of encoding them on the caller's thread: see `take_snapshot_job`.
    pub background_snapshots: bool,
    /// The newest format this replica reads (`format.rs`): it tells the leader so, and stops
    /// at an entry or a snapshot in a newer one.
    pub format_reads: u32,
}

impl ReplicaConfig {
    pub fn new(id: u64, voters: Vec<u64>) -> Self {
        ReplicaConfig {
            id,
            voters,
            join: false,
            addresses: Default::default(),
            election_tick: 10,
            max_election_tick: 20,
            heartbeat_tick: 2,
            snapshot_every: 10_000,
            keep_behind_snapshot: 1_000,
            background_snapshots: false,
            format_reads: crate::format::CURRENT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("snapshot: {0}")]
    Snapshot(String),
    /// A committed entry this build cannot read: applying past it would leave this replica's
    /// state behind the others', so the replica stops.
    #[error("log entry {index}: {error}")]
    Format {
        index: u64,
        error: crate::format::FormatError,
    },
}

/// One applied log entry.
#[derive(Debug)]
pub struct Applied {
    pub index: u64,
    pub term: u64,
    /// Set when this replica proposed the entry: the token it gave `propose`.
    pub token: Option<u64>,
    pub kind: &'static str,
    pub result: Result<Reply, ApiError>,
    pub events: Vec<Event>,
}

pub struct Replica<D: Disk> {
    raw: RawNode<LogCache>,
    disk: D,
    pub machine: Machine,
    applied: u64,
    last_snapshot: u64,
    cfg: ReplicaConfig,
    messages: Vec<Message>,
    applied_out: Vec<Applied>,
    reads: Vec<(u64, u64)>,
    /// Encodes and decodes the machine for snapshots.
    codec: SnapshotCodec,
    installed: u64,
    /// With `background_snapshots`: the index of the snapshot being encoded elsewhere (no
    /// second one starts before it ends).
    job_index: Option<u64>,
    /// The last index a snapshot was taken or attempted at: the next one is due an interval on.
    snapshot_base: u64,
    /// A commit index a leader named past this replica's log (it lost entries it had
    /// acknowledged): it votes for no one until its log reaches it.
    must_reach: u64,
    /// Read indexes asked before this leader committed an entry of its term.
    deferred_reads: Vec<u64>,
    /// The configuration at the index of the snapshot being encoded elsewhere.
    job_conf: ConfState,
    /// A replica was added at this index: a snapshot is taken there at once, so that the one
    /// the leader sends it holds it in its configuration.
    snapshot_due: Option<u64>,
    /// Configuration changes applied or installed since this replica opened: the shell
    /// connects to the members anew when it moves.
    conf_changes: u64,
    /// Ticks since this replica opened, and the tick each member was last heard from at:
    /// whether a peer is reachable, steadier than raft-rs's `recent_active`, which is cleared
    /// for every peer once per election timeout.
    ticks: u64,
    heard: std::collections::BTreeMap<u64, u64>,
}

/// A snapshot to encode off the raft thread: a copy of the machine at `index`. The copy shares
/// every workload with the live machine (copy-on-write), so making it takes the raft thread a
/// few milliseconds where encoding takes tens. Encode it with the codec and hand the bytes to
/// `Replica::finish_snapshot`, or report a failure with `Replica::snapshot_failed`.
pub struct SnapshotJob {
    pub index: u64,
    pub term: u64,
    pub machine: Machine,
}

/// A `SnapshotJob`'s machine encoded (`data`), and durable in `file` when that is set.
pub struct EncodedSnapshot {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
    pub file: Option<SnapshotFile>,
}

/// How the machine is encoded in snapshots and log entries, in a format version
/// (`format.rs`): a snapshot in the machine's own (`Machine::format`), an entry in the one it
/// is given; readers are given the newest format they read.
#[derive(Clone, Copy)]
pub struct SnapshotCodec {
    pub encode_machine: fn(&Machine) -> Result<Vec<u8>, String>,
    pub decode_machine: fn(&[u8], u32) -> Result<Machine, String>,
    pub encode_cmd: fn(&Cmd, u32) -> Result<Vec<u8>, String>,
    pub decode_cmd: fn(&[u8], u32) -> Result<Cmd, FormatError>,
}

impl SnapshotCodec {
    pub fn wire() -> Self {
        use allot_common::layout::scoped;
        use allot_net::wire;
        SnapshotCodec {
            // Each in the layout of the shared types that its format has.
            encode_machine: |m| {
                let b = scoped(format::layout(m.format), || {
                    crate::snapshot_compat::encode_machine(m)
                })?;
                Ok(format::seal(m.format, b))
            },
            decode_machine: |b, reads| {
                let (version, payload) = format::open(b, reads).map_err(|e| e.to_string())?;
                let mut m = scoped(format::layout(version), || {
                    crate::snapshot_compat::decode_machine(payload, version)
                })?;
                m.format = version;
                Ok(m)
            },
            encode_cmd: |c, version| {
                let b = scoped(format::layout(version), || wire::encode(c))
                    .map_err(|e| e.to_string())?;
                Ok(format::seal(version, b))
            },
            // Entries in an earlier release's form are read into the current one.
            decode_cmd: |b, reads| {
                let (version, payload) = format::open(b, reads)?;
                scoped(format::layout(version), || wire::decode(payload))
                    .map(crate::config_text::upgrade)
                    .map_err(|e| FormatError::Undecodable(e.to_string()))
            },
        }
    }
}

/// When `Replica::handle_ready_with` hands messages out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Before the local write (the leader's appends).
    BeforeWrite,
    /// Once the write is durable (votes, acknowledgements).
    AfterWrite,
}

fn ctx_bytes(id: u64, token: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&token.to_be_bytes());
    v
}

fn parse_ctx(b: &[u8]) -> Option<(u64, u64)> {
    if b.len() != 16 {
        return None;
    }
    let id = u64::from_be_bytes(b[..8].try_into().ok()?);
    let token = u64::from_be_bytes(b[8..].try_into().ok()?);
    Some((id, token))
}

impl<D: Disk> Replica<D> {
    /// Opens a replica on `disk`: loads the latest snapshot and the log after it. Committed
    /// entries after the snapshot are applied again through the Ready loop.
    pub fn open(
        cfg: ReplicaConfig,
        mut disk: D,
        codec: SnapshotCodec,
        logger: &slog::Logger,
    ) -> Result<Self, ReplicaError> {
        let persisted = disk.load()?;
        let voters = if cfg.join { &[][..] } else { &cfg.voters[..] };
        let cache = LogCache::from_persisted(persisted, voters);
        let snap_index = cache.snapshot.get_metadata().index;
        let machine = if cache.snapshot.data.is_empty() {
            Machine::new()
        } else {
            (codec.decode_machine)(&cache.snapshot.data, cfg.format_reads)
                .map_err(ReplicaError::Snapshot)?
        };
        let rc = raft::Config {
            id: cfg.id,
            election_tick: cfg.election_tick,
            min_election_tick: cfg.election_tick,
            max_election_tick: cfg.max_election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            applied: snap_index,
            max_size_per_msg: 4 * 1024 * 1024,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            read_only_option: raft::ReadOnlyOption::Safe,
            // Followers learn a new commit index with the next append or heartbeat instead of
            // an extra round of messages after every commit: they serve no reads (those go
            // through the leader), and the extra round cost each commit a second exchange
            // with every follower.
            skip_bcast_commit: true,
            ..Default::default()
        };
        rc.validate()?;
        let raw = RawNode::new(&rc, cache, logger)?;
        Ok(Replica {
            raw,
            disk,
            machine,
            applied: snap_index,
            last_snapshot: snap_index,
            cfg,
            messages: Vec::new(),
            applied_out: Vec::new(),
            reads: Vec::new(),
            codec,
            installed: 0,
            job_index: None,
            snapshot_base: snap_index,
            must_reach: 0,
            deferred_reads: Vec::new(),
            job_conf: ConfState::default(),
            snapshot_due: None,
            conf_changes: 0,
            ticks: 0,
            heard: std::collections::BTreeMap::new(),
        })
    }

    pub fn id(&self) -> u64 {
        self.cfg.id
    }
    pub fn tick(&mut self) {
        self.ticks += 1;
        self.raw.tick();
    }

    /// Whether member `id` was heard from within an election timeout (this replica always is).
    pub fn heard_lately(&self, id: u64) -> bool {
        id == self.cfg.id
            || self
                .heard
                .get(&id)
                .is_some_and(|&at| self.ticks - at <= self.cfg.election_tick as u64)
    }
    /// Steps a message from a peer. Two cases raft-rs does not expect are handled first,
    /// both after a replica lost entries it had acknowledged (a journal cut short or a torn
    /// record dropped at start):
    /// - as a follower, a heartbeat may name a commit index past this replica's log (raft-rs
    ///   would panic): the commit is taken only as far as the log goes, and the replica casts
    ///   no vote until its log reaches what it was told is committed, so it never helps elect
    ///   a leader that lacks those entries;
    /// - as the leader, a follower may refuse appends below what it acknowledged before
    ///   (raft-rs takes that as stale and never sends the older entries): its progress is
    ///   moved back to what it has, and the leader probes from there.
    pub fn step(&mut self, mut m: Message) -> Result<(), raft::Error> {
        let last = self.raw.raft.raft_log.last_index();
        if self.raw.raft.prs().get(m.from).is_some() {
            self.heard.insert(m.from, self.ticks);
        }
        if self.joining() {
            // Entries from the start of the log would lack the configuration the cluster
            // started with (it is in `--peers`, not the log): a joiner takes a snapshot first.
            // An append after index 0 is refused by raft-rs (the log is empty), and the leader
            // falls back to index 1, which it has compacted behind its snapshot, so it sends
            // the snapshot; one from index 1 (a leader with no snapshot yet) is dropped until
            // it has one.
            match m.get_msg_type() {
                MessageType::MsgAppend if m.index == 0 => return Ok(()),
                MessageType::MsgHeartbeat => m.commit = m.commit.min(last),
                _ => {}
            }
        }
        match m.get_msg_type() {
            MessageType::MsgHeartbeat if m.commit > last => {
                if m.commit > self.must_reach {
                    tracing::warn!(
                        "replica {}: the leader says index {} is committed, but this replica's log ends at {last}: entries it acknowledged were lost from its disk; it catches up from the leader and votes for no one until its log reaches {}",
                        self.cfg.id, m.commit, m.commit
                    );
                    self.must_reach = m.commit;
                }
                m.commit = last;
            }
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                if last < self.must_reach =>
            {
                return Ok(());
            }
            MessageType::MsgAppendResponse if m.reject && self.is_leader() => {
                let from = m.from;
                if let Some(pr) = self.raw.raft.mut_prs().get_mut(from) {
                    if m.reject_hint < pr.matched {
                        tracing::warn!(
                            "replica {from} holds entries up to {} only, below the {} it acknowledged: it lost them from its disk; sending them again",
                            m.reject_hint, pr.matched
                        );
                        pr.matched = m.reject_hint;
                        pr.become_probe();
                        // raft-rs then takes the refusal as the answer to a probe at m.index.
                        pr.next_idx = m.index + 1;
                    }
                }
            }
            _ => {}
        }
        self.raw.step(m)
    }
    pub fn campaign(&mut self) -> Result<(), raft::Error> {
        self.raw.campaign()
    }
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }
    /// The leader this replica knows of (0 = none).
    pub fn leader(&self) -> u64 {
        self.raw.raft.leader_id
    }
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }
    pub fn applied_index(&self) -> u64 {
        self.applied
    }
    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }
    pub fn snapshot_index(&self) -> u64 {
        self.last_snapshot
    }
    /// Snapshots received from a leader and installed since this replica started.
    pub fn snapshots_installed(&self) -> u64 {
        self.installed
    }
    pub fn disk(&self) -> &D {
        &self.disk
    }
    /// How the machine is encoded: what a `SnapshotJob` is encoded with.
    /// The newest format this replica reads.
    pub fn format_reads(&self) -> u32 {
        self.cfg.format_reads
    }

    /// Each member (voters, then learners) with whether it is a learner and, on the leader,
    /// the log index it has matched and whether it was heard from recently (`None` on a
    /// follower, which keeps no progress of its peers).
    pub fn member_progress(&self) -> impl Iterator<Item = (u64, bool, Option<(u64, bool)>)> + '_ {
        let leader = self.is_leader();
        let conf = &self.raw.store().conf_state;
        let voters = conf.voters.iter().map(|&id| (id, false));
        voters
            .chain(conf.learners.iter().map(|&id| (id, true)))
            .map(move |(id, learner)| {
                let progress = self.raw.raft.prs().get(id).filter(|_| leader);
                (
                    id,
                    learner,
                    progress.map(|p| (p.matched, self.heard_lately(id))),
                )
            })
    }

    /// The voters of the cluster, this replica among them (unless it was removed, or is a
    /// learner), in id order.
    pub fn voters(&self) -> &[u64] {
        &self.raw.store().conf_state.voters
    }

    /// The learners: replicas added and still catching up, in id order.
    pub fn learners(&self) -> &[u64] {
        &self.raw.store().conf_state.learners
    }

    /// Configuration changes applied or installed since this replica opened.
    pub fn conf_changes(&self) -> u64 {
        self.conf_changes
    }

    /// Whether this replica has no configuration yet: it joins a running cluster and waits
    /// for the leader's snapshot.
    pub fn joining(&self) -> bool {
        let conf = &self.raw.store().conf_state;
        conf.voters.is_empty() && conf.learners.is_empty()
    }

    pub fn codec(&self) -> SnapshotCodec {
        self.codec
    }
    /// The log this replica holds: (index, term, data) from its first entry.
    pub fn log_entries(&self) -> &[Entry] {
        &self.raw.store().entries
    }
    pub fn report_unreachable(&mut self, id: u64) {
        self.raw.report_unreachable(id);
    }
    /// The transport tells the leader whether a snapshot reached follower `id`; after a
    /// failure the leader sends another.
    pub fn report_snapshot(&mut self, id: u64, delivered: bool) {
        let status = if delivered {
            raft::SnapshotStatus::Finish
        } else {
            raft::SnapshotStatus::Failure
        };
        self.raw.report_snapshot(id, status);
    }

    /// Proposes a command; only the leader accepts. `token` comes back with the applied entry.
    pub fn propose(&mut self, token: u64, cmd: &Cmd) -> Result<(), ApiError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        // Written in the cluster's format, which every voter reads; a command that needs a
        // newer one waits for the cluster to be raised to it (`SetFormat` is proposed only
        // once every voter reads its version).
        let needs = format::needs(&cmd.cmd);
        let version = match &cmd.cmd {
            allot_core::machine::Command::SetFormat { version } => *version,
            _ => self.machine.format,
        };
        if needs > version || version > self.cfg.format_reads {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "{} needs format {needs}, and the cluster writes format {}: upgrade every replica first",
                    cmd.cmd.kind(),
                    self.machine.format
                ),
            ));
        }
        let data = (self.codec.encode_cmd)(cmd, version)
            .map_err(|e| ApiError::new(ErrorKind::Invalid, format!("encoding: {e}")))?;
        self.raw
            .propose(ctx_bytes(self.cfg.id, token), data)
            .map_err(|e| ApiError::new(ErrorKind::Unavailable, format!("proposal dropped: {e}")))
    }

    /// Proposes a membership change (`members.rs`); only the leader accepts, one change at a
    /// time, and never one that would leave the voters without a reachable quorum. `token`
    /// comes back with the applied entry.
    pub fn propose_member_change(
        &mut self,
        token: u64,
        change: &MemberChange,
    ) -> Result<(), ApiError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        // Unavailable is asked again by clients; Conflict is not: the cluster must change first.
        let unavailable = |m: String| ApiError::new(ErrorKind::Unavailable, m);
        let conflict = |m: String| ApiError::new(ErrorKind::Conflict, m);
        let need = allot_core::machine::FORMAT_MEMBERS;
        if self.machine.format < need && self.cfg.format_reads >= need {
            // A new cluster starts at format 0 and is raised within seconds.
            return Err(unavailable(format!(
                "membership changes need cluster format {need}, and the cluster writes format {}: the leader raises it once every voter says it reads format {need} (a replica of an older release holds it back); ask again in a moment",
                self.machine.format
            )));
        }
        if self.machine.format < need {
            return Err(conflict(format!(
                "membership changes need cluster format {need}, and the cluster writes format {}: upgrade every replica first",
                self.machine.format
            )));
        }
        if self.raw.raft.has_pending_conf() {
            return Err(unavailable(
                "another membership change is being applied: ask again once `allot coordinator members list` shows it".into(),
            ));
        }
        let conf = &self.raw.store().conf_state;
        let role = |id: u64| {
            if conf.voters.contains(&id) {
                Some("a voter")
            } else if conf.learners.contains(&id) {
                Some("a learner")
            } else {
                None
            }
        };
        let (kind, id, address) = match change {
            MemberChange::Add { id, address } => {
                if *id == 0 {
                    return Err(ApiError::new(
                        ErrorKind::Invalid,
                        "replica id 0 is not valid: ids start at 1",
                    ));
                }
                if let Some(r) = role(*id) {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!("replica {id} is already a member ({r}); to move it to another address, remove it first"),
                    ));
                }
                members::check_address(address)?;
                (ConfChangeType::AddLearnerNode, *id, address.as_str())
            }
            MemberChange::Remove { id } => {
                match role(*id) {
                    None => {
                        return Err(ApiError::new(
                            ErrorKind::NotFound,
                            format!(
                                "replica {id} is not a member (if it was just removed, it is gone); the voters are {:?} and the learners {:?}",
                                conf.voters, conf.learners
                            ),
                        ))
                    }
                    Some("a voter") if *id == self.cfg.id => return Err(self.hand_over()),
                    Some("a voter") => {
                        members::quorum_after_remove(&conf.voters, *id, |v| self.heard_lately(v))
                            .map_err(conflict)?;
                    }
                    Some(_) => {}
                }
                (ConfChangeType::RemoveNode, *id, "")
            }
        };
        let mut cc = ConfChange::default();
        cc.set_change_type(kind);
        cc.node_id = id;
        self.raw
            .propose_conf_change(self.change_context(token, address), cc)
            .map_err(|e| unavailable(format!("membership change dropped: {e}")))
    }

    /// A change's entry context: the added replica's address and every member's the
    /// replicated state lacks, from this replica's `--peers`.
    fn change_context(&self, token: u64, address: &str) -> Vec<u8> {
        let conf = &self.raw.store().conf_state;
        let others: Vec<(u64, &str)> = (conf.voters.iter().chain(&conf.learners))
            .filter(|id| !self.machine.members.contains_key(id))
            .filter_map(|id| Some((*id, self.cfg.addresses.get(id)?.as_str())))
            .collect();
        members::context(self.cfg.id, token, address, &others)
    }

    /// The leader is to be removed: it hands leadership to the voter that has matched the
    /// most of the log among those heard from lately, and says so.
    fn hand_over(&mut self) -> ApiError {
        let me = self.cfg.id;
        match self.transfer_to_best() {
            Some(to) => {
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!("replica {me} leads: leadership is moving to replica {to}; ask again in a moment, and the new leader removes replica {me}"),
                )
            }
            None => ApiError::new(
                ErrorKind::Conflict,
                format!("replica {me} leads, and no other voter was heard from lately to hand leadership to: bring one back first"),
            ),
        }
    }

    /// Leader only: hands leadership to the voter (not this replica) that has matched the most
    /// of the log among those heard from lately; which one, if any.
    fn transfer_to_best(&mut self) -> Option<u64> {
        let me = self.cfg.id;
        let prs = self.raw.raft.prs();
        let (_, to) = self
            .voters()
            .iter()
            .filter(|&&v| v != me && self.heard_lately(v))
            .filter_map(|&v| prs.get(v).map(|p| (p.matched, v)))
            .max()?;
        self.raw.transfer_leader(to);
        Some(to)
    }

    /// Whether `change` is already in force: an add of a member at the same address (asked
    /// again by a client whose first answer was lost).
    pub fn member_change_done(&self, change: &MemberChange) -> bool {
        match change {
            MemberChange::Add { id, address } => {
                let conf = &self.raw.store().conf_state;
                (conf.voters.contains(id) || conf.learners.contains(id))
                    && self.machine.members.get(id) == Some(address)
            }
            MemberChange::Remove { .. } => false,
        }
    }

    /// Leader only: makes a learner that has caught up a voter (one change at a time).
    pub fn promote_caught_up(&mut self) {
        if !self.is_leader()
            || self.machine.format < allot_core::machine::FORMAT_MEMBERS
            || self.raw.raft.has_pending_conf()
        {
            return;
        }
        let committed = self.commit_index();
        let prs = self.raw.raft.prs();
        let ready = self.learners().iter().copied().find(|&l| {
            prs.get(l).is_some_and(|p| {
                self.heard_lately(l)
                    && p.state == raft::ProgressState::Replicate
                    && p.matched + members::CAUGHT_UP >= committed
            })
        });
        if let Some(id) = ready {
            let mut cc = ConfChange::default();
            cc.set_change_type(ConfChangeType::AddNode);
            cc.node_id = id;
            let ctx = members::context(self.cfg.id, 0, "", &[]);
            if self.raw.propose_conf_change(ctx, cc).is_ok() {
                tracing::info!(
                    "replica {}: replica {id} has caught up; making it a voter",
                    self.cfg.id
                );
            }
        }
    }

    /// Asks for a read index; `take_reads` returns (token, index) once the leader confirmed it.
    pub fn read_index(&mut self, token: u64) -> Result<(), ApiError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        // raft-rs drops a read index asked of a leader that has not yet committed an entry of
        // its own term (the first few milliseconds after an election), and the read would wait
        // for its timeout: it is asked once that entry is committed (`ready_begin`).
        if !self.raw.raft.commit_to_current_term() {
            self.deferred_reads.push(token);
            return Ok(());
        }
        self.raw.read_index(ctx_bytes(self.cfg.id, token));
        Ok(())
    }

    /// Asks the read indexes deferred until this leader committed an entry of its term; they
    /// are dropped when it no longer leads (its caller fails them on the change of leadership).
    fn flush_deferred_reads(&mut self) {
        if self.deferred_reads.is_empty() {
            return;
        }
        if !self.is_leader() {
            self.deferred_reads.clear();
            return;
        }
        if self.raw.raft.commit_to_current_term() {
            for token in std::mem::take(&mut self.deferred_reads) {
                self.raw.read_index(ctx_bytes(self.cfg.id, token));
            }
        }
    }

    pub fn not_leader(&self) -> ApiError {
        let l = self.leader();
        ApiError::new(
            ErrorKind::NotLeader,
            if l == 0 {
                format!(
                    "replica {} is not the leader and knows of none (an election is under way); retry shortly",
                    self.cfg.id
                )
            } else {
                format!("replica {} is not the leader; replica {l} is", self.cfg.id)
            },
        )
    }

    pub fn has_ready(&self) -> bool {
        self.raw.has_ready()
    }

    /// Persists what raft-rs produced (one durable write), applies committed entries and queues
    /// messages. Messages go out only after the write, so nothing is acknowledged unsynced.
    pub fn handle_ready(&mut self) -> Result<bool, ReplicaError> {
        let mut early = Vec::new();
        let r = self.handle_ready_with(&mut |m, _| early.extend(m));
        let mut all = early;
        all.append(&mut self.messages);
        self.messages = all;
        r
    }

    /// Like `handle_ready`, but hands messages to `send_early` as soon as they may go: the
    /// leader's appends before the local write (Raft allows a leader to replicate while it
    /// persists), so replication and the leader's fsync overlap; messages that need the write
    /// (votes, acknowledgements) right after it, before committed entries are applied. The
    /// second argument says which: `Sent::AfterWrite` messages need the write to be durable.
    pub fn handle_ready_with(
        &mut self,
        send_early: &mut dyn FnMut(Vec<Message>, Sent),
    ) -> Result<bool, ReplicaError> {
        let Some((rd, early)) = self.ready_begin() else {
            return Ok(false);
        };
        if !early.is_empty() {
            send_early(early, Sent::BeforeWrite);
        }
        let (rd, persisted) = self.ready_write(rd)?;
        if !persisted.is_empty() {
            send_early(persisted, Sent::AfterWrite);
        }
        self.ready_apply(rd)?;
        Ok(true)
    }

    /// The first half of `handle_ready_with`, for a caller that must let the messages that may
    /// leave before the write (returned here) reach the network before it calls
    /// `ready_write`. Nothing else may touch the replica until `ready_apply` returns.
    pub fn ready_begin(&mut self) -> Option<(raft::Ready, Vec<Message>)> {
        self.flush_deferred_reads();
        if !self.raw.has_ready() {
            return None;
        }
        let mut rd = self.raw.ready();
        let early = rd.take_messages();
        Some((rd, early))
    }

    /// The second step of `handle_ready_with`: the durable write. Returns the messages that
    /// needed it (votes, acknowledgements), which may leave now, before `ready_apply`.
    pub fn ready_write(
        &mut self,
        mut rd: raft::Ready,
    ) -> Result<(raft::Ready, Vec<Message>), ReplicaError> {
        let install = if rd.snapshot().is_empty() {
            None
        } else {
            Some(rd.snapshot().clone())
        };
        let entries = rd.take_entries();
        let hs = rd.hs().cloned();
        // Term and vote must be durable before anything is sent; the commit index need not be
        // (Raft keeps it in volatile state, and a restarted replica learns it again from the
        // leader). So a Ready that only moves the commit index costs no fsync: that write sat
        // between the quorum's acknowledgement and the reply. It goes out with the next write.
        let vote_changed = hs.as_ref().is_some_and(|h| {
            let old = &self.raw.store().hard_state;
            h.term != old.term || h.vote != old.vote
        });
        if install.is_some() || !entries.is_empty() || vote_changed {
            self.disk.write(&Batch {
                hard_state: hs.as_ref().filter(|_| vote_changed),
                entries: &entries,
                install: install.as_ref(),
                local: None,
                local_file: None,
                compact_to: None,
            })?;
            let store = self.raw.mut_store();
            if let Some(s) = &install {
                store.install(s);
            }
            store.append(&entries);
        }
        if let Some(hs) = &hs {
            self.raw.mut_store().hard_state = hs.clone();
        }
        if let Some(s) = &install {
            self.machine = (self.codec.decode_machine)(&s.data, self.cfg.format_reads)
                .map_err(ReplicaError::Snapshot)?;
            self.applied = s.get_metadata().index;
            self.last_snapshot = self.applied;
            self.snapshot_base = self.applied;
            self.installed += 1;
            self.conf_changes += 1;
            if self.snapshot_due.is_some_and(|i| i <= self.applied) {
                self.snapshot_due = None;
            }
        }
        for rs in rd.take_read_states() {
            if let Some((id, token)) = parse_ctx(&rs.request_ctx) {
                if id == self.cfg.id {
                    self.reads.push((token, rs.index));
                }
            }
        }
        // Acknowledgements need only the write: they go before the apply, which can wait.
        let persisted = rd.take_persisted_messages();
        Ok((rd, persisted))
    }

    /// The last step of `handle_ready_with`: applies what was committed and advances raft-rs.
    pub fn ready_apply(&mut self, mut rd: raft::Ready) -> Result<(), ReplicaError> {
        let committed = rd.take_committed_entries();
        self.apply_entries(committed)?;
        let mut light = self.raw.advance(rd);
        if let Some(c) = light.commit_index() {
            self.raw.mut_store().hard_state.commit = c;
        }
        self.messages.extend(light.take_messages());
        self.apply_entries(light.take_committed_entries())?;
        self.raw.advance_apply_to(self.applied);
        self.maybe_snapshot()?;
        Ok(())
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) -> Result<(), ReplicaError> {
        for e in entries {
            if e.index <= self.applied {
                continue;
            }
            if e.get_entry_type() == EntryType::EntryConfChange {
                self.applied = e.index;
                let applied = self.apply_conf_change(&e);
                self.applied_out.push(applied);
                continue;
            }
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                self.applied = e.index;
                continue;
            }
            let decoded = match (self.codec.decode_cmd)(&e.data, self.cfg.format_reads) {
                Err(error @ FormatError::Newer { .. }) => {
                    return Err(ReplicaError::Format {
                        index: e.index,
                        error,
                    })
                }
                other => other,
            };
            self.applied = e.index;
            let token = parse_ctx(&e.context)
                .filter(|(id, _)| *id == self.cfg.id)
                .map(|(_, t)| t);
            let (kind, result, events) = match decoded {
                Ok(cmd) => {
                    let (r, ev) = self.machine.apply(&cmd);
                    (cmd.cmd.kind(), r, ev)
                }
                // Every replica skips the same undecodable entry the same way.
                Err(err) => (
                    "undecodable",
                    Err(ApiError::new(
                        ErrorKind::Invalid,
                        format!("log entry {} could not be decoded: {err}", e.index),
                    )),
                    Vec::new(),
                ),
            };
            self.applied_out.push(Applied {
                index: e.index,
                term: e.term,
                token,
                kind,
                result,
                events,
            });
        }
        Ok(())
    }

    /// Applies a configuration change every replica applies alike: raft-rs's configuration,
    /// the one kept for snapshots, and the added replica's address (`Machine::members`).
    fn apply_conf_change(&mut self, e: &Entry) -> Applied {
        let ctx = members::parse_context(&e.context);
        let token = ctx
            .as_ref()
            .filter(|(id, t, _)| *id == self.cfg.id && *t != 0)
            .map(|(_, t, _)| *t);
        let result = ConfChange::parse_from_bytes(&e.data)
            .map_err(|err| err.to_string())
            .and_then(|cc| {
                let cs = self.raw.apply_conf_change(&cc).map_err(|e| e.to_string())?;
                Ok((cc, cs))
            });
        let result = match result {
            Ok((cc, mut cs)) => {
                cs.voters.sort_unstable();
                cs.learners.sort_unstable();
                self.raw.mut_store().conf_state = cs;
                self.conf_changes += 1;
                let id = cc.node_id;
                match cc.get_change_type() {
                    ConfChangeType::AddLearnerNode => {
                        let text = ctx.map(|(_, _, a)| a).unwrap_or_default();
                        let address = text.lines().next().unwrap_or_default().to_string();
                        self.machine.members.insert(id, address);
                        let conf = &self.raw.store().conf_state;
                        for (other, a) in members::other_addresses(&text) {
                            let member =
                                conf.voters.contains(&other) || conf.learners.contains(&other);
                            if member && !self.machine.members.contains_key(&other) {
                                self.machine.members.insert(other, a);
                            }
                        }
                        self.snapshot_due = Some(e.index);
                    }
                    ConfChangeType::RemoveNode => {
                        self.machine.members.remove(&id);
                        if id == self.cfg.id {
                            tracing::warn!("replica {id} was removed from the cluster at log entry {}: it takes no part any more; stop it", e.index);
                            // A removal proposed by an earlier leader: raft-rs would let this
                            // replica go on leading the others.
                            if self.is_leader() && self.transfer_to_best().is_none() {
                                let term = self.term() + 1;
                                self.raw.raft.become_follower(term, raft::INVALID_ID);
                            }
                        }
                    }
                    ConfChangeType::AddNode => {}
                }
                Ok(Reply::Done)
            }
            Err(err) => Err(ApiError::new(
                ErrorKind::Invalid,
                format!(
                    "membership change at log entry {} not applied: {err}",
                    e.index
                ),
            )),
        };
        Applied {
            index: e.index,
            term: e.term,
            token,
            kind: "member-change",
            result,
            events: Vec::new(),
        }
    }

    /// Whether a snapshot is due: every `snapshot_every` entries, or at once after a replica
    /// was added.
    fn snapshot_wanted(&self) -> bool {
        self.applied > self.last_snapshot
            && (self.snapshot_due.is_some_and(|i| i <= self.applied)
                || self.applied >= self.next_snapshot_at())
    }

    /// Snapshots the machine every `snapshot_every` entries and compacts the log behind it.
    fn maybe_snapshot(&mut self) -> Result<(), ReplicaError> {
        if self.cfg.background_snapshots || !self.snapshot_wanted() {
            return Ok(());
        }
        self.snapshot_now()
    }

    /// With `background_snapshots`: a snapshot of the applied state to encode elsewhere, when
    /// one is due. Until it is finished (or reported failed) no other is handed out.
    pub fn take_snapshot_job(&mut self) -> Result<Option<SnapshotJob>, ReplicaError> {
        if !self.cfg.background_snapshots || self.job_index.is_some() || !self.snapshot_wanted() {
            return Ok(None);
        }
        let term = raft::Storage::term(self.raw.store(), self.applied)?;
        self.job_index = Some(self.applied);
        self.job_conf = self.raw.store().conf_state.clone();
        Ok(Some(SnapshotJob {
            index: self.applied,
            term,
            machine: self.machine.clone(),
        }))
    }

    /// Writes the snapshot a `SnapshotJob` was encoded into (`data`, already durable in `file`
    /// when set) and compacts the log behind it. A job overtaken by a snapshot installed from
    /// the leader is dropped.
    pub fn finish_snapshot(&mut self, s: EncodedSnapshot) -> Result<(), ReplicaError> {
        if self.job_index != Some(s.index) {
            return Ok(());
        }
        self.job_index = None;
        if s.index <= self.last_snapshot || s.index > self.applied {
            return Ok(());
        }
        let conf = std::mem::take(&mut self.job_conf);
        self.write_snapshot(s, conf)
    }

    /// A `SnapshotJob` could not be encoded: the next attempt comes an interval later.
    pub fn snapshot_failed(&mut self, index: u64) {
        if self.job_index == Some(index) {
            self.job_index = None;
            self.snapshot_base = self.snapshot_base.max(index);
        }
    }

    /// The applied index at which this replica takes its next snapshot. Taking one holds a
    /// replica's raft loop for milliseconds (tens when encoded on it), so each voter takes its snapshots at its
    /// own offset within the interval (voter k of n at k * `snapshot_every` / n past each
    /// multiple of it). When all three replicas wrote theirs at the same index, every commit
    /// waited for them; now two voters that are not snapshotting still form a quorum with
    /// each other, and only the leader's own snapshots hold commits up.
    pub fn next_snapshot_at(&self) -> u64 {
        let every = self.cfg.snapshot_every.max(1);
        let n = self.voters().len().max(1) as u64;
        let k = self
            .voters()
            .iter()
            .position(|v| *v == self.cfg.id)
            .unwrap_or(0) as u64;
        let offset = every / n * k;
        let base = self.snapshot_base;
        let at = base - base % every + offset;
        if at > base {
            at
        } else {
            at + every
        }
    }

    /// Takes a snapshot of the applied state now, on this thread.
    pub fn snapshot_now(&mut self) -> Result<(), ReplicaError> {
        if self.applied == self.last_snapshot {
            return Ok(());
        }
        let data = (self.codec.encode_machine)(&self.machine).map_err(ReplicaError::Snapshot)?;
        let term = raft::Storage::term(self.raw.store(), self.applied)?;
        let conf = self.raw.store().conf_state.clone();
        self.write_snapshot(
            EncodedSnapshot {
                index: self.applied,
                term,
                data,
                file: None,
            },
            conf,
        )
    }

    /// Writes a snapshot of the state at `index`, whose configuration was `conf`, and compacts
    /// the log behind it.
    fn write_snapshot(&mut self, s: EncodedSnapshot, conf: ConfState) -> Result<(), ReplicaError> {
        let EncodedSnapshot {
            index,
            term,
            data,
            file,
        } = s;
        let mut snap = Snapshot {
            data: data.into(),
            ..Default::default()
        };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf);
        let compact_to = index.saturating_sub(self.cfg.keep_behind_snapshot).max(1);
        self.disk.write(&Batch {
            hard_state: None,
            entries: &[],
            install: None,
            local: Some(&snap),
            local_file: file.as_ref(),
            compact_to: Some(compact_to),
        })?;
        let store = self.raw.mut_store();
        let replaced = store.record(&snap);
        let compacted = store.compact(compact_to);
        // Freeing the replaced snapshot (tens of MB) and ten thousand entries held this
        // thread for milliseconds.
        let name = format!("compacted-{}", self.cfg.id);
        let _ = crate::priority::in_background(name, move || drop((replaced, compacted)));
        self.last_snapshot = index;
        self.snapshot_base = self.snapshot_base.max(index);
        if self.snapshot_due.is_some_and(|i| i <= index) {
            self.snapshot_due = None;
        }
        Ok(())
    }

    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.messages)
    }
    pub fn take_applied(&mut self) -> Vec<Applied> {
        std::mem::take(&mut self.applied_out)
    }
    pub fn take_reads(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.reads)
    }
}

/// Encodes a raft message for the wire (protobuf, as raft-rs defines it).
pub fn encode_message(m: &Message) -> Result<Vec<u8>, String> {
    m.write_to_bytes().map_err(|e| e.to_string())
}

/// Decodes a raft message. Only called on bytes from authenticated coordinator peers.
pub fn decode_message(b: &[u8]) -> Result<Message, String> {
    Message::parse_from_bytes(b).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raftlog::MemDisk;

    #[test]
    fn a_read_asked_right_after_an_election_is_answered() {
        // raft-rs drops a read index asked before the new leader has committed an entry of
        // its term; the read would then wait for the caller's timeout (10 s in the server).
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let cfg = ReplicaConfig::new(1, vec![1]);
        let mut rep =
            Replica::open(cfg, MemDisk::new(false), SnapshotCodec::wire(), &logger).expect("opens");
        rep.campaign().expect("campaigns");
        assert!(rep.is_leader());
        assert!(!rep.raw.raft.commit_to_current_term());
        rep.read_index(7).expect("asked");
        let mut reads = Vec::new();
        for _ in 0..4 {
            rep.handle_ready().expect("ready");
            reads.extend(rep.take_reads());
        }
        assert_eq!(reads.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![7]);
    }
}

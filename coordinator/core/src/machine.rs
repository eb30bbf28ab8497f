//! The replicated state machine as Raft applies it: every change to the cluster is a `Command`
//! in the log, stamped by the leader with the time it was proposed. Applying an entry is
//! deterministic and has no side effects, so every replica that applies the same log reaches the
//! same `Machine`, byte for byte (`Machine::digest` checks it).
//!
//! On top of the scheduling `State` this keeps what the API adds: compute quota records with
//! versions (AWS `TargetVersion` checks), the scheduler configuration record, how each workload
//! runs, and client tokens that make submits idempotent.
//!
//! Finished workloads are kept for a while (`get workloads --all`, `describe workload`), then
//! forgotten (`FINISHED_KEEP_MS`, `FINISHED_KEEP_MAX`), so the state, its snapshots and a
//! restart stay the same size however many workloads the cluster has run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use allot_common::api::{
    ActivationState, AdmissionLimits, AdmissionLimitsInput, ApiError, ComputeQuotaInput,
    ComputeQuotaView, ErrorKind, NodeReport, PodExit, Reply, RunSpec, SchedulerConfigView,
    StabilityInput, SubmitInput, WorkloadSelector,
};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::ResourceName;
use allot_common::{Catalog, ClusterPolicy, Resources, TeamSpec};
use serde::{Deserialize, Serialize};

pub use crate::config_commands::{SchedulerConfigChange, SchedulerConfigSet};

use crate::chunked::WlMap;
use crate::ids::WlId;
use crate::plan::Plan;
use crate::state::{Event, State, StateError, Time, WlState};

/// One entry of the replicated log: a command and the leader's clock when it was proposed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub now: Time,
    pub cmd: Command,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    CreateComputeQuota(ComputeQuotaInput),
    UpdateComputeQuota {
        input: ComputeQuotaInput,
        target_version: u64,
    },
    DeleteComputeQuota {
        name: String,
    },
    CreateSchedulerConfig {
        name: String,
        config: String,
        #[serde(default)]
        limits: AdmissionLimitsInput,
        #[serde(default)]
        description: Option<String>,
    },
    UpdateSchedulerConfig {
        name: String,
        config: String,
        target_version: u64,
        #[serde(default)]
        limits: AdmissionLimitsInput,
        #[serde(default)]
        description: Option<String>,
    },
    Submit(SubmitInput),
    SubmitBatch(Vec<SubmitInput>),
    /// `team`: when set (a user's request), the workload must belong to it.
    Cancel {
        name: String,
        team: Option<String>,
    },
    RegisterNode {
        name: String,
        instance_type: String,
        capacity: Resources,
    },
    SetNodeHealth {
        name: String,
        healthy: bool,
        reason: String,
    },
    /// `node`: when set (an agent's report), the workload must have a pod on it.
    WorkloadStarted {
        name: String,
        node: Option<String>,
    },
    WorkloadExited {
        name: String,
        succeeded: bool,
        node: Option<String>,
    },
    /// One scheduling cycle's decisions, verified again as they are applied.
    Plan(Plan),
    /// An agent registered its node or reported a changed inventory.
    ReportNode(NodeReport),
    /// The leader saw no heartbeat from a node's agent for longer than its lease allows. The
    /// first time, the node is marked failed and its workloads are evicted but keep their room
    /// (`Machine::node_failed`); the second, on a failed node, after two leases of silence, the
    /// agent has stopped every pod for certain, and each workload is requeued once its pods on
    /// other nodes are gone too.
    NodeLost {
        name: String,
        reason: String,
    },
    /// Pods of one attempt started on `node`.
    PodsStarted {
        node: Option<String>,
        workload: String,
        /// The workload's id when the reporter knows it (agents do); else the name is
        /// resolved among the workloads with a pod on `node`.
        #[serde(default)]
        workload_id: Option<u64>,
        attempt: u32,
        ranks: Vec<u32>,
    },
    /// Pods of one attempt ended on `node`.
    PodsExited {
        node: Option<String>,
        workload: String,
        #[serde(default)]
        workload_id: Option<u64>,
        attempt: u32,
        exits: Vec<PodExit>,
    },
    /// A submit and the plan the leader computed for the state right after it, in one entry:
    /// the leader proposes this when nothing else is in flight, so an idle cluster admits a
    /// workload in one commit instead of two. `id` is the id the leader expects the workload
    /// to get; the plan applies (verified like any plan) only when it gets exactly that id,
    /// which holds when no other entry came between.
    SubmitPlanned {
        input: SubmitInput,
        id: u64,
        plan: Plan,
    },
    /// A job array (`allot submit --array`): elements are queued as its limit allows.
    SubmitArray {
        input: SubmitInput,
        array: String,
    },
    /// Cancels every active workload the selector matches (scoped to the user's team by the
    /// server), and the elements of matching arrays not yet queued.
    CancelMatching {
        selector: WorkloadSelector,
    },
    PutRegistryCredentials {
        team: String,
        registry: String,
        credentials: allot_common::image::Credentials,
    },
    DeleteRegistryCredentials {
        team: String,
        registry: String,
    },
    /// A scheduler config command with allot's stability rules. Appended (log entries are
    /// bincode, by variant index): the two commands keep the layout entries written before
    /// the rules have, and still decode; a bare one keeps the rules as they are (a new
    /// config gets the defaults).
    WithStability {
        change: SchedulerConfigChange,
        stability: StabilityInput,
    },
    /// Creates or updates the scheduler config, the policy parsed (the three variants above
    /// carry its text: the log reader turns them into this one, `config_commands`).
    SetSchedulerConfig(SchedulerConfigSet),
    /// An admin cordons a node (no new pods on it) or uncordons it.
    CordonNode {
        name: String,
        cordoned: bool,
    },
    /// An admin drains a node: cordoned, and every workload on it evicted (with its grace
    /// period) and requeued.
    DrainNode {
        name: String,
    },
    /// Every replica reads log entries and snapshots of this format version (the leader saw
    /// each voter say so): from this entry on, they are written in it. Never lowered.
    SetFormat {
        version: u32,
    },
    /// An admin removes a node that will not come back: it must be cordoned or failed, with
    /// nothing holding room on it. Format 3.
    RemoveNode {
        name: String,
    },
    /// An admin turns gang readiness on with these settings, or off (`pods_ready.rs`).
    /// Format 5.
    SetPodsReady(Option<allot_common::pods_ready::PodsReadyPolicy>),
    /// The leader saw a workload's pods not all started `timeout` after its admission: it is
    /// evicted and queued again after a backoff; `message` names the pods. Format 5.
    PodsReadyTimeout {
        workload_id: u64,
        attempt: u32,
        message: String,
    },
    /// The leader saw a workload's backoff end: it is queued again. Format 5.
    BackoffFinished {
        workload_id: u64,
    },
    /// An admin sets a cohort (new or replaced): its parent and own quota. Format 7.
    SetCohort(allot_common::CohortSpec),
    /// An admin deletes a cohort no team and no cohort names. Format 7.
    DeleteCohort {
        name: String,
    },
    /// An admin puts a team in a cohort (`None`: the default one). Format 7.
    SetTeamCohort {
        team: String,
        cohort: Option<String>,
    },
    /// An admin sets a cohort's fair-share weight against its siblings, as numerator and
    /// denominator ((1, 1) is the default). Format 8.
    SetCohortWeight {
        cohort: String,
        weight: (u32, u32),
    },
}

impl Command {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::CreateComputeQuota(_) => "create-compute-quota",
            Command::UpdateComputeQuota { .. } => "update-compute-quota",
            Command::DeleteComputeQuota { .. } => "delete-compute-quota",
            Command::CreateSchedulerConfig { .. } => "create-cluster-scheduler-config",
            Command::UpdateSchedulerConfig { .. } => "update-cluster-scheduler-config",
            Command::WithStability { change, .. } => match change {
                SchedulerConfigChange::Create { .. } => "create-cluster-scheduler-config",
                SchedulerConfigChange::Update { .. } => "update-cluster-scheduler-config",
            },
            Command::SetSchedulerConfig(set) => set.kind(),
            Command::CordonNode { cordoned: true, .. } => "cordon-node",
            Command::CordonNode {
                cordoned: false, ..
            } => "uncordon-node",
            Command::DrainNode { .. } => "drain-node",
            Command::SetFormat { .. } => "set-format",
            Command::RemoveNode { .. } => "remove-node",
            Command::SetPodsReady(_) => "set-gang-scheduling",
            Command::SetCohort(_) => "set-cohort",
            Command::DeleteCohort { .. } => "delete-cohort",
            Command::SetTeamCohort { .. } => "set-team-cohort",
            Command::SetCohortWeight { .. } => "set-cohort-weight",
            Command::PodsReadyTimeout { .. } => "pods-ready-timeout",
            Command::BackoffFinished { .. } => "backoff-finished",
            Command::Submit(_) | Command::SubmitPlanned { .. } => "submit",
            Command::SubmitBatch(_) => "submit-batch",
            Command::Cancel { .. } => "cancel",
            Command::RegisterNode { .. } => "register-node",
            Command::SetNodeHealth { .. } => "set-node-health",
            Command::WorkloadStarted { .. } => "workload-started",
            Command::WorkloadExited { .. } => "workload-exited",
            Command::Plan(_) => "plan",
            Command::ReportNode(_) => "report-node",
            Command::NodeLost { .. } => "node-lost",
            Command::PodsStarted { .. } => "pods-started",
            Command::SubmitArray { .. } => "submit-array",
            Command::CancelMatching { .. } => "cancel-matching",
            Command::PodsExited { .. } => "pods-exited",
            Command::PutRegistryCredentials { .. } => "put-registry-credentials",
            Command::DeleteRegistryCredentials { .. } => "delete-registry-credentials",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    pub id: String,
    pub input: ComputeQuotaInput,
    pub version: u64,
    pub created: Time,
    pub updated: Time,
}

impl QuotaRecord {
    pub fn view(&self) -> ComputeQuotaView {
        ComputeQuotaView {
            id: self.id.clone(),
            name: self.input.name.clone(),
            description: self.input.description.clone(),
            team: self.input.team.clone(),
            fair_share_weight: self.input.fair_share_weight,
            config: self.input.config.to_shorthand(),
            activation: self.input.activation,
            version: self.version,
            created_ms: self.created,
            updated_ms: self.updated,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerConfigRecord {
    pub view: SchedulerConfigView,
}

/// Totals since the log began (replicated, so every replica reports the same).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub submitted: u64,
    pub admitted: u64,
    pub preempted: u64,
    pub retried: u64,
    pub finished: u64,
    pub plans: u64,
    /// Run time thrown away by preemptions: each victim's time from its admission to its
    /// preemption, in milliseconds.
    #[serde(default)]
    pub preempted_run_ms: u64,
}

/// What the machine knows about a node beyond its capacity: its agent's last report, and why
/// it is unhealthy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMeta {
    pub report: Option<NodeReport>,
    pub reason: String,
}

/// The pods of a workload's current attempt that agents reported ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRuns {
    pub attempt: u32,
    /// Rank → succeeded.
    pub exited: BTreeMap<u32, bool>,
    /// A pod failed: the workload ends as Failed once every pod is gone.
    pub failed: bool,
}

/// A finished workload is forgotten this long after it finished (by the log's clock).
pub const FINISHED_KEEP_MS: Time = 24 * 60 * 60 * 1000;
/// With more finished workloads than this, the oldest are forgotten sooner, once they have been
/// finished for `FINISHED_MIN_KEEP_MS`.
pub const FINISHED_KEEP_MAX: usize = 10_000;
/// No finished workload is forgotten sooner than this: a client that retries a submit after
/// losing its reply (a leader change) finds it, and does not start it again.
pub const FINISHED_MIN_KEEP_MS: Time = 10 * 60 * 1000;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub state: State,
    pub quotas: BTreeMap<String, QuotaRecord>,
    pub scheduler_config: Option<SchedulerConfigRecord>,
    /// Shared chunk by chunk, not copied, by a copy of the machine (see `State::workloads`):
    /// one entry per workload, and the raft thread copies the machine for every snapshot.
    pub runs: WlMap<Arc<RunSpec>>,
    pub tokens: WlMap<Arc<str>>,
    pub counters: Counters,
    next_quota: u64,
    pub nodes_meta: BTreeMap<String, NodeMeta>,
    pub pods: BTreeMap<WlId, PodRuns>,
    /// Finished workloads with when they finished, oldest first: forgotten from the front.
    pub finished: VecDeque<(Time, WlId)>,
    /// Admission limits in force (defaults until a scheduler config sets them).
    #[serde(default)]
    pub limits: AdmissionLimits,
    /// Instance types the catalog does not list, with one instance's capacity as the first
    /// node of that type reported it; quotas for them use these figures.
    #[serde(default)]
    pub learned_types: BTreeMap<String, Resources>,
    /// Job arrays with elements still to queue or running, by (team, name).
    #[serde(default)]
    pub arrays: BTreeMap<(String, String), crate::job_records::ArrayRecord>,
    /// Pod times of each workload's last attempt, and when it finished; forgotten with it.
    #[serde(default)]
    pub(crate) history: BTreeMap<WlId, crate::job_records::PodHistory>,
    /// Teams' registry credentials: team -> registry host -> user and password.
    #[serde(default)]
    pub registry_credentials: BTreeMap<String, BTreeMap<String, allot_common::image::Credentials>>,
    /// Who used, borrowed and lent what, hour by hour (`usage.rs`). Last: a snapshot written
    /// before it existed is read with an empty ledger appended (the coordinator's reader).
    #[serde(default)]
    pub usage: crate::usage::Ledger,
    /// The format version the cluster writes its log entries and snapshots in
    /// (`Command::SetFormat`). Not in the machine's own encoding: a snapshot carries it as
    /// the version it is written in, and its reader sets it from there.
    #[serde(skip)]
    pub format: u32,
    /// How often each failed workload was queued again by auto-resume (format 2 on:
    /// `FORMAT_AUTO_RESUME`); forgotten with the workload. Last, and empty in the snapshots of
    /// earlier formats, which end before it.
    #[serde(default)]
    pub auto_resumed: BTreeMap<WlId, u32>,
    /// Nodes an admin removed (`Command::RemoveNode`): kept failed and cordoned in the node set
    /// (nodes are never taken out of it), and left out of every view. A report from the node
    /// brings it back, cordoned. Last (format 3), and empty in earlier formats' snapshots.
    #[serde(default)]
    pub removed_nodes: BTreeSet<String>,
    /// Gang readiness: the settings, and the workloads in backoff after a timeout
    /// (`pods_ready.rs`). Last (format 5), and empty in earlier formats' snapshots.
    #[serde(default)]
    pub pods_ready: crate::pods_ready::PodsReady,
    /// The coordinator replicas added by a membership change, by raft id, with the address
    /// their peers and clients reach them at (the replicas a cluster started with are in each
    /// replica's `--peers`). Written by the replica as it applies a configuration change, not
    /// by a command. Last (format 7), and empty in earlier formats' snapshots.
    #[serde(default)]
    pub members: BTreeMap<u64, String>,
    /// The cohort of each team an admin put in one (`Command::SetTeamCohort`); a team not
    /// here shares the default cohort. Last (format 7), and empty in earlier formats'
    /// snapshots.
    #[serde(default)]
    pub team_cohorts: BTreeMap<String, String>,
    /// Each cohort's fair-share weight an admin set (`Command::SetCohortWeight`), where it is
    /// not 1: the cohort specs do not store it, so it is put back into them when a snapshot
    /// is read (`restore_cohort_weights`). Last (format 8), and empty in earlier formats'
    /// snapshots.
    #[serde(default)]
    pub cohort_weights: BTreeMap<String, (u32, u32)>,
}

/// The cluster format from which a failed workload with auto-resume on is queued again: every
/// replica must decide that alike, so the ones of releases before must be gone.
pub const FORMAT_AUTO_RESUME: u32 = 2;

/// The cluster format from which nodes report GPU partitions (MIG profiles) as devices and
/// compute quotas may name them; a replica of a release before refuses both.
pub const FORMAT_PARTITIONS: u32 = 4;

/// The cluster format from which coordinator replicas can be added and removed: a replica of
/// a release before would not apply the configuration changes.
pub const FORMAT_MEMBERS: u32 = 7;

/// The cluster format from which an admin builds a tree of cohorts and puts teams in them.
pub const FORMAT_COHORTS: u32 = 7;

/// The cluster format from which an admin weighs cohorts against each other.
pub const FORMAT_COHORT_WEIGHTS: u32 = 8;

/// Why a GPU in MIG mode is not handed out whole.
pub const PARTITIONED_GPU: &str = "in MIG mode: handed out as its partitions";

impl Default for Machine {
    fn default() -> Self {
        Machine::new()
    }
}

fn invalid(m: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::Invalid, m)
}

fn not_found(m: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::NotFound, m)
}

fn conflict(m: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::Conflict, m)
}

fn forbidden(m: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::Forbidden, m)
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> Self {
        let kind = match &e {
            StateError::Invalid(_) => ErrorKind::Invalid,
            StateError::UnknownTeam { .. }
            | StateError::UnknownWorkload(_)
            | StateError::UnknownNode(_) => ErrorKind::NotFound,
            StateError::DuplicateWorkload { .. } => ErrorKind::Conflict,
            StateError::AmbiguousWorkload { .. } => ErrorKind::Invalid,
        };
        ApiError::new(kind, e.to_string())
    }
}

/// The checks of a compute quota that need no catalog (names, the config's own rules): what a
/// server can refuse before proposing it.
pub fn check_quota_input(input: &ComputeQuotaInput) -> Result<(), ApiError> {
    allot_common::names::check_entity_name("compute quota", &input.name).map_err(invalid)?;
    if let Some(d) = &input.description {
        allot_common::names::check_description("compute quota", d).map_err(invalid)?;
    }
    input
        .config
        .validate()
        .map_err(|e| invalid(format!("compute quota {}: {e}", input.name)))
}

/// Maps a compute quota to the team it configures (HyperPod §2 mapping), with instance types
/// from `catalog`.
pub fn team_spec(input: &ComputeQuotaInput, catalog: &Catalog) -> Result<TeamSpec, ApiError> {
    allot_common::names::check_entity_name("compute quota", &input.name).map_err(invalid)?;
    if let Some(d) = &input.description {
        allot_common::names::check_description("compute quota", d).map_err(invalid)?;
    }
    let cfg: &ComputeQuotaConfig = &input.config;
    cfg.validate()
        .map_err(|e| invalid(format!("compute quota {}: {e}", input.name)))?;
    let quotas = match input.activation {
        ActivationState::Enabled => cfg
            .to_quotas(catalog)
            .map_err(|e| invalid(format!("compute quota {}: {e}", input.name)))?,
        ActivationState::Disabled => Vec::new(),
    };
    let mut spec = TeamSpec::new(&input.team, quotas);
    spec.preemption = cfg.preemption_policy();
    spec.fair_share_weight = input.fair_share_weight;
    Ok(spec)
}

impl Machine {
    pub fn new() -> Self {
        let mut state = State::new(ClusterPolicy::default());
        // A real cluster admits only what it can place: no nodes, no admission.
        state.placement = true;
        Machine {
            state,
            quotas: BTreeMap::new(),
            scheduler_config: None,
            runs: WlMap::default(),
            tokens: WlMap::default(),
            counters: Counters::default(),
            next_quota: 1,
            nodes_meta: BTreeMap::new(),
            pods: BTreeMap::new(),
            finished: VecDeque::new(),
            limits: AdmissionLimits::default(),
            arrays: BTreeMap::new(),
            history: BTreeMap::new(),
            learned_types: BTreeMap::new(),
            registry_credentials: BTreeMap::new(),
            usage: crate::usage::Ledger::default(),
            format: 0,
            auto_resumed: BTreeMap::new(),
            removed_nodes: BTreeSet::new(),
            pods_ready: Default::default(),
            members: BTreeMap::new(),
            team_cohorts: BTreeMap::new(),
            cohort_weights: BTreeMap::new(),
        }
    }

    /// Applies one log entry. Errors are the command's rejection (nothing changed); the events
    /// say what happened to workloads.
    pub fn apply(&mut self, entry: &Entry) -> (Result<Reply, ApiError>, Vec<Event>) {
        let now = entry.now;
        let mut events = Vec::new();
        let r = self.apply_cmd(&entry.cmd, now, &mut events);
        self.count(&events, now);
        // Array elements that ended make room for the next ones, queued now and counted like
        // any others.
        let before = events.len();
        self.after_events(now, &mut events);
        self.count(&events[before..], now);
        self.park_backed_off(&events, now);
        self.forget_finished(now);
        let config = r.is_ok()
            && matches!(
                entry.cmd,
                Command::CreateComputeQuota(_)
                    | Command::UpdateComputeQuota { .. }
                    | Command::DeleteComputeQuota { .. }
                    | Command::SetSchedulerConfig(_)
                    | Command::SetCohort(_)
                    | Command::DeleteCohort { .. }
                    | Command::SetTeamCohort { .. }
                    | Command::SetCohortWeight { .. }
            );
        self.usage.observe(&self.state, now, &events, config);
        (r, events)
    }

    /// Counts what `events` did, and keeps when each ended workload finished.
    fn count(&mut self, events: &[Event], now: Time) {
        for e in events {
            match e {
                Event::Submitted { .. } => self.counters.submitted += 1,
                Event::Admitted { .. } => self.counters.admitted += 1,
                Event::Preempted { wl, .. } => {
                    self.counters.preempted += 1;
                    let ran = (self.state.workloads.get(wl)).map_or(0, |w| w.ran_for(now));
                    self.counters.preempted_run_ms += ran as u64;
                }
                Event::AdmissionRetried { .. } => self.counters.retried += 1,
                Event::Finished { wl, .. } | Event::Cancelled { wl } => {
                    self.counters.finished += 1;
                    self.finished.push_back((now, *wl));
                    self.history.entry(*wl).or_default().finished = Some(now);
                }
                _ => {}
            }
        }
    }

    /// Forgets the finished workloads that are past their retention at `now`, oldest first.
    fn forget_finished(&mut self, now: Time) {
        while let Some(&(at, id)) = self.finished.front() {
            let age = now.saturating_sub(at);
            let expired = age > FINISHED_KEEP_MS
                || (self.finished.len() > FINISHED_KEEP_MAX && age > FINISHED_MIN_KEEP_MS);
            if !expired {
                break;
            }
            self.finished.pop_front();
            self.state.forget_finished(id);
            self.runs.remove(&id);
            self.tokens.remove(&id);
            self.pods.remove(&id);
            self.history.remove(&id);
            self.auto_resumed.remove(&id);
        }
    }

    /// Creates or updates the scheduler config (`set.target_version`), the stability rules
    /// changed by `set.stability`.
    fn scheduler_config(&mut self, set: &SchedulerConfigSet, now: Time) -> Result<Reply, ApiError> {
        let name = &set.name;
        if let Some(d) = &set.description {
            allot_common::names::check_description("scheduler config", d).map_err(invalid)?;
        }
        let (base_limits, base_stability) = match (&self.scheduler_config, set.target_version) {
            (Some(r), None) => {
                return Err(conflict(format!(
                    "the cluster already has scheduler config {:?}; use update-cluster-scheduler-config",
                    r.view.name
                )))
            }
            (None, None) => {
                allot_common::names::check_entity_name("scheduler config", name)
                    .map_err(invalid)?;
                (AdmissionLimits::default(), allot_common::Stability::default())
            }
            (None, Some(_)) => {
                return Err(not_found(
                    "the cluster has no scheduler config yet; create one with create-cluster-scheduler-config",
                ))
            }
            (Some(r), Some(target)) => {
                if &r.view.name != name {
                    return Err(not_found(format!(
                        "unknown scheduler config {name:?}; the cluster's is {:?}",
                        r.view.name
                    )));
                }
                if r.view.version != target {
                    return Err(conflict(format!(
                        "scheduler config {name:?} is at version {}, the update targets version {target}",
                        r.view.version
                    )));
                }
                (self.limits, self.state.policy.stability)
            }
        };
        let limits = base_limits.with(&set.limits).map_err(invalid)?;
        let mut policy = set.policy.clone();
        policy.stability = set.stability.apply(base_stability).map_err(invalid)?;
        policy
            .validate()
            .map_err(|e| invalid(format!("scheduler config {name:?}: {e}")))?;
        let stability = policy.stability;
        self.state.set_policy(policy)?;
        self.limits = limits;
        let rec = self
            .scheduler_config
            .get_or_insert_with(|| SchedulerConfigRecord {
                view: SchedulerConfigView {
                    name: name.clone(),
                    config: String::new(),
                    description: None,
                    version: 0,
                    created_ms: now,
                    updated_ms: now,
                    limits,
                    stability,
                },
            });
        rec.view.limits = limits;
        rec.view.stability = stability;
        if set.description.is_some() {
            rec.view.description = set.description.clone();
        }
        // The text is the reader's to render from the policy (the core writes no AWS syntax).
        rec.view.config = String::new();
        rec.view.version += 1;
        rec.view.updated_ms = now;
        Ok(Reply::SchedulerConfig(rec.view.clone()))
    }

    /// `create-compute-quota`: a team and its quota, once per team.
    fn create_quota(&mut self, input: &ComputeQuotaInput, now: Time) -> Result<Reply, ApiError> {
        if self.quotas.contains_key(&input.name) {
            return Err(conflict(format!(
                "compute quota {:?} already exists; use update-compute-quota to change it",
                input.name
            )));
        }
        if let Some(q) = self.quotas.values().find(|q| q.input.team == input.team) {
            return Err(conflict(format!(
                "team {:?} already has compute quota {:?}; a team has one compute quota",
                input.team, q.input.name
            )));
        }
        let mut spec = team_spec(input, &self.catalog())?;
        spec.cohort = Some(self.cohort_of_team(&input.team));
        self.state.set_team(spec)?;
        let rec = QuotaRecord {
            // 12 of [a-z0-9], the API's ComputeQuotaId pattern.
            id: format!("cq{:010}", self.next_quota),
            input: input.clone(),
            version: 1,
            created: now,
            updated: now,
        };
        self.next_quota += 1;
        let view = rec.view();
        self.quotas.insert(input.name.clone(), rec);
        Ok(Reply::Quota(view))
    }

    /// `update-compute-quota`, at the version the caller read.
    fn update_quota(
        &mut self,
        input: &ComputeQuotaInput,
        target_version: u64,
        now: Time,
    ) -> Result<Reply, ApiError> {
        let rec = self
            .quotas
            .get(&input.name)
            .ok_or_else(|| self.unknown_quota(&input.name))?;
        if rec.version != target_version {
            return Err(conflict(format!(
                "compute quota {:?} is at version {}, the update targets version {target_version}; describe it and retry with --target-version {}",
                input.name, rec.version, rec.version
            )));
        }
        if rec.input.team != input.team {
            return Err(invalid(format!(
                "compute quota {:?} belongs to team {:?}; its team cannot change to {:?}",
                input.name, rec.input.team, input.team
            )));
        }
        let mut spec = team_spec(input, &self.catalog())?;
        spec.cohort = Some(self.cohort_of_team(&input.team));
        self.state.set_team(spec)?;
        let rec = self.quotas.get_mut(&input.name).expect("checked above");
        rec.input = input.clone();
        rec.version += 1;
        rec.updated = now;
        Ok(Reply::Quota(rec.view()))
    }

    /// `delete-compute-quota`: the team goes with it.
    fn delete_quota(&mut self, name: &str) -> Result<Reply, ApiError> {
        let team = (self.quotas.get(name))
            .ok_or_else(|| self.unknown_quota(name))?
            .input
            .team
            .clone();
        self.state.remove_team(&team)?;
        self.quotas.remove(name);
        // A team created again starts in the default cohort.
        self.team_cohorts.remove(&team);
        Ok(Reply::Done)
    }

    /// A team's credentials for one registry, checked, within the number allowed.
    fn put_credentials(
        &mut self,
        team: &String,
        registry: &String,
        credentials: &allot_common::image::Credentials,
    ) -> Result<Reply, ApiError> {
        allot_common::image::check_registry_credentials(registry, credentials).map_err(invalid)?;
        self.state.team_id(team)?;
        let mine = self.registry_credentials.entry(team.clone()).or_default();
        if !mine.contains_key(registry)
            && mine.len() >= allot_common::image::MAX_REGISTRIES_PER_TEAM
        {
            return Err(invalid(format!(
                "team {team:?} has credentials for {} registries, the most allowed; \
                 delete one first",
                mine.len()
            )));
        }
        mine.insert(registry.clone(), credentials.clone());
        Ok(Reply::Done)
    }

    /// Removes a team's credentials for one registry.
    fn delete_credentials(&mut self, team: &String, registry: &String) -> Result<Reply, ApiError> {
        let gone = self
            .registry_credentials
            .get_mut(team)
            .and_then(|m| m.remove(registry));
        if self
            .registry_credentials
            .get(team)
            .is_some_and(|m| m.is_empty())
        {
            self.registry_credentials.remove(team);
        }
        match gone {
            Some(_) => Ok(Reply::Done),
            None => Err(not_found(format!(
                "team {team:?} has no credentials for registry {registry:?}"
            ))),
        }
    }

    /// A node's agent registers it: a known node comes back healthy (keeping its instance
    /// type); a new one is added with its capacity checked against its type.
    fn register_node(
        &mut self,
        name: &str,
        instance_type: &String,
        capacity: &Resources,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        if let Some(n) = self.state.acct.nodes.find(name) {
            let node = self.state.acct.nodes.node(n);
            let flavor = self.state.names.flavor_name(node.flavor).to_string();
            if &flavor != instance_type {
                return Err(conflict(format!(
                    "node {name:?} is registered as {flavor}, not {instance_type}; a node keeps its instance type"
                )));
            }
            if !node.healthy {
                events.extend(self.state.set_node_health(name, true, now)?);
            }
            return Ok(Reply::Done);
        }
        if instance_type.is_empty() {
            return Err(invalid(format!(
                "node {name:?}: an instance type is required"
            )));
        }
        let learned = self.check_type(name, instance_type, capacity)?;
        self.state.add_node(name, instance_type, capacity)?;
        self.learn(instance_type, learned);
        Ok(Reply::Done)
    }

    fn apply_cmd(
        &mut self,
        cmd: &Command,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        match cmd {
            Command::CreateComputeQuota(input) => self.create_quota(input, now),
            Command::UpdateComputeQuota {
                input,
                target_version,
            } => self.update_quota(input, *target_version, now),
            Command::PutRegistryCredentials {
                team,
                registry,
                credentials,
            } => self.put_credentials(team, registry, credentials),
            Command::DeleteRegistryCredentials { team, registry } => {
                self.delete_credentials(team, registry)
            }
            Command::DeleteComputeQuota { name } => self.delete_quota(name),
            Command::CreateSchedulerConfig { .. }
            | Command::UpdateSchedulerConfig { .. }
            | Command::WithStability { .. } => Err(invalid(
                "a scheduler config command with the config's text, as releases before the typed \
                 form wrote it: the log reader turns it into the typed form before it is applied \
                 (allot_coordinator::config_text)",
            )),
            Command::SetSchedulerConfig(set) => self.scheduler_config(set, now),
            Command::Submit(input) => {
                let (id, existing) = self.submit(input, now, events)?;
                Ok(self.submitted(input, id, existing))
            }
            Command::SubmitPlanned { input, id, plan } => {
                let (got, existing) = self.submit(input, now, events)?;
                if !existing && got.0 == *id {
                    self.apply_plan(plan, now, events);
                }
                Ok(self.submitted(input, got, existing))
            }
            Command::SubmitBatch(inputs) => Ok(Reply::SubmittedBatch(
                inputs
                    .iter()
                    .map(|i| self.submit(i, now, events).map(|(id, _)| id.0))
                    .collect(),
            )),
            Command::Cancel { name, team } => {
                let found = self.state.find_scoped(name, team.as_deref());
                let active = found
                    .as_ref()
                    .is_ok_and(|id| !self.state.workload(*id).state.is_finished());
                if !active && self.cancel_array_part(name, team.as_deref(), now, events)? {
                    return Ok(Reply::Done);
                }
                events.extend(self.state.cancel(found?, now)?);
                Ok(Reply::Done)
            }
            Command::SubmitArray { input, array } => self.submit_array(input, array, now, events),
            Command::CancelMatching { selector } => self.cancel_matching(selector, now, events),
            Command::RegisterNode {
                name,
                instance_type,
                capacity,
            } => self.register_node(name, instance_type, capacity, now, events),
            Command::SetNodeHealth {
                name,
                healthy,
                reason,
            } => self.set_node_health(name, *healthy, reason, now, events),
            Command::ReportNode(report) => self.report_node(report, now, events),
            Command::CordonNode { name, cordoned } => {
                self.state.set_cordoned(name, *cordoned)?;
                Ok(Reply::Done)
            }
            Command::DrainNode { name } => self.drain_node(name, now, events),
            Command::SetFormat { version } => Ok(self.raise_format(*version)),
            Command::RemoveNode { name } => self.remove_node(name, now, events),
            Command::SetCohort(_)
            | Command::DeleteCohort { .. }
            | Command::SetTeamCohort { .. }
            | Command::SetCohortWeight { .. } => self.apply_cohorts(cmd),
            Command::SetPodsReady(_)
            | Command::PodsReadyTimeout { .. }
            | Command::BackoffFinished { .. } => self.apply_pods_ready(cmd, now, events),
            Command::NodeLost { name, reason } => self.node_lost(name, reason, now, events),
            Command::PodsStarted {
                node,
                workload,
                workload_id,
                attempt,
                ranks,
            } => self.pods_started(
                node.as_deref(),
                workload,
                *workload_id,
                *attempt,
                ranks,
                now,
            ),
            Command::PodsExited {
                node,
                workload,
                workload_id,
                attempt,
                exits,
            } => {
                let id = self.find_reported(workload, *workload_id, node.as_deref())?;
                self.pods_exited(id, node.as_deref(), *attempt, exits, now, events)
            }
            Command::WorkloadStarted { name, node } => {
                let id = self.find_reported(name, None, node.as_deref())?;
                self.check_node(id, node.as_deref())?;
                self.state.mark_running(id);
                self.record_all_started(id, now);
                Ok(Reply::Done)
            }
            Command::WorkloadExited {
                name,
                succeeded,
                node,
            } => {
                let id = self.find_reported(name, None, node.as_deref())?;
                self.check_node(id, node.as_deref())?;
                match self.state.workload(id).state {
                    WlState::Evicting => events.extend(self.state.complete_eviction(id, now)),
                    WlState::Admitted | WlState::Running => {
                        self.ended(id, *succeeded, None, now, events)?
                    }
                    // Stale report: the workload already moved on.
                    _ => {}
                }
                Ok(Reply::Done)
            }
            Command::Plan(plan) => {
                self.apply_plan(plan, now, events);
                Ok(Reply::Done)
            }
        }
    }

    fn runs_of(&mut self, id: WlId, attempt: u32) -> &mut PodRuns {
        let runs = self.pods.entry(id).or_default();
        if runs.attempt != attempt {
            *runs = PodRuns {
                attempt,
                ..PodRuns::default()
            };
        }
        runs
    }

    fn report_node(
        &mut self,
        r: &NodeReport,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        if r.name.is_empty() {
            return Err(invalid("a node report needs the node's name"));
        }
        let learned = self.check_type(&r.name, &r.instance_type, &r.capacity)?;
        allot_common::topology::check_node(&r.topology)
            .map_err(|e| invalid(format!("node {:?}: {e}", r.name)))?;
        let mut devices: Vec<(ResourceName, u8, bool, String)> = Vec::new();
        for d in &r.devices {
            let res = ResourceName::parse(&d.resource)
                .ok()
                .filter(|n| n.is_device())
                // Before the format of partitions, refused as a release before refuses them.
                .filter(|n| self.format >= FORMAT_PARTITIONS || !n.is_partition())
                .ok_or_else(|| {
                    invalid(format!(
                        "node {:?}: device resource {:?} is not one of gpu, neuron, efa",
                        r.name, d.resource
                    ))
                })?;
            let index = u8::try_from(d.index)
                .ok()
                .filter(|i| i64::from(*i) < r.capacity.get(&res))
                .ok_or_else(|| {
                    invalid(format!(
                        "node {:?}: {} index {} is outside its capacity of {}",
                        r.name,
                        d.resource,
                        d.index,
                        r.capacity.get(&res)
                    ))
                })?;
            // From the format of partitions on, a GPU in MIG mode is handed out as its
            // partitions only, never whole (a release before handed it out whole).
            let partitioned = d.mig
                && res.as_str() == allot_common::resource::GPU
                && self.format >= FORMAT_PARTITIONS;
            let reason = if partitioned {
                PARTITIONED_GPU.to_string()
            } else {
                d.reason.clone()
            };
            devices.push((res, index, d.healthy && !partitioned, reason));
        }
        match self.state.acct.nodes.find(&r.name) {
            Some(n) => {
                let node = self.state.acct.nodes.node(n);
                let flavor = self.state.names.flavor_name(node.flavor).to_string();
                if flavor != r.instance_type {
                    return Err(conflict(format!(
                        "node {:?} is registered as {flavor}, not {}; a node keeps its instance type",
                        r.name, r.instance_type
                    )));
                }
                if self.format >= FORMAT_PARTITIONS {
                    // Checked before anything changes: a refused report changes nothing.
                    self.state.check_partitions(&r.name, &r.capacity)?;
                }
                if !node.healthy {
                    events.extend(self.state.set_node_health(&r.name, true, now)?);
                }
                if self.format >= FORMAT_PARTITIONS {
                    self.state.grow_partitions(&r.name, &r.capacity)?;
                }
            }
            None => {
                self.state
                    .add_node(&r.name, &r.instance_type, &r.capacity)?;
            }
        }
        self.state.set_node_topology(&r.name, &r.topology)?;
        for (res, index, healthy, reason) in &devices {
            events.extend(
                self.state
                    .set_device_health(&r.name, res, *index, *healthy, reason, now)?,
            );
        }
        if self.format >= FORMAT_PARTITIONS {
            self.missing_partitions(r, &devices, now, events)?;
        }
        self.learn(&r.instance_type, learned);
        let meta = self.nodes_meta.entry(r.name.clone()).or_default();
        meta.report = Some(r.clone());
        meta.reason.clear();
        // A removed node whose agent reports again is back (cordoned, as it was removed).
        self.removed_nodes.remove(&r.name);
        Ok(Reply::Done)
    }

    /// A node's GPU partitions that its report leaves out (destroyed while its agent was down,
    /// so the agent never saw them go) are held out of use, as a device no longer discovered.
    fn missing_partitions(
        &mut self,
        r: &NodeReport,
        reported: &[(ResourceName, u8, bool, String)],
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<(), ApiError> {
        let Some(n) = self.state.acct.nodes.find(&r.name) else {
            return Ok(());
        };
        // Only where the report shows NVML was read (a GPU is listed): an agent restarted
        // without NVML reports no devices at all, which says nothing of its partitions.
        if !r
            .devices
            .iter()
            .any(|d| d.resource == allot_common::resource::GPU)
        {
            return Ok(());
        }
        let mut missing: Vec<(ResourceName, u8)> = Vec::new();
        for nr in &self.state.acct.nodes.node(n).res {
            let name = self.state.names.resource_name(nr.res);
            if !name.is_partition() || nr.free_mask.is_none() {
                continue;
            }
            for i in 0..u8::try_from(nr.cap).unwrap_or(u8::MAX) {
                if !reported
                    .iter()
                    .any(|(res, idx, _, _)| res == name && *idx == i)
                {
                    missing.push((name.clone(), i));
                }
            }
        }
        for (res, i) in missing {
            events.extend(self.state.set_device_health(
                &r.name,
                &res,
                i,
                false,
                "no longer discovered",
                now,
            )?);
        }
        Ok(())
    }

    /// Pods of one attempt started on `node`. The ranks are checked against the placement; one
    /// started pod makes the workload Running, and each rank's start is recorded (gang
    /// readiness waits for all of them).
    fn pods_started(
        &mut self,
        node: Option<&str>,
        workload: &str,
        workload_id: Option<u64>,
        attempt: u32,
        ranks: &[u32],
        now: Time,
    ) -> Result<Reply, ApiError> {
        let id = self.find_reported(workload, workload_id, node)?;
        self.check_node(id, node)?;
        if self.state.workload(id).attempt != attempt {
            return Ok(Reply::Done);
        }
        self.check_ranks(id, node, ranks.iter().copied())?;
        self.state.mark_running(id);
        self.record_started(id, attempt, ranks, now);
        Ok(Reply::Done)
    }

    fn pods_exited(
        &mut self,
        id: WlId,
        node: Option<&str>,
        attempt: u32,
        exits: &[PodExit],
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        let wl = self.state.workload(id);
        if wl.attempt != attempt || !wl.state.holds_quota() {
            // A report about an earlier run, or a workload that already moved on.
            return Ok(Reply::Done);
        }
        self.check_node(id, node)?;
        self.check_ranks(id, node, exits.iter().map(|e| e.rank))?;
        let world = wl.admission.as_ref().map_or(0, |a| a.placement.len()) as u32;
        if let Some(e) = exits.iter().find(|e| e.lost) {
            let msg = format!("pod {} was lost on its node: {}", e.rank, e.detail);
            events.extend(self.state.start_eviction(id, "PodLost", &msg, now));
        }
        let wl = self.state.workload(id);
        let state = wl.state;
        // Pods stopped for a preemption, a failed device or a lost node end however they end;
        // the workload is requeued, not failed.
        let evicted_for_other = state == WlState::Evicting
            && wl.eviction.as_ref().is_some_and(|(r, _)| r != "PodFailed");
        self.record_exits(id, attempt, exits, now);
        let runs = self.runs_of(id, attempt);
        for e in exits {
            runs.exited.insert(e.rank, e.succeeded);
        }
        let first_failure = exits
            .iter()
            .find(|e| !e.succeeded)
            .filter(|_| !runs.failed && !evicted_for_other);
        if first_failure.is_some() {
            runs.failed = true;
        }
        let all_gone = runs.exited.len() as u32 >= world;
        let failed = runs.failed;
        let all_ok = runs.exited.values().all(|ok| *ok);
        if let (Some(e), false) = (first_failure, all_gone) {
            // The gang cannot go on without this pod: stop the others, then end as Failed.
            let msg = format!("pod {} failed ({}); stopping the others", e.rank, e.detail);
            events.extend(self.state.start_eviction(id, "PodFailed", &msg, now));
        }
        if all_gone {
            if evicted_for_other {
                events.extend(self.state.complete_eviction(id, now));
            } else {
                // What failed it, for the Finished condition: the pod that stopped the gang,
                // or the one that failed last.
                let why = match &self.state.workload(id).eviction {
                    Some((r, msg)) if r == "PodFailed" => Some(msg.clone()),
                    _ => exits
                        .iter()
                        .find(|e| !e.succeeded)
                        .map(|e| format!("pod {} failed ({})", e.rank, e.detail)),
                };
                let ok = all_ok && !failed;
                let why = why.filter(|_| !ok);
                self.ended(id, ok, why, now, events)?;
            }
            self.pods.remove(&id);
        }
        Ok(Reply::Done)
    }

    /// A workload whose pods are all gone ended, `ok` or not (`why`): finished, or, when it
    /// failed with auto-resume on and retries left, queued again for its next attempt.
    fn ended(
        &mut self,
        id: WlId,
        ok: bool,
        why: Option<String>,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<(), ApiError> {
        let retries = (!ok && self.format >= FORMAT_AUTO_RESUME)
            .then(|| {
                allot_common::auto_resume::retries_or_off(&self.state.workload(id).spec.labels)
            })
            .flatten();
        let used = self.auto_resumed.get(&id).copied().unwrap_or(0);
        match retries {
            Some(max) if used < max => {
                self.auto_resumed.insert(id, used + 1);
                let msg = format!(
                    "{}; auto-resume: queued again, retry {} of {max}",
                    why.as_deref().unwrap_or("the workload failed"),
                    used + 1
                );
                events.extend(self.state.requeue_after_failure(id, msg, now));
            }
            // Spent: the end says so, for `describe` and `history`.
            Some(max) => {
                let why = format!(
                    "{}; auto-resume: all {max} retries spent",
                    why.as_deref().unwrap_or("the workload failed")
                );
                events.extend(self.state.finish_with(id, ok, Some(&why), now)?)
            }
            None => events.extend(self.state.finish_with(id, ok, why.as_deref(), now)?),
        }
        Ok(())
    }

    /// The catalog with the types learned from nodes.
    pub fn catalog(&self) -> Catalog {
        Catalog::builtin().with_learned(
            self.learned_types
                .iter()
                .map(|(n, r)| allot_common::catalog::InstanceType::learned(n, r))
                .collect::<Vec<_>>()
                .iter(),
        )
    }

    /// A node of a type the catalog does not list is accepted when it says what it has (cpu
    /// and memory); `Some(figures)` when it is the first of its type, or the first of a listed
    /// type with a figure no source gives (its GPUs or EFA interfaces): call [`Self::learn`]
    /// with them once the node is in (a refused command changes nothing).
    fn check_type(
        &self,
        node: &str,
        ty: &str,
        capacity: &Resources,
    ) -> Result<Option<Resources>, ApiError> {
        if self.learned_types.contains_key(ty) {
            return Ok(None);
        }
        if let Ok(listed) = Catalog::builtin().get(ty) {
            return Ok((!listed.unsourced.is_empty()).then(|| capacity.clone()));
        }
        if capacity.get(&ResourceName::cpu()) <= 0 || capacity.get(&ResourceName::memory()) <= 0 {
            return Err(invalid(format!(
                "node {node:?}: instance type {ty:?} is not in the catalog, and the node reports no cpu or memory to learn it from"
            )));
        }
        Ok(Some(capacity.clone()))
    }

    fn learn(&mut self, ty: &str, figures: Option<Resources>) {
        if let Some(f) = figures {
            self.learned_types.insert(ty.to_string(), f);
        }
    }

    fn unknown_quota(&self, name: &str) -> ApiError {
        not_found(format!(
            "unknown compute quota {name:?}; compute quotas: {}",
            if self.quotas.is_empty() {
                "(none)".to_string()
            } else {
                self.quotas.keys().cloned().collect::<Vec<_>>().join(", ")
            }
        ))
    }

    fn submit(
        &mut self,
        input: &SubmitInput,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<(WlId, bool), ApiError> {
        if let Ok(id) = self
            .state
            .find_scoped(&input.spec.name, Some(&input.spec.team))
        {
            if input.client_token.is_some()
                && self.tokens.get(&id).map(|t| &**t) == input.client_token.as_deref()
            {
                return Ok((id, true));
            }
            // A finished workload's name is free again (`State::check_submit` says so).
        }
        if let Ok(team) = self.state.team_id(&input.spec.team) {
            let pending = self.state.teams[team.idx()].pending.len();
            let max = self.limits.max_pending_per_team as usize;
            if pending >= max {
                return Err(ApiError::new(
                    ErrorKind::LimitExceeded,
                    format!(
                        "team {:?} has {pending} pending workloads, its limit \
                         (max_pending_per_team {max}); submit {:?} once some are admitted, \
                         or ask an admin to raise it with update-cluster-scheduler-config \
                         --max-pending-per-team",
                        input.spec.team, input.spec.name
                    ),
                ));
            }
        }
        if let Some(run) = &input.run {
            run.check().map_err(|e| {
                ApiError::new(
                    ErrorKind::Invalid,
                    format!("workload {:?}: {e}", input.spec.name),
                )
            })?;
        }
        let (id, ev) = self.state.submit(input.spec.clone(), now)?;
        events.extend(ev);
        if let Some(run) = &input.run {
            self.runs.insert(id, Arc::new(run.clone()));
        }
        if let Some(t) = &input.client_token {
            self.tokens.insert(id, t.as_str().into());
        }
        Ok((id, false))
    }

    fn apply_plan(&mut self, plan: &Plan, now: Time, events: &mut Vec<Event>) {
        self.counters.plans += 1;
        events.extend(self.state.apply_plan(plan, now));
    }

    fn submitted(&self, input: &SubmitInput, id: WlId, existing: bool) -> Reply {
        Reply::Submitted {
            name: input.spec.name.clone(),
            id: id.0,
            existing,
            state: self.state.workload(id).state.as_str().to_string(),
        }
    }

    /// The leader's fast path for a submit on an idle cluster: the id the workload will get and
    /// the plan that admits it, as the next cycle would (`scheduler::schedule_alone`). `None`
    /// when other workloads are pending, the workload would wait, the submit would be refused,
    /// or it retries an existing workload: the plain `Submit` and the next cycle handle those.
    pub fn plan_submit(&self, input: &SubmitInput, now: Time) -> Option<(WlId, Plan)> {
        self.plan_submit_with(input, now, None)
    }

    /// `plan_submit` on `acct`, a copy of the accounting made while the state was the same
    /// (the leader makes it while idle, off the submit's path).
    pub fn plan_submit_with(
        &self,
        input: &SubmitInput,
        now: Time,
        acct: Option<crate::quota::Acct>,
    ) -> Option<(WlId, Plan)> {
        self.plan_submit_settled(input, now, acct, None)
    }

    /// `plan_submit_with`, and behind a backlog too when `settled` (from the last cycle's
    /// cache) still holds: the plan that admits the workload, as the next cycle would decide it
    /// first (`scheduler::schedule_settled`).
    pub fn plan_submit_settled(
        &self,
        input: &SubmitInput,
        now: Time,
        acct: Option<crate::quota::Acct>,
        settled: Option<&crate::cycle_cache::Settled>,
    ) -> Option<(WlId, Plan)> {
        // An existing name (a retry) is refused by `prepare` like any duplicate.
        let wl = self.state.prepare(&input.spec, now).ok()??;
        let plan = match settled {
            Some(s) if self.state.has_pending() => {
                crate::scheduler::schedule_settled(&self.state, &wl, now, acct, s)?
            }
            _ => crate::scheduler::schedule_alone_with(&self.state, &wl, now, acct)?,
        };
        Some((wl.id, plan))
    }

    /// A node failed. Its workloads are evicted and keep their room until every one of their
    /// pods is gone: reported stopped by its agent, or on a node whose agent's lease has
    /// provably run out (`node_pods_gone`, at the next `NodeLost`). Pods on a node without an
    /// agent's lease are gone at once. So no replacement starts while a pod of the last attempt
    /// may still run anywhere, a gang's other nodes included.
    /// An admin or an agent says a node is healthy again, or failed (`reason`).
    fn set_node_health(
        &mut self,
        name: &str,
        healthy: bool,
        reason: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        if healthy {
            events.extend(self.state.set_node_health(name, true, now)?);
        } else {
            self.node_failed(name, reason, now, events)?;
        }
        let why = if healthy { "" } else { reason };
        self.nodes_meta.entry(name.to_string()).or_default().reason = why.to_string();
        Ok(Reply::Done)
    }

    /// Cordons `name` and evicts its work (`State::drain_node`).
    fn drain_node(
        &mut self,
        name: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        events.extend(self.state.drain_node(name, now)?);
        if !self.has_lease(name) {
            // No agent to stop them: the pods are gone already.
            self.node_pods_gone(name, &format!("node {name} drained"), now, events);
        }
        Ok(Reply::Done)
    }

    /// `Command::SetFormat`: the cluster's format, raised (never lowered).
    fn raise_format(&mut self, version: u32) -> Reply {
        self.format = self.format.max(version);
        Reply::Done
    }

    /// Removes a node that will not come back (`Command::RemoveNode`).
    fn remove_node(
        &mut self,
        name: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        let id = self
            .state
            .acct
            .nodes
            .find(name)
            .filter(|_| !self.removed_nodes.contains(name))
            .ok_or_else(|| not_found(format!("unknown node {name:?}")))?;
        let node = self.state.acct.nodes.node(id);
        if node.healthy && !node.cordoned {
            return Err(conflict(format!(
                "node {name} is in service: cordon or drain it first (allot drain {name}), then remove it"
            )));
        }
        let holding = self.state.workloads_on(id);
        if !holding.is_empty() {
            let names: Vec<&str> = (holding.iter().take(5))
                .map(|w| self.state.workload(*w).spec.name.as_str())
                .collect();
            return Err(conflict(format!(
                "{} workload(s) still hold room on node {name} ({}): wait for them to leave (allot drain {name} --wait)",
                holding.len(),
                names.join(", ")
            )));
        }
        if node.healthy {
            events.extend(self.state.set_node_health_because(
                name,
                false,
                "removed by an admin",
                now,
            )?);
        }
        self.state.set_cordoned(name, true)?;
        self.nodes_meta.remove(name);
        self.removed_nodes.insert(name.to_string());
        Ok(Reply::Done)
    }

    /// The cluster lost a node's agent (its lease ran out).
    fn node_lost(
        &mut self,
        name: &str,
        reason: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        let Some(n) = self.state.acct.nodes.find(name) else {
            return Err(not_found(format!("unknown node {name:?}")));
        };
        if self.state.acct.nodes.node(n).healthy {
            // A sync the agent made just before this entry may have started a pod: its
            // workloads keep their room until the node is declared lost again, once the
            // agent's lease has run out for certain.
            self.node_failed(name, reason, now, events)?;
            self.nodes_meta.entry(name.to_string()).or_default().reason = reason.to_string();
        } else {
            // Failed earlier: the lease that ran out now guarantees its pods stopped.
            let detail = format!("node {name} was lost ({reason})");
            self.node_pods_gone(name, &detail, now, events);
        }
        Ok(Reply::Done)
    }

    fn node_failed(
        &mut self,
        name: &str,
        reason: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<(), ApiError> {
        events.extend(self.state.fail_node_fenced(name, reason, now)?);
        if !self.has_lease(name) {
            self.node_pods_gone(name, &format!("node {name} failed ({reason})"), now, events);
        }
        Ok(())
    }

    /// Every pod of the current attempts placed on `name` is gone (its node has no agent, or
    /// the agent's lease has run out): recorded as lost exits, so a workload is requeued once
    /// its pods on other nodes are gone too.
    fn node_pods_gone(&mut self, name: &str, detail: &str, now: Time, events: &mut Vec<Event>) {
        let Some(node) = self.state.acct.nodes.find(name) else {
            return;
        };
        for id in self.state.workloads_on(node) {
            let wl = self.state.workload(id);
            let attempt = wl.attempt;
            let exits: Vec<PodExit> = wl
                .admission
                .iter()
                .flat_map(|a| a.placement.iter().enumerate())
                .filter(|(_, (_, p))| p.node == node)
                .map(|(rank, _)| PodExit {
                    rank: rank as u32,
                    succeeded: false,
                    lost: true,
                    detail: detail.to_string(),
                    exit_code: None,
                })
                .collect();
            // Cannot fail: the workload, its attempt and its ranks come from the state.
            let _ = self.pods_exited(id, None, attempt, &exits, now, events);
        }
    }

    /// Whether `node`'s agent holds a lease: its pods are stopped by the agent, and run until
    /// it says so or the lease runs out.
    pub fn has_lease(&self, node: &str) -> bool {
        self.nodes_meta
            .get(node)
            .and_then(|m| m.report.as_ref())
            .is_some_and(|r| r.lease_ms > 0)
    }

    /// A node reports only on workloads that have pods on it.
    fn check_node(&self, id: WlId, node: Option<&str>) -> Result<(), ApiError> {
        let Some(node) = node else { return Ok(()) };
        let wl = self.state.workload(id);
        let on_node = wl.admission.as_ref().is_some_and(|a| {
            a.placement
                .iter()
                .any(|(_, p)| self.state.acct.nodes.node(p.node).name.as_ref() == node)
        });
        if !on_node {
            return Err(forbidden(format!(
                "workload {:?} has no pod on node {node:?}; a node reports only its own workloads",
                wl.spec.name
            )));
        }
        Ok(())
    }

    /// The workload an agent's report is about: by id when the agent sent it (it must still
    /// carry that name), else by name among the workloads with a pod on `node` (names are
    /// unique within a team only).
    fn find_reported(
        &self,
        name: &str,
        id: Option<u64>,
        node: Option<&str>,
    ) -> Result<WlId, ApiError> {
        if let Some(raw) = id {
            let id = WlId(raw);
            return match self.state.workloads.get(&id) {
                Some(w) if w.spec.name == name => Ok(id),
                _ => Err(StateError::UnknownWorkload(name.to_string()).into()),
            };
        }
        let Some(node) = node else {
            return Ok(self.state.find_workload(name)?);
        };
        let mut here = self
            .state
            .named(name)
            .filter(|id| self.check_node(*id, Some(node)).is_ok());
        match (here.next(), here.next()) {
            (Some(id), None) => Ok(id),
            (Some(_), Some(_)) => Ok(self.state.find_workload(name)?),
            (None, _) => {
                // None is on this node: refused as check_node refuses another node's workload.
                let id = self
                    .state
                    .named(name)
                    .next()
                    .ok_or_else(|| StateError::UnknownWorkload(name.to_string()))?;
                self.check_node(id, Some(node))?;
                Ok(id)
            }
        }
    }

    /// A node may report only ranks placed on it: `ranks` of `id`'s current attempt must all
    /// run on `node` (admins, `None`, may report any). Ranks past the gang are refused as
    /// invalid, ranks of another node as forbidden.
    fn check_ranks(
        &self,
        id: WlId,
        node: Option<&str>,
        ranks: impl IntoIterator<Item = u32>,
    ) -> Result<(), ApiError> {
        let wl = self.state.workload(id);
        let placement = wl.admission.as_ref().map_or(&[][..], |a| &a.placement[..]);
        for rank in ranks {
            let Some((_, p)) = placement.get(rank as usize) else {
                return Err(invalid(format!(
                    "workload {:?} attempt {} has ranks 0..{}; rank {rank} does not exist",
                    wl.spec.name,
                    wl.attempt,
                    placement.len()
                )));
            };
            let Some(node) = node else { continue };
            let placed = self.state.acct.nodes.node(p.node).name.as_ref();
            if placed != node {
                return Err(forbidden(format!(
                    "rank {rank} of workload {:?} attempt {} runs on node {placed:?}, not on \
                     {node:?}; a node reports only its own pods",
                    wl.spec.name, wl.attempt
                )));
            }
        }
        Ok(())
    }

    /// Cheap fingerprint of the whole machine, equal on replicas with equal applied logs.
    pub fn digest(&self, encode: impl Fn(&Machine) -> Vec<u8>) -> u64 {
        allot_common::api::fnv1a(encode(self))
    }
}

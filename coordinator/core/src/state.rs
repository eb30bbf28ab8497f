//! The replicated state machine: teams, cohorts, nodes and workloads, changed only by commands,
//! each of which reports what happened as events. Deterministic: no clock (time is passed in),
//! no randomness, ordered maps only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use allot_common::quota::{
    validate_cohort_name, validate_quotas, validate_team_name, DEFAULT_COHORT,
};
use allot_common::{
    ClusterPolicy, CohortSpec, PriorityRef, ResourceName, ResourceQuota, Resources, TeamSpec,
    WorkloadSpec,
};
use serde::{Deserialize, Serialize};

use crate::chunked::{NameMap, WlMap};
use crate::conditions::ConditionType;
use crate::ids::{CohortId, FlavorId, FrId, FrVec, Interner, NodeId, ResId, TeamId, WlId};
use crate::nodes::{PodAlloc, ResKind};
pub use crate::plan::{Admission, PodSetAdmission};
use crate::plan::{Plan, PodSetFlavors, PreemptReason};
pub use crate::quota::CohortRt;
use crate::quota::{self, Acct, Limits};
pub use crate::shapes::QueueKey;
use crate::shapes::{same_text, ShapeIndex, Shown};

/// Milliseconds on the caller's clock.
pub type Time = i64;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupRt {
    pub resources: Vec<ResId>,
    pub flavors: Vec<FlavorId>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TeamRt {
    pub spec: TeamSpec,
    pub cohort: CohortId,
    /// Quota per (flavor, resource), sorted by id.
    pub quotas: Vec<(FrId, ResourceQuota)>,
    quota_idx: Vec<Option<ResourceQuota>>,
    pub(crate) groups: Vec<GroupRt>,
    /// Pending workloads in queue order: higher priority, earlier submission, name. Shared
    /// between copies of the state (one per cycle the leader computes) until one side changes
    /// it, like the workloads.
    pub pending: Arc<BTreeSet<QueueKey>>,
    /// Workloads holding quota (admitted, running or being evicted). Shared like `pending`.
    pub admitted: Arc<BTreeSet<WlId>>,
    /// A sum over the queue's entries of a 128-bit mix of each (id, priority, submit time),
    /// kept as entries come and go: with the length, what a scheduler cache compares to tell
    /// whether a queue changed without holding (and so later copying) it. Not stored.
    #[serde(skip)]
    pub(crate) queue_sum: u128,
    /// The queue by shape, with what each shape's entries show (not saved; see `ShapeIndex`).
    #[serde(skip)]
    pub(crate) shapes: ShapeIndex,
}

/// A queue entry's term in `TeamRt::queue_sum` (splitmix64 twice).
fn queue_mix(k: &QueueKey) -> u128 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(k.id.0 ^ mix(k.neg_priority as u64) ^ mix(k.submit as u64).rotate_left(17));
    let b = mix(a ^ k.id.0.rotate_left(32));
    (u128::from(a) << 64) | u128::from(b)
}

impl TeamRt {
    /// Adds an entry to the queue.
    fn enqueue(&mut self, key: QueueKey) {
        let term = queue_mix(&key);
        if Arc::make_mut(&mut self.pending).insert(key) {
            self.queue_sum = self.queue_sum.wrapping_add(term);
        }
    }

    /// Takes an entry off the queue.
    fn unqueue(&mut self, key: &QueueKey) {
        if Arc::make_mut(&mut self.pending).remove(key) {
            self.queue_sum = self.queue_sum.wrapping_sub(queue_mix(key));
        }
    }

    pub fn quota(&self, fr: FrId) -> Option<&ResourceQuota> {
        self.quota_idx.get(fr.idx()).and_then(|q| q.as_ref())
    }
    /// The part of nominal never lent: `nominal - lending_limit`.
    pub fn reserved(&self, fr: FrId) -> i64 {
        quota::never_lent(self.quota(fr))
    }
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WlState {
    Pending,
    Admitted,
    Running,
    Evicting,
    Succeeded,
    Failed,
    Cancelled,
}

impl WlState {
    pub fn as_str(&self) -> &'static str {
        match self {
            WlState::Pending => "Pending",
            WlState::Admitted => "Admitted",
            WlState::Running => "Running",
            WlState::Evicting => "Evicting",
            WlState::Succeeded => "Succeeded",
            WlState::Failed => "Failed",
            WlState::Cancelled => "Cancelled",
        }
    }
    pub fn holds_quota(&self) -> bool {
        matches!(
            self,
            WlState::Admitted | WlState::Running | WlState::Evicting
        )
    }
    /// Succeeded, failed or cancelled: it will not run again.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            WlState::Succeeded | WlState::Failed | WlState::Cancelled
        )
    }
}

/// A Kueue-style condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub kind: String,
    pub status: bool,
    /// Shared: a cycle's pending reasons and messages are shared between the workloads that
    /// show them, so most comparisons with the next cycle's are a pointer comparison.
    pub reason: Arc<str>,
    pub message: Arc<str>,
    pub time: Time,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Workload {
    pub id: WlId,
    pub spec: WorkloadSpec,
    pub team: TeamId,
    pub priority: i32,
    pub submit_time: Time,
    pub state: WlState,
    /// Per pod set: per-pod requests with interned resource ids.
    pub(crate) pod_reqs: Vec<Vec<(ResId, i64)>>,
    pub(crate) pinned: Option<FlavorId>,
    pub admission: Option<Admission>,
    pub admitted_at: Option<Time>,
    pub conditions: Vec<Condition>,
    pub preemptions: u32,
    /// The run time its preemptions threw away: from each admission to its preemption, in
    /// milliseconds.
    #[serde(default)]
    pub lost_run_ms: i64,
    /// Set while this workload waits for the victims it chose to go: its place among the last
    /// cycle's preemptors. It goes first in the next cycle, in that order (within its team too),
    /// and finds the room it freed.
    pub preempting: Option<u32>,
    /// With `preempting`: the flavors (per pod set, per resource) its victims were chosen for.
    /// The scheduler tries them first, so the preemptor lands in the room it made.
    #[serde(default)]
    pub(crate) preempting_flavors: Option<PodSetFlavors>,
    /// Why it is being evicted, once eviction started.
    pub(crate) eviction: Option<(String, String)>,
    /// How many times it was admitted: names one run of its pods, so that an instruction or a
    /// report about an earlier run never touches a later one.
    #[serde(default)]
    pub attempt: u32,
    /// Its last preemption: who took its place, why and when (kept after it is requeued or
    /// admitted again, for `explain`).
    #[serde(default)]
    pub preempted_by: Option<PreemptedBy>,
    /// While pending: the shape fingerprint its queue entry carries (0 in a state read back,
    /// where it is computed again when needed).
    #[serde(skip)]
    pub(crate) queued_shape: u128,
}

/// Who preempted a workload, why and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptedBy {
    pub preemptor: WlId,
    pub reason: PreemptReason,
    pub message: String,
    pub time: Time,
}

impl Workload {
    /// Whether a preemption took this workload at `now` and it is not being evicted: pending
    /// again, or admitted again at the same instant. No preemption picks it at `now` (see
    /// `preemption::allowed`): each workload is preempted at most once per instant, so the
    /// decisions at one instant end (docs/scheduling.md, "Every instant settles").
    pub fn preempted_at(&self, now: Time) -> bool {
        self.state != WlState::Evicting && self.preempted_by.as_ref().is_some_and(|p| p.time == now)
    }

    /// How long it has run at `now` since its admission (0 when not admitted).
    pub fn ran_for(&self, now: Time) -> i64 {
        self.admitted_at.map_or(0, |a| now.saturating_sub(a).max(0))
    }

    pub fn queue_key(&self) -> QueueKey {
        QueueKey {
            neg_priority: -i64::from(self.priority),
            submit: self.submit_time,
            name: self.spec.name.as_str().into(),
            id: self.id,
            shape: self.shape_fingerprint(),
        }
    }
    /// A 128-bit fingerprint of what the scheduler's shape key compares apart from time and
    /// preemption marks: team, priority, pinned flavor, each pod set's name, counts and
    /// requests, and the workload that evicted it (set only while it is not pending, so a
    /// queue entry's copy stays true). Two workloads with the same fingerprint have the same shape (a collision
    /// among the shapes of one cluster is a 2^-128 event). Never 0.
    pub fn shape_fingerprint(&self) -> u128 {
        self.fingerprint(true)
    }
    /// A 128-bit fingerprint of what a flavor assignment reads of a workload: the shape's
    /// without its priority and the workload that evicted it. Never 0.
    pub fn request_fingerprint(&self) -> u128 {
        self.fingerprint(false)
    }
    fn fingerprint(&self, whole: bool) -> u128 {
        use std::hash::{Hash, Hasher};
        #[allow(deprecated)]
        let mut a =
            std::hash::SipHasher::new_with_keys(0x616c_6c6f_745f_7368, 0x6170_655f_6669_6e67);
        #[allow(deprecated)]
        let mut b =
            std::hash::SipHasher::new_with_keys(0x9e37_79b9_7f4a_7c15, 0xbf58_476d_1ce4_e5b9);
        for h in [&mut a, &mut b] {
            self.team.hash(h);
            if whole {
                self.priority.hash(h);
            }
            self.pinned.hash(h);
            if whole {
                self.preempted_by.as_ref().map(|p| p.preemptor).hash(h);
            }
            self.spec.pod_sets.len().hash(h);
            for (p, r) in self.spec.pod_sets.iter().zip(&self.pod_reqs) {
                p.name.hash(h);
                p.count.hash(h);
                p.min_count.hash(h);
                r.hash(h);
            }
            // Only where asked: fingerprints of workloads without topology stay as they were.
            if let Some(ask) = self.topology() {
                ask.hash(h);
            }
        }
        ((u128::from(a.finish()) << 64) | u128::from(b.finish())).max(1)
    }
    /// The topology its pods ask for (`allot_common::topology`): each pod set in one domain.
    pub fn topology(&self) -> Option<allot_common::topology::Ask<'_>> {
        if self.spec.labels.is_empty() {
            return None;
        }
        allot_common::topology::ask_or_none(&self.spec.labels, &[])
    }
    pub fn condition(&self, kind: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind.as_str())
    }
    /// Pending out of its team's queue, waiting out a backoff (`State::park`).
    pub fn is_parked(&self) -> bool {
        self.state == WlState::Pending
            && self
                .condition(ConditionType::Requeued)
                .is_some_and(|c| !c.status)
    }

    fn set_condition(
        &mut self,
        kind: ConditionType,
        status: bool,
        reason: &str,
        message: &str,
        now: Time,
    ) {
        let same =
            |c: &Condition| c.status == status && &*c.reason == reason && &*c.message == message;
        if !self.condition(kind).is_some_and(same) {
            self.set_condition_shared(kind, status, &reason.into(), &message.into(), now);
        }
    }
    /// `set_condition` with shared texts, kept as they are (no copy).
    fn set_condition_shared(
        &mut self,
        kind: ConditionType,
        status: bool,
        reason: &Arc<str>,
        message: &Arc<str>,
        now: Time,
    ) {
        let c = || Condition {
            kind: kind.as_str().to_string(),
            status,
            reason: reason.clone(),
            message: message.clone(),
            time: now,
        };
        match self.conditions.iter_mut().find(|c| c.kind == kind.as_str()) {
            Some(old) => {
                if old.status != status || old.reason != *reason || old.message != *message {
                    *old = c();
                }
            }
            None => self.conditions.push(c()),
        }
    }
    /// The pending reason and message it shows, shared (`None` while it shows none).
    pub fn shown(&self) -> Shown {
        self.waiting()
            .map(|c| (c.reason.clone(), c.message.clone()))
    }
    /// The pending reason and message shown to users.
    pub fn pending_status(&self) -> Option<(&str, &str)> {
        self.waiting().map(|c| (&*c.reason, &*c.message))
    }
    /// Its QuotaReserved condition where that says it waits.
    fn waiting(&self) -> Option<&Condition> {
        self.condition(ConditionType::QuotaReserved)
            .filter(|c| !c.status)
    }
    /// Whether the workload is pending and shows exactly this reason and message: a pointer
    /// comparison where they are the texts it was given (a cycle's memoised ones), else the
    /// texts'.
    pub fn shows_pending(&self, reason: &Arc<str>, message: &Arc<str>) -> bool {
        self.state == WlState::Pending
            && self
                .waiting()
                .is_some_and(|c| same_text(&c.message, message) && same_text(&c.reason, reason))
    }
}

/// Something that happened, for watchers and the simulator's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Submitted {
        wl: WlId,
    },
    Admitted {
        wl: WlId,
    },
    Preempted {
        wl: WlId,
        by: WlId,
        reason: PreemptReason,
        message: String,
    },
    Evicted {
        wl: WlId,
        reason: String,
        message: String,
    },
    Requeued {
        wl: WlId,
    },
    Finished {
        wl: WlId,
        succeeded: bool,
    },
    Cancelled {
        wl: WlId,
    },
    /// An admission decided by the scheduler no longer fitted when applied; it was not applied.
    AdmissionRetried {
        wl: WlId,
        message: String,
    },
}

impl Event {
    /// The workload this event preempted, if it is a preemption.
    pub fn preempted(&self) -> Option<WlId> {
        match self {
            Event::Preempted { wl, .. } => Some(*wl),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("{0}")]
    Invalid(String),
    #[error("unknown team {name:?}; teams: {known}")]
    UnknownTeam { name: String, known: String },
    #[error("unknown workload {0:?}")]
    UnknownWorkload(String),
    #[error("workload {name:?} is still {state} in its team; a name is taken only while its workload is active (pending, admitted, running or being evicted): cancel it, wait until it finishes, or choose another name")]
    DuplicateWorkload { name: String, state: String },
    #[error("{} teams have a workload named {name:?} ({teams}); say which team's", teams.split(", ").count())]
    AmbiguousWorkload { name: String, teams: String },
    #[error("unknown node {0:?}")]
    UnknownNode(String),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub(crate) policy: ClusterPolicy,
    pub(crate) names: Interner,
    pub(crate) teams: Vec<TeamRt>,
    pub(crate) team_ids: BTreeMap<String, TeamId>,
    pub(crate) cohorts: Vec<CohortRt>,
    pub(crate) cohort_specs: BTreeMap<String, CohortSpec>,
    /// Copy-on-write, like the node set: copying the state (for a snapshot written off the
    /// raft thread) shares every workload until one changes.
    pub(crate) workloads: WlMap<Arc<Workload>>,
    /// Workloads by (name, team): a name is unique within its team only.
    pub(crate) by_name: NameMap,
    pub(crate) acct: Acct,
    /// Whether admission must place pods on nodes (false: quota-only, as `allot simulate`
    /// without nodes).
    pub(crate) placement: bool,
    next_id: u64,
    /// Node capacity per flavor above all teams' nominal, lent by the default cohort when
    /// `IdleResourceSharing` is on.
    pub(crate) idle_capacity: BTreeMap<FrId, i64>,
    /// Warnings about the configuration (quota above capacity).
    pub(crate) warnings: Vec<String>,
    /// Workloads whose `preempting` mark is set.
    pub(crate) preemptors: BTreeSet<WlId>,
    /// Per cohort: pool usage above the pool left behind when the pool shrank (a node failed
    /// under idle sharing, a quota was lowered). Running work is not evicted for it; it only
    /// shrinks as work leaves, and admissions never add to it.
    pub(crate) pool_excess: Vec<FrVec>,
    /// Per team: usage above nominal + borrowing limit (or on a flavor it no longer has quota
    /// for) left when its quota was lowered under running work. Like `pool_excess`, it only
    /// shrinks as work leaves.
    pub(crate) team_excess: Vec<FrVec>,
    /// Finished workloads dropped by `forget_finished` so far: an eviction chain may pass
    /// through one, so a scheduler cache keyed on the state counts them.
    #[serde(default)]
    pub(crate) forgotten: u64,
    /// The last instant at which plans preempted workloads, and their victims (in the order
    /// they were preempted): those that hold quota again at that instant are not preempted
    /// again in it (`Workload::preempted_at`). An index for the scheduler's cache, which
    /// compares these between cycles; the rule reads the workloads themselves.
    #[serde(default)]
    pub(crate) preempted_at: (Time, Vec<WlId>),
    /// The pending texts workloads show, shared by content (not saved: addresses only).
    #[serde(skip)]
    pub(crate) texts: crate::texts::Texts,
}

/// What other crates read of the state (the core alone changes it).
impl State {
    /// The cluster's policy in force.
    pub fn policy(&self) -> &ClusterPolicy {
        &self.policy
    }

    /// The names of flavors and resources, interned.
    pub fn names(&self) -> &Interner {
        &self.names
    }

    /// The teams, by `TeamId`.
    pub fn teams(&self) -> &[TeamRt] {
        &self.teams
    }

    /// The cohorts, by index.
    pub fn cohorts(&self) -> &[CohortRt] {
        &self.cohorts
    }

    /// Every workload the state holds, by id.
    pub fn workloads(&self) -> &WlMap<Arc<Workload>> {
        &self.workloads
    }

    /// The accounting: usage per team and flavor, and the nodes.
    pub fn acct(&self) -> &Acct {
        &self.acct
    }

    /// Whether admission places pods on nodes.
    pub fn placement(&self) -> bool {
        self.placement
    }

    /// Node capacity above every team's nominal, per flavor and resource.
    pub fn idle_capacity(&self) -> &BTreeMap<FrId, i64> {
        &self.idle_capacity
    }

    /// Warnings about the configuration.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

impl State {
    /// The workloads preempted at `now` that hold quota again (admitted at `now` after their
    /// preemption), in id order: the ones no preemption may pick at `now`, as far as the
    /// scheduler's cache must know (pending ones are no candidates anyway).
    pub fn readmitted_at(&self, now: Time) -> Vec<WlId> {
        if self.preempted_at.0 != now {
            return Vec::new();
        }
        let mut ids: Vec<WlId> = (self.preempted_at.1.iter().copied())
            .filter(|id| {
                self.workloads.get(id).is_some_and(|w| {
                    matches!(w.state, WlState::Admitted | WlState::Running) && w.preempted_at(now)
                })
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

impl Limits for State {
    fn names(&self) -> &Interner {
        &self.names
    }
    fn cohort_of(&self, t: TeamId) -> CohortId {
        self.teams[t.idx()].cohort
    }
    fn quotas(&self, t: TeamId) -> &[(FrId, ResourceQuota)] {
        &self.teams[t.idx()].quotas
    }
    fn quota(&self, t: TeamId, fr: FrId) -> Option<&ResourceQuota> {
        self.teams[t.idx()].quota(fr)
    }
    fn weight(&self, t: TeamId) -> (u32, u32) {
        self.teams[t.idx()].spec.weight_ratio()
    }
    fn cohort(&self, c: CohortId) -> &CohortRt {
        &self.cohorts[c.idx()]
    }
    fn pool_excess(&self, c: CohortId, fr: FrId) -> i64 {
        self.pool_excess
            .get(c.idx())
            .map(|e| e.get(fr))
            .unwrap_or(0)
    }
}

impl Default for State {
    fn default() -> Self {
        State::new(ClusterPolicy::default())
    }
}

/// Each pod set's positive requests, with resource names resolved by `resolve` (interning in
/// `submit`, looking up in `prepare`); the first error of `resolve` ends it.
fn pod_requests<E>(
    spec: &WorkloadSpec,
    mut resolve: impl FnMut(&ResourceName) -> Result<ResId, E>,
) -> Result<Vec<Vec<(ResId, i64)>>, E> {
    spec.pod_sets
        .iter()
        .map(|ps| {
            ps.requests
                .iter()
                .filter(|(_, v)| *v > 0)
                .map(|(r, v)| Ok((resolve(r)?, v)))
                .collect()
        })
        .collect()
}

impl State {
    pub fn new(policy: ClusterPolicy) -> Self {
        State {
            policy,
            names: Interner::default(),
            teams: Vec::new(),
            team_ids: BTreeMap::new(),
            cohorts: Vec::new(),
            cohort_specs: BTreeMap::new(),
            workloads: WlMap::default(),
            by_name: NameMap::default(),
            acct: Acct::default(),
            placement: false,
            next_id: 1,
            idle_capacity: BTreeMap::new(),
            warnings: Vec::new(),
            preemptors: BTreeSet::new(),
            pool_excess: Vec::new(),
            team_excess: Vec::new(),
            forgotten: 0,
            preempted_at: (0, Vec::new()),
            texts: Default::default(),
        }
    }

    pub fn team_id(&self, name: &str) -> Result<TeamId, StateError> {
        self.team_ids
            .get(name)
            .copied()
            .ok_or_else(|| StateError::UnknownTeam {
                name: name.to_string(),
                known: self.team_ids.keys().cloned().collect::<Vec<_>>().join(", "),
            })
    }

    /// Whether any team has a workload waiting for admission.
    pub fn has_pending(&self) -> bool {
        self.teams.iter().any(|t| !t.pending.is_empty())
    }

    pub fn workload(&self, id: WlId) -> &Workload {
        &self.workloads[&id]
    }

    /// Every workload named `name`, one per team at most.
    pub fn named<'a>(&'a self, name: &str) -> impl Iterator<Item = WlId> + 'a {
        self.by_name.named(name)
    }

    /// The workload named `name`, when one team has it; when several do, an error naming
    /// them (a caller acting for one team uses [`State::find_scoped`]).
    pub fn find_workload(&self, name: &str) -> Result<WlId, StateError> {
        let mut ids = self.named(name);
        match (ids.next(), ids.next()) {
            (Some(id), None) => Ok(id),
            (None, _) => Err(StateError::UnknownWorkload(name.to_string())),
            (Some(_), Some(_)) => Err(StateError::AmbiguousWorkload {
                name: name.to_string(),
                teams: self
                    .named(name)
                    .map(|id| self.teams[self.workload(id).team.idx()].name().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The workload named `name` in `team` (`None`: any team, when only one has it). A
    /// name another team uses is unknown here, so a team learns nothing of another's.
    pub fn find_scoped(&self, name: &str, team: Option<&str>) -> Result<WlId, StateError> {
        let Some(team) = team else {
            return self.find_workload(name);
        };
        let unknown = || StateError::UnknownWorkload(name.to_string());
        let tid = self.team_ids.get(team).ok_or_else(unknown)?;
        self.by_name
            .get(&(Arc::from(name), *tid))
            .copied()
            .ok_or_else(unknown)
    }

    // ---------------------------------------------------------------- configuration commands

    pub fn set_policy(&mut self, policy: ClusterPolicy) -> Result<(), StateError> {
        policy
            .validate()
            .map_err(|e| StateError::Invalid(e.to_string()))?;
        self.policy = policy;
        self.rebuild();
        Ok(())
    }

    pub fn set_cohort(&mut self, spec: CohortSpec) -> Result<(), StateError> {
        validate_cohort_name(&spec.name).map_err(|e| StateError::Invalid(e.to_string()))?;
        if let Some(p) = &spec.parent {
            self.check_parent(&spec.name, p)?;
            self.check_depth(&spec)?;
        }
        // A cohort's lending limit bounds what it lends of its subtree's quota, not of its own
        // nominal (kueue-reference.md §2): checked apart.
        let mut own = spec.quotas.clone();
        for (r, q) in own.iter_mut().flat_map(|f| f.resources.iter_mut()) {
            if let Some(l) = q.lending_limit.take() {
                if l < 0 {
                    return Err(StateError::Invalid(format!(
                        "cohort {}: resource {r}: lending_limit {l} must be >= 0",
                        spec.name
                    )));
                }
            }
        }
        validate_quotas(&format!("cohort {}", spec.name), &own, &[], true)
            .map_err(|e| StateError::Invalid(e.to_string()))?;
        if spec.parent.is_none()
            && spec
                .quotas
                .iter()
                .flat_map(|f| f.resources.iter())
                .any(|(_, q)| q.borrowing_limit.is_some() || q.lending_limit.is_some())
        {
            return Err(StateError::Invalid(format!(
                "cohort {}: borrowing and lending limits on a cohort need a parent cohort; give only nominal",
                spec.name
            )));
        }
        self.cohort_specs.insert(spec.name.clone(), spec);
        self.rebuild();
        Ok(())
    }

    /// Sets the fair-share weight of cohort `name`, one an admin created (`None`: 1). The
    /// weight is read where shares are, so nothing else is rebuilt.
    pub fn set_cohort_weight(
        &mut self,
        name: &str,
        weight: Option<(u32, u32)>,
    ) -> Result<(), StateError> {
        let Some(spec) = self.cohort_specs.get_mut(name) else {
            return Err(StateError::Invalid(format!(
                "cohort {name} does not exist: create it first (allot create-cohort {name}); the cohorts are {}",
                if self.cohort_specs.is_empty() {
                    "none yet".to_string()
                } else {
                    self.cohort_specs.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            )));
        };
        spec.fair_share_weight = weight;
        for c in self.cohorts.iter_mut().filter(|c| c.name == name) {
            if let Some(spec) = &mut c.spec {
                spec.fair_share_weight = weight;
            }
        }
        Ok(())
    }

    /// Deletes a cohort no team is in and no cohort has as its parent.
    pub fn delete_cohort(&mut self, name: &str) -> Result<(), StateError> {
        let teams: Vec<&str> = (self.teams.iter())
            .filter(|t| t.spec.cohort.as_deref() == Some(name))
            .map(|t| t.spec.name.as_str())
            .collect();
        if !teams.is_empty() {
            return Err(StateError::Invalid(format!(
                "cohort {name} has teams {}: move them to another cohort first (allot set-team-cohort)",
                teams.join(", ")
            )));
        }
        let children: Vec<&str> = (self.cohort_specs.values())
            .filter(|s| s.parent.as_deref() == Some(name))
            .map(|s| s.name.as_str())
            .collect();
        if !children.is_empty() {
            return Err(StateError::Invalid(format!(
                "cohort {name} is the parent of {}: give them another parent first",
                children.join(", ")
            )));
        }
        if self.cohort_specs.remove(name).is_none() {
            return Err(StateError::Invalid(format!(
                "cohort {name} was never created; cohorts: {}",
                self.cohort_specs
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        self.rebuild();
        Ok(())
    }

    /// Cohort `name` may have `parent`: a cohort name, not itself nor below it (no cycle), and
    /// the tree no deeper than `cohort_tree::MAX_DEPTH`. A parent not declared is a cohort by
    /// name alone, as a team's cohort may be.
    fn check_parent(&self, name: &str, parent: &str) -> Result<(), StateError> {
        validate_cohort_name(parent).map_err(|e| StateError::Invalid(e.to_string()))?;
        let mut chain = vec![name.to_string()];
        let mut at = Some(parent.to_string());
        while let Some(p) = at {
            chain.push(p.clone());
            if p == name {
                return Err(StateError::Invalid(format!(
                    "cohort {name}: parent {parent:?} makes a cycle ({}); a cohort's parents must lead to a root",
                    chain.join(" -> ")
                )));
            }
            if chain.len() > crate::cohort_tree::MAX_DEPTH + 1 {
                break;
            }
            at = self.cohort_specs.get(&p).and_then(|s| s.parent.clone());
        }
        Ok(())
    }

    /// With `spec` in place, no cohort is deeper than `cohort_tree::MAX_DEPTH` levels.
    fn check_depth(&self, spec: &CohortSpec) -> Result<(), StateError> {
        let parent_of = |n: &str| -> Option<String> {
            if n == spec.name {
                return spec.parent.clone();
            }
            self.cohort_specs.get(n).and_then(|s| s.parent.clone())
        };
        for start in self.cohort_specs.keys().chain(std::iter::once(&spec.name)) {
            let mut chain = vec![start.clone()];
            while let Some(p) = parent_of(chain.last().map_or("", String::as_str)) {
                chain.push(p);
                if chain.len() > crate::cohort_tree::MAX_DEPTH {
                    return Err(StateError::Invalid(format!(
                        "cohort {}: parent {:?} makes a tree deeper than {} levels ({})",
                        spec.name,
                        spec.parent.as_deref().unwrap_or_default(),
                        crate::cohort_tree::MAX_DEPTH,
                        chain.join(" -> ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Links the cohorts' tree again after the state was read back (the tree is not stored):
    /// the pools stored are already whole.
    pub fn refresh_cohort_tree(&mut self) {
        crate::cohort_tree::link(&mut self.cohorts, &self.names, false);
    }

    /// Creates a team or replaces its allocation; workloads keep running.
    pub fn set_team(&mut self, spec: TeamSpec) -> Result<TeamId, StateError> {
        validate_team_name(&spec.name).map_err(|e| StateError::Invalid(e.to_string()))?;
        if let Some(c) = &spec.cohort {
            validate_cohort_name(c).map_err(|e| StateError::Invalid(e.to_string()))?;
        }
        if spec.fair_share_weight > 100 {
            return Err(StateError::Invalid(format!(
                "team {}: fair_share_weight {} is out of range 0..=100",
                spec.name, spec.fair_share_weight
            )));
        }
        validate_quotas(
            &format!("team {}", spec.name),
            &spec.quotas,
            &spec.resource_groups,
            spec.cohort.is_some(),
        )
        .map_err(|e| StateError::Invalid(e.to_string()))?;
        let groups = spec.effective_resource_groups();
        for fq in &spec.quotas {
            for (r, _) in &fq.resources {
                if !groups.iter().any(|g| g.covered.contains(r)) {
                    return Err(StateError::Invalid(format!(
                        "team {}: resource {r} of flavor {} is not covered by any resource group",
                        spec.name, fq.flavor
                    )));
                }
            }
        }
        use allot_common::quota::{BorrowWithinCohortPolicy, ReclaimWithinCohort};
        if spec.preemption.reclaim_within_cohort == ReclaimWithinCohort::Never
            && spec.preemption.borrow_within_cohort.policy != BorrowWithinCohortPolicy::Never
        {
            return Err(StateError::Invalid(format!(
                "team {}: borrow_within_cohort.policy {:?} needs reclaim_within_cohort LowerPriority or Any (it is Never)",
                spec.name, spec.preemption.borrow_within_cohort.policy
            )));
        }
        let id = match self.team_ids.get(&spec.name) {
            Some(id) => {
                self.teams[id.idx()].spec = spec;
                *id
            }
            None => {
                let id = TeamId(self.teams.len() as u32);
                self.team_ids.insert(spec.name.clone(), id);
                self.teams.push(TeamRt {
                    spec,
                    cohort: CohortId(0),
                    quotas: Vec::new(),
                    quota_idx: Vec::new(),
                    groups: Vec::new(),
                    pending: Arc::default(),
                    admitted: Arc::default(),
                    queue_sum: 0,
                    shapes: ShapeIndex::new(),
                });
                self.acct.team_usage.push(FrVec::default());
                id
            }
        };
        self.rebuild();
        Ok(id)
    }

    /// Removes a team that has no pending or admitted workloads. Its id stays allocated (ids are
    /// never reused) with no quota and no cohort, and its name is free again.
    pub fn remove_team(&mut self, name: &str) -> Result<(), StateError> {
        let id = self.team_id(name)?;
        let t = &self.teams[id.idx()];
        // Pending out of the queue while in a backoff (`park`): pending all the same.
        let parked = (self.workloads.values())
            .filter(|w| w.team == id && w.is_parked())
            .count();
        if !t.pending.is_empty() || !t.admitted.is_empty() || parked > 0 {
            return Err(StateError::Invalid(format!(
                "team {name} still has {} pending and {} admitted workloads; cancel them first",
                t.pending.len() + parked,
                t.admitted.len()
            )));
        }
        let t = &mut self.teams[id.idx()];
        t.spec.quotas.clear();
        t.spec.resource_groups.clear();
        t.spec.cohort = None;
        self.team_ids.remove(name);
        self.rebuild();
        Ok(())
    }

    /// Adds a node of `flavor` with `capacity`, healthy and schedulable.
    pub fn add_node(
        &mut self,
        name: &str,
        flavor: &str,
        capacity: &Resources,
    ) -> Result<NodeId, StateError> {
        let id = self.add_node_unbuilt(name, flavor, capacity)?;
        self.rebuild();
        Ok(id)
    }

    /// Adds nodes as `add_node` does, with what derives from capacity recomputed once at the
    /// end, not after each (that took 200 µs a node with 100 teams). Stops at the first
    /// error; the nodes before it stay added.
    pub fn add_nodes<'n>(
        &mut self,
        nodes: impl IntoIterator<Item = (&'n str, &'n str, &'n Resources)>,
    ) -> Result<Vec<NodeId>, StateError> {
        let mut ids = Vec::new();
        let mut failed = None;
        for (name, flavor, capacity) in nodes {
            match self.add_node_unbuilt(name, flavor, capacity) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if !ids.is_empty() {
            self.rebuild();
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(ids),
        }
    }

    /// Sets node `name`'s topology (level → domain), checked (`topology::check_node`). Returns
    /// whether it changed.
    pub fn set_node_topology(
        &mut self,
        name: &str,
        topology: &allot_common::topology::NodeTopology,
    ) -> Result<bool, StateError> {
        let id = self
            .acct
            .nodes
            .find(name)
            .ok_or_else(|| StateError::UnknownNode(name.to_string()))?;
        allot_common::topology::check_node(topology)
            .map_err(|e| StateError::Invalid(format!("node {name}: {e}")))?;
        Ok(self
            .acct
            .nodes
            .set_topology(id, crate::topology::node_topo(topology)))
    }

    /// Grows a registered node's GPU partitions to what it reports (`capacity`'s partition
    /// resources): partitions created after it registered become schedulable.
    /// Everything is checked first (`check_partitions`), so a refusal changes nothing.
    pub fn grow_partitions(&mut self, name: &str, capacity: &Resources) -> Result<(), StateError> {
        let id = self.check_partitions(name, capacity)?;
        let mut grown = false;
        for (r, cap) in capacity.iter().filter(|(r, _)| r.is_partition()) {
            let r = self.names.resource(r);
            grown |= self
                .acct
                .nodes
                .grow_devices(id, r, cap)
                .map_err(StateError::Invalid)?;
        }
        if grown {
            self.placement = true;
            self.rebuild();
        }
        Ok(())
    }

    /// Whether `grow_partitions` can take `capacity`'s partitions for node `name`: each at most
    /// `MAX_DEVICES`, and none already a counted resource of the node. Changes nothing.
    pub fn check_partitions(&self, name: &str, capacity: &Resources) -> Result<NodeId, StateError> {
        let id = self
            .acct
            .nodes
            .find(name)
            .ok_or_else(|| StateError::UnknownNode(name.to_string()))?;
        let node = self.acct.nodes.node(id);
        for (r, cap) in capacity.iter().filter(|(r, _)| r.is_partition()) {
            if cap > crate::nodes::MAX_DEVICES {
                return Err(StateError::Invalid(format!(
                    "node {name}: {cap} GPU partitions of {r}; at most {} are supported",
                    crate::nodes::MAX_DEVICES
                )));
            }
            let counted = self.names.find_resource(r).is_some_and(|rid| {
                node.res
                    .iter()
                    .any(|x| x.res == rid && x.free_mask.is_none())
            });
            if counted {
                return Err(StateError::Invalid(format!(
                    "node {name}: {r} was registered as a counted resource, not devices"
                )));
            }
        }
        Ok(id)
    }

    /// `add_node` without the rebuild the caller owes.
    fn add_node_unbuilt(
        &mut self,
        name: &str,
        flavor: &str,
        capacity: &Resources,
    ) -> Result<NodeId, StateError> {
        let f = self.names.flavor(flavor);
        let cap: Vec<(ResId, i64, ResKind)> = capacity
            .iter()
            .map(|(r, v)| {
                let kind = if r.is_accelerator() {
                    ResKind::Accelerator
                } else if r.is_device() {
                    ResKind::Device
                } else {
                    ResKind::Plain
                };
                (self.names.resource(r), v, kind)
            })
            .collect();
        let id = self
            .acct
            .nodes
            .add(name, f, cap)
            .map_err(StateError::Invalid)?;
        self.placement = true;
        Ok(id)
    }

    /// Recomputes everything derived from the configuration: quota indices, cohorts, pools,
    /// pool usage. Usage itself is kept.
    fn rebuild(&mut self) {
        // Quotas and groups.
        for t in 0..self.teams.len() {
            let spec = self.teams[t].spec.clone();
            let mut quotas = Vec::new();
            for fq in &spec.quotas {
                let f = self.names.flavor(&fq.flavor);
                for (r, q) in &fq.resources {
                    let rid = self.names.resource(r);
                    quotas.push((self.names.fr(f, rid), *q));
                }
            }
            quotas.sort_by_key(|(fr, _)| *fr);
            let mut idx = vec![None; quotas.iter().map(|(fr, _)| fr.idx() + 1).max().unwrap_or(0)];
            for (fr, q) in &quotas {
                idx[fr.idx()] = Some(*q);
            }
            let groups = spec
                .effective_resource_groups()
                .iter()
                .map(|g| GroupRt {
                    resources: g.covered.iter().map(|r| self.names.resource(r)).collect(),
                    flavors: g.flavors.iter().map(|f| self.names.flavor(f)).collect(),
                })
                .collect();
            let team = &mut self.teams[t];
            team.quotas = quotas;
            team.quota_idx = idx;
            team.groups = groups;
        }
        // Idle capacity: healthy node capacity that no team's nominal covers.
        self.idle_capacity.clear();
        self.warnings.clear();
        let capacity = self.acct.nodes.healthy_capacity();
        let mut nominal_sum: BTreeMap<FrId, i64> = BTreeMap::new();
        for t in &self.teams {
            for (fr, q) in &t.quotas {
                *nominal_sum.entry(*fr).or_insert(0) += q.nominal;
            }
        }
        if self.placement {
            for ((f, r), cap) in &capacity {
                let fr = self.names.fr(*f, *r);
                let nominal = nominal_sum.get(&fr).copied().unwrap_or(0);
                if cap > &nominal {
                    self.idle_capacity.insert(fr, cap - nominal);
                }
            }
            for (fr, nominal) in &nominal_sum {
                let (f, r) = self.names.fr_parts(*fr);
                let cap = capacity.get(&(f, r)).copied().unwrap_or(0);
                if *nominal > cap && self.acct.nodes.has_flavor(f) {
                    self.warnings.push(format!(
                        "total nominal quota of {} ({}) is above the healthy capacity ({}): admission also needs room on nodes",
                        self.names.describe_fr(*fr),
                        self.names.format_qty(r, *nominal),
                        self.names.format_qty(r, cap)
                    ));
                }
            }
        }
        // Cohorts: named ones in name order, then private ones in team order.
        let mut cohort_names: BTreeSet<String> = self.cohort_specs.keys().cloned().collect();
        for s in self.cohort_specs.values() {
            cohort_names.extend(s.parent.clone());
        }
        for t in &self.teams {
            if let Some(c) = &t.spec.cohort {
                cohort_names.insert(c.clone());
            }
        }
        let mut cohorts: Vec<CohortRt> = cohort_names
            .iter()
            .map(|n| CohortRt {
                name: n.clone(),
                private: false,
                spec: self.cohort_specs.get(n).cloned(),
                members: Vec::new(),
                pool: FrVec::default(),
                lendable_by_res: BTreeMap::new(),
                tree: Default::default(),
            })
            .collect();
        for (i, t) in self.teams.iter_mut().enumerate() {
            let cid = match &t.spec.cohort {
                Some(c) => cohorts.iter().position(|x| &x.name == c).unwrap_or(0),
                None => {
                    cohorts.push(CohortRt {
                        name: format!("(team {})", t.spec.name),
                        private: true,
                        spec: None,
                        members: Vec::new(),
                        pool: FrVec::default(),
                        lendable_by_res: BTreeMap::new(),
                        tree: Default::default(),
                    });
                    cohorts.len() - 1
                }
            };
            t.cohort = CohortId(cid as u32);
            cohorts[cid].members.push(TeamId(i as u32));
        }
        for c in cohorts.iter_mut() {
            for m in &c.members {
                let t = &self.teams[m.idx()];
                for (fr, q) in &t.quotas {
                    c.pool.add(*fr, q.lending_limit.unwrap_or(q.nominal));
                }
            }
            if let Some(spec) = &c.spec {
                for fq in &spec.quotas {
                    let f = self.names.flavor(&fq.flavor);
                    for (r, q) in &fq.resources {
                        let rid = self.names.resource(r);
                        let fr = self.names.fr(f, rid);
                        c.pool.add(fr, q.nominal);
                    }
                }
            }
            if self.policy.idle_resource_sharing && c.name == DEFAULT_COHORT && !c.private {
                for (fr, v) in &self.idle_capacity {
                    c.pool.add(*fr, *v);
                }
            }
        }
        // What child cohorts lend up, and each cohort's fair-share divisor.
        crate::cohort_tree::link(&mut cohorts, &self.names, true);
        self.cohorts = cohorts;
        self.acct.pool_used = self.pool_usage();
        self.pool_excess = (0..self.cohorts.len())
            .map(|c| self.current_excess(c))
            .collect();
        self.team_excess = (0..self.teams.len())
            .map(|t| self.current_team_excess(t))
            .collect();
    }

    /// Each cohort's pool usage counted afresh: what its teams use beyond what they never
    /// lend, and up a tree what each child cohort's subtree uses beyond its `local`.
    pub(crate) fn pool_usage(&self) -> Vec<FrVec> {
        let mut pool_used = vec![FrVec::default(); self.cohorts.len()];
        for (i, t) in self.teams.iter().enumerate() {
            for (k, u) in self.acct.team_usage[i].0.iter().enumerate() {
                let fr = FrId(k as u32);
                let over = (u - t.reserved(fr)).max(0);
                if over != 0 {
                    pool_used[t.cohort.idx()].add(fr, over);
                }
            }
        }
        // Up a tree: what each cohort's subtree uses beyond its `local`, children first.
        let mut up: Vec<usize> = (0..self.cohorts.len()).collect();
        up.sort_by_key(|&i| (std::cmp::Reverse(self.cohorts[i].tree.depth), i));
        for i in up {
            let Some(p) = self.cohorts[i].tree.parent else {
                continue;
            };
            for (k, used) in pool_used[i].0.clone().into_iter().enumerate() {
                let fr = FrId(k as u32);
                let over = (used - self.cohorts[i].tree.local.get(fr)).max(0);
                if over != 0 {
                    pool_used[p.idx()].add(fr, over);
                }
            }
        }
        pool_used
    }

    /// Usage of team `t` above what its quota allows it to hold now.
    fn current_team_excess(&self, t: usize) -> FrVec {
        let mut e = FrVec::default();
        let team = &self.teams[t];
        for (k, &u) in self.acct.team_usage[t].0.iter().enumerate() {
            let fr = FrId(k as u32);
            let limit = match team.quota(fr) {
                Some(q) => match q.borrowing_limit {
                    Some(bl) => q.nominal + bl,
                    None => continue,
                },
                None => 0,
            };
            if u > limit {
                e.set(fr, u - limit);
            }
        }
        e
    }

    fn current_excess(&self, c: usize) -> FrVec {
        let mut e = FrVec::default();
        let cohort = &self.cohorts[c];
        for (i, used) in self.acct.pool_used[c].0.iter().enumerate() {
            let fr = FrId(i as u32);
            // As `quota::cohort_within_pool` checks it.
            let Some(bound) = cohort.usage_bound(fr) else {
                continue;
            };
            let over = used - bound;
            if over > 0 {
                e.set(fr, over);
            }
        }
        e
    }

    // ---------------------------------------------------------------- workload commands

    /// Accepts a workload into its team's queue. Errors are rejections, with the reason.
    pub fn submit(
        &mut self,
        spec: WorkloadSpec,
        now: Time,
    ) -> Result<(WlId, Vec<Event>), StateError> {
        let (team, priority) = self.check_submit(&spec)?;
        // Names are interned only once every check passed.
        let pinned = spec.instance_type.as_deref().map(|f| self.names.flavor(f));
        let names = &mut self.names;
        let Ok(pod_reqs) =
            pod_requests::<std::convert::Infallible>(&spec, |r| Ok(names.resource(r)));
        let wl = self.new_workload(spec, team, priority, pinned, pod_reqs, now);
        let id = wl.id;
        self.next_id += 1;
        self.by_name
            .insert((wl.spec.name.as_str().into(), team), id);
        self.workloads.insert(id, Arc::new(wl));
        self.enqueue(id);
        Ok((id, vec![Event::Submitted { wl: id }]))
    }

    /// The workload `submit` would queue, with the id it would get, leaving the state as it
    /// is. Errors are the rejections `submit` would return; `Ok(None)` when the workload names
    /// a resource nothing in the cluster has named yet (no quota covers it, so it would wait).
    pub fn prepare(&self, spec: &WorkloadSpec, now: Time) -> Result<Option<Workload>, StateError> {
        let (team, priority) = self.check_submit(spec)?;
        let pinned = match spec.instance_type.as_deref() {
            Some(f) => match self.names.find_flavor(f) {
                Some(id) => Some(id),
                None => return Ok(None),
            },
            None => None,
        };
        let Ok(pod_reqs) = pod_requests(spec, |r| self.names.find_resource(r).ok_or(())) else {
            return Ok(None);
        };
        Ok(Some(self.new_workload(
            spec.clone(),
            team,
            priority,
            pinned,
            pod_reqs,
            now,
        )))
    }

    /// The checks of `submit`: a valid spec, a new name, a known team and priority class, and
    /// a pinned instance type that is in the team's quota. Returns the team and the priority.
    fn check_submit(&self, spec: &WorkloadSpec) -> Result<(TeamId, i32), StateError> {
        spec.validate()
            .map_err(|e| StateError::Invalid(e.to_string()))?;
        let team = self.team_id(&spec.team)?;
        // A name is unique among the team's active workloads: a finished one keeps its record
        // under its id, and the new workload takes the name.
        if let Some(id) = self.by_name.get(&(spec.name.as_str().into(), team)) {
            let st = self.workload(*id).state;
            if !st.is_finished() {
                return Err(StateError::DuplicateWorkload {
                    name: spec.name.clone(),
                    state: st.as_str().to_ascii_lowercase(),
                });
            }
        }
        let priority = match &spec.priority {
            PriorityRef::None => 0,
            PriorityRef::Value(v) => *v,
            PriorityRef::Class(c) => self
                .policy
                .class_priority(c)
                .map_err(|e| StateError::Invalid(format!("workload {}: {e}", spec.name)))?,
        };
        if let Some(f) = &spec.instance_type {
            let t = &self.teams[team.idx()];
            if !t.spec.quotas.iter().any(|q| &q.flavor == f) {
                return Err(StateError::Invalid(format!(
                    "workload {}: instance type {f} is not in team {}'s quota (its flavors: {})",
                    spec.name,
                    t.spec.name,
                    t.spec
                        .quotas
                        .iter()
                        .map(|q| q.flavor.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok((team, priority))
    }

    fn new_workload(
        &self,
        spec: WorkloadSpec,
        team: TeamId,
        priority: i32,
        pinned: Option<FlavorId>,
        pod_reqs: Vec<Vec<(ResId, i64)>>,
        now: Time,
    ) -> Workload {
        let mut spec = spec;
        // A class named as HyperPod's jobs label it (`training-priority`) is kept by its name.
        if let PriorityRef::Class(c) = &spec.priority {
            if let Some(name) = self.policy.class_name(c).filter(|n| n != c) {
                spec.priority = PriorityRef::Class(name.to_string());
            }
        }
        Workload {
            id: WlId(self.next_id),
            spec,
            team,
            priority,
            submit_time: now,
            state: WlState::Pending,
            pod_reqs,
            pinned,
            admission: None,
            admitted_at: None,
            conditions: Vec::new(),
            preemptions: 0,
            lost_run_ms: 0,
            preempting: None,
            preempting_flavors: None,
            eviction: None,
            attempt: 0,
            preempted_by: None,
            queued_shape: 0,
        }
    }

    /// Takes a workload out of the queue, or out of the quota it holds, before it ends: the
    /// workload to mark, or `None` when it had already ended (nothing to do).
    fn end(&mut self, id: WlId) -> Result<Option<&mut Workload>, StateError> {
        let st = self
            .workloads
            .get(&id)
            .map(|w| w.state)
            .ok_or_else(|| StateError::UnknownWorkload(format!("{id:?}")))?;
        match st {
            WlState::Pending => self.dequeue(id),
            s if s.holds_quota() => self.release(id),
            _ => return Ok(None),
        }
        Ok(wl_mut(&mut self.workloads, &id))
    }

    /// Drops a finished workload from the state altogether (its name can be used again).
    /// Anything else is left alone.
    pub fn forget_finished(&mut self, id: WlId) {
        if !self
            .workloads
            .get(&id)
            .is_some_and(|w| w.state.is_finished())
        {
            return;
        }
        if let Some(w) = self.workloads.remove(&id) {
            self.forgotten += 1;
            let key = (Arc::from(w.spec.name.as_str()), w.team);
            if self.by_name.get(&key) == Some(&id) {
                self.by_name.remove(&key);
            }
        }
    }

    /// Removes a workload: pending ones leave the queue, admitted ones release their quota.
    pub fn cancel(&mut self, id: WlId, now: Time) -> Result<Vec<Event>, StateError> {
        let Some(wl) = self.end(id)? else {
            return Ok(Vec::new());
        };
        wl.state = WlState::Cancelled;
        wl.set_condition(
            ConditionType::Finished,
            true,
            "Cancelled",
            "cancelled by the user",
            now,
        );
        Ok(vec![Event::Cancelled { wl: id }])
    }

    /// A workload ended on its own.
    pub fn finish(
        &mut self,
        id: WlId,
        succeeded: bool,
        now: Time,
    ) -> Result<Vec<Event>, StateError> {
        self.finish_with(id, succeeded, None, now)
    }

    /// `finish`, with what ended it in the Finished condition's message (a failed pod's
    /// reason) instead of the bare result.
    pub fn finish_with(
        &mut self,
        id: WlId,
        succeeded: bool,
        why: Option<&str>,
        now: Time,
    ) -> Result<Vec<Event>, StateError> {
        let Some(wl) = self.end(id)? else {
            return Ok(Vec::new());
        };
        wl.state = if succeeded {
            WlState::Succeeded
        } else {
            WlState::Failed
        };
        let reason = if succeeded { "Succeeded" } else { "Failed" };
        wl.set_condition(
            ConditionType::Finished,
            true,
            reason,
            &match why {
                Some(why) => format!("the workload {}: {why}", reason.to_lowercase()),
                None => format!("the workload {}", reason.to_lowercase()),
            },
            now,
        );
        Ok(vec![Event::Finished { wl: id, succeeded }])
    }

    /// Agents report the pods started.
    pub fn mark_running(&mut self, id: WlId) {
        if let Some(wl) = wl_mut(&mut self.workloads, &id) {
            if wl.state == WlState::Admitted {
                wl.state = WlState::Running;
            }
        }
    }

    /// A node failed or came back. Workloads with pods on a failed node are evicted and
    /// requeued.
    pub fn set_node_health(
        &mut self,
        name: &str,
        healthy: bool,
        now: Time,
    ) -> Result<Vec<Event>, StateError> {
        self.set_node_health_because(name, healthy, "", now)
    }

    /// `set_node_health` with the reason a node failed, for the evicted workloads' messages.
    pub fn set_node_health_because(
        &mut self,
        name: &str,
        healthy: bool,
        why: &str,
        now: Time,
    ) -> Result<Vec<Event>, StateError> {
        let node = self.node_named(name)?;
        let mut events = Vec::new();
        if !healthy {
            for id in self.workloads_on(node) {
                let msg = node_failed(name, why, "its pods were lost");
                events.extend(self.requeue_for_node_failure(id, msg, now));
            }
        }
        self.acct.nodes.set_health(node, healthy);
        self.rebuild();
        Ok(events)
    }

    /// Cordons a node (no new pods are placed on it; what runs there stays) or uncordons it.
    pub fn set_cordoned(&mut self, name: &str, cordoned: bool) -> Result<(), StateError> {
        let node = self.node_named(name)?;
        self.acct.nodes.set_cordoned(node, cordoned);
        self.rebuild();
        Ok(())
    }

    /// Drains a node: cordoned, and every workload with a pod on it evicted, keeping its room
    /// until its pods have stopped (with their grace period), then requeued to run elsewhere.
    pub fn drain_node(&mut self, name: &str, now: Time) -> Result<Vec<Event>, StateError> {
        self.set_cordoned(name, true)?;
        let node = self.node_named(name)?;
        let mut events = Vec::new();
        for id in self.workloads_on(node) {
            let msg = format!(
                "node {name} is being drained by an admin: its pods are being stopped, then it \
                 is requeued to run elsewhere"
            );
            events.extend(self.start_eviction(id, "NodeDrained", &msg, now));
        }
        Ok(events)
    }

    /// A node failed while pods may still run on it or on its workloads' other nodes: its
    /// workloads are evicted, but they keep their room until their pods are gone (see
    /// `Machine::node_failed`), so no replacement can start while a pod of theirs may run.
    pub fn fail_node_fenced(
        &mut self,
        name: &str,
        why: &str,
        now: Time,
    ) -> Result<Vec<Event>, StateError> {
        let node = self.node_named(name)?;
        let mut events = Vec::new();
        for id in self.workloads_on(node) {
            let msg = node_failed(name, why, "its pods are being stopped");
            events.extend(self.start_eviction(id, "NodeFailures", &msg, now));
        }
        self.acct.nodes.set_health(node, false);
        self.rebuild();
        Ok(events)
    }

    /// Evicts and requeues at once a workload whose node failed (its pods are gone).
    fn requeue_for_node_failure(&mut self, id: WlId, msg: String, now: Time) -> Vec<Event> {
        if let Some(wl) = wl_mut(&mut self.workloads, &id) {
            if wl.eviction.is_none() {
                wl.eviction = Some(("NodeFailures".into(), msg.clone()));
            }
            wl.set_condition(ConditionType::Evicted, true, "NodeFailures", &msg, now);
        }
        let mut events = vec![Event::Evicted {
            wl: id,
            reason: "NodeFailures".into(),
            message: msg,
        }];
        events.extend(self.complete_eviction(id, now));
        events
    }

    /// Queues again at once a workload that failed with auto-resume on (its pods are gone).
    pub fn requeue_after_failure(&mut self, id: WlId, msg: String, now: Time) -> Vec<Event> {
        if let Some(wl) = wl_mut(&mut self.workloads, &id) {
            wl.eviction = Some(("AutoResume".into(), msg.clone()));
            wl.set_condition(ConditionType::Evicted, true, "AutoResume", &msg, now);
        }
        let mut events = vec![Event::Evicted {
            wl: id,
            reason: "AutoResume".into(),
            message: msg,
        }];
        events.extend(self.complete_eviction(id, now));
        events
    }

    fn node_named(&self, name: &str) -> Result<NodeId, StateError> {
        self.acct
            .nodes
            .find(name)
            .ok_or_else(|| StateError::UnknownNode(name.to_string()))
    }

    /// Workloads holding room with a pod placed on `node`.
    pub fn workloads_on(&self, node: NodeId) -> Vec<WlId> {
        self.workloads
            .values()
            .filter(|w| w.state.holds_quota())
            .filter(|w| {
                w.admission
                    .as_ref()
                    .is_some_and(|a| a.placement.iter().any(|(_, p)| p.node == node))
            })
            .map(|w| w.id)
            .collect()
    }

    /// Starts evicting an admitted or running workload that no preemption chose (a device
    /// failed, one of its pods failed): its pods are stopped and it keeps its room until they
    /// are reported gone.
    pub fn start_eviction(
        &mut self,
        id: WlId,
        reason: &str,
        message: &str,
        now: Time,
    ) -> Vec<Event> {
        let Some(wl) = wl_mut(&mut self.workloads, &id) else {
            return Vec::new();
        };
        if !matches!(wl.state, WlState::Admitted | WlState::Running) {
            return Vec::new();
        }
        wl.state = WlState::Evicting;
        wl.eviction = Some((reason.to_string(), message.to_string()));
        wl.set_condition(ConditionType::Evicted, true, reason, message, now);
        vec![Event::Evicted {
            wl: id,
            reason: reason.to_string(),
            message: message.to_string(),
        }]
    }

    /// One device of a node turned unhealthy or healthy again. An unhealthy device is given to
    /// no new pod, and workloads with a pod on it are evicted (their pods stop, then they are
    /// requeued).
    pub fn set_device_health(
        &mut self,
        node_name: &str,
        resource: &ResourceName,
        index: u8,
        healthy: bool,
        reason: &str,
        now: Time,
    ) -> Result<Vec<Event>, StateError> {
        let node = self
            .acct
            .nodes
            .find(node_name)
            .ok_or_else(|| StateError::UnknownNode(node_name.to_string()))?;
        let r = self.names.resource(resource);
        let changed = self
            .acct
            .nodes
            .set_device_health(node, r, index, healthy)
            .map_err(StateError::Invalid)?;
        let mut events = Vec::new();
        if changed && !healthy {
            let hit: Vec<WlId> = self
                .workloads
                .values()
                .filter(|w| matches!(w.state, WlState::Admitted | WlState::Running))
                .filter(|w| {
                    w.admission.as_ref().is_some_and(|a| {
                        a.placement.iter().any(|(_, p)| {
                            p.node == node
                                && p.devices
                                    .iter()
                                    .any(|(dr, idx)| *dr == r && idx.contains(&index))
                        })
                    })
                })
                .map(|w| w.id)
                .collect();
            let msg = format!("{resource} {index} on node {node_name} is unhealthy: {reason}");
            for id in hit {
                events.extend(self.start_eviction(id, "DeviceFailure", &msg, now));
            }
        }
        if changed {
            self.rebuild();
        }
        Ok(events)
    }

    /// Puts a pending workload in its team's queue.
    fn enqueue(&mut self, id: WlId) {
        let wl = &self.workloads[&id];
        let (key, shown, t) = (wl.queue_key(), wl.shown(), wl.team.idx());
        self.shape_index(t).insert(&key, shown);
        if let Some(w) = wl_mut(&mut self.workloads, &id) {
            w.queued_shape = key.shape;
        }
        self.teams[t].enqueue(key);
    }

    fn dequeue(&mut self, id: WlId) {
        let wl = &self.workloads[&id];
        let (key, shown, t) = (wl.queue_key(), wl.shown(), wl.team.idx());
        // A parked workload (`park`) is pending out of its queue.
        if !self.teams[t].pending.contains(&key) {
            return;
        }
        self.shape_index(t).remove(&key, shown);
        self.teams[t].unqueue(&key);
    }

    /// Holds a pending workload out of its team's queue (gang readiness's backoff): it stays
    /// Pending, with `Requeued` False / `reason` and `message`, until `unpark`.
    pub fn park(&mut self, id: WlId, reason: &str, message: &str, now: Time) {
        if self.workloads.get(&id).map(|w| w.state) != Some(WlState::Pending) {
            return;
        }
        self.dequeue(id);
        if let Some(wl) = wl_mut(&mut self.workloads, &id) {
            wl.set_condition(ConditionType::Requeued, false, reason, message, now);
        }
    }

    /// Puts a parked workload back in its team's queue, with its original submit time.
    pub fn unpark(&mut self, id: WlId, now: Time) {
        if !self.workloads.get(&id).is_some_and(|w| w.is_parked()) {
            return;
        }
        if let Some(wl) = wl_mut(&mut self.workloads, &id) {
            wl.set_condition(
                ConditionType::Requeued,
                true,
                "BackoffFinished",
                "The workload backoff was finished",
                now,
            );
        }
        self.enqueue(id);
    }

    /// Gives queue entries whose shape another release fingerprinted this build's shape: a
    /// workload whose labels ask for a topology level, kept as plain labels by a release
    /// before topology, has another shape here. Called on a state read back from a snapshot.
    pub fn refresh_queue_shapes(&mut self) {
        for t in 0..self.teams.len() {
            let workloads = &self.workloads;
            let stale: Vec<(QueueKey, u128)> = self.teams[t]
                .pending
                .iter()
                .filter(|k| k.shape != 0)
                .filter_map(|k| {
                    let now = workloads.get(&k.id)?.shape_fingerprint();
                    (now != k.shape).then(|| (k.clone(), now))
                })
                .collect();
            if stale.is_empty() {
                continue;
            }
            let team = &mut self.teams[t];
            for (old, shape) in stale {
                team.unqueue(&old);
                team.enqueue(QueueKey { shape, ..old });
            }
            // Built again from the queue when next needed.
            team.shapes = ShapeIndex::default();
        }
    }

    /// Team `t`'s shape index, built first where the state was read back without it.
    fn shape_index(&mut self, t: usize) -> &mut ShapeIndex {
        if !self.teams[t].shapes.built {
            let workloads = &self.workloads;
            let team = &self.teams[t];
            let index = ShapeIndex::build(
                team.pending
                    .iter()
                    .map(|k| (k, workloads.get(&k.id).and_then(|w| w.shown()))),
            );
            self.teams[t].shapes = index;
        }
        &mut self.teams[t].shapes
    }

    /// Sets a pending workload's QuotaReserved condition to waiting with `reason` and
    /// `message`, keeping its team's shape index.
    fn set_waiting(&mut self, id: &WlId, reason: &Arc<str>, message: &Arc<str>, now: Time) {
        let Some(w) = self.workloads.get(id) else {
            return;
        };
        let (t, was) = (w.team.idx(), w.shown());
        let shape = match w.queued_shape {
            0 => w.shape_fingerprint(),
            s => s,
        };
        let Some(w) = wl_mut(&mut self.workloads, id) else {
            return;
        };
        w.set_condition_shared(ConditionType::QuotaReserved, false, reason, message, now);
        let now_shown = w.shown();
        if w.state == WlState::Pending {
            self.shape_index(t).change(shape, was, now_shown);
        }
    }

    /// Gives back a workload's quota and node allocations.
    fn release(&mut self, id: WlId) {
        let Some(wl) = wl_mut(&mut self.workloads, &id) else {
            return;
        };
        let team = wl.team;
        if let Some(adm) = wl.admission.take() {
            for (_, p) in &adm.placement {
                self.acct.nodes.release(p);
            }
            let usage = adm.usage;
            // `add_all` needs &State; split the borrow by taking the acct out briefly.
            let mut acct = std::mem::take(&mut self.acct);
            acct.add_all(self, team, &usage, -1);
            self.acct = acct;
            // An excess left by a shrunk pool only ever shrinks (up a tree, at every level).
            let mut at = Some(self.teams[team.idx()].cohort);
            while let Some(c) = at {
                let now_excess = self.current_excess(c.idx());
                if let Some(allow) = self.pool_excess.get_mut(c.idx()) {
                    for (i, v) in allow.0.iter_mut().enumerate() {
                        *v = (*v).min(now_excess.get(FrId(i as u32)));
                    }
                }
                at = self.cohorts[c.idx()].tree.parent;
            }
            let team_now = self.current_team_excess(team.idx());
            if let Some(allow) = self.team_excess.get_mut(team.idx()) {
                for (i, v) in allow.0.iter_mut().enumerate() {
                    *v = (*v).min(team_now.get(FrId(i as u32)));
                }
            }
        }
        Arc::make_mut(&mut self.teams[team.idx()].admitted).remove(&id);
    }

    /// Eviction finished (pods gone): quota is released and the workload is requeued with its
    /// original submit time.
    pub fn complete_eviction(&mut self, id: WlId, now: Time) -> Vec<Event> {
        let Some(state) = self.workloads.get(&id).map(|w| w.state) else {
            return Vec::new();
        };
        if !state.holds_quota() {
            return Vec::new();
        }
        self.release(id);
        let wl = wl_mut(&mut self.workloads, &id).expect("present above");
        wl.state = WlState::Pending;
        wl.admitted_at = None;
        let (reason, msg) = wl
            .eviction
            .take()
            .unwrap_or_else(|| ("Evicted".into(), String::new()));
        wl.set_condition(ConditionType::QuotaReserved, false, "Pending", &msg, now);
        wl.set_condition(
            ConditionType::Admitted,
            false,
            "NoReservation",
            "The workload has no reservation",
            now,
        );
        wl.set_condition(
            ConditionType::Requeued,
            true,
            &reason,
            "requeued with its original submit time",
            now,
        );
        self.enqueue(id);
        vec![Event::Requeued { wl: id }]
    }

    // ---------------------------------------------------------------- applying plans

    /// Applies a scheduling plan: pending messages, evictions (started, not completed), then
    /// admissions, each of which is checked again with the same `fits` and applied whole or not
    /// at all.
    pub fn apply_plan(&mut self, plan: &Plan, now: Time) -> Vec<Event> {
        let mut events = Vec::new();
        for t in 0..self.teams.len() {
            self.shape_index(t);
        }
        // Last cycle's preemptors lose their head start: it was for this cycle only.
        for id in std::mem::take(&mut self.preemptors) {
            if let Some(w) = wl_mut(&mut self.workloads, &id) {
                w.preempting = None;
                w.preempting_flavors = None;
            }
        }
        let mut order: u32 = 0;
        for (id, reason, message) in &plan.pending {
            // Most messages repeat what the workload shows: those need no copy of it.
            let shows =
                |w: &Workload| w.state != WlState::Pending || w.shows_pending(reason, message);
            if self.workloads.get(id).is_none_or(|w| shows(w)) {
                continue;
            }
            let (reason, message) = (self.texts.share(reason), self.texts.share(message));
            self.set_waiting(id, &reason, &message, now);
        }
        // The plan's preemptors go first in the next cycle, in the order this cycle took them:
        // those that chose victims now, and those still waiting for victims that are stopping
        // (a grace period), which so keep their head start until the victims are gone, as Kueue
        // keeps such a preemptor at its queue's head.
        for (id, reason, _) in &plan.pending {
            if &**reason != crate::plan::WAITING_FOR_VICTIMS {
                continue;
            }
            if let Some(w) = wl_mut(&mut self.workloads, id) {
                if w.state == WlState::Pending && w.preempting.is_none() {
                    w.preempting = Some(order);
                    order += 1;
                    self.preemptors.insert(*id);
                }
            }
        }
        for p in &plan.preemptions {
            // A plan computed on an older state (the leader computes large cycles off its raft
            // thread) may name a preemptor that has since been cancelled or admitted: its
            // victims are left alone.
            if self
                .workloads
                .get(&p.preemptor)
                .is_none_or(|w| w.state != WlState::Pending)
            {
                continue;
            }
            let Some(victim) = self.workloads.get(&p.victim) else {
                continue;
            };
            if matches!(victim.state, WlState::Admitted | WlState::Running) {
                let v = wl_mut(&mut self.workloads, &p.victim).expect("checked");
                v.state = WlState::Evicting;
                v.preemptions += 1;
                v.lost_run_ms += v.ran_for(now);
                v.eviction = Some(("Preempted".into(), p.message.clone()));
                v.preempted_by = Some(PreemptedBy {
                    preemptor: p.preemptor,
                    reason: p.reason,
                    message: p.message.clone(),
                    time: now,
                });
                v.set_condition(ConditionType::Evicted, true, "Preempted", &p.message, now);
                v.set_condition(
                    ConditionType::Preempted,
                    true,
                    p.reason.as_str(),
                    &p.message,
                    now,
                );
                if self.preempted_at.0 != now {
                    self.preempted_at = (now, Vec::new());
                }
                self.preempted_at.1.push(p.victim);
                events.push(Event::Preempted {
                    wl: p.victim,
                    by: p.preemptor,
                    reason: p.reason,
                    message: p.message.clone(),
                });
            }
            if let Some(w) = wl_mut(&mut self.workloads, &p.preemptor) {
                if w.preempting.is_none() {
                    w.preempting = Some(order);
                    order += 1;
                    self.preemptors.insert(p.preemptor);
                }
            }
        }
        for (id, flavors) in &plan.targets {
            if let Some(w) = wl_mut(&mut self.workloads, id) {
                if w.preempting.is_some() {
                    w.preempting_flavors = Some(flavors.clone());
                }
            }
        }
        for a in &plan.admissions {
            match self.admit(a.wl, &a.admission, now) {
                Ok(ev) => events.extend(ev),
                Err(message) => {
                    self.set_waiting(&a.wl, &"Pending".into(), &message.as_str().into(), now);
                    events.push(Event::AdmissionRetried { wl: a.wl, message });
                }
            }
        }
        events
    }

    /// Checks an admission against the current state with the shared `fits` (quota) and exact
    /// device re-take (placement), then commits it. Nothing changes when it fails.
    pub fn admit(&mut self, id: WlId, adm: &Admission, now: Time) -> Result<Vec<Event>, String> {
        self.admit_checked(id, adm, now, true)
    }

    /// An admission the cluster already holds, taken as it is even where it exceeds the quota
    /// now (a quota lowered, a node lost: `allot simulate`'s `admitted` workloads, as Kueue
    /// accepts such a state); the rules then preempt what runs over. The placement must still
    /// fit the nodes: pods cannot run where there is no room.
    pub fn admit_over_quota(
        &mut self,
        id: WlId,
        adm: &Admission,
        now: Time,
    ) -> Result<Vec<Event>, String> {
        let events = self.admit_checked(id, adm, now, false)?;
        // What runs over quota now is counted in the excess the rules read, as a live
        // cluster's quota change counts it.
        self.rebuild();
        Ok(events)
    }

    fn admit_checked(
        &mut self,
        id: WlId,
        adm: &Admission,
        now: Time,
        check_quota: bool,
    ) -> Result<Vec<Event>, String> {
        let wl = self
            .workloads
            .get(&id)
            .ok_or_else(|| format!("workload {id:?} does not exist"))?;
        if wl.state != WlState::Pending {
            return Err(format!(
                "workload {} is {}, not Pending",
                wl.spec.name,
                wl.state.as_str()
            ));
        }
        if wl.is_parked() {
            return Err(format!(
                "workload {} waits out a backoff and is not in its queue",
                wl.spec.name
            ));
        }
        let team = wl.team;
        check_admission(self, wl, adm)?;
        if check_quota {
            quota::fits(self, &self.acct, team, &adm.usage, true).map_err(|s| {
            format!(
                "admission no longer fits at apply time: {} requested {}, available {}; it will be retried",
                self.names.describe_fr(s.fr),
                    s.requested,
                    s.available
                )
            })?;
        }
        let mut taken: Vec<&PodAlloc> = Vec::new();
        for (_, p) in &adm.placement {
            if let Err(e) = self.acct.nodes.take_exact(p) {
                for t in taken {
                    self.acct.nodes.release(t);
                }
                return Err(format!(
                    "placement no longer fits at apply time: {e}; it will be retried"
                ));
            }
            taken.push(p);
        }
        let mut acct = std::mem::take(&mut self.acct);
        acct.add_all(self, team, &adm.usage, 1);
        self.acct = acct;
        self.dequeue(id);
        let team_name = self.teams[team.idx()].name().to_string();
        let wl = wl_mut(&mut self.workloads, &id).expect("checked");
        wl.state = WlState::Admitted;
        wl.admission = Some(adm.clone());
        wl.admitted_at = Some(now);
        wl.attempt += 1;
        wl.preempting = None;
        wl.preempting_flavors = None;
        self.preemptors.remove(&id);
        wl.set_condition(
            ConditionType::QuotaReserved,
            true,
            "QuotaReserved",
            &format!("Quota reserved in team {team_name}"),
            now,
        );
        wl.set_condition(
            ConditionType::Admitted,
            true,
            "Admitted",
            "The workload is admitted",
            now,
        );
        if let Some(c) = wl.conditions.iter_mut().find(|c| {
            (c.kind == ConditionType::Evicted.as_str()
                || c.kind == ConditionType::Preempted.as_str())
                && c.status
        }) {
            c.status = false;
            c.message = format!("Previously: {}", c.message).into();
            c.reason = "QuotaReserved".into();
            c.time = now;
        }
        Arc::make_mut(&mut self.teams[team.idx()].admitted).insert(id);
        Ok(vec![Event::Admitted { wl: id }])
    }

    /// Builds the admission of a workload on the given flavor per resource (every pod set at full
    /// count), placing pods when the state has nodes. Used to load already-admitted workloads.
    pub fn admission_on(
        &mut self,
        id: WlId,
        flavor_of: &dyn Fn(&ResourceName) -> Option<String>,
    ) -> Result<Admission, String> {
        let wl = self.workloads.get(&id).ok_or("unknown workload")?.clone();
        let mut placement = Vec::new();
        let built = self.admission_parts(&wl, flavor_of, &mut placement);
        // Placed only to be checked: given back whether or not every pod set fitted.
        for (_, p) in placement.iter().rev() {
            self.acct.nodes.release(p);
        }
        let (pod_sets, usage) = built?;
        let usage: Vec<(FrId, i64)> = usage.into_iter().collect();
        let borrowed = quota::borrowed_part(self, &self.acct, wl.team, &usage);
        Ok(Admission {
            pod_sets,
            usage,
            placement,
            borrowed,
        })
    }

    /// `admission_on`'s pod sets and usage; the pods it placed are in `placement` (also when it
    /// fails part way), for the caller to give back.
    fn admission_parts(
        &mut self,
        wl: &Workload,
        flavor_of: &dyn Fn(&ResourceName) -> Option<String>,
        placement: &mut Vec<(usize, PodAlloc)>,
    ) -> Result<(Vec<PodSetAdmission>, BTreeMap<FrId, i64>), String> {
        let mut pod_sets = Vec::new();
        let mut usage: BTreeMap<FrId, i64> = BTreeMap::new();
        for (i, ps) in wl.spec.pod_sets.iter().enumerate() {
            let mut flavors = Vec::new();
            let mut placed_flavor = None;
            for (r, v) in &wl.pod_reqs[i] {
                let rname = self.names.resource_name(*r).clone();
                let fname = flavor_of(&rname)
                    .ok_or_else(|| format!("no flavor given for resource {rname}"))?;
                let f = self
                    .names
                    .find_flavor(&fname)
                    .ok_or_else(|| format!("flavor {fname} is not in any quota"))?;
                let fr = self
                    .names
                    .find_fr(f, *r)
                    .ok_or_else(|| format!("team has no quota for {rname} in flavor {fname}"))?;
                *usage.entry(fr).or_insert(0) += v * i64::from(ps.count);
                flavors.push((*r, f));
                placed_flavor = Some(f);
            }
            if self.placement {
                if let Some(f) = placed_flavor {
                    let allocs = self
                        .acct
                        .nodes
                        .place_in(f, &wl.pod_reqs[i], ps.count, wl.topology())
                        .map_err(|e| {
                            format!(
                                "pod set {} does not fit on the nodes ({} of {} pods placed)",
                                ps.name, e.placed, e.wanted
                            )
                        })?;
                    placement.extend(allocs.into_iter().map(|a| (i, a)));
                }
            }
            pod_sets.push(PodSetAdmission {
                name: ps.name.clone(),
                count: ps.count,
                flavors,
            });
        }
        Ok((pod_sets, usage))
    }
}

/// Structural checks of an admission against its workload (pod counts, usage consistent with
/// requests, placement present when required).
fn check_admission(st: &State, wl: &Workload, adm: &Admission) -> Result<(), String> {
    if adm.pod_sets.len() != wl.spec.pod_sets.len() {
        return Err(format!(
            "admission of {} has {} pod sets, the workload {}",
            wl.spec.name,
            adm.pod_sets.len(),
            wl.spec.pod_sets.len()
        ));
    }
    let mut expect: BTreeMap<FrId, i64> = BTreeMap::new();
    for (i, (psa, ps)) in adm.pod_sets.iter().zip(&wl.spec.pod_sets).enumerate() {
        if psa.count > ps.count || psa.count < ps.min_count.unwrap_or(ps.count) {
            return Err(format!(
                "pod set {}: count {} outside {}..={}",
                ps.name,
                psa.count,
                ps.min_count.unwrap_or(ps.count),
                ps.count
            ));
        }
        for (r, v) in &wl.pod_reqs[i] {
            let f = psa
                .flavors
                .iter()
                .find(|(rr, _)| rr == r)
                .map(|(_, f)| *f)
                .ok_or_else(|| {
                    format!(
                        "pod set {}: no flavor for {}",
                        ps.name,
                        st.names.resource_name(*r)
                    )
                })?;
            let fr = st
                .names
                .find_fr(f, *r)
                .ok_or_else(|| "no quota for the assigned flavor".to_string())?;
            *expect.entry(fr).or_insert(0) += v * i64::from(psa.count);
        }
        if st.placement {
            let pods = adm.placement.iter().filter(|(k, _)| *k == i).count();
            if pods != psa.count as usize && !wl.pod_reqs[i].is_empty() {
                return Err(format!(
                    "pod set {}: {} pods placed, {} admitted",
                    ps.name, pods, psa.count
                ));
            }
        }
    }
    let expect: Vec<(FrId, i64)> = expect.into_iter().collect();
    if expect != adm.usage {
        return Err(format!(
            "admission of {}: usage does not match its requests",
            wl.spec.name
        ));
    }
    Ok(())
}

/// The message of a workload evicted because its node failed.
fn node_failed(name: &str, why: &str, pods: &str) -> String {
    if why.is_empty() {
        format!("node {name} failed; {pods}")
    } else {
        format!("node {name} failed ({why}); {pods}")
    }
}

/// A workload to change: its own copy once a copy of the state shares it.
fn wl_mut<'a>(workloads: &'a mut WlMap<Arc<Workload>>, id: &WlId) -> Option<&'a mut Workload> {
    workloads.get_mut(id).map(Arc::make_mut)
}

impl State {
    /// What applying `plan` to this state changes, as a plan: its canonical form
    /// (`Plan::canonical`) with only the pending messages that change something
    /// (`retain_changed_pending`), and no count of entries considered. Two cycles whose plans
    /// have the same effect leave the same state: the fast cycle lists no entry of a shape whose
    /// every entry already shows its wait, where the reference lists each one.
    pub fn plan_effect(&self, plan: &Plan) -> Plan {
        let mut plan = plan.canonical();
        self.retain_changed_pending(&mut plan);
        plan.considered = 0;
        plan
    }

    /// Drops the pending messages that this state already shows, keeping only those that change
    /// something when applied: new or changed reasons and messages, and every preemptor's
    /// `WAITING_FOR_VICTIMS` (its order among them is its head start in the next cycle). A
    /// cycle repeats most messages unchanged; logging each of them again made the replicated
    /// log grow with the backlog times the number of plans. Applying the result does exactly
    /// what applying the whole plan would.
    pub fn retain_changed_pending(&self, plan: &mut Plan) {
        plan.pending.retain(|(id, reason, message)| {
            &**reason == crate::plan::WAITING_FOR_VICTIMS
                || self.workloads.get(id).is_some_and(|w| {
                    w.state == WlState::Pending && !w.shows_pending(reason, message)
                })
        });
    }
}

/// Checks that every admission of `plan` fits `state` when applied in order (same quota `fits`
/// and exact device re-take as `State::admit`). Returns one result per admission.
pub fn verify(state: &State, plan: &Plan) -> Vec<Result<(), String>> {
    let mut scratch = state.clone();
    plan.admissions
        .iter()
        .map(|a| scratch.admit(a.wl, &a.admission, 0).map(|_| ()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_common::quota::FlavorQuota;

    /// A queue entry written by a release whose fingerprint did not count a workload's
    /// topology ask gets this build's shape when the state is read back.
    #[test]
    fn queue_shapes_of_another_release_are_refreshed() {
        let mut st = State::new(ClusterPolicy::default());
        let quota = FlavorQuota {
            flavor: "p5".into(),
            resources: vec![(ResourceName::gpu(), ResourceQuota::default())],
        };
        st.set_team(TeamSpec::new("a", vec![quota])).unwrap();
        let mut pod = allot_common::PodSet {
            name: "main".into(),
            count: 2,
            min_count: None,
            requests: allot_common::Resources::new(),
        };
        pod.requests.set(ResourceName::gpu(), 1);
        let spec = WorkloadSpec {
            name: "w".into(),
            team: "a".into(),
            priority: allot_common::PriorityRef::None,
            instance_type: None,
            pod_sets: vec![pod],
            labels: [(
                allot_common::topology::REQUIRED_LABEL.to_string(),
                "rack".to_string(),
            )]
            .into(),
            array: None,
        };
        let (id, _) = st.submit(spec, 0).unwrap();
        let fresh = st.workload(id).shape_fingerprint();
        let team = &mut st.teams[0];
        let key = team.pending.iter().next().cloned().unwrap();
        assert_eq!(key.shape, fresh);
        team.unqueue(&key);
        team.enqueue(QueueKey {
            shape: fresh ^ 1,
            ..key
        });
        st.refresh_queue_shapes();
        let key = st.teams[0].pending.iter().next().cloned().unwrap();
        assert_eq!(key.shape, fresh);
        assert!(crate::invariants::check(&st).is_ok());
    }
}

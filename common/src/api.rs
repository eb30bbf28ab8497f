//! The coordinator's API: what clients (the CLI, agents, `allot bench`) send and get back.
//! Encoded by `wire`; every request carries the protocol version it was written for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hyperpod::ComputeQuotaConfig;
use crate::policy::Stability;
use crate::resource::Resources;
use crate::workload::WorkloadSpec;

/// How to run a workload's pods (the agent's part; the scheduler ignores it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Program and arguments. Empty = the workload only holds its allocation (without an
    /// image) or runs the image's entrypoint (with one).
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// Seconds between SIGTERM and SIGKILL on eviction (default 30).
    pub grace_seconds: Option<u32>,
    /// An OCI image to run the pods from (the agent's `containerd` driver); `None`: the program
    /// runs as a process on the node (the `process` driver).
    pub image: Option<String>,
    /// Arguments: with an image they replace its cmd (as a Kubernetes container's `args`);
    /// without one they follow `command`.
    pub args: Vec<String>,
    /// Host paths (datasets, checkpoints) mounted into the pods' containers.
    pub mounts: Vec<HostMount>,
    /// Size of the containers' `/dev/shm` in bytes (default 64 MiB).
    pub shm_size: Option<u64>,
    /// Run the containers in the node's network namespace (multi-node NCCL and EFA need it).
    pub host_network: bool,
    /// `uid[:gid]` the containers run as (default: the image's user).
    pub user: Option<String>,
}

/// A host path mounted into a pod's container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMount {
    pub host_path: String,
    pub container_path: String,
    pub read_only: bool,
}

impl RunSpec {
    /// The program a process-driver pod runs: the command, then the arguments.
    pub fn program(&self) -> Vec<String> {
        self.command.iter().chain(&self.args).cloned().collect()
    }

    /// Refuses what no agent could run; errors name the field and what is accepted.
    pub fn check(&self) -> Result<(), String> {
        if let Some(i) = &self.image {
            crate::image::Reference::parse(i)?;
        } else {
            let needs_image = [
                (!self.mounts.is_empty(), "mounts"),
                (self.shm_size.is_some(), "shm_size"),
                (self.host_network, "host_network"),
                (self.user.is_some(), "user"),
            ];
            if let Some((_, field)) = needs_image.iter().find(|(set, _)| *set) {
                return Err(format!(
                    "{field} applies to containers: give the workload an image (without one its \
                     pods run as processes on the node's own filesystem and network)"
                ));
            }
        }
        if self.mounts.len() > crate::image::MAX_MOUNTS {
            return Err(format!(
                "mounts: {} given, at most {} accepted",
                self.mounts.len(),
                crate::image::MAX_MOUNTS
            ));
        }
        for m in &self.mounts {
            for (what, p) in [
                ("host_path", &m.host_path),
                ("container_path", &m.container_path),
            ] {
                let ok = p.starts_with('/')
                    && p.len() <= 4096
                    && !p.split('/').any(|c| c == "..")
                    && !p.contains(['\0', ',', ':']);
                if !ok {
                    return Err(format!(
                        "mount {what} {p:?}: an absolute path without '..', ',' or ':' is accepted"
                    ));
                }
            }
            if m.container_path == "/" {
                return Err(
                    "mount container_path \"/\": the image's root cannot be replaced".into(),
                );
            }
        }
        if let Some(s) = self.shm_size {
            if s == 0 || s > crate::image::MAX_SHM_BYTES {
                return Err(format!(
                    "shm_size {s}: between 1 byte and {} bytes (1Ti) is accepted",
                    crate::image::MAX_SHM_BYTES
                ));
            }
        }
        if let Some(u) = &self.user {
            crate::image::parse_user_spec(u)?;
        }
        Ok(())
    }
}

/// Whether a compute quota is in force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActivationState {
    #[default]
    Enabled,
    Disabled,
}

impl ActivationState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ActivationState::Enabled => "Enabled",
            ActivationState::Disabled => "Disabled",
        }
    }
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "Enabled" => Ok(ActivationState::Enabled),
            "Disabled" => Ok(ActivationState::Disabled),
            o => Err(format!(
                "activation state {o:?} is not one of Enabled, Disabled"
            )),
        }
    }
}

/// `create-compute-quota` / `update-compute-quota`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeQuotaInput {
    pub name: String,
    pub description: Option<String>,
    pub team: String,
    pub fair_share_weight: u32,
    pub config: ComputeQuotaConfig,
    pub activation: ActivationState,
}

/// A compute quota as `describe-compute-quota` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeQuotaView {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub team: String,
    pub fair_share_weight: u32,
    /// The configuration in the AWS CLI shorthand.
    pub config: String,
    pub activation: ActivationState,
    pub version: u64,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// The cluster scheduler configuration as `describe-cluster-scheduler-config` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerConfigView {
    pub name: String,
    pub config: String,
    /// `--description`, as given.
    #[serde(default)]
    pub description: Option<String>,
    pub version: u64,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// allot's admission limits (not part of the AWS API).
    #[serde(default)]
    pub limits: AdmissionLimits,
    /// allot's stability rules (not part of the AWS API).
    #[serde(default)]
    pub stability: Stability,
}

/// How much one team or one user may ask of the cluster: allot's addition to the cluster
/// policy, set with the scheduler config and shown by `describe-cluster-scheduler-config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionLimits {
    /// Pending workloads one team may have; a submit past it is refused.
    pub max_pending_per_team: u32,
    /// Workloads one user certificate may submit per second, on average (admins are not
    /// limited: they can change the limits anyway).
    pub submits_per_second: u32,
    /// How many a user may submit at once before the rate applies (an array counts each
    /// element).
    pub submit_burst: u32,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        // Slurm's default MaxJobCount is 10,000 for a whole cluster; a user submitting 100
        // workloads a second for a minute already queues 6,000.
        AdmissionLimits {
            max_pending_per_team: 10_000,
            submits_per_second: 100,
            submit_burst: 1_000,
        }
    }
}

/// Changes to the stability rules ([`Stability`]): what is `None` stays as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StabilityInput {
    pub minimum_run_time_s: Option<u32>,
    pub preemption_budget: Option<u32>,
}

impl StabilityInput {
    /// `base` with this change applied, checked (`Stability::validate`).
    pub fn apply(&self, base: Stability) -> Result<Stability, String> {
        let out = Stability {
            minimum_run_time_s: self.minimum_run_time_s.unwrap_or(base.minimum_run_time_s),
            preemption_budget: self.preemption_budget.unwrap_or(base.preemption_budget),
        };
        out.validate().map_err(|e| e.to_string())?;
        Ok(out)
    }
}

/// Changes to [`AdmissionLimits`]: what is `None` stays as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionLimitsInput {
    pub max_pending_per_team: Option<u32>,
    pub submits_per_second: Option<u32>,
    pub submit_burst: Option<u32>,
}

impl AdmissionLimits {
    /// Largest value of any limit: beyond it a limit stops meaning anything.
    pub const MAX: u32 = 1_000_000_000;

    /// `self` with `change` applied, checked: every limit from 1 to [`Self::MAX`].
    pub fn with(self, change: &AdmissionLimitsInput) -> Result<AdmissionLimits, String> {
        let out = AdmissionLimits {
            max_pending_per_team: change
                .max_pending_per_team
                .unwrap_or(self.max_pending_per_team),
            submits_per_second: change.submits_per_second.unwrap_or(self.submits_per_second),
            submit_burst: change.submit_burst.unwrap_or(self.submit_burst),
        };
        for (flag, v) in [
            ("--max-pending-per-team", out.max_pending_per_team),
            ("--submits-per-second", out.submits_per_second),
            ("--submit-burst", out.submit_burst),
        ] {
            if !(1..=Self::MAX).contains(&v) {
                return Err(format!(
                    "{flag} {v} is out of range: use 1 to {} (allot's admission limits)",
                    Self::MAX
                ));
            }
        }
        Ok(out)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionView {
    pub kind: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
    pub time_ms: i64,
}

/// Where one pod runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodView {
    pub pod_set: String,
    pub index: u32,
    pub node: String,
    /// Device indices per device resource (`gpu` → [0, 1]).
    pub devices: BTreeMap<String, Vec<u8>>,
    /// When its agent reported it started (this attempt).
    pub started_ms: Option<i64>,
    /// When its agent reported it ended.
    pub ended_ms: Option<i64>,
    pub exit_code: Option<i32>,
    /// Succeeded, Failed or Lost, once ended, with the agent's detail.
    pub outcome: Option<String>,
    /// What the pod is doing before it runs, as its agent last said (`Pulling ... 40%`,
    /// `Creating`); soft state, held by the replica the agent told, for a minute.
    pub status: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadView {
    pub id: u64,
    pub name: String,
    pub team: String,
    pub priority: i32,
    pub priority_class: Option<String>,
    pub state: String,
    pub submitted_ms: i64,
    pub admitted_ms: Option<i64>,
    /// Flavor per resource of each pod set, once admitted.
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    pub pods: Vec<PodView>,
    pub requests: Resources,
    pub count: u32,
    pub preemptions: u32,
    /// The run time its preemptions threw away, in milliseconds.
    #[serde(default)]
    pub lost_run_ms: i64,
    pub conditions: Vec<ConditionView>,
    pub run: Option<RunSpec>,
    pub labels: BTreeMap<String, String>,
    /// The array it is an element of, and its index there.
    pub array: Option<(String, u32)>,
    /// When it finished (succeeded, failed, cancelled).
    pub finished_ms: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub instance_type: String,
    pub healthy: bool,
    pub cordoned: bool,
    pub capacity: Resources,
    pub used: Resources,
    /// Why it is unhealthy (lease expired, reported by its agent), empty when healthy.
    pub reason: String,
    /// What its agent discovered (empty for nodes registered by hand).
    pub devices: Vec<DeviceInfo>,
    /// Its agent's HTTP address (metrics), empty without an agent.
    pub http: String,
    /// What `get nodes` shows: `Ready`, `Cordoned` or `Unhealthy`.
    pub status: String,
    /// Where each capacity figure came from (see [`NodeReport::sources`]); `registered` for a
    /// node registered by hand.
    pub sources: BTreeMap<String, String>,
}

/// A node's status as `get nodes` shows it.
pub fn node_status(healthy: bool, cordoned: bool) -> &'static str {
    if !healthy {
        "Unhealthy"
    } else if cordoned {
        "Cordoned"
    } else {
        "Ready"
    }
}

/// One team's standing: quota, usage, what it borrows and lends, its weighted share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeamView {
    pub name: String,
    pub cohort: Option<String>,
    pub fair_share_weight: u32,
    /// Nominal quota summed over flavors, per resource.
    pub nominal: Resources,
    pub usage: Resources,
    pub borrowed: Resources,
    pub lent: Resources,
    /// `None` = infinite (weight 0 while borrowing).
    pub weighted_share: Option<f64>,
    pub pending: u32,
    pub admitted: u32,
}

/// One device an agent discovered (a GPU, a Neuron device, an EFA interface).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The resource it counts toward: `gpu`, `neuron` or `efa`.
    pub resource: String,
    /// The index workloads see (`CUDA_VISIBLE_DEVICES`, `NEURON_RT_VISIBLE_CORES` base).
    pub index: u32,
    /// Stable identity: the GPU UUID, the Neuron device or EFA interface name.
    pub id: String,
    /// Model name (`NVIDIA H100 80GB HBM3`, `Trainium2`, `efa_0`).
    pub model: String,
    pub memory_mib: u64,
    pub pci_bus_id: String,
    /// MIG mode enabled (GPUs).
    pub mig: bool,
    /// Cores per device (Neuron).
    pub cores: u32,
    pub healthy: bool,
    /// Why it is unhealthy (`XID 79: GPU has fallen off the bus`), empty when healthy.
    pub reason: String,
}

/// What an agent reports about its node: at registration and whenever the inventory changes.
///
/// Encoded in two layouts (`crate::layout`): without `topology` for the formats and protocols
/// from before topology levels, with it from then on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReport {
    pub name: String,
    pub instance_type: String,
    pub capacity: Resources,
    pub devices: Vec<DeviceInfo>,
    /// Where gang peers reach this node (`MASTER_ADDR` when it hosts rank 0).
    pub address: String,
    /// The agent's HTTP address (metrics, logs).
    pub http: String,
    /// How long the agent keeps running work without reaching a coordinator quorum.
    pub lease_ms: u64,
    pub agent_version: String,
    /// Where each capacity figure came from, by resource: `catalog`, `host` (sysinfo), `nvml`,
    /// `sysfs` or `fake`.
    pub sources: BTreeMap<String, String>,
    /// The node's network topology, level → domain (`crate::topology`).
    pub topology: crate::topology::NodeTopology,
}

/// The report as written from layout 2 on (and in every human-readable form).
#[derive(Serialize, Deserialize)]
#[serde(rename = "NodeReport")]
struct ReportNow {
    name: String,
    instance_type: String,
    capacity: Resources,
    devices: Vec<DeviceInfo>,
    address: String,
    http: String,
    lease_ms: u64,
    agent_version: String,
    #[serde(default)]
    sources: BTreeMap<String, String>,
    #[serde(default)]
    topology: crate::topology::NodeTopology,
}

/// The report as layouts 0 and 1 wrote it: before topology levels.
#[derive(Serialize, Deserialize)]
#[serde(rename = "NodeReport")]
struct ReportBefore {
    name: String,
    instance_type: String,
    capacity: Resources,
    devices: Vec<DeviceInfo>,
    address: String,
    http: String,
    lease_ms: u64,
    agent_version: String,
    #[serde(default)]
    sources: BTreeMap<String, String>,
}

impl Serialize for NodeReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.clone();
        if s.is_human_readable() || crate::layout::current() >= crate::layout::TOPOLOGY {
            return ReportNow {
                name: r.name,
                instance_type: r.instance_type,
                capacity: r.capacity,
                devices: r.devices,
                address: r.address,
                http: r.http,
                lease_ms: r.lease_ms,
                agent_version: r.agent_version,
                sources: r.sources,
                topology: r.topology,
            }
            .serialize(s);
        }
        if !r.topology.is_empty() {
            return Err(serde::ser::Error::custom(
                "a node report with topology levels cannot be written for a release before \
                 them (cluster format 6, request protocol 7)",
            ));
        }
        ReportBefore {
            name: r.name,
            instance_type: r.instance_type,
            capacity: r.capacity,
            devices: r.devices,
            address: r.address,
            http: r.http,
            lease_ms: r.lease_ms,
            agent_version: r.agent_version,
            sources: r.sources,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for NodeReport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() || crate::layout::current() >= crate::layout::TOPOLOGY {
            let r = ReportNow::deserialize(d)?;
            return Ok(NodeReport {
                name: r.name,
                instance_type: r.instance_type,
                capacity: r.capacity,
                devices: r.devices,
                address: r.address,
                http: r.http,
                lease_ms: r.lease_ms,
                agent_version: r.agent_version,
                sources: r.sources,
                topology: r.topology,
            });
        }
        let r = ReportBefore::deserialize(d)?;
        Ok(NodeReport {
            name: r.name,
            instance_type: r.instance_type,
            capacity: r.capacity,
            devices: r.devices,
            address: r.address,
            http: r.http,
            lease_ms: r.lease_ms,
            agent_version: r.agent_version,
            sources: r.sources,
            topology: Default::default(),
        })
    }
}

/// One pod a node should run (or stop), as the coordinator has committed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodAssignment {
    pub workload: String,
    pub workload_id: u64,
    /// Which admission of the workload this is (1 for the first); with the id and rank it names
    /// one process, so a stale instruction never starts anything twice.
    pub attempt: u32,
    pub team: String,
    /// Global pod index across the workload's pod sets.
    pub rank: u32,
    /// Index among this workload's pods on this node.
    pub local_rank: u32,
    pub world_size: u32,
    pub pod_set: String,
    /// Device indices per device resource.
    pub devices: BTreeMap<String, Vec<u8>>,
    /// What one pod requests (for cgroup limits).
    pub requests: Resources,
    pub master_addr: String,
    pub master_port: u16,
    pub run: RunSpec,
    /// Set while the workload is being evicted: stop the pod (SIGTERM, grace, SIGKILL) and
    /// report it exited.
    pub stop: Option<String>,
    /// The team's credentials for the registry of `run.image`, when it has some.
    pub registry_credentials: Option<crate::image::Credentials>,
}

/// Everything a node should be doing, and whether the coordinator counts it as healthy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAssignments {
    /// Fingerprint of `pods`: an agent that sends it back waits for a change.
    pub digest: u64,
    pub registered: bool,
    pub healthy: bool,
    pub health_reason: String,
    pub pods: Vec<PodAssignment>,
}

/// How one pod ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodExit {
    pub rank: u32,
    pub succeeded: bool,
    /// Stopped by the node, not by its own failure (the lease ran out, the agent lost it): the
    /// workload is requeued, not failed.
    pub lost: bool,
    /// `exit code 1`, `killed by signal 9`, `not running after agent restart`.
    pub detail: String,
    /// The process's exit code (128 + the signal when a signal ended it); none when it never
    /// ran or its end is unknown.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// Which workloads `get workloads` lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadFilter {
    pub team: Option<String>,
    /// Include finished and cancelled workloads.
    pub all: bool,
}

/// A workload to submit, as `allot submit -f job.yaml` sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitInput {
    pub spec: WorkloadSpec,
    pub run: Option<RunSpec>,
    /// Makes retries idempotent: a submit with the name and token of an existing workload
    /// returns that workload instead of failing.
    pub client_token: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// Learn the server's version, id and leader.
    Hello,
    CreateComputeQuota(ComputeQuotaInput),
    UpdateComputeQuota {
        input: ComputeQuotaInput,
        target_version: u64,
    },
    DeleteComputeQuota {
        name: String,
    },
    DescribeComputeQuota {
        name: String,
    },
    ListComputeQuotas,
    CreateSchedulerConfig {
        name: String,
        config: String,
        limits: AdmissionLimitsInput,
        description: Option<String>,
        /// allot's stability rules (not part of the AWS API).
        #[serde(default)]
        stability: StabilityInput,
    },
    /// `description`: the replacement (`None` keeps the current one).
    UpdateSchedulerConfig {
        name: String,
        config: String,
        target_version: u64,
        limits: AdmissionLimitsInput,
        description: Option<String>,
        /// allot's stability rules (not part of the AWS API).
        #[serde(default)]
        stability: StabilityInput,
    },
    DescribeSchedulerConfig,
    Submit(SubmitInput),
    SubmitBatch(Vec<SubmitInput>),
    /// `team`: whose workload (names are unique within a team only); a user's certificate
    /// always means its own team, an admin names one when several teams use the name.
    Cancel {
        name: String,
        team: Option<String>,
    },
    GetWorkloads(WorkloadFilter),
    DescribeWorkload {
        name: String,
        team: Option<String>,
    },
    GetNodes,
    GetTeams,
    /// Register or refresh a node (its agent, or an admin).
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
    /// Report that a workload's pods ended.
    WorkloadExited {
        name: String,
        succeeded: bool,
    },
    /// Report that a workload's pods started.
    WorkloadStarted {
        name: String,
    },
    /// An agent registers its node or reports a changed inventory (device health included).
    ReportNode(NodeReport),
    /// A pod's log, streamed from its node's agent through the leader: the answer is a series
    /// of [`Reply::LogChunk`] frames, then the stream ends (an error ends it early). Readers
    /// need the workload's team (or an admin certificate). With `follow`, the stream goes on
    /// while the pod runs.
    Logs {
        workload: String,
        team: Option<String>,
        node: String,
        rank: u32,
        attempt: Option<u32>,
        follow: bool,
    },
    /// An agent asks for the log requests addressed to its node, waiting up to `wait_ms`.
    /// Only the leader answers.
    LogPoll {
        node: String,
        wait_ms: u32,
    },
    /// An agent answers log request `id`: after this frame, the stream carries frames of
    /// [`LogPiece`] until it ends.
    LogData {
        node: String,
        id: u64,
    },
    /// An agent's heartbeat: renews its lease and returns what the node should run. With
    /// `known_digest` equal to the current one, the reply waits up to `wait_ms` for a change.
    AgentSync {
        node: String,
        known_digest: u64,
        wait_ms: u32,
    },
    /// An agent reports pods of one attempt started. `workload_id` (from the assignment)
    /// tells apart workloads of different teams with the same name.
    PodsStarted {
        node: String,
        workload: String,
        workload_id: u64,
        attempt: u32,
        ranks: Vec<u32>,
    },
    /// An agent reports pods of one attempt ended (on their own, or stopped as asked).
    PodsExited {
        node: String,
        workload: String,
        workload_id: u64,
        attempt: u32,
        exits: Vec<PodExit>,
    },
    /// `GetWorkloads` that waits (up to `wait_ms`) until the list differs from `known_digest`:
    /// how `get workloads -w` streams changes.
    WatchWorkloads {
        filter: WorkloadFilter,
        known_digest: u64,
        wait_ms: u32,
    },
    /// Why a workload is pending or was preempted, with numbers.
    Explain {
        name: String,
        team: Option<String>,
    },
    /// Cancels every active workload the selector matches (a user's certificate: in its own
    /// team only). With `dry_run`, only says which it would cancel.
    CancelMatching {
        selector: WorkloadSelector,
        dry_run: bool,
    },
    /// Submits a job array: one workload per index, named `NAME-INDEX`, with the index in
    /// `ALLOT_ARRAY_INDEX` (see [`crate::array::ArrayIndices`] for `array`'s syntax).
    SubmitArray {
        input: SubmitInput,
        array: String,
    },
    /// The team's (an admin: every team's) job arrays.
    GetArrays {
        team: Option<String>,
    },
    /// Finished workloads, newest first.
    History(HistoryFilter),
    /// Stores a team's credentials for one registry (admins, or the team's users); sent only
    /// to the agents of nodes running the team's pods, never shown.
    PutRegistryCredentials {
        team: String,
        registry: String,
        credentials: crate::image::Credentials,
    },
    DeleteRegistryCredentials {
        team: String,
        registry: String,
    },
    /// Which registries a team (an admin: every team, or the one named) has credentials for.
    ListRegistryCredentials {
        team: Option<String>,
    },
    /// An agent says what a pod that does not run yet is doing (pulling its image).
    PodProgress {
        node: String,
        workload_id: u64,
        rank: u32,
        status: String,
    },
    /// `allot usage`: who used, borrowed and lent what over a period.
    Usage(crate::usage::UsageQuery),
    /// `allot what-if`: what the cluster recorded over a period (admins only).
    Recorded(crate::recorded::RecordedQuery),
    /// `allot cordon` / `allot uncordon` (admins only).
    CordonNode {
        name: String,
        cordoned: bool,
    },
    /// `allot drain` (admins only).
    DrainNode {
        name: String,
    },
    /// `allot dashboard`: a one-time login ticket for the web dashboard of the replica that
    /// answers, for the caller's own identity (admins and team users).
    WebTicket,
    /// A request a replica's web dashboard forwards to the leader for a signed-in browser:
    /// `body` as `identity` (an `allot://` identity URI of an admin or a team user) would
    /// send it. Only coordinators may send it.
    OnBehalf {
        identity: String,
        body: Box<Body>,
    },
    /// A leader asks a peer replica which format versions it reads (upgrades: see the
    /// coordinator's `format.rs`). Only coordinators may send it. Protocol 3.
    FormatProbe,
    /// `allot delete node` (admins only): a node that will not come back leaves the cluster.
    /// Protocol 3.
    RemoveNode {
        name: String,
    },
    /// `allot backup` (admins only): the replicated state as a snapshot. Protocol 3.
    Backup,
    /// `allot set-gang-scheduling` (admins only): gang readiness on with these settings, or
    /// off (`None`). Protocol 5.
    SetGangScheduling(Option<crate::pods_ready::PodsReadyPolicy>),
    /// `allot get gang-scheduling`: the settings in force. Protocol 5.
    GetGangScheduling,
    /// `allot backup` of any size (admins): answered with `Reply::BackupStream`, then the
    /// snapshot's bytes in frames of their own on the same stream. Protocol 6; a client
    /// falls back to `Backup` where a coordinator does not speak it.
    BackupStream,
    /// `allot get topology`: every topology domain, its nodes and their room. Protocol 7.
    GetTopology,
    /// `allot coordinator members list` (admins): the replicas, as the leader sees them.
    /// Protocol 7.
    GetMembers,
    /// `allot coordinator members add` (admins): replica `id`, reached at `address`, joins the
    /// cluster as a learner, and the leader makes it a voter once it has caught up. Protocol 8.
    AddMember {
        id: u64,
        address: String,
    },
    /// `allot coordinator members remove` (admins): replica `id` leaves the cluster. Refused
    /// when the voters left could not form a quorum. Protocol 8.
    RemoveMember {
        id: u64,
    },
    /// `allot create-cohort` (admins): a cohort, new or replaced, with its parent and its own
    /// quota (limits only below a parent). Protocol 8.
    SetCohort(crate::quota::CohortSpec),
    /// `allot delete-cohort` (admins): a cohort no team and no cohort names. Protocol 8.
    DeleteCohort {
        name: String,
    },
    /// `allot set-team-cohort` (admins): the cohort team `team` shares quota in (`None`: the
    /// default one, `shared-pool`). Protocol 8.
    SetTeamCohort {
        team: String,
        cohort: Option<String>,
    },
    /// `allot get cohorts`: every cohort with its place in the tree, its teams and its pool.
    /// Protocol 8.
    ListCohorts,
    /// `allot create-cohort --fair-share-weight` (admins): the cohort's fair-share weight
    /// against its siblings, as numerator and denominator. Protocol 9.
    SetCohortWeight {
        cohort: String,
        weight: (u32, u32),
    },
    /// `allot get cohorts` and `describe cohort`: every named cohort's fair-share weight.
    /// Protocol 10 (`ListCohorts`' view predates weights, and its layout stays).
    ListCohortWeights,
}

/// A team's registry credentials as listed: never the password.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryCredentialView {
    pub team: String,
    pub registry: String,
    pub username: String,
}

/// Which active workloads a bulk cancel takes: all the conditions given hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSelector {
    pub team: Option<String>,
    /// Every one of these labels, with these values.
    pub labels: BTreeMap<String, String>,
    /// Any of these states (pending, admitted, running, evicting); none: any active state.
    pub states: Vec<String>,
    /// Whether the selector is meant to match everything (else at least one condition must be
    /// given, so an empty selector never cancels a whole cluster by accident).
    pub all: bool,
}

/// The states a bulk cancel can select: the active ones.
pub const ACTIVE_STATES: [&str; 4] = ["Pending", "Admitted", "Running", "Evicting"];

impl WorkloadSelector {
    /// Checks the selector: something to select by, known states, valid labels.
    pub fn check(&self) -> Result<(), String> {
        if !self.all && self.team.is_none() && self.labels.is_empty() && self.states.is_empty() {
            return Err(
                "say which workloads to cancel: by name, --team, -l key=value, --state, or --all"
                    .into(),
            );
        }
        for s in &self.states {
            if !ACTIVE_STATES.iter().any(|a| a.eq_ignore_ascii_case(s)) {
                return Err(format!(
                    "unknown state {s:?} to cancel; use one of {}",
                    ACTIVE_STATES.join(", ").to_ascii_lowercase()
                ));
            }
        }
        for (k, v) in &self.labels {
            crate::workload::check_label(k, v)?;
        }
        Ok(())
    }

    pub fn matches(&self, team: &str, labels: &BTreeMap<String, String>, state: &str) -> bool {
        self.team.as_deref().is_none_or(|t| t == team)
            && self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && (self.states.is_empty() || self.states.iter().any(|s| s.eq_ignore_ascii_case(state)))
    }
}

/// Which finished workloads `allot history` lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryFilter {
    pub team: Option<String>,
    /// Any of these outcomes (succeeded, failed, cancelled); none: all.
    pub states: Vec<String>,
    /// Finished at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Finished before this time.
    pub until_ms: Option<i64>,
    /// At most this many rows, newest first.
    pub limit: Option<u32>,
}

/// The outcomes `allot history --state` takes.
pub const FINISHED_STATES: [&str; 3] = ["Succeeded", "Failed", "Cancelled"];

/// One finished workload, as `allot history` shows it (the fields of `sacct` most used).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRow {
    pub id: u64,
    pub name: String,
    pub team: String,
    pub priority_class: Option<String>,
    /// Succeeded, Failed or Cancelled.
    pub state: String,
    pub submitted_ms: i64,
    /// When it was last admitted (none: it never was).
    pub admitted_ms: Option<i64>,
    /// When its last attempt's first pod started.
    pub started_ms: Option<i64>,
    pub ended_ms: i64,
    /// Time in the queue before its last admission.
    pub wait_ms: Option<i64>,
    /// From its last attempt's first pod start to the end.
    pub run_ms: Option<i64>,
    pub pods: u32,
    /// Nodes its last attempt ran on.
    pub nodes: Vec<String>,
    /// The first non-zero exit code of its last attempt's pods (0 when all exited 0).
    pub exit_code: Option<i32>,
    pub preemptions: u32,
    /// The run time its preemptions threw away, in milliseconds.
    #[serde(default)]
    pub lost_run_ms: i64,
    /// Why it ended as it did, when it did not succeed.
    pub reason: String,
}

/// A job array, as `get arrays` and the collapsed workload table show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayView {
    pub name: String,
    pub team: String,
    /// As submitted: `0-999%4`.
    pub indices: String,
    pub max_running: Option<u32>,
    pub total: u32,
    /// Elements not yet queued: they wait for the array's limit (`%N`).
    pub held: u32,
    /// Elements cancelled before they were queued.
    pub cancelled_held: u32,
    pub submitted_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub body: Body,
}

/// What kind of failure, so clients can react (retry elsewhere, fix input, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The input is wrong; the message says what would be accepted.
    Invalid,
    NotFound,
    /// Already exists, or a version check failed.
    Conflict,
    /// The caller's certificate does not allow this.
    Forbidden,
    /// This replica is not the leader; retry on the hinted address (or any other).
    NotLeader,
    /// Try again (leadership changed, timeout); a write may or may not have been applied.
    Unavailable,
    /// Client and server speak different protocol versions.
    Version,
    /// The leader's disk is below its reserve: the write was refused and nothing was written.
    /// Retry once space is freed (not at once: it is not a transient error).
    NoSpace,
    /// An admission limit (pending workloads per team, submissions per second) was reached;
    /// the message names it. Retry later, or ask an admin to raise it.
    LimitExceeded,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// With `NotLeader`: the leader's client address, when known.
    pub leader: Option<String>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            leader: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Hello {
        version: u32,
        replica: u64,
        leader: Option<u64>,
        leader_addr: Option<String>,
        identity: String,
    },
    Done,
    Quota(ComputeQuotaView),
    Quotas(Vec<ComputeQuotaView>),
    SchedulerConfig(SchedulerConfigView),
    Submitted {
        name: String,
        id: u64,
        /// The workload existed already with the same client token.
        existing: bool,
        /// Its state once the command applied: `Admitted` when the leader could admit it in the
        /// same log entry (an idle cluster), otherwise usually `Pending`.
        state: String,
    },
    SubmittedBatch(Vec<Result<u64, ApiError>>),
    Workloads(Vec<WorkloadView>),
    Workload(Box<WorkloadView>),
    Nodes(Vec<NodeView>),
    Teams(Vec<TeamView>),
    Assignments(NodeAssignments),
    /// Workloads with the digest a watcher sends back.
    WorkloadsAt {
        digest: u64,
        workloads: Vec<WorkloadView>,
    },
    /// Lines of an explanation, most important first.
    Explanation(Vec<String>),
    /// Log requests for an agent's node.
    LogRequests(Vec<LogRequest>),
    /// Bytes of a log, in order.
    LogChunk(Vec<u8>),
    /// What a bulk cancel cancelled (or, dry, would cancel): how many, and the first names.
    Cancelled {
        count: u64,
        names: Vec<String>,
    },
    ArraySubmitted {
        name: String,
        elements: u32,
        /// Queued at once (the rest wait for the array's limit).
        queued: u32,
        existing: bool,
    },
    Arrays(Vec<ArrayView>),
    History(Vec<HistoryRow>),
    RegistryCredentials(Vec<RegistryCredentialView>),
    Usage(crate::usage::UsageReport),
    Recorded(Box<crate::recorded::Recorded>),
    /// A login ticket for the dashboard at `http` (this replica's HTTP address as it listens;
    /// the CLI puts the host it reached in place of an unspecified one).
    WebTicket {
        ticket: String,
        http: String,
        expires_ms: i64,
    },
    /// The answer to `Body::FormatProbe`: the newest format the replica reads.
    Format {
        reads: u32,
    },
    /// The answer to `Body::Backup`: the machine as a snapshot of `format` (its envelope
    /// included), taken at `taken_ms`.
    Backup {
        format: u32,
        taken_ms: i64,
        data: Vec<u8>,
    },
    /// The answer to `Body::GetGangScheduling`: the settings, `None` when it is off.
    GangScheduling(Option<crate::pods_ready::PodsReadyPolicy>),
    /// The first frame of the answer to `Body::BackupStream`: the snapshot's format, when it
    /// was taken and its size; its bytes follow in frames of at most `BACKUP_CHUNK`.
    BackupStream {
        format: u32,
        taken_ms: i64,
        size: u64,
    },
    /// The answer to `Body::GetTopology`: the domains of every level, by level and domain.
    Topology(Vec<DomainView>),
    /// The answer to `Body::GetMembers`: each replica, by id.
    Members(Vec<MemberView>),
    /// The answer to `Body::ListCohorts`, by name.
    Cohorts(Vec<CohortView>),
    /// The answer to `Body::ListCohortWeights`: every named cohort's weight, by name.
    CohortWeights(Vec<CohortWeightView>),
}

/// A cohort's fair-share weight against its siblings, as `allot get cohorts` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortWeightView {
    pub cohort: String,
    /// The weight as a decimal (`1`, `0.5`, `2.25`); `1` where no admin set one.
    pub fair_share_weight: String,
}

/// One cohort as `allot get cohorts` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortView {
    pub name: String,
    pub parent: Option<String>,
    /// Its child cohorts and its teams, by name.
    pub children: Vec<String>,
    pub teams: Vec<String>,
    /// Per (flavor, resource): its own quota, its pool (its subtree's quota: what it owns,
    /// its teams lend and its children lend up), and what its subtree uses of the pool.
    pub pairs: Vec<CohortPairView>,
}

/// One (flavor, resource) of a cohort, quantities as the resource writes them (`8`, `64Gi`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortPairView {
    pub flavor: String,
    pub resource: String,
    pub nominal: String,
    pub borrowing_limit: Option<String>,
    pub lending_limit: Option<String>,
    pub pool: String,
    pub in_use: String,
}

/// One coordinator replica as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    pub id: u64,
    /// Where its peers and clients reach it.
    pub address: String,
    /// `leader`, `follower`, or `learner` (added, still catching up: it does not vote yet).
    pub role: String,
    /// The log index it has matched, and how far it is behind the commit index.
    pub matched: u64,
    pub behind: u64,
    /// Whether the leader heard from it within the last election timeout.
    pub active: bool,
}

/// One topology domain as `allot get topology` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainView {
    pub level: String,
    pub domain: String,
    /// Its nodes, by name (natural order).
    pub nodes: Vec<String>,
    /// How many of them take pods (healthy, not cordoned).
    pub schedulable: u32,
    /// Capacity and free room of its schedulable nodes, summed.
    pub capacity: Resources,
    pub free: Resources,
}

/// The most bytes of a backup in one frame after `Reply::BackupStream`.
pub const BACKUP_CHUNK: usize = 4 << 20;

/// A bulk cancel's reply names at most this many workloads (and counts them all).
pub const CANCELLED_NAMES_MAX: usize = 200;

/// What an agent is asked to stream back (see [`Body::Logs`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    pub id: u64,
    pub workload: String,
    /// The workload's id, which the coordinator resolves from the name: a name can be used
    /// again once its workload finished, so the id says which run's logs. Absent from older
    /// coordinators: then the latest logs under the name.
    #[serde(default)]
    pub workload_id: Option<u64>,
    pub rank: u32,
    pub attempt: Option<u32>,
    pub follow: bool,
}

/// One frame of an agent's log stream: bytes, or why there are no (more) bytes.
pub type LogPiece = Result<Vec<u8>, String>;

/// Largest piece of log in one frame.
pub const LOG_CHUNK: usize = 64 * 1024;

pub type Response = Result<Reply, ApiError>;

/// FNV-1a: a cheap, stable 64-bit fingerprint (not for security).
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// FNV-1a over a value's debug rendering: equal values, equal digest (for long polls). Never 0,
/// which a client sends when it knows nothing yet.
pub fn digest_of(v: &impl std::fmt::Debug) -> u64 {
    fnv1a(format!("{v:?}").bytes()).max(1)
}

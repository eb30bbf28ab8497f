//! Admin and user commands against a running cluster, named after `aws sagemaker` so HyperPod
//! users feel at home: compute quotas and the cluster scheduler config for admins; submit,
//! get, describe and cancel for data scientists.

use std::collections::BTreeMap;
use std::path::PathBuf;

use std::io::{IsTerminal, Write};

use allot_common::api::{
    ActivationState, ArrayView, Body, ComputeQuotaInput, ComputeQuotaView, HistoryFilter,
    HistoryRow, NodeView, Reply, RunSpec, SubmitInput, TeamView, WorkloadFilter, WorkloadSelector,
    WorkloadView,
};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::timefmt::now_ms;
use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::client::{api, watch_once, Client, ClientOpts};
use crate::scenario;
use allot_common::api::ErrorKind;
use allot_net::client::ClientError;

#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
}

#[derive(Args, Debug, Clone)]
pub struct Out {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct QuotaArgs {
    /// Name of the compute quota.
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    /// Accepted for compatibility with `aws sagemaker`; allot governs one cluster.
    #[arg(long)]
    pub cluster_arn: Option<String>,
    /// The allocation, in the AWS CLI shorthand, e.g.
    /// "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},PreemptTeamTasks=LowerPriority".
    #[arg(long)]
    pub compute_quota_config: String,
    /// "TeamName=team-a,FairShareWeight=10".
    #[arg(long)]
    pub compute_quota_target: String,
    /// Enabled or Disabled.
    #[arg(long, default_value = "Enabled")]
    pub activation_state: String,
}

#[derive(Subcommand, Debug)]
pub enum GetWhat {
    /// Workloads, with their state and where they run.
    Workloads {
        /// Only this team's (users see only their own team anyway).
        #[arg(long)]
        team: Option<String>,
        /// Include finished and cancelled workloads.
        #[arg(long)]
        all: bool,
        /// Keep watching and print changes.
        #[arg(short = 'w', long)]
        watch: bool,
        /// One row per array element (the table shows each job array as one row).
        #[arg(long)]
        expand: bool,
        #[command(flatten)]
        out: Out,
    },
    /// Job arrays with elements still queued or held back by their limit (%N).
    Arrays {
        /// Only this team's (users see only their own team anyway).
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Nodes with capacity and usage.
    Nodes {
        #[command(flatten)]
        out: Out,
    },
    /// Teams: quota, usage, borrowed, lent, weighted share.
    Teams {
        #[command(flatten)]
        out: Out,
    },
}

#[derive(Subcommand, Debug)]
pub enum DescribeWhat {
    /// One workload with its conditions (reasons and messages) and placement.
    Workload {
        name: String,
        /// The workload's team, when several teams use its name (admins).
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        out: Out,
    },
}

/// allot's admission limits, beside the AWS scheduler config (unchanged when not given;
/// defaults 10000, 100 and 1000).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// Pending workloads one team may have; a submit past it is refused.
    #[arg(long)]
    max_pending_per_team: Option<u32>,
    /// Workloads one user certificate may submit per second, on average.
    #[arg(long)]
    submits_per_second: Option<u32>,
    /// Workloads a user may submit at once before the rate applies.
    #[arg(long)]
    submit_burst: Option<u32>,
}

impl LimitArgs {
    fn input(&self) -> allot_common::api::AdmissionLimitsInput {
        allot_common::api::AdmissionLimitsInput {
            max_pending_per_team: self.max_pending_per_team,
            submits_per_second: self.submits_per_second,
            submit_burst: self.submit_burst,
        }
    }
}

/// allot's stability rules on the scheduler config commands (not part of the AWS API).
#[derive(clap::Args, Debug, Default)]
pub struct StabilityArgs {
    /// Seconds an admitted workload runs before fair sharing, or a borrowing preemptor, may
    /// preempt it (0 turns the rule off) [default: 300, or unchanged].
    #[arg(long, value_name = "SECONDS")]
    minimum_run_time: Option<u32>,
    /// Preemptions after which a workload is spared those preemptions for good (0 turns the
    /// rule off) [default: 5, or unchanged].
    #[arg(long, value_name = "N")]
    preemption_budget: Option<u32>,
}

impl StabilityArgs {
    fn input(&self) -> allot_common::api::StabilityInput {
        allot_common::api::StabilityInput {
            minimum_run_time_s: self.minimum_run_time,
            preemption_budget: self.preemption_budget,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Create a team's compute allocation (admin).
    CreateComputeQuota {
        #[command(flatten)]
        q: QuotaArgs,
        #[command(flatten)]
        out: Out,
    },
    /// Change a compute allocation (admin); --target-version must be its current version.
    UpdateComputeQuota {
        /// The quota's id (cq...) or name.
        #[arg(long)]
        compute_quota_id: String,
        #[arg(long)]
        target_version: u64,
        /// The new allocation (shorthand, JSON or file://) [default: unchanged].
        #[arg(long)]
        compute_quota_config: Option<String>,
        /// The new target, "TeamName=team-a,FairShareWeight=20" (its team cannot change)
        /// [default: unchanged].
        #[arg(long)]
        compute_quota_target: Option<String>,
        /// Enabled or Disabled [default: unchanged].
        #[arg(long)]
        activation_state: Option<String>,
        #[arg(long)]
        description: Option<String>,
        /// Accepted for compatibility with `aws sagemaker`; allot governs one cluster.
        #[arg(long)]
        cluster_arn: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Show one compute quota.
    DescribeComputeQuota {
        /// The quota's id (cq...) or name.
        #[arg(long)]
        compute_quota_id: String,
        #[command(flatten)]
        out: Out,
    },
    /// List compute quotas.
    ListComputeQuotas {
        #[arg(long)]
        cluster_arn: Option<String>,
        #[arg(long)]
        name_contains: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Store a team's credentials for a registry (admin, or a user of the team). The password
    /// (or token) is read from standard input, or --password-file; it is sent only to the
    /// agents of nodes that run the team's pods and is never shown.
    CreateRegistryCredentials {
        /// Team [default: the team of a user certificate].
        #[arg(long)]
        team: Option<String>,
        /// The registry host[:port], as image references name it.
        #[arg(long)]
        registry: String,
        #[arg(long)]
        username: String,
        /// A file holding the password (its trailing newline is dropped).
        #[arg(long)]
        password_file: Option<PathBuf>,
    },
    /// Delete a team's credentials for a registry.
    DeleteRegistryCredentials {
        #[arg(long)]
        team: Option<String>,
        #[arg(long)]
        registry: String,
    },
    /// Registries a team has credentials for, with their user names (never passwords).
    ListRegistryCredentials {
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Delete a compute quota (admin); its team must have no workloads left.
    DeleteComputeQuota {
        #[arg(long)]
        compute_quota_id: String,
    },
    /// Create the cluster's scheduler config (admin).
    CreateClusterSchedulerConfig {
        #[arg(long)]
        name: String,
        #[arg(long)]
        cluster_arn: Option<String>,
        #[arg(long)]
        description: Option<String>,
        /// "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=70}],FairShare=Enabled".
        #[arg(long)]
        scheduler_config: String,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        stability: StabilityArgs,
        #[command(flatten)]
        out: Out,
    },
    /// Change the scheduler config (admin); --target-version must be its current version.
    UpdateClusterSchedulerConfig {
        /// Its id (as describe shows it) or name.
        #[arg(long)]
        cluster_scheduler_config_id: String,
        #[arg(long)]
        target_version: u64,
        /// The new policy (shorthand, JSON or file://) [default: unchanged].
        #[arg(long)]
        scheduler_config: Option<String>,
        /// Accepted for compatibility with `aws sagemaker` (not stored).
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        stability: StabilityArgs,
        #[command(flatten)]
        out: Out,
    },
    /// Show the scheduler config.
    DescribeClusterSchedulerConfig {
        #[arg(long)]
        cluster_scheduler_config_id: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Submit a workload or a job array (--array): flags and `-- COMMAND ARGS`, or a job file
    /// (the scenario format's workload fields plus command, env, workdir, grace, labels).
    Submit {
        /// Job file, YAML or JSON (`-` reads standard input). Flags below override its fields.
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        #[command(flatten)]
        job: Box<JobFlags>,
        /// The submit's idempotency key: a submit whose outcome is unknown (no leader
        /// answered, leadership moved) is repeated with the key it printed, and returns the
        /// original workload instead of a second one [default: a new key].
        #[arg(long)]
        client_token: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// List things.
    Get {
        #[command(subcommand)]
        what: GetWhat,
    },
    /// Show one thing in detail.
    Describe {
        #[command(subcommand)]
        what: DescribeWhat,
    },
    /// Cancel workloads (pending ones leave the queue, running ones are stopped): by name
    /// (a job array's name cancels the whole array, NAME-INDEX one element), or every active
    /// workload that --team, -l, --state or --all select. Asks first on a terminal.
    Cancel {
        /// Workloads or job arrays to cancel.
        names: Vec<String>,
        /// With names: their team, when several teams use a name (admins). Without: cancel
        /// every active workload of the team.
        #[arg(long)]
        team: Option<String>,
        /// Only workloads with this label (key=value; repeat or comma-separate for several).
        #[arg(short = 'l', long = "selector", value_delimiter = ',')]
        selector: Vec<String>,
        /// Only workloads in this state: pending, admitted, running, evicting (repeatable).
        #[arg(long, value_delimiter = ',')]
        state: Vec<String>,
        /// Every active workload (an admin: of every team; a user: of its team).
        #[arg(long)]
        all: bool,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long)]
        yes: bool,
    },
    /// Finished workloads (succeeded, failed, cancelled), newest first: when each was
    /// submitted, waited, ran and ended, where, and how (as Slurm's sacct).
    History {
        /// Only this team's (users see only their own team anyway).
        #[arg(long)]
        team: Option<String>,
        /// Only these outcomes: succeeded, failed, cancelled (repeatable).
        #[arg(long, value_delimiter = ',')]
        state: Vec<String>,
        /// Finished since: a time ago (90m, 2h) or a UTC time (2026-11-26T08:00:00Z).
        #[arg(long, value_parser = parse_when)]
        since: Option<When>,
        /// Finished before: a time ago or a UTC time.
        #[arg(long, value_parser = parse_when)]
        until: Option<When>,
        /// At most this many rows.
        #[arg(long)]
        limit: Option<u32>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        format: HistoryFormat,
    },
    /// Wait until a workload is admitted, running or finished; exits 1 if it ends otherwise
    /// (failed, cancelled) or the timeout passes.
    Wait {
        name: String,
        /// admitted (also once running or finished), running (also once succeeded), or
        /// finished (exits 1 unless it succeeded).
        #[arg(long = "for", value_enum)]
        until: WaitFor,
        /// How long to wait: 90, 90s, 5m or 1h [default: wait for ever].
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
        /// The workload's team, when several teams use its name (admins).
        #[arg(long)]
        team: Option<String>,
    },
    /// Why a workload is pending, or why it was preempted, with numbers.
    Explain {
        name: String,
        /// The workload's team, when several teams use its name (admins).
        #[arg(long)]
        team: Option<String>,
    },
    /// Print a pod's output, streamed from the agent of the node it ran on through the
    /// cluster (your certificate must be for the workload's team, or an admin's).
    Logs {
        name: String,
        /// Which pod of the workload (its RANK).
        #[arg(long, default_value_t = 0)]
        rank: u32,
        /// Which run of the workload (1 = its first admission) [default: the latest].
        #[arg(long)]
        attempt: Option<u32>,
        /// Keep printing what the pod writes until it ends (Ctrl-C to stop).
        #[arg(short, long)]
        follow: bool,
        /// The workload's team, when several teams use its name (admins).
        #[arg(long)]
        team: Option<String>,
    },
}

/// "TeamName=team-a,FairShareWeight=10" (or the same as JSON, or `file://PATH` of either).
pub fn parse_target(s: &str) -> anyhow::Result<(String, u32)> {
    let text = read_arg(s)?;
    allot_common::hyperpod::parse_target(&text).map_err(|e| anyhow!("--compute-quota-target: {e}"))
}

/// An argument as the AWS CLI reads it: `file://PATH` (`~` expanded) is the text of that file,
/// `fileb://PATH` its bytes (which must be UTF-8 here: JSON or shorthand); anything else is
/// the value itself.
pub fn read_arg(s: &str) -> anyhow::Result<String> {
    let (path, binary) = match (s.strip_prefix("file://"), s.strip_prefix("fileb://")) {
        (Some(p), _) => (p, false),
        (_, Some(p)) => (p, true),
        _ => return Ok(s.to_string()),
    };
    let path = match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    };
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {} (from {s}): file:// and fileb:// name a file to read the value from",
            path.display()
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow!(
            "{} (from {s}) is not UTF-8 text{}",
            path.display(),
            if binary {
                "; the value must be JSON or shorthand"
            } else {
                ""
            }
        )
    })?;
    // The AWS CLI keeps the file's text as it is; a trailing newline is blank space to both
    // parsers.
    Ok(text)
}

fn quota_input(q: &QuotaArgs, name: String) -> anyhow::Result<ComputeQuotaInput> {
    let config = ComputeQuotaConfig::parse_shorthand(&read_arg(&q.compute_quota_config)?)
        .map_err(|e| anyhow!("--compute-quota-config: {e}"))?;
    let (team, fair_share_weight) = parse_target(&q.compute_quota_target)?;
    let activation = ActivationState::parse(&q.activation_state)
        .map_err(|e| anyhow!("--activation-state: {e}"))?;
    Ok(ComputeQuotaInput {
        name,
        description: q.description.clone(),
        team,
        fair_share_weight,
        config,
        activation,
    })
}

/// Reads a job file: the scenario format's workload fields plus how to run it.
/// A job given on the command line (`allot submit --gpus 1 -- python train.py`); each flag
/// overrides the same field of a job file given with it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JobFlags {
    /// Workload name [default: from the file, else generated and printed].
    #[arg(long)]
    name: Option<String>,
    /// Team [default: from the file, else the team of a user certificate (--as user-TEAM)].
    #[arg(long)]
    team: Option<String>,
    /// Priority class name or number.
    #[arg(long)]
    priority: Option<String>,
    /// Pods in the gang.
    #[arg(long)]
    count: Option<u32>,
    /// GPUs per pod.
    #[arg(long)]
    gpus: Option<String>,
    /// vCPUs per pod (8, 500m).
    #[arg(long)]
    cpus: Option<String>,
    /// Memory per pod (32Gi).
    #[arg(long)]
    memory: Option<String>,
    /// Requests per pod as resource=quantity pairs: gpu=1,cpu=8,memory=32Gi.
    #[arg(long, value_delimiter = ',')]
    request: Vec<String>,
    /// A label (key=value; repeat or comma-separate for several), for `cancel -l`.
    #[arg(short = 'l', long = "label", value_delimiter = ',')]
    label: Vec<String>,
    /// Submit a job array: one workload per index (0-999, 1,3,5, 0-15:4), named NAME-INDEX,
    /// with its index in ALLOT_ARRAY_INDEX; %N at the end runs at most N at once (0-999%8).
    #[arg(long)]
    array: Option<String>,
    /// Run the pods from this OCI image (agents with the containerd driver).
    #[arg(long)]
    image: Option<String>,
    /// Mount a host path into the containers: HOST:PATH[:ro] (repeat for several).
    #[arg(long)]
    mount: Vec<String>,
    /// Size of the containers' /dev/shm (8Gi).
    #[arg(long)]
    shm_size: Option<String>,
    /// Run the containers in the node's network namespace (multi-node NCCL, EFA).
    #[arg(long)]
    host_network: bool,
    /// Numeric uid[:gid] the containers run as.
    #[arg(long)]
    user: Option<String>,
    /// An environment variable NAME=value (repeat for several).
    #[arg(short = 'e', long = "env")]
    env: Vec<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
}

impl JobFlags {
    /// The workload to submit: the file's fields (if any), the flags over them.
    pub fn submit_input(
        &self,
        file: Option<&std::path::Path>,
        identity: Option<&str>,
    ) -> anyhow::Result<SubmitInput> {
        let (mut v, origin) = match file {
            Some(p) if p.as_os_str() == "-" => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .context("cannot read the job from standard input")?;
                (
                    parse_job_text(&text, "standard input")?,
                    "standard input".to_string(),
                )
            }
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read job file {}", p.display()))?;
                (
                    parse_job_text(&text, &p.display().to_string())?,
                    p.display().to_string(),
                )
            }
            None => (
                Value::Object(Default::default()),
                "the command line".to_string(),
            ),
        };
        // A Kubernetes Job, PyTorchJob or Pod as HyperPod users submit them to Kueue.
        if let Some(job) = crate::k8s::job_from_manifest(&v, &origin)? {
            v = job;
        }
        let obj = v
            .as_object_mut()
            .ok_or_else(|| anyhow!("{origin}: a job file is a mapping of workload fields"))?;
        let mut set = |k: &str, val: Option<Value>| {
            if let Some(val) = val {
                obj.insert(k.to_string(), val);
            }
        };
        set("name", self.name.clone().map(Value::String));
        set("team", self.team.clone().map(Value::String));
        set(
            "priority",
            self.priority.clone().map(|p| match p.parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::String(p),
            }),
        );
        set("count", self.count.map(Value::from));
        if !self.command.is_empty() {
            set("command", Some(Value::from(self.command.clone())));
            obj.remove("args");
        }
        for (k, v) in [
            ("image", &self.image),
            ("shm_size", &self.shm_size),
            ("user", &self.user),
        ] {
            if let Some(v) = v {
                obj.insert(k.into(), Value::String(v.clone()));
            }
        }
        if self.host_network {
            obj.insert("host_network".into(), Value::Bool(true));
        }
        if !self.mount.is_empty() {
            let list = obj
                .entry("mounts")
                .or_insert_with(|| Value::Array(Vec::new()));
            let Some(list) = list.as_array_mut() else {
                bail!("{origin}: mounts must be a list");
            };
            list.extend(self.mount.iter().cloned().map(Value::String));
        }
        if !self.env.is_empty() {
            let env = obj
                .entry("env")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(env) = env.as_object_mut() else {
                bail!("{origin}: env must be a mapping of NAME: value");
            };
            for pair in &self.env {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--env {pair:?}: use NAME=value"))?;
                env.insert(k.to_string(), Value::String(v.to_string()));
            }
        }
        if !self.label.is_empty() {
            let labels = obj
                .entry("labels")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(labels) = labels.as_object_mut() else {
                bail!("{origin}: labels must be a mapping of key: value");
            };
            for pair in &self.label {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    anyhow!("--label {pair:?}: use key=value, as experiment=lr-sweep")
                })?;
                labels.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
            }
        }
        let mut requests: Vec<(String, String)> = Vec::new();
        for (k, v) in [
            ("gpu", &self.gpus),
            ("cpu", &self.cpus),
            ("memory", &self.memory),
        ] {
            if let Some(v) = v {
                requests.push((k.to_string(), v.clone()));
            }
        }
        for pair in &self.request {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                anyhow!("--request {pair:?}: use resource=quantity, as gpu=1,cpu=8,memory=32Gi")
            })?;
            requests.push((k.trim().to_string(), v.trim().to_string()));
        }
        if !requests.is_empty() {
            let req = obj
                .entry("requests")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(req) = req.as_object_mut() else {
                bail!("{origin}: requests must be a mapping of resource: quantity");
            };
            for (k, v) in requests {
                req.insert(k, Value::String(v));
            }
        }
        if !obj.contains_key("team") {
            if let Some(team) = identity.and_then(|s| s.strip_prefix("user-")) {
                obj.insert("team".into(), Value::String(team.to_string()));
            }
        }
        if !obj.contains_key("name") {
            let base = self
                .command
                .first()
                .and_then(|c| std::path::Path::new(c).file_stem())
                .map(|s| s.to_string_lossy().to_lowercase())
                .filter(|s| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                })
                .unwrap_or_else(|| "job".to_string());
            obj.insert(
                "name".into(),
                Value::String(format!("{base}-{}", token_suffix())),
            );
        }
        job_from_value(v, &origin)
    }
}

fn parse_job_text(text: &str, origin: &str) -> anyhow::Result<Value> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(_) => serde_saphyr::from_str(text)
            .map_err(|e| anyhow!("{origin}: not valid YAML or JSON: {e}")),
    }
}

#[cfg(test)]
pub fn read_job(path: &std::path::Path) -> anyhow::Result<SubmitInput> {
    JobFlags::default().submit_input(Some(path), None)
}

fn job_from_value(mut v: Value, origin: &str) -> anyhow::Result<SubmitInput> {
    let obj = v
        .as_object_mut()
        .ok_or_else(|| anyhow!("{}: a job file is a mapping of workload fields", origin))?;
    for k in ["submit_at", "duration", "admitted"] {
        if obj.contains_key(k) {
            bail!(
                "{}: {k} belongs to simulation scenarios, not to a job file",
                origin
            );
        }
    }
    let strings = |v: Option<Value>, key: &str| -> anyhow::Result<Vec<String>> {
        match v {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s]),
            Some(Value::Array(a)) => a
                .into_iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s),
                    Value::Number(n) => Ok(n.to_string()),
                    o => Err(anyhow!("{key}: {o} is not a string")),
                })
                .collect(),
            Some(o) => bail!("{key}: expected a string or a list of strings, got {o}"),
        }
    };
    let command = strings(obj.remove("command"), "command")?;
    let args = strings(obj.remove("args"), "args")?;
    let image = match obj.remove("image") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(o) => bail!("image: expected an image reference such as registry/repo:tag, got {o}"),
    };
    let mounts = match obj.remove("mounts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|m| parse_mount(&m))
            .collect::<anyhow::Result<Vec<_>>>()?,
        Some(o) => bail!(
            "mounts: expected a list of HOST:PATH[:ro] or {{host_path, path, read_only}}, got {o}"
        ),
    };
    let shm_size = match obj.remove("shm_size") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_bytes(&v).map_err(|e| anyhow!("shm_size: {e}"))?),
    };
    let host_network = match obj.remove("host_network") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(o) => bail!("host_network: expected true or false, got {o}"),
    };
    let user = match obj.remove("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(o) => bail!("user: expected user[:group] (numbers or names, e.g. 1000:1000), got {o}"),
    };
    // A mapping of names to values; a value that is not a string is taken as written.
    let string_map = |v: Option<Value>, what: &str| -> anyhow::Result<BTreeMap<String, String>> {
        match v {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => Ok(m
                .into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s,
                        o => o.to_string(),
                    };
                    (k, v)
                })
                .collect()),
            Some(o) => bail!("{what}, got {o}"),
        }
    };
    let env = string_map(obj.remove("env"), "env: expected a mapping of NAME: value")?;
    let workdir = match obj.remove("workdir") {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(o) => bail!("workdir: expected a path, got {o}"),
    };
    let grace_seconds = match obj.get("grace") {
        None => None,
        Some(g) => Some(
            g.as_u64()
                .and_then(|g| u32::try_from(g).ok())
                .ok_or_else(|| anyhow!("grace: expected whole seconds, got {g}"))?,
        ),
    };
    obj.remove("grace");
    let labels = string_map(
        obj.remove("labels"),
        "labels: expected a mapping of key: value",
    )?;
    let w: scenario::WorkloadIn = serde_path_to_error::deserialize(v)
        .map_err(|e| anyhow!("{}: {}: {}", origin, e.path(), e.inner()))?;
    let mut spec = scenario::workload("", &w).map_err(|e| anyhow!("{}: {e}", origin))?;
    spec.labels = labels;
    Ok(SubmitInput {
        client_token: Some(format!("{}-{}", spec.name, token_suffix())),
        spec,
        run: Some(RunSpec {
            command,
            env,
            workdir,
            grace_seconds,
            image,
            args,
            mounts,
            shm_size,
            host_network,
            user,
        }),
    })
}

/// A mount as a job file or `--mount` writes it: `HOST:PATH[:ro|:rw]`, or a mapping with
/// `host_path` (or `hostPath`), `path` (or `container_path`, `mountPath`) and `read_only`.
fn parse_mount(v: &Value) -> anyhow::Result<allot_common::api::HostMount> {
    let usage = "a mount is HOST:PATH[:ro] or {host_path: HOST, path: PATH, read_only: true}";
    match v {
        Value::String(s) => {
            let parts: Vec<&str> = s.split(':').collect();
            let (host, path, ro) = match parts.as_slice() {
                [h, p] => (*h, *p, false),
                [h, p, "ro"] => (*h, *p, true),
                [h, p, "rw"] => (*h, *p, false),
                _ => bail!("mount {s:?}: {usage}"),
            };
            Ok(allot_common::api::HostMount {
                host_path: host.into(),
                container_path: path.into(),
                read_only: ro,
            })
        }
        Value::Object(m) => {
            let get = |keys: &[&str]| keys.iter().find_map(|k| m.get(*k)).and_then(|v| v.as_str());
            let host = get(&["host_path", "hostPath"])
                .ok_or_else(|| anyhow!("mount {v}: no host_path; {usage}"))?;
            let path = get(&["path", "container_path", "mountPath"])
                .ok_or_else(|| anyhow!("mount {v}: no path; {usage}"))?;
            let ro = match m.get("read_only").or_else(|| m.get("readOnly")) {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(o) => bail!("mount {v}: read_only is true or false, not {o}"),
            };
            Ok(allot_common::api::HostMount {
                host_path: host.into(),
                container_path: path.into(),
                read_only: ro,
            })
        }
        o => bail!("mount {o}: {usage}"),
    }
}

/// Bytes from a number or a quantity such as `8Gi` or `512Mi`.
fn parse_bytes(v: &Value) -> anyhow::Result<u64> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        o => bail!("expected bytes or a quantity such as 8Gi, got {o}"),
    };
    let n = allot_common::resource::parse_quantity(&allot_common::ResourceName::memory(), &text)
        .map_err(|e| anyhow!("{e}"))?;
    u64::try_from(n).map_err(|_| anyhow!("{text:?} is not a size"))
}

/// The team a command names, else the team of the user certificate in use.
fn team_or_mine(team: Option<String>, identity: Option<&str>) -> anyhow::Result<String> {
    team.or_else(|| {
        identity
            .and_then(|i| i.strip_prefix("user-"))
            .map(str::to_string)
    })
    .ok_or_else(|| anyhow!("--team is needed (an admin certificate acts for no team of its own)"))
}

fn token_suffix() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}-{}", t, std::process::id())
}

/// Reads --scheduler-config (shorthand, JSON, or `file://` of either), refuses a bad one before
/// it reaches the cluster, and returns it as shorthand (what the cluster stores and shows).
fn check_scheduler_config(s: &str) -> anyhow::Result<String> {
    let text = read_arg(s)?;
    allot_common::hyperpod::parse_scheduler_config(&text)
        .map(|p| allot_common::hyperpod::scheduler_config_to_shorthand(&p))
        .map_err(|e| anyhow!("--scheduler-config: {e}"))
}

async fn resolve_quota(c: &mut Client, id: &str) -> anyhow::Result<String> {
    // Only what looks like an id (cq0000000001, or cq-00000001 from before ids followed the
    // API's pattern) is looked up; anything else is a name.
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let looks_like_id = id
        .strip_prefix("cq-")
        .or_else(|| id.strip_prefix("cq"))
        .is_some_and(digits);
    if !looks_like_id {
        return Ok(id.to_string());
    }
    match api(c.call(Body::ListComputeQuotas).await)? {
        Reply::Quotas(qs) => Ok(qs
            .into_iter()
            .find(|q| q.id == id)
            .map_or_else(|| id.to_string(), |q| q.name)),
        r => bail!("unexpected reply {r:?}"),
    }
}

/// Why a write's outcome is unknown: no answer came (the cluster may have applied it), or the
/// leader lost its leadership before it could tell. `None` when the answer is definite.
fn outcome_unknown(
    r: &Result<Result<allot_common::api::Reply, allot_common::api::ApiError>, ClientError>,
) -> Option<String> {
    match r {
        Err(e) => Some(e.to_string()),
        Ok(Err(e)) if e.kind == ErrorKind::Unavailable => Some(e.message.clone()),
        _ => None,
    }
}

pub async fn run(cmd: ClusterCmd, opts: &ClientOpts) -> anyhow::Result<()> {
    let mut c = opts.connect()?;
    let r = run_with(cmd, &mut c, opts.identity.as_deref()).await;
    opts.remember(&c);
    c.close().await;
    r
}

/// `identity`: the certificate's file stem (`--as`), which gives a user's team.
async fn run_with(cmd: ClusterCmd, c: &mut Client, identity: Option<&str>) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::CreateComputeQuota { q, out } => {
            let name = q
                .name
                .clone()
                .ok_or_else(|| anyhow!("create-compute-quota needs --name"))?;
            let input = quota_input(&q, name)?;
            print_reply(
                api(c.call(Body::CreateComputeQuota(input)).await)?,
                out.format,
            );
        }
        ClusterCmd::UpdateComputeQuota {
            compute_quota_id,
            target_version,
            compute_quota_config,
            compute_quota_target,
            activation_state,
            description,
            out,
            ..
        } => {
            // What is not given stays as it is (the AWS API's update takes each part alone).
            let name = resolve_quota(c, &compute_quota_id).await?;
            let Reply::Quota(now) = api(c
                .call(Body::DescribeComputeQuota { name: name.clone() })
                .await)?
            else {
                bail!("unexpected answer describing compute quota {name}");
            };
            let q = QuotaArgs {
                name: None,
                description: description.or(now.description),
                cluster_arn: None,
                compute_quota_config: compute_quota_config.unwrap_or(now.config),
                compute_quota_target: compute_quota_target.unwrap_or(format!(
                    "TeamName={},FairShareWeight={}",
                    now.team, now.fair_share_weight
                )),
                activation_state: activation_state
                    .unwrap_or_else(|| now.activation.as_str().to_string()),
            };
            let input = quota_input(&q, name)?;
            print_reply(
                api(c
                    .call(Body::UpdateComputeQuota {
                        input,
                        target_version,
                    })
                    .await)?,
                out.format,
            );
        }
        ClusterCmd::DescribeComputeQuota {
            compute_quota_id,
            out,
        } => {
            let name = resolve_quota(c, &compute_quota_id).await?;
            print_reply(
                api(c.call(Body::DescribeComputeQuota { name }).await)?,
                out.format,
            );
        }
        ClusterCmd::ListComputeQuotas {
            name_contains, out, ..
        } => {
            let r = api(c.call(Body::ListComputeQuotas).await)?;
            let r = match (r, name_contains) {
                (Reply::Quotas(qs), Some(n)) => {
                    Reply::Quotas(qs.into_iter().filter(|q| q.name.contains(&n)).collect())
                }
                (r, _) => r,
            };
            print_reply(r, out.format);
        }
        ClusterCmd::CreateRegistryCredentials {
            team,
            registry,
            username,
            password_file,
        } => {
            let team = team_or_mine(team, identity)?;
            let mut password = match &password_file {
                Some(p) => std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read --password-file {}", p.display()))?,
                None => {
                    let mut s = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                        .context("cannot read the password from standard input")?;
                    s
                }
            };
            while password.ends_with(['\n', '\r']) {
                password.pop();
            }
            let credentials = allot_common::image::Credentials { username, password };
            allot_common::image::check_registry_credentials(&registry, &credentials)
                .map_err(|e| anyhow!(e))?;
            api(c
                .call(Body::PutRegistryCredentials {
                    team: team.clone(),
                    registry: registry.clone(),
                    credentials,
                })
                .await)?;
            println!("stored team {team}'s credentials for {registry}");
        }
        ClusterCmd::DeleteRegistryCredentials { team, registry } => {
            let team = team_or_mine(team, identity)?;
            api(c
                .call(Body::DeleteRegistryCredentials {
                    team: team.clone(),
                    registry: registry.clone(),
                })
                .await)?;
            println!("deleted team {team}'s credentials for {registry}");
        }
        ClusterCmd::ListRegistryCredentials { team, out } => {
            print_reply(
                api(c.call(Body::ListRegistryCredentials { team }).await)?,
                out.format,
            );
        }
        ClusterCmd::DeleteComputeQuota { compute_quota_id } => {
            let name = resolve_quota(c, &compute_quota_id).await?;
            api(c
                .call(Body::DeleteComputeQuota { name: name.clone() })
                .await)?;
            println!("deleted compute quota {name}");
        }
        ClusterCmd::CreateClusterSchedulerConfig {
            name,
            scheduler_config,
            limits,
            stability,
            description,
            out,
            ..
        } => {
            let scheduler_config = check_scheduler_config(&scheduler_config)?;
            print_reply(
                api(c
                    .call(Body::CreateSchedulerConfig {
                        name,
                        config: scheduler_config,
                        limits: limits.input(),
                        description,
                        stability: stability.input(),
                    })
                    .await)?,
                out.format,
            );
        }
        ClusterCmd::UpdateClusterSchedulerConfig {
            cluster_scheduler_config_id,
            target_version,
            scheduler_config,
            limits,
            stability,
            description,
            out,
            ..
        } => {
            let Reply::SchedulerConfig(now) = api(c.call(Body::DescribeSchedulerConfig).await)?
            else {
                bail!("unexpected answer describing the scheduler config");
            };
            let name = if cluster_scheduler_config_id == scheduler_config_id(&now.name) {
                now.name.clone()
            } else {
                cluster_scheduler_config_id
            };
            let scheduler_config = match scheduler_config {
                Some(s) => check_scheduler_config(&s)?,
                None => now.config,
            };
            print_reply(
                api(c
                    .call(Body::UpdateSchedulerConfig {
                        name,
                        config: scheduler_config,
                        target_version,
                        limits: limits.input(),
                        description,
                        stability: stability.input(),
                    })
                    .await)?,
                out.format,
            );
        }
        ClusterCmd::DescribeClusterSchedulerConfig { out, .. } => {
            print_reply(
                api(c.call(Body::DescribeSchedulerConfig).await)?,
                out.format,
            );
        }
        ClusterCmd::Submit {
            file,
            job,
            client_token,
            out,
        } => {
            let mut input = job.submit_input(file.as_deref(), identity)?;
            if let Some(t) = client_token {
                input.client_token = Some(t);
            }
            let (name, token) = (
                input.spec.name.clone(),
                input.client_token.clone().unwrap_or_default(),
            );
            let r = match &job.array {
                Some(array) => {
                    allot_common::array::ArrayIndices::parse(array).map_err(|e| anyhow!(e))?;
                    c.call(Body::SubmitArray {
                        input,
                        array: array.clone(),
                    })
                    .await
                }
                None => c.call(Body::Submit(input)).await,
            };
            if let Some(why) = outcome_unknown(&r) {
                bail!(
                    "the outcome of submitting {name} is unknown: {why}\nit may have been accepted; \
                     repeat the same submit with --client-token {token} to get the original \
                     workload rather than a second one, or look for it with \
                     `allot describe workload {name}`"
                );
            }
            print_reply(api(r)?, out.format);
        }
        ClusterCmd::Cancel {
            names,
            team,
            selector,
            state,
            all,
            yes,
        } => {
            if !names.is_empty() {
                if !selector.is_empty() || !state.is_empty() || all {
                    bail!("cancel takes names or a selection (-l, --state, --all), not both");
                }
                for name in names {
                    api(c
                        .call(Body::Cancel {
                            name: name.clone(),
                            team: team.clone(),
                        })
                        .await)?;
                    println!("{name} cancelled");
                }
                return Ok(());
            }
            let mut labels = BTreeMap::new();
            for pair in &selector {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| anyhow!("-l {pair:?}: use key=value, as experiment=lr-sweep"))?;
                labels.insert(k.trim().to_string(), v.trim().to_string());
            }
            let sel = WorkloadSelector {
                team,
                labels,
                states: state,
                all,
            };
            sel.check().map_err(|e| anyhow!(e))?;
            if !yes && std::io::stdin().is_terminal() {
                let Reply::Cancelled { count, names } = api(c
                    .call(Body::CancelMatching {
                        selector: sel.clone(),
                        dry_run: true,
                    })
                    .await)?
                else {
                    bail!("unexpected answer to a cancel preview");
                };
                if count == 0 {
                    println!("no active workload matches; nothing cancelled");
                    return Ok(());
                }
                println!("{}", cancel_summary(count, &names, "This cancels"));
                print!("Cancel them? [y/N] ");
                let _ = std::io::stdout().flush();
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    println!("nothing cancelled");
                    return Ok(());
                }
            }
            let Reply::Cancelled { count, names } = api(c
                .call(Body::CancelMatching {
                    selector: sel,
                    dry_run: false,
                })
                .await)?
            else {
                bail!("unexpected answer to a cancel");
            };
            println!("{}", cancel_summary(count, &names, "Cancelled"));
        }
        ClusterCmd::History {
            team,
            state,
            since,
            until,
            limit,
            format,
        } => {
            let now = now_ms();
            let f = HistoryFilter {
                team,
                states: state,
                since_ms: since.map(|w| w.at(now)),
                until_ms: until.map(|w| w.at(now)),
                limit,
            };
            let Reply::History(rows) = api(c.call(Body::History(f)).await)? else {
                bail!("unexpected answer to history");
            };
            print!("{}", render_history(&rows, format)?);
        }
        ClusterCmd::Wait {
            name,
            until,
            timeout,
            team,
        } => {
            println!("{}", wait_for_state(c, &name, team, until, timeout).await?);
        }
        ClusterCmd::Explain { name, team } => {
            print_reply(
                api(c.call(Body::Explain { name, team }).await)?,
                Format::Table,
            );
        }
        ClusterCmd::Logs {
            name,
            rank,
            attempt,
            follow,
            team,
        } => {
            let which = LogTarget {
                name: &name,
                team,
                rank,
                attempt,
                follow,
            };
            pod_logs(c, which, &mut std::io::stdout()).await?;
        }
        ClusterCmd::Describe {
            what: DescribeWhat::Workload { name, team, out },
        } => {
            print_reply(
                api(c.call(Body::DescribeWorkload { name, team }).await)?,
                out.format,
            );
        }
        ClusterCmd::Get { what } => match what {
            GetWhat::Workloads {
                team,
                all,
                watch,
                expand,
                out,
            } => {
                let filter = WorkloadFilter {
                    team: team.clone(),
                    all,
                };
                if watch {
                    return watch_workloads(c, filter).await;
                }
                let r = api(c.call(Body::GetWorkloads(filter)).await)?;
                match (r, out.format, expand) {
                    (Reply::Workloads(ws), Format::Table, false) => {
                        let Reply::Arrays(arrays) = api(c.call(Body::GetArrays { team }).await)?
                        else {
                            bail!("unexpected answer to get arrays");
                        };
                        print!("{}", render_collapsed(&ws, &arrays));
                    }
                    (r, format, _) => print_reply(r, format),
                }
            }
            GetWhat::Arrays { team, out } => {
                print_reply(api(c.call(Body::GetArrays { team }).await)?, out.format)
            }
            GetWhat::Nodes { out } => print_reply(api(c.call(Body::GetNodes).await)?, out.format),
            GetWhat::Teams { out } => print_reply(api(c.call(Body::GetTeams).await)?, out.format),
        },
    }
    Ok(())
}

/// Finds the node a pod ran on (its current placement first, then every other node) and
/// streams its log from that node's agent through the cluster into `out`, piece by piece.
pub struct LogTarget<'a> {
    pub name: &'a str,
    pub team: Option<String>,
    pub rank: u32,
    pub attempt: Option<u32>,
    pub follow: bool,
}

pub async fn pod_logs(
    c: &mut Client,
    which: LogTarget<'_>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let LogTarget {
        name,
        team,
        rank,
        attempt,
        follow,
    } = which;
    let w = fetch_workload(c, name, team.clone()).await?;
    let nodes = match api(c.call(Body::GetNodes).await)? {
        Reply::Nodes(n) => n,
        other => bail!("unexpected answer: {other:?}"),
    };
    let placed = w.pods.get(rank as usize).map(|p| p.node.clone());
    let mut candidates: Vec<&NodeView> = nodes.iter().collect();
    candidates.sort_by_key(|n| Some(&n.name) != placed.as_ref());
    let mut last = format!("no node has a log for {name} rank {rank}");
    for n in candidates {
        let body = Body::Logs {
            workload: name.into(),
            team: team.clone(),
            node: n.name.clone(),
            rank,
            attempt,
            follow,
        };
        let (mut frame, mut rest) = c.stream(body).await?;
        loop {
            match frame {
                Ok(Reply::LogChunk(b)) => {
                    out.write_all(&b)?;
                    out.flush()?;
                }
                Ok(other) => bail!("unexpected answer: {other:?}"),
                // This node has no such log: try the next.
                Err(e) if e.kind == allot_common::api::ErrorKind::NotFound => {
                    last = e.message;
                    break;
                }
                Err(e) => bail!("{:?}: {}", e.kind, e.message),
            }
            match allot_net::wire::read_frame::<_, allot_common::api::Response>(&mut rest).await {
                Ok(Some(f)) => frame = f,
                Ok(None) => return Ok(()),
                Err(e) => bail!("the log stream from node {} broke: {e}", n.name),
            }
        }
    }
    bail!("{last}")
}

/// Prints the list, then each change as it happens: the server holds each request until the
/// list differs from what this watcher last saw.
async fn watch_workloads(c: &mut Client, filter: WorkloadFilter) -> anyhow::Result<()> {
    use std::io::Write;
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut first = true;
    let mut digest = 0u64;
    loop {
        let (d, workloads) = watch_once(c, filter.clone(), digest, 20_000).await?;
        digest = d;
        let mut rows = Vec::new();
        for w in &workloads {
            let row = workload_row(w);
            let key = row.join("\u{1f}");
            if seen.get(&w.name) != Some(&key) {
                seen.insert(w.name.clone(), key);
                rows.push(row);
            }
        }
        if first && rows.is_empty() {
            println!("no workloads yet; waiting for changes (Ctrl-C to stop)");
        }
        if !rows.is_empty() {
            let t = table(&WORKLOAD_HEADER, &rows);
            if first {
                print!("{t}");
            } else {
                // Only the changed rows, without the header.
                print!("{}", t.split_once('\n').map(|x| x.1).unwrap_or(""));
            }
        }
        first = false;
        let _ = std::io::stdout().flush();
    }
}

/// One workload as `describe workload` shows it.
async fn fetch_workload(
    c: &mut Client,
    name: &str,
    team: Option<String>,
) -> anyhow::Result<Box<WorkloadView>> {
    match api(c
        .call(Body::DescribeWorkload {
            name: name.into(),
            team,
        })
        .await)?
    {
        Reply::Workload(w) => Ok(w),
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// What `allot wait --for` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitFor {
    Admitted,
    Running,
    Finished,
}

/// `90`, `90s`, `5m`, `1h`: a duration for `--timeout`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "{s:?}: use a number of seconds, or one with ms, s, m or h"
            ))
        }
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale <= 1e9 => {
            Ok(std::time::Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!(
            "{s:?}: use a number of seconds, or one with ms, s, m or h"
        )),
    }
}

/// Whether `state` is what `until` waits for (`Ok(true)`), not yet (`Ok(false)`), or never
/// will be (an error saying how it ended).
fn reached(until: WaitFor, state: &str) -> Result<bool, String> {
    let done = matches!(state, "Succeeded" | "Failed" | "Cancelled");
    Ok(match (until, state) {
        (_, "Failed" | "Cancelled") => return Err(format!("it ended {state}")),
        (WaitFor::Admitted, "Admitted" | "Running" | "Succeeded") => true,
        (WaitFor::Running, "Running" | "Succeeded") => true,
        (WaitFor::Finished, _) => done,
        _ => false,
    })
}

/// Follows `name` with the server's long poll until `until` holds; its state then.
async fn wait_for_state(
    c: &mut Client,
    name: &str,
    team: Option<String>,
    until: WaitFor,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<String> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    // Which team's (a user's certificate means its own): resolve once, then watch that team.
    let w = match fetch_workload(c, name, team.clone()).await {
        Ok(w) => w,
        Err(e) => {
            // Not a workload: a job array of that name waits for all its elements.
            let Reply::Arrays(arrays) = api(c.call(Body::GetArrays { team }).await)? else {
                return Err(e);
            };
            match arrays.into_iter().find(|a| a.name == name) {
                Some(a) => return wait_for_array(c, a, until, deadline, timeout).await,
                None => return Err(e),
            }
        }
    };
    let filter = WorkloadFilter {
        team: Some(w.team.clone()),
        all: true,
    };
    let mut state = w.state.clone();
    let mut digest = 0u64;
    loop {
        match reached(until, &state) {
            Ok(true) => return Ok(format!("workload {name}: {state}")),
            Ok(false) => {}
            // It finished, but not well: said as a success would be, with a failing status.
            Err(_) if until == WaitFor::Finished => bail!("workload {name}: {state}"),
            Err(e) => bail!("workload {name} will not be {until:?}: {e}"),
        }
        let Some(wait_ms) = poll_ms(deadline, 20_000) else {
            bail!(
                "timed out: workload {name} is {state}, not {until:?}, after {:?}",
                timeout.unwrap_or_default()
            );
        };
        let (d, workloads) = watch_once(c, filter.clone(), digest, wait_ms).await?;
        digest = d;
        // By id: the name may belong to an earlier, finished workload too.
        state = match workloads.iter().find(|x| x.id == w.id) {
            Some(x) => x.state.clone(),
            None => bail!("workload {name} is gone (cancelled and forgotten)"),
        };
    }
}

/// How long the next long poll may wait: at most `cap_ms`, and no later than `deadline`;
/// `None` once the deadline has passed.
fn poll_ms(deadline: Option<tokio::time::Instant>, cap_ms: u32) -> Option<u32> {
    match deadline {
        Some(d) => {
            let left = d.saturating_duration_since(tokio::time::Instant::now());
            (!left.is_zero()).then(|| left.as_millis().min(u128::from(cap_ms)) as u32)
        }
        None => Some(cap_ms),
    }
}

/// `wait ARRAY --for finished`: until every element of the array ran and ended; exits 1
/// unless all succeeded.
async fn wait_for_array(
    c: &mut Client,
    array: ArrayView,
    until: WaitFor,
    deadline: Option<tokio::time::Instant>,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<String> {
    let name = &array.name;
    if !matches!(until, WaitFor::Finished) {
        bail!("{name} is a job array: wait for it with --for finished, or for one element (NAME-INDEX)");
    }
    let filter = WorkloadFilter {
        team: Some(array.team.clone()),
        all: true,
    };
    let mut digest = 0u64;
    loop {
        let Some(wait_ms) = poll_ms(deadline, 2_000) else {
            bail!(
                "timed out: array {name} has not finished after {:?}",
                timeout.unwrap_or_default()
            );
        };
        let (d, _) = watch_once(c, filter.clone(), digest, wait_ms).await?;
        digest = d;
        let Reply::Arrays(arrays) = api(c
            .call(Body::GetArrays {
                team: Some(array.team.clone()),
            })
            .await)?
        else {
            bail!("unexpected answer to get arrays");
        };
        if arrays
            .iter()
            .any(|a| &a.name == name && a.submitted_ms == array.submitted_ms)
        {
            continue;
        }
        // The array is done: every element queued and finished (or cancelled while held). Read
        // the elements again: the last may have ended after the watch above answered.
        let Reply::Workloads(workloads) = api(c.call(Body::GetWorkloads(filter.clone())).await)?
        else {
            bail!("unexpected answer to get workloads");
        };
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for w in workloads.iter().filter(|w| {
            w.array.as_ref().is_some_and(|(a, _)| a == name) && w.submitted_ms >= array.submitted_ms
        }) {
            *counts.entry(w.state.clone()).or_default() += 1;
        }
        let summary = counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ");
        if counts.keys().any(|s| s != "Succeeded") {
            bail!("array {name} ended with {summary}");
        }
        return Ok(format!("array {name}: {summary}"));
    }
}

// ------------------------------------------------------------------------------ output

const WORKLOAD_HEADER: [&str; 7] = [
    "NAME", "TEAM", "PRIORITY", "STATE", "PODS", "NODES", "REASON",
];

fn workload_row(w: &WorkloadView) -> Vec<String> {
    let mut nodes: Vec<String> = w.pods.iter().map(|p| p.node.clone()).collect();
    nodes.dedup();
    let reason = w
        .conditions
        .iter()
        .find(|c| c.kind == "QuotaReserved" && !c.status)
        .map(|c| c.reason.clone())
        .or_else(|| {
            w.conditions
                .iter()
                .find(|c| c.kind == "Evicted" && c.status)
                .map(|c| c.reason.clone())
        })
        .unwrap_or_default();
    vec![
        w.name.clone(),
        w.team.clone(),
        match &w.priority_class {
            Some(c) => format!("{c} ({})", w.priority),
            None => w.priority.to_string(),
        },
        w.state.clone(),
        w.count.to_string(),
        nodes.join(","),
        reason,
    ]
}

/// A cell as a terminal should show it: control characters (a newline in a name) escaped, so
/// every row stays one line whatever the server returns.
fn cell(c: &str) -> String {
    if c.chars().any(char::is_control) {
        c.chars()
            .map(|ch| {
                if ch.is_control() {
                    ch.escape_default().to_string()
                } else {
                    ch.to_string()
                }
            })
            .collect()
    } else {
        c.to_string()
    }
}

/// Columns padded to their widest cell. Padding is written out, not formatted with a width,
/// which `format!` limits to 65,535 and panics past.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cell(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            s.push_str(c);
            if i + 1 < cells.len() {
                let w = widths.get(i).copied().unwrap_or(0);
                let pad = w.saturating_sub(c.chars().count()) + 3;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in &rows {
        out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
    }
    out
}

fn fmt_res(r: &allot_common::Resources) -> String {
    r.iter()
        .map(|(k, v)| format!("{k}={}", k.format(v)))
        .collect::<Vec<_>>()
        .join(",")
}

fn ms_time(ms: i64) -> String {
    allot_common::timefmt::utc(ms)
}

/// The account and region in the ARNs allot prints: it governs one cluster, its own.
const ARN_PREFIX: &str = "arn:aws:sagemaker:local:000000000000";
/// The cluster's id in `ClusterArn`.
const CLUSTER_ID: &str = "allotcluster";

/// A time as the AWS CLI prints a timestamp (Python's `isoformat()` of a UTC datetime).
fn aws_time(ms: i64) -> String {
    let base = ms_time(ms).trim_end_matches('Z').to_string();
    if ms.rem_euclid(1000) == 0 {
        format!("{base}+00:00")
    } else {
        format!("{base}.{:03}000+00:00", ms.rem_euclid(1000))
    }
}

/// The scheduler config's id: 12 lowercase hex digits of its name's fingerprint (the API's
/// ClusterSchedulerConfigId pattern, `[a-z0-9]{12}`).
fn scheduler_config_id(name: &str) -> String {
    format!(
        "{:012x}",
        allot_common::api::fnv1a(name.bytes()) & 0xffff_ffff_ffff
    )
}

/// A compute quota as DescribeComputeQuota returns it (`summary`: as ListComputeQuotas lists
/// it, without Description).
fn quota_json(q: &ComputeQuotaView, summary: bool) -> Value {
    let config = ComputeQuotaConfig::parse_shorthand(&q.config)
        .map(|c| c.to_aws_json())
        .unwrap_or_else(|_| Value::String(q.config.clone()));
    let mut v = json!({
        "ComputeQuotaArn": format!("{ARN_PREFIX}:compute-quota/{}", q.id),
        "ComputeQuotaId": q.id,
        "Name": q.name,
        "ComputeQuotaVersion": q.version,
        "Status": "Created",
        "ClusterArn": format!("{ARN_PREFIX}:cluster/{CLUSTER_ID}"),
        "ComputeQuotaConfig": config,
        "ComputeQuotaTarget": {"TeamName": q.team, "FairShareWeight": q.fair_share_weight},
        "ActivationState": q.activation.as_str(),
        "CreationTime": aws_time(q.created_ms),
        "LastModifiedTime": aws_time(q.updated_ms),
    });
    if let (Some(d), false) = (&q.description, summary) {
        v["Description"] = json!(d);
    }
    v
}

fn scheduler_config_json(s: &allot_common::api::SchedulerConfigView) -> Value {
    let id = scheduler_config_id(&s.name);
    let config = allot_common::hyperpod::parse_scheduler_config(&s.config)
        .map(|p| {
            json!({
                "PriorityClasses": p.priority_classes.iter()
                    .map(|c| json!({"Name": c.name, "Weight": c.weight}))
                    .collect::<Vec<_>>(),
                "FairShare": if p.fair_share { "Enabled" } else { "Disabled" },
                "IdleResourceSharing": if p.idle_resource_sharing { "Enabled" } else { "Disabled" },
            })
        })
        .unwrap_or_else(|_| Value::String(s.config.clone()));
    let mut v = json!({
        "ClusterSchedulerConfigArn": format!("{ARN_PREFIX}:cluster-scheduler-config/{id}"),
        "ClusterSchedulerConfigId": id,
        "Name": s.name,
        "ClusterSchedulerConfigVersion": s.version,
        "Status": "Created",
        "ClusterArn": format!("{ARN_PREFIX}:cluster/{CLUSTER_ID}"),
        "SchedulerConfig": config,
        "CreationTime": aws_time(s.created_ms),
        "LastModifiedTime": aws_time(s.updated_ms),
        "AdmissionLimits": {
            "MaxPendingPerTeam": s.limits.max_pending_per_team,
            "SubmitsPerSecond": s.limits.submits_per_second,
            "SubmitBurst": s.limits.submit_burst,
        },
        "Stability": {
            "MinimumRunTimeSeconds": s.stability.minimum_run_time_s,
            "PreemptionBudget": s.stability.preemption_budget,
        },
    });
    if let Some(d) = &s.description {
        v["Description"] = json!(d);
    }
    v
}

fn print_reply(r: Reply, format: Format) {
    match format {
        Format::Json => {
            let v = match &r {
                Reply::Quota(q) => quota_json(q, false),
                Reply::Quotas(qs) => json!({
                    "ComputeQuotaSummaries":
                        qs.iter().map(|q| quota_json(q, true)).collect::<Vec<_>>()
                }),
                Reply::SchedulerConfig(s) => scheduler_config_json(s),
                other => serde_json::to_value(other).unwrap_or(Value::Null),
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
            );
        }
        Format::Table => print!("{}", render(&r)),
    }
}

fn render(r: &Reply) -> String {
    match r {
        Reply::Hello {
            replica, leader, ..
        } => format!("replica {replica}, leader {leader:?}\n"),
        Reply::Done => "done\n".into(),
        Reply::Explanation(lines) => lines.iter().map(|l| format!("{l}\n")).collect(),
        Reply::LogChunk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::LogRequests(rs) => format!("{} log requests\n", rs.len()),
        Reply::WorkloadsAt { workloads, .. } => table(
            &WORKLOAD_HEADER,
            &workloads.iter().map(workload_row).collect::<Vec<_>>(),
        ),
        Reply::Assignments(a) => {
            format!("{} pods assigned (digest {:x})\n", a.pods.len(), a.digest)
        }
        Reply::Quota(q) => render_quotas(std::slice::from_ref(q)),
        Reply::Quotas(qs) => render_quotas(qs),
        Reply::SchedulerConfig(s) => {
            let mut out = table(
                &[
                    "NAME",
                    "VERSION",
                    "SCHEDULER CONFIG",
                    "ADMISSION LIMITS",
                    "STABILITY",
                ],
                &[vec![
                    s.name.clone(),
                    s.version.to_string(),
                    s.config.clone(),
                    format!(
                        "max-pending-per-team={},submits-per-second={},submit-burst={}",
                        s.limits.max_pending_per_team,
                        s.limits.submits_per_second,
                        s.limits.submit_burst
                    ),
                    format!(
                        "minimum-run-time={}s,preemption-budget={}",
                        s.stability.minimum_run_time_s, s.stability.preemption_budget
                    ),
                ]],
            );
            if let Some(d) = &s.description {
                out.push_str(&format!("Description: {d}\n"));
            }
            out
        }
        Reply::Submitted {
            name,
            id,
            existing,
            state,
        } => {
            if *existing {
                format!("workload {name} already submitted (id {id}): {state}\n")
            } else {
                format!("workload {name} submitted (id {id}): {state}\n")
            }
        }
        Reply::SubmittedBatch(v) => format!(
            "{} submitted, {} refused\n",
            v.iter().filter(|r| r.is_ok()).count(),
            v.iter().filter(|r| r.is_err()).count()
        ),
        Reply::Workloads(ws) => table(
            &WORKLOAD_HEADER,
            &ws.iter().map(workload_row).collect::<Vec<_>>(),
        ),
        Reply::Workload(w) => describe_workload(w),
        Reply::Nodes(ns) => render_nodes(ns),
        Reply::Teams(ts) => render_teams(ts),
        Reply::Cancelled { count, names } => cancel_summary(*count, names, "Cancelled") + "\n",
        Reply::ArraySubmitted {
            name,
            elements,
            queued,
            existing,
        } => format!(
            "array {name} {}: {elements} elements ({name}-INDEX), {queued} queued{}\n",
            if *existing {
                "already submitted"
            } else {
                "submitted"
            },
            if queued < elements {
                format!(", {} held by its limit", elements - queued)
            } else {
                String::new()
            }
        ),
        Reply::Arrays(a) => render_arrays(a),
        Reply::RegistryCredentials(v) => table(
            &["TEAM", "REGISTRY", "USERNAME"],
            &v.iter()
                .map(|c| vec![c.team.clone(), c.registry.clone(), c.username.clone()])
                .collect::<Vec<_>>(),
        ),
        Reply::History(rows) => render_history(rows, HistoryFormat::Table).unwrap_or_default(),
    }
}

/// When a pod started and ended, and how: `, started 2026-…Z, ended 2026-…Z (exit 0, Succeeded)`.
fn pod_times(p: &allot_common::api::PodView) -> String {
    let mut s = String::new();
    if let Some(st) = &p.status {
        s.push_str(&format!(", {st}"));
    }
    if let Some(t) = p.started_ms {
        s.push_str(&format!(", started {}", allot_common::timefmt::utc_ms(t)));
    }
    if let Some(t) = p.ended_ms {
        s.push_str(&format!(", ended {}", allot_common::timefmt::utc_ms(t)));
        let how: Vec<String> = p
            .exit_code
            .map(|c| format!("exit {c}"))
            .into_iter()
            .chain(p.outcome.clone())
            .collect();
        if !how.is_empty() {
            s.push_str(&format!(" ({})", how.join(", ")));
        }
    }
    s
}

/// `Cancelled 3 workloads: team-a/w1, team-a/w2, team-a/w3`.
fn cancel_summary(count: u64, names: &[String], what: &str) -> String {
    let more = count.saturating_sub(names.len() as u64);
    let mut s = format!(
        "{what} {count} workload{}",
        if count == 1 { "" } else { "s" }
    );
    if !names.is_empty() {
        s.push_str(": ");
        s.push_str(&names.join(", "));
    }
    if more > 0 {
        s.push_str(&format!(
            " and {more} more (array elements not queued yet among them)"
        ));
    }
    s
}

fn render_arrays(a: &[ArrayView]) -> String {
    table(
        &["NAME", "TEAM", "INDICES", "ELEMENTS", "HELD", "SUBMITTED"],
        &a.iter()
            .map(|a| {
                vec![
                    a.name.clone(),
                    a.team.clone(),
                    a.indices.clone(),
                    a.total.to_string(),
                    a.held.to_string(),
                    allot_common::timefmt::utc(a.submitted_ms),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

/// The workload table with each job array's elements as one row: `NAME[INDICES]`, and how
/// many elements are in each state (held: not queued yet, for the array's limit).
fn render_collapsed(ws: &[WorkloadView], arrays: &[ArrayView]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    // (team, array) → row index, element states, pods, nodes.
    type Group = (usize, BTreeMap<String, u32>, u32, Vec<String>);
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for w in ws {
        let Some((array, _)) = &w.array else {
            rows.push(workload_row(w));
            continue;
        };
        let key = (w.team.clone(), array.clone());
        let g = groups.entry(key).or_insert_with(|| {
            rows.push(Vec::new());
            (rows.len() - 1, BTreeMap::new(), 0, Vec::new())
        });
        *g.1.entry(w.state.clone()).or_default() += 1;
        g.2 += w.count;
        for p in &w.pods {
            if !g.3.contains(&p.node) {
                g.3.push(p.node.clone());
            }
        }
        if rows[g.0].is_empty() {
            rows[g.0] = workload_row(w);
        }
    }
    for a in arrays {
        let key = (a.team.clone(), a.name.clone());
        if a.held > 0 {
            let g = groups.entry(key).or_insert_with(|| {
                rows.push(vec![
                    String::new(),
                    a.team.clone(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                (rows.len() - 1, BTreeMap::new(), 0, Vec::new())
            });
            g.1.insert("Held".into(), a.held);
        }
    }
    for ((team, name), (i, states, pods, nodes)) in &groups {
        let indices = arrays
            .iter()
            .find(|a| &a.team == team && &a.name == name)
            .map(|a| a.indices.clone())
            .unwrap_or_default();
        let row = &mut rows[*i];
        row[0] = format!("{name}[{indices}]");
        const ORDER: [&str; 8] = [
            "Running",
            "Admitted",
            "Evicting",
            "Pending",
            "Held",
            "Succeeded",
            "Failed",
            "Cancelled",
        ];
        let mut counts: Vec<(&String, &u32)> = states.iter().collect();
        counts.sort_by_key(|(s, _)| ORDER.iter().position(|o| o == s));
        row[3] = counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ");
        row[4] = pods.to_string();
        row[5] = nodes.join(",");
        row[6] = String::new();
    }
    table(&WORKLOAD_HEADER, &rows)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HistoryFormat {
    Table,
    Json,
    Csv,
}

/// A point in time on the command line: some time ago, or a UTC time.
#[derive(Clone, Copy, Debug)]
pub enum When {
    Ago(std::time::Duration),
    At(i64),
}

impl When {
    fn at(self, now: i64) -> i64 {
        match self {
            When::Ago(d) => now - d.as_millis() as i64,
            When::At(ms) => ms,
        }
    }
}

fn parse_when(s: &str) -> Result<When, String> {
    if let Some(ms) = allot_common::timefmt::parse_utc(s) {
        return Ok(When::At(ms));
    }
    parse_duration(s).map(When::Ago).map_err(|_| {
        format!("{s:?}: use a time ago (90s, 30m, 2h) or a UTC time (2026-11-26T08:00:00Z)")
    })
}

const HISTORY_HEADER: [&str; 12] = [
    "NAME",
    "TEAM",
    "STATE",
    "EXIT",
    "SUBMITTED",
    "WAIT",
    "RUN",
    "ENDED",
    "PODS",
    "NODES",
    "PREEMPTED",
    "REASON",
];

fn secs(ms: Option<i64>) -> String {
    ms.map(|m| format!("{:.1}s", m as f64 / 1000.0))
        .unwrap_or_default()
}

fn history_row(r: &HistoryRow) -> Vec<String> {
    vec![
        r.name.clone(),
        r.team.clone(),
        r.state.clone(),
        r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        allot_common::timefmt::utc(r.submitted_ms),
        secs(r.wait_ms),
        secs(r.run_ms),
        allot_common::timefmt::utc(r.ended_ms),
        r.pods.to_string(),
        r.nodes.join(","),
        match r.preemptions {
            0 => "0".into(),
            n => format!("{n} ({} lost)", secs(Some(r.lost_run_ms))),
        },
        r.reason.clone(),
    ]
}

fn render_history(rows: &[HistoryRow], format: HistoryFormat) -> anyhow::Result<String> {
    Ok(match format {
        HistoryFormat::Table => table(
            &HISTORY_HEADER,
            &rows.iter().map(history_row).collect::<Vec<_>>(),
        ),
        HistoryFormat::Json => serde_json::to_string_pretty(rows)? + "\n",
        HistoryFormat::Csv => {
            let field = |s: &str| {
                if s.contains([',', '"', '\n', '\r']) {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s.to_string()
                }
            };
            let mut out = String::from(
                "id,name,team,priority_class,state,exit_code,submitted,admitted,started,ended,wait_s,run_s,pods,nodes,preemptions,reason,lost_run_s\n",
            );
            let t = |ms: Option<i64>| ms.map(allot_common::timefmt::utc_ms).unwrap_or_default();
            let s3 = |ms: Option<i64>| {
                ms.map(|m| format!("{:.3}", m as f64 / 1000.0))
                    .unwrap_or_default()
            };
            for r in rows {
                let cells = [
                    r.id.to_string(),
                    field(&r.name),
                    field(&r.team),
                    field(r.priority_class.as_deref().unwrap_or("")),
                    r.state.clone(),
                    r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    t(Some(r.submitted_ms)),
                    t(r.admitted_ms),
                    t(r.started_ms),
                    t(Some(r.ended_ms)),
                    s3(r.wait_ms),
                    s3(r.run_ms),
                    r.pods.to_string(),
                    field(&r.nodes.join(" ")),
                    r.preemptions.to_string(),
                    field(&r.reason),
                    s3(Some(r.lost_run_ms)),
                ];
                out.push_str(&cells.join(","));
                out.push('\n');
            }
            out
        }
    })
}

fn render_quotas(qs: &[ComputeQuotaView]) -> String {
    table(
        &[
            "ID",
            "NAME",
            "TEAM",
            "WEIGHT",
            "VERSION",
            "STATE",
            "COMPUTE QUOTA CONFIG",
        ],
        &qs.iter()
            .map(|q| {
                vec![
                    q.id.clone(),
                    q.name.clone(),
                    q.team.clone(),
                    q.fair_share_weight.to_string(),
                    q.version.to_string(),
                    q.activation.as_str().to_string(),
                    q.config.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

fn render_nodes(ns: &[NodeView]) -> String {
    table(
        &[
            "NAME",
            "INSTANCE TYPE",
            "STATUS",
            "CAPACITY",
            "USED",
            "SOURCES",
        ],
        &ns.iter()
            .map(|n| {
                vec![
                    n.name.clone(),
                    n.instance_type.clone(),
                    n.status.clone(),
                    fmt_res(&n.capacity),
                    fmt_res(&n.used),
                    fmt_sources(n),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

/// Where a node's figures came from, by source: `catalog: cpu,memory; nvml: gpu`. Only the
/// resources the node has are named.
fn fmt_sources(n: &NodeView) -> String {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (res, src) in &n.sources {
        let has = res == "*" || n.capacity.0.keys().any(|r| r.as_str() == res.as_str());
        if has {
            by.entry(src.as_str()).or_default().push(res.as_str());
        }
    }
    by.iter()
        .map(|(src, res)| {
            if res == &["*"] {
                src.to_string()
            } else {
                format!("{src}: {}", res.join(","))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn render_teams(ts: &[TeamView]) -> String {
    table(
        &[
            "TEAM", "WEIGHT", "NOMINAL", "USAGE", "BORROWED", "LENT", "SHARE", "PENDING",
            "ADMITTED",
        ],
        &ts.iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.fair_share_weight.to_string(),
                    fmt_res(&t.nominal),
                    fmt_res(&t.usage),
                    fmt_res(&t.borrowed),
                    fmt_res(&t.lent),
                    match t.weighted_share {
                        Some(s) => format!("{s:.0}"),
                        None => "inf".into(),
                    },
                    t.pending.to_string(),
                    t.admitted.to_string(),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

fn describe_workload(w: &WorkloadView) -> String {
    let mut s = String::new();
    s.push_str(&format!("Name:         {}\n", w.name));
    s.push_str(&format!("Team:         {}\n", w.team));
    s.push_str(&format!(
        "Priority:     {}{}\n",
        w.priority,
        w.priority_class
            .as_ref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    ));
    s.push_str(&format!("State:        {}\n", w.state));
    s.push_str(&format!("Submitted:    {}\n", ms_time(w.submitted_ms)));
    if let Some(a) = w.admitted_ms {
        s.push_str(&format!("Admitted:     {}\n", ms_time(a)));
    }
    s.push_str(&format!(
        "Pods:         {} x {}\n",
        w.count,
        fmt_res(&w.requests)
    ));
    if w.preemptions > 0 {
        s.push_str(&format!(
            "Preemptions:  {}, run time lost {}\n",
            w.preemptions,
            secs(Some(w.lost_run_ms))
        ));
    }
    if let Some(run) = &w.run {
        if let Some(i) = &run.image {
            s.push_str(&format!("Image:        {i}\n"));
        }
        if !run.command.is_empty() || !run.args.is_empty() {
            s.push_str(&format!("Command:      {}\n", run.program().join(" ")));
        }
    }
    if !w.flavors.is_empty() {
        s.push_str("Flavors:\n");
        for (ps, m) in &w.flavors {
            let f: Vec<String> = m.iter().map(|(r, f)| format!("{r}: {f}")).collect();
            s.push_str(&format!("  {ps}: {}\n", f.join(", ")));
        }
    }
    if !w.pods.is_empty() {
        s.push_str("Placement:\n");
        for p in &w.pods {
            let d: Vec<String> = p
                .devices
                .iter()
                .map(|(r, ix)| {
                    format!(
                        "{r} [{}]",
                        ix.iter()
                            .map(|i| i.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                })
                .collect();
            let devices = if d.is_empty() {
                String::new()
            } else {
                format!(" {}", d.join(" "))
            };
            s.push_str(&format!(
                "  {}[{}] on {}{devices}{}\n",
                p.pod_set,
                p.index,
                p.node,
                pod_times(p)
            ));
        }
    }
    if !w.labels.is_empty() {
        let l: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("Labels: {}\n", l.join(",")));
    }
    if let Some((array, index)) = &w.array {
        s.push_str(&format!("Array: {array}, index {index}\n"));
    }
    if let Some(f) = w.finished_ms {
        s.push_str(&format!("Finished: {}\n", allot_common::timefmt::utc_ms(f)));
    }
    s.push_str("Conditions:\n");
    s.push_str(&table(
        &["  TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"],
        &w.conditions
            .iter()
            .map(|c| {
                vec![
                    format!("  {}", c.kind),
                    if c.status { "True" } else { "False" }.to_string(),
                    c.reason.clone(),
                    ms_time(c.time_ms),
                    c.message.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 23: a quota named with 100,000 characters or a newline made every listing panic
    /// ("Formatting argument out of range").
    #[test]
    fn tables_take_any_cell_the_server_returns() {
        let long = "q".repeat(100_000);
        let t = table(
            &["NAME", "TEAM"],
            &[
                vec![long.clone(), "team-a".into()],
                vec!["a\nb\tc".into(), "team-b".into()],
                vec!["x".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "one line per row: {:?}", &t[..80]);
        assert_eq!(lines[1], format!("{long}   team-a"));
        assert!(lines[2].starts_with("a\\nb\\tc   "), "{}", lines[2]);
        assert!(lines[2].ends_with("team-b"));
        assert_eq!(lines[3], "x");
        assert_eq!(table(&["A", "B"], &[]), "A   B\n");
    }

    #[test]
    fn target_shorthand_and_json() {
        assert_eq!(
            parse_target("TeamName=team-a,FairShareWeight=10").unwrap(),
            ("team-a".to_string(), 10)
        );
        assert_eq!(
            parse_target(r#"{"TeamName":"b","FairShareWeight":5}"#).unwrap(),
            ("b".to_string(), 5)
        );
        let e = parse_target("TeamName=a,Weight=3").unwrap_err().to_string();
        assert!(e.contains("unknown key \"Weight\""), "{e}");
        let e = parse_target("FairShareWeight=3").unwrap_err().to_string();
        assert!(e.contains("missing TeamName"), "{e}");
        let e = parse_target("TeamName=a,FairShareWeight=101")
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range 0..=100"), "{e}");
    }

    #[test]
    fn dates_render_in_utc() {
        assert_eq!(ms_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(ms_time(1_795_000_000_000), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn job_files_carry_an_image_and_its_container_settings() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        std::fs::write(
            &p,
            "name: t\nteam: a\nrequests: {gpu: 1}\nimage: registry.example/team/train:1\n\
             command: [python]\nargs: [train.py, --epochs, 3]\n\
             mounts: ['/data:/data:ro', {host_path: /ckpt, path: /ckpt}]\n\
             shm_size: 8Gi\nhost_network: true\nuser: 1000\n",
        )
        .unwrap();
        let run = read_job(&p).unwrap().run.unwrap();
        assert_eq!(run.image.as_deref(), Some("registry.example/team/train:1"));
        assert_eq!(run.command, vec!["python"]);
        assert_eq!(run.args, vec!["train.py", "--epochs", "3"]);
        assert_eq!(run.program(), vec!["python", "train.py", "--epochs", "3"]);
        assert_eq!(run.mounts.len(), 2);
        assert!(run.mounts[0].read_only && !run.mounts[1].read_only);
        assert_eq!(run.mounts[1].container_path, "/ckpt");
        assert_eq!(run.shm_size, Some(8 << 30));
        assert!(run.host_network);
        assert_eq!(run.user.as_deref(), Some("1000"));
        assert_eq!(run.check(), Ok(()));
        // Container settings without an image, and bad values, are refused by name.
        for (yaml, want) in [
            ("mounts: ['/d:/d']\n", "mounts applies to containers"),
            ("image: 'Bad Image'\n", "not an image reference"),
            ("image: x\nmounts: ['d:/d']\n", "absolute path"),
            ("image: x\nuser: 'no body'\n", "neither a number"),
        ] {
            std::fs::write(&p, format!("name: t\nteam: a\n{yaml}")).unwrap();
            let e = match read_job(&p) {
                Err(e) => e.to_string(),
                Ok(j) => j.run.unwrap().check().unwrap_err(),
            };
            assert!(e.contains(want), "{yaml}: {e}");
        }
    }

    #[test]
    fn job_files_carry_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        std::fs::write(
            &p,
            "name: train\nteam: team-a\ncount: 2\nrequests: {gpu: 1}\ncommand: [python, train.py]\nenv: {EPOCHS: 3}\ngrace: 60\n",
        )
        .unwrap();
        let j = read_job(&p).unwrap();
        assert_eq!(j.spec.name, "train");
        assert_eq!(j.spec.pod_sets[0].count, 2);
        let run = j.run.unwrap();
        assert_eq!(run.command, vec!["python", "train.py"]);
        assert_eq!(run.env["EPOCHS"], "3");
        assert_eq!(run.grace_seconds, Some(60));
        std::fs::write(&p, "name: t\nteam: a\nduration: 5\n").unwrap();
        let e = read_job(&p).unwrap_err().to_string();
        assert!(e.contains("duration belongs to simulation"), "{e}");
    }

    /// Issue 24, item 1: a job from flags alone, or a file with flags over it.
    #[test]
    fn submit_flags_make_a_job_or_override_a_files() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            job: JobFlags,
        }
        let flags = |args: &[&str]| {
            let mut all = vec!["t"];
            all.extend_from_slice(args);
            T::try_parse_from(all).unwrap().job
        };
        let j = flags(&[
            "--gpus",
            "2",
            "--request",
            "cpu=8,memory=32Gi",
            "--",
            "python",
            "train.py",
            "--lr",
            "0.1",
        ])
        .submit_input(None, Some("user-team-a"))
        .unwrap();
        assert_eq!(j.spec.team, "team-a", "from the certificate");
        assert!(j.spec.name.starts_with("python-"), "{}", j.spec.name);
        let r = &j.spec.pod_sets[0].requests;
        assert_eq!(r.get(&allot_common::ResourceName::gpu()), 2);
        assert_eq!(r.get(&allot_common::ResourceName::cpu()), 8_000);
        assert_eq!(r.get(&allot_common::ResourceName::memory()), 32 << 30);
        assert_eq!(
            j.run.unwrap().command,
            vec!["python", "train.py", "--lr", "0.1"]
        );
        // A file, with flags over it.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        std::fs::write(&p, "name: train\nteam: team-b\ncount: 2\nrequests: {gpu: 1, cpu: 4}\ncommand: [python, old.py]\n").unwrap();
        let j = flags(&[
            "--name",
            "train-2",
            "--gpus",
            "4",
            "--count",
            "3",
            "--priority",
            "training",
            "--",
            "python",
            "new.py",
        ])
        .submit_input(Some(&p), Some("admin-admin"))
        .unwrap();
        assert_eq!(
            (j.spec.name.as_str(), j.spec.team.as_str()),
            ("train-2", "team-b")
        );
        assert_eq!(j.spec.pod_sets[0].count, 3);
        let r = &j.spec.pod_sets[0].requests;
        assert_eq!(
            r.get(&allot_common::ResourceName::gpu()),
            4,
            "the flag wins"
        );
        assert_eq!(
            r.get(&allot_common::ResourceName::cpu()),
            4_000,
            "the file's stays"
        );
        assert_eq!(j.run.unwrap().command, vec!["python", "new.py"]);
        // Bad input names what would be accepted.
        let e = flags(&["--request", "gpu"])
            .submit_input(None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("use resource=quantity"), "{e}");
        let e = flags(&["--gpus", "1"])
            .submit_input(None, Some("admin-admin"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("team"), "no team: {e}");
    }

    /// Issue 23: a priority of 99999999999999999999 got "data did not match any variant of
    /// untagged enum PriorityIn".
    #[test]
    fn a_priority_out_of_range_says_what_would_be_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        for (text, says) in [
            ("priority: 99999999999999999999", "out of range"),
            (
                "priority: 3000000000",
                "3000000000 is out of the 32-bit range",
            ),
            ("priority: 1.5", "not a whole number"),
        ] {
            std::fs::write(
                &p,
                format!("name: t\nteam: a\nrequests: {{gpu: 1}}\n{text}\n"),
            )
            .unwrap();
            let e = read_job(&p).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("untagged"), "{text}: {e}");
        }
        std::fs::write(&p, "name: t\nteam: a\nrequests: {gpu: 1}\npriority: -5\n").unwrap();
        read_job(&p).unwrap();
        std::fs::write(
            &p,
            "name: t\nteam: a\nrequests: {gpu: 1}\npriority: training\n",
        )
        .unwrap();
        read_job(&p).unwrap();
    }
}

//! Admin and user commands against a running cluster, named after `aws sagemaker` so HyperPod
//! users feel at home: compute quotas and the cluster scheduler config for admins; submit,
//! get, describe and cancel for data scientists.

use std::collections::BTreeMap;
use std::path::PathBuf;

use std::io::{IsTerminal, Write};

use allot_common::api::{
    ActivationState, Body, ComputeQuotaInput, HistoryFilter, Reply, WorkloadFilter,
    WorkloadSelector,
};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::timefmt::now_ms;
use allot_common::usage::{UsageBy, UsageQuery};
use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand};

mod cohorts;
mod dashboard;
mod follow;
mod job_file;
pub(crate) mod render;
mod usage;

use crate::client::{api, Client, ClientOpts};
use allot_common::api::ErrorKind;
use allot_net::client::ClientError;
use follow::*;
pub use follow::{parse_duration, pod_logs, LogTarget, WaitFor};
pub use job_file::JobFlags;
use render::*;
pub use render::{Format, HistoryFormat};

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
    /// Gang scheduling: whether it is on, its timeout and backoff.
    GangScheduling {
        #[command(flatten)]
        out: Out,
    },
    /// The cohorts: their place in the tree, their fair-share weight, their teams, their pool
    /// and what is in use.
    Cohorts {
        #[command(flatten)]
        out: Out,
    },
    /// The coordinator replicas as the leader sees them: address, role, how far behind, and
    /// whether it hears from them (admins; also `allot coordinator members list`).
    Members {
        #[command(flatten)]
        out: Out,
    },
    /// Topology domains (racks, network blocks): their nodes and free room, level by level.
    Topology {
        /// Only this level's domains.
        #[arg(long)]
        level: Option<String>,
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
    /// One node: status and why, capacity and use, devices with their health, and the pods on
    /// it (admins see every team's; a user its own team's).
    Node { name: String },
    /// One cohort: its place in the tree, its fair-share weight, the cohorts and teams below
    /// it, and per instance type and resource its own quota, limits, pool and use.
    Cohort {
        name: String,
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
    /// Who used, borrowed and lent what: resource-hours per team (or class, instance type,
    /// day), split into own quota, borrowed, lent, idle and lost to preemption, and who lent to
    /// whom (HyperPod's utilization reports; Slurm's sreport).
    Usage {
        /// From: a time ago (7d, 12h) or a UTC time or date (2026-11-26); default 7d.
        #[arg(long, value_parser = parse_when)]
        since: Option<When>,
        /// Until: a time ago or a UTC time or date; default now.
        #[arg(long, value_parser = parse_when)]
        until: Option<When>,
        /// Only this team (users see only their own team anyway).
        #[arg(long)]
        team: Option<String>,
        /// Group by team, class, instance-type, day, workload, or several (day,team).
        #[arg(long, value_delimiter = ',', value_parser = UsageBy::parse, default_value = "team")]
        by: Vec<UsageBy>,
        /// Output format: a table in hours, CSV in hours, or JSON in exact resource-milliseconds.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        format: HistoryFormat,
    },
    /// Replays what the cluster recorded over a period in the simulator, as it is and with a
    /// proposed scheduler config or quotas, and prints per team the waits, GPU-hours and
    /// preemptions side by side with what really happened (admins).
    WhatIf {
        /// From: a time ago (12h) or a UTC time or date; default 1d (the cluster keeps
        /// finished workloads a day).
        #[arg(long, value_parser = parse_when)]
        since: Option<When>,
        /// Until: a time ago or a UTC time or date; default now.
        #[arg(long, value_parser = parse_when)]
        until: Option<When>,
        /// A proposed scheduler config, as update-cluster-scheduler-config takes it.
        #[arg(long)]
        scheduler_config: Option<String>,
        /// A proposed quota, TEAM=CONFIG with the config as create-compute-quota takes it
        /// (repeatable).
        #[arg(long, value_parser = crate::what_if::parse_team_quota)]
        compute_quota: Vec<(String, String)>,
        /// Also write the recorded period as an allot simulate scenario file (JSON).
        #[arg(long)]
        save: Option<PathBuf>,
    },
    /// Prints a link that signs a browser in to the web dashboard of the coordinator that
    /// answers, as this certificate's identity (admins see every team, a team user its own).
    Dashboard {
        /// The HOST:PORT the browser reaches the coordinator's HTTP port at, when not the
        /// address it listens on (a port-forward, a load balancer).
        #[arg(long)]
        address: Option<String>,
    },
    /// Stops placing new pods on a node; what runs there keeps running (admins).
    Cordon {
        /// The node's name (`allot get nodes`).
        node: String,
    },
    /// Places pods on a cordoned node again (admins).
    Uncordon { node: String },
    /// Cordons a node and moves its work away: each workload with a pod there is stopped with
    /// its grace period and requeued to run elsewhere (admins). `uncordon` ends the maintenance.
    Drain {
        node: String,
        /// Let the work running there finish instead: cordon the node and wait until nothing
        /// holds room on it.
        #[arg(long, conflicts_with = "evict")]
        wait: bool,
        /// Stop the work there now and requeue it (what `drain` does without --wait).
        #[arg(long)]
        evict: bool,
        /// With --wait: after this long (30m, 2h), stop and requeue what still runs there,
        /// as --evict does. Without it, --wait waits as long as the work runs.
        #[arg(long, requires = "wait", value_parser = follow::parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Writes the cluster's replicated state to FILE (admins): quotas, the scheduler config,
    /// workloads, nodes, credentials and usage, as of now, while the cluster goes on. Start a
    /// new cluster from it with `allot coordinator --restore FILE`.
    Backup {
        /// Where to write it (replaced whole, or not at all).
        file: PathBuf,
    },
    /// Creates or changes a cohort (admins): where it sits in the tree of cohorts, the quota it
    /// owns, and the limits on what it borrows from and lends to its parent. Teams share
    /// quota in the default cohort (shared-pool) until `set-team-cohort` moves them.
    CreateCohort(cohorts::CohortFlags),
    /// Deletes a cohort no team is in and no cohort sits under (admins).
    DeleteCohort { name: String },
    /// Puts a team in a cohort (admins); without COHORT, back in the default one.
    SetTeamCohort {
        team: String,
        cohort: Option<String>,
    },
    /// Removes a node that will not come back (admins): it must be cordoned or failed, with
    /// nothing holding room on it (`drain --wait` first). Its agent reporting again brings it
    /// back, cordoned.
    DeleteNode {
        /// The node's name (`allot get nodes`).
        node: String,
    },
    /// Gang scheduling (admins), HyperPod's and Kueue's waitForPodsReady: a workload whose
    /// pods have not all started within --timeout of its admission is evicted and queued again
    /// after a backoff that doubles each time. `allot get gang-scheduling` shows it.
    SetGangScheduling {
        /// Turn it off (the default: admitted workloads are not timed).
        #[arg(long, conflicts_with_all = ["timeout", "block_admission", "backoff_base", "backoff_max"])]
        off: bool,
        /// How long every pod of an admitted workload has to start (5m by default).
        #[arg(long, value_parser = follow::parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Admit nothing else while an admitted workload's pods are starting.
        #[arg(long)]
        block_admission: bool,
        /// The first backoff after a timeout (60s by default); each next one doubles.
        #[arg(long, value_parser = follow::parse_duration)]
        backoff_base: Option<std::time::Duration>,
        /// The longest backoff (1h by default).
        #[arg(long, value_parser = follow::parse_duration)]
        backoff_max: Option<std::time::Duration>,
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

/// The team a command names, else the team of the user certificate in use.
fn team_or_mine(team: Option<String>, identity: Option<&str>) -> anyhow::Result<String> {
    team.or_else(|| {
        identity
            .and_then(|i| i.strip_prefix("user-"))
            .map(str::to_string)
    })
    .ok_or_else(|| anyhow!("--team is needed (an admin certificate acts for no team of its own)"))
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

/// Runs one cluster command against the coordinators.
/// `identity`: the certificate's file stem (`--as`), which gives a user's team.
async fn run_with(cmd: ClusterCmd, c: &mut Client, identity: Option<&str>) -> anyhow::Result<()> {
    match cmd {
        cmd @ (ClusterCmd::CreateComputeQuota { .. }
        | ClusterCmd::UpdateComputeQuota { .. }
        | ClusterCmd::DescribeComputeQuota { .. }
        | ClusterCmd::ListComputeQuotas { .. }
        | ClusterCmd::CreateRegistryCredentials { .. }
        | ClusterCmd::DeleteRegistryCredentials { .. }
        | ClusterCmd::ListRegistryCredentials { .. }
        | ClusterCmd::DeleteComputeQuota { .. }
        | ClusterCmd::CreateClusterSchedulerConfig { .. }
        | ClusterCmd::UpdateClusterSchedulerConfig { .. }
        | ClusterCmd::DescribeClusterSchedulerConfig { .. }) => run_admin(cmd, c, identity).await,
        ClusterCmd::CreateCohort(flags) => cohorts::create(c, &flags).await,
        ClusterCmd::DeleteCohort { name } => cohorts::delete(c, &name).await,
        ClusterCmd::SetTeamCohort { team, cohort } => {
            cohorts::set_team(c, &team, cohort.as_deref()).await
        }
        cmd @ (ClusterCmd::Submit { .. }
        | ClusterCmd::Cancel { .. }
        | ClusterCmd::Cordon { .. }
        | ClusterCmd::Uncordon { .. }
        | ClusterCmd::Drain { .. }
        | ClusterCmd::DeleteNode { .. }
        | ClusterCmd::SetGangScheduling { .. }
        | ClusterCmd::Backup { .. }) => run_writes(cmd, c, identity).await,
        cmd => run_reads(cmd, c).await,
    }
}

/// The AWS task-governance commands: compute quotas here, the scheduler config and registry
/// credentials in `run_config`.
async fn run_admin(cmd: ClusterCmd, c: &mut Client, identity: Option<&str>) -> anyhow::Result<()> {
    match cmd {
        cmd @ (ClusterCmd::CreateRegistryCredentials { .. }
        | ClusterCmd::DeleteRegistryCredentials { .. }
        | ClusterCmd::ListRegistryCredentials { .. }
        | ClusterCmd::CreateClusterSchedulerConfig { .. }
        | ClusterCmd::UpdateClusterSchedulerConfig { .. }
        | ClusterCmd::DescribeClusterSchedulerConfig { .. }) => run_config(cmd, c, identity).await,
        cmd => run_quotas(cmd, c).await,
    }
}

/// Compute quotas: create, update, describe, list, delete.
async fn run_quotas(cmd: ClusterCmd, c: &mut Client) -> anyhow::Result<()> {
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
        ClusterCmd::DeleteComputeQuota { compute_quota_id } => {
            let name = resolve_quota(c, &compute_quota_id).await?;
            api(c
                .call(Body::DeleteComputeQuota { name: name.clone() })
                .await)?;
            println!("deleted compute quota {name}");
        }
        _ => bail!("a command run_quotas does not run"),
    }
    Ok(())
}

/// The cluster scheduler config and teams' registry credentials.
async fn run_config(cmd: ClusterCmd, c: &mut Client, identity: Option<&str>) -> anyhow::Result<()> {
    match cmd {
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
        _ => bail!("a command run_config does not run"),
    }
    Ok(())
}

/// `describe node`: the node from `get nodes`, with the pods of the workloads the caller sees.
async fn describe_node(c: &mut Client, name: &str) -> anyhow::Result<()> {
    let Reply::Nodes(nodes) = api(c.call(Body::GetNodes).await)? else {
        bail!("unexpected answer to get nodes");
    };
    let Some(node) = nodes.iter().find(|n| n.name == name) else {
        let known: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        bail!("unknown node {name:?}; nodes: {}", known.join(", "));
    };
    let filter = WorkloadFilter {
        team: None,
        all: false,
    };
    let Reply::Workloads(ws) = api(c.call(Body::GetWorkloads(filter)).await)? else {
        bail!("unexpected answer to get workloads");
    };
    // Its topology, where the coordinator knows topology (protocol 7).
    let domains = match c.call(Body::GetTopology).await {
        Ok(Ok(Reply::Topology(ds))) => ds,
        _ => Vec::new(),
    };
    let topology: Vec<String> = domains
        .iter()
        .filter(|d| d.nodes.iter().any(|n| n == name))
        .map(|d| format!("{}={}", d.level, d.domain))
        .collect();
    print!("{}", render_node(node, &ws, &topology));
    Ok(())
}

/// Submitting and cancelling work, and node maintenance.
async fn run_writes(cmd: ClusterCmd, c: &mut Client, identity: Option<&str>) -> anyhow::Result<()> {
    match cmd {
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
        cmd @ (ClusterCmd::Cordon { .. }
        | ClusterCmd::Uncordon { .. }
        | ClusterCmd::Drain { .. }
        | ClusterCmd::Backup { .. }
        | ClusterCmd::SetGangScheduling { .. }
        | ClusterCmd::DeleteNode { .. }) => run_node_admin(cmd, c).await?,
        _ => bail!("a command run_writes does not run"),
    }
    Ok(())
}

/// The admin's node maintenance, backups and gang scheduling (`run_writes`).
async fn run_node_admin(cmd: ClusterCmd, c: &mut Client) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Cordon { node } => {
            api(c
                .call(Body::CordonNode {
                    name: node.clone(),
                    cordoned: true,
                })
                .await)?;
            println!("node {node} cordoned: no new pods are placed on it");
        }
        ClusterCmd::Uncordon { node } => {
            api(c
                .call(Body::CordonNode {
                    name: node.clone(),
                    cordoned: false,
                })
                .await)?;
            println!("node {node} uncordoned");
        }
        ClusterCmd::Drain {
            node,
            wait: true,
            timeout,
            ..
        } => drain_waiting(c, &node, timeout).await?,
        ClusterCmd::Backup { file } => write_backup(c, &file).await?,
        ClusterCmd::SetGangScheduling {
            off,
            timeout,
            block_admission,
            backoff_base,
            backoff_max,
        } => {
            let policy = gang_policy(off, timeout, block_admission, backoff_base, backoff_max)?;
            api(c.call(Body::SetGangScheduling(policy)).await)?;
            print!("{}", render::render_gang_scheduling(policy.as_ref()));
        }
        ClusterCmd::DeleteNode { node } => {
            api(c.call(Body::RemoveNode { name: node.clone() }).await)?;
            println!("node {node} removed from the cluster (its agent reporting again brings it back, cordoned)");
        }
        ClusterCmd::Drain { node, .. } => {
            api(c.call(Body::DrainNode { name: node.clone() }).await)?;
            println!(
                "node {node} cordoned and draining: its workloads stop with their grace period \
                 and are requeued (allot get workloads follows them; allot uncordon {node} ends it)"
            );
        }
        _ => bail!("a command run_node_admin does not run"),
    }
    Ok(())
}

/// `allot backup FILE`: the cluster's state, written whole or not at all.
async fn write_backup(c: &mut Client, file: &std::path::Path) -> anyhow::Result<()> {
    let tmp = file.with_extension("partial");
    let written = match c.stream(Body::BackupStream).await? {
        (
            Ok(Reply::BackupStream {
                format,
                taken_ms,
                size,
            }),
            mut recv,
        ) => {
            let mut out = std::fs::File::create(&tmp)
                .map_err(|e| anyhow!("writing {}: {e}", tmp.display()))?;
            let header = allot_coordinator::backup::file_header(format, taken_ms);
            let n = receive_backup(&mut recv, &mut out, header.as_bytes(), size)
                .await
                .map_err(|e| {
                    let _ = std::fs::remove_file(&tmp);
                    anyhow!("receiving the backup: {e}")
                })?;
            (n, format)
        }
        // A coordinator of a release before streams: the whole state in one answer. Releases
        // before protocol 6 cannot decode the request at all, and say so.
        (Err(e), _) if crate::client::older_release(&e) => {
            let Reply::Backup {
                format,
                taken_ms,
                data,
            } = api(c.call(Body::Backup).await)?
            else {
                bail!("unexpected answer to a backup");
            };
            let bytes = allot_coordinator::backup::file_bytes(format, taken_ms, &data);
            std::fs::write(&tmp, &bytes).map_err(|e| anyhow!("writing {}: {e}", tmp.display()))?;
            (bytes.len() as u64, format)
        }
        (other, _) => {
            api(Ok(other))?;
            bail!("unexpected answer to a backup");
        }
    };
    std::fs::rename(&tmp, file).map_err(|e| anyhow!("writing {}: {e}", file.display()))?;
    let (bytes, format) = written;
    println!(
        "backup of the cluster's state ({bytes} bytes, format {format}) written to {}; start a new cluster from it with allot coordinator --restore {}",
        file.display(),
        file.display()
    );
    Ok(())
}

/// The settings `allot set-gang-scheduling` gives (`None` with --off), defaults where a flag is
/// not given, checked.
fn gang_policy(
    off: bool,
    timeout: Option<std::time::Duration>,
    block_admission: bool,
    backoff_base: Option<std::time::Duration>,
    backoff_max: Option<std::time::Duration>,
) -> anyhow::Result<Option<allot_common::pods_ready::PodsReadyPolicy>> {
    if off {
        return Ok(None);
    }
    let d = allot_common::pods_ready::PodsReadyPolicy::default();
    let secs = |v: Option<std::time::Duration>, default: u32| {
        v.map_or(default, |v| u32::try_from(v.as_secs()).unwrap_or(u32::MAX))
    };
    let p = allot_common::pods_ready::PodsReadyPolicy {
        timeout_s: secs(timeout, d.timeout_s),
        block_admission,
        backoff_base_s: secs(backoff_base, d.backoff_base_s),
        backoff_max_s: secs(backoff_max, d.backoff_max_s),
    };
    p.validate().map_err(|e| anyhow!(e))?;
    Ok(Some(p))
}

/// Writes `header`, then the `size` bytes that follow `Reply::BackupStream` on `recv`, to
/// `out` (synced); returns the bytes written.
async fn receive_backup(
    recv: &mut quinn::RecvStream,
    out: &mut std::fs::File,
    header: &[u8],
    size: u64,
) -> anyhow::Result<u64> {
    use std::io::Write;
    out.write_all(header)?;
    let mut failed = None;
    allot_net::wire::read_chunks(recv, size, allot_common::api::BACKUP_CHUNK, |chunk| {
        if failed.is_none() {
            failed = out.write_all(chunk).err();
        }
    })
    .await?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    out.sync_all()?;
    Ok(header.len() as u64 + size)
}

/// `drain --wait`: cordons `node`, then waits until nothing holds room on it; past `timeout`,
/// stops and requeues what is left, as `drain` does.
async fn drain_waiting(
    c: &mut Client,
    node: &str,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<()> {
    api(c
        .call(Body::CordonNode {
            name: node.to_string(),
            cordoned: true,
        })
        .await)?;
    println!("node {node} cordoned: no new pods are placed on it; waiting for its work to finish");
    let started = std::time::Instant::now();
    let mut evicted = false;
    loop {
        let Reply::Nodes(nodes) = api(c.call(Body::GetNodes).await)? else {
            bail!("unexpected answer to get nodes");
        };
        let n = nodes
            .iter()
            .find(|n| n.name == node)
            .ok_or_else(|| anyhow!("node {node} is gone from the cluster"))?;
        if n.used.is_empty() {
            println!(
                "node {node} drained in {:.0}s{}: nothing runs on it (allot uncordon {node} ends the maintenance)",
                started.elapsed().as_secs_f64(),
                if evicted { ", what was left stopped at the timeout and requeued" } else { "" }
            );
            return Ok(());
        }
        if !evicted && timeout.is_some_and(|t| started.elapsed() >= t) {
            api(c
                .call(Body::DrainNode {
                    name: node.to_string(),
                })
                .await)?;
            println!("node {node}: the timeout passed; what still runs there is stopped with its grace period and requeued");
            evicted = true;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// `allot get ...`: one list each.
async fn run_get(what: GetWhat, c: &mut Client) -> anyhow::Result<()> {
    match what {
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
                    let Reply::Arrays(arrays) = api(c.call(Body::GetArrays { team }).await)? else {
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
        GetWhat::GangScheduling { out } => {
            print_reply(api(c.call(Body::GetGangScheduling).await)?, out.format)
        }
        GetWhat::Members { out } => print_reply(api(c.call(Body::GetMembers).await)?, out.format),
        GetWhat::Cohorts { out } => cohorts::get(c, out.format).await?,
        GetWhat::Topology { level, out } => {
            let Reply::Topology(mut ds) = api(c.call(Body::GetTopology).await)? else {
                bail!("unexpected answer to get topology");
            };
            if let Some(l) = &level {
                ds.retain(|d| &d.level == l);
            }
            print_reply(Reply::Topology(ds), out.format)
        }
    }
    Ok(())
}

/// Everything that reads: usage, history, waits, explanations, logs, describe and get.
async fn run_reads(cmd: ClusterCmd, c: &mut Client) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Usage {
            since,
            until,
            team,
            by,
            format,
        } => {
            let now = now_ms();
            let q = UsageQuery {
                since_ms: since.map_or(now - 7 * 86_400_000, |w| w.at(now)),
                until_ms: until.map_or(now, |w| w.at(now)),
                team,
                by,
            };
            let Reply::Usage(report) = api(c.call(Body::Usage(q)).await)? else {
                bail!("unexpected answer to usage");
            };
            print!("{}", usage::render(&report, format)?);
        }
        ClusterCmd::Dashboard { address } => println!("{}", dashboard::login(c, address).await?),
        ClusterCmd::WhatIf {
            since,
            until,
            scheduler_config,
            compute_quota,
            save,
        } => {
            let now = now_ms();
            let changes = crate::what_if::Changes {
                scheduler_config,
                quotas: compute_quota,
            };
            let since = since.map_or(now - 86_400_000, |w| w.at(now));
            let until = until.map_or(now, |w| w.at(now));
            crate::what_if::run(c, since, until, &changes, save).await?;
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
        ClusterCmd::Describe {
            what: DescribeWhat::Node { name },
        } => describe_node(c, &name).await?,
        ClusterCmd::Describe {
            what: DescribeWhat::Cohort { name, out },
        } => cohorts::describe(c, &name, out.format).await?,
        ClusterCmd::Get { what } => run_get(what, c).await?,
        _ => bail!("a command run_reads does not run"),
    }
    Ok(())
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
        format!(
            "{s:?}: use a time ago (90s, 30m, 2h, 7d), a UTC time (2026-11-26T08:00:00Z) or a \
             UTC date (2026-11-26)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::job_file::read_job;
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
    fn kubernetes_manifests_become_the_workloads_they_describe() {
        // What allot_common::kubernetes gives is a workload allot's job-file reader accepts.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bert.yaml");
        std::fs::write(
            &p,
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: bert\n  labels: \
             {kueue.x-k8s.io/queue-name: hyperpod-ns-nlp-localqueue}\nspec:\n  \
             pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n        \
             spec:\n          containers:\n            - name: pytorch\n              \
             image: repo/bert:1\n              resources: {limits: {nvidia.com/gpu: 1}}\n    \
             Worker:\n      replicas: 2\n      template:\n        spec:\n          \
             containers:\n            - name: pytorch\n              image: repo/bert:1\n              \
             resources: {limits: {nvidia.com/gpu: 4}}\n",
        )
        .unwrap();
        let j = read_job(&p).unwrap();
        assert_eq!(
            (j.spec.name.as_str(), j.spec.team.as_str()),
            ("bert", "nlp")
        );
        let sets: Vec<(&str, u32)> = (j.spec.pod_sets.iter())
            .map(|s| (s.name.as_str(), s.count))
            .collect();
        assert_eq!(sets, vec![("master", 1), ("worker", 2)]);
        assert_eq!(j.run.unwrap().image.as_deref(), Some("repo/bert:1"));
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

    /// Issue 51, item 4: `auto_resume` and `max_retry` become HyperPod's annotations, as
    /// labels; bad values are named with what is accepted.
    #[test]
    fn job_files_ask_for_auto_resume_as_hyperpods_annotations_do() {
        use allot_common::auto_resume::{ENABLE_LABEL, MAX_RETRY_LABEL};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        let job = |text: &str| {
            std::fs::write(&p, format!("name: t\nteam: a\ncommand: [x]\n{text}")).unwrap();
            read_job(&p)
        };
        let j = job("auto_resume: true\nmax_retry: 2\n").unwrap();
        assert_eq!(j.spec.labels[ENABLE_LABEL], "true");
        assert_eq!(j.spec.labels[MAX_RETRY_LABEL], "2");
        let e = job("auto_resume: maybe\n").unwrap_err().to_string();
        assert!(e.contains("auto_resume: expected true or false"), "{e}");
        let e = job("auto_resume: true\nmax_retry: 500\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("from 0 to 100"), "{e}");
        let e = job("max_retry: 2\n").unwrap_err().to_string();
        assert!(e.contains("without"), "{e}");
    }

    /// Issue 51, item 2: a job file's `topology` and `--topology` write Kueue's topology
    /// annotations, as labels; bad asks are named with what is accepted.
    #[test]
    fn job_files_and_flags_ask_for_a_topology_level() {
        use allot_common::topology::{REQUIRED_LABEL, SLICE_LEVEL_LABEL, SLICE_SIZE_LABEL};
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        let job = |text: &str| {
            std::fs::write(
                &p,
                format!("name: t\nteam: a\ncount: 4\nrequests: {{gpu: 8}}\ncommand: [x]\n{text}"),
            )
            .unwrap();
            read_job(&p)
        };
        let j = job("topology: {required: rack, slice: {level: kubernetes.io/hostname, size: 2}}\nlabels: {owner: ml}\n")
            .unwrap();
        assert_eq!(j.spec.labels[REQUIRED_LABEL], "rack");
        assert_eq!(j.spec.labels[SLICE_LEVEL_LABEL], "kubernetes.io/hostname");
        assert_eq!(j.spec.labels[SLICE_SIZE_LABEL], "2");
        assert_eq!(j.spec.labels["owner"], "ml");
        let e = job("topology: {required: rack, slice: {level: host, size: 3}}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("whole number of slices"), "{e}");
        let e = job("topology: {required: rack, preferred: block}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one of required or preferred"), "{e}");
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            job: JobFlags,
        }
        let flags = |args: &[&str]| {
            let mut all = vec![
                "t", "--name", "g", "--team", "a", "--count", "4", "--gpus", "8",
            ];
            all.extend_from_slice(args);
            T::try_parse_from(all).unwrap().job.submit_input(None, None)
        };
        let j = flags(&[
            "--topology",
            "rack:preferred",
            "--topology-slice",
            "kubernetes.io/hostname:2",
            "--",
            "x",
        ])
        .unwrap();
        assert_eq!(
            j.spec.labels[allot_common::topology::PREFERRED_LABEL],
            "rack"
        );
        assert_eq!(j.spec.labels[SLICE_SIZE_LABEL], "2");
        let e = flags(&["--topology", "rack:maybe", "--", "x"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("LEVEL:preferred"), "{e}");
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

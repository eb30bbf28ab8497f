//! What the log carries to set the cluster scheduler config: [`SchedulerConfigSet`], the policy
//! already parsed and checked by whoever read the request (the AWS surface in
//! `allot_common::hyperpod`, the simulator's scenario reader). The core never reads AWS syntax.
//!
//! [`SchedulerConfigChange`] is the older form, with the `--scheduler-config` text in it, kept
//! so that log entries written before the typed form still decode. The coordinator's log reader
//! turns each such entry into a [`SchedulerConfigSet`] before it is applied
//! (`allot_coordinator::config_text`); the machine refuses one that reaches it unread.

use allot_common::api::{AdmissionLimitsInput, StabilityInput};
use allot_common::ClusterPolicy;
use serde::{Deserialize, Serialize};

/// Creates the cluster's scheduler config (`target_version` `None`) or updates it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfigSet {
    pub name: String,
    /// `None`: create one (the cluster has none yet); `Some(v)`: update the one at version `v`.
    pub target_version: Option<u64>,
    /// Priority classes and sharing, parsed and validated by the request's reader. Its
    /// `stability` is not read: the rules are `stability` applied to the current ones (the
    /// live defaults for a new config), because an update that names neither keeps them.
    pub policy: ClusterPolicy,
    pub stability: StabilityInput,
    pub limits: AdmissionLimitsInput,
    pub description: Option<String>,
}

impl SchedulerConfigSet {
    /// The API's name of the command, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self.target_version {
            None => "create-cluster-scheduler-config",
            Some(_) => "update-cluster-scheduler-config",
        }
    }
}

/// A scheduler config command as `Command::WithStability` carried it, with the config's text
/// (an enum of its own: a log entry holds no recursive type, whose decoding could run the
/// stack out). Read only from old log entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SchedulerConfigChange {
    Create {
        name: String,
        config: String,
        limits: AdmissionLimitsInput,
        description: Option<String>,
    },
    Update {
        name: String,
        config: String,
        target_version: u64,
        limits: AdmissionLimitsInput,
        description: Option<String>,
    },
}

impl SchedulerConfigChange {
    /// The typed command this one means once `policy`, read from its text, is known.
    pub fn typed(self, policy: ClusterPolicy, stability: StabilityInput) -> SchedulerConfigSet {
        match self {
            SchedulerConfigChange::Create {
                name,
                limits,
                description,
                ..
            } => SchedulerConfigSet {
                name,
                target_version: None,
                policy,
                stability,
                limits,
                description,
            },
            SchedulerConfigChange::Update {
                name,
                target_version,
                limits,
                description,
                ..
            } => SchedulerConfigSet {
                name,
                target_version: Some(target_version),
                policy,
                stability,
                limits,
                description,
            },
        }
    }

    /// The `--scheduler-config` text it carries.
    pub fn config_text(&self) -> &str {
        match self {
            SchedulerConfigChange::Create { config, .. }
            | SchedulerConfigChange::Update { config, .. } => config,
        }
    }
}

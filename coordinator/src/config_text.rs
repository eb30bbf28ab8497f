//! Where the `--scheduler-config` text becomes a typed policy and back: a request is parsed
//! before its command is proposed (bad text is refused at once and never logged), log entries
//! in the text form of earlier releases are read into the typed form before the machine applies
//! them, and a config shown to a user is rendered from the policy. The core takes only typed
//! commands and writes no AWS syntax. One reader
//! (`allot_common::hyperpod::parse_scheduler_config`) does all of it, so every replica reads an
//! old entry the same way.

use allot_common::api::{
    AdmissionLimitsInput, ApiError, ErrorKind, SchedulerConfigView, StabilityInput,
};
use allot_common::hyperpod::{parse_scheduler_config, scheduler_config_to_shorthand};
use allot_common::ClusterPolicy;
use allot_core::machine::{Command, Entry, SchedulerConfigChange, SchedulerConfigSet};

/// The command a create (`target_version` `None`) or update request proposes, its text parsed.
pub fn request(
    name: String,
    target_version: Option<u64>,
    config: &str,
    limits: AdmissionLimitsInput,
    description: Option<String>,
    stability: StabilityInput,
) -> Result<SchedulerConfigSet, ApiError> {
    let policy = parse_policy(config).map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
    Ok(SchedulerConfigSet {
        name,
        target_version,
        policy,
        stability,
        limits,
        description,
    })
}

/// `view` with its config text rendered from `policy`, the cluster's.
pub fn with_text(mut view: SchedulerConfigView, policy: &ClusterPolicy) -> SchedulerConfigView {
    view.config = scheduler_config_to_shorthand(policy);
    view
}

/// `entry` in the current form. An old scheduler config entry whose text does not parse stays
/// as it is: the machine refuses it, as it refused it when it was written.
pub fn upgrade(entry: Entry) -> Entry {
    let Entry { now, cmd } = entry;
    let cmd = match cmd {
        Command::CreateSchedulerConfig {
            name,
            config,
            limits,
            description,
        } => typed(
            SchedulerConfigChange::Create {
                name,
                config,
                limits,
                description,
            },
            StabilityInput::default(),
        ),
        Command::UpdateSchedulerConfig {
            name,
            config,
            target_version,
            limits,
            description,
        } => typed(
            SchedulerConfigChange::Update {
                name,
                config,
                target_version,
                limits,
                description,
            },
            StabilityInput::default(),
        ),
        Command::WithStability { change, stability } => typed(change, stability),
        other => other,
    };
    Entry { now, cmd }
}

fn typed(change: SchedulerConfigChange, stability: StabilityInput) -> Command {
    match parse_policy(change.config_text()) {
        Ok(policy) => Command::SetSchedulerConfig(change.typed(policy, stability)),
        Err(_) => Command::WithStability { change, stability },
    }
}

/// The policy a `--scheduler-config` text sets, or what is wrong with it, naming the flag.
pub fn parse_policy(config: &str) -> Result<ClusterPolicy, String> {
    parse_scheduler_config(config).map_err(|e| format!("--scheduler-config: {e}"))
}

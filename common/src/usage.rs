//! `allot usage`: the question (which period, which team, grouped how) and the answer (rows of
//! resource amounts), as the API carries them. The coordinator's core keeps the figures
//! (`allot_core::usage`); the CLI renders them.

use serde::{Deserialize, Serialize};

/// What a usage report groups its rows by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UsageBy {
    Team,
    /// The priority class (`-` for a workload without one).
    Class,
    InstanceType,
    /// The UTC day.
    Day,
    /// The workload (HyperPod's Detailed Utilization Report): the last
    /// `allot_core::usage::MAX_RUNS` workloads that ran.
    Workload,
}

impl UsageBy {
    pub const ALL: [UsageBy; 5] = [
        UsageBy::Team,
        UsageBy::Class,
        UsageBy::InstanceType,
        UsageBy::Day,
        UsageBy::Workload,
    ];

    /// The word the CLI takes and prints.
    pub fn word(self) -> &'static str {
        match self {
            UsageBy::Team => "team",
            UsageBy::Class => "class",
            UsageBy::InstanceType => "instance-type",
            UsageBy::Day => "day",
            UsageBy::Workload => "workload",
        }
    }

    pub fn parse(s: &str) -> Result<UsageBy, String> {
        UsageBy::ALL
            .into_iter()
            .find(|b| b.word() == s.trim())
            .ok_or_else(|| {
                let words: Vec<&str> = UsageBy::ALL.iter().map(|b| b.word()).collect();
                format!("unknown grouping {s:?}; use {}", words.join(", "))
            })
    }
}

/// Which usage to report: `[since_ms, until_ms)`, rounded out to whole hours.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageQuery {
    pub since_ms: i64,
    pub until_ms: i64,
    /// Only this team's rows (a team user's report is always its own team's).
    pub team: Option<String>,
    /// Group by these, in this order; empty: by team.
    pub by: Vec<UsageBy>,
}

/// Amounts in resource-milliseconds: the quantity in the resource's base unit (millicores for
/// `cpu`, bytes for `memory`, devices otherwise) times milliseconds. Exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageAmounts {
    pub used: i128,
    /// Run time thrown away by preemption (usage times run time until the preemption).
    pub lost: i128,
    /// The quota split; `None` in a row grouped by class (quota belongs to a team, not to a
    /// class).
    pub quota: Option<QuotaAmounts>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaAmounts {
    pub nominal: i128,
    /// Used within the nominal.
    pub own: i128,
    /// Used above the nominal.
    pub borrowed: i128,
    /// Unused nominal that other teams used.
    pub lent: i128,
    /// Nominal neither used nor lent.
    pub idle: i128,
}

/// One row: the group's values (one per `by`), the resource, the amounts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageLine {
    pub group: Vec<String>,
    pub resource: String,
    pub amounts: UsageAmounts,
}

/// Who lent to whom over the period (resource-milliseconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LendLine {
    pub borrower: String,
    /// A team, or `(cluster)`: capacity no team's idle quota covered.
    pub lender: String,
    pub instance_type: String,
    pub resource: String,
    pub amount: i128,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    /// The period reported, whole hours.
    pub since_ms: i64,
    pub until_ms: i64,
    /// The leader's time when it answered: usage after it is not in the report.
    pub generated_ms: i64,
    pub by: Vec<UsageBy>,
    pub lines: Vec<UsageLine>,
    pub lending: Vec<LendLine>,
}

//! The HyperPod input forms: the AWS CLI shorthand strings taken by
//! `aws sagemaker create-compute-quota --compute-quota-config` and
//! `aws sagemaker create-cluster-scheduler-config --scheduler-config`, their structured
//! YAML/JSON equivalents, and the mapping to per-flavor quotas (scheduling.md §2).
//!
//! Both input forms produce the same [`ComputeQuotaConfig`]; [`ComputeQuotaConfig::validate`]
//! and [`ComputeQuotaConfig::to_quotas`] apply to it whichever form it came from. The shorthand
//! parser additionally points at the offending byte of the input ([`ShorthandError`]).
//!
//! Decisions beyond the contract (documented here so they are easy to find):
//! - **Ratio source.** A row that does not give `Count` scales the instance by one ratio:
//!   `Accelerators / accelerators per instance` when `Accelerators` is given, else
//!   `VCpu / vCPU per instance`, else `MemoryInGiB / memory per instance`. vCPU and memory that
//!   are not given explicitly follow that ratio; explicit values override it. Accelerators that
//!   are not given are 0 (also on a `VCpu`/`MemoryInGiB` row of a GPU instance).
//! - **EFA** follows the same ratio, rounded down (2 of 8 GPUs of ml.p5.48xlarge = 8 of 32 EFA
//!   interfaces; `Count=n` = n times the instance's).
//! - **Rounding.** Every derived amount is rounded down to the base unit (millicores, bytes,
//!   whole devices) with exact integer arithmetic. Explicit `VCpu`/`MemoryInGiB` are taken as
//!   the exact decimal the number is written as, then rounded down the same way.
//! - **Count with explicit amounts**: `Count` sets every resource of n instances; an explicit
//!   `Accelerators`, `VCpu` or `MemoryInGiB` beside it replaces that one resource's amount.
//! - **Resources listed** per flavor: `cpu` and `memory` always, `gpu`/`neuron`/`efa` when the
//!   instance type has them (possibly with nominal 0), sorted by resource name.
//! - **AbsoluteBorrowLimits** rows set the borrowing limit only for what they name: `Count=n`
//!   names every resource of n instances, `Accelerators` the accelerator resource, `VCpu` cpu,
//!   `MemoryInGiB` memory; no ratio is applied. For an instance type without a
//!   `ComputeQuotaResources` row the team has nominal 0 and may borrow up to the limit. With
//!   `Lend` or `DontLend` they (like `BorrowLimit`) are accepted and limit nothing: those teams
//!   do not borrow.
//! - **The API model's constraints**, exactly: `Count`, `Accelerators`, `VCpu`,
//!   `MemoryInGiB` in 0..=10,000,000; `BorrowLimit` 0..=10000 (the documentation's prose says
//!   1 to 500; the model is what the API enforces); at most 15 rows per list;
//!   `ResourceSharingConfig` needs `Strategy`; `ComputeQuotaResources` may be absent. Derived
//!   amounts must also stay within `resource::MAX_QUANTITY` base units (`i64::MAX / 4`).
//! - **Rules allot keeps beyond the model**, each citing where AWS documents it: a row needs
//!   an amount (AWS's task-governance Terraform module), an instance type once per list (the
//!   API allocates by instance type), NaN is not an amount (allot's own).
//! - **Reading** follows the AWS CLI: a value that starts with `{` is JSON
//!   ([`parse_structure`]); shorthand as awscli's `ShorthandParser` reads it
//!   ([`parse_shorthand_tree`]); integers as Python's `int()` (`+2`, `1_000`), floats as
//!   `float()` (`1e1`, `.5`). `common/tests/awscli_conformance.rs` compares with the AWS CLI.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, InstanceType, UnknownInstanceType};
use crate::policy::{ClusterPolicy, PolicyError, PriorityClass};
use crate::quota::{
    BorrowWithinCohort, BorrowWithinCohortPolicy, FlavorQuota, PreemptionPolicy,
    ReclaimWithinCohort, ResourceQuota, WithinTeam,
};
use crate::resource::ResourceName;

/// One `ComputeQuotaResources` row (or one `AbsoluteBorrowLimits` row).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeQuotaResource {
    pub instance_type: String,
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub accelerators: Option<u32>,
    #[serde(default)]
    pub vcpu: Option<f64>,
    #[serde(default)]
    pub memory_in_gib: Option<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SharingStrategy {
    Lend,
    DontLend,
    #[default]
    LendAndBorrow,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSharingConfig {
    #[serde(default)]
    pub strategy: SharingStrategy,
    /// Percent of nominal, 0..=10000 (the API model), default 50; only LendAndBorrow borrows.
    #[serde(default)]
    pub borrow_limit: Option<u32>,
    #[serde(default)]
    pub absolute_borrow_limits: Vec<ComputeQuotaResource>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreemptTeamTasks {
    Never,
    #[default]
    LowerPriority,
}

/// A HyperPod compute allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeQuotaConfig {
    pub resources: Vec<ComputeQuotaResource>,
    #[serde(default)]
    pub sharing: ResourceSharingConfig,
    #[serde(default)]
    pub preempt_team_tasks: PreemptTeamTasks,
}

/// `BorrowLimit` when none is given (percent of nominal).
pub const DEFAULT_BORROW_LIMIT: u32 = 50;
/// Smallest accepted `BorrowLimit` (percent; the API model's BorrowLimit range, 0..=10000,
/// wider than its documentation's 1 to 500).
pub const MIN_BORROW_LIMIT: u32 = 0;
/// Largest accepted `BorrowLimit` (percent).
pub const MAX_BORROW_LIMIT: u32 = 10_000;
/// At most this many `AbsoluteBorrowLimits` rows (the API model's list length).
pub const MAX_ABSOLUTE_BORROW_LIMITS: usize = 15;
/// At most this many `ComputeQuotaResources` rows (the API model's list length).
pub const MAX_QUOTA_ROWS: usize = 15;
/// The API model's maximum of `Count`, `Accelerators`, `VCpu` and `MemoryInGiB`.
pub const MAX_MODEL_AMOUNT: u32 = 10_000_000;
/// Largest `VCpu` accepted in one row.
pub const MAX_VCPU: f64 = MAX_MODEL_AMOUNT as f64;
/// Largest `MemoryInGiB` accepted in one row.
pub const MAX_MEMORY_GIB: f64 = MAX_MODEL_AMOUNT as f64;

/// Largest quantity a derived quota may have, in base units.
const MAX_QUANTITY: i128 = crate::resource::MAX_QUANTITY as i128;

// ---------------------------------------------------------------------------------------------
// Errors of the mapping
// ---------------------------------------------------------------------------------------------

/// Which list of rows an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowList {
    /// `ComputeQuotaResources` (structured form: `resources`).
    ComputeQuotaResources,
    /// `ResourceSharingConfig.AbsoluteBorrowLimits` (structured form:
    /// `sharing.absolute_borrow_limits`).
    AbsoluteBorrowLimits,
}

impl fmt::Display for RowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowList::ComputeQuotaResources => "ComputeQuotaResources",
            RowList::AbsoluteBorrowLimits => "AbsoluteBorrowLimits",
        })
    }
}

/// A field of a row, named as in AWS (structured form: `instance_type`, `count`,
/// `accelerators`, `vcpu`, `memory_in_gib`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowField {
    InstanceType,
    Count,
    Accelerators,
    VCpu,
    MemoryInGiB,
}

impl fmt::Display for RowField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowField::InstanceType => "InstanceType",
            RowField::Count => "Count",
            RowField::Accelerators => "Accelerators",
            RowField::VCpu => "VCpu",
            RowField::MemoryInGiB => "MemoryInGiB",
        })
    }
}

/// A compute allocation that cannot be turned into quotas. Rows are numbered from 1.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HyperPodError {
    #[error("{list} row {row}: InstanceType is missing or empty; name an instance type such as ml.g5.8xlarge")]
    EmptyInstanceType { list: RowList, row: usize },
    #[error("{list} row {row} ({instance_type}): give at least one of Count, Accelerators, VCpu or MemoryInGiB (AWS's task-governance Terraform module requires one; a row without an amount allocates nothing)")]
    NoAmount {
        list: RowList,
        row: usize,
        instance_type: String,
    },
    #[error("{list} row {row} ({instance_type}): {field} {value} {why}")]
    BadAmount {
        list: RowList,
        row: usize,
        instance_type: String,
        field: RowField,
        value: String,
        why: String,
    },
    #[error("{list} lists instance type {instance_type} twice (rows {first} and {second}); give each instance type once (the API allocates compute by instance type, one row each)")]
    DuplicateInstanceType {
        list: RowList,
        instance_type: String,
        first: usize,
        second: usize,
    },
    #[error("{list} has {count} rows; at most {max} are allowed (the API model's list length)")]
    TooManyRows {
        list: RowList,
        count: usize,
        max: usize,
    },
    #[error("{list} row {row}: {source}")]
    UnknownInstanceType {
        list: RowList,
        row: usize,
        source: UnknownInstanceType,
    },
    #[error("{list} row {row} ({instance_type}): {instance_type} has no accelerators (GPUs or Neuron devices); remove Accelerators and use Count, VCpu or MemoryInGiB")]
    NoAccelerators {
        list: RowList,
        row: usize,
        instance_type: String,
    },
    #[error("{list} row {row} ({instance_type}): the resulting quota is too large (more than {MAX_QUANTITY} base units of a resource)")]
    TooLarge {
        list: RowList,
        row: usize,
        instance_type: String,
    },
    #[error("BorrowLimit {value} is out of range 0..=10000 (the API model's BorrowLimit: percent of the nominal quota the team may borrow on top of it; default 50)")]
    BorrowLimitRange { value: i64 },
}

// ---------------------------------------------------------------------------------------------
// Validation and mapping
// ---------------------------------------------------------------------------------------------

impl ComputeQuotaConfig {
    /// Parses the AWS CLI shorthand form, e.g.
    /// `ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},PreemptTeamTasks=LowerPriority`,
    /// and validates it ([`ComputeQuotaConfig::validate`]). Instance types are checked against
    /// the catalog only by [`ComputeQuotaConfig::to_quotas`].
    ///
    /// A value that starts with `{` is read as JSON instead, as the AWS CLI does
    /// ([`parse_structure`]).
    pub fn parse_shorthand(s: &str) -> Result<Self, ShorthandError> {
        let tree = parse_structure(s)?;
        let reader = Reader { input: s };
        let (config, positions) = reader.compute_quota(&tree)?;
        config
            .validate()
            .map_err(|e| reader.err(positions.locate(&e), e.to_string()))?;
        Ok(config)
    }

    /// The config as the AWS API's JSON shows it (`ComputeQuotaResources`,
    /// `ResourceSharingConfig`, `PreemptTeamTasks`); [`ComputeQuotaConfig::parse_shorthand`]
    /// reads it back to an equal value.
    pub fn to_aws_json(&self) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        let row = |r: &ComputeQuotaResource| {
            let mut m = Map::new();
            m.insert("InstanceType".into(), json!(r.instance_type));
            if let Some(n) = r.count {
                m.insert("Count".into(), json!(n));
            }
            if let Some(n) = r.accelerators {
                m.insert("Accelerators".into(), json!(n));
            }
            if let Some(v) = r.vcpu {
                m.insert("VCpu".into(), json!(v));
            }
            if let Some(v) = r.memory_in_gib {
                m.insert("MemoryInGiB".into(), json!(v));
            }
            Value::Object(m)
        };
        let mut sharing = Map::new();
        sharing.insert(
            "Strategy".into(),
            json!(format!("{:?}", self.sharing.strategy)),
        );
        if let Some(p) = self.sharing.borrow_limit {
            sharing.insert("BorrowLimit".into(), json!(p));
        }
        if !self.sharing.absolute_borrow_limits.is_empty() {
            sharing.insert(
                "AbsoluteBorrowLimits".into(),
                Value::Array(
                    self.sharing
                        .absolute_borrow_limits
                        .iter()
                        .map(row)
                        .collect(),
                ),
            );
        }
        json!({
            "ComputeQuotaResources": self.resources.iter().map(row).collect::<Vec<_>>(),
            "ResourceSharingConfig": sharing,
            "PreemptTeamTasks": format!("{:?}", self.preempt_team_tasks),
        })
    }

    /// Renders the AWS CLI shorthand form; [`ComputeQuotaConfig::parse_shorthand`] reads it
    /// back to an equal value.
    pub fn to_shorthand(&self) -> String {
        let rows = |rows: &[ComputeQuotaResource]| {
            rows.iter().map(render_row).collect::<Vec<_>>().join(",")
        };
        let mut sharing = vec![format!("Strategy={:?}", self.sharing.strategy)];
        if let Some(p) = self.sharing.borrow_limit {
            sharing.push(format!("BorrowLimit={p}"));
        }
        if !self.sharing.absolute_borrow_limits.is_empty() {
            sharing.push(format!(
                "AbsoluteBorrowLimits=[{}]",
                rows(&self.sharing.absolute_borrow_limits)
            ));
        }
        format!(
            "ComputeQuotaResources=[{}],ResourceSharingConfig={{{}}},PreemptTeamTasks={:?}",
            rows(&self.resources),
            sharing.join(","),
            self.preempt_team_tasks
        )
    }

    /// Checks everything that does not need the instance catalog: at most 15 rows per list,
    /// each naming an instance type and at least one amount, amounts within the API model's
    /// ranges (NaN refused), each instance type once per list, `BorrowLimit` in 0..=10000.
    pub fn validate(&self) -> Result<(), HyperPodError> {
        if self.resources.len() > MAX_QUOTA_ROWS {
            return Err(HyperPodError::TooManyRows {
                list: RowList::ComputeQuotaResources,
                count: self.resources.len(),
                max: MAX_QUOTA_ROWS,
            });
        }
        validate_rows(&self.resources, RowList::ComputeQuotaResources)?;
        let sharing = &self.sharing;
        // BorrowLimit and AbsoluteBorrowLimits are accepted with any strategy, as the API
        // does; only LendAndBorrow borrows, so with Lend or DontLend they limit nothing.
        if let Some(p) = sharing.borrow_limit {
            if !(MIN_BORROW_LIMIT..=MAX_BORROW_LIMIT).contains(&p) {
                return Err(HyperPodError::BorrowLimitRange {
                    value: i64::from(p),
                });
            }
        }
        let abs = &sharing.absolute_borrow_limits;
        if abs.len() > MAX_ABSOLUTE_BORROW_LIMITS {
            return Err(HyperPodError::TooManyRows {
                list: RowList::AbsoluteBorrowLimits,
                count: abs.len(),
                max: MAX_ABSOLUTE_BORROW_LIMITS,
            });
        }
        validate_rows(abs, RowList::AbsoluteBorrowLimits)
    }

    /// The quotas per flavor (one per `ComputeQuotaResources` row, in row order; resources in
    /// name order), following scheduling.md §2. Validates first.
    pub fn to_quotas(&self, catalog: &Catalog) -> Result<Vec<FlavorQuota>, HyperPodError> {
        self.validate()?;
        let mut quotas = Vec::with_capacity(self.resources.len());
        for (i, res) in self.resources.iter().enumerate() {
            let row = RowCtx::new(catalog, RowList::ComputeQuotaResources, i + 1, res)?;
            let mut resources = Vec::new();
            for (name, nominal) in row.nominal()? {
                let quota = self.sharing.quota(nominal).ok_or_else(|| row.too_large())?;
                resources.push((name, quota));
            }
            quotas.push(FlavorQuota {
                flavor: res.instance_type.clone(),
                resources,
            });
        }
        for (i, res) in self.sharing.absolute_borrow_limits.iter().enumerate() {
            let row = RowCtx::new(catalog, RowList::AbsoluteBorrowLimits, i + 1, res)?;
            let limits = row.absolute()?;
            // A type without a ComputeQuotaResources row has no nominal quota: the team may
            // only borrow it, up to these limits (and borrows nothing else of it).
            if !quotas.iter().any(|q| q.flavor == res.instance_type) {
                let zero = ComputeQuotaResource {
                    instance_type: res.instance_type.clone(),
                    count: Some(0),
                    ..ComputeQuotaResource::default()
                };
                let row0 = RowCtx::new(catalog, RowList::AbsoluteBorrowLimits, i + 1, &zero)?;
                let mut resources = Vec::new();
                for (name, nominal) in row0.nominal()? {
                    let quota = self
                        .sharing
                        .quota(nominal)
                        .ok_or_else(|| row0.too_large())?;
                    resources.push((name, quota));
                }
                quotas.push(FlavorQuota {
                    flavor: res.instance_type.clone(),
                    resources,
                });
            }
            if let Some(fq) = quotas.iter_mut().find(|q| q.flavor == res.instance_type) {
                for (name, limit) in limits {
                    if let Some(q) = fq.get_mut(&name) {
                        // Only LendAndBorrow borrows; the others keep their limit of 0.
                        if self.sharing.strategy == SharingStrategy::LendAndBorrow {
                            q.borrowing_limit = Some(limit);
                        }
                    }
                }
            }
        }
        Ok(quotas)
    }

    /// HyperPod's preemption policy: `PreemptTeamTasks` inside the team, reclaim of lent quota
    /// with `Any`, and borrowing workloads may preempt lower-priority borrowed work.
    pub fn preemption_policy(&self) -> PreemptionPolicy {
        PreemptionPolicy {
            within_team: match self.preempt_team_tasks {
                PreemptTeamTasks::Never => WithinTeam::Never,
                PreemptTeamTasks::LowerPriority => WithinTeam::LowerPriority,
            },
            reclaim_within_cohort: ReclaimWithinCohort::Any,
            borrow_within_cohort: BorrowWithinCohort {
                policy: BorrowWithinCohortPolicy::LowerPriority,
                max_priority_threshold: None,
            },
        }
    }
}

impl FromStr for ComputeQuotaConfig {
    type Err = ShorthandError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ComputeQuotaConfig::parse_shorthand(s)
    }
}

impl ResourceSharingConfig {
    /// The quota of one resource with `nominal`; `None` if the borrowing limit is too large.
    fn quota(&self, nominal: i64) -> Option<ResourceQuota> {
        Some(match self.strategy {
            SharingStrategy::LendAndBorrow => {
                let p = i128::from(self.borrow_limit.unwrap_or(DEFAULT_BORROW_LIMIT));
                let limit = i128::from(nominal) * p / 100;
                ResourceQuota {
                    nominal,
                    borrowing_limit: Some(quantity(limit)?),
                    lending_limit: None,
                }
            }
            SharingStrategy::Lend => ResourceQuota {
                nominal,
                borrowing_limit: Some(0),
                lending_limit: None,
            },
            SharingStrategy::DontLend => ResourceQuota {
                nominal,
                borrowing_limit: Some(0),
                lending_limit: Some(0),
            },
        })
    }
}

fn validate_rows(rows: &[ComputeQuotaResource], list: RowList) -> Result<(), HyperPodError> {
    for (i, r) in rows.iter().enumerate() {
        let row = i + 1;
        if r.instance_type.trim().is_empty() {
            return Err(HyperPodError::EmptyInstanceType { list, row });
        }
        let instance_type = r.instance_type.clone();
        let others = [
            (RowField::Accelerators, r.accelerators.is_some()),
            (RowField::VCpu, r.vcpu.is_some()),
            (RowField::MemoryInGiB, r.memory_in_gib.is_some()),
        ];
        if r.count.is_none() && others.iter().all(|(_, set)| !set) {
            return Err(HyperPodError::NoAmount {
                list,
                row,
                instance_type,
            });
        }
        for (field, value, max) in [
            (RowField::VCpu, r.vcpu, MAX_VCPU),
            (RowField::MemoryInGiB, r.memory_in_gib, MAX_MEMORY_GIB),
        ] {
            let Some(v) = value else { continue };
            let why = if v.is_nan() {
                "is not a number (allot's rule: an amount must be a number)".to_string()
            } else if v < 0.0 || v > max {
                format!("is out of range 0..={max} (the API model's {field}Amount)")
            } else {
                continue;
            };
            return Err(HyperPodError::BadAmount {
                list,
                row,
                instance_type,
                field,
                value: v.to_string(),
                why,
            });
        }
        if let Some(first) = rows[..i]
            .iter()
            .position(|o| o.instance_type == r.instance_type)
        {
            return Err(HyperPodError::DuplicateInstanceType {
                list,
                instance_type,
                first: first + 1,
                second: row,
            });
        }
    }
    Ok(())
}

/// An amount in base units, if it is within `0..=MAX_QUANTITY`.
fn quantity(v: i128) -> Option<i64> {
    if (0..=MAX_QUANTITY).contains(&v) {
        i64::try_from(v).ok()
    } else {
        None
    }
}

/// The exact decimal `m / s` written by a finite `v >= 0` (its shortest round-trip form, at
/// most 18 decimal places, further places dropped).
fn exact_decimal(v: f64) -> Option<(i128, i128)> {
    if v == 0.0 {
        return Some((0, 1));
    }
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    // `Display` for f64 never uses an exponent.
    let text = v.to_string();
    let (int, frac) = text.split_once('.').unwrap_or((text.as_str(), ""));
    let frac = frac.get(..frac.len().min(18))?;
    let mut m: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        if !b.is_ascii_digit() {
            return None;
        }
        m = m.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    let s = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    Some((m, s))
}

/// `floor(a * b / d)` for non-negative values; `None` on overflow or `d == 0`.
fn mul_div(a: i128, b: i128, d: i128) -> Option<i128> {
    if d <= 0 {
        return None;
    }
    a.checked_mul(b).map(|x| x / d)
}

/// One row being mapped, with its instance type from the catalog.
struct RowCtx<'a> {
    list: RowList,
    row: usize,
    res: &'a ComputeQuotaResource,
    it: &'a InstanceType,
}

impl<'a> RowCtx<'a> {
    fn new(
        catalog: &'a Catalog,
        list: RowList,
        row: usize,
        res: &'a ComputeQuotaResource,
    ) -> Result<Self, HyperPodError> {
        let it = catalog
            .get_for_quota(&res.instance_type)
            .map_err(|source| HyperPodError::UnknownInstanceType { list, row, source })?;
        if res.accelerators.is_some() && it.accelerator_resource().is_none() {
            return Err(HyperPodError::NoAccelerators {
                list,
                row,
                instance_type: res.instance_type.clone(),
            });
        }
        Ok(RowCtx { list, row, res, it })
    }

    fn too_large(&self) -> HyperPodError {
        HyperPodError::TooLarge {
            list: self.list,
            row: self.row,
            instance_type: self.res.instance_type.clone(),
        }
    }

    fn put(
        &self,
        out: &mut BTreeMap<ResourceName, i64>,
        name: ResourceName,
        v: Option<i128>,
    ) -> Result<(), HyperPodError> {
        let q = v.and_then(quantity).ok_or_else(|| self.too_large())?;
        out.insert(name, q);
        Ok(())
    }

    fn explicit_cpu(&self) -> Option<Option<i128>> {
        self.res
            .vcpu
            .map(|v| exact_decimal(v).and_then(|(m, s)| mul_div(m, 1000, s)))
    }

    fn explicit_memory(&self) -> Option<Option<i128>> {
        self.res
            .memory_in_gib
            .map(|v| exact_decimal(v).and_then(|(m, s)| mul_div(m, 1 << 30, s)))
    }

    /// Nominal amounts of the row (scheduling.md §2), in resource-name order.
    fn nominal(&self) -> Result<BTreeMap<ResourceName, i64>, HyperPodError> {
        let (res, it) = (self.res, self.it);
        let cpu_per = i128::from(it.vcpu) * 1000;
        let mem_per = i128::from(it.memory_gib) << 30;
        // The ratio num / den of one instance that the row stands for.
        let (num, den): (i128, i128) = if let Some(n) = res.count {
            (i128::from(n), 1)
        } else if let Some(a) = res.accelerators {
            (i128::from(a), i128::from(it.accelerators()))
        } else if let Some(v) = res.vcpu {
            let (m, s) = exact_decimal(v).ok_or_else(|| self.too_large())?;
            (
                m,
                s.checked_mul(i128::from(it.vcpu))
                    .ok_or_else(|| self.too_large())?,
            )
        } else if let Some(g) = res.memory_in_gib {
            let (m, s) = exact_decimal(g).ok_or_else(|| self.too_large())?;
            (
                m,
                s.checked_mul(i128::from(it.memory_gib))
                    .ok_or_else(|| self.too_large())?,
            )
        } else {
            return Err(HyperPodError::NoAmount {
                list: self.list,
                row: self.row,
                instance_type: res.instance_type.clone(),
            });
        };
        // An instance type without vCPU (or memory) gives a ratio of 0 rather than a division
        // by zero; the catalog has none.
        let ratio = |per: i128| {
            if den == 0 {
                Some(0)
            } else {
                mul_div(per, num, den)
            }
        };

        let mut out = BTreeMap::new();
        let cpu = self.explicit_cpu().unwrap_or_else(|| ratio(cpu_per));
        self.put(&mut out, ResourceName::cpu(), cpu)?;
        let memory = self.explicit_memory().unwrap_or_else(|| ratio(mem_per));
        self.put(&mut out, ResourceName::memory(), memory)?;
        let accel = it.accelerator_resource();
        for (name, per) in [
            (ResourceName::gpu(), it.gpu),
            (ResourceName::neuron(), it.neuron),
        ] {
            if per == 0 {
                continue;
            }
            let explicit = accel.as_ref() == Some(&name) && res.accelerators.is_some();
            let v = if res.count.is_some() && !explicit {
                ratio(i128::from(per))
            } else if accel.as_ref() == Some(&name) {
                Some(i128::from(res.accelerators.unwrap_or(0)))
            } else {
                Some(0)
            };
            self.put(&mut out, name, v)?;
        }
        if it.efa > 0 {
            self.put(&mut out, ResourceName::efa(), ratio(i128::from(it.efa)))?;
        }
        Ok(out)
    }

    /// The absolute borrowing limits an `AbsoluteBorrowLimits` row names.
    fn absolute(&self) -> Result<BTreeMap<ResourceName, i64>, HyperPodError> {
        let (res, it) = (self.res, self.it);
        let mut out = BTreeMap::new();
        if let Some(n) = res.count {
            for (name, per) in it.resources().iter() {
                let v = i128::from(per).checked_mul(i128::from(n));
                self.put(&mut out, name.clone(), v)?;
            }
            return Ok(out);
        }
        if let (Some(a), Some(name)) = (res.accelerators, it.accelerator_resource()) {
            self.put(&mut out, name, Some(i128::from(a)))?;
        }
        if let Some(cpu) = self.explicit_cpu() {
            self.put(&mut out, ResourceName::cpu(), cpu)?;
        }
        if let Some(memory) = self.explicit_memory() {
            self.put(&mut out, ResourceName::memory(), memory)?;
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// The shorthand syntax: a generic value tree
// ---------------------------------------------------------------------------------------------

/// A syntax or content error in a shorthand string, with the byte offset it is about.
/// `Display` shows the message, the position, and the input line with a caret under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShorthandError {
    /// Byte offset into `input` (at most `input.len()`, which means "at the end").
    pub pos: usize,
    pub message: String,
    pub input: String,
}

impl ShorthandError {
    fn new(input: &str, pos: usize, message: impl Into<String>) -> Self {
        ShorthandError {
            pos: pos.min(input.len()),
            message: message.into(),
            input: input.to_string(),
        }
    }

    /// The 1-based line and column (counted in characters) of `pos`.
    pub fn line_and_column(&self) -> (usize, usize) {
        let pos = self.char_boundary();
        let before = &self.input[..pos];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    fn char_boundary(&self) -> usize {
        let mut pos = self.pos.min(self.input.len());
        while !self.input.is_char_boundary(pos) {
            pos -= 1;
        }
        pos
    }
}

impl fmt::Display for ShorthandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pos = self.char_boundary();
        let (line_no, column) = self.line_and_column();
        let line_start = self.input[..pos].rfind('\n').map_or(0, |i| i + 1);
        let line_end = self.input[pos..]
            .find('\n')
            .map_or(self.input.len(), |i| pos + i);
        let line = self.input[line_start..line_end].trim_end_matches('\r');
        let pad: String = self.input[line_start..pos]
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        if self.input.contains('\n') {
            write!(
                f,
                "{} (at byte {}, line {line_no}, column {column})",
                self.message, self.pos
            )?;
        } else {
            write!(
                f,
                "{} (at byte {}, column {column})",
                self.message, self.pos
            )?;
        }
        write!(f, "\n  {line}\n  {pad}^")
    }
}

impl std::error::Error for ShorthandError {}

/// A value in the shorthand syntax, with the byte offset where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct ShorthandNode {
    pub pos: usize,
    pub value: ShorthandValue,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ShorthandValue {
    /// A bare or quoted value (quotes removed, surrounding blanks of a bare value trimmed).
    Scalar(String),
    /// A JSON scalar: typed, as the AWS CLI passes JSON through (`"2"` is a string, `2` a
    /// number; a number is only a number).
    Json(JsonScalar),
    /// `[a,b,...]`.
    List(Vec<ShorthandNode>),
    /// `{Key=Value,...}`, keys unique, in input order.
    Struct(Vec<ShorthandField>),
}

/// A JSON scalar as written.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonScalar {
    Str(String),
    /// The number's text, as written.
    Num(String),
    Bool(bool),
    Null,
}

/// `Key=Value` inside a structure (or at the top level).
#[derive(Clone, Debug, PartialEq)]
pub struct ShorthandField {
    pub key: String,
    pub key_pos: usize,
    pub value: ShorthandNode,
}

/// Nesting deeper than this is refused (it would only be a mistake, and it bounds recursion).
const MAX_DEPTH: usize = 32;

/// Parses AWS CLI shorthand as the AWS CLI's own shorthand parser reads it: `Key=Value` pairs
/// separated by commas; a value is a structure `{Key=Value,...}` (a key given twice keeps its
/// last value; a trailing comma is allowed), a list `[v,...]`, a quoted string (`"..."` or
/// `'...'`, backslash escapes the quote and itself), or a bare value (`\,` is a comma in it;
/// trailing blanks dropped; possibly empty). At the top level `Key=a,b` is the list `[a, b]`
/// unless an item is followed by `=` (the next key). Keys are letters, digits and `-_.#/:`;
/// top-level keys are unique.
pub fn parse_shorthand_tree(s: &str) -> Result<Vec<ShorthandField>, ShorthandError> {
    let mut p = Parser {
        src: s,
        pos: 0,
        depth: 0,
    };
    p.parameter()
}

/// What reads `Key@=file://PATH` (and `fileb://`) values: the text of the file, or why not.
pub type ParamFileReader = fn(&str) -> Result<String, String>;

static PARAM_FILES: std::sync::OnceLock<ParamFileReader> = std::sync::OnceLock::new();

/// Lets `Key@=file://PATH` values be read, as the AWS CLI reads them, with `reader`. The
/// command line sets it; servers never do, so the cluster reads no file a request names.
pub fn read_param_files_with(reader: ParamFileReader) {
    let _ = PARAM_FILES.set(reader);
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

/// Reads an argument that takes a structure as the AWS CLI does: JSON when it starts with `{`
/// (after blanks), else shorthand. (`file://` is read by the command line before this.)
pub fn parse_structure(s: &str) -> Result<Vec<ShorthandField>, ShorthandError> {
    let t = s.trim_start();
    if t.starts_with('{') {
        let mut p = JsonParser {
            src: s,
            pos: s.len() - t.len(),
            depth: 0,
        };
        let node = p.value()?;
        p.skip_blanks();
        if p.pos < s.len() {
            return Err(ShorthandError::new(
                s,
                p.pos,
                "unexpected text after the JSON object",
            ));
        }
        match node.value {
            ShorthandValue::Struct(f) => Ok(f),
            _ => unreachable!("a value starting with '{{' is an object"),
        }
    } else if t.starts_with('[') {
        Err(ShorthandError::new(
            s,
            s.len() - t.len(),
            "expected a structure: a JSON object {...} or Key=Value shorthand, found a list",
        ))
    } else {
        parse_shorthand_tree(s)
    }
}

/// A JSON reader that keeps each value's byte offset, so errors point into the argument as
/// they do for shorthand.
struct JsonParser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

impl JsonParser<'_> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> ShorthandError {
        ShorthandError::new(self.src, pos, format!("invalid JSON: {}", msg.into()))
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn found(&self) -> String {
        describe(self.src.get(self.pos..).and_then(|r| r.chars().next()))
    }

    /// Steps into an object or list that starts at `start`, within the depth limit.
    fn open(&mut self, start: usize) -> Result<(), ShorthandError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(start, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        self.pos += 1;
        Ok(())
    }

    /// After an item of `what`: a ',' (another item follows: false) or `close` (true).
    fn closes(&mut self, close: u8, what: &str) -> Result<bool, ShorthandError> {
        self.skip_blanks();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(self.err(
                self.pos,
                format!(
                    "expected ',' or '{}' in {what}, found {}",
                    close as char,
                    self.found()
                ),
            )),
        }
    }

    fn value(&mut self) -> Result<ShorthandNode, ShorthandError> {
        self.skip_blanks();
        let start = self.pos;
        let value = match self.peek() {
            Some(b'{') => {
                self.open(start)?;
                let mut fields: Vec<ShorthandField> = Vec::new();
                self.skip_blanks();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                } else {
                    loop {
                        self.skip_blanks();
                        let key_pos = self.pos;
                        if self.peek() != Some(b'"') {
                            return Err(self.err(
                                self.pos,
                                format!(
                                    "expected a \"key\" in double quotes, found {}",
                                    self.found()
                                ),
                            ));
                        }
                        let key = self.string()?;
                        if let Some(prev) = fields.iter().find(|f| f.key == key) {
                            return Err(self.err(
                                key_pos,
                                format!("duplicate key \"{key}\" (first given at byte {}); give each key once", prev.key_pos),
                            ));
                        }
                        self.skip_blanks();
                        if self.peek() != Some(b':') {
                            return Err(self.err(
                                self.pos,
                                format!("expected ':' after key \"{key}\", found {}", self.found()),
                            ));
                        }
                        self.pos += 1;
                        let value = self.value()?;
                        fields.push(ShorthandField {
                            key,
                            key_pos,
                            value,
                        });
                        if self.closes(b'}', "an object")? {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                ShorthandValue::Struct(fields)
            }
            Some(b'[') => {
                self.open(start)?;
                let mut items = Vec::new();
                self.skip_blanks();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                } else {
                    loop {
                        items.push(self.value()?);
                        if self.closes(b']', "a list")? {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                ShorthandValue::List(items)
            }
            Some(b'"') => ShorthandValue::Json(JsonScalar::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => {
                let rest = &self.src[self.pos..];
                let len = rest
                    .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
                    .unwrap_or(rest.len());
                let text = &rest[..len];
                if !json_number(text) {
                    return Err(self.err(start, format!("{text:?} is not a JSON number")));
                }
                self.pos += len;
                ShorthandValue::Json(JsonScalar::Num(text.to_string()))
            }
            _ => {
                let rest = &self.src[self.pos..];
                let (v, len) = if rest.starts_with("true") {
                    (JsonScalar::Bool(true), 4)
                } else if rest.starts_with("false") {
                    (JsonScalar::Bool(false), 5)
                } else if rest.starts_with("null") {
                    (JsonScalar::Null, 4)
                } else {
                    return Err(
                        self.err(start, format!("expected a value, found {}", self.found()))
                    );
                };
                self.pos += len;
                ShorthandValue::Json(v)
            }
        };
        Ok(ShorthandNode { pos: start, value })
    }

    fn string(&mut self) -> Result<String, ShorthandError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.src.get(self.pos..).and_then(|r| r.chars().next()) else {
                return Err(self.err(start, "a string is not closed with '\"'"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.err(start, "a string is not closed with '\"'"));
                    };
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hex = self.src.get(self.pos..self.pos + 4).unwrap_or("");
                            let code = u32::from_str_radix(hex, 16)
                                .map_err(|_| self.err(self.pos - 2, "\\u needs four hex digits"))?;
                            self.pos += 4;
                            // A lone surrogate half is kept as the replacement character.
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        _ => return Err(self.err(self.pos - 2, "unknown escape in a string")),
                    }
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.err(
                        self.pos - 1,
                        "a control character in a string must be escaped",
                    ))
                }
                c => out.push(c),
            }
        }
    }
}

/// JSON's number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn json_number(t: &str) -> bool {
    let b = t.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let s = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > s
    };
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// Where each run of ten Unicode decimal digits (category Nd) starts: Python's `int()` and
/// `float()` read any of them as the ASCII digit of the same value ("٣" is 3, "１_０" is 10).
/// Unicode 14.0, as Python 3.11's `unicodedata` has it (66 runs, 660 digits).
const DIGIT_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

/// `s` with the blanks around it stripped (Unicode's White_Space, as `int()` and `float()`
/// strip them; not the ASCII separators `\x1c` to `\x1f` that `str.isspace()` also counts)
/// and every Unicode decimal digit made ASCII; other characters are kept as they are (and
/// refused by the callers).
fn python_number_text(s: &str) -> std::borrow::Cow<'_, str> {
    let t = s.trim();
    if t.is_ascii() {
        return t.into();
    }
    t.chars()
        .map(|c| {
            let cp = c as u32;
            let zero = DIGIT_ZEROS.partition_point(|z| *z <= cp).checked_sub(1);
            match zero.map(|i| cp - DIGIT_ZEROS[i]) {
                Some(d @ 0..=9) => char::from(b'0' + d as u8),
                _ => c,
            }
        })
        .collect::<String>()
        .into()
}

/// A number's text without its sign (`-` or `+`), and whether it was `-`.
fn split_sign(t: &str) -> (bool, &str) {
    match t.strip_prefix('-') {
        Some(body) => (true, body),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    }
}

/// A whole number as the AWS CLI reads a shorthand integer (Python's `int()`): blanks around,
/// an optional sign, digits (of any script) with single `_` between them.
pub fn python_int(s: &str) -> Option<i128> {
    let text = python_number_text(s);
    let (neg, body) = split_sign(&text);
    if !python_digits(body) {
        return None;
    }
    let v: i128 = body.replace('_', "").parse().ok()?;
    Some(if neg { -v } else { v })
}

/// Digits with single `_` between them (Python's numeric literals).
fn python_digits(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// A number as the AWS CLI reads a shorthand float (Python's `float()`): blanks around, a
/// sign, digits (of any script) with an optional point and exponent (`1e1`, `.5`, `5.`,
/// `1_000`), or `inf`, `infinity` and `nan` in any case.
pub fn python_float(s: &str) -> Option<f64> {
    let text = python_number_text(s);
    let (neg, body) = split_sign(&text);
    let lower = body.to_ascii_lowercase();
    let v = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if lower == "nan" {
        f64::NAN
    } else {
        let (mantissa, exp) = match lower.split_once('e') {
            Some((m, e)) => (m, Some(e)),
            None => (lower.as_str(), None),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let int_ok = int.is_empty() || python_digits(int);
        let frac_ok = frac.is_empty() || python_digits(frac);
        if !int_ok || !frac_ok || (int.is_empty() && frac.is_empty()) {
            return None;
        }
        if let Some(e) = exp {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !python_digits(e) {
                return None;
            }
        }
        lower.replace('_', "").parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn describe(c: Option<char>) -> String {
    match c {
        None => "the end of the input".into(),
        Some(c) => format!("{c:?}"),
    }
}

impl Parser<'_> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> ShorthandError {
        ShorthandError::new(self.src, pos, msg)
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn peek_char(&self) -> Option<char> {
        self.src.get(self.pos..).and_then(|r| r.chars().next())
    }

    fn at_eof(&self) -> bool {
        self.pos >= self.src.len()
    }

    /// Python's `string.whitespace`, which the AWS CLI skips around `=` and `,`.
    fn skip_blanks(&mut self) {
        while matches!(
            self.peek(),
            Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
        ) {
            self.pos += 1;
        }
    }

    fn enter(&mut self) -> Result<(), ShorthandError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(
                self.pos,
                format!("structures and lists are nested more than {MAX_DEPTH} levels deep"),
            ));
        }
        Ok(())
    }

    /// `Key@=`: the `@` (consumed) that makes `file://` values the files' text.
    fn at_sign(&mut self) -> bool {
        if self.peek() == Some(b'@') {
            self.pos += 1;
            self.skip_blanks();
            true
        } else {
            false
        }
    }

    /// The value of a `Key@=`: each scalar `file://PATH` or `fileb://PATH` in it (or in its
    /// lists) becomes that file's text; other scalars stay as written, as in the AWS CLI.
    /// (Keys of a structure inside take their own `=` or `@=`.)
    fn read_files(&self, node: &mut ShorthandNode) -> Result<(), ShorthandError> {
        match &mut node.value {
            ShorthandValue::Scalar(v) if v.starts_with("file://") || v.starts_with("fileb://") => {
                let Some(read) = PARAM_FILES.get() else {
                    return Err(self.err(
                        node.pos,
                        "Key@=file://... is read by the allot command line only",
                    ));
                };
                *v = read(v).map_err(|e| self.err(node.pos, e))?;
                Ok(())
            }
            ShorthandValue::List(items) => {
                for i in items {
                    self.read_files(i)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `char` must come next (after blanks when `blanks`).
    fn expect(&mut self, c: u8, blanks: bool, what: &str) -> Result<(), ShorthandError> {
        if blanks {
            self.skip_blanks();
        }
        if self.peek() != Some(c) {
            return Err(self.err(
                self.pos,
                format!(
                    "expected '{}' {what}, found {}",
                    c as char,
                    describe(self.peek_char())
                ),
            ));
        }
        self.pos += 1;
        if blanks {
            self.skip_blanks();
        }
        Ok(())
    }

    /// The top level: `Key=Value` pairs separated by commas, each key once.
    fn parameter(&mut self) -> Result<Vec<ShorthandField>, ShorthandError> {
        let mut fields: Vec<ShorthandField> = Vec::new();
        loop {
            let field = self.keyval(fields.is_empty())?;
            if let Some(prev) = fields.iter().find(|f| f.key == field.key) {
                return Err(self.err(
                    field.key_pos,
                    format!(
                        "duplicate key \"{}\" (first given at byte {}); give each key once (often a ',' where a space was meant)",
                        field.key, prev.key_pos
                    ),
                ));
            }
            fields.push(field);
            // Blanks at the very end are ignored (a file's last newline). The AWS CLI refuses
            // them after a list or structure; allot does not.
            if self.src[self.pos..]
                .trim_start_matches(is_python_blank)
                .is_empty()
            {
                return Ok(fields);
            }
            let key = &fields[fields.len() - 1].key;
            self.expect(b',', true, &format!("after the value of key \"{key}\""))?;
        }
    }

    /// `Key=Value` (the value a csv list at the top level).
    fn keyval(&mut self, first: bool) -> Result<ShorthandField, ShorthandError> {
        let key_pos = self.pos;
        let key = self.key(first)?;
        if key.is_empty() && self.peek() != Some(b'=') {
            let msg = match self.peek_char() {
                None if !first => "expected a key after ','; remove the trailing comma".to_string(),
                None => "expected Key=Value, found an empty argument".to_string(),
                c => format!(
                    "expected a key (letters, digits and -_.#/:) followed by '=', found {}",
                    describe(c)
                ),
            };
            return Err(self.err(self.pos, msg));
        }
        self.skip_blanks();
        let files = self.at_sign();
        self.expect(b'=', true, &format!("after key \"{key}\""))?;
        let mut value = self.values(&key)?;
        if files {
            self.read_files(&mut value)?;
        }
        Ok(ShorthandField {
            key,
            key_pos,
            value,
        })
    }

    /// A key: letters, digits and `-_.#/:` (possibly none, as the AWS CLI allows).
    fn key(&mut self, first: bool) -> Result<String, ShorthandError> {
        let start = self.pos;
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b"-_.#/:".contains(&b))
        {
            self.pos += 1;
        }
        if self.pos == start && first && start == 0 && self.peek() == Some(b'{') {
            return Err(self.err(
                start,
                "expected Key=Value, found '{': the shorthand form is Key=Value,Key={...},Key=[...] (JSON starts with '{' and is read as JSON)",
            ));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn values(&mut self, key: &str) -> Result<ShorthandNode, ShorthandError> {
        match self.peek() {
            None => Ok(ShorthandNode {
                pos: self.pos,
                value: ShorthandValue::Scalar(String::new()),
            }),
            Some(b'[') => self.explicit_list(),
            Some(b'{') => self.hash_literal(),
            Some(_) => self.csv_value(key),
        }
    }

    /// `a` is a scalar, `a,b,c` a list, as long as no item is followed by `=` (that is the
    /// next key: the list ends before it).
    fn csv_value(&mut self, key: &str) -> Result<ShorthandNode, ShorthandError> {
        let start = self.pos;
        let first = self.first_value()?;
        self.skip_blanks();
        if self.peek() != Some(b',') {
            return Ok(first);
        }
        let mut comma = self.pos;
        self.pos += 1;
        self.skip_blanks();
        let mut items = vec![first];
        loop {
            match self.second_value() {
                Some(item) => {
                    self.skip_blanks();
                    if self.at_eof() {
                        items.push(item);
                        break;
                    }
                    if self.peek() == Some(b',') {
                        comma = self.pos;
                        self.pos += 1;
                        self.skip_blanks();
                        items.push(item);
                        continue;
                    }
                }
                None if self.at_eof() => {
                    return Err(self.err(
                        self.pos,
                        format!("expected a value after ',' in the value of key \"{key}\", found the end of the input; remove the trailing comma"),
                    ));
                }
                None => {}
            }
            // The next key: back to the comma before it.
            self.pos = comma;
            break;
        }
        if items.len() == 1 {
            return Ok(items.pop().expect("one item"));
        }
        Ok(ShorthandNode {
            pos: start,
            value: ShorthandValue::List(items),
        })
    }

    /// A value of a list item or a structure field: a list, a structure or a scalar.
    fn explicit_value(&mut self) -> Result<ShorthandNode, ShorthandError> {
        match self.peek() {
            Some(b'[') => self.explicit_list(),
            Some(b'{') => self.hash_literal(),
            _ => self.first_value(),
        }
    }

    fn explicit_list(&mut self) -> Result<ShorthandNode, ShorthandError> {
        let open = self.pos;
        self.enter()?;
        self.expect(b'[', true, "")?;
        let mut items = Vec::new();
        while self.peek() != Some(b']') {
            if self.at_eof() {
                return Err(self.err(
                    self.pos,
                    format!(
                        "expected ']' to close the '[' at byte {open}, found the end of the input"
                    ),
                ));
            }
            items.push(self.explicit_value()?);
            self.skip_blanks();
            if self.peek() != Some(b']') {
                if self.at_eof() {
                    return Err(self.err(
                        self.pos,
                        format!("expected ']' to close the '[' at byte {open}, found the end of the input"),
                    ));
                }
                self.expect(b',', false, "or ']' after a list item")?;
                self.skip_blanks();
            }
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(ShorthandNode {
            pos: open,
            value: ShorthandValue::List(items),
        })
    }

    /// `{Key=Value,...}`; a key given twice keeps its last value, as the AWS CLI does.
    fn hash_literal(&mut self) -> Result<ShorthandNode, ShorthandError> {
        let open = self.pos;
        self.enter()?;
        self.expect(b'{', true, "")?;
        let mut fields: Vec<ShorthandField> = Vec::new();
        while self.peek() != Some(b'}') {
            if self.at_eof() {
                return Err(self.err(
                    self.pos,
                    format!("expected '}}' to close the '{{' at byte {open}, found the end of the input"),
                ));
            }
            let key_pos = self.pos;
            let key = self.key(false)?;
            self.skip_blanks();
            let files = self.at_sign();
            if key.is_empty() && self.peek() != Some(b'=') {
                return Err(self.err(
                    self.pos,
                    format!(
                        "expected a key (letters, digits and -_.#/:) followed by '=', found {}",
                        describe(self.peek_char())
                    ),
                ));
            }
            self.expect(b'=', true, &format!("after key \"{key}\""))?;
            let mut value = self.explicit_value()?;
            if files {
                self.read_files(&mut value)?;
            }
            self.skip_blanks();
            if self.peek() != Some(b'}') {
                if self.at_eof() {
                    return Err(self.err(
                        self.pos,
                        format!("expected '}}' to close the '{{' at byte {open}, found the end of the input"),
                    ));
                }
                self.expect(
                    b',',
                    false,
                    &format!("or '}}' after the value of key \"{key}\""),
                )?;
                self.skip_blanks();
            }
            let field = ShorthandField {
                key,
                key_pos,
                value,
            };
            match fields.iter_mut().find(|f| f.key == field.key) {
                Some(f) => *f = field,
                None => fields.push(field),
            }
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(ShorthandNode {
            pos: open,
            value: ShorthandValue::Struct(fields),
        })
    }

    /// A quoted value, or a bare one (possibly empty) as the AWS CLI's first-value pattern
    /// reads it.
    fn first_value(&mut self) -> Result<ShorthandNode, ShorthandError> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.quoted(q as char),
            _ => Ok(self.bare(is_first_follow).unwrap_or_else(|| ShorthandNode {
                pos: self.pos,
                value: ShorthandValue::Scalar(String::new()),
            })),
        }
    }

    /// A later item of a top-level csv list: quoted, or bare by the second-value pattern
    /// (which stops at `=`); `None` when none starts here (nothing consumed).
    fn second_value(&mut self) -> Option<ShorthandNode> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.quoted(q as char).ok(),
            _ => self.bare(is_second_follow),
        }
    }

    /// A quoted value: `\` escapes the quote and itself; other escapes stay as written.
    fn quoted(&mut self, quote: char) -> Result<ShorthandNode, ShorthandError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek_char() else {
                self.pos = start;
                return Err(self.err(
                    self.src.len(),
                    format!("expected a closing {quote} for the quoted value at byte {start}, found the end of the input"),
                ));
            };
            self.pos += c.len_utf8();
            if c == quote {
                break;
            }
            if c == '\\' {
                match self.peek_char() {
                    Some(n) if n == quote || n == '\\' => {
                        out.push(n);
                        self.pos += n.len_utf8();
                    }
                    _ => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        Ok(ShorthandNode {
            pos: start,
            value: ShorthandValue::Scalar(out),
        })
    }

    /// A bare value: a first character that may start a word, then characters `follow`
    /// accepts; `\,` is a comma inside it. Trailing blanks are dropped. `None` (nothing
    /// consumed) when no value starts here.
    fn bare(&mut self, follow: fn(char) -> bool) -> Option<ShorthandNode> {
        let start = self.pos;
        let mut out = String::new();
        let mut first = true;
        while let Some(c) = self.peek_char() {
            if self.src[self.pos..].starts_with("\\,") {
                out.push(',');
                self.pos += 2;
            } else if (first && is_start_word(c)) || (!first && follow(c)) {
                out.push(c);
                self.pos += c.len_utf8();
            } else {
                break;
            }
            first = false;
        }
        if first {
            return None;
        }
        let text = out.trim_end_matches(char::is_whitespace).to_string();
        Some(ShorthandNode {
            pos: start,
            value: ShorthandValue::Scalar(text),
        })
    }
}

fn is_python_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// The characters that may begin a bare value (the AWS CLI's shorthand pattern): printable
/// characters up to U+FFFF except space, quotes, `,`, `=`, `[` and `{`.
fn is_start_word(c: char) -> bool {
    let u = c as u32;
    matches!(u, 0x21 | 0x23..=0x26 | 0x28..=0x2B | 0x2D..=0x3C | 0x3E..=0x5A | 0x5C..=0x7A | 0x7C..=0xFFFF)
}

/// The characters that may follow in a bare value of a structure, a list or the first of a
/// csv list: blanks and printable characters except quotes, `,`, `]` and `}`.
fn is_first_follow(c: char) -> bool {
    let u = c as u32;
    c.is_whitespace()
        || matches!(u, 0x21 | 0x23..=0x26 | 0x28..=0x2B | 0x2D..=0x5C | 0x5E..=0x7C | 0x7E..=0xFFFF)
}

/// The characters that may follow in a later csv item: blanks and printable characters
/// except quotes, `,` and `=`.
fn is_second_follow(c: char) -> bool {
    let u = c as u32;
    c.is_whitespace() || matches!(u, 0x21 | 0x23..=0x26 | 0x28..=0x2B | 0x2D..=0x3C | 0x3E..=0xFFFF)
}

/// A scalar as shorthand: bare when that reads back the same, else double-quoted.
fn render_scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.starts_with(['"', '\'', ' ', '\t', '\n', '\r'])
        && !s.ends_with([' ', '\t', '\n', '\r'])
        && !s.contains([',', '{', '}', '[', ']']);
    if plain {
        s.to_string()
    } else {
        let mut out = String::from("\"");
        for c in s.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }
}

fn render_row(r: &ComputeQuotaResource) -> String {
    let mut parts = vec![format!("InstanceType={}", render_scalar(&r.instance_type))];
    if let Some(n) = r.count {
        parts.push(format!("Count={n}"));
    }
    if let Some(n) = r.accelerators {
        parts.push(format!("Accelerators={n}"));
    }
    if let Some(v) = r.vcpu {
        parts.push(format!("VCpu={v}"));
    }
    if let Some(v) = r.memory_in_gib {
        parts.push(format!("MemoryInGiB={v}"));
    }
    format!("{{{}}}", parts.join(","))
}

// ---------------------------------------------------------------------------------------------
// From the tree to the typed configs
// ---------------------------------------------------------------------------------------------

const TOP_KEYS: [&str; 3] = [
    "ComputeQuotaResources",
    "ResourceSharingConfig",
    "PreemptTeamTasks",
];
const ROW_KEYS: [&str; 5] = [
    "InstanceType",
    "Count",
    "Accelerators",
    "VCpu",
    "MemoryInGiB",
];
const SHARING_KEYS: [&str; 3] = ["Strategy", "BorrowLimit", "AbsoluteBorrowLimits"];
const SCHEDULER_KEYS: [&str; 3] = ["PriorityClasses", "FairShare", "IdleResourceSharing"];
const CLASS_KEYS: [&str; 2] = ["Name", "Weight"];
const ROW_EXAMPLE: &str = "{InstanceType=ml.g5.8xlarge,Count=1}";

/// Byte offsets of one parsed row, to point errors found by `validate` at the input.
#[derive(Clone, Copy, Debug, Default)]
struct RowPos {
    start: usize,
    instance_type: Option<usize>,
    count: Option<usize>,
    accelerators: Option<usize>,
    vcpu: Option<usize>,
    memory: Option<usize>,
}

impl RowPos {
    fn field(&self, f: RowField) -> usize {
        match f {
            RowField::InstanceType => self.instance_type,
            RowField::Count => self.count,
            RowField::Accelerators => self.accelerators,
            RowField::VCpu => self.vcpu,
            RowField::MemoryInGiB => self.memory,
        }
        .unwrap_or(self.start)
    }
}

#[derive(Debug, Default)]
struct QuotaPos {
    rows: Vec<RowPos>,
    borrow_limit: usize,
    absolute: usize,
    abs_rows: Vec<RowPos>,
}

impl QuotaPos {
    fn row(&self, list: RowList, row: usize) -> Option<&RowPos> {
        let rows = match list {
            RowList::ComputeQuotaResources => &self.rows,
            RowList::AbsoluteBorrowLimits => &self.abs_rows,
        };
        rows.get(row.checked_sub(1)?)
    }

    fn at(&self, list: RowList, row: usize, field: Option<RowField>) -> usize {
        self.row(list, row)
            .map_or(0, |r| field.map_or(r.start, |f| r.field(f)))
    }

    /// Where in the input an error of `validate` is.
    fn locate(&self, e: &HyperPodError) -> usize {
        use HyperPodError as E;
        match e {
            E::EmptyInstanceType { list, row } => {
                self.at(*list, *row, Some(RowField::InstanceType))
            }
            E::NoAmount { list, row, .. }
            | E::UnknownInstanceType { list, row, .. }
            | E::TooLarge { list, row, .. } => self.at(*list, *row, None),
            E::NoAccelerators { list, row, .. } => {
                self.at(*list, *row, Some(RowField::Accelerators))
            }
            E::BadAmount {
                list, row, field, ..
            } => self.at(*list, *row, Some(*field)),
            E::DuplicateInstanceType { list, second, .. } => {
                self.at(*list, *second, Some(RowField::InstanceType))
            }
            E::TooManyRows { list, max, .. } => self.at(*list, max + 1, None),
            E::BorrowLimitRange { .. } => self.borrow_limit,
        }
    }
}

fn join_or(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn describe_node(n: &ShorthandNode) -> String {
    match &n.value {
        ShorthandValue::Scalar(s) => format!("the value {s:?}"),
        ShorthandValue::Json(JsonScalar::Str(s)) => format!("the string {s:?}"),
        ShorthandValue::Json(JsonScalar::Num(n)) => format!("the number {n}"),
        ShorthandValue::Json(JsonScalar::Bool(b)) => format!("{b}"),
        ShorthandValue::Json(JsonScalar::Null) => "null".into(),
        ShorthandValue::List(_) => "a list [...]".into(),
        ShorthandValue::Struct(_) => "a structure {...}".into(),
    }
}

fn find<'n>(fields: &'n [ShorthandField], key: &str) -> Option<&'n ShorthandField> {
    fields.iter().find(|f| f.key == key)
}

/// Reads the typed configs out of a parsed tree, with errors pointing into `input`.
struct Reader<'a> {
    input: &'a str,
}

impl Reader<'_> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> ShorthandError {
        ShorthandError::new(self.input, pos, msg)
    }

    fn check_keys(
        &self,
        fields: &[ShorthandField],
        ctx: &str,
        allowed: &[&str],
    ) -> Result<(), ShorthandError> {
        let expected = allowed.join(", ");
        for f in fields {
            if allowed.contains(&f.key.as_str()) {
                continue;
            }
            let msg = if f.key == "AcceleratorPartition" {
                format!("AcceleratorPartition (accelerator partitions) is not supported in {ctx}; expected {expected}")
            } else if let Some(m) = allowed.iter().find(|a| a.eq_ignore_ascii_case(&f.key)) {
                format!(
                    "unknown key \"{}\" in {ctx}; expected {expected} (keys are case-sensitive: did you mean {m}?)",
                    f.key
                )
            } else {
                format!("unknown key \"{}\" in {ctx}; expected {expected}", f.key)
            };
            return Err(self.err(f.key_pos, msg));
        }
        Ok(())
    }

    fn structure<'n>(
        &self,
        node: &'n ShorthandNode,
        what: &str,
        example: &str,
    ) -> Result<&'n [ShorthandField], ShorthandError> {
        match &node.value {
            ShorthandValue::Struct(fields) => Ok(fields),
            _ => Err(self.err(
                node.pos,
                format!(
                    "{what} must be a structure such as {example}, found {}",
                    describe_node(node)
                ),
            )),
        }
    }

    fn list<'n>(
        &self,
        node: &'n ShorthandNode,
        what: &str,
        example: &str,
    ) -> Result<&'n [ShorthandNode], ShorthandError> {
        match &node.value {
            ShorthandValue::List(items) => Ok(items),
            _ => Err(self.err(
                node.pos,
                format!(
                    "{what} must be a list such as [{example}], found {}",
                    describe_node(node)
                ),
            )),
        }
    }

    fn scalar<'n>(&self, f: &'n ShorthandField) -> Result<&'n str, ShorthandError> {
        match &f.value.value {
            ShorthandValue::Scalar(s) | ShorthandValue::Json(JsonScalar::Str(s)) => Ok(s),
            ShorthandValue::Json(_) => Err(self.err(
                f.value.pos,
                format!(
                    "{} takes a string, found {} (in JSON, write it in double quotes)",
                    f.key,
                    describe_node(&f.value)
                ),
            )),
            _ => Err(self.err(
                f.value.pos,
                format!(
                    "{} takes a single value, found {}",
                    f.key,
                    describe_node(&f.value)
                ),
            )),
        }
    }

    /// A whole number: shorthand as Python's `int()` reads it (`+2`, ` 2 `, `1_000`), JSON
    /// only as an integer literal (the AWS CLI refuses `2.0` or `"2"` for an integer).
    fn integer(&self, f: &ShorthandField) -> Result<i64, ShorthandError> {
        let v = match &f.value.value {
            ShorthandValue::Scalar(s) => python_int(s).ok_or_else(|| {
                self.err(
                    f.value.pos,
                    format!("{} {s:?} is not a whole number", f.key),
                )
            })?,
            ShorthandValue::Json(JsonScalar::Num(n)) if !n.contains(['.', 'e', 'E']) => n
                .parse::<i128>()
                .map_err(|_| self.err(f.value.pos, format!("{} {n} is too large", f.key)))?,
            _ => {
                return Err(self.err(
                    f.value.pos,
                    format!(
                        "{} takes a whole number, found {}",
                        f.key,
                        describe_node(&f.value)
                    ),
                ))
            }
        };
        i64::try_from(v).map_err(|_| self.err(f.value.pos, format!("{} {v} is too large", f.key)))
    }

    /// A whole number within the API model's range for `shape`.
    fn ranged(
        &self,
        f: &ShorthandField,
        shape: &str,
        min: i64,
        max: i64,
    ) -> Result<i64, ShorthandError> {
        let v = self.integer(f)?;
        if !(min..=max).contains(&v) {
            return Err(self.err(
                f.value.pos,
                format!(
                    "{} {v} is out of range {min}..={max} (the API model's {shape})",
                    f.key
                ),
            ));
        }
        Ok(v)
    }

    fn count(&self, f: &ShorthandField) -> Result<u32, ShorthandError> {
        let shape = if f.key == "Count" {
            "InstanceCount"
        } else {
            "AcceleratorsAmount"
        };
        // The range fits u32.
        Ok(self.ranged(f, shape, 0, MAX_MODEL_AMOUNT as i64)? as u32)
    }

    /// A number: shorthand as Python's `float()` reads it (`1e1`, `.5`, `+2`), JSON any
    /// number.
    fn number(&self, f: &ShorthandField) -> Result<f64, ShorthandError> {
        let v = match &f.value.value {
            ShorthandValue::Scalar(s) => python_float(s),
            ShorthandValue::Json(JsonScalar::Num(n)) => n.parse::<f64>().ok(),
            _ => None,
        };
        v.ok_or_else(|| {
            self.err(
                f.value.pos,
                format!(
                    "{} {} is not a number; write digits with an optional decimal point and exponent, such as 48, 0.5 or 1e3",
                    f.key,
                    match &f.value.value {
                        ShorthandValue::Scalar(s) => format!("{s:?}"),
                        _ => describe_node(&f.value),
                    }
                ),
            )
        })
    }

    fn choice<T: Copy>(
        &self,
        f: &ShorthandField,
        options: &[(&str, T)],
    ) -> Result<T, ShorthandError> {
        let s = self.scalar(f)?;
        if let Some((_, v)) = options.iter().find(|(n, _)| *n == s) {
            return Ok(*v);
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        let hint = options
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map(|(n, _)| format!(" (values are case-sensitive: did you mean {n}?)"))
            .unwrap_or_default();
        Err(self.err(
            f.value.pos,
            format!(
                "{} {s:?} is not valid; expected {}{hint}",
                f.key,
                join_or(&names)
            ),
        ))
    }

    fn compute_quota(
        &self,
        top: &[ShorthandField],
    ) -> Result<(ComputeQuotaConfig, QuotaPos), ShorthandError> {
        self.check_keys(top, "the compute quota config", &TOP_KEYS)?;
        let mut pos = QuotaPos::default();
        let mut config = ComputeQuotaConfig::default();
        // Optional in the API model: without it the team has no quota of its own.
        if let Some(res) = find(top, "ComputeQuotaResources") {
            let items = self.list(&res.value, "ComputeQuotaResources", ROW_EXAMPLE)?;
            for (i, item) in items.iter().enumerate() {
                let (row, p) = self.row(item, RowList::ComputeQuotaResources, i + 1)?;
                config.resources.push(row);
                pos.rows.push(p);
            }
        }
        if let Some(f) = find(top, "ResourceSharingConfig") {
            let fields = self.structure(
                &f.value,
                "ResourceSharingConfig",
                "{Strategy=LendAndBorrow,BorrowLimit=50}",
            )?;
            self.check_keys(fields, "ResourceSharingConfig", &SHARING_KEYS)?;
            let sharing = &mut config.sharing;
            if find(fields, "Strategy").is_none() {
                return Err(self.err(
                    f.value.pos,
                    "ResourceSharingConfig needs Strategy (required by the API model): Lend, DontLend or LendAndBorrow, such as {Strategy=LendAndBorrow,BorrowLimit=50}",
                ));
            }
            if let Some(f) = find(fields, "Strategy") {
                sharing.strategy = self.choice(
                    f,
                    &[
                        ("Lend", SharingStrategy::Lend),
                        ("DontLend", SharingStrategy::DontLend),
                        ("LendAndBorrow", SharingStrategy::LendAndBorrow),
                    ],
                )?;
            }
            if let Some(f) = find(fields, "BorrowLimit") {
                pos.borrow_limit = f.value.pos;
                let v = self.integer(f)?;
                let p = u32::try_from(v).map_err(|_| {
                    self.err(
                        f.value.pos,
                        HyperPodError::BorrowLimitRange { value: v }.to_string(),
                    )
                })?;
                sharing.borrow_limit = Some(p);
            }
            if let Some(f) = find(fields, "AbsoluteBorrowLimits") {
                pos.absolute = f.value.pos;
                let items = self.list(&f.value, "AbsoluteBorrowLimits", ROW_EXAMPLE)?;
                for (i, item) in items.iter().enumerate() {
                    let (row, p) = self.row(item, RowList::AbsoluteBorrowLimits, i + 1)?;
                    sharing.absolute_borrow_limits.push(row);
                    pos.abs_rows.push(p);
                }
            }
        }
        if let Some(f) = find(top, "PreemptTeamTasks") {
            config.preempt_team_tasks = self.choice(
                f,
                &[
                    ("Never", PreemptTeamTasks::Never),
                    ("LowerPriority", PreemptTeamTasks::LowerPriority),
                ],
            )?;
        }
        Ok((config, pos))
    }

    fn row(
        &self,
        item: &ShorthandNode,
        list: RowList,
        n: usize,
    ) -> Result<(ComputeQuotaResource, RowPos), ShorthandError> {
        let fields = self.structure(item, &format!("each {list} item"), ROW_EXAMPLE)?;
        self.check_keys(fields, &format!("{list} row {n}"), &ROW_KEYS)?;
        let mut pos = RowPos {
            start: item.pos,
            ..RowPos::default()
        };
        let Some(it) = find(fields, "InstanceType") else {
            return Err(self.err(
                item.pos,
                format!("{list} row {n} has no InstanceType; add InstanceType=<type>, such as InstanceType=ml.g5.8xlarge"),
            ));
        };
        pos.instance_type = Some(it.value.pos);
        let mut row = ComputeQuotaResource {
            instance_type: self.scalar(it)?.to_string(),
            ..ComputeQuotaResource::default()
        };
        if let Some(f) = find(fields, "Count") {
            pos.count = Some(f.key_pos);
            row.count = Some(self.count(f)?);
        }
        if let Some(f) = find(fields, "Accelerators") {
            pos.accelerators = Some(f.key_pos);
            row.accelerators = Some(self.count(f)?);
        }
        if let Some(f) = find(fields, "VCpu") {
            pos.vcpu = Some(f.value.pos);
            row.vcpu = Some(self.number(f)?);
        }
        if let Some(f) = find(fields, "MemoryInGiB") {
            pos.memory = Some(f.value.pos);
            row.memory_in_gib = Some(self.number(f)?);
        }
        Ok((row, pos))
    }

    fn scheduler_config(&self, top: &[ShorthandField]) -> Result<ClusterPolicy, ShorthandError> {
        self.check_keys(top, "the scheduler config", &SCHEDULER_KEYS)?;
        let mut policy = ClusterPolicy::default();
        // Per class: item, Name value and Weight value offsets.
        let mut class_pos: Vec<(usize, usize, usize)> = Vec::new();
        let mut classes_pos = 0;
        let on_off = [("Enabled", true), ("Disabled", false)];
        if let Some(f) = find(top, "PriorityClasses") {
            classes_pos = f.value.pos;
            let example = "{Name=training,Weight=70}";
            let items = self.list(&f.value, "PriorityClasses", example)?;
            for (i, item) in items.iter().enumerate() {
                let n = i + 1;
                let fields = self.structure(item, "each PriorityClasses item", example)?;
                self.check_keys(fields, &format!("PriorityClasses item {n}"), &CLASS_KEYS)?;
                let (Some(name), Some(weight)) = (find(fields, "Name"), find(fields, "Weight"))
                else {
                    let missing = if find(fields, "Name").is_none() {
                        "Name"
                    } else {
                        "Weight"
                    };
                    return Err(self.err(
                        item.pos,
                        format!("PriorityClasses item {n} has no {missing}; each class needs both, such as {example}"),
                    ));
                };
                let name_text = self.scalar(name)?.to_string();
                let w = self.integer(weight)?;
                let w = i32::try_from(w).map_err(|_| {
                    self.err(
                        weight.value.pos,
                        format!("priority class {name_text:?}: weight {w} is out of range 0..=100"),
                    )
                })?;
                policy.priority_classes.push(PriorityClass {
                    name: name_text,
                    weight: w,
                });
                class_pos.push((item.pos, name.value.pos, weight.value.pos));
            }
        }
        if let Some(f) = find(top, "FairShare") {
            policy.fair_share = self.choice(f, &on_off)?;
        }
        if let Some(f) = find(top, "IdleResourceSharing") {
            policy.idle_resource_sharing = self.choice(f, &on_off)?;
        }
        policy.validate().map_err(|e| {
            let classes = &policy.priority_classes;
            let at = |i: Option<usize>, which: fn(&(usize, usize, usize)) -> usize| {
                i.and_then(|i| class_pos.get(i)).map_or(classes_pos, which)
            };
            let pos = match &e {
                PolicyError::TooManyClasses(_) => {
                    at(Some(crate::policy::MAX_PRIORITY_CLASSES), |p| p.0)
                }
                PolicyError::Weight { name, weight } => at(
                    classes
                        .iter()
                        .position(|c| &c.name == name && c.weight == *weight),
                    |p| p.2,
                ),
                PolicyError::Name(name) => {
                    at(classes.iter().position(|c| &c.name == name), |p| p.1)
                }
                PolicyError::Duplicate(name) => at(
                    classes
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| &c.name == name)
                        .nth(1)
                        .map(|(i, _)| i),
                    |p| p.1,
                ),
                PolicyError::Strategies(_)
                | PolicyError::UnknownClass { .. }
                | PolicyError::MinimumRunTime(_)
                | PolicyError::PreemptionBudget(_) => 0,
            };
            self.err(pos, e.to_string())
        })?;
        Ok(policy)
    }
}

/// Parses the shorthand of `--scheduler-config`, e.g.
/// `PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=70}],FairShare=Enabled`,
/// into a validated [`ClusterPolicy`] (starting from `ClusterPolicy::default()`: FairShare
/// Enabled, IdleResourceSharing Disabled, no priority classes). At most 10 classes, weights
/// 0..=100, names DNS labels, each once.
pub fn parse_scheduler_config(s: &str) -> Result<ClusterPolicy, ShorthandError> {
    let tree = parse_structure(s)?;
    Reader { input: s }.scheduler_config(&tree)
}

/// Parses `--compute-quota-target` (`TeamName=team-a,FairShareWeight=10`, or JSON) into the
/// team and its fair-share weight (0..=100, default 0). `UserProfileName` is accepted and
/// not used (allot has no Studio user profiles).
pub fn parse_target(s: &str) -> Result<(String, u32), ShorthandError> {
    let tree = parse_structure(s)?;
    let r = Reader { input: s };
    r.check_keys(
        &tree,
        "the compute quota target",
        &["TeamName", "FairShareWeight", "UserProfileName"],
    )?;
    let team = find(&tree, "TeamName").ok_or_else(|| {
        r.err(
            0,
            "missing TeamName (required by the API model); such as TeamName=team-a,FairShareWeight=10",
        )
    })?;
    let team = r.scalar(team)?.to_string();
    let weight = match find(&tree, "FairShareWeight") {
        Some(f) => r.ranged(f, "FairShareWeight", 0, 100)? as u32,
        None => 0,
    };
    if let Some(f) = find(&tree, "UserProfileName") {
        r.scalar(f)?;
    }
    Ok((team, weight))
}

/// Renders a policy as `--scheduler-config` shorthand ([`parse_scheduler_config`] reads it
/// back; `fair_sharing_strategies` has no shorthand and is not rendered).
pub fn scheduler_config_to_shorthand(policy: &ClusterPolicy) -> String {
    let classes: Vec<String> = policy
        .priority_classes
        .iter()
        .map(|c| format!("{{Name={},Weight={}}}", render_scalar(&c.name), c.weight))
        .collect();
    let mut s = format!(
        "PriorityClasses=[{}],FairShare={}",
        classes.join(","),
        if policy.fair_share {
            "Enabled"
        } else {
            "Disabled"
        }
    );
    if policy.idle_resource_sharing {
        s.push_str(",IdleResourceSharing=Enabled");
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn digits_of_any_script_are_numbers_as_python_reads_them() {
        assert_eq!(super::python_int("٣"), Some(3));
        assert_eq!(super::python_int("１_０"), Some(10));
        assert_eq!(super::python_int("\u{2003}-٣\u{85}"), Some(-3));
        assert_eq!(super::python_int("\u{1c}7"), None);
        assert_eq!(super::python_int("𝟗𝟘"), Some(90));
        assert_eq!(super::python_float("१.५"), Some(1.5));
        assert_eq!(super::python_float("۱e۲"), Some(100.0));
        // Not decimal digits: numerals, superscripts, letters.
        for s in ["Ⅻ", "²", "٣a", "٣_"] {
            assert_eq!(super::python_int(s), None, "{s:?}");
        }
        let cfg = super::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=٣}]",
        )
        .unwrap();
        let plain = super::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=3}]",
        )
        .unwrap();
        assert_eq!(cfg, plain);
    }

    #[test]
    fn key_at_equals_reads_the_value_from_a_file() {
        let d = std::env::temp_dir().join(format!("allot-paramfile-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("type"), "ml.g5.8xlarge").unwrap();
        std::fs::write(d.join("count"), "2\n").unwrap();
        super::read_param_files_with(|s| {
            let p = s
                .strip_prefix("file://")
                .or_else(|| s.strip_prefix("fileb://"))
                .unwrap_or(s);
            std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))
        });
        let (t, c) = (
            d.join("type").display().to_string(),
            d.join("count").display().to_string(),
        );
        let cfg = super::ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType@=file://{t},Count@=file://{c}}}],\
             ResourceSharingConfig={{Strategy=Lend}}"
        ))
        .unwrap();
        let plain = super::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],\
             ResourceSharingConfig={Strategy=Lend}",
        )
        .unwrap();
        assert_eq!(cfg, plain);
        // `@=` with a value that names no file keeps the value; a missing file is an error at
        // its position; plain `=` never reads.
        let tree = super::parse_shorthand_tree("A@=x,B=file://nowhere").unwrap();
        assert!(matches!(&tree[0].value.value, super::ShorthandValue::Scalar(v) if v == "x"));
        assert!(
            matches!(&tree[1].value.value, super::ShorthandValue::Scalar(v) if v == "file://nowhere")
        );
        let e = super::parse_shorthand_tree("A@=file:///nonexistent/x").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    use super::*;
    use proptest::prelude::*;

    const GIB: i64 = 1 << 30;
    const G5_SCENARIO: &str = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},PreemptTeamTasks=LowerPriority";
    const P5_DONT_LEND: &str = "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2}],ResourceSharingConfig={Strategy=DontLend}";
    const CLASSES: &str =
        "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=70}],FairShare=Enabled";

    fn quotas(s: &str) -> Vec<FlavorQuota> {
        ComputeQuotaConfig::parse_shorthand(s)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_quotas(Catalog::builtin())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// (resource, nominal, borrowing_limit, lending_limit) of one flavor, in order.
    fn rows(fq: &FlavorQuota) -> Vec<(String, i64, Option<i64>, Option<i64>)> {
        fq.resources
            .iter()
            .map(|(r, q)| (r.to_string(), q.nominal, q.borrowing_limit, q.lending_limit))
            .collect()
    }

    fn nominal(fq: &FlavorQuota, r: &str) -> i64 {
        let name = ResourceName::parse(r).unwrap();
        fq.get(&name)
            .unwrap_or_else(|| panic!("{r} missing in {fq:?}"))
            .nominal
    }

    fn parse_err(s: &str) -> ShorthandError {
        match ComputeQuotaConfig::parse_shorthand(s) {
            Ok(c) => panic!("expected an error for {s:?}, got {c:?}"),
            Err(e) => e,
        }
    }

    fn policy_err(s: &str) -> ShorthandError {
        match parse_scheduler_config(s) {
            Ok(p) => panic!("expected an error for {s:?}, got {p:?}"),
            Err(e) => e,
        }
    }

    fn map_err(s: &str) -> HyperPodError {
        let c = ComputeQuotaConfig::parse_shorthand(s).unwrap_or_else(|e| panic!("{e}"));
        match c.to_quotas(Catalog::builtin()) {
            Ok(q) => panic!("expected an error for {s:?}, got {q:?}"),
            Err(e) => e,
        }
    }

    /// The caret line of an error's Display, checked to sit under byte `pos` of a
    /// single-line ASCII input.
    fn assert_caret(e: &ShorthandError, pos: usize) {
        assert_eq!(e.pos, pos, "{e}");
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1], format!("  {}", e.input), "{text}");
        assert_eq!(lines[2], format!("  {}^", " ".repeat(pos)), "{text}");
        assert!(lines[0].contains(&format!("at byte {pos}")), "{text}");
    }

    // ---- the scenario strings ---------------------------------------------------------------

    #[test]
    fn g5_count_lend_and_borrow_scenario() {
        let c = ComputeQuotaConfig::parse_shorthand(G5_SCENARIO).unwrap();
        assert_eq!(
            c,
            ComputeQuotaConfig {
                resources: vec![ComputeQuotaResource {
                    instance_type: "ml.g5.8xlarge".into(),
                    count: Some(2),
                    ..Default::default()
                }],
                sharing: ResourceSharingConfig {
                    strategy: SharingStrategy::LendAndBorrow,
                    borrow_limit: Some(50),
                    absolute_borrow_limits: vec![],
                },
                preempt_team_tasks: PreemptTeamTasks::LowerPriority,
            }
        );
        let q = c.to_quotas(Catalog::builtin()).unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].flavor, "ml.g5.8xlarge");
        // 2 x (32 vCPU, 128 GiB, 1 GPU, 1 EFA); borrow 50 %.
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 64_000, Some(32_000), None),
                ("efa".into(), 2, Some(1), None),
                ("gpu".into(), 2, Some(1), None),
                ("memory".into(), 256 * GIB, Some(128 * GIB), None),
            ]
        );
        assert_eq!(c.to_shorthand(), G5_SCENARIO);
    }

    #[test]
    fn p5_two_of_eight_gpus_dont_lend_scenario() {
        let q = quotas(P5_DONT_LEND);
        // 2 of 8 GPUs: a quarter of 192 vCPU, 2048 GiB and 32 EFA.
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 48_000, Some(0), Some(0)),
                ("efa".into(), 8, Some(0), Some(0)),
                ("gpu".into(), 2, Some(0), Some(0)),
                ("memory".into(), 512 * GIB, Some(0), Some(0)),
            ]
        );
    }

    #[test]
    fn every_scenario_string_parses_and_maps() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/scenarios");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut seen = 0;
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for line in text.lines() {
                for (key, is_quota) in
                    [("compute_quota: \"", true), ("scheduler_config: \"", false)]
                {
                    let Some(start) = line.find(key) else {
                        continue;
                    };
                    let rest = &line[start + key.len()..];
                    let Some(end) = rest.find('"') else { continue };
                    let s = &rest[..end];
                    seen += 1;
                    if is_quota {
                        quotas(s);
                    } else {
                        parse_scheduler_config(s).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn scheduler_config_scenario() {
        let p = parse_scheduler_config(CLASSES).unwrap();
        assert_eq!(
            p.priority_classes,
            vec![
                PriorityClass {
                    name: "inference".into(),
                    weight: 90
                },
                PriorityClass {
                    name: "training".into(),
                    weight: 70
                },
            ]
        );
        assert!(p.fair_share);
        assert!(!p.idle_resource_sharing);
        assert_eq!(
            p.fair_sharing_strategies,
            ClusterPolicy::default().fair_sharing_strategies
        );
        assert_eq!(scheduler_config_to_shorthand(&p), CLASSES);
    }

    // ---- the ratio rules --------------------------------------------------------------------

    #[test]
    fn vcpu_only_scales_memory_and_efa_no_accelerators() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,VCpu=48}]");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 48_000, Some(24_000), None),
                ("efa".into(), 8, Some(4), None),
                ("gpu".into(), 0, Some(0), None),
                ("memory".into(), 512 * GIB, Some(256 * GIB), None),
            ]
        );
    }

    #[test]
    fn memory_only_scales_vcpu() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,MemoryInGiB=256}]");
        assert_eq!(nominal(&q[0], "cpu"), 24_000);
        assert_eq!(nominal(&q[0], "memory"), 256 * GIB);
        assert_eq!(nominal(&q[0], "gpu"), 0);
        assert_eq!(nominal(&q[0], "efa"), 4);
    }

    #[test]
    fn ratios_round_down_to_base_units() {
        // ml.trn2.3xlarge: 12 vCPU, 128 GiB, 1 Neuron device, 1 EFA.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.trn2.3xlarge,VCpu=1}]");
        assert_eq!(nominal(&q[0], "cpu"), 1000);
        assert_eq!(nominal(&q[0], "memory"), 128 * GIB / 12);
        assert_eq!(nominal(&q[0], "neuron"), 0);
        assert_eq!(nominal(&q[0], "efa"), 0);
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.trn2.3xlarge,MemoryInGiB=1}]");
        assert_eq!(nominal(&q[0], "cpu"), 12_000 / 128); // 93.75 -> 93 millicores
                                                         // Fractional explicit values: 0.5 vCPU = 500m; memory by the exact ratio 0.5/32.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=0.5}]");
        assert_eq!(nominal(&q[0], "cpu"), 500);
        assert_eq!(nominal(&q[0], "memory"), 2 * GIB);
        let q = quotas(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=0.0005,MemoryInGiB=1.5}]",
        );
        assert_eq!(nominal(&q[0], "cpu"), 0);
        assert_eq!(nominal(&q[0], "memory"), 3 * GIB / 2);
        // 1.005 is not exact in binary; it is taken as written.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=1.005}]");
        assert_eq!(nominal(&q[0], "cpu"), 1005);
    }

    #[test]
    fn explicit_values_override_the_ratio() {
        let q =
            quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2,VCpu=10}]");
        assert_eq!(nominal(&q[0], "gpu"), 2);
        assert_eq!(nominal(&q[0], "cpu"), 10_000);
        assert_eq!(nominal(&q[0], "memory"), 512 * GIB);
        assert_eq!(nominal(&q[0], "efa"), 8);
        let q = quotas(
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=4,MemoryInGiB=100}]",
        );
        assert_eq!(nominal(&q[0], "cpu"), 96_000);
        assert_eq!(nominal(&q[0], "memory"), 100 * GIB);
        let q =
            quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,VCpu=8,MemoryInGiB=64}]");
        assert_eq!(nominal(&q[0], "cpu"), 8_000);
        assert_eq!(nominal(&q[0], "memory"), 64 * GIB);
        assert_eq!(nominal(&q[0], "gpu"), 0);
    }

    #[test]
    fn accelerators_above_one_instance_and_neuron() {
        // ml.g5.8xlarge has 1 GPU: 2 accelerators = 2 instances' worth.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Accelerators=2}]");
        assert_eq!(nominal(&q[0], "cpu"), 64_000);
        assert_eq!(nominal(&q[0], "memory"), 256 * GIB);
        // Trainium counts Neuron devices: 4 of 16.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.trn1.32xlarge,Accelerators=4}]");
        assert_eq!(
            rows(&q[0])
                .iter()
                .map(|r| (r.0.as_str(), r.1))
                .collect::<Vec<_>>(),
            vec![
                ("cpu", 32_000),
                ("efa", 2),
                ("memory", 128 * GIB),
                ("neuron", 4)
            ]
        );
    }

    #[test]
    fn cpu_instance_lists_only_cpu_and_memory() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.c5.2xlarge,Count=3},{InstanceType=ml.g5.8xlarge,Count=1}]");
        assert_eq!(q[0].flavor, "ml.c5.2xlarge");
        assert_eq!(q[1].flavor, "ml.g5.8xlarge");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 24_000, Some(12_000), None),
                ("memory".into(), 48 * GIB, Some(24 * GIB), None),
            ]
        );
    }

    // ---- sharing ------------------------------------------------------------------------------

    #[test]
    fn sharing_strategies_set_limits() {
        let base = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]";
        let lend = quotas(&format!("{base},ResourceSharingConfig={{Strategy=Lend}}"));
        assert!(lend[0]
            .resources
            .iter()
            .all(|(_, q)| q.borrowing_limit == Some(0) && q.lending_limit.is_none()));
        let dont = quotas(&format!(
            "{base},ResourceSharingConfig={{Strategy=DontLend}}"
        ));
        assert!(dont[0]
            .resources
            .iter()
            .all(|(_, q)| q.borrowing_limit == Some(0) && q.lending_limit == Some(0)));
        // Default: LendAndBorrow with 50 %; efa 1 * 50 % rounds down to 0.
        let default = quotas(base);
        assert_eq!(
            rows(&default[0]),
            vec![
                ("cpu".into(), 32_000, Some(16_000), None),
                ("efa".into(), 1, Some(0), None),
                ("gpu".into(), 1, Some(0), None),
                ("memory".into(), 128 * GIB, Some(64 * GIB), None),
            ]
        );
        let wide = quotas(&format!(
            "{base},ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=500}}"
        ));
        assert_eq!(
            wide[0].get(&ResourceName::gpu()).unwrap().borrowing_limit,
            Some(5)
        );
        let one = quotas(&format!(
            "{base},ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=1}}"
        ));
        // Strategy is required when ResourceSharingConfig is given (the API model).
        let e = parse_err(&format!("{base},ResourceSharingConfig={{BorrowLimit=1}}"));
        assert!(
            e.message
                .contains("needs Strategy (required by the API model)"),
            "{e}"
        );
        assert_eq!(
            one[0].get(&ResourceName::cpu()).unwrap().borrowing_limit,
            Some(320)
        );
    }

    #[test]
    fn borrow_limit_range_is_enforced() {
        let base = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=";
        // The API model's range, 0..=10000 (its documentation still says 1 to 500).
        for bad in ["10001", "-5", "99999999999"] {
            let s = format!("{base}{bad}}}");
            let e = parse_err(&s);
            assert!(
                e.message
                    .contains(&format!("BorrowLimit {bad} is out of range 0..=10000")),
                "{e}"
            );
            assert_caret(&e, base.len());
        }
        for good in ["0", "501", "10000", "+2"] {
            ComputeQuotaConfig::parse_shorthand(&format!("{base}{good}}}")).unwrap();
        }
        let e = parse_err(&format!("{base}half}}"));
        assert!(
            e.message
                .contains("BorrowLimit \"half\" is not a whole number"),
            "{e}"
        );
    }

    #[test]
    fn borrow_limit_needs_lend_and_borrow() {
        // Accepted, as the API does: a team that does not borrow borrows nothing whatever its
        // limit says.
        for strategy in ["DontLend", "Lend"] {
            let q = quotas(&format!("ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count=1}}],ResourceSharingConfig={{Strategy={strategy},BorrowLimit=50,AbsoluteBorrowLimits=[{{InstanceType=ml.g5.8xlarge,Count=1}}]}}"));
            assert!(
                q[0].resources
                    .iter()
                    .all(|(_, r)| r.borrowing_limit == Some(0)),
                "{q:?}"
            );
        }
    }

    #[test]
    fn absolute_borrow_limits_replace_the_percentage() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2},{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,Accelerators=1,VCpu=10},{InstanceType=ml.g5.8xlarge,MemoryInGiB=1.5}]}");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 48_000, Some(10_000), None),
                ("efa".into(), 8, Some(4), None),
                ("gpu".into(), 2, Some(1), None),
                ("memory".into(), 512 * GIB, Some(256 * GIB), None),
            ]
        );
        assert_eq!(
            rows(&q[1]),
            vec![
                ("cpu".into(), 64_000, Some(32_000), None),
                ("efa".into(), 2, Some(1), None),
                ("gpu".into(), 2, Some(1), None),
                ("memory".into(), 256 * GIB, Some(3 * GIB / 2), None),
            ]
        );
        // Count names every resource of n instances.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=4}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.g5.8xlarge,Count=1}]}");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 128_000, Some(32_000), None),
                ("efa".into(), 4, Some(1), None),
                ("gpu".into(), 4, Some(1), None),
                ("memory".into(), 512 * GIB, Some(128 * GIB), None),
            ]
        );
    }

    #[test]
    fn absolute_borrow_limit_errors() {
        // A type the team has no quota of: it may borrow it, up to the limit, and nothing else
        // of it.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,Accelerators=1}]}");
        assert_eq!(q[1].flavor, "ml.p5.48xlarge");
        assert!(q[1].resources.iter().all(|(_, r)| r.nominal == 0), "{q:?}");
        assert_eq!(
            q[1].get(&ResourceName::gpu()).unwrap().borrowing_limit,
            Some(1)
        );
        assert_eq!(
            q[1].get(&ResourceName::cpu()).unwrap().borrowing_limit,
            Some(0)
        );
        let rows: Vec<String> = (0..16)
            .map(|_| "{InstanceType=ml.g5.8xlarge,Count=1}".to_string())
            .collect();
        let e = parse_err(&format!(
            "ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count=1}}],ResourceSharingConfig={{Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{}]}}",
            rows.join(",")
        ));
        assert!(e.message.contains("at most 15"), "{e}");
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.c5.2xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.c5.2xlarge,Accelerators=1}]}");
        assert!(
            matches!(
                e,
                HyperPodError::NoAccelerators {
                    list: RowList::AbsoluteBorrowLimits,
                    row: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn preemption_policy_follows_preempt_team_tasks() {
        let c = ComputeQuotaConfig::parse_shorthand(G5_SCENARIO).unwrap();
        let p = c.preemption_policy();
        assert_eq!(p.within_team, WithinTeam::LowerPriority);
        assert_eq!(p.reclaim_within_cohort, ReclaimWithinCohort::Any);
        assert_eq!(
            p.borrow_within_cohort.policy,
            BorrowWithinCohortPolicy::LowerPriority
        );
        assert_eq!(p.borrow_within_cohort.max_priority_threshold, None);
        let never = ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],PreemptTeamTasks=Never",
        )
        .unwrap();
        assert_eq!(never.preemption_policy().within_team, WithinTeam::Never);
        assert_eq!(
            never.preemption_policy().reclaim_within_cohort,
            ReclaimWithinCohort::Any
        );
        // Default: LowerPriority.
        let d = ComputeQuotaConfig::parse_shorthand(P5_DONT_LEND).unwrap();
        assert_eq!(d.preemption_policy().within_team, WithinTeam::LowerPriority);
    }

    // ---- row and mapping errors ---------------------------------------------------------------

    #[test]
    fn row_errors_name_the_field() {
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge}]";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("at least one of Count, Accelerators, VCpu or MemoryInGiB"),
            "{e}"
        );
        assert_caret(&e, s.find('{').unwrap());

        // Count with an explicit amount: the explicit one wins, the rest follow Count.
        let q = quotas(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2,VCpu=4,Accelerators=1}]",
        );
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 4_000, Some(2_000), None),
                ("efa".into(), 2, Some(1), None),
                ("gpu".into(), 1, Some(0), None),
                ("memory".into(), 256 * GIB, Some(128 * GIB), None),
            ]
        );

        let s = "ComputeQuotaResources=[{Count=1}]";
        let e = parse_err(s);
        assert!(e.message.contains("has no InstanceType"), "{e}");
        assert_caret(&e, s.find('{').unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1},{InstanceType=ml.g5.8xlarge,Count=2}]";
        let e = parse_err(s);
        assert!(
            e.message.contains("ml.g5.8xlarge twice (rows 1 and 2)"),
            "{e}"
        );
        assert_caret(&e, s.rfind("ml.g5").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=-1}]";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("VCpu -1 is out of range 0..=10000000 (the API model's VCpuAmount)"),
            "{e}"
        );
        assert_caret(&e, s.find("-1").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=-1}]";
        let e = parse_err(s);
        assert!(
            e.message.contains("Count -1 is out of range 0..=10000000"),
            "{e}"
        );
        assert_caret(&e, s.find("-1").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=}]";
        let e = parse_err(s);
        assert!(e.message.contains("expected ',' or '}'"), "{e}");
        for bad in ["two", "2.5", "1e3"] {
            let s = format!("ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count={bad}}}]");
            let e = parse_err(&s);
            assert!(
                e.message.contains("is not a whole number") || e.message.contains("missing value"),
                "{e}"
            );
            assert_eq!(e.pos, s.find("Count=").unwrap() + 6, "{e}");
        }
        let e = parse_err("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=10000001}]");
        assert!(
            e.message
                .contains("out of range 0..=10000000 (the API model's InstanceCount)"),
            "{e}"
        );
        let e = parse_err("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=1.2.3}]");
        assert!(e.message.contains("VCpu \"1.2.3\" is not a number"), "{e}");
        let e =
            parse_err("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,MemoryInGiB=10000001}]");
        assert!(
            e.message
                .contains("MemoryInGiB 10000001 is out of range 0..=10000000"),
            "{e}"
        );
    }

    #[test]
    fn catalog_errors() {
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.x9.huge,Count=1}]");
        let msg = e.to_string();
        assert!(
            msg.contains("ml.x9.huge") && msg.contains("ml.p5, ml.p5e"),
            "{msg}"
        );
        assert!(msg.starts_with("ComputeQuotaResources row 1"), "{msg}");
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.c5.2xlarge,Accelerators=1}]");
        assert!(
            e.to_string().contains("ml.c5.2xlarge has no accelerators"),
            "{e}"
        );
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=10000000}]");
        assert!(matches!(e, HyperPodError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn empty_resources_list_is_allowed() {
        // ComputeQuotaResources is optional in the API model: no rows, no quota of its own.
        for s in ["ComputeQuotaResources=[]", "PreemptTeamTasks=Never"] {
            let c = ComputeQuotaConfig::parse_shorthand(s).unwrap();
            assert!(c.to_quotas(Catalog::builtin()).unwrap().is_empty(), "{s}");
        }
    }

    // ---- syntax errors and positions ----------------------------------------------------------

    #[test]
    fn unknown_keys_list_what_is_accepted() {
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=Lend,Foo=1}";
        let e = parse_err(s);
        assert_eq!(
            e.message,
            "unknown key \"Foo\" in ResourceSharingConfig; expected Strategy, BorrowLimit, AbsoluteBorrowLimits"
        );
        assert_caret(&e, s.find("Foo").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,count=1}]";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("unknown key \"count\" in ComputeQuotaResources row 1"),
            "{e}"
        );
        assert!(e.message.contains("did you mean Count?"), "{e}");
        assert_caret(&e, s.find("count").unwrap());

        let e = parse_err("ComputeQuotaResources=[],Team=x");
        assert!(
            e.message.contains(
                "expected ComputeQuotaResources, ResourceSharingConfig, PreemptTeamTasks"
            ),
            "{e}"
        );

        let e = parse_err("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=1}}]");
        assert!(e.message.contains("AcceleratorPartition"), "{e}");
        assert!(e.message.contains("not supported"), "{e}");
    }

    #[test]
    fn bad_enum_values_list_the_accepted_ones() {
        let s = "ComputeQuotaResources=[],ResourceSharingConfig={Strategy=LendandBorrow}";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected Lend, DontLend or LendAndBorrow"),
            "{e}"
        );
        assert!(e.message.contains("did you mean LendAndBorrow?"), "{e}");
        assert_caret(&e, s.find("LendandBorrow").unwrap());
        let e = parse_err("ComputeQuotaResources=[],PreemptTeamTasks=Always");
        assert!(e.message.contains("expected Never or LowerPriority"), "{e}");
        let e = policy_err("FairShare=On");
        assert!(
            e.message
                .contains("FairShare \"On\" is not valid; expected Enabled or Disabled"),
            "{e}"
        );
    }

    #[test]
    fn structural_errors_have_positions() {
        // Unbalanced: the caret is at the end, where the closer is missing.
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected ']' to close the '[' at byte 22"),
            "{e}"
        );
        assert_caret(&e, s.len());
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected '}' to close the '{' at byte 23"),
            "{e}"
        );
        assert_caret(&e, s.len());
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]}";
        let e = parse_err(s);
        assert!(e.message.contains("found '}'"), "{e}");
        assert_caret(&e, s.len() - 1);
        // Trailing garbage after a structure.
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}x]";
        let e = parse_err(s);
        assert!(e.message.contains("expected ',' or ']'"), "{e}");
        assert_caret(&e, s.find("x]").unwrap());
        // Trailing comma.
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],";
        let e = parse_err(s);
        assert!(e.message.contains("trailing comma"), "{e}");
        assert_caret(&e, s.len());
        // Duplicate keys: at the top level an error; inside a structure the last one counts,
        // as the AWS CLI reads it.
        let s = "PreemptTeamTasks=Never,PreemptTeamTasks=LowerPriority";
        let e = parse_err(s);
        assert!(
            e.message.contains("duplicate key \"PreemptTeamTasks\""),
            "{e}"
        );
        assert_caret(&e, s.rfind("Preempt").unwrap());
        let c = ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1,Count=2}]",
        )
        .unwrap();
        assert_eq!(c.resources[0].count, Some(2));
        // Missing '=' (':' belongs to keys in the AWS CLI's shorthand).
        let s = "ComputeQuotaResources [] ";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected '=' after key \"ComputeQuotaResources\", found '['"),
            "{e}"
        );
        assert_caret(&e, 22);
        // Wrong shape.
        let s = "ComputeQuotaResources={InstanceType=ml.g5.8xlarge,Count=1}";
        let e = parse_err(s);
        assert!(
            e.message.contains("ComputeQuotaResources must be a list"),
            "{e}"
        );
        assert_caret(&e, 22);
        let s = "ComputeQuotaResources=[ml.g5.8xlarge]";
        let e = parse_err(s);
        assert!(e.message.contains("must be a structure"), "{e}");
        assert_caret(&e, 23);
        // Unterminated quote.
        let s = "ComputeQuotaResources=[{InstanceType=\"ml.g5.8xlarge,Count=1}]";
        let e = parse_err(s);
        assert!(e.message.contains("closing \""), "{e}");
        assert_caret(&e, s.len());
        // JSON errors point into the JSON.
        let s = "{\"ComputeQuotaResources\": [{\"InstanceType\": \"ml.g5.8xlarge\", \"Count\": \"2\"}]}";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("Count takes a whole number, found the string \"2\""),
            "{e}"
        );
        assert_caret(&e, s.find("\"2\"").unwrap());
        let e = parse_err("[1]");
        assert!(e.message.contains("found a list"), "{e}");
        // Deep nesting is refused, not a stack overflow.
        let deep = format!("A={}", "[".repeat(10_000));
        assert!(parse_shorthand_tree(&deep)
            .unwrap_err()
            .message
            .contains("nested"));
    }

    #[test]
    fn display_shows_message_position_and_caret() {
        let e = parse_err("ComputeQuotaResources=[],Bad=1");
        assert_eq!(
            e.to_string(),
            "unknown key \"Bad\" in the compute quota config; expected ComputeQuotaResources, ResourceSharingConfig, PreemptTeamTasks (at byte 25, column 26)\n  ComputeQuotaResources=[],Bad=1\n                           ^"
        );
        // Multi-line input (a YAML block scalar): the line of the error, line and column.
        let s = "ComputeQuotaResources=[\n  {InstanceType=ml.g5.8xlarge,Count=1},\n  {InstanceType=ml.g5.8xlarge,Cnt=2}\n]";
        let e = parse_err(s);
        assert_eq!(e.line_and_column(), (3, 31));
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with("(at byte 94, line 3, column 31)"),
            "{text}"
        );
        assert_eq!(lines[1], "    {InstanceType=ml.g5.8xlarge,Cnt=2}");
        assert_eq!(lines[2], format!("  {}^", " ".repeat(30)));
        // Non-ASCII input: the caret counts characters.
        let e = parse_err("ComputeQuotaResources=[{InstanceType=\"é\",Bad=1}]");
        assert_eq!(e.pos, 42); // bytes: 'é' is two
        assert_eq!(e.line_and_column(), (1, 42));
        let text = e.to_string();
        assert!(
            text.ends_with(&format!("\n  {}^", " ".repeat(41))),
            "{text}"
        );
    }

    #[test]
    fn the_aws_json_form_reads_back() {
        for s in [
            G5_SCENARIO,
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2,VCpu=10.5}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,MemoryInGiB=1.5}]},PreemptTeamTasks=Never",
        ] {
            let c = ComputeQuotaConfig::parse_shorthand(s).unwrap();
            let json = c.to_aws_json().to_string();
            assert_eq!(ComputeQuotaConfig::parse_shorthand(&json).unwrap(), c, "{json}");
        }
    }

    #[test]
    fn blanks_and_quotes_are_accepted() {
        let c = ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources = [ { InstanceType = \"ml.g5.8xlarge\" , Count = 2 } ] ,\n ResourceSharingConfig = { Strategy = 'LendAndBorrow', BorrowLimit = 50 } , PreemptTeamTasks = LowerPriority ",
        )
        .unwrap();
        assert_eq!(c, ComputeQuotaConfig::parse_shorthand(G5_SCENARIO).unwrap());
        let t = parse_shorthand_tree(r#"A="x,\"y\"\\",B='',C=[],D={},E=[a, b ,{F=1}]"#).unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(t[0].value.value, ShorthandValue::Scalar("x,\"y\"\\".into()));
        assert_eq!(t[1].value.value, ShorthandValue::Scalar(String::new()));
        assert_eq!(t[2].value.value, ShorthandValue::List(vec![]));
        assert_eq!(t[3].value.value, ShorthandValue::Struct(vec![]));
        let ShorthandValue::List(items) = &t[4].value.value else {
            panic!("{t:?}")
        };
        assert_eq!(items[0].value, ShorthandValue::Scalar("a".into()));
        assert_eq!(items[1].value, ShorthandValue::Scalar("b".into()));
        assert_eq!(items[2].pos, 38);
        assert_eq!(render_scalar("x,\"y\"\\"), r#""x,\"y\"\\""#);
    }

    // ---- scheduler config -----------------------------------------------------------------

    #[test]
    fn scheduler_config_options() {
        // An empty argument is not shorthand (nor to the AWS CLI): at least one key.
        assert!(parse_scheduler_config("").is_err());
        assert_eq!(
            parse_scheduler_config("FairShare=Enabled").unwrap(),
            ClusterPolicy::default()
        );
        let p = parse_scheduler_config("FairShare=Disabled,IdleResourceSharing=Enabled").unwrap();
        assert!(!p.fair_share && p.idle_resource_sharing && p.priority_classes.is_empty());
        assert_eq!(
            scheduler_config_to_shorthand(&p),
            "PriorityClasses=[],FairShare=Disabled,IdleResourceSharing=Enabled"
        );
        let p = parse_scheduler_config("PriorityClasses=[{Name=a,Weight=0},{Weight=100,Name=b}]")
            .unwrap();
        assert_eq!(p.priority_classes[1].weight, 100);
    }

    #[test]
    fn scheduler_config_limits() {
        let classes: Vec<String> = (0..11)
            .map(|i| format!("{{Name=c{i},Weight={i}}}"))
            .collect();
        let s = format!("PriorityClasses=[{}]", classes.join(","));
        let e = policy_err(&s);
        assert!(
            e.message.contains("11 priority classes given; at most 10"),
            "{e}"
        );
        assert_caret(&e, s.find("{Name=c10").unwrap());
        let ten = format!("PriorityClasses=[{}]", classes[..10].join(","));
        assert_eq!(
            parse_scheduler_config(&ten).unwrap().priority_classes.len(),
            10
        );

        let s = "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=101}]";
        let e = policy_err(s);
        assert!(
            e.message
                .contains("\"training\": weight 101 is out of range 0..=100"),
            "{e}"
        );
        assert_caret(&e, s.find("101").unwrap());
        let e = policy_err("PriorityClasses=[{Name=x,Weight=-1}]");
        assert!(e.message.contains("weight -1 is out of range"), "{e}");
        let e = policy_err("PriorityClasses=[{Name=x,Weight=99999999999}]");
        assert!(e.message.contains("out of range 0..=100"), "{e}");

        let s = "PriorityClasses=[{Name=a,Weight=1},{Name=a,Weight=2}]";
        let e = policy_err(s);
        assert!(e.message.contains("defined twice"), "{e}");
        assert_caret(&e, s.rfind("a,").unwrap());
        let s = "PriorityClasses=[{Name=Big_Name,Weight=1}]";
        let e = policy_err(s);
        assert!(e.message.contains("Big_Name"), "{e}");
        assert_caret(&e, s.find("Big").unwrap());
        let s = "PriorityClasses=[{Name=a}]";
        let e = policy_err(s);
        assert!(e.message.contains("has no Weight"), "{e}");
        assert_caret(&e, 17);
        let s = "PriorityClasses=[{Name=a,Weight=1,Priority=3}]";
        let e = policy_err(s);
        assert_eq!(
            e.message,
            "unknown key \"Priority\" in PriorityClasses item 1; expected Name, Weight"
        );
        let e = policy_err("FairShare=Enabled,Fairshare=Enabled");
        assert!(e.message.contains("did you mean FairShare?"), "{e}");
    }

    // ---- the structured form ------------------------------------------------------------------

    #[test]
    fn structured_form_maps_like_the_shorthand() {
        let json = r#"{"resources": [{"instance_type": "ml.p5.48xlarge", "accelerators": 2}],
                       "sharing": {"strategy": "DontLend"}}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        assert_eq!(
            c,
            ComputeQuotaConfig::parse_shorthand(P5_DONT_LEND).unwrap()
        );
        assert_eq!(
            c.to_quotas(Catalog::builtin()).unwrap(),
            quotas(P5_DONT_LEND)
        );

        let json = r#"{"resources": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
                       "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 10001}}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e, HyperPodError::BorrowLimitRange { value: 10001 });
        assert_eq!(c.to_quotas(Catalog::builtin()).unwrap_err(), e);

        let json = r#"{"resources": [{"instance_type": "", "count": 1}]}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("InstanceType is missing"));

        let json = r#"{"resources": [{"instance_type": "ml.g5.8xlarge", "vcpu": 4, "memory_in_gib": 16}],
                       "sharing": {"absolute_borrow_limits": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]},
                       "preempt_team_tasks": "Never"}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        let q = c.to_quotas(Catalog::builtin()).unwrap();
        assert_eq!(
            q[0].get(&ResourceName::gpu()).unwrap().borrowing_limit,
            Some(1)
        );
        assert_eq!(
            q[0].get(&ResourceName::cpu()).unwrap().borrowing_limit,
            Some(2000)
        );
        assert_eq!(
            ComputeQuotaConfig::parse_shorthand(&c.to_shorthand()).unwrap(),
            c
        );

        let c = ComputeQuotaConfig {
            resources: vec![ComputeQuotaResource {
                instance_type: "ml.g5.8xlarge".into(),
                vcpu: Some(f64::NAN),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(HyperPodError::BadAmount {
                field: RowField::VCpu,
                ..
            })
        ));
    }

    // ---- properties -----------------------------------------------------------------------

    fn arb_amounts() -> impl Strategy<Value = ComputeQuotaResource> {
        prop_oneof![
            (0u32..1000).prop_map(|n| ComputeQuotaResource {
                count: Some(n),
                ..Default::default()
            }),
            (
                proptest::option::of(0u32..64),
                proptest::option::of(0.0f64..10_000.0),
                proptest::option::of(0.0f64..100_000.0),
            )
                .prop_filter("one amount", |(a, v, m)| a.is_some()
                    || v.is_some()
                    || m.is_some())
                .prop_map(|(accelerators, vcpu, memory_in_gib)| ComputeQuotaResource {
                    accelerators,
                    vcpu,
                    memory_in_gib,
                    ..Default::default()
                }),
        ]
    }

    fn arb_rows(types: Vec<String>) -> impl Strategy<Value = Vec<ComputeQuotaResource>> {
        let n = types.len();
        proptest::collection::vec(arb_amounts(), n).prop_map(move |rows| {
            rows.into_iter()
                .zip(types.iter())
                .map(|(r, t)| ComputeQuotaResource {
                    instance_type: t.clone(),
                    ..r
                })
                .collect()
        })
    }

    fn arb_config() -> impl Strategy<Value = ComputeQuotaConfig> {
        // Types a quota may name before a node of the type registers.
        let c = Catalog::builtin();
        let names: Vec<String> = c
            .names()
            .filter(|n| c.get_for_quota(n).is_ok())
            .map(String::from)
            .collect();
        proptest::sample::subsequence(names, 0..5)
            .prop_flat_map(|types| {
                let abs_types = proptest::sample::subsequence(types.clone(), 0..=types.len())
                    .prop_flat_map(arb_rows);
                (
                    arb_rows(types),
                    prop_oneof![
                        Just(SharingStrategy::Lend),
                        Just(SharingStrategy::DontLend),
                        Just(SharingStrategy::LendAndBorrow)
                    ],
                    proptest::option::of(1u32..=500),
                    abs_types,
                    any::<bool>(),
                )
            })
            .prop_map(|(resources, strategy, borrow_limit, abs, never)| {
                let lab = strategy == SharingStrategy::LendAndBorrow;
                ComputeQuotaConfig {
                    resources,
                    sharing: ResourceSharingConfig {
                        strategy,
                        borrow_limit: borrow_limit.filter(|_| lab),
                        absolute_borrow_limits: if lab { abs } else { vec![] },
                    },
                    preempt_team_tasks: if never {
                        PreemptTeamTasks::Never
                    } else {
                        PreemptTeamTasks::LowerPriority
                    },
                }
            })
    }

    fn check_error(s: &str, e: &ShorthandError) {
        assert!(e.pos <= s.len(), "{e:?}");
        assert!(s.is_char_boundary(e.pos), "{e:?}");
        assert!(e.to_string().contains('^'));
        let _ = e.line_and_column();
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_arbitrary_strings(s in any::<String>()) {
            for r in [
                ComputeQuotaConfig::parse_shorthand(&s).map(|_| ()),
                parse_scheduler_config(&s).map(|_| ()),
            ] {
                if let Err(e) = r {
                    check_error(&s, &e);
                }
            }
        }

        #[test]
        fn parsers_never_panic_on_shorthand_like_strings(
            s in "[A-Za-z0-9=,{}\\[\\] .\"'\\\\\\-é\n]{0,80}"
        ) {
            for r in [
                ComputeQuotaConfig::parse_shorthand(&s).map(|_| ()),
                parse_scheduler_config(&s).map(|_| ()),
                parse_shorthand_tree(&s).map(|_| ()),
            ] {
                if let Err(e) = r {
                    check_error(&s, &e);
                }
            }
        }

        #[test]
        fn valid_configs_round_trip_and_map(c in arb_config(), cut in any::<prop::sample::Index>(), junk in any::<char>()) {
            let s = c.to_shorthand();
            let back = ComputeQuotaConfig::parse_shorthand(&s)
                .unwrap_or_else(|e| panic!("{e}"));
            prop_assert_eq!(&back, &c);
            let accel_on_cpu_type = c
                .resources
                .iter()
                .chain(c.sharing.absolute_borrow_limits.iter())
                .any(|r| {
                    r.accelerators.is_some()
                        && Catalog::builtin()
                            .get(&r.instance_type)
                            .map(|t| t.accelerators() == 0)
                            .unwrap_or(false)
                });
            match c.to_quotas(Catalog::builtin()) {
                Ok(q) => {
                    prop_assert!(!accel_on_cpu_type);
                    prop_assert_eq!(q.len(), c.resources.len());
                    for (fq, row) in q.iter().zip(&c.resources) {
                        prop_assert_eq!(&fq.flavor, &row.instance_type);
                        let names: Vec<&ResourceName> = fq.resources.iter().map(|(r, _)| r).collect();
                        let mut sorted = names.clone();
                        sorted.sort();
                        prop_assert_eq!(names, sorted);
                        for (_, rq) in &fq.resources {
                            prop_assert!(rq.nominal >= 0);
                            prop_assert!(rq.borrowing_limit.unwrap_or(0) >= 0);
                        }
                    }
                }
                Err(e) => prop_assert!(
                    accel_on_cpu_type && matches!(e, HyperPodError::NoAccelerators { .. }),
                    "{}", e
                ),
            }
            // Mutations of a valid string never panic.
            let i = cut.index(s.len() + 1);
            let mut mutated = s.clone();
            mutated.insert(i, junk);
            if let Err(e) = ComputeQuotaConfig::parse_shorthand(&mutated) {
                check_error(&mutated, &e);
            }
            if let Err(e) = ComputeQuotaConfig::parse_shorthand(&s[..i]) {
                check_error(&s[..i], &e);
            }
        }

        #[test]
        fn scheduler_configs_round_trip(
            names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}[a-z0-9]", 0..=10),
            weights in proptest::collection::vec(0i32..=100, 10),
            fair in any::<bool>(),
            idle in any::<bool>(),
        ) {
            let p = ClusterPolicy {
                priority_classes: names
                    .into_iter()
                    .zip(weights)
                    .map(|(name, weight)| PriorityClass { name, weight })
                    .collect(),
                fair_share: fair,
                idle_resource_sharing: idle,
                ..ClusterPolicy::default()
            };
            let s = scheduler_config_to_shorthand(&p);
            prop_assert_eq!(parse_scheduler_config(&s).unwrap_or_else(|e| panic!("{e}")), p);
        }
    }
}

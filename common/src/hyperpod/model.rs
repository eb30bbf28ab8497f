//! The model of the AWS task-governance inputs: compute quota rows, sharing, preemption,
//! their limits, and the errors that name a bad value.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::catalog::UnknownInstanceType;

/// One `ComputeQuotaResources` row (or one `AbsoluteBorrowLimits` row).
///
/// Encoded in two layouts (`crate::layout`): without `accelerator_partition` for the formats
/// and protocols from before GPU partitions, with it from then on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComputeQuotaResource {
    pub instance_type: String,
    pub count: Option<u32>,
    pub accelerators: Option<u32>,
    pub vcpu: Option<f64>,
    pub memory_in_gib: Option<f64>,
    /// `AcceleratorPartition`: partitions of the instance type's GPUs of one MIG profile.
    pub accelerator_partition: Option<AcceleratorPartitionConfig>,
}

/// `AcceleratorPartition={Type=mig-1g.10gb,Count=3}`: that many GPU partitions of that
/// profile (`crate::mig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorPartitionConfig {
    /// The MIG profile (`Type`), such as `mig-1g.10gb`.
    pub profile: String,
    pub count: u32,
}

/// The row as written from layout 1 on (and in every human-readable form).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "ComputeQuotaResource")]
struct RowNow {
    instance_type: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    accelerators: Option<u32>,
    #[serde(default)]
    vcpu: Option<f64>,
    #[serde(default)]
    memory_in_gib: Option<f64>,
    #[serde(default)]
    accelerator_partition: Option<AcceleratorPartitionConfig>,
}

/// The row as layout 0 wrote it: before GPU partitions.
#[derive(Serialize, Deserialize)]
#[serde(rename = "ComputeQuotaResource")]
struct RowBefore {
    instance_type: String,
    count: Option<u32>,
    accelerators: Option<u32>,
    vcpu: Option<f64>,
    memory_in_gib: Option<f64>,
}

impl Serialize for ComputeQuotaResource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.clone();
        if s.is_human_readable() || crate::layout::current() >= crate::layout::PARTITIONS {
            return RowNow {
                instance_type: r.instance_type,
                count: r.count,
                accelerators: r.accelerators,
                vcpu: r.vcpu,
                memory_in_gib: r.memory_in_gib,
                accelerator_partition: r.accelerator_partition,
            }
            .serialize(s);
        }
        if r.accelerator_partition.is_some() {
            return Err(serde::ser::Error::custom(
                "a compute quota with AcceleratorPartition cannot be written for a release \
                 before GPU partitions (cluster format 4, request protocol 4)",
            ));
        }
        RowBefore {
            instance_type: r.instance_type,
            count: r.count,
            accelerators: r.accelerators,
            vcpu: r.vcpu,
            memory_in_gib: r.memory_in_gib,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ComputeQuotaResource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() || crate::layout::current() >= crate::layout::PARTITIONS {
            let r = RowNow::deserialize(d)?;
            return Ok(ComputeQuotaResource {
                instance_type: r.instance_type,
                count: r.count,
                accelerators: r.accelerators,
                vcpu: r.vcpu,
                memory_in_gib: r.memory_in_gib,
                accelerator_partition: r.accelerator_partition,
            });
        }
        let r = RowBefore::deserialize(d)?;
        Ok(ComputeQuotaResource {
            instance_type: r.instance_type,
            count: r.count,
            accelerators: r.accelerators,
            vcpu: r.vcpu,
            memory_in_gib: r.memory_in_gib,
            accelerator_partition: None,
        })
    }
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
pub(super) const MAX_QUANTITY: i128 = crate::resource::MAX_QUANTITY as i128;

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
    AcceleratorPartition,
}

impl fmt::Display for RowField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowField::InstanceType => "InstanceType",
            RowField::Count => "Count",
            RowField::Accelerators => "Accelerators",
            RowField::VCpu => "VCpu",
            RowField::MemoryInGiB => "MemoryInGiB",
            RowField::AcceleratorPartition => "AcceleratorPartition",
        })
    }
}

/// A compute allocation that cannot be turned into quotas. Rows are numbered from 1.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HyperPodError {
    #[error("{list} row {row}: InstanceType is missing or empty; name an instance type such as ml.g5.8xlarge")]
    EmptyInstanceType { list: RowList, row: usize },
    #[error("{list} row {row} ({instance_type}): give at least one of Count, Accelerators, VCpu, MemoryInGiB or AcceleratorPartition (AWS's task-governance Terraform module requires one; a row without an amount allocates nothing)")]
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
    #[error("{list} row {row} ({instance_type}): AcceleratorPartition: {why}")]
    BadPartition {
        list: RowList,
        row: usize,
        instance_type: String,
        why: String,
    },
    #[error("BorrowLimit {value} is out of range 0..=10000 (the API model's BorrowLimit: percent of the nominal quota the team may borrow on top of it; default 50)")]
    BorrowLimitRange { value: i64 },
}

// ---------------------------------------------------------------------------------------------
// Validation and mapping
// ---------------------------------------------------------------------------------------------

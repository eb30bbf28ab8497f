//! A compute quota config checked against the API's limits and mapped onto per-flavor
//! quotas and a preemption policy (scheduling.md §2), and its shorthand and JSON renderings.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::catalog::{Catalog, InstanceType};
use crate::quota::{
    BorrowWithinCohort, BorrowWithinCohortPolicy, FlavorQuota, PreemptionPolicy,
    ReclaimWithinCohort, ResourceQuota, WithinTeam,
};
use crate::resource::ResourceName;

use super::model::*;
use super::reader::*;
use super::shorthand::*;

impl ComputeQuotaConfig {
    /// Whether any row names GPU partitions (`AcceleratorPartition`): such a config needs the
    /// layout that has them (`crate::layout::PARTITIONS`).
    pub fn has_partitions(&self) -> bool {
        self.resources
            .iter()
            .chain(&self.sharing.absolute_borrow_limits)
            .any(|r| r.accelerator_partition.is_some())
    }

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
            if let Some(p) = &r.accelerator_partition {
                m.insert(
                    "AcceleratorPartition".into(),
                    json!({"Type": p.profile, "Count": p.count}),
                );
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
                    // Only LendAndBorrow borrows; the others keep their limit of 0.
                    let lends_and_borrows = self.sharing.strategy == SharingStrategy::LendAndBorrow;
                    if let Some(q) = fq.get_mut(&name) {
                        if lends_and_borrows {
                            q.borrowing_limit = Some(limit);
                        }
                    } else if name.is_partition() && lends_and_borrows {
                        // Partitions the team has no quota of: it may borrow them, up to this.
                        let mut q = self.sharing.quota(0).ok_or_else(|| row.too_large())?;
                        q.borrowing_limit = Some(limit);
                        fq.resources.push((name, q));
                        fq.resources.sort_by(|a, b| a.0.cmp(&b.0));
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

pub(super) fn validate_rows(
    rows: &[ComputeQuotaResource],
    list: RowList,
) -> Result<(), HyperPodError> {
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
            (
                RowField::AcceleratorPartition,
                r.accelerator_partition.is_some(),
            ),
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
pub(super) fn quantity(v: i128) -> Option<i64> {
    if (0..=MAX_QUANTITY).contains(&v) {
        i64::try_from(v).ok()
    } else {
        None
    }
}

/// The exact decimal `m / s` written by a finite `v >= 0` (its shortest round-trip form, at
/// most 18 decimal places, further places dropped).
pub(super) fn exact_decimal(v: f64) -> Option<(i128, i128)> {
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
pub(super) fn mul_div(a: i128, b: i128, d: i128) -> Option<i128> {
    if d <= 0 {
        return None;
    }
    a.checked_mul(b).map(|x| x / d)
}

/// One row being mapped, with its instance type from the catalog.
pub(super) struct RowCtx<'a> {
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
        if let Some(p) = &res.accelerator_partition {
            crate::mig::check_profile(&it.name, &p.profile).map_err(|why| {
                HyperPodError::BadPartition {
                    list,
                    row,
                    instance_type: res.instance_type.clone(),
                    why,
                }
            })?;
        }
        Ok(RowCtx { list, row, res, it })
    }

    /// The row's GPU partitions as a resource and a count, with the fraction of one instance
    /// they stand for: `Count × slices / (GPUs × 7)` (`hyperpod-api.md` §2, the CLI's rule).
    fn partition(&self) -> Option<(ResourceName, u32, (i128, i128))> {
        let p = self.res.accelerator_partition.as_ref()?;
        let name = ResourceName::parse(&p.profile).ok()?;
        let slices = crate::mig::profile(&p.profile)?.slices;
        let share = (
            i128::from(p.count) * i128::from(slices),
            i128::from(self.it.gpu) * i128::from(crate::mig::SLICES_PER_GPU),
        );
        Some((name, p.count, share))
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
        } else if res.accelerator_partition.is_some() {
            (0, 1)
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

        // vCPU and memory not given follow the whole instances and accelerators, plus the
        // partitions' share (unless VCpu or MemoryInGiB set the ratio).
        let partition = self.partition();
        let with_partitions = |per: i128| match &partition {
            Some((_, _, (pn, pd))) if res.vcpu.is_none() && res.memory_in_gib.is_none() => {
                let whole = ratio(per)?;
                Some(whole + if *pd == 0 { 0 } else { mul_div(per, *pn, *pd)? })
            }
            _ => ratio(per),
        };
        let mut out = BTreeMap::new();
        let cpu = self
            .explicit_cpu()
            .unwrap_or_else(|| with_partitions(cpu_per));
        self.put(&mut out, ResourceName::cpu(), cpu)?;
        let memory = self
            .explicit_memory()
            .unwrap_or_else(|| with_partitions(mem_per));
        self.put(&mut out, ResourceName::memory(), memory)?;
        if let Some((name, count, _)) = partition {
            self.put(&mut out, name, Some(i128::from(count)))?;
        }
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
            if let Some((name, count, _)) = self.partition() {
                self.put(&mut out, name, Some(i128::from(count)))?;
            }
            return Ok(out);
        }
        if let (Some(a), Some(name)) = (res.accelerators, it.accelerator_resource()) {
            self.put(&mut out, name, Some(i128::from(a)))?;
        }
        if let Some((name, count, _)) = self.partition() {
            self.put(&mut out, name, Some(i128::from(count)))?;
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

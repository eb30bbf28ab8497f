//! Reading a parsed tree into the model: `--compute-quota-config`, `--scheduler-config`,
//! `--compute-quota-target`, with the offending field's position in every error.

use crate::policy::{ClusterPolicy, PolicyError, PriorityClass};

use super::model::*;
use super::shorthand::*;

// ---------------------------------------------------------------------------------------------
// From the tree to the typed configs
// ---------------------------------------------------------------------------------------------

pub(super) const TOP_KEYS: [&str; 3] = [
    "ComputeQuotaResources",
    "ResourceSharingConfig",
    "PreemptTeamTasks",
];
pub(super) const ROW_KEYS: [&str; 6] = [
    "InstanceType",
    "Count",
    "Accelerators",
    "VCpu",
    "MemoryInGiB",
    "AcceleratorPartition",
];
pub(super) const PARTITION_KEYS: [&str; 2] = ["Type", "Count"];
pub(super) const PARTITION_EXAMPLE: &str = "{Type=mig-1g.10gb,Count=3}";
pub(super) const SHARING_KEYS: [&str; 3] = ["Strategy", "BorrowLimit", "AbsoluteBorrowLimits"];
pub(super) const SCHEDULER_KEYS: [&str; 3] =
    ["PriorityClasses", "FairShare", "IdleResourceSharing"];
pub(super) const CLASS_KEYS: [&str; 2] = ["Name", "Weight"];
pub(super) const ROW_EXAMPLE: &str = "{InstanceType=ml.g5.8xlarge,Count=1}";

/// Byte offsets of one parsed row, to point errors found by `validate` at the input.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RowPos {
    start: usize,
    instance_type: Option<usize>,
    count: Option<usize>,
    accelerators: Option<usize>,
    vcpu: Option<usize>,
    memory: Option<usize>,
    partition: Option<usize>,
}

impl RowPos {
    fn field(&self, f: RowField) -> usize {
        match f {
            RowField::InstanceType => self.instance_type,
            RowField::Count => self.count,
            RowField::Accelerators => self.accelerators,
            RowField::VCpu => self.vcpu,
            RowField::MemoryInGiB => self.memory,
            RowField::AcceleratorPartition => self.partition,
        }
        .unwrap_or(self.start)
    }
}

#[derive(Debug, Default)]
pub(super) struct QuotaPos {
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
    pub(super) fn locate(&self, e: &HyperPodError) -> usize {
        use HyperPodError as E;
        match e {
            E::EmptyInstanceType { list, row } => {
                self.at(*list, *row, Some(RowField::InstanceType))
            }
            E::NoAmount { list, row, .. }
            | E::UnknownInstanceType { list, row, .. }
            | E::TooLarge { list, row, .. } => self.at(*list, *row, None),
            E::BadPartition { list, row, .. } => {
                self.at(*list, *row, Some(RowField::AcceleratorPartition))
            }
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

pub(super) fn join_or(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

pub(super) fn describe_node(n: &ShorthandNode) -> String {
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

pub(super) fn find<'n>(fields: &'n [ShorthandField], key: &str) -> Option<&'n ShorthandField> {
    fields.iter().find(|f| f.key == key)
}

/// Reads the typed configs out of a parsed tree, with errors pointing into `input`.
pub(super) struct Reader<'a> {
    pub(super) input: &'a str,
}

impl Reader<'_> {
    pub(super) fn err(&self, pos: usize, msg: impl Into<String>) -> ShorthandError {
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
            let msg = if let Some(m) = allowed.iter().find(|a| a.eq_ignore_ascii_case(&f.key)) {
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

    pub(super) fn compute_quota(
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
        if let Some(f) = find(fields, "AcceleratorPartition") {
            pos.partition = Some(f.value.pos);
            row.accelerator_partition = Some(self.partition(f, list, n)?);
        }
        Ok((row, pos))
    }

    /// `AcceleratorPartition={Type=mig-1g.10gb,Count=3}`: both are required (the API model).
    fn partition(
        &self,
        f: &ShorthandField,
        list: RowList,
        n: usize,
    ) -> Result<AcceleratorPartitionConfig, ShorthandError> {
        let ctx = format!("{list} row {n} AcceleratorPartition");
        let fields = self.structure(&f.value, &ctx, PARTITION_EXAMPLE)?;
        self.check_keys(fields, &ctx, &PARTITION_KEYS)?;
        let (Some(ty), Some(count)) = (find(fields, "Type"), find(fields, "Count")) else {
            return Err(self.err(
                f.value.pos,
                format!("{ctx} needs both Type and Count (required by the API model), such as {PARTITION_EXAMPLE}"),
            ));
        };
        let profile = self.scalar(ty)?.to_string();
        if crate::mig::profile(&profile).is_none() {
            return Err(self.err(
                ty.value.pos,
                format!("{ctx}: Type {profile:?} is not a MIG profile; write one such as mig-1g.10gb (mig-<slices>g.<memory>gb; the instance type decides which)"),
            ));
        }
        Ok(AcceleratorPartitionConfig {
            profile,
            count: self.ranged(
                count,
                "AcceleratorPartitionConfigCountInteger",
                0,
                MAX_MODEL_AMOUNT as i64,
            )? as u32,
        })
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

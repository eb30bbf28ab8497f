//! The `allot simulate` scenario format (shared/spec/scenario-format.md): parsing with errors
//! that name the key's path, and conversion to the domain types.

use std::collections::BTreeMap;
use std::fmt;

use allot_common::hyperpod::{parse_scheduler_config, ComputeQuotaConfig};
use allot_common::policy::{PriorityClass, MAX_MINIMUM_RUN_TIME_S};
use allot_common::quota::{
    BorrowWithinCohort, BorrowWithinCohortPolicy, FlavorFungibility, FungibilityPreference,
    PreemptionPolicy, QueueingStrategy, ReclaimWithinCohort, WhenCanBorrow, WhenCanPreempt,
    WithinTeam, DEFAULT_COHORT,
};
use allot_common::workload::MAIN_POD_SET;
use allot_common::{
    Catalog, ClusterPolicy, CohortSpec, FairSharingStrategy, FlavorQuota, PodSet, PriorityRef,
    ResourceGroup, ResourceName, ResourceQuota, Resources, TeamSpec, WorkloadSpec,
};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// A map that keeps the order of its keys as written (flavor order is preference order).
#[derive(Debug, Clone)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, V)> = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, V>()? {
                    if out.iter().any(|(o, _)| *o == k) {
                        return Err(de::Error::custom(format!("key {k:?} is given twice")));
                    }
                    out.push((k, v));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(Vis(std::marker::PhantomData))
    }
}

/// A quantity as written: a number or a string with a suffix.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Qty {
    Num(f64),
    Str(String),
}

impl Qty {
    pub fn resolve(&self, r: &ResourceName) -> Result<i64, String> {
        match self {
            Qty::Num(v) => r.quantity_from_f64(*v),
            Qty::Str(s) => r.parse_quantity(s),
        }
        .map_err(|e| e.to_string())
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Toggle {
    Enabled,
    Disabled,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyIn {
    pub priority_classes: Option<Vec<PriorityClassIn>>,
    pub fair_share: Option<Toggle>,
    pub fair_sharing_strategies: Option<Vec<FairSharingStrategy>>,
    pub idle_resource_sharing: Option<Toggle>,
    pub scheduler_config: Option<String>,
    /// Seconds an admitted workload runs before a fair-sharing or borrowing preemption may
    /// pick it (allot's; default 0 in a scenario file: off).
    pub minimum_run_time: Option<f64>,
    /// Preemptions after which a workload is spared those preemptions (default 0: off).
    pub preemption_budget: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityClassIn {
    pub name: String,
    pub weight: i32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIn {
    pub name: Option<String>,
    pub name_prefix: Option<String>,
    pub count: Option<u32>,
    pub instance_type: String,
    pub resources: Option<OrderedMap<Qty>>,
    /// Level → domain; in a group, `{i}` and `{i/N}` in a domain take the node's index.
    pub topology: Option<OrderedMap<String>>,
}

/// A workload's topology ask: `{required: rack}` or `{preferred: rack}`, with an optional
/// `slice: {level: kubernetes.io/hostname, size: 2}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyIn {
    pub required: Option<String>,
    pub preferred: Option<String>,
    pub slice: Option<SliceIn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceIn {
    pub level: String,
    pub size: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResQuotaIn {
    pub nominal: Qty,
    pub borrowing_limit: Option<Qty>,
    pub lending_limit: Option<Qty>,
}

pub type QuotaIn = OrderedMap<OrderedMap<ResQuotaIn>>;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CohortIn {
    pub name: String,
    #[serde(default)]
    pub parent: Option<String>,
    pub quota: Option<QuotaIn>,
    pub fair_share_weight: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupIn {
    pub covered: Vec<String>,
    pub flavors: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BwcIn {
    pub policy: Option<BorrowWithinCohortPolicy>,
    pub max_priority_threshold: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptionIn {
    pub within_team: Option<WithinTeam>,
    pub reclaim_within_cohort: Option<ReclaimWithinCohort>,
    pub borrow_within_cohort: Option<BwcIn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FungibilityIn {
    pub when_can_borrow: Option<WhenCanBorrow>,
    pub when_can_preempt: Option<WhenCanPreempt>,
    pub preference: Option<FungibilityPreference>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamIn {
    pub name: String,
    /// Absent = the default cohort; null = none.
    #[serde(default = "absent")]
    pub cohort: Value,
    /// A whole number or a decimal (`0.5`, Kueue's weights), 0 to 100, at most 3 places.
    pub fair_share_weight: Option<f64>,
    pub compute_quota: Option<Value>,
    pub quota: Option<QuotaIn>,
    pub resource_groups: Option<Vec<GroupIn>>,
    pub preemption: Option<PreemptionIn>,
    pub queueing: Option<QueueingStrategy>,
    pub flavor_fungibility: Option<FungibilityIn>,
}

fn absent() -> Value {
    Value::String("\u{0}absent".into())
}

/// A workload's priority: a number or a priority class name. Read by hand so that a number
/// out of range says so (an untagged enum said only "did not match any variant").
#[derive(Debug, Clone)]
pub enum PriorityIn {
    Int(i64),
    Name(String),
}

impl<'de> Deserialize<'de> for PriorityIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const RANGE: &str = "a priority class name, or a whole number from -2147483648 to \
                             2147483647";
        impl serde::de::Visitor<'_> for V {
            type Value = PriorityIn;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(RANGE)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PriorityIn, E> {
                Ok(PriorityIn::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PriorityIn, E> {
                i64::try_from(v)
                    .map(PriorityIn::Int)
                    .map_err(|_| E::custom(format!("priority {v} is out of range: use {RANGE}")))
            }
            fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<PriorityIn, E> {
                i64::try_from(v)
                    .map(PriorityIn::Int)
                    .map_err(|_| E::custom(format!("priority {v} is out of range: use {RANGE}")))
            }
            fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<PriorityIn, E> {
                i64::try_from(v)
                    .map(PriorityIn::Int)
                    .map_err(|_| E::custom(format!("priority {v} is out of range: use {RANGE}")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<PriorityIn, E> {
                Err(E::custom(format!(
                    "priority {v} is not a whole number (or is out of range): use {RANGE}"
                )))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PriorityIn, E> {
                Ok(PriorityIn::Name(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSetIn {
    pub name: String,
    #[serde(default = "one")]
    pub count: u32,
    pub min_count: Option<u32>,
    #[serde(default)]
    pub requests: OrderedMap<Qty>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FlavorIn {
    One(String),
    PerResource(OrderedMap<String>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmittedIn {
    pub flavor: FlavorIn,
    pub at: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadIn {
    pub name: String,
    pub team: String,
    pub priority: Option<PriorityIn>,
    pub submit_at: Option<f64>,
    pub duration: Option<f64>,
    pub grace: Option<f64>,
    pub instance_type: Option<String>,
    pub count: Option<u32>,
    pub requests: Option<OrderedMap<Qty>>,
    pub podsets: Option<Vec<PodSetIn>>,
    pub admitted: Option<AdmittedIn>,
    pub topology: Option<TopologyIn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventIn {
    pub at: f64,
    pub cancel: Option<String>,
    pub finish: Option<String>,
    pub node_down: Option<String>,
    pub node_up: Option<String>,
    pub submit: Option<WorkloadIn>,
    pub set_team: Option<TeamIn>,
    pub set_policy: Option<PolicyIn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioIn {
    pub version: u32,
    pub policy: Option<PolicyIn>,
    pub nodes: Option<Vec<NodeIn>>,
    pub cohorts: Option<Vec<CohortIn>>,
    pub teams: Vec<TeamIn>,
    pub workloads: Option<Vec<WorkloadIn>>,
    pub events: Option<Vec<EventIn>>,
    pub until: Option<f64>,
}

/// An invalid scenario: where (a key path such as `teams[1].quota`) and what.
#[derive(Debug, Clone)]
pub struct ScenarioError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.path == "." {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

pub fn err(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError {
        path: path.into(),
        message: message.into(),
    }
}

/// The largest scenario file read, in bytes.
pub const MAX_FILE_BYTES: usize = 512 << 20;
/// The most nodes a scenario may expand to (`count` included): ten times the largest cluster
/// the benchmarks simulate. A 200-byte file asking for 100 million nodes is refused here
/// instead of taking every byte of memory.
pub const MAX_NODES: u64 = 100_000;

/// Parses YAML (or JSON) text into the raw scenario, with the failing key's path on error.
/// The YAML parser's budgets grow with the text (a scenario of 100,000 workloads has millions
/// of nodes), so only what the text itself holds is ever built; its limits on aliases stay
/// as they are, so a small file cannot expand into a large one.
pub fn parse(text: &str) -> Result<ScenarioIn, ScenarioError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(err(
            "",
            format!(
                "the file is {} bytes; at most {MAX_FILE_BYTES} are read",
                text.len()
            ),
        ));
    }
    let sc: ScenarioIn = match serde_json::from_str::<Value>(text) {
        Ok(value) => serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            err(path, e.into_inner().to_string())
        })?,
        // YAML is read straight into the scenario's types, with no tree of values between:
        // for 100,000 workloads the tree cost more than the parsing.
        Err(_) => {
            let scale = text.len().saturating_add(1024);
            let options = serde_saphyr::options! {
                budget: serde_saphyr::budget! {
                    max_events: scale.max(1_000_000),
                    max_nodes: scale.max(250_000),
                    max_total_scalar_bytes: scale.max(64 << 20),
                },
            };
            let mut at = None;
            serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
                serde_path_to_error::deserialize(de).map_err(|e| {
                    at = Some(e.path().to_string());
                    e.into_inner()
                })
            })
            .map_err(|e| {
                // The parser's text says where (line, column, and the lines around it).
                let text = e.to_string();
                let text = text.strip_prefix("error: ").unwrap_or(&text);
                match at.take() {
                    // Where the error is above every key, the text may not be YAML at all.
                    Some(path) if path != "." && !path.is_empty() => err(path, text),
                    _ => err("", format!("not valid YAML or JSON: {text}")),
                }
            })?
        }
    };
    if sc.version != 1 {
        return Err(err(
            "version",
            format!("version {} is not supported; use version: 1", sc.version),
        ));
    }
    if sc.teams.is_empty() {
        return Err(err("teams", "at least one team is required"));
    }
    Ok(sc)
}

pub fn seconds_to_ms(path: &str, s: f64) -> Result<i64, ScenarioError> {
    if !s.is_finite() || s.abs() > 1e12 {
        return Err(err(path, format!("{s} is not a usable time in seconds")));
    }
    Ok((s * 1000.0).round() as i64)
}

fn resources(path: &str, m: &OrderedMap<Qty>) -> Result<Resources, ScenarioError> {
    let mut r = Resources::new();
    for (k, q) in &m.0 {
        let name = ResourceName::parse(k).map_err(|e| err(format!("{path}.{k}"), e.to_string()))?;
        let v = q
            .resolve(&name)
            .map_err(|e| err(format!("{path}.{k}"), e))?;
        if r.0.contains_key(&name) {
            return Err(err(
                format!("{path}.{k}"),
                format!("resource {name} is given twice (aliases count as the same resource)"),
            ));
        }
        r.set(name, v);
    }
    Ok(r)
}

/// A team's `fair_share_weight`: a whole number, or a decimal of at most 3 places (Kueue's
/// weights, such as 0.5), from 0 to 100; `default` when absent.
fn set_weight(
    spec: &mut TeamSpec,
    w: Option<f64>,
    default: u32,
    path: &str,
) -> Result<(), ScenarioError> {
    let (num, den) = weight_ratio(w.unwrap_or(f64::from(default)), path)?;
    spec.fair_share_weight = num / den;
    spec.fair_share_weight_exact = (den != 1).then_some((num, den));
    Ok(())
}

/// A `fair_share_weight` as numerator and denominator in lowest terms: a whole number, or a
/// decimal of at most 3 places, from 0 to 100.
fn weight_ratio(w: f64, path: &str) -> Result<(u32, u32), ScenarioError> {
    let milli = (w * 1000.0).round();
    if !w.is_finite() || !(0.0..=100.0).contains(&w) || (w * 1000.0 - milli).abs() > 1e-6 {
        return Err(err(
            format!("{path}.fair_share_weight"),
            format!(
                "{w} is not a weight from 0 to 100 with at most 3 decimal places (1, 0.5, 2.25)"
            ),
        ));
    }
    let milli = milli as u32;
    Ok(allot_common::quota::lowest_terms((milli, 1000)))
}

fn quota_list(path: &str, q: &QuotaIn) -> Result<Vec<FlavorQuota>, ScenarioError> {
    let mut out = Vec::new();
    for (flavor, res) in &q.0 {
        let mut fq = FlavorQuota {
            flavor: flavor.clone(),
            resources: Vec::new(),
        };
        for (rname, rq) in &res.0 {
            let p = format!("{path}.{flavor}.{rname}");
            let name = ResourceName::parse(rname).map_err(|e| err(&p, e.to_string()))?;
            let conv = |x: &Qty, k: &str| x.resolve(&name).map_err(|e| err(format!("{p}.{k}"), e));
            let quota = ResourceQuota {
                nominal: conv(&rq.nominal, "nominal")?,
                borrowing_limit: rq
                    .borrowing_limit
                    .as_ref()
                    .map(|x| conv(x, "borrowing_limit"))
                    .transpose()?,
                lending_limit: rq
                    .lending_limit
                    .as_ref()
                    .map(|x| conv(x, "lending_limit"))
                    .transpose()?,
            };
            if fq.get(&name).is_some() {
                return Err(err(&p, format!("resource {name} is given twice")));
            }
            fq.resources.push((name, quota));
        }
        fq.resources.sort_by(|a, b| a.0.cmp(&b.0));
        out.push(fq);
    }
    Ok(out)
}

/// Builds the cluster policy: the shorthand `scheduler_config` or the structured keys.
pub fn policy(
    path: &str,
    p: &PolicyIn,
    base: &ClusterPolicy,
) -> Result<ClusterPolicy, ScenarioError> {
    let mut out = match &p.scheduler_config {
        Some(s) => {
            if p.priority_classes.is_some()
                || p.fair_share.is_some()
                || p.idle_resource_sharing.is_some()
            {
                return Err(err(
                    format!("{path}.scheduler_config"),
                    "give either scheduler_config or priority_classes/fair_share/idle_resource_sharing, not both",
                ));
            }
            let mut pol = parse_scheduler_config(s)
                .map_err(|e| err(format!("{path}.scheduler_config"), e.to_string()))?;
            // The AWS shorthand has no stability rules: the base's stay.
            pol.stability = base.stability;
            if let Some(s) = &p.fair_sharing_strategies {
                pol.fair_sharing_strategies = s.clone();
            }
            pol
        }
        None => {
            let mut pol = base.clone();
            if let Some(pcs) = &p.priority_classes {
                pol.priority_classes = pcs
                    .iter()
                    .map(|c| PriorityClass {
                        name: c.name.clone(),
                        weight: c.weight,
                    })
                    .collect();
            }
            if let Some(fs) = p.fair_share {
                pol.fair_share = fs == Toggle::Enabled;
            }
            if let Some(s) = &p.fair_sharing_strategies {
                pol.fair_sharing_strategies = s.clone();
            }
            if let Some(i) = p.idle_resource_sharing {
                pol.idle_resource_sharing = i == Toggle::Enabled;
            }
            pol
        }
    };
    if let Some(m) = p.minimum_run_time {
        let key = format!("{path}.minimum_run_time");
        let ms = seconds_to_ms(&key, m)?;
        if !(0..=i64::from(MAX_MINIMUM_RUN_TIME_S) * 1000).contains(&ms) || ms % 1000 != 0 {
            return Err(err(
                key,
                format!("{m} is not a whole number of seconds in 0..={MAX_MINIMUM_RUN_TIME_S} (0 turns the rule off)"),
            ));
        }
        out.stability.minimum_run_time_s = (ms / 1000) as u32;
    }
    if let Some(b) = p.preemption_budget {
        out.stability.preemption_budget = b;
    }
    out.validate().map_err(|e| err(path, e.to_string()))?;
    if out.fair_sharing_strategies.is_empty() {
        out.fair_sharing_strategies = ClusterPolicy::default().fair_sharing_strategies;
    }
    Ok(out)
}

/// Builds a team from either the HyperPod form (`compute_quota`) or the advanced form (`quota`).
pub fn team(path: &str, t: &TeamIn) -> Result<TeamSpec, ScenarioError> {
    let cohort = match &t.cohort {
        Value::Null => None,
        Value::String(s) if s == "\u{0}absent" => Some(DEFAULT_COHORT.to_string()),
        Value::String(s) => Some(s.clone()),
        other => {
            return Err(err(
                format!("{path}.cohort"),
                format!("expected a cohort name or null, got {other}"),
            ))
        }
    };
    let mut spec = TeamSpec::new(&t.name, Vec::new());
    spec.cohort = cohort;
    match (&t.compute_quota, &t.quota) {
        (Some(_), Some(_)) => {
            return Err(err(
                path,
                "give either compute_quota (HyperPod form) or quota (advanced form), not both",
            ));
        }
        (None, None) => {
            return Err(err(
                path,
                "a team needs compute_quota (HyperPod form) or quota (advanced form)",
            ))
        }
        (Some(cq), None) => {
            let p = format!("{path}.compute_quota");
            let cfg = match cq {
                Value::String(s) => {
                    ComputeQuotaConfig::parse_shorthand(s).map_err(|e| err(&p, e.to_string()))?
                }
                v => serde_path_to_error::deserialize::<_, ComputeQuotaConfig>(v.clone())
                    .map_err(|e| err(format!("{p}.{}", e.path()), e.into_inner().to_string()))?,
            };
            spec.quotas = cfg
                .to_quotas(Catalog::builtin())
                .map_err(|e| err(&p, e.to_string()))?;
            spec.preemption = cfg.preemption_policy();
            set_weight(&mut spec, t.fair_share_weight, 0, path)?;
            if t.preemption.is_some() || t.resource_groups.is_some() {
                return Err(err(path, "preemption and resource_groups belong to the advanced form (quota:); the HyperPod form sets them through compute_quota"));
            }
        }
        (None, Some(q)) => {
            spec.quotas = quota_list(&format!("{path}.quota"), q)?;
            set_weight(&mut spec, t.fair_share_weight, 1, path)?;
            if let Some(groups) = &t.resource_groups {
                let mut gs = Vec::new();
                for (i, g) in groups.iter().enumerate() {
                    let covered = g
                        .covered
                        .iter()
                        .map(|r| {
                            ResourceName::parse(r).map_err(|e| {
                                err(
                                    format!("{path}.resource_groups[{i}].covered"),
                                    e.to_string(),
                                )
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    gs.push(ResourceGroup {
                        covered,
                        flavors: g.flavors.clone(),
                    });
                }
                spec.resource_groups = gs;
            }
            if let Some(p) = &t.preemption {
                let d = PreemptionPolicy::default();
                spec.preemption = PreemptionPolicy {
                    within_team: p.within_team.unwrap_or(d.within_team),
                    reclaim_within_cohort: p
                        .reclaim_within_cohort
                        .unwrap_or(d.reclaim_within_cohort),
                    borrow_within_cohort: match &p.borrow_within_cohort {
                        Some(b) => BorrowWithinCohort {
                            policy: b.policy.unwrap_or(d.borrow_within_cohort.policy),
                            max_priority_threshold: b.max_priority_threshold,
                        },
                        None => d.borrow_within_cohort,
                    },
                };
            }
        }
    }
    if let Some(q) = t.queueing {
        spec.queueing = q;
    }
    if let Some(f) = &t.flavor_fungibility {
        let d = FlavorFungibility::default();
        spec.flavor_fungibility = FlavorFungibility {
            when_can_borrow: f.when_can_borrow.unwrap_or(d.when_can_borrow),
            when_can_preempt: f.when_can_preempt.unwrap_or(d.when_can_preempt),
            preference: f.preference.unwrap_or(d.preference),
        };
        if spec.flavor_fungibility.preference == FungibilityPreference::PreemptionOverBorrowing
            && (spec.flavor_fungibility.when_can_borrow != WhenCanBorrow::TryNextFlavor
                || spec.flavor_fungibility.when_can_preempt != WhenCanPreempt::TryNextFlavor)
        {
            return Err(err(
                format!("{path}.flavor_fungibility.preference"),
                "PreemptionOverBorrowing needs when_can_borrow and when_can_preempt both TryNextFlavor",
            ));
        }
    }
    Ok(spec)
}

pub fn cohort(path: &str, c: &CohortIn) -> Result<CohortSpec, ScenarioError> {
    Ok(CohortSpec {
        name: c.name.clone(),
        parent: c.parent.clone(),
        quotas: match &c.quota {
            Some(q) => quota_list(&format!("{path}.quota"), q)?,
            None => Vec::new(),
        },
        fair_share_weight: c
            .fair_share_weight
            .map(|w| weight_ratio(w, path))
            .transpose()?
            .filter(|w| *w != (1, 1)),
    })
}

/// Builds a workload spec. Priorities written as integers are used as given.
pub fn workload(path: &str, w: &WorkloadIn) -> Result<WorkloadSpec, ScenarioError> {
    let pod_sets = match (&w.podsets, &w.requests) {
        (Some(_), Some(_)) => {
            return Err(err(
                path,
                "give either requests (with count) or podsets, not both",
            ))
        }
        (Some(_), None) if w.count.is_some() => {
            return Err(err(
                format!("{path}.count"),
                "count belongs to each pod set when podsets is given",
            ))
        }
        (Some(ps), None) => ps
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Ok(PodSet {
                    name: p.name.clone(),
                    count: p.count,
                    min_count: p.min_count,
                    requests: resources(&format!("{path}.podsets[{i}].requests"), &p.requests)?,
                })
            })
            .collect::<Result<Vec<_>, ScenarioError>>()?,
        (None, r) => vec![PodSet {
            name: MAIN_POD_SET.to_string(),
            count: w.count.unwrap_or(1),
            min_count: None,
            requests: match r {
                Some(r) => resources(&format!("{path}.requests"), r)?,
                None => Resources::new(),
            },
        }],
    };
    let priority = match &w.priority {
        None => PriorityRef::None,
        Some(PriorityIn::Int(v)) => PriorityRef::Value(i32::try_from(*v).map_err(|_| {
            err(
                format!("{path}.priority"),
                format!("{v} is out of the 32-bit range"),
            )
        })?),
        Some(PriorityIn::Name(n)) => PriorityRef::Class(n.clone()),
    };
    let spec = WorkloadSpec {
        name: w.name.clone(),
        team: w.team.clone(),
        priority,
        instance_type: w.instance_type.clone(),
        labels: match &w.topology {
            Some(t) => topology_labels(&format!("{path}.topology"), t, &pod_sets)?,
            None => Default::default(),
        },
        pod_sets,
        array: None,
    };
    spec.validate().map_err(|e| err(path, e.to_string()))?;
    Ok(spec)
}

/// A workload's `topology:` as the labels that ask it (`allot_common::topology`), checked.
fn topology_labels(
    path: &str,
    t: &TopologyIn,
    pod_sets: &[PodSet],
) -> Result<BTreeMap<String, String>, ScenarioError> {
    use allot_common::topology as topo;
    let mut labels = BTreeMap::new();
    match (&t.required, &t.preferred) {
        (Some(l), None) => labels.insert(topo::REQUIRED_LABEL.to_string(), l.clone()),
        (None, Some(l)) => labels.insert(topo::PREFERRED_LABEL.to_string(), l.clone()),
        _ => {
            return Err(err(
                path,
                "give exactly one of required or preferred (a topology level, such as rack)",
            ))
        }
    };
    if let Some(s) = &t.slice {
        labels.insert(topo::SLICE_LEVEL_LABEL.to_string(), s.level.clone());
        labels.insert(topo::SLICE_SIZE_LABEL.to_string(), s.size.to_string());
    }
    let counts: Vec<u32> = pod_sets.iter().map(|p| p.count).collect();
    topo::ask(&labels, &counts).map_err(|e| err(path, e))?;
    Ok(labels)
}

/// A node of a scenario: name, instance type, capacity and topology.
pub type NodeOut = (
    String,
    String,
    Resources,
    allot_common::topology::NodeTopology,
);

/// Expands node entries (`name_prefix` + `count`) into (name, instance type, capacity, topology).
pub fn nodes(nodes: &[NodeIn]) -> Result<Vec<NodeOut>, ScenarioError> {
    let mut out = Vec::new();
    let mut total: u64 = 0;
    for (i, n) in nodes.iter().enumerate() {
        let path = format!("nodes[{i}]");
        total += u64::from(n.count.unwrap_or(1));
        if total > MAX_NODES {
            return Err(err(
                format!("{path}.count"),
                format!(
                    "{} nodes in all so far ({} here); a scenario may have at most {MAX_NODES}",
                    total,
                    n.count.unwrap_or(1)
                ),
            ));
        }
        let capacity = match &n.resources {
            Some(r) => resources(&format!("{path}.resources"), r)?,
            None => Catalog::builtin()
                .get(&n.instance_type)
                .map_err(|e| err(format!("{path}.instance_type"), e.to_string()))?
                .resources(),
        };
        match (&n.name, &n.name_prefix) {
            (Some(name), None) => {
                if n.count.is_some_and(|c| c != 1) {
                    return Err(err(
                        format!("{path}.count"),
                        "count needs name_prefix instead of name",
                    ));
                }
                let topology = node_topology(&path, n, 0)?;
                out.push((name.clone(), n.instance_type.clone(), capacity, topology));
            }
            (None, Some(prefix)) => {
                let count = n.count.unwrap_or(1);
                for k in 0..count {
                    out.push((
                        format!("{prefix}{k}"),
                        n.instance_type.clone(),
                        capacity.clone(),
                        node_topology(&path, n, u64::from(k))?,
                    ));
                }
            }
            _ => return Err(err(&path, "give exactly one of name or name_prefix")),
        }
    }
    Ok(out)
}

/// The topology of the `i`th node of entry `n`, its templates filled in.
fn node_topology(
    path: &str,
    n: &NodeIn,
    i: u64,
) -> Result<allot_common::topology::NodeTopology, ScenarioError> {
    let mut t = allot_common::topology::NodeTopology::new();
    for (level, template) in n.topology.iter().flat_map(|m| m.0.iter()) {
        let p = format!("{path}.topology.{level}");
        let domain = allot_common::topology::expand(template, i).map_err(|e| err(&p, e))?;
        t.insert(level.clone(), domain);
    }
    allot_common::topology::check_node(&t).map_err(|e| err(format!("{path}.topology"), e))?;
    Ok(t)
}

/// The flavor per resource of an `admitted:` entry.
pub fn admitted_flavors(a: &AdmittedIn) -> BTreeMap<String, String> {
    match &a.flavor {
        FlavorIn::One(f) => BTreeMap::from([("*".to_string(), f.clone())]),
        FlavorIn::PerResource(m) => {
            m.0.iter()
                .map(|(r, f)| {
                    (
                        ResourceName::parse(r)
                            .map(|n| n.to_string())
                            .unwrap_or_else(|_| r.clone()),
                        f.clone(),
                    )
                })
                .collect()
        }
    }
}

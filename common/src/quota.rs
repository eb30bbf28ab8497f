//! Teams, cohorts and their quotas per (flavor, resource), and the per-team policies that
//! govern preemption, queueing and flavor choice.

use serde::{Deserialize, Serialize};

use crate::resource::ResourceName;

/// Name of the cohort every team joins unless it names another.
pub const DEFAULT_COHORT: &str = "shared-pool";

/// Quota of one resource in one flavor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceQuota {
    /// Guaranteed amount.
    pub nominal: i64,
    /// How much more than nominal the team may use from its cohort; `None` = unlimited.
    pub borrowing_limit: Option<i64>,
    /// How much of the nominal the cohort may use; `None` = all of it.
    pub lending_limit: Option<i64>,
}

impl ResourceQuota {
    pub fn nominal(n: i64) -> Self {
        ResourceQuota {
            nominal: n,
            ..Default::default()
        }
    }
}

/// The quotas of one flavor (instance type), resources in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlavorQuota {
    pub flavor: String,
    pub resources: Vec<(ResourceName, ResourceQuota)>,
}

impl FlavorQuota {
    pub fn get(&self, r: &ResourceName) -> Option<&ResourceQuota> {
        self.resources.iter().find(|(n, _)| n == r).map(|(_, q)| q)
    }
    pub fn get_mut(&mut self, r: &ResourceName) -> Option<&mut ResourceQuota> {
        self.resources
            .iter_mut()
            .find(|(n, _)| n == r)
            .map(|(_, q)| q)
    }
}

/// Resources that share one flavor choice, and the flavors to try, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceGroup {
    pub covered: Vec<ResourceName>,
    pub flavors: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum WithinTeam {
    Never,
    #[default]
    LowerPriority,
    LowerOrNewerEqualPriority,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ReclaimWithinCohort {
    Never,
    LowerPriority,
    #[default]
    Any,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum BorrowWithinCohortPolicy {
    Never,
    #[default]
    LowerPriority,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BorrowWithinCohort {
    pub policy: BorrowWithinCohortPolicy,
    /// Only workloads at or below this priority may be preempted while borrowing.
    pub max_priority_threshold: Option<i32>,
}

/// Preemption policy of a team. The defaults are HyperPod's: `LowerPriority` inside the team,
/// reclaim with `Any`, borrow within cohort for `LowerPriority`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PreemptionPolicy {
    pub within_team: WithinTeam,
    pub reclaim_within_cohort: ReclaimWithinCohort,
    pub borrow_within_cohort: BorrowWithinCohort,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum QueueingStrategy {
    #[default]
    BestEffortFIFO,
    StrictFIFO,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum WhenCanBorrow {
    #[default]
    MayStopSearch,
    TryNextFlavor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum WhenCanPreempt {
    MayStopSearch,
    #[default]
    TryNextFlavor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum FungibilityPreference {
    #[default]
    BorrowingOverPreemption,
    PreemptionOverBorrowing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FlavorFungibility {
    pub when_can_borrow: WhenCanBorrow,
    pub when_can_preempt: WhenCanPreempt,
    pub preference: FungibilityPreference,
}

/// A team (Kueue: a ClusterQueue) and its compute allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamSpec {
    pub name: String,
    /// `None` = no cohort: no lending or borrowing.
    pub cohort: Option<String>,
    /// 0..=100 in the HyperPod form; 0 = borrows last and is reclaimed first.
    pub fair_share_weight: u32,
    /// A weight that is not a whole number (Kueue's `0.5`), as numerator and denominator;
    /// then `fair_share_weight` is its whole part, for display. Only `allot simulate` sets it
    /// (the API's weights are whole numbers), so it is not stored.
    #[serde(skip)]
    pub fair_share_weight_exact: Option<(u32, u32)>,
    /// Quota per flavor, in the order flavors are preferred by default.
    pub quotas: Vec<FlavorQuota>,
    /// Empty = one group covering every resource, flavors in quota order.
    pub resource_groups: Vec<ResourceGroup>,
    pub preemption: PreemptionPolicy,
    pub queueing: QueueingStrategy,
    pub flavor_fungibility: FlavorFungibility,
}

impl TeamSpec {
    /// The fair-share weight as numerator and denominator.
    pub fn weight_ratio(&self) -> (u32, u32) {
        self.fair_share_weight_exact
            .unwrap_or((self.fair_share_weight, 1))
    }

    /// A team in the default cohort with HyperPod defaults and the given quotas.
    pub fn new(name: &str, quotas: Vec<FlavorQuota>) -> Self {
        TeamSpec {
            name: name.to_string(),
            cohort: Some(DEFAULT_COHORT.to_string()),
            fair_share_weight: 0,
            fair_share_weight_exact: None,
            quotas,
            resource_groups: Vec::new(),
            preemption: PreemptionPolicy::default(),
            queueing: QueueingStrategy::default(),
            flavor_fungibility: FlavorFungibility::default(),
        }
    }

    /// The effective resource groups: the given ones, or one group covering every resource of
    /// the quotas with flavors in quota order.
    pub fn effective_resource_groups(&self) -> Vec<ResourceGroup> {
        if !self.resource_groups.is_empty() {
            return self.resource_groups.clone();
        }
        let mut covered: Vec<ResourceName> = Vec::new();
        for fq in &self.quotas {
            for (r, _) in &fq.resources {
                if !covered.contains(r) {
                    covered.push(r.clone());
                }
            }
        }
        covered.sort();
        vec![ResourceGroup {
            covered,
            flavors: self.quotas.iter().map(|f| f.flavor.clone()).collect(),
        }]
    }
}

/// A fair-share weight as numerator and denominator in lowest terms (`(0, 1)` for 0), so that
/// equal weights compare equal.
pub fn lowest_terms((num, den): (u32, u32)) -> (u32, u32) {
    let g = gcd(num, den.max(1));
    (num / g, den.max(1) / g)
}

/// A weight as numerator and denominator written as a decimal: `(1, 2)` is `0.5`, `(9, 4)`
/// `2.25`, `(1, 3)` `0.333` (at most 3 places, as the CLI and scenarios take them).
pub fn weight_text((num, den): (u32, u32)) -> String {
    let den = u64::from(den.max(1));
    let thousandths = (u64::from(num) * 1000 + den / 2) / den;
    let (whole, frac) = (thousandths / 1000, thousandths % 1000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:03}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

/// A cohort, optionally owning quota that only its teams may borrow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortSpec {
    pub name: String,
    pub parent: Option<String>,
    pub quotas: Vec<FlavorQuota>,
    /// Its fair-share weight against its siblings in a tree, as numerator and denominator;
    /// `None` is 1 (Kueue's default). Not in the spec's encoding (its layout predates it):
    /// a live cluster keeps it beside the spec (`Machine::cohort_weights`, format 8) and
    /// `allot simulate` sets it from the scenario.
    #[serde(skip)]
    pub fair_share_weight: Option<(u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("invalid team name {0:?}: a team name is a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit) of at most 40 characters (the API model's TeamName pattern [a-z0-9]([-a-z0-9]*[a-z0-9]){{0,39}}? is written for 40; HyperPod makes it the Kubernetes namespace hyperpod-ns-<team>)")]
    TeamName(String),
    #[error("invalid cohort name {0:?}: a cohort name is a DNS label of at most 63 characters")]
    CohortName(String),
    #[error("team {team}: fair_share_weight {weight} is out of range 0..=100")]
    Weight { team: String, weight: u32 },
    #[error("{owner}: {what}")]
    Quota { owner: String, what: String },
}

fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Checks a team name: a DNS label of at most 40 characters.
pub fn validate_team_name(name: &str) -> Result<(), SpecError> {
    if is_dns_label(name, 40) {
        Ok(())
    } else {
        Err(SpecError::TeamName(name.to_string()))
    }
}

pub fn validate_cohort_name(name: &str) -> Result<(), SpecError> {
    if is_dns_label(name, 63) {
        Ok(())
    } else {
        Err(SpecError::CohortName(name.to_string()))
    }
}

/// Checks quota values: non-negative, lending limit within nominal, no limits without cohort,
/// each flavor and resource listed once, resource groups consistent with the quotas.
pub fn validate_quotas(
    owner: &str,
    quotas: &[FlavorQuota],
    groups: &[ResourceGroup],
    has_cohort: bool,
) -> Result<(), SpecError> {
    let err = |what: String| SpecError::Quota {
        owner: owner.to_string(),
        what,
    };
    for (i, fq) in quotas.iter().enumerate() {
        if quotas[..i].iter().any(|o| o.flavor == fq.flavor) {
            return Err(err(format!("flavor {} is listed twice", fq.flavor)));
        }
        for (j, (r, q)) in fq.resources.iter().enumerate() {
            if fq.resources[..j].iter().any(|(o, _)| o == r) {
                return Err(err(format!(
                    "resource {r} is listed twice in flavor {}",
                    fq.flavor
                )));
            }
            let at = format!("flavor {} resource {r}", fq.flavor);
            if q.nominal < 0 {
                return Err(err(format!("{at}: nominal {} must be >= 0", q.nominal)));
            }
            if let Some(b) = q.borrowing_limit {
                if b < 0 {
                    return Err(err(format!("{at}: borrowing_limit {b} must be >= 0")));
                }
                if !has_cohort {
                    return Err(err(format!(
                        "{at}: borrowing_limit needs a cohort (the team has none)"
                    )));
                }
            }
            if let Some(l) = q.lending_limit {
                if l < 0 || l > q.nominal {
                    return Err(err(format!(
                        "{at}: lending_limit {l} must be between 0 and the nominal {}",
                        q.nominal
                    )));
                }
                if !has_cohort {
                    return Err(err(format!(
                        "{at}: lending_limit needs a cohort (the team has none)"
                    )));
                }
            }
        }
    }
    let mut seen_flavors: Vec<&str> = Vec::new();
    let mut seen_resources: Vec<&ResourceName> = Vec::new();
    for g in groups {
        if g.covered.is_empty() || g.flavors.is_empty() {
            return Err(err(
                "a resource group needs at least one covered resource and one flavor".into(),
            ));
        }
        for r in &g.covered {
            if seen_resources.contains(&r) {
                return Err(err(format!(
                    "resource {r} is covered by two resource groups"
                )));
            }
            seen_resources.push(r);
        }
        for f in &g.flavors {
            if seen_flavors.contains(&f.as_str()) {
                return Err(err(format!("flavor {f} is in two resource groups")));
            }
            seen_flavors.push(f);
            if !quotas.iter().any(|q| &q.flavor == f) {
                return Err(err(format!(
                    "resource group names flavor {f}, which has no quota (flavors with quota: {})",
                    quotas
                        .iter()
                        .map(|q| q.flavor.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_is_written_as_the_decimal_it_was_given_as() {
        for (w, text) in [
            ((1, 1), "1"),
            ((0, 1), "0"),
            ((100, 1), "100"),
            ((1, 2), "0.5"),
            ((9, 4), "2.25"),
            ((1, 8), "0.125"),
            ((1, 3), "0.333"),
            ((2, 0), "2"),
        ] {
            assert_eq!(weight_text(w), text, "{w:?}");
        }
    }

    #[test]
    fn team_names() {
        assert!(validate_team_name("team-a").is_ok());
        assert!(validate_team_name(&"a".repeat(40)).is_ok());
        assert!(validate_team_name(&"a".repeat(41)).is_err());
        assert!(validate_team_name("Team").is_err());
        assert!(validate_team_name("-a").is_err());
        let msg = validate_team_name("a_b").unwrap_err().to_string();
        assert!(msg.contains("a_b") && msg.contains("40"), "{msg}");
    }

    #[test]
    fn default_group_covers_all_resources_in_quota_order() {
        let t = TeamSpec::new(
            "t",
            vec![
                FlavorQuota {
                    flavor: "b".into(),
                    resources: vec![(ResourceName::gpu(), ResourceQuota::nominal(1))],
                },
                FlavorQuota {
                    flavor: "a".into(),
                    resources: vec![(ResourceName::cpu(), ResourceQuota::nominal(1))],
                },
            ],
        );
        let g = t.effective_resource_groups();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].flavors, vec!["b".to_string(), "a".to_string()]);
        assert_eq!(g[0].covered, vec![ResourceName::cpu(), ResourceName::gpu()]);
    }

    #[test]
    fn quota_validation_names_the_field() {
        let q = vec![FlavorQuota {
            flavor: "f".into(),
            resources: vec![(
                ResourceName::gpu(),
                ResourceQuota {
                    nominal: 2,
                    borrowing_limit: None,
                    lending_limit: Some(3),
                },
            )],
        }];
        let msg = validate_quotas("team t", &q, &[], true)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("lending_limit 3") && msg.contains("nominal 2"),
            "{msg}"
        );
        let q2 = vec![FlavorQuota {
            flavor: "f".into(),
            resources: vec![(
                ResourceName::gpu(),
                ResourceQuota {
                    nominal: 2,
                    borrowing_limit: Some(1),
                    lending_limit: None,
                },
            )],
        }];
        assert!(validate_quotas("team t", &q2, &[], false).is_err());
    }
}

//! The cluster policy (HyperPod `SchedulerConfig`): priority classes, fair sharing, idle sharing.

use serde::{Deserialize, Serialize};

/// At most this many priority classes (HyperPod's limit).
pub const MAX_PRIORITY_CLASSES: usize = 10;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityClass {
    pub name: String,
    /// 0..=100.
    pub weight: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FairSharingStrategy {
    LessThanOrEqualToFinalShare,
    LessThanInitialShare,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPolicy {
    /// Empty = first-come first-serve task prioritization.
    pub priority_classes: Vec<PriorityClass>,
    pub fair_share: bool,
    pub fair_sharing_strategies: Vec<FairSharingStrategy>,
    pub idle_resource_sharing: bool,
    /// How long work stays put once admitted (allot's own; the AWS API has no such field).
    /// A state saved before it existed reads the live default.
    #[serde(default)]
    pub stability: Stability,
}

/// The longest minimum run time allowed: a day.
pub const MAX_MINIMUM_RUN_TIME_S: u32 = 24 * 60 * 60;
/// The largest preemption budget allowed.
pub const MAX_PREEMPTION_BUDGET: u32 = 1000;

/// The rules that bound preemption churn (docs/scheduling.md, "Work stays put"). Both spare a
/// workload only from the preemptions that rebalance borrowed capacity: fair sharing between
/// borrowers, and a preemptor that borrows taking from another borrower. A team's own
/// higher-priority work and a lender reclaiming its nominal quota are never held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stability {
    /// Seconds an admitted workload runs before such a preemption may pick it; 0 turns the
    /// rule off.
    pub minimum_run_time_s: u32,
    /// Preemptions (of any kind) after which a workload is spared such preemptions for the
    /// rest of its life; 0 turns the rule off.
    pub preemption_budget: u32,
}

impl Stability {
    /// Both rules off: Kueue's behaviour, and what a scenario file gets when it names neither
    /// (files written before they existed keep their results).
    pub const OFF: Stability = Stability {
        minimum_run_time_s: 0,
        preemption_budget: 0,
    };

    /// The minimum run time in milliseconds.
    pub fn minimum_run_ms(&self) -> i64 {
        i64::from(self.minimum_run_time_s) * 1000
    }

    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.minimum_run_time_s > MAX_MINIMUM_RUN_TIME_S {
            return Err(PolicyError::MinimumRunTime(self.minimum_run_time_s));
        }
        if self.preemption_budget > MAX_PREEMPTION_BUDGET {
            return Err(PolicyError::PreemptionBudget(self.preemption_budget));
        }
        Ok(())
    }
}

/// A live cluster's default: five minutes of run time before a fair-sharing preemption (the
/// span Kueue keeps preemption timestamps for, kueue#9835), and spared after five preemptions.
impl Default for Stability {
    fn default() -> Self {
        Stability {
            minimum_run_time_s: 300,
            preemption_budget: 5,
        }
    }
}

impl Default for ClusterPolicy {
    fn default() -> Self {
        ClusterPolicy {
            priority_classes: Vec::new(),
            fair_share: true,
            fair_sharing_strategies: vec![
                FairSharingStrategy::LessThanOrEqualToFinalShare,
                FairSharingStrategy::LessThanInitialShare,
            ],
            idle_resource_sharing: false,
            stability: Stability::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{0} priority classes given; at most {MAX_PRIORITY_CLASSES} are allowed")]
    TooManyClasses(usize),
    #[error("priority class {name:?}: weight {weight} is out of range 0..=100")]
    Weight { name: String, weight: i32 },
    #[error("priority class {0:?} is defined twice")]
    Duplicate(String),
    #[error("invalid priority class name {}: use 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit (the AWS API's pattern; the 63 is allot's, a Kubernetes label's limit)", crate::names::shown(.0))]
    Name(String),
    #[error("fair_sharing_strategies {0:?} is not valid: use [LessThanOrEqualToFinalShare], [LessThanInitialShare] or both in that order")]
    Strategies(Vec<FairSharingStrategy>),
    #[error(
        "minimum run time {0} s is out of range 0..={MAX_MINIMUM_RUN_TIME_S} (0 turns it off)"
    )]
    MinimumRunTime(u32),
    #[error("preemption budget {0} is out of range 0..={MAX_PREEMPTION_BUDGET} (0 turns it off)")]
    PreemptionBudget(u32),
    #[error("unknown priority class {name:?}; valid names: {valid}")]
    UnknownClass { name: String, valid: String },
}

impl ClusterPolicy {
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.priority_classes.len() > MAX_PRIORITY_CLASSES {
            return Err(PolicyError::TooManyClasses(self.priority_classes.len()));
        }
        for (i, pc) in self.priority_classes.iter().enumerate() {
            let label_ok = !pc.name.is_empty()
                && pc.name.len() <= 63
                && pc
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !pc.name.starts_with('-')
                && !pc.name.ends_with('-');
            if !label_ok {
                return Err(PolicyError::Name(pc.name.clone()));
            }
            if !(0..=100).contains(&pc.weight) {
                return Err(PolicyError::Weight {
                    name: pc.name.clone(),
                    weight: pc.weight,
                });
            }
            if self.priority_classes[..i].iter().any(|o| o.name == pc.name) {
                return Err(PolicyError::Duplicate(pc.name.clone()));
            }
        }
        use FairSharingStrategy::*;
        let s = &self.fair_sharing_strategies;
        let valid = matches!(
            s.as_slice(),
            [LessThanOrEqualToFinalShare]
                | [LessThanInitialShare]
                | [LessThanOrEqualToFinalShare, LessThanInitialShare]
        );
        if !valid {
            return Err(PolicyError::Strategies(s.clone()));
        }
        self.stability.validate()
    }

    /// The class `class` names: itself, or, as HyperPod's jobs label their class
    /// (`kueue.x-k8s.io/priority-class: training-priority`), the name with `-priority` after it.
    /// A class whose own name ends in `-priority` is found by that name first.
    pub fn class_name(&self, class: &str) -> Option<&str> {
        let find = |n: &str| self.priority_classes.iter().find(|c| c.name == n);
        (find(class).or_else(|| class.strip_suffix("-priority").and_then(find)))
            .map(|c| c.name.as_str())
    }

    /// The priority of a task naming `class` (or `class-priority`): the class weight; an unknown
    /// class is an error that lists the valid names.
    pub fn class_priority(&self, class: &str) -> Result<i32, PolicyError> {
        self.class_name(class)
            .and_then(|n| self.priority_classes.iter().find(|c| c.name == n))
            .map(|c| c.weight)
            .ok_or_else(|| PolicyError::UnknownClass {
                name: class.to_string(),
                valid: if self.priority_classes.is_empty() {
                    "none (the policy defines no priority classes: first-come first-serve)".into()
                } else {
                    self.priority_classes
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_class_lists_valid_names() {
        let p = ClusterPolicy {
            priority_classes: vec![
                PriorityClass {
                    name: "inference".into(),
                    weight: 90,
                },
                PriorityClass {
                    name: "training".into(),
                    weight: 70,
                },
            ],
            ..Default::default()
        };
        assert_eq!(p.class_priority("training").unwrap(), 70);
        // As HyperPod's jobs name it.
        assert_eq!(p.class_priority("training-priority").unwrap(), 70);
        assert_eq!(p.class_name("inference-priority"), Some("inference"));
        assert!(p.class_priority("nope-priority").is_err());
        let e = p.class_priority("nope").unwrap_err().to_string();
        assert!(
            e.contains("nope") && e.contains("inference, training"),
            "{e}"
        );
    }

    #[test]
    fn a_class_named_with_the_suffix_is_found_by_its_own_name_first() {
        let class = |name: &str, weight| PriorityClass {
            name: name.into(),
            weight,
        };
        let p = ClusterPolicy {
            priority_classes: vec![class("batch", 10), class("batch-priority", 20)],
            ..Default::default()
        };
        assert_eq!(p.class_priority("batch-priority").unwrap(), 20);
        assert_eq!(p.class_priority("batch").unwrap(), 10);
    }

    #[test]
    fn validation_ranges() {
        let mut p = ClusterPolicy::default();
        p.priority_classes.push(PriorityClass {
            name: "x".into(),
            weight: 101,
        });
        assert!(p.validate().unwrap_err().to_string().contains("101"));
        p.priority_classes[0].weight = 100;
        assert!(p.validate().is_ok());
        p.priority_classes = (0..11)
            .map(|i| PriorityClass {
                name: format!("c{i}"),
                weight: 1,
            })
            .collect();
        assert!(p.validate().is_err());
        let q = ClusterPolicy {
            fair_sharing_strategies: vec![
                FairSharingStrategy::LessThanInitialShare,
                FairSharingStrategy::LessThanOrEqualToFinalShare,
            ],
            ..Default::default()
        };
        assert!(q.validate().is_err());
    }
}

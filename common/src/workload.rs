//! Workloads (tasks, jobs): one team, one or more pod sets admitted together.

use serde::{Deserialize, Serialize};

use crate::resource::Resources;

/// Name of the pod set of a workload written with a single `count`/`requests`.
pub const MAIN_POD_SET: &str = "main";

/// `count` identical pods, each with `requests`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSet {
    pub name: String,
    pub count: u32,
    /// With partial admission: the smallest count worth running.
    pub min_count: Option<u32>,
    pub requests: Resources,
}

/// How a task names its priority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum PriorityRef {
    #[default]
    None,
    Class(String),
    Value(i32),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub name: String,
    pub team: String,
    pub priority: PriorityRef,
    /// Pin every pod set to this flavor (instance type).
    pub instance_type: Option<String>,
    pub pod_sets: Vec<PodSet>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("workload {0:?}: a workload needs at least one pod set")]
    NoPodSets(String),
    #[error("workload {0:?}: pod set {1:?} is listed twice")]
    DuplicatePodSet(String, String),
    #[error("workload {name:?}: pod set {pod_set:?}: {what}")]
    PodSet {
        name: String,
        pod_set: String,
        what: String,
    },
    #[error(
        "invalid workload name {0:?}: use 1 to 253 characters of letters, digits, '.', '-' and '_'"
    )]
    Name(String),
}

/// At most this many pod sets per workload (Kueue v1beta2 allows 18).
pub const MAX_POD_SETS: usize = 18;

impl WorkloadSpec {
    /// One pod set (`main`) of `count` pods with `requests`, priority 0, no pinned flavor.
    pub fn single(name: &str, team: &str, count: u32, requests: Resources) -> Self {
        WorkloadSpec {
            name: name.to_string(),
            team: team.to_string(),
            priority: PriorityRef::None,
            instance_type: None,
            pod_sets: vec![PodSet {
                name: MAIN_POD_SET.to_string(),
                count,
                min_count: None,
                requests,
            }],
        }
    }

    pub fn validate(&self) -> Result<(), WorkloadError> {
        let ok = !self.name.is_empty()
            && self.name.len() <= 253
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !ok {
            return Err(WorkloadError::Name(self.name.clone()));
        }
        if self.pod_sets.is_empty() {
            return Err(WorkloadError::NoPodSets(self.name.clone()));
        }
        for (i, ps) in self.pod_sets.iter().enumerate() {
            let bad = |what: String| WorkloadError::PodSet {
                name: self.name.clone(),
                pod_set: ps.name.clone(),
                what,
            };
            if self.pod_sets[..i].iter().any(|o| o.name == ps.name) {
                return Err(WorkloadError::DuplicatePodSet(
                    self.name.clone(),
                    ps.name.clone(),
                ));
            }
            if i >= MAX_POD_SETS {
                return Err(bad(format!("at most {MAX_POD_SETS} pod sets are allowed")));
            }
            if ps.count == 0 {
                return Err(bad("count must be at least 1".into()));
            }
            if let Some(m) = ps.min_count {
                if m == 0 || m > ps.count {
                    return Err(bad(format!(
                        "min_count {m} must be between 1 and count {}",
                        ps.count
                    )));
                }
            }
            if let Some((r, v)) = ps.requests.iter().find(|(_, v)| *v < 0) {
                return Err(bad(format!("request {r}={v} must be >= 0")));
            }
        }
        Ok(())
    }

    /// Total requests of the workload at full counts.
    pub fn total_requests(&self) -> Resources {
        let mut t = Resources::new();
        for ps in &self.pod_sets {
            for (r, v) in ps.requests.iter() {
                t.add(r, v * i64::from(ps.count));
            }
        }
        t
    }
}

//! Workloads (tasks, jobs): one team, one or more pod sets admitted together.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::resource::{ResourceName, Resources, MAX_QUANTITY};

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
    /// Labels (`key: value`) for selecting workloads: `allot cancel -l key=value`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Set by the coordinator on an element of a job array: which array, which index.
    #[serde(default)]
    pub array: Option<ArrayMember>,
}

/// An array element's place in its array (`allot submit --array`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayMember {
    /// The array's name; its elements are named `NAME-INDEX`.
    pub name: String,
    pub index: u32,
}

/// At most this many labels on a workload.
pub const MAX_LABELS: usize = 32;

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
    #[error("workload {0:?}: {1}")]
    Labels(String, String),
    #[error("workload {0:?}: {1} pods in all; a workload may have at most {MAX_PODS}")]
    TooManyPods(String, u64),
    #[error("workload {0:?}: its pod sets request {2} of {1} in all, above the maximum of {MAX_QUANTITY} base units of one resource")]
    TooLarge(String, String, i64),
}

/// At most this many pod sets per workload (Kueue v1beta2 allows 18).
pub const MAX_POD_SETS: usize = 18;
/// At most this many pods per workload, over all its pod sets: a training job on every GPU of
/// a thousand 8-GPU nodes fits. Each pod is placed, allocated and started one by one, so the
/// bound keeps one submit from holding the leader (and a node's agent) for minutes.
pub const MAX_PODS: u64 = 10_000;

/// A label's key and value, as Kubernetes allows them: a key of 1 to 63 characters (with an
/// optional `prefix/` of up to 253), a value of up to 63; letters, digits, '-', '_' and '.',
/// beginning and ending with a letter or digit.
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    fn part(s: &str, max: usize, empty_ok: bool) -> bool {
        if s.is_empty() {
            return empty_ok;
        }
        s.len() <= max
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    }
    let name = key
        .rsplit_once('/')
        .map_or(key, |(p, n)| if part(p, 253, false) { n } else { "" });
    if !part(name, 63, false) {
        return Err(format!(
            "invalid label key {key:?}: use 1 to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit (optionally after a prefix/ of up to 253)"
        ));
    }
    if !part(value, 63, true) {
        return Err(format!(
            "invalid value {value:?} for label {key:?}: use up to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
        ));
    }
    Ok(())
}

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
            labels: Default::default(),
            array: None,
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
        if self.labels.len() > MAX_LABELS {
            return Err(WorkloadError::Labels(
                self.name.clone(),
                format!("{} labels, at most {MAX_LABELS}", self.labels.len()),
            ));
        }
        for (k, v) in &self.labels {
            // A topology level (`kubernetes.io/hostname`) is no label value: Kueue keeps it
            // in an annotation.
            if crate::topology::is_label(k) {
                crate::topology::check_name(v).map_err(|e| {
                    WorkloadError::Labels(self.name.clone(), format!("{k}={v:?}: {e}"))
                })?;
            } else {
                check_label(k, v).map_err(|e| WorkloadError::Labels(self.name.clone(), e))?;
            }
        }
        let pods: u64 = self.pod_sets.iter().map(|ps| u64::from(ps.count)).sum();
        if pods > MAX_PODS {
            return Err(WorkloadError::TooManyPods(self.name.clone(), pods));
        }
        let mut total = BTreeMap::<&ResourceName, i64>::new();
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
            // No resource may total more than a quantity may be, per pod set or in all.
            for (r, v) in ps.requests.iter() {
                // Both factors are bounded (count by MAX_PODS), so the product is exact.
                let all = i128::from(v) * i128::from(ps.count);
                if all > i128::from(MAX_QUANTITY) {
                    return Err(bad(format!(
                        "{} pods of {r}={v} request {all} in all, above the maximum of {MAX_QUANTITY} base units of one resource",
                        ps.count
                    )));
                }
                let sum = total.entry(r).or_insert(0);
                *sum += all as i64;
                if *sum > MAX_QUANTITY {
                    return Err(WorkloadError::TooLarge(
                        self.name.clone(),
                        r.to_string(),
                        *sum,
                    ));
                }
            }
        }
        Ok(())
    }

    /// For a cluster that places pods on nodes: every pod set asks for more than zero of
    /// something (a pod of `{gpu: 0}` has no node to run on). Quota-only simulations accept
    /// such pods, so this is apart from [`WorkloadSpec::validate`].
    pub fn check_placeable(&self) -> Result<(), WorkloadError> {
        for ps in &self.pod_sets {
            let bad = |what: String| WorkloadError::PodSet {
                name: self.name.clone(),
                pod_set: ps.name.clone(),
                what,
            };
            // CUDA sees either whole GPUs or MIG devices, never both (HyperPod's CLI refuses
            // the mix too).
            let asks = |pred: &dyn Fn(&ResourceName) -> bool| {
                ps.requests.iter().any(|(r, v)| v > 0 && pred(r))
            };
            if asks(&|r| r.as_str() == crate::resource::GPU) && asks(&|r| r.is_partition()) {
                return Err(bad(
                    "requests whole GPUs and GPU partitions: a pod gets one or the other (CUDA \
                     sees whole GPUs or MIG devices, not both); use two pod sets"
                        .into(),
                ));
            }
            if ps.requests.iter().all(|(_, v)| v == 0) {
                let asked = ps
                    .requests
                    .iter()
                    .map(|(r, v)| format!("{r}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                return Err(bad(format!(
                    "requests nothing ({}): a pod must request more than zero of some resource \
                     (cpu, memory, gpu, neuron, ...) to be placed on a node",
                    if asked.is_empty() {
                        "no requests"
                    } else {
                        &asked
                    }
                )));
            }
        }
        Ok(())
    }

    /// Total requests of the workload at full counts.
    pub fn total_requests(&self) -> Resources {
        let mut t = Resources::new();
        for ps in &self.pod_sets {
            for (r, v) in ps.requests.iter() {
                t.add(r, v.saturating_mul(i64::from(ps.count)));
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceName;

    fn spec(counts: &[u32], memory: i64) -> WorkloadSpec {
        let mut req = Resources::new();
        req.set(ResourceName::memory(), memory);
        let mut s = WorkloadSpec::single("big", "team-a", counts[0], req.clone());
        for (i, c) in counts.iter().enumerate().skip(1) {
            let mut ps = s.pod_sets[0].clone();
            ps.name = format!("ps-{i}");
            ps.count = *c;
            s.pod_sets.push(ps);
        }
        s
    }

    /// Issue 23: `{gpu: 0}` was admitted with no node and never ran.
    #[test]
    fn a_pod_that_requests_nothing_is_refused() {
        let mut r = Resources::new();
        r.set(ResourceName::gpu(), 0);
        let e = WorkloadSpec::single("w", "team-a", 1, r.clone())
            .check_placeable()
            .unwrap_err()
            .to_string();
        assert!(e.contains("requests nothing (gpu=0)"), "{e}");
        let e = WorkloadSpec::single("w", "team-a", 1, Resources::new())
            .check_placeable()
            .unwrap_err()
            .to_string();
        assert!(e.contains("requests nothing (no requests)"), "{e}");
        // Zero of one resource beside some of another is fine.
        r.set(ResourceName::cpu(), 1000);
        WorkloadSpec::single("w", "team-a", 1, r)
            .validate()
            .unwrap();
    }

    #[test]
    fn a_workload_of_more_pods_than_the_maximum_is_refused_with_both_numbers() {
        assert!(spec(&[10_000], 1).validate().is_ok());
        let e = spec(&[4_000_000_000], 1)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("4000000000 pods") && e.contains("at most 10000"),
            "{e}"
        );
        // The bound is on the sum over pod sets.
        let e = spec(&[6_000, 6_000], 1).validate().unwrap_err().to_string();
        assert!(e.contains("12000 pods"), "{e}");
    }

    #[test]
    fn a_request_times_count_above_the_maximum_is_refused_not_overflowed() {
        // 1Ei of memory is within what a quantity may be; 8 pods of it are not.
        let ei = 1i64 << 60;
        assert!(spec(&[1], ei).validate().is_ok());
        let e = spec(&[8], ei).validate().unwrap_err().to_string();
        assert!(
            e.contains("8 pods of memory=1152921504606846976")
                && e.contains(&MAX_QUANTITY.to_string()),
            "{e}"
        );
        // Each pod set alone is under the bound; together they are over it.
        let e = spec(&[1, 1], MAX_QUANTITY / 2 + 1)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("in all") && e.contains("memory"), "{e}");
        assert_eq!(
            spec(&[1], i64::MAX)
                .total_requests()
                .get(&ResourceName::memory()),
            i64::MAX
        );
    }
}

//! The agent's decisions about its node's pods, without I/O: what the cluster assigns (the
//! last confirmed `NodeAssignments`) and what the node runs (`Seen`, one entry per pod the
//! node knows of) go in; what to do comes out (`Action`: stop a pod, start one, say a pod the
//! cluster wants stopped never ran here, or wait for a device a stopping pod still holds). The
//! agent (`agent.rs`) applies the actions through its executor; the coordinator's seeded
//! simulation (`coordinator/tests/raft_sim.rs`) applies them to its simulated nodes. Neither
//! decides anything itself.
//!
//! The rules, in the order they apply:
//! - a pod that runs and is not assigned, or is assigned to stop, is stopped (with its grace);
//! - a pod assigned to stop that never ran here is reported gone, once, so its eviction ends;
//! - a pod assigned and never started here is started, unless a device it needs is still held
//!   by a pod that is stopping (then it waits: no device is ever shared); a pod is never
//!   started twice, and one whose start failed is not tried again.

use std::collections::{BTreeMap, BTreeSet};

use allot_common::api::{NodeAssignments, PodAssignment};

/// A pod: (workload id, attempt, rank).
pub type PodKey = (u64, u32, u32);

pub fn key_of(a: &PodAssignment) -> PodKey {
    (a.workload_id, a.attempt, a.rank)
}

/// A device: (resource, index).
pub type Device = (String, u8);

/// What the node knows of one of its pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// It runs and was not asked to stop.
    pub running: bool,
    /// The devices it holds: while it runs or stops, none once it ended.
    pub holds: Vec<Device>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Stop {
        key: PodKey,
        why: String,
    },
    Start(PodAssignment),
    /// Assigned to stop, but never ran on this node: it has ended as far as the node knows.
    Gone(PodAssignment),
    /// Assigned, but `device` is still held by a pod that is stopping.
    Wait {
        pod: PodAssignment,
        device: Device,
    },
}

/// The devices a pod is assigned.
pub fn devices_of(p: &PodAssignment) -> Vec<Device> {
    p.devices
        .iter()
        .flat_map(|(r, v)| v.iter().map(move |i| (r.clone(), *i)))
        .collect()
}

/// What the reconciler remembers between rounds: the pods it has said are gone, or whose
/// start failed, so that neither is said or tried twice.
#[derive(Debug, Default)]
pub struct Reconciler {
    settled: BTreeSet<PodKey>,
}

impl Reconciler {
    /// The actions that bring the node's pods (`seen`) to what `assigned` says.
    pub fn plan(
        &mut self,
        assigned: &NodeAssignments,
        seen: &BTreeMap<PodKey, Seen>,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let by_key: BTreeMap<PodKey, &PodAssignment> =
            assigned.pods.iter().map(|p| (key_of(p), p)).collect();
        for k in seen.iter().filter(|(_, s)| s.running).map(|(k, _)| k) {
            let why = match by_key.get(k) {
                None => Some("no longer assigned to this node".to_string()),
                Some(p) => p.stop.clone(),
            };
            if let Some(why) = why {
                actions.push(Action::Stop { key: *k, why });
            }
        }
        let mut busy: BTreeSet<Device> = seen.values().flat_map(|s| s.holds.clone()).collect();
        for p in &assigned.pods {
            let k = key_of(p);
            if p.stop.is_some() {
                if !seen.contains_key(&k) && self.settled.insert(k) {
                    actions.push(Action::Gone(p.clone()));
                }
                continue;
            }
            if seen.contains_key(&k) || self.settled.contains(&k) {
                continue;
            }
            let wants = devices_of(p);
            if let Some(d) = wants.iter().find(|d| busy.contains(*d)) {
                actions.push(Action::Wait {
                    pod: p.clone(),
                    device: d.clone(),
                });
                continue;
            }
            busy.extend(wants);
            actions.push(Action::Start(p.clone()));
        }
        self.settled.retain(|k| by_key.contains_key(k));
        actions
    }

    /// A start the plan asked for failed (the caller reports the pod failed): it is not tried
    /// again while the cluster assigns it.
    pub fn start_failed(&mut self, key: PodKey) {
        self.settled.insert(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(id: u64, attempt: u32, gpus: &[u8]) -> PodAssignment {
        PodAssignment {
            workload: format!("w{id}"),
            workload_id: id,
            attempt,
            team: "team-a".into(),
            rank: 0,
            local_rank: 0,
            world_size: 1,
            pod_set: "main".into(),
            devices: [("gpu".to_string(), gpus.to_vec())].into_iter().collect(),
            requests: Default::default(),
            master_addr: String::new(),
            master_port: 0,
            run: Default::default(),
            stop: None,
            registry_credentials: None,
        }
    }

    fn assigned(pods: Vec<PodAssignment>) -> NodeAssignments {
        NodeAssignments {
            pods,
            ..Default::default()
        }
    }

    fn running(gpus: &[u8]) -> Seen {
        Seen {
            running: true,
            holds: gpus.iter().map(|g| ("gpu".to_string(), *g)).collect(),
        }
    }

    #[test]
    fn starts_what_is_assigned_and_stops_what_is_not() {
        let mut r = Reconciler::default();
        let seen: BTreeMap<PodKey, Seen> = [((1, 1, 0), running(&[0]))].into_iter().collect();
        let a = assigned(vec![pod(2, 1, &[1])]);
        let actions = r.plan(&a, &seen);
        assert_eq!(
            actions,
            vec![
                Action::Stop {
                    key: (1, 1, 0),
                    why: "no longer assigned to this node".into()
                },
                Action::Start(pod(2, 1, &[1])),
            ]
        );
    }

    #[test]
    fn a_new_attempt_waits_for_the_device_its_stopping_attempt_holds() {
        let mut r = Reconciler::default();
        let stopping = Seen {
            running: false,
            holds: vec![("gpu".into(), 0)],
        };
        let seen: BTreeMap<PodKey, Seen> = [((1, 1, 0), stopping)].into_iter().collect();
        let a = assigned(vec![pod(1, 2, &[0])]);
        assert_eq!(
            r.plan(&a, &seen),
            vec![Action::Wait {
                pod: pod(1, 2, &[0]),
                device: ("gpu".into(), 0)
            }]
        );
        // Once it ended, the device is free and the new attempt starts.
        let ended: BTreeMap<PodKey, Seen> = [((1, 1, 0), Seen::default())].into_iter().collect();
        assert_eq!(r.plan(&a, &ended), vec![Action::Start(pod(1, 2, &[0]))]);
    }

    #[test]
    fn two_pods_wanting_one_device_in_a_round_start_one() {
        let mut r = Reconciler::default();
        let a = assigned(vec![pod(1, 1, &[0]), pod(2, 1, &[0])]);
        let actions = r.plan(&a, &BTreeMap::new());
        assert_eq!(actions.len(), 2);
        assert_eq!(actions[0], Action::Start(pod(1, 1, &[0])));
        assert!(matches!(actions[1], Action::Wait { .. }));
    }

    #[test]
    fn a_stop_for_a_pod_never_run_here_is_answered_once_and_a_failed_start_not_retried() {
        let mut r = Reconciler::default();
        let mut gone = pod(1, 1, &[]);
        gone.stop = Some("preempted".into());
        let a = assigned(vec![gone.clone(), pod(2, 1, &[])]);
        let first = r.plan(&a, &BTreeMap::new());
        assert_eq!(
            first,
            vec![Action::Gone(gone), Action::Start(pod(2, 1, &[]))]
        );
        r.start_failed((2, 1, 0));
        assert_eq!(r.plan(&a, &BTreeMap::new()), vec![]);
        // No longer assigned: forgotten, so a later assignment of the same key is acted on.
        assert_eq!(r.plan(&assigned(vec![]), &BTreeMap::new()), vec![]);
        assert_eq!(
            r.plan(&assigned(vec![pod(2, 1, &[])]), &BTreeMap::new()),
            vec![Action::Start(pod(2, 1, &[]))]
        );
    }

    #[test]
    fn a_running_pod_assigned_to_stop_is_stopped_with_the_reason() {
        let mut r = Reconciler::default();
        let mut p = pod(1, 1, &[0]);
        p.stop = Some("evicted: node maintenance".into());
        let seen: BTreeMap<PodKey, Seen> = [((1, 1, 0), running(&[0]))].into_iter().collect();
        assert_eq!(
            r.plan(&assigned(vec![p]), &seen),
            vec![Action::Stop {
                key: (1, 1, 0),
                why: "evicted: node maintenance".into()
            }]
        );
    }
}

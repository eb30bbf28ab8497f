//! Small GPU clusters for the crate's unit tests: teams with 8 GPUs of nominal quota on one p5
//! flavor, nodes of 8 GPUs, one-pod GPU workloads.

use allot_common::quota::ResourceQuota;
use allot_common::{ClusterPolicy, FlavorQuota, ResourceName, Resources, TeamSpec, WorkloadSpec};

use crate::state::{State, Time};

/// The flavor of every node and quota.
pub(crate) const FLAVOR: &str = "ml.p5.48xlarge";

/// Submits `name`, one pod of `gpus` GPUs, for `team` at `now`.
pub(crate) fn submit(st: &mut State, name: &str, team: &str, gpus: i64, now: Time) {
    let mut req = Resources::new();
    req.set(ResourceName::gpu(), gpus);
    st.submit(WorkloadSpec::single(name, team, 1, req), now)
        .expect("valid workload");
}

/// Teams `teams` with 8 GPUs of nominal quota each, and `nodes` nodes of 8 GPUs.
pub(crate) fn cluster(teams: &[&str], nodes: usize) -> State {
    let mut st = State::new(ClusterPolicy::default());
    for t in teams {
        let spec = TeamSpec::new(
            t,
            vec![FlavorQuota {
                flavor: FLAVOR.into(),
                resources: vec![(ResourceName::gpu(), ResourceQuota::nominal(8))],
            }],
        );
        st.set_team(spec).expect("valid team");
    }
    let mut cap = Resources::new();
    cap.set(ResourceName::gpu(), 8);
    for n in 0..nodes {
        st.add_node(&format!("p5-{n}"), FLAVOR, &cap)
            .expect("valid node");
    }
    st
}

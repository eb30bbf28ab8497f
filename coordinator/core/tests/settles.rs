//! Liveness: on a contended cluster where total nominal equals capacity and every team queues
//! more than it can run, scheduling reaches a fixed point (no cycle of preemptions) in both
//! classical and fair-sharing modes. This once failed: admissions made earlier in a cycle made
//! teams look borrowing and work was swapped back and forth forever.

use allot_common::quota::ResourceQuota;
use allot_common::{
    ClusterPolicy, FlavorQuota, PodSet, PriorityRef, ResourceName, Resources, TeamSpec,
    WorkloadSpec,
};
use allot_core::schedule;
use allot_core::state::{Event, State};

const FLAVOR: &str = "ml.p5.48xlarge";

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn cluster(seed: u64, teams: usize, nodes: usize, pending: usize, fair_share: bool) -> State {
    let mut st = State::new(ClusterPolicy {
        fair_share,
        ..Default::default()
    });
    let per_team = (nodes * 8 / teams) as i64;
    for t in 0..teams {
        let mut spec = TeamSpec::new(
            &format!("team-{t}"),
            vec![FlavorQuota {
                flavor: FLAVOR.into(),
                resources: vec![(ResourceName::gpu(), ResourceQuota::nominal(per_team))],
            }],
        );
        spec.fair_share_weight = 1 + (t as u32 % 4) * 10;
        st.set_team(spec).unwrap();
    }
    let mut cap = Resources::new();
    cap.set(ResourceName::gpu(), 8);
    for n in 0..nodes {
        st.add_node(&format!("p5-{n}"), FLAVOR, &cap).unwrap();
    }
    let mut rng = Lcg(seed);
    for i in 0..pending {
        let count = [1, 1, 2, 4, 8][rng.next() as usize % 5];
        let mut req = Resources::new();
        req.set(ResourceName::gpu(), 1);
        let spec = WorkloadSpec {
            name: format!("w{i}"),
            team: format!("team-{}", rng.next() as usize % teams),
            priority: PriorityRef::Value((rng.next() % 4) as i32 * 10),
            instance_type: None,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count,
                min_count: None,
                requests: req,
            }],
            labels: Default::default(),
            array: None,
        };
        st.submit(spec, i as i64).unwrap();
    }
    st
}

fn cycles_to_settle(st: &mut State, limit: usize) -> Option<usize> {
    for i in 0..limit {
        let plan = schedule(st, 0);
        let ev = st.apply_plan(&plan, 0);
        for e in ev {
            if let Event::Preempted { wl, .. } = e {
                st.complete_eviction(wl, 0);
            }
        }
        st.check_invariants().unwrap();
        if !plan.has_decisions() {
            return Some(i);
        }
    }
    None
}

#[test]
fn contended_cluster_settles_classical() {
    for seed in [1, 2, 3, 5, 7, 11, 42] {
        let mut st = cluster(seed, 16, 16, 600, false);
        assert!(
            cycles_to_settle(&mut st, 200).is_some(),
            "seed {seed}: no fixed point after 200 cycles"
        );
    }
}

#[test]
fn contended_cluster_settles_fair_sharing() {
    // Seed 42 cycled until victims held their room for the rest of a cycle and last cycle's
    // preemptors went first within their team.
    for seed in [1, 2, 3, 5, 7, 11, 42] {
        let mut st = cluster(seed, 16, 16, 600, true);
        assert!(
            cycles_to_settle(&mut st, 200).is_some(),
            "seed {seed}: no fixed point after 200 cycles"
        );
    }
}

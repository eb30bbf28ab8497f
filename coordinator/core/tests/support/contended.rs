//! Seeded random contended clusters and workloads, for the property tests that compare the
//! scheduler with itself (`equivalence.rs`) and with `explain` (`explain_decides.rs`): few
//! shapes, several teams with random quotas, limits and preemption policies, sometimes in two
//! departments of one organisation, nodes in racks.

use allot_common::quota::{
    BorrowWithinCohortPolicy, QueueingStrategy, ReclaimWithinCohort, ResourceQuota, WithinTeam,
};
use allot_common::topology::{PREFERRED_LABEL, REQUIRED_LABEL};
use allot_common::{
    ClusterPolicy, FlavorQuota, PodSet, PriorityRef, ResourceName, Resources, Stability, TeamSpec,
    WorkloadSpec,
};
use allot_core::state::State;

pub const FLAVOR: &str = "ml.p5.48xlarge";
/// A second instance type in half the histories, with cpu-only workloads in every history:
/// changes that touch one flavor or resource leave the other's outcomes kept.
pub const FLAVOR2: &str = "ml.g5.8xlarge";

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

pub fn cluster(rng: &mut Rng) -> (State, usize) {
    let fair_share = rng.below(2) == 0;
    // The stability rules in most histories, with times the steps below pass (a second now
    // and then): a minimum run time that ends between two cycles changes what a search may
    // take though nothing else changed.
    let (minimum_run_time_s, preemption_budget) = rng.pick(&[(0, 0), (1, 0), (2, 1), (0, 2)]);
    let mut st = State::new(ClusterPolicy {
        fair_share,
        stability: Stability {
            minimum_run_time_s,
            preemption_budget,
        },
        ..Default::default()
    });
    let teams = 2 + rng.below(4) as usize;
    let two = rng.below(2) == 0;
    // In a third of the histories the teams sit in two departments of one organisation, the
    // first with a borrowing limit toward it (drawn from a generator of their own, so that the
    // histories drawn before nesting existed stay as they were).
    let mut nest = Rng(rng.0 ^ 0x5eed_c0de);
    let nested = nest.below(3) == 0;
    for t in 0..teams {
        let nominal = rng.pick(&[4, 8, 16]);
        let mut flavors = vec![FlavorQuota {
            flavor: FLAVOR.into(),
            resources: vec![
                (
                    ResourceName::cpu(),
                    ResourceQuota {
                        nominal: nominal * 24_000,
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                ),
                (
                    ResourceName::gpu(),
                    ResourceQuota {
                        nominal,
                        borrowing_limit: rng.pick(&[None, Some(0), Some(8)]),
                        lending_limit: None,
                    },
                ),
            ],
        }];
        if two {
            let nominal = rng.pick(&[0, 1, 2]);
            flavors.push(FlavorQuota {
                flavor: FLAVOR2.into(),
                resources: vec![
                    (
                        ResourceName::cpu(),
                        ResourceQuota {
                            nominal: nominal * 32_000,
                            borrowing_limit: None,
                            lending_limit: None,
                        },
                    ),
                    (
                        ResourceName::gpu(),
                        ResourceQuota {
                            nominal,
                            borrowing_limit: None,
                            lending_limit: None,
                        },
                    ),
                ],
            });
        }
        let mut spec = TeamSpec::new(&format!("team-{t}"), flavors);
        spec.fair_share_weight = rng.pick(&[0, 1, 10, 50]);
        spec.preemption.within_team = rng.pick(&[
            WithinTeam::LowerPriority,
            WithinTeam::LowerPriority,
            WithinTeam::Never,
            WithinTeam::LowerOrNewerEqualPriority,
        ]);
        spec.preemption.reclaim_within_cohort = rng.pick(&[
            ReclaimWithinCohort::Any,
            ReclaimWithinCohort::LowerPriority,
            ReclaimWithinCohort::Never,
        ]);
        if spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::Never {
            spec.preemption.borrow_within_cohort.policy = rng.pick(&[
                BorrowWithinCohortPolicy::Never,
                BorrowWithinCohortPolicy::LowerPriority,
            ]);
        } else {
            spec.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::Never;
        }
        if rng.below(6) == 0 {
            spec.queueing = QueueingStrategy::StrictFIFO;
        }
        if nested {
            spec.cohort = Some(format!("dept-{}", t % 2));
        }
        st.set_team(spec).expect("valid team");
    }
    if nested {
        // dept-0's weight against dept-1's 1 (`None`).
        let weight = nest.pick(&[None, None, Some((2, 1)), Some((1, 2))]);
        for (d, limit, weight) in [
            ("dept-0", nest.pick(&[None, Some(0), Some(4)]), weight),
            ("dept-1", None, None),
        ] {
            st.set_cohort(allot_common::CohortSpec {
                fair_share_weight: weight,
                name: d.into(),
                parent: Some("org".into()),
                quotas: vec![FlavorQuota {
                    flavor: FLAVOR.into(),
                    resources: vec![(
                        ResourceName::gpu(),
                        ResourceQuota {
                            nominal: 0,
                            borrowing_limit: limit,
                            lending_limit: None,
                        },
                    )],
                }],
            })
            .expect("valid cohort");
        }
    }
    let mut cap = Resources::new();
    cap.set(ResourceName::gpu(), 8);
    cap.set(ResourceName::cpu(), 192_000);
    for n in 0..(1 + rng.below(6)) {
        let name = format!("p5-{n}");
        st.add_node(&name, FLAVOR, &cap).expect("valid node");
        // Racks of two, so that gangs that ask for a rack (`workload`) meet part-used racks.
        let rack = [("rack".to_string(), format!("r{}", n / 2))].into();
        st.set_node_topology(&name, &rack).expect("valid topology");
    }
    if two {
        let mut cap = Resources::new();
        cap.set(ResourceName::gpu(), 1);
        cap.set(ResourceName::cpu(), 32_000);
        for n in 0..(1 + rng.below(3)) {
            st.add_node(&format!("g5-{n}"), FLAVOR2, &cap)
                .expect("valid node");
        }
    }
    (st, teams)
}

pub fn workload(rng: &mut Rng, i: usize, teams: usize) -> WorkloadSpec {
    // Few shapes, so that many workloads share one.
    let (count, gpus) = rng.pick(&[(1, 0), (1, 1), (1, 1), (1, 2), (1, 4), (1, 8), (2, 8)]);
    let mut req = Resources::new();
    req.set(ResourceName::gpu(), gpus);
    req.set(ResourceName::cpu(), gpus.max(1) * 4000);
    WorkloadSpec {
        name: format!("w{i}"),
        team: format!("team-{}", rng.below(teams as u64)),
        priority: PriorityRef::Value(rng.pick(&[0, 10, 10, 20])),
        instance_type: match rng.below(4) {
            0 => Some(FLAVOR.into()),
            1 => Some(FLAVOR2.into()),
            _ => None,
        },
        pod_sets: vec![PodSet {
            name: "main".into(),
            count,
            min_count: (rng.below(8) == 0).then_some(1),
            requests: req,
        }],
        // One workload in five asks for a rack, one in seven prefers one.
        labels: match i % 35 {
            k if k % 5 == 0 => [(REQUIRED_LABEL.to_string(), "rack".to_string())].into(),
            k if k % 7 == 0 => [(PREFERRED_LABEL.to_string(), "rack".to_string())].into(),
            _ => Default::default(),
        },
        array: None,
    }
}

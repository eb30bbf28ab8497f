//! Liveness: on a contended cluster where total nominal equals capacity and every team queues
//! more than it can run, scheduling reaches a fixed point (no cycle of preemptions) in both
//! classical and fair-sharing modes. This once failed: admissions made earlier in a cycle made
//! teams look borrowing and work was swapped back and forth forever.

mod support;

use std::collections::BTreeSet;

use allot_common::{ClusterPolicy, ResourceName, Resources, WorkloadSpec};

use allot_core::cycle_cache::CycleCache;
use allot_core::scheduler::schedule_cached;
use allot_core::state::{Event, State, WlState};
use allot_core::{schedule, WlId};

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

/// `teams` teams with `per_team` GPUs of nominal each and the weights `weight` gives, on
/// `nodes` nodes of 8 GPUs.
fn teams_and_nodes(
    fair_share: bool,
    teams: usize,
    per_team: i64,
    nodes: usize,
    mut weight: impl FnMut(usize) -> u32,
) -> State {
    let mut st = State::new(ClusterPolicy {
        fair_share,
        ..Default::default()
    });
    for t in 0..teams {
        let quota = support::rq(per_team, None, None);
        let mut spec = support::team(&format!("team-{t}"), &[(FLAVOR, &[("gpu", quota)])]);
        spec.fair_share_weight = weight(t);
        st.set_team(spec).unwrap();
    }
    let mut cap = Resources::new();
    cap.set(ResourceName::gpu(), 8);
    for n in 0..nodes {
        st.add_node(&format!("p5-{n}"), FLAVOR, &cap).unwrap();
    }
    st
}

fn cluster(seed: u64, teams: usize, nodes: usize, pending: usize, fair_share: bool) -> State {
    let per_team = (nodes * 8 / teams) as i64;
    let mut st = teams_and_nodes(fair_share, teams, per_team, nodes, |t| {
        1 + (t as u32 % 4) * 10
    });
    let mut rng = Lcg(seed);
    for i in 0..pending {
        let count = [1, 1, 2, 4, 8][rng.next() as usize % 5];
        let team = rng.next() as usize % teams;
        let priority = (rng.next() % 4) as i32 * 10;
        st.submit(job(i, team, priority, count, 1), i as i64)
            .unwrap();
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

/// The generated contended clusters of `scripts/bench/gen_scenario.py`, small: teams whose
/// count does not divide the nodes (some capacity belongs to no team's nominal and every team
/// borrows it), fair-share weights of 10, 50 and 100, four priorities, jobs of 1 to 8 GPUs and
/// gangs of 2 to 8 whole nodes, arriving over time while others finish.
fn generated(rng: &mut Lcg, teams: usize, nodes: usize) -> State {
    let per_team = (nodes / teams * 8) as i64;
    teams_and_nodes(true, teams, per_team, nodes, |_| {
        [10, 50, 100][rng.next() as usize % 3]
    })
}

fn generated_job(rng: &mut Lcg, i: usize, teams: usize) -> WorkloadSpec {
    let kind = rng.next() % 100;
    let (count, gpus) = if kind < 55 {
        (1, [1, 1, 2, 4][rng.next() as usize % 4])
    } else if kind < 90 {
        (1, 8)
    } else {
        ([2, 4, 8][rng.next() as usize % 3], 8)
    };
    let team = rng.next() as usize % teams;
    let priority = [50, 70, 80, 90][rng.next() as usize % 4];
    job(i, team, priority, count, gpus)
}

/// Workload `w{i}` of `team-{team}`: `count` pods of `gpus` GPUs each.
fn job(i: usize, team: usize, priority: i32, count: u32, gpus: i64) -> WorkloadSpec {
    let gpus = gpus.to_string();
    support::wl(
        &format!("w{i}"),
        &format!("team-{team}"),
        priority,
        count,
        &[("gpu", &gpus)],
    )
}

/// Issue 56: on a generated cluster of this kind (20,000 jobs, 2,000 nodes; and 2,000 jobs on
/// 200 nodes of 30 teams, seed 1) the decisions at one instant went round without end: a
/// workload preempted, requeued, admitted again by the next cycle and preempted again. The
/// rule (docs/scheduling.md, "Every instant settles"): a workload preempted at an instant is
/// no preemption's candidate again at that instant. So at one instant each workload is
/// preempted at most once and admitted at most twice (before and after its preemption), and
/// every cycle but the last decides something: the settle loop ends within `3 N + 1` cycles
/// for N workloads. This drives the production cycle (`schedule_cached`, one cache across the
/// history) as `allot simulate` does, and checks both at every instant.
#[test]
fn every_instant_settles_on_generated_contended_clusters() {
    let seeds: u64 = if cfg!(debug_assertions) { 16 } else { 64 };
    let mut repeated = 0usize;
    for seed in 0..seeds {
        let mut rng = Lcg(seed * 7919 + 1);
        let teams = [7, 9, 11, 13][seed as usize % 4];
        let nodes = 20 + rng.next() as usize % 20;
        let mut st = generated(&mut rng, teams, nodes);
        let mut cache = CycleCache::default();
        let mut next = 0usize;
        for instant in 1..=60i64 {
            let now = instant * 1000;
            for _ in 0..rng.next() % 12 {
                st.submit(generated_job(&mut rng, next, teams), now)
                    .unwrap();
                next += 1;
            }
            let running: Vec<WlId> = st
                .workloads()
                .keys()
                .filter(|id| st.workload(*id).state == WlState::Admitted)
                .collect();
            for id in running {
                if rng.next() % 100 < 8 {
                    st.finish(id, true, now).unwrap();
                }
            }
            let n = st.workloads().len();
            let bound = 3 * n + 1;
            let mut preempted: BTreeSet<WlId> = BTreeSet::new();
            let mut cycles = 0;
            loop {
                cycles += 1;
                assert!(
                    cycles <= bound,
                    "seed {seed}, t={now}: not settled after {bound} cycles ({n} workloads)"
                );
                let plan = schedule_cached(&st, now, &mut cache);
                for e in st.apply_plan(&plan, now) {
                    if let Event::Preempted { wl, .. } = e {
                        assert!(
                            preempted.insert(wl),
                            "seed {seed}, t={now}: {} preempted twice at one instant",
                            st.workload(wl).spec.name
                        );
                        st.complete_eviction(wl, now);
                    }
                }
                st.check_invariants().unwrap();
                if !plan.has_decisions() {
                    break;
                }
            }
            repeated += preempted
                .iter()
                .filter(|id| st.workload(**id).state == WlState::Admitted)
                .count();
        }
    }
    // The histories do readmit workloads at the instant they were preempted (the case the
    // rule is about), not only preempt them.
    assert!(
        repeated > 0,
        "no workload was admitted again at the instant of its preemption"
    );
}

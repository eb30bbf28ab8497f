//! Scheduler throughput at cluster scale: `cargo bench -p allot-core --bench schedule`.
//!
//! A cohort of 64 teams (16 GPUs of nominal each) on 128 nodes of 8 GPUs, with thousands of
//! pending 1-8 GPU workloads at mixed priorities.

use std::hint::black_box;

use allot_common::quota::ResourceQuota;
use allot_common::{
    ClusterPolicy, FlavorQuota, PodSet, PriorityRef, ResourceName, Resources, TeamSpec,
    WorkloadSpec,
};
use allot_core::schedule;
use allot_core::state::{Event, State};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const FLAVOR: &str = "ml.p5.48xlarge";

/// A small deterministic generator (no dependency, same numbers every run).
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

fn cluster(teams: usize, nodes: usize, pending: usize, fair_share: bool) -> State {
    let mut st = State::new(ClusterPolicy {
        fair_share,
        ..Default::default()
    });
    for t in 0..teams {
        let mut spec = TeamSpec::new(
            &format!("team-{t}"),
            vec![FlavorQuota {
                flavor: FLAVOR.into(),
                resources: vec![
                    (ResourceName::cpu(), ResourceQuota::nominal(16 * 24_000)),
                    (ResourceName::gpu(), ResourceQuota::nominal(16)),
                ],
            }],
        );
        spec.fair_share_weight = 1 + (t as u32 % 4) * 10;
        st.set_team(spec).expect("valid team");
    }
    let mut cap = Resources::new();
    cap.set(ResourceName::gpu(), 8);
    cap.set(ResourceName::cpu(), 192_000);
    for n in 0..nodes {
        st.add_node(&format!("p5-{n}"), FLAVOR, &cap)
            .expect("valid node");
    }
    let mut rng = Lcg(42);
    for i in 0..pending {
        let gpus = [1, 1, 2, 4, 8][rng.next() as usize % 5];
        let mut req = Resources::new();
        req.set(ResourceName::gpu(), 1);
        req.set(ResourceName::cpu(), 4000);
        let spec = WorkloadSpec {
            name: format!("w{i}"),
            team: format!("team-{}", rng.next() as usize % teams),
            priority: PriorityRef::Value((rng.next() % 4) as i32 * 10),
            instance_type: None,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: gpus,
                min_count: None,
                requests: req,
            }],
        };
        st.submit(spec, i as i64).expect("valid workload");
    }
    st
}

/// Applies cycles until nothing changes (evictions complete at once).
fn settle(st: &mut State) {
    for _ in 0..100 {
        let plan = schedule(st, 0);
        let ev = st.apply_plan(&plan, 0);
        for e in ev {
            if let Event::Preempted { wl, .. } = e {
                st.complete_eviction(wl, 0);
            }
        }
        if !plan.has_decisions() {
            break;
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("schedule");
    g.sample_size(10);
    for fair_share in [false, true] {
        let label = if fair_share {
            "fair-share"
        } else {
            "classical"
        };
        // An empty cluster and 4000 pending: one cycle decides ~1000 GPUs of admissions.
        let fresh = cluster(64, 128, 4000, fair_share);
        g.bench_function(format!("{label}/first-cycle-4000-pending"), |b| {
            b.iter(|| black_box(schedule(black_box(&fresh), 0)))
        });
        // A full cluster: every pending workload is reconsidered and waits (steady state).
        let mut full = cluster(64, 128, 4000, fair_share);
        settle(&mut full);
        g.bench_function(format!("{label}/full-cluster-cycle"), |b| {
            b.iter(|| black_box(schedule(black_box(&full), 0)))
        });
        // Decide and apply: the whole path an admission takes in the coordinator.
        g.bench_function(format!("{label}/schedule-and-apply"), |b| {
            b.iter_batched(
                || fresh.clone(),
                |mut st| {
                    let plan = schedule(&st, 0);
                    st.apply_plan(&plan, 0).len()
                },
                BatchSize::LargeInput,
            )
        });
    }
    // The leader's fast path for a submit on an idle cluster (`Machine::plan_submit`): prepare
    // the workload without submitting it and run the cycle for it alone. Its cost is what that
    // path adds before the one commit it saves.
    for (nodes, running) in [(1000, 0), (1000, 1000)] {
        let mut st = cluster(100, nodes, running, false);
        settle(&mut st);
        let pending: usize = st.teams.iter().map(|t| t.pending.len()).sum();
        let mut req = Resources::new();
        req.set(ResourceName::gpu(), 1);
        let spec = WorkloadSpec::single("probe", "team-0", 1, req);
        if pending == 0 {
            g.bench_function(format!("fast-path/{nodes}-nodes-{running}-running"), |b| {
                b.iter(|| {
                    let wl = st.prepare(&spec, 1).expect("valid").expect("known names");
                    black_box(allot_core::scheduler::schedule_alone(&st, &wl, 1))
                })
            });
        }
        g.bench_function(format!("acct-copy/{nodes}-nodes-{running}-running"), |b| {
            b.iter(|| black_box(st.acct.clone()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

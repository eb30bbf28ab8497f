//! Scheduler throughput at cluster scale: `cargo bench -p allot-core --bench schedule`.
//!
//! A cohort of 64 teams (16 GPUs of nominal each) on 128 nodes of 8 GPUs, with thousands of
//! pending 1-8 GPU workloads at mixed priorities; then contended clusters of 1,000 and 10,000
//! nodes with 10,000 and 100,000 pending (LendAndBorrow teams, four priorities, preemption
//! possible), driven by a stream of arrivals and completions, each followed by one timed cycle:
//! the cycle time's p50 and p99 are printed for `schedule` and, where it finishes in reasonable
//! time, for `schedule_reference` (every workload one at a time). `ALLOT_BENCH_SMALL=1` runs
//! only small contended cases (what CI runs).
// A bench times itself: the one place of the crate that reads the clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;

use allot_common::quota::ResourceQuota;
use allot_common::{
    ClusterPolicy, FlavorQuota, PodSet, PriorityRef, ResourceName, Resources, TeamSpec,
    WorkloadSpec,
};
use allot_core::cycle_cache::CycleCache;
use allot_core::schedule;
use allot_core::scheduler::{schedule_cached, schedule_reference};
use allot_core::state::{Event, State, WlState};
use allot_core::WlId;
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
            labels: Default::default(),
            array: None,
        };
        st.submit(spec, i as i64).expect("valid workload");
    }
    st
}

/// Applies cycles until nothing changes (evictions complete at once).
fn settle(st: &mut State) {
    let mut cache = CycleCache::default();
    for _ in 0..100 {
        let plan = schedule_cached(st, 0, &mut cache);
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

/// A contended cluster: `nodes` p5 nodes, `teams` teams sharing them equally with
/// LendAndBorrow (borrowing limit 100 %), and `pending` one-pod and gang workloads of 1 to 64
/// GPUs at four priorities, submitted in order and settled (the cluster full, the rest waiting).
fn contended(nodes: usize, teams: usize, pending: usize) -> State {
    let mut st = State::new(ClusterPolicy {
        fair_share: true,
        ..Default::default()
    });
    let per_team = (nodes * 8 / teams) as i64;
    for t in 0..teams {
        let mut spec = TeamSpec::new(
            &format!("team-{t:03}"),
            vec![FlavorQuota {
                flavor: FLAVOR.into(),
                resources: vec![
                    (
                        ResourceName::cpu(),
                        ResourceQuota {
                            nominal: per_team * 24_000,
                            borrowing_limit: Some(per_team * 24_000),
                            lending_limit: None,
                        },
                    ),
                    (
                        ResourceName::gpu(),
                        ResourceQuota {
                            nominal: per_team,
                            borrowing_limit: Some(per_team),
                            lending_limit: None,
                        },
                    ),
                ],
            }],
        );
        spec.fair_share_weight = [10, 50, 100][t % 3];
        st.set_team(spec).expect("valid team");
    }
    let mut cap = Resources::new();
    cap.set(ResourceName::gpu(), 8);
    cap.set(ResourceName::cpu(), 192_000);
    for n in 0..nodes {
        st.add_node(&format!("p5-{n}"), FLAVOR, &cap)
            .expect("valid node");
    }
    let mut rng = Lcg(7);
    for i in 0..pending {
        submit_contended(&mut st, &mut rng, i, teams, 0);
    }
    settle(&mut st);
    st
}

fn submit_contended(st: &mut State, rng: &mut Lcg, i: usize, teams: usize, now: i64) {
    let kind = rng.next() % 100;
    let (count, gpus) = if kind < 55 {
        (1, [1, 1, 2, 4][rng.next() as usize % 4])
    } else if kind < 90 {
        (1, 8)
    } else {
        ([2, 4, 8][rng.next() as usize % 3], 8)
    };
    let mut req = Resources::new();
    req.set(ResourceName::gpu(), gpus);
    req.set(ResourceName::cpu(), gpus * 20_000);
    let spec = WorkloadSpec {
        name: format!("c{i}"),
        team: format!("team-{:03}", rng.next() as usize % teams),
        priority: PriorityRef::Value([50, 70, 80, 90][rng.next() as usize % 4]),
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
    st.submit(spec, now).expect("valid workload");
}

/// How `stream` runs each cycle.
#[derive(Clone, Copy)]
enum Cycle {
    /// `schedule_cached` with one cache across the stream, as `allot simulate` runs it.
    Cached,
    Fast,
    Reference,
}

/// Drives `st` with `steps` events (an arrival three times in four, else a running workload
/// finishing), one cycle after each, applied; returns each cycle's time and each plan's
/// application's (what the simulator does after every cycle; a replica applies only the
/// pending messages that changed).
fn stream(
    st: &mut State,
    teams: usize,
    steps: usize,
    how: Cycle,
) -> (Vec<std::time::Duration>, Vec<std::time::Duration>) {
    let mut cache = CycleCache::default();
    let mut rng = Lcg(99);
    let mut times = Vec::with_capacity(steps);
    let mut applies = Vec::with_capacity(steps);
    let mut running: Vec<WlId> = st
        .workloads()
        .values()
        .filter(|w| w.state == WlState::Admitted)
        .map(|w| w.id)
        .collect();
    for step in 0..steps {
        let now = 1 + step as i64;
        if !rng.next().is_multiple_of(4) || running.is_empty() {
            submit_contended(st, &mut rng, 1_000_000 + step, teams, now);
        } else {
            let i = rng.next() as usize % running.len();
            let id = running.swap_remove(i);
            let _ = st.finish(id, true, now);
        }
        let started = std::time::Instant::now();
        let plan = black_box(match how {
            Cycle::Cached => schedule_cached(st, now, &mut cache),
            Cycle::Fast => schedule(st, now),
            Cycle::Reference => schedule_reference(st, now),
        });
        times.push(started.elapsed());
        let started = std::time::Instant::now();
        let events = st.apply_plan(&plan, now);
        applies.push(started.elapsed());
        for e in events {
            match e {
                Event::Preempted { wl, .. } => {
                    st.complete_eviction(wl, now);
                }
                Event::Admitted { wl } => running.push(wl),
                _ => {}
            }
        }
        running.retain(|id| st.workload(*id).state == WlState::Admitted);
    }
    (times, applies)
}

fn percentiles(label: &str, mut times: Vec<std::time::Duration>) {
    times.sort();
    let at = |q: f64| {
        let i = ((times.len() as f64 - 1.0) * q).round() as usize;
        times[i].as_secs_f64() * 1000.0
    };
    eprintln!(
        "{label}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} cycles",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        times.len()
    );
}

/// The contended cases: (nodes, teams, pending, cycles timed, whether the reference runs too).
fn contended_cases() {
    let small = std::env::var("ALLOT_BENCH_SMALL").is_ok();
    // ALLOT_BENCH_CASE=NODES,TEAMS,PENDING,CYCLES[,1] runs that one case alone (cached and
    // fast; the reference too with a fifth field of 1).
    let one: Vec<(usize, usize, usize, usize, bool)> = std::env::var("ALLOT_BENCH_CASE")
        .ok()
        .and_then(|v| {
            let n: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            matches!(n.len(), 4 | 5).then(|| vec![(n[0], n[1], n[2], n[3], n.get(4) == Some(&1))])
        })
        .unwrap_or_default();
    let cases: &[(usize, usize, usize, usize, bool)] = if !one.is_empty() {
        &one
    } else if small {
        &[(50, 5, 500, 20, true)]
    } else {
        &[
            (1_000, 100, 10_000, 200, true),
            (1_000, 100, 100_000, 200, false),
            (10_000, 100, 100_000, 200, false),
        ]
    };
    for &(nodes, teams, pending, steps, with_reference) in cases {
        let setup = std::time::Instant::now();
        let st = contended(nodes, teams, pending);
        let waiting: usize = st.teams().iter().map(|t| t.pending.len()).sum();
        eprintln!(
            "contended {nodes} nodes, {teams} teams, {pending} submitted ({waiting} pending after settling; set up in {:.1}s)",
            setup.elapsed().as_secs_f64()
        );
        // What the leader copies for every cycle it hands off its raft thread.
        let mut copies: Vec<std::time::Duration> = (0..11)
            .map(|_| {
                let started = std::time::Instant::now();
                let copy = black_box(st.clone());
                let took = started.elapsed();
                drop(copy);
                took
            })
            .collect();
        copies.sort();
        eprintln!(
            "  state copy: p50 {:.2} ms over {} copies",
            copies[copies.len() / 2].as_secs_f64() * 1000.0,
            copies.len()
        );
        let (cycles, applies) = stream(&mut st.clone(), teams, steps, Cycle::Cached);
        percentiles("  schedule_cached", cycles);
        percentiles("  apply_plan (after schedule_cached)", applies);
        percentiles(
            "  schedule",
            stream(&mut st.clone(), teams, steps, Cycle::Fast).0,
        );
        if with_reference {
            percentiles(
                "  schedule_reference",
                stream(&mut st.clone(), teams, steps, Cycle::Reference).0,
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    contended_cases();
    if std::env::var("ALLOT_BENCH_SMALL").is_ok() || std::env::var("ALLOT_BENCH_CASE").is_ok() {
        return;
    }
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
        let pending: usize = st.teams().iter().map(|t| t.pending.len()).sum();
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
            b.iter(|| black_box(st.acct().clone()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

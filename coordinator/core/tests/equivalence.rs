//! The fast cycle (`schedule`, and `schedule_cached` with one cache kept across the history)
//! against the reference cycle (`schedule_reference`, every pending workload taken one at a
//! time): over seeded random histories of contended clusters, built so that many workloads of
//! few shapes wait in several teams at once (the case the fast cycle settles from the queues
//! alone) and so that arrivals often change nothing else (the case the cache reuses the last
//! cycle's outcomes), all must make the identical plan at every step: the same admissions with
//! the same placements, the same preemptions, targets and pending messages, in the same order
//! (`Plan::canonical`: preemptors' pending entries in order, the others, whose order carries
//! nothing, by workload id).
//!
//! `ALLOT_EQUIV_SEEDS=N` runs N seeds (default 120, 40 in debug builds); `ALLOT_EQUIV_SEED=S`
//! replays one.

#[path = "support/contended.rs"]
mod contended;

use allot_core::conditions::ConditionType;
use allot_core::cycle_cache::CycleCache;
use allot_core::scheduler::{
    schedule_cached, schedule_reference, schedule_settled, schedule_tuned,
};
use allot_core::state::{Event, WlState};
use allot_core::{schedule, WlId};
use contended::{cluster, workload, Rng};

/// Runs one seeded history; `Err` names the step where the cycles differ. Returns the plans
/// compared, the cycles the cache reused, the pending entries whose message the workload
/// already showed as the very same text (shared across cycles, compared by address when
/// applied), the workloads the settled fast path admitted, and the entries the cached cycle
/// settled in bulk.
/// What a history exercised: plans compared, cached cycles that reused the last one's
/// outcomes, messages shown already, admissions by the settled fast path, entries settled in
/// bulk, and waits recognised by what they read.
type Exercised = (usize, u64, usize, usize, usize, u64);

fn history(seed: u64) -> Result<Exercised, String> {
    let mut rng = Rng(seed);
    let mut cache = CycleCache::default();
    // A second cache, for the cached cycle that settles stretches of any length in one step.
    let mut cache_every = CycleCache::default();
    let (mut st, teams) = cluster(&mut rng);
    let mut next = 0usize;
    let mut now = 0i64;
    let mut compared = 0usize;
    let mut shared = 0usize;
    let mut bulk = 0usize;
    let mut fast_admitted = 0usize;
    for step in 0..60 {
        now += 1 + rng.below(5) as i64;
        if rng.below(6) == 0 {
            now += 1000;
        }
        // Arrivals in bursts (submit times collide), finishes and cancels.
        for _ in 0..rng.below(12) {
            let spec = workload(&mut rng, next, teams);
            next += 1;
            // The leader's fast path behind a settled backlog: where the last cycle found
            // every pending workload waiting and that still holds, they all still wait, and a
            // workload it admits is the reference cycle's first admission after the submit.
            let settled = cache.settled().filter(|s| s.holds(&st, now));
            if settled.is_some() {
                let reference = schedule_reference(&st, now);
                if reference.has_decisions() {
                    return Err(format!(
                        "seed {seed}, step {step}: settled holds, yet the reference decides\n{reference:#?}"
                    ));
                }
            }
            let fast = match (&settled, st.prepare(&spec, now)) {
                (Some(s), Ok(Some(wl))) => schedule_settled(&st, &wl, now, None, s),
                _ => None,
            };
            let Ok((id, _)) = st.submit(spec, now) else {
                continue;
            };
            if let Some(p) = fast {
                let reference = schedule_reference(&st, now);
                if p.admissions.first() != reference.admissions.first()
                    || p.admissions.first().map(|a| a.wl) != Some(id)
                {
                    return Err(format!(
                        "seed {seed}, step {step}: the settled fast path plans\n{p:#?}\nthe reference plans\n{reference:#?}"
                    ));
                }
                fast_admitted += 1;
                st.apply_plan(&p, now);
            }
        }
        // Half the steps only submit: nothing but the queues changes before the next cycle.
        let quiet = rng.below(2) == 0;
        let ids: Vec<WlId> = if quiet {
            Vec::new()
        } else {
            st.workloads().keys().collect()
        };
        if !quiet && rng.below(4) == 0 {
            // A node goes down or comes back: room changes, usage may not.
            let nodes = st.acct().nodes.nodes.len() as u64;
            let name = format!("p5-{}", rng.below(nodes));
            let _ = st.set_node_health(&name, rng.below(2) == 0, now);
        }
        for id in ids {
            let state = st.workload(id).state;
            let r = rng.below(100);
            if matches!(state, WlState::Admitted | WlState::Running) && r < 12 {
                let _ = st.finish(id, true, now);
            } else if state == WlState::Pending && r < 3 {
                let _ = st.cancel(id, now);
            } else if state == WlState::Evicting && r < 60 {
                st.complete_eviction(id, now);
            }
        }
        for cycle in 0..20 {
            let plan = st.plan_effect(&schedule(&st, now));
            let cached_plan = schedule_cached(&st, now, &mut cache);
            let cached = st.plan_effect(&cached_plan);
            let every = st.plan_effect(&schedule_tuned(&st, now, None, 1));
            let every_cached_plan = schedule_tuned(&st, now, Some(&mut cache_every), 1);
            let every_cached = st.plan_effect(&every_cached_plan);
            let reference_plan = schedule_reference(&st, now);
            let reference = st.plan_effect(&reference_plan);
            // Entries the cached cycle settled in bulk (see `shapes`): listed by the reference,
            // which takes every entry on its own, not by it. (With the default stretches, only
            // queues longer than these histories' are settled so.)
            bulk += reference_plan
                .pending
                .len()
                .saturating_sub(every_cached_plan.pending.len());
            compared += 1;
            if plan != reference {
                return Err(format!(
                    "seed {seed}, step {step}, cycle {cycle}: the fast cycle plans\n{plan:#?}\nthe reference plans\n{reference:#?}"
                ));
            }
            for (what, p) in [("fast", &every), ("cached", &every_cached)] {
                if *p != reference {
                    return Err(format!(
                        "seed {seed}, step {step}, cycle {cycle}: the {what} cycle that settles every stretch in one step plans\n{p:#?}\nthe reference plans\n{reference:#?}"
                    ));
                }
            }
            if cached != reference {
                return Err(format!(
                    "seed {seed}, step {step}, cycle {cycle}: the cached cycle plans\n{cached:#?}\nthe reference plans\n{reference:#?}"
                ));
            }
            shared += cached_plan
                .pending
                .iter()
                .filter(|(id, _, m)| {
                    st.workload(*id)
                        .condition(ConditionType::QuotaReserved)
                        .is_some_and(|c| std::sync::Arc::ptr_eq(&c.message, m))
                })
                .count();
            // The cached plan is the one applied: its texts are shared with the next cycle's.
            let events = st.apply_plan(&cached_plan, now);
            for e in &events {
                if let Event::Preempted { wl, .. } = e {
                    if rng.below(2) == 0 {
                        st.complete_eviction(*wl, now);
                    }
                }
            }
            // The accounting kept as usage moves (up a tree of cohorts too) agrees with the
            // one counted afresh.
            st.check_invariants()
                .map_err(|e| format!("seed {seed}, step {step}: {e}"))?;
            if !plan.has_decisions() {
                break;
            }
        }
    }
    Ok((
        compared,
        cache.reused,
        shared,
        fast_admitted,
        bulk,
        cache.recognised + cache_every.recognised,
    ))
}

#[test]
fn fast_cycle_equals_reference() {
    let seeds: Vec<u64> = match std::env::var("ALLOT_EQUIV_SEED") {
        Ok(s) => vec![s.parse().expect("ALLOT_EQUIV_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("ALLOT_EQUIV_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                // Fewer in debug builds (what `scripts/test` runs), where every skipped
                // fair-sharing search is also run to check the short-cut.
                .unwrap_or(if cfg!(debug_assertions) { 40 } else { 120 });
            (0..n).collect()
        }
    };
    let (mut plans, mut reused, mut shared, mut fast, mut bulk, mut recognised) =
        (0, 0, 0, 0, 0, 0);
    for seed in seeds {
        match history(seed) {
            Ok((n, r, s, f, b, w)) => {
                recognised += w;
                bulk += b;
                fast += f;
                plans += n;
                reused += r;
                shared += s;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // The cache was used, not only kept: some cycles started from the last one's outcomes.
    assert!(
        plans > 0 && reused > 0,
        "{plans} plans, {reused} cycles reused"
    );
    // Messages said again are the same texts, so applying them compares addresses.
    assert!(shared > 0, "no pending message was shared between cycles");
    // The fast path behind a settled backlog was taken, and checked, in some histories.
    assert!(fast > 0, "the settled fast path never admitted a workload");
    // Teams whose every shape waits, shown already, were passed over in bulk.
    assert!(bulk > 0, "no entry was settled in bulk");
    // Waits were recognised by what they read, not judged again (each checked against the
    // judgement in debug builds).
    assert!(recognised > 0, "no wait was recognised by what it read");
    eprintln!(
        "{plans} plans compared; {reused} cached cycles started from the last one's outcomes; {shared} pending messages shown already, as the same text; {fast} workloads admitted by the settled fast path; {bulk} entries settled in bulk; {recognised} waits recognised by what they read"
    );
}

/// Deep queues (hundreds of entries per team, as a real backlog has), where the cached cycle
/// settles stretches in one step with its default thresholds: every plan has the reference's
/// effect, and some entries were settled in bulk. (Stretches that end before a queue does
/// are rare at these sizes: `fast_cycle_equals_reference` checks them with every length.)
#[test]
fn deep_queues_settled_in_bulk_plan_as_the_reference() {
    let (mut plans, mut bulk) = (0usize, 0usize);
    for seed in 0..4u64 {
        let mut rng = Rng(1000 + seed);
        let mut cache = CycleCache::default();
        let (mut st, teams) = cluster(&mut rng);
        let mut next = 0usize;
        let mut now = 0i64;
        for _ in 0..(400 * teams) {
            let spec = workload(&mut rng, next, teams);
            next += 1;
            let _ = st.submit(spec, now);
        }
        for step in 0..12 {
            now += 1 + rng.below(5) as i64;
            for _ in 0..rng.below(4) {
                let spec = workload(&mut rng, next, teams);
                next += 1;
                let _ = st.submit(spec, now);
            }
            let held: Vec<WlId> = st
                .workloads()
                .values()
                .filter(|w| matches!(w.state, WlState::Admitted | WlState::Running))
                .map(|w| w.id)
                .collect();
            for id in held {
                if rng.below(10) == 0 {
                    let _ = st.finish(id, true, now);
                }
            }
            for cycle in 0..10 {
                let cached = schedule_cached(&st, now, &mut cache);
                let reference = schedule_reference(&st, now);
                assert_eq!(
                    st.plan_effect(&cached),
                    st.plan_effect(&reference),
                    "seed {seed}, step {step}, cycle {cycle}: the cached cycle's plan has another effect"
                );
                plans += 1;
                bulk += reference.pending.len().saturating_sub(cached.pending.len());
                for e in st.apply_plan(&cached, now) {
                    if let Event::Preempted { wl, .. } = e {
                        st.complete_eviction(wl, now);
                    }
                }
                st.check_invariants().expect("invariants");
                if !cached.has_decisions() {
                    break;
                }
            }
        }
    }
    assert!(bulk > 0, "no entry was settled in bulk over {plans} plans");
    eprintln!("{plans} plans over deep queues; {bulk} entries settled in bulk");
}

//! What `explain` says a workload's next cycle does is what the cycle does.
//!
//! Over seeded random contended clusters (the equivalence test's generator: teams with random
//! quotas, borrowing limits, preemption policies and stability rules, sometimes in two
//! departments, nodes in racks), after a random history of submits, cycles, finishes and
//! finished evictions, one workload is submitted with nothing else pending, so that it is the
//! first (and only) workload the next cycle decides. Then:
//! - `decision::decide` (what `explain` renders) must match the production cycle (`schedule`,
//!   and `schedule_cached` with the cache the history's cycles left, as a leader runs it):
//!   admitted with the same counts and flavors, preempting the same victims, or waiting with
//!   the same reason and message;
//! - `explain`'s verdict line must say that outcome, and where it preempts, name each victim.
//!
//! `ALLOT_EXPLAIN_SEEDS=N` runs N seeds (default 1000, 200 in debug builds);
//! `ALLOT_EXPLAIN_SEED=S` replays one.

#[path = "support/contended.rs"]
mod contended;

use std::collections::BTreeSet;

use allot_common::PriorityRef;
use allot_core::cycle_cache::CycleCache;
use allot_core::decision::decide;
use allot_core::explain::explain_state;
use allot_core::plan::WAITING_FOR_VICTIMS;
use allot_core::scheduler::schedule_cached;
use allot_core::state::{State, WlState};
use allot_core::verdict::Decided;
use allot_core::{schedule, WlId};
use contended::{cluster, workload, Rng};

/// A random history on a random cluster, its cycles run by the leader's cached cycle; returns
/// it at its last instant with nothing pending, and the cache the cycles left.
fn history(rng: &mut Rng) -> (State, usize, i64, usize, CycleCache) {
    let (mut st, teams) = cluster(rng);
    let mut cache = CycleCache::default();
    let mut now = 0i64;
    let mut next = 0usize;
    for _ in 0..(4 + rng.below(12)) {
        // Milliseconds, and now and then seconds: the minimum run times the generator draws
        // (a second or two) end within a history.
        now += 1 + rng.below(3) as i64;
        if rng.below(3) == 0 {
            now += 500 * (1 + rng.below(4) as i64);
        }
        for _ in 0..(2 + rng.below(12)) {
            let spec = workload(rng, next, teams);
            next += 1;
            let _ = st.submit(spec, now);
        }
        let plan = schedule_cached(&st, now, &mut cache);
        st.apply_plan(&plan, now);
        let ids: Vec<WlId> = st.workloads().keys().collect();
        for id in ids {
            let state = st.workload(id).state;
            match (state, rng.below(8)) {
                (WlState::Evicting, 0..=4) => {
                    st.complete_eviction(id, now);
                }
                (WlState::Admitted | WlState::Running, 0) => {
                    let _ = st.finish(id, true, now);
                }
                _ => {}
            }
        }
    }
    // Nothing else pending: the probe is the cycle's only decision.
    let pending: Vec<WlId> = st
        .workloads()
        .keys()
        .filter(|id| st.workload(*id).state == WlState::Pending)
        .collect();
    for id in pending {
        st.cancel(id, now)
            .expect("a pending workload can be cancelled");
    }
    (st, teams, now, next, cache)
}

/// One seed: `Err` says where `explain` and the cycle part.
fn check(seed: u64) -> Result<&'static str, String> {
    let mut rng = Rng(seed);
    let (mut st, teams, now, next, mut cache) = history(&mut rng);
    let mut spec = workload(&mut rng, next, teams);
    spec.priority = PriorityRef::Value(rng.pick(&[0, 10, 20, 30, 30]));
    let Ok((id, _)) = st.submit(spec, now) else {
        return Ok("refused");
    };
    let wl = st.workload(id).clone();
    let said = decide(&st, &wl, now);
    let lines = explain_state(&st, id, now);
    let verdict = lines
        .iter()
        .find(|l| l.starts_with("now: "))
        .ok_or_else(|| {
            format!(
                "seed {seed}: explain gives no verdict:\n{}",
                lines.join("\n")
            )
        })?;
    // The production cycle twice: fresh, and as a leader runs it, with the cache its earlier
    // cycles left (the incremental engine's kept outcomes must not part from the decision).
    let plan = schedule(&st, now);
    let cached = schedule_cached(&st, now, &mut cache);
    if cached.canonical() != plan.canonical() {
        return Err(format!(
            "seed {seed}: the cached cycle plans\n{cached:#?}\nthe fresh one\n{plan:#?}"
        ));
    }
    let differ = |what: &str| {
        Err(format!(
            "seed {seed}: {what}\ndecide: {said:?}\nexplain:\n{}\nthe cycle plans:\n{plan:#?}",
            lines.join("\n")
        ))
    };
    let admitted = plan.admissions.iter().find(|a| a.wl == id);
    let victims: BTreeSet<WlId> = plan
        .preemptions
        .iter()
        .filter(|p| p.preemptor == id)
        .map(|p| p.victim)
        .collect();
    let waits = plan.pending.iter().find(|(w, _, _)| *w == id);
    match &said {
        Decided::Admits { counts, flavors } => {
            let Some(a) = admitted else {
                return differ("explain admits it, the cycle does not");
            };
            let got_counts: Vec<u32> = a.admission.pod_sets.iter().map(|p| p.count).collect();
            let got_flavors: Vec<_> = a
                .admission
                .pod_sets
                .iter()
                .map(|p| p.flavors.clone())
                .collect();
            if &got_counts != counts || &got_flavors != flavors {
                return differ("admitted with other counts or flavors");
            }
            if !verdict.contains("fits now") {
                return differ("the verdict line does not say it fits");
            }
            Ok("admits")
        }
        Decided::Preempts { victims: v, .. } => {
            // The cycle plans the preemption of those not on their way out already, and the
            // preemptor waits for all of them, named in its message.
            let stopping: BTreeSet<WlId> = v
                .iter()
                .copied()
                .filter(|v| st.workload(*v).state != WlState::Evicting)
                .collect();
            let names: Vec<&str> = v
                .iter()
                .map(|v| st.workload(*v).spec.name.as_str())
                .collect();
            let waits_for = format!(
                "Pending the preemption of {} workload(s): {}",
                v.len(),
                names.join(", ")
            );
            let waits_for_them = waits
                .is_some_and(|(_, r, m)| &**r == WAITING_FOR_VICTIMS && m.ends_with(&waits_for));
            if admitted.is_some() || stopping != victims || !waits_for_them {
                return differ("explain preempts other victims than the cycle");
            }
            if !verdict.contains("only by preempting") {
                return differ("the verdict line does not say it preempts");
            }
            for v in v {
                let name = &st.workload(*v).spec.name;
                let named = lines.iter().any(|l| {
                    (l.contains("can preempt:") || l.contains("waiting for evictions"))
                        && l.contains(&format!("/{name} "))
                });
                if !named {
                    return differ(&format!("explain does not name victim {name}"));
                }
            }
            Ok("preempts")
        }
        Decided::Waits { reason, message } => {
            let Some((_, r, m)) = waits else {
                return differ("explain says it waits, the cycle lists no wait");
            };
            if admitted.is_some() || !victims.is_empty() || &**r != reason || &**m != message {
                return differ("it waits for another reason or message");
            }
            if verdict.contains("fits now") || verdict.contains("only by preempting") {
                return differ("the verdict line does not say it waits");
            }
            Ok("waits")
        }
    }
}

#[test]
fn explain_says_what_the_next_cycle_does() {
    if let Some(seed) = std::env::var("ALLOT_EXPLAIN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        if let Err(e) = check(seed) {
            panic!("{e}");
        }
        return;
    }
    let default = if cfg!(debug_assertions) { 200 } else { 1000 };
    let seeds: u64 = std::env::var("ALLOT_EXPLAIN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let mut seen = std::collections::BTreeMap::new();
    for seed in 0..seeds {
        match check(seed) {
            Ok(kind) => *seen.entry(kind).or_insert(0usize) += 1,
            Err(e) => panic!("{e}\n(replay: ALLOT_EXPLAIN_SEED={seed})"),
        }
    }
    eprintln!("outcomes over {seeds} seeds: {seen:?}");
    // The generator reaches every outcome, so each kind of agreement is tested.
    for kind in ["admits", "preempts", "waits"] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) * 20 >= seeds as usize,
            "too few seeds where the probe {kind}: {seen:?}"
        );
    }
}

//! The stability rules (docs/scheduling.md, "Work stays put"): the minimum run time and the
//! preemption budget spare a workload from the preemptions that rebalance borrowed capacity,
//! and from no other; each preemption's lost run time is kept.

mod support;

use allot_common::quota::WithinTeam;
use allot_common::{ClusterPolicy, ResourceName, Stability};
use allot_core::{Event, PreemptReason, WlState};
use support::{gpu_team, kueue, wl, Sim};

fn policy(minimum_run_time_s: u32, preemption_budget: u32) -> ClusterPolicy {
    ClusterPolicy {
        stability: Stability {
            minimum_run_time_s,
            preemption_budget,
        },
        ..kueue()
    }
}

/// Team `name` with `nominal` GPUs, fair-share weight 1.
fn team(name: &str, nominal: i64) -> allot_common::TeamSpec {
    let mut t = gpu_team(name, nominal, None);
    t.fair_share_weight = 1;
    t
}

/// The preemptions so far: (victim, reason).
fn preemptions(s: &Sim) -> Vec<(String, PreemptReason)> {
    s.events
        .iter()
        .filter_map(|e| match e {
            Event::Preempted { wl, reason, .. } => {
                Some((s.st.workload(*wl).spec.name.clone(), *reason))
            }
            _ => None,
        })
        .collect()
}

fn usage(s: &Sim, team: &str) -> i64 {
    let names = &s.st.names();
    let f = names.find_flavor(support::F).unwrap();
    let r = names.find_resource(&ResourceName::gpu()).unwrap();
    let fr = names.find_fr(f, r).unwrap();
    s.st.acct().usage(s.st.team_id(team).unwrap(), fr)
}

/// Two teams of 2 GPUs and a lender of 4; `a` borrows everything at 0, `b` asks for 4 at 1 s.
/// Its nominal comes back at once (reclamation is exempt); the 2 it would borrow by fair
/// sharing wait for `a`'s minimum run time, and come at its end.
#[test]
fn the_minimum_run_time_holds_fair_sharing_back_and_not_reclamation() {
    let mut s = Sim::new(
        policy(60, 0),
        vec![team("a", 2), team("b", 2), team("lender", 4)],
    );
    for i in 0..8 {
        s.submit(wl(&format!("a{i}"), "a", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    assert_eq!(usage(&s, "a"), 8);
    s.at(1_000);
    for i in 0..4 {
        s.submit(wl(&format!("b{i}"), "b", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    assert_eq!(usage(&s, "b"), 2, "b's nominal, reclaimed at once");
    let reasons: Vec<PreemptReason> = preemptions(&s).iter().map(|p| p.1).collect();
    assert_eq!(reasons, vec![PreemptReason::InCohortReclamation; 2]);
    // Each victim ran 1 s before it was preempted.
    for (name, _) in preemptions(&s) {
        let w = s.st.workload(s.st.find_workload(&name).unwrap());
        assert_eq!((w.preemptions, w.lost_run_ms), (1, 1_000), "{name}");
    }
    // Still spared a millisecond before the end; taken at it. `explain` says so, judged at
    // the time it is asked.
    let b2 = s.st.find_workload("b2").unwrap();
    let why = allot_core::explain::explain_state(&s.st, b2, 59_999).join("\n");
    assert!(
        why.contains("spared from the preemptions that rebalance borrowed capacity: a2, a3, a4 and 3 more have run less than the cluster's minimum run time (the first until t=60s)"),
        "{why}"
    );
    s.at(59_999).settle();
    assert_eq!(usage(&s, "b"), 2);
    let why = allot_core::explain::explain_state(&s.st, b2, 60_000).join("\n");
    assert!(why.contains("can preempt: a/"), "{why}");
    assert!(!why.contains("minimum run time"), "{why}");
    s.at(60_000).settle();
    assert_eq!((usage(&s, "a"), usage(&s, "b")), (4, 4));
    let reasons: Vec<PreemptReason> = preemptions(&s).iter().map(|p| p.1).collect();
    assert_eq!(reasons[2..], [PreemptReason::InCohortFairSharing; 2]);
}

/// A team's own higher-priority work preempts its lower-priority work however young.
#[test]
fn the_minimum_run_time_never_holds_a_teams_own_priority_back() {
    let mut a = team("a", 2);
    a.preemption.within_team = WithinTeam::LowerPriority;
    let mut s = Sim::new(policy(600, 1), vec![a]);
    s.submit(wl("low0", "a", 0, 1, &[("gpu", "1")]))
        .submit(wl("low1", "a", 0, 1, &[("gpu", "1")]))
        .settle();
    s.at(1_000)
        .submit(wl("high", "a", 10, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("high"), WlState::Admitted);
    assert_eq!(preemptions(&s).len(), 1);
    assert_eq!(preemptions(&s)[0].1, PreemptReason::InClusterQueue);
}

/// `b` borrows only (no nominal), so every preemption it makes is fair sharing. At 1 s it
/// takes two of `a`'s; they run again at 2 s once `b` is done, the most recently admitted of
/// `a`'s. At 3 s `b` asks again: without a budget the same two go (the search takes the most
/// recently admitted first); with a budget of 1 they are spared, and two others go.
#[test]
fn a_spent_preemption_budget_spares_a_workload_from_fair_sharing() {
    let run = |budget: u32| -> (Vec<String>, Vec<String>) {
        let mut s = Sim::new(
            policy(0, budget),
            vec![team("a", 2), team("b", 0), team("lender", 6)],
        );
        for i in 0..8 {
            s.submit(wl(&format!("a{i}"), "a", 0, 1, &[("gpu", "1")]));
        }
        s.settle();
        s.at(1_000);
        s.submit(wl("b0", "b", 0, 1, &[("gpu", "1")]))
            .submit(wl("b1", "b", 0, 1, &[("gpu", "1")]))
            .settle();
        let first: Vec<String> = preemptions(&s).into_iter().map(|p| p.0).collect();
        assert_eq!(first.len(), 2, "{first:?}");
        s.at(2_000);
        for b in ["b0", "b1"] {
            let id = s.st.find_workload(b).unwrap();
            let ev = s.st.finish(id, true, 2_000).unwrap();
            s.events.extend(ev);
        }
        s.settle();
        assert_eq!(usage(&s, "a"), 8, "the victims run again");
        s.at(3_000);
        s.submit(wl("b2", "b", 0, 1, &[("gpu", "1")]))
            .submit(wl("b3", "b", 0, 1, &[("gpu", "1")]))
            .settle();
        let all: Vec<String> = preemptions(&s).into_iter().map(|p| p.0).collect();
        (first, all[2..].to_vec())
    };
    let (first, second) = run(0);
    assert_eq!(first, second, "without a budget the youngest go again");
    let (first, second) = run(1);
    assert_eq!(second.len(), 2);
    assert!(
        second.iter().all(|v| !first.contains(v)),
        "spared: {first:?}, taken: {second:?}"
    );
}

/// The scheduler's cache keeps a wait while nothing it read changed; the end of a minimum run
/// time changes what a search may take with nothing else changed. A cached cycle at that end
/// must find the preemptions an uncached one finds.
#[test]
fn a_cached_cycle_sees_a_minimum_run_time_end() {
    use allot_core::cycle_cache::CycleCache;
    use allot_core::scheduler::{schedule, schedule_cached};
    let mut s = Sim::new(
        policy(60, 0),
        vec![team("a", 2), team("b", 2), team("lender", 4)],
    );
    for i in 0..8 {
        s.submit(wl(&format!("a{i}"), "a", 0, 1, &[("gpu", "1")]));
    }
    let mut cache = CycleCache::default();
    let mut cycle = |s: &mut Sim, now: i64| -> bool {
        let plan = schedule_cached(&s.st, now, &mut cache);
        assert_eq!(
            s.st.plan_effect(&plan),
            s.st.plan_effect(&schedule(&s.st, now)),
            "at {now}"
        );
        let ev = s.st.apply_plan(&plan, now);
        for v in ev.iter().filter_map(Event::preempted).collect::<Vec<_>>() {
            s.st.complete_eviction(v, now);
        }
        plan.has_decisions()
    };
    while cycle(&mut s, 0) {}
    for i in 0..4 {
        s.at(1_000)
            .submit(wl(&format!("b{i}"), "b", 0, 1, &[("gpu", "1")]));
    }
    while cycle(&mut s, 1_000) {}
    assert_eq!(usage(&s, "b"), 2);
    // Nothing but the clock moves.
    assert!(!cycle(&mut s, 30_000));
    while cycle(&mut s, 60_000) {}
    assert_eq!((usage(&s, "a"), usage(&s, "b")), (4, 4));
}

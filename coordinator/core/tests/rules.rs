//! One test (or more) per rule of shared/spec/scheduling.md, including its worked examples and
//! Kueue's where the spec defers to them.

use allot_common::quota::{
    BorrowWithinCohortPolicy, FlavorFungibility, PreemptionPolicy, QueueingStrategy,
    ReclaimWithinCohort, WhenCanBorrow, WithinTeam,
};
use allot_common::{
    ClusterPolicy, CohortSpec, FlavorQuota, PodSet, PriorityRef, ResourceName, Resources,
};
use allot_core::conditions::ConditionType;
use allot_core::quota::{self, Share};
use allot_core::state::{Event, WlState};
use allot_core::{schedule, verify, PreemptReason, TeamId};

mod support;

use support::{gpu_team, kueue, rq, team, wl, Sim, F};

/// What only these tests ask of the shared state.
impl Sim {
    fn message(&self, name: &str) -> String {
        let w = self.st.workload(self.st.find_workload(name).unwrap());
        w.pending_status()
            .map(|(_, m)| m.to_string())
            .unwrap_or_default()
    }
    fn preemptions(&self) -> Vec<(String, String, PreemptReason)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Preempted { wl, by, reason, .. } => Some((
                    self.st.workload(*wl).spec.name.clone(),
                    self.st.workload(*by).spec.name.clone(),
                    *reason,
                )),
                _ => None,
            })
            .collect()
    }
    fn admitted_order(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Admitted { wl } => Some(self.st.workload(*wl).spec.name.clone()),
                _ => None,
            })
            .collect()
    }
    fn fr(&self, res: &str) -> allot_core::FrId {
        let f = self.st.names().find_flavor(F).unwrap();
        let r = self
            .st
            .names()
            .find_resource(&ResourceName::parse(res).unwrap())
            .unwrap();
        self.st.names().find_fr(f, r).unwrap()
    }
    fn tid(&self, name: &str) -> TeamId {
        self.st.team_id(name).unwrap()
    }
}

// ---------------------------------------------------------------- §1 quota

#[test]
fn lending_limit_example_pool_of_four() {
    // Kueue: lend-a nominal 3 / lending limit 2, lend-b nominal 2 / lending limit 2: pool 4;
    // lend-b using 2 can get 2 more, not 3. lend-a keeps 1 for itself.
    let mut s = Sim::classical(vec![
        team("lend-a", &[(F, &[("cpu", rq(3000, None, Some(2000)))])]),
        team("lend-b", &[(F, &[("cpu", rq(2000, None, Some(2000)))])]),
    ]);
    s.submit(wl("b-2", "lend-b", 0, 1, &[("cpu", "2")]))
        .settle();
    let fr = s.fr("cpu");
    assert_eq!(
        quota::available(&s.st, s.st.acct(), s.tid("lend-b"), fr),
        2000
    );
    assert_eq!(
        quota::available(&s.st, s.st.acct(), s.tid("lend-a"), fr),
        3000
    );
    s.submit(wl("b-3", "lend-b", 0, 1, &[("cpu", "3")]))
        .settle();
    assert_eq!(s.state("b-3"), WlState::Pending);
    // The decision says which pair is short; how much more is needed is said when read.
    assert!(
        s.message("b-3").contains(&format!(
            "insufficient unused quota for cpu in flavor {F} (requested 3, nominal 2)"
        )),
        "{}",
        s.message("b-3")
    );
    let b3 = s.st.workload(s.st.find_workload("b-3").unwrap());
    let now = allot_core::explain::now_note(&s.st, b3).unwrap_or_default();
    assert!(
        now.contains(&format!(
            "cpu in flavor {F}: 1 more needed (available 2; team uses 2 of nominal 2)"
        )),
        "{now}"
    );
    s.submit(wl("b-2b", "lend-b", 0, 1, &[("cpu", "2")]))
        .settle();
    assert_eq!(s.state("b-2b"), WlState::Admitted);
    // lend-a still has its reserved 1 CPU.
    assert_eq!(
        quota::available(&s.st, s.st.acct(), s.tid("lend-a"), fr),
        1000
    );
}

#[test]
fn borrowing_limit_caps_use_and_message_has_numbers() {
    let mut s = Sim::classical(vec![gpu_team("a", 2, Some(1)), gpu_team("b", 10, None)]);
    s.submit(wl("big", "a", 0, 4, &[("gpu", "1")])).settle();
    assert_eq!(s.state("big"), WlState::Pending);
    let m = s.message("big");
    assert!(
        m.contains("borrowing limit for gpu in flavor ml.g5.8xlarge exceeded (requested 4, nominal 2, borrowing limit 1, borrowed now 0)"),
        "{m}"
    );
    s.submit(wl("three", "a", 0, 3, &[("gpu", "1")])).settle();
    assert_eq!(s.state("three"), WlState::Admitted);
}

#[test]
fn team_without_cohort_never_exceeds_nominal() {
    let mut t = gpu_team("solo", 2, None);
    t.cohort = None;
    let mut s = Sim::classical(vec![t, gpu_team("rich", 10, None)]);
    s.submit(wl("w", "solo", 0, 3, &[("gpu", "1")])).settle();
    assert_eq!(s.state("w"), WlState::Pending);
    s.submit(wl("w2", "solo", 0, 2, &[("gpu", "1")])).settle();
    assert_eq!(s.state("w2"), WlState::Admitted);
}

#[test]
fn quota_without_room_waits_with_a_message() {
    // Quotas add up to 4 GPUs on 2 nodes: the team has quota but no node has room.
    let mut s = Sim::classical(vec![gpu_team("a", 2, Some(0)), gpu_team("b", 2, Some(0))]);
    s.nodes(F, "g", 2, 1);
    s.submit(wl("a1", "a", 0, 2, &[("gpu", "1")])).settle();
    s.submit(wl("b1", "b", 0, 1, &[("gpu", "1")])).settle();
    assert_eq!(s.state("a1"), WlState::Admitted);
    assert_eq!(s.state("b1"), WlState::Pending);
    let m = s.message("b1");
    assert!(
        m.contains("no room") && m.contains("(0 of 1 pods fit)"),
        "{m}"
    );
    // The room left is said when read.
    let b1 = s.st.workload(s.st.find_workload("b1").unwrap());
    let now = allot_core::explain::now_note(&s.st, b1).unwrap_or_default();
    assert!(now.contains("gpu free 0 of 2"), "{now}");
    assert!(s
        .st
        .warnings()
        .iter()
        .any(|w| w.contains("above the healthy capacity")));
}

// ---------------------------------------------------------------- §3 order

#[test]
fn non_borrowing_first_then_priority_then_time_then_name() {
    let mut s = Sim::classical(vec![gpu_team("a", 1, None), gpu_team("b", 1, None)]);
    // All at t=0 in one cycle: a-hi would borrow (2 > 1), b-lo fits its nominal.
    s.submit(wl("a-hi", "a", 10, 2, &[("gpu", "1")]))
        .submit(wl("b-lo", "b", 0, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.admitted_order(), vec!["b-lo"]);
    assert_eq!(s.state("a-hi"), WlState::Pending);

    let mut s = Sim::classical(vec![gpu_team("a", 1, None), gpu_team("b", 1, None)]);
    s.submit(wl("z-first", "a", 0, 1, &[("gpu", "1")]))
        .submit(wl("a-second", "b", 0, 1, &[("gpu", "1")]))
        .submit(wl("hi", "a", 5, 1, &[("gpu", "1")]))
        .settle();
    // hi (priority 5) first; then z-first and a-second tie on everything but the name.
    let order = s.admitted_order();
    assert_eq!(order[0], "hi");
    assert_eq!(order[1], "a-second");
}

#[test]
fn every_pending_workload_is_considered_in_one_cycle() {
    let mut s = Sim::classical(vec![gpu_team("a", 100, None)]);
    for i in 0..50 {
        s.submit(wl(&format!("w{i:02}"), "a", 0, 1, &[("gpu", "1")]));
    }
    let plan = schedule(&s.st, 0);
    assert_eq!(
        plan.admissions.len(),
        50,
        "Kueue admits one per queue per cycle; allot admits all that fit"
    );
}

#[test]
fn best_effort_fifo_lets_smaller_work_pass_strict_fifo_blocks() {
    for (strategy, small_admitted) in [
        (QueueingStrategy::BestEffortFIFO, true),
        (QueueingStrategy::StrictFIFO, false),
    ] {
        let mut t = gpu_team("a", 2, Some(0));
        t.queueing = strategy;
        let mut s = Sim::classical(vec![t, gpu_team("b", 0, None)]);
        s.at(0).submit(wl("big", "a", 0, 3, &[("gpu", "1")]));
        s.at(1)
            .submit(wl("small", "a", 0, 1, &[("gpu", "1")]))
            .settle();
        assert_eq!(
            s.state("small") == WlState::Admitted,
            small_admitted,
            "{strategy:?}"
        );
        // Other teams are never blocked.
        let mut t2 = gpu_team("c", 1, None);
        t2.queueing = QueueingStrategy::StrictFIFO;
        s.st.set_team(t2).unwrap();
        s.submit(wl("other", "c", 0, 1, &[("gpu", "1")])).settle();
        assert_eq!(s.state("other"), WlState::Admitted);
    }
}

#[test]
fn flavor_order_prefers_fit_without_borrowing() {
    let mut s = Sim::classical(vec![
        team(
            "a",
            &[
                ("small", &[("gpu", rq(1, None, None))]),
                ("large", &[("gpu", rq(4, None, None))]),
            ],
        ),
        team(
            "lender",
            &[
                ("small", &[("gpu", rq(8, None, None))]),
                ("large", &[("gpu", rq(0, None, None))]),
            ],
        ),
    ]);
    s.submit(wl("two", "a", 0, 2, &[("gpu", "1")])).settle();
    // "small" fits only by borrowing (MayStopSearch stops there by default)...
    let adm =
        s.st.workload(s.st.find_workload("two").unwrap())
            .admission
            .clone()
            .unwrap();
    assert_eq!(
        s.st.names().flavor_name(adm.pod_sets[0].flavors[0].1),
        "small"
    );
    // ...with TryNextFlavor the search goes on and prefers "large" without borrowing.
    let mut t = team(
        "b",
        &[
            ("small", &[("gpu", rq(1, None, None))]),
            ("large", &[("gpu", rq(4, None, None))]),
        ],
    );
    t.flavor_fungibility = FlavorFungibility {
        when_can_borrow: WhenCanBorrow::TryNextFlavor,
        ..Default::default()
    };
    s.st.set_team(t).unwrap();
    s.submit(wl("two-b", "b", 0, 2, &[("gpu", "1")])).settle();
    let adm =
        s.st.workload(s.st.find_workload("two-b").unwrap())
            .admission
            .clone()
            .unwrap();
    assert_eq!(
        s.st.names().flavor_name(adm.pod_sets[0].flavors[0].1),
        "large"
    );
}

#[test]
fn pinned_instance_type_is_respected() {
    let mut s = Sim::classical(vec![team(
        "a",
        &[
            ("first", &[("gpu", rq(4, None, None))]),
            ("second", &[("gpu", rq(4, None, None))]),
        ],
    )]);
    let mut w = wl("pinned", "a", 0, 1, &[("gpu", "1")]);
    w.instance_type = Some("second".into());
    s.submit(w).settle();
    let adm =
        s.st.workload(s.st.find_workload("pinned").unwrap())
            .admission
            .clone()
            .unwrap();
    assert_eq!(
        s.st.names().flavor_name(adm.pod_sets[0].flavors[0].1),
        "second"
    );
    let mut bad = wl("bad", "a", 0, 1, &[("gpu", "1")]);
    bad.instance_type = Some("third".into());
    let e = s.st.submit(bad, 0).unwrap_err().to_string();
    assert!(e.contains("third") && e.contains("first, second"), "{e}");
}

#[test]
fn gang_of_pod_sets_is_all_or_nothing() {
    let mut s = Sim::classical(vec![team(
        "a",
        &[(
            F,
            &[
                ("gpu", rq(4, Some(0), None)),
                ("cpu", rq(2000, Some(0), None)),
            ],
        )],
    )]);
    let mut w = wl("gang", "a", 0, 1, &[("cpu", "1")]);
    w.pod_sets.push(PodSet {
        name: "workers".into(),
        count: 5,
        min_count: None,
        requests: {
            let mut r = Resources::new();
            r.set(ResourceName::gpu(), 1);
            r
        },
    });
    s.submit(w).settle();
    assert_eq!(s.state("gang"), WlState::Pending);
    assert_eq!(
        s.st.acct().usage(s.tid("a"), s.fr("cpu")),
        0,
        "the launcher alone is not admitted"
    );
}

#[test]
fn partial_admission_examples() {
    // 50 pods x 2 CPU, min 20, quota 50 CPU -> 25 pods.
    let mut s = Sim::classical(vec![team("a", &[(F, &[("cpu", rq(50_000, None, None))])])]);
    let mut w = wl("new", "a", 0, 50, &[("cpu", "2")]);
    w.pod_sets[0].min_count = Some(20);
    s.submit(w).settle();
    let adm =
        s.st.workload(s.st.find_workload("new").unwrap())
            .admission
            .clone()
            .unwrap();
    assert_eq!(adm.pod_sets[0].count, 25);
    // Kueue's multi-pod-set example: 20 fixed / 30 (min 10) / 15 (min 5) of 1 CPU in 50 -> 20/20/10.
    let mut s = Sim::classical(vec![team("a", &[(F, &[("cpu", rq(50_000, None, None))])])]);
    let ps = |name: &str, count: u32, min: Option<u32>| PodSet {
        name: name.into(),
        count,
        min_count: min,
        requests: {
            let mut r = Resources::new();
            r.set(ResourceName::cpu(), 1000);
            r
        },
    };
    let mut w = wl("multi", "a", 0, 1, &[]);
    w.pod_sets = vec![
        ps("one", 20, None),
        ps("two", 30, Some(10)),
        ps("three", 15, Some(5)),
    ];
    s.submit(w).settle();
    let adm =
        s.st.workload(s.st.find_workload("multi").unwrap())
            .admission
            .clone()
            .unwrap();
    let counts: Vec<u32> = adm.pod_sets.iter().map(|p| p.count).collect();
    assert_eq!(counts, vec![20, 20, 10]);
}

#[test]
fn no_candidates_holds_capacity_unless_reclaim_any() {
    // Kueue case 28 by hand: the hold is capped by the borrowing limit.
    let mut shared = team("shared", &[(F, &[("cpu", rq(4000, Some(0), None))])]);
    shared.preemption = PreemptionPolicy {
        within_team: WithinTeam::Never,
        reclaim_within_cohort: ReclaimWithinCohort::Never,
        borrow_within_cohort: Default::default(),
    };
    shared.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::Never;
    let mut a = team("cq-a", &[(F, &[("cpu", rq(0, Some(3000), None))])]);
    a.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    a.preemption.within_team = WithinTeam::Never;
    let mut b = team("cq-b", &[(F, &[("cpu", rq(0, None, None))])]);
    b.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    let mut s = Sim::classical(vec![shared, a, b]);
    s.submit(wl("admitted-a", "cq-a", 0, 1, &[("cpu", "2")]))
        .settle();
    s.at(1).submit(wl("a", "cq-a", 0, 1, &[("cpu", "3")]));
    s.at(2).submit(wl("b", "cq-b", 0, 1, &[("cpu", "2")]));
    let plan = schedule(&s.st, 2);
    // a holds 1 CPU (its borrowing limit leaves 1), so b (2 CPU) no longer fits this cycle.
    assert!(plan.admissions.is_empty(), "{plan:?}");
}

// ---------------------------------------------------------------- §4 preemption

#[test]
fn within_team_lower_priority_and_newer_equal() {
    let mut t = gpu_team("a", 2, Some(0));
    t.preemption.within_team = WithinTeam::LowerOrNewerEqualPriority;
    let mut s = Sim::classical(vec![t]);
    s.at(0)
        .submit(wl("old", "a", 0, 2, &[("gpu", "1")]))
        .settle();
    s.at(5)
        .submit(wl("new-eq", "a", 0, 2, &[("gpu", "1")]))
        .settle();
    assert!(
        s.preemptions().is_empty(),
        "a newer equal-priority workload does not preempt an older one"
    );
    // An older one submitted later in wall time cannot exist; a higher one preempts.
    s.at(6)
        .submit(wl("high", "a", 1, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![("old".into(), "high".into(), PreemptReason::InClusterQueue)]
    );
}

#[test]
fn larger_than_nominal_preempts_only_through_borrow_within_cohort() {
    let mut a = gpu_team("a", 1, None);
    a.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::Never;
    let mut s = Sim::classical(vec![a, gpu_team("b", 2, None)]);
    s.submit(wl("b-lo", "b", -5, 3, &[("gpu", "1")])).settle();
    s.at(1)
        .submit(wl("a-big", "a", 10, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("a-big"), WlState::Pending);
    assert!(s.preemptions().is_empty());
    // With borrow_within_cohort LowerPriority it may preempt lower-priority borrowed work.
    let mut a2 = gpu_team("a", 1, None);
    a2.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::LowerPriority;
    s.st.set_team(a2).unwrap();
    s.at(2).settle();
    assert_eq!(
        s.preemptions(),
        vec![(
            "b-lo".into(),
            "a-big".into(),
            PreemptReason::InCohortReclaimWhileBorrowing
        )]
    );
}

#[test]
fn reclaim_any_takes_back_from_higher_priority_borrower() {
    let mut s = Sim::classical(vec![gpu_team("a", 2, None), gpu_team("b", 2, None)]);
    s.submit(wl("b-high", "b", 100, 4, &[("gpu", "1")]))
        .settle();
    s.at(1)
        .submit(wl("a-low", "a", 0, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![(
            "b-high".into(),
            "a-low".into(),
            PreemptReason::InCohortReclamation
        )]
    );
    assert_eq!(s.state("a-low"), WlState::Admitted);
    // With LowerPriority reclaim it would not.
    let mut a = gpu_team("a", 2, None);
    a.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    let mut s = Sim::classical(vec![a, gpu_team("b", 2, None)]);
    s.submit(wl("b-high", "b", 100, 4, &[("gpu", "1")]))
        .settle();
    s.at(1)
        .submit(wl("a-low", "a", 0, 2, &[("gpu", "1")]))
        .settle();
    assert!(s.preemptions().is_empty());
}

#[test]
fn minimal_victim_set_keeps_unneeded_low_priority() {
    // Kueue "minimal set excludes low priority": low (1), mid (2), high (3) of 6; in (2) evicts mid only.
    let t = team("s", &[(F, &[("cpu", rq(6000, None, None))])]);
    let mut t = t;
    t.cohort = None;
    let mut s = Sim::classical(vec![t]);
    s.submit(wl("low", "s", -1, 1, &[("cpu", "1")]))
        .submit(wl("mid", "s", 0, 1, &[("cpu", "2")]))
        .submit(wl("high", "s", 1, 1, &[("cpu", "3")]))
        .settle();
    s.at(1)
        .submit(wl("in", "s", 1, 1, &[("cpu", "2")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![("mid".into(), "in".into(), PreemptReason::InClusterQueue)]
    );
    assert_eq!(s.state("low"), WlState::Admitted);
}

/// Teams a, b and c of 2 GPUs each (classical preemption); c fills the cohort's 6 with `n`
/// workloads of `gpus` GPUs; then a-one and b-one ask one GPU each: the state and the next
/// cycle's plan.
fn c_full_then_a_and_b_ask_one_gpu(n: usize, gpus: &str) -> (Sim, allot_core::Plan) {
    let mut s = Sim::classical(vec![
        gpu_team("a", 2, None),
        gpu_team("b", 2, None),
        gpu_team("c", 2, None),
    ]);
    for i in 0..n {
        s.submit(wl(&format!("c{i}"), "c", 0, 1, &[("gpu", gpus)]));
    }
    s.settle();
    s.at(1)
        .submit(wl("a-one", "a", 0, 1, &[("gpu", "1")]))
        .submit(wl("b-one", "b", 0, 1, &[("gpu", "1")]));
    let plan = schedule(&s.st, 1);
    (s, plan)
}

/// The preemptors of one cycle are searched for as if the cycle's earlier victims had left:
/// they will have by the time any of them is admitted. Counting those victims and their
/// preemptors both made each later search take victims for the earlier preemptors too.
#[test]
fn preemptors_of_one_cycle_take_only_the_victims_each_needs() {
    let (mut s, plan) = c_full_then_a_and_b_ask_one_gpu(6, "1");
    let mut by: Vec<String> = plan
        .preemptions
        .iter()
        .map(|p| s.st.workload(p.preemptor).spec.name.clone())
        .collect();
    by.sort();
    assert_eq!(by, ["a-one", "b-one"], "one victim each: {plan:?}");
    s.settle();
    assert_eq!(s.preemptions().len(), 2);
    let fr = s.fr("gpu");
    assert_eq!(s.st.acct().usage(s.tid("c"), fr), 4);
    assert_eq!(s.state("a-one"), WlState::Admitted);
    assert_eq!(s.state("b-one"), WlState::Admitted);
}

/// A workload that fits once an earlier preemptor's victims have left takes no victim of its
/// own: it waits for them, says so, and is admitted when they are gone.
#[test]
fn room_a_victim_frees_beyond_its_preemptors_need_is_waited_for_not_taken_again() {
    let (mut s, plan) = c_full_then_a_and_b_ask_one_gpu(3, "2");
    assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
    let waits =
        s.st.workload(plan.preemptions[0].preemptor)
            .spec
            .name
            .clone();
    let other = if waits == "a-one" { "b-one" } else { "a-one" };
    let id = s.st.find_workload(other).unwrap();
    let (_, _, message) = plan
        .pending
        .iter()
        .find(|(w, _, _)| *w == id)
        .expect("the other waits");
    assert!(
        message
            .contains("it fits once the workloads preempted for others in this cycle have stopped")
            && !message.contains("No workload may be preempted"),
        "{message}"
    );
    s.settle();
    assert_eq!(s.preemptions().len(), 1);
    assert_eq!(s.state("a-one"), WlState::Admitted);
    assert_eq!(s.state("b-one"), WlState::Admitted);
}

#[test]
fn preemption_message_names_preemptor_reason_and_numbers() {
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 2, None),
        gpu_team("team-b", 2, None),
    ]);
    s.submit(wl("train-1", "team-a", 0, 3, &[("gpu", "1")]))
        .settle();
    s.at(1)
        .submit(wl("train-2", "team-b", 0, 2, &[("gpu", "1")]))
        .settle();
    let v = s.st.workload(s.st.find_workload("train-1").unwrap());
    let c = v.condition(ConditionType::Preempted).unwrap();
    assert!(
        c.message.starts_with(
            "Preempted to accommodate workload team-b/train-2 due to reclamation within the cohort"
        ),
        "{}",
        c.message
    );
    assert!(c.message.contains("borrowing gpu 1"), "{}", c.message);
    assert_eq!(v.preemptions, 1);
}

// ---------------------------------------------------------------- §5 placement

#[test]
fn devices_are_never_shared_and_freed_devices_are_reused() {
    let mut s = Sim::classical(vec![gpu_team("a", 8, None)]);
    s.nodes(F, "p", 1, 8);
    for i in 0..4 {
        s.submit(wl(&format!("j{i}"), "a", 0, 1, &[("gpu", "2")]));
    }
    s.settle();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..4 {
        let w = s.st.workload(s.st.find_workload(&format!("j{i}")).unwrap());
        for (_, p) in &w.admission.as_ref().unwrap().placement {
            for (_, idx) in &p.devices {
                for d in idx {
                    assert!(seen.insert(*d), "device {d} given twice");
                }
            }
        }
    }
    assert_eq!(seen.len(), 8);
    let id = s.st.find_workload("j1").unwrap();
    s.st.finish(id, true, 1).unwrap();
    s.at(1)
        .submit(wl("next", "a", 0, 1, &[("gpu", "2")]))
        .settle();
    assert_eq!(s.state("next"), WlState::Admitted);
}

#[test]
fn reclaim_frees_devices_on_a_node_not_only_quota() {
    // Spec's reclaim-for-placement: quota says b may run, nodes say no; a's borrowed job goes.
    let mut s = Sim::classical(vec![gpu_team("a", 2, None), gpu_team("b", 2, None)]);
    s.nodes(F, "g", 3, 1);
    s.submit(wl("a-own", "a", 0, 2, &[("gpu", "1")])).settle();
    s.at(5)
        .submit(wl("a-borrowed", "a", 0, 1, &[("gpu", "1")]))
        .settle();
    s.at(10)
        .submit(wl("b-one", "b", 0, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![(
            "a-borrowed".into(),
            "b-one".into(),
            PreemptReason::InCohortReclamation
        )]
    );
    assert_eq!(s.state("a-own"), WlState::Admitted);
    assert_eq!(s.state("b-one"), WlState::Admitted);
}

#[test]
fn stale_admission_is_rejected_at_apply_time_not_applied_half() {
    let mut s = Sim::classical(vec![gpu_team("a", 2, None)]);
    s.nodes(F, "g", 1, 2);
    s.submit(wl("x", "a", 0, 2, &[("gpu", "1")]));
    let plan = schedule(&s.st, 0);
    assert_eq!(plan.admissions.len(), 1);
    // The node fails between deciding and applying: the decision is stale.
    s.st.set_node_health("g0", false, 0).unwrap();
    let results = verify(&s.st, &plan);
    assert!(results[0].is_err());
    let ev = s.st.apply_plan(&plan, 0);
    assert!(matches!(ev[0], Event::AdmissionRetried { .. }));
    assert_eq!(s.state("x"), WlState::Pending);
    s.st.check_invariants().unwrap();
}

#[test]
fn a_stale_plan_does_not_preempt_for_a_preemptor_that_left_the_queue() {
    // The leader computes large cycles off its raft thread: by the time a plan applies, its
    // preemptor may have been cancelled. Its victim is left running.
    let mut t = gpu_team("a", 2, Some(0));
    t.preemption.within_team = WithinTeam::LowerOrNewerEqualPriority;
    let mut s = Sim::classical(vec![t]);
    s.nodes(F, "g", 1, 2);
    s.at(0)
        .submit(wl("old", "a", 0, 2, &[("gpu", "1")]))
        .settle();
    s.at(6).submit(wl("high", "a", 1, 2, &[("gpu", "1")]));
    let plan = schedule(&s.st, 6);
    assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
    let high = s.st.find_workload("high").unwrap();
    s.st.cancel(high, 7).unwrap();
    let ev = s.st.apply_plan(&plan, 8);
    assert!(
        ev.iter().all(|e| e.preempted().is_none()),
        "a victim was preempted for a cancelled preemptor: {ev:?}"
    );
    assert_eq!(s.state("old"), WlState::Admitted);
    s.st.check_invariants().unwrap();
}

#[test]
fn node_failure_requeues_and_keeps_submit_time() {
    let mut s = Sim::classical(vec![gpu_team("a", 4, None)]);
    s.nodes(F, "g", 2, 2);
    s.submit(wl("w", "a", 0, 2, &[("gpu", "1")])).settle();
    let node = {
        let w = s.st.workload(s.st.find_workload("w").unwrap());
        s.st.acct()
            .nodes
            .node(w.admission.as_ref().unwrap().placement[0].1.node)
            .name
            .clone()
    };
    let ev = s.st.set_node_health(&node, false, 10).unwrap();
    assert!(matches!(ev[0], Event::Evicted { .. }));
    s.at(10).settle();
    let w = s.st.workload(s.st.find_workload("w").unwrap());
    assert_eq!(w.submit_time, 0);
    assert_eq!(w.state, WlState::Admitted, "re-placed on the healthy node");
    assert!(w
        .admission
        .as_ref()
        .unwrap()
        .placement
        .iter()
        .all(|(_, p)| s.st.acct().nodes.node(p.node).name != node));
}

// ---------------------------------------------------------------- §6 fair sharing

#[test]
fn dominant_share_examples() {
    // Kueue: pool 8, a nominal 3 using 8 -> (8-3)/8 * 1000 = 625; weight 2 halves it.
    let mut s = Sim::new(
        kueue(),
        vec![gpu_team("a", 3, None), gpu_team("b", 5, None)],
    );
    s.submit(wl("a8", "a", 0, 8, &[("gpu", "1")])).settle();
    let sh = quota::share(&s.st, s.st.acct(), s.tid("a"), &[]);
    assert_eq!(
        sh,
        Share {
            infinite: false,
            num: 625,
            den: 1
        }
    );
    let mut a2 = gpu_team("a", 3, None);
    a2.fair_share_weight = 2;
    s.st.set_team(a2).unwrap();
    let sh = quota::share(&s.st, s.st.acct(), s.tid("a"), &[]);
    assert!((sh.value() - 312.5).abs() < 1e-9);
    let mut a0 = gpu_team("a", 3, None);
    a0.fair_share_weight = 0;
    s.st.set_team(a0).unwrap();
    assert!(quota::share(&s.st, s.st.acct(), s.tid("a"), &[]).infinite);
    assert_eq!(
        quota::share(&s.st, s.st.acct(), s.tid("b"), &[]),
        Share::ZERO
    );
}

#[test]
fn idle_compute_goes_by_weight_whatever_the_submit_order() {
    let mut heavy = gpu_team("heavy", 1, None);
    heavy.fair_share_weight = 80;
    let mut light = gpu_team("light", 1, None);
    light.fair_share_weight = 20;
    let mut idle = gpu_team("idle", 10, None);
    idle.fair_share_weight = 50;
    let mut s = Sim::new(kueue(), vec![idle, heavy, light]);
    for i in 0..6 {
        s.submit(wl(&format!("l{i}"), "light", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    s.at(1);
    for i in 0..12 {
        s.submit(wl(&format!("h{i:02}"), "heavy", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    let fr = s.fr("gpu");
    assert_eq!(s.st.acct().usage(s.tid("heavy"), fr), 9);
    assert_eq!(s.st.acct().usage(s.tid("light"), fr), 3);
}

#[test]
fn fair_sharing_never_preempts_back_and_forth() {
    let mut a = gpu_team("a", 2, None);
    a.fair_share_weight = 1;
    let mut b = gpu_team("b", 2, None);
    b.fair_share_weight = 1;
    let mut s = Sim::new(kueue(), vec![a, b, gpu_team("lender", 4, None)]);
    for i in 0..8 {
        s.submit(wl(&format!("a{i}"), "a", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    s.at(1);
    for i in 0..8 {
        s.submit(wl(&format!("b{i}"), "b", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    let fr = s.fr("gpu");
    assert_eq!(s.st.acct().usage(s.tid("a"), fr), 4);
    assert_eq!(s.st.acct().usage(s.tid("b"), fr), 4);
    // Settling again changes nothing.
    let n = s.events.len();
    s.at(2).settle();
    assert_eq!(s.events.len(), n);
}

#[test]
fn level_shares_do_not_preempt_round_and_round() {
    // x and y each borrow 20 of the cohort's 44 cpu (share 454), more than either borrows of
    // its 8 GPUs, so one GPU more or less moves neither share. y runs 5 GPUs (2 borrowed:
    // 250), x its 3; x asks a fourth. Taking one of y's leaves y at 454 and puts x at 454:
    // level. Were that enough, the victim would take one of x's back on the same test, that
    // one one of y's, and so on without end (only the last evictor is out of bounds for each).
    // At level shares nobody is evicted; x4 waits and says so.
    let sizes: [(&str, i64, i64); 3] = [("x", 3, 2), ("y", 3, 2), ("lender", 2, 40)];
    let teams = sizes
        .iter()
        .map(|(n, g, c)| {
            team(
                n,
                &[(
                    F,
                    &[
                        ("gpu", rq(*g, None, None)),
                        ("cpu", rq(*c * 1000, None, None)),
                    ],
                )],
            )
        })
        .collect();
    let mut s = Sim::fair_share(teams);
    s.submit(wl("x-cpu", "x", 0, 1, &[("cpu", "22")]))
        .submit(wl("y-cpu", "y", 0, 1, &[("cpu", "22")]));
    for i in 1..=3 {
        s.submit(wl(&format!("x{i}"), "x", 0, 1, &[("gpu", "1")]));
    }
    for i in 1..=5 {
        s.submit(wl(&format!("y{i}"), "y", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    let share = |s: &Sim, t: &str| quota::share(&s.st, s.st.acct(), s.tid(t), &[]);
    assert_eq!(share(&s, "x"), share(&s, "y"));
    assert_eq!(share(&s, "x").value().round(), 455.0);
    s.at(1)
        .submit(wl("x4", "x", 0, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.preemptions(), vec![]);
    assert_eq!(s.state("x4"), WlState::Pending);
    assert!(s.message("x4").contains("gpu"), "{}", s.message("x4"));
}

#[test]
fn when_no_candidate_passes_the_final_share_test_the_initial_share_test_takes_the_first() {
    // Cohort of 8 GPUs (a 2, b 2, lender 4). b runs two 3-GPU workloads (borrowing 4: share
    // 4/8); a runs 2 of its own, which a-new may not take (higher priority), and a-new asks 2
    // more (a would borrow 2: share 2/8). Taking either of b's leaves b borrowing 1 (1/8 <
    // 2/8): both fail LessThanOrEqualToFinalShare, the search passes b over without a share
    // per candidate, and LessThanInitialShare (2/8 < 4/8) takes b's first in the search's
    // order, the lower priority one, alone.
    let mut s = Sim::fair_share(vec![
        gpu_team("a", 2, None),
        gpu_team("b", 2, None),
        gpu_team("lender", 4, None),
    ]);
    s.submit(wl("b-high", "b", 5, 1, &[("gpu", "3")]))
        .submit(wl("b-low", "b", 0, 1, &[("gpu", "3")]))
        .submit(wl("a-base", "a", 20, 1, &[("gpu", "2")]))
        .settle();
    for name in ["b-high", "b-low", "a-base"] {
        assert_eq!(s.state(name), WlState::Admitted, "{name}");
    }
    s.at(1)
        .submit(wl("a-new", "a", 10, 1, &[("gpu", "2")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![(
            "b-low".to_string(),
            "a-new".to_string(),
            PreemptReason::InCohortFairSharing
        )]
    );
    assert_eq!(s.state("a-new"), WlState::Admitted);
    assert_eq!(s.state("b-high"), WlState::Admitted);
    assert_eq!(s.state("a-base"), WlState::Admitted);
}

#[test]
fn a_team_passed_over_still_gets_the_initial_share_test_when_the_rest_are_below() {
    // As above, with a third borrower below the preemptor: b (borrowing 3 of 10: 300) fails
    // the final-share test on every candidate; c (borrowing 1: 100) is below a-new's 200, so
    // no team left can pass either test. The second pass still looks at b, passed over, and
    // LessThanInitialShare (200 < 300) takes b's first candidate.
    let mut s = Sim::fair_share(vec![
        gpu_team("a", 2, None),
        gpu_team("b", 2, None),
        gpu_team("c", 2, None),
        gpu_team("lender", 4, None),
    ]);
    s.submit(wl("b-high", "b", 5, 1, &[("gpu", "3")]))
        .submit(wl("b-low", "b", 0, 1, &[("gpu", "2")]))
        .submit(wl("c1", "c", 0, 1, &[("gpu", "3")]))
        .submit(wl("a-base", "a", 20, 1, &[("gpu", "2")]))
        .settle();
    for name in ["b-high", "b-low", "c1", "a-base"] {
        assert_eq!(s.state(name), WlState::Admitted, "{name}");
    }
    s.at(1)
        .submit(wl("a-new", "a", 10, 1, &[("gpu", "2")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![(
            "b-low".to_string(),
            "a-new".to_string(),
            PreemptReason::InCohortFairSharing
        )]
    );
    assert_eq!(s.state("a-new"), WlState::Admitted);
}

#[test]
fn a_search_no_rival_above_the_preemptor_can_make_room_for_takes_nothing() {
    // a (nominal 3) runs a-base (2 GPUs, above a-new's priority); a-new asks 3, so a would
    // borrow 2 of the cohort's 10. b borrows 3 (share above a's), but a may reclaim only lower
    // priorities: of b's, only b-low (1 GPU). c borrows 1 (share below a's): fair sharing never
    // picks it, though its c-low (3 GPUs) gone would make room. So no search can fit: b-low
    // alone leaves 1 GPU free of the 3 needed. The search knows before it takes anything off
    // (its bound counts only teams above the lowest share a can have), and debug builds check
    // that against the search bounded by every candidate.
    let mut a = gpu_team("a", 3, None);
    a.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    let mut s = Sim::fair_share(vec![
        a,
        gpu_team("b", 2, None),
        gpu_team("c", 2, None),
        gpu_team("lender", 3, None),
    ]);
    s.submit(wl("a-base", "a", 20, 1, &[("gpu", "2")]))
        .submit(wl("b-high", "b", 50, 1, &[("gpu", "4")]))
        .submit(wl("b-low", "b", 0, 1, &[("gpu", "1")]))
        .submit(wl("c-low", "c", 0, 1, &[("gpu", "3")]))
        .settle();
    for name in ["a-base", "b-high", "b-low", "c-low"] {
        assert_eq!(s.state(name), WlState::Admitted, "{name}");
    }
    s.at(1)
        .submit(wl("a-new", "a", 10, 1, &[("gpu", "3")]))
        .settle();
    assert_eq!(s.preemptions(), vec![]);
    assert_eq!(s.state("a-new"), WlState::Pending);
    for name in ["a-base", "b-high", "b-low", "c-low"] {
        assert_eq!(s.state(name), WlState::Admitted, "{name}");
    }
}

// ---------------------------------------------------------------- §8 cohort-owned quota

#[test]
fn cohort_owned_quota_and_idle_sharing() {
    let mut s = Sim::classical(vec![gpu_team("a", 0, None)]);
    s.st.set_cohort(CohortSpec {
        fair_share_weight: None,
        name: "shared-pool".into(),
        parent: None,
        quotas: vec![FlavorQuota {
            flavor: F.into(),
            resources: vec![(ResourceName::gpu(), rq(3, None, None))],
        }],
    })
    .unwrap();
    s.submit(wl("w", "a", 0, 3, &[("gpu", "1")])).settle();
    assert_eq!(s.state("w"), WlState::Admitted);

    // Idle resource sharing: 4 GPUs on nodes, 1 of quota: 3 idle become borrowable.
    let mut s = Sim::new(
        ClusterPolicy {
            idle_resource_sharing: true,
            ..kueue()
        },
        vec![gpu_team("a", 1, None)],
    );
    s.nodes(F, "g", 4, 1);
    s.submit(wl("w", "a", 0, 4, &[("gpu", "1")])).settle();
    assert_eq!(s.state("w"), WlState::Admitted);
    let mut s = Sim::new(kueue(), vec![gpu_team("a", 1, None)]);
    s.nodes(F, "g", 4, 1);
    s.submit(wl("w", "a", 0, 4, &[("gpu", "1")])).settle();
    assert_eq!(s.state("w"), WlState::Pending);
}

// ---------------------------------------------------------------- §8 nested cohorts

/// A team of `dept` with `nominal` GPUs, all lendable, that reclaims from lower priorities.
fn dept_team(name: &str, dept: &str, nominal: i64) -> allot_common::TeamSpec {
    let mut t = gpu_team(name, nominal, None);
    t.cohort = Some(dept.into());
    t.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    t
}

/// Cohort `name` under `parent` with GPU limits (no quota of its own).
fn dept(name: &str, parent: &str, bl: Option<i64>, ll: Option<i64>) -> CohortSpec {
    CohortSpec {
        fair_share_weight: None,
        name: name.into(),
        parent: Some(parent.into()),
        quotas: vec![FlavorQuota {
            flavor: F.into(),
            resources: vec![(ResourceName::gpu(), rq(0, bl, ll))],
        }],
    }
}

/// Two departments under one organisation: a1 and a2 (2 GPUs each) in dept-a, b1 (2) in
/// dept-b, 8 one-GPU nodes.
fn org(a_limits: (Option<i64>, Option<i64>), b_limits: (Option<i64>, Option<i64>)) -> Sim {
    let mut s = Sim::classical(vec![
        dept_team("a1", "dept-a", 2),
        dept_team("a2", "dept-a", 2),
        dept_team("b1", "dept-b", 2),
    ]);
    s.st.set_cohort(dept("dept-a", "org", a_limits.0, a_limits.1))
        .unwrap();
    s.st.set_cohort(dept("dept-b", "org", b_limits.0, b_limits.1))
        .unwrap();
    s.nodes(F, "g", 8, 1);
    s
}

#[test]
fn a_team_borrows_through_its_department_and_the_organisation() {
    let mut s = org((None, None), (None, None));
    let fr = s.fr("gpu");
    // Everything is lendable: a1 may use the whole organisation's 6.
    assert_eq!(quota::potential_available(&s.st, s.tid("a1"), fr), 6);
    s.submit(wl("a1-w", "a1", 0, 5, &[("gpu", "1")])).settle();
    assert_eq!(s.state("a1-w"), WlState::Admitted);
    assert_eq!(quota::available(&s.st, s.st.acct(), s.tid("b1"), fr), 1);
    let dept_a = quota::Limits::cohort_of(&s.st, s.tid("a1"));
    assert!(quota::cohort_borrowing(&s.st, s.st.acct(), dept_a, fr));
}

#[test]
fn a_lending_limit_keeps_a_departments_quota_and_a_borrowing_limit_caps_it() {
    // dept-b lends nothing up: the organisation's pool is dept-a's 4.
    let mut s = org((None, None), (None, Some(0)));
    let fr = s.fr("gpu");
    assert_eq!(quota::potential_available(&s.st, s.tid("a1"), fr), 4);
    assert_eq!(quota::potential_available(&s.st, s.tid("b1"), fr), 6);
    s.submit(wl("a1-w", "a1", 0, 5, &[("gpu", "1")])).settle();
    assert_eq!(s.state("a1-w"), WlState::Pending);
    assert!(
        s.message("a1-w").contains("request 5 > maximum capacity 4"),
        "beyond what the tree could ever give: {}",
        s.message("a1-w")
    );
    // dept-a may borrow at most 1 above its 4 from the organisation.
    let mut s = org((Some(1), None), (None, None));
    assert_eq!(quota::potential_available(&s.st, s.tid("a1"), fr), 5);
    s.submit(wl("a1-w", "a1", 0, 5, &[("gpu", "1")])).settle();
    s.at(1)
        .submit(wl("a2-w", "a2", 0, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("a1-w"), WlState::Admitted);
    assert_eq!(s.state("a2-w"), WlState::Pending, "dept-a is at 4 + 1");
    assert_eq!(quota::available(&s.st, s.st.acct(), s.tid("b1"), fr), 1);
}

#[test]
fn a_department_that_owns_nothing_lends_part_of_its_teams_quota_up() {
    // dept-b owns nothing; its lending limit of 1 lends 1 of b1's 2 up and keeps the other.
    let mut s = org((None, None), (None, Some(1)));
    let fr = s.fr("gpu");
    assert_eq!(quota::potential_available(&s.st, s.tid("a1"), fr), 5);
    s.submit(wl("a1-w", "a1", 0, 5, &[("gpu", "1")])).settle();
    assert_eq!(s.state("a1-w"), WlState::Admitted);
    assert_eq!(quota::available(&s.st, s.st.acct(), s.tid("b1"), fr), 1);
}

#[test]
fn a_team_reclaims_from_another_department_only_where_that_department_borrows() {
    // a1 borrows a2's quota inside dept-a: dept-a is within its own 4, so b1 (whose 2 are
    // free) has nothing to reclaim there, and its work fits anyway.
    let mut s = org((None, None), (None, None));
    s.submit(wl("a1-w", "a1", 0, 4, &[("gpu", "1")])).settle();
    s.at(1)
        .submit(wl("b1-w", "b1", 10, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("b1-w"), WlState::Admitted);
    assert_eq!(s.preemptions(), vec![]);
    // a1 borrows dept-b's quota through the organisation: b1 takes it back.
    let mut s = org((None, None), (None, None));
    s.submit(wl("a1-big", "a1", 0, 6, &[("gpu", "1")])).settle();
    assert_eq!(s.state("a1-big"), WlState::Admitted);
    s.at(1)
        .submit(wl("b1-w", "b1", 10, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("b1-w"), WlState::Admitted);
    assert_eq!(
        s.preemptions(),
        vec![(
            "a1-big".to_string(),
            "b1-w".to_string(),
            allot_core::PreemptReason::InCohortReclamation
        )]
    );
}

/// `preemptor` took exactly `n` of b1's workloads, each as a reclamation.
fn reclaimed_from_b1(s: &Sim, preemptor: &str, n: usize) {
    let v = victims_of(s, preemptor);
    assert_eq!(v.len(), n, "{v:?}");
    assert!(
        v.iter()
            .all(|(w, r)| w.starts_with("b1-") && *r == PreemptReason::InCohortReclamation),
        "{v:?}"
    );
}

/// The preemptions so far, as (victim, reason), victims by name.
fn victims_of(s: &Sim, preemptor: &str) -> Vec<(String, PreemptReason)> {
    let mut v: Vec<(String, PreemptReason)> = s
        .preemptions()
        .into_iter()
        .filter(|(_, by, _)| by == preemptor)
        .map(|(w, _, r)| (w, r))
        .collect();
    v.sort();
    v
}

#[test]
fn a_request_that_fits_in_its_departments_quota_reclaims_from_another_department() {
    // a2 uses 1 of dept-a's 4 and b1 borrows 2 through the organisation: 1 GPU is free.
    let mut a1 = dept_team("a1", "dept-a", 2);
    a1.preemption.borrow_within_cohort.policy =
        allot_common::quota::BorrowWithinCohortPolicy::Never;
    let mut s = Sim::classical(vec![
        a1,
        dept_team("a2", "dept-a", 2),
        dept_team("b1", "dept-b", 2),
    ]);
    s.st.set_cohort(dept("dept-a", "org", None, None)).unwrap();
    s.st.set_cohort(dept("dept-b", "org", None, None)).unwrap();
    s.nodes(F, "g", 8, 1);
    s.submit(wl("a2-w", "a2", 0, 1, &[("gpu", "1")]));
    for i in 0..4 {
        s.submit(wl(&format!("b1-w{i}"), "b1", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    // a1 asks for 3 above its nominal 2, with borrow_within_cohort Never: as a team it would
    // borrow, which forbids taking other teams' work, but its department has the quota
    // (1 used + 3 <= 4), so it has the first claim to it over dept-b's borrowed work (Kueue's
    // hierarchical reclaim): a reclamation, not a borrowing preemption.
    s.at(1)
        .submit(wl("a1-big", "a1", 10, 3, &[("gpu", "1")]))
        .settle();
    assert_eq!(
        s.state("a1-big"),
        WlState::Admitted,
        "{}",
        s.message("a1-big")
    );
    reclaimed_from_b1(&s, "a1-big", 2);
}

#[test]
fn candidates_it_has_the_hierarchical_advantage_over_go_first() {
    // dept-a owns 2 of its own (pool 6), dept-b 2 (b1's); a2 borrows 1 in dept-a, b1 borrows
    // 3 through the organisation, and the organisation's 8 are all in use.
    let mut a1 = dept_team("a1", "dept-a", 2);
    a1.preemption.borrow_within_cohort.policy =
        allot_common::quota::BorrowWithinCohortPolicy::LowerPriority;
    let mut s = Sim::classical(vec![
        a1,
        dept_team("a2", "dept-a", 2),
        dept_team("b1", "dept-b", 2),
    ]);
    let mut dept_a = dept("dept-a", "org", None, None);
    dept_a.quotas[0].resources[0].1 = rq(2, None, None);
    s.st.set_cohort(dept_a).unwrap();
    s.st.set_cohort(dept("dept-b", "org", None, None)).unwrap();
    s.nodes(F, "g", 8, 1);
    for i in 0..3 {
        s.submit(wl(&format!("a2-w{i}"), "a2", 0, 1, &[("gpu", "1")]));
    }
    for i in 0..5 {
        s.submit(wl(&format!("b1-w{i}"), "b1", 5, 1, &[("gpu", "1")]));
    }
    s.settle();
    // a1 asks 3 above its nominal 2: it fits in dept-a's quota (3 used + 3 <= 6), so it has
    // the advantage over b1 but not over a2, its own department's borrower. Kueue takes the
    // candidates it has the advantage over first, whatever their priority: b1's (priority 5)
    // before a2's (priority 0).
    s.at(1)
        .submit(wl("a1-big", "a1", 10, 3, &[("gpu", "1")]))
        .settle();
    assert_eq!(
        s.state("a1-big"),
        WlState::Admitted,
        "{}",
        s.message("a1-big")
    );
    reclaimed_from_b1(&s, "a1-big", 3);
}

#[test]
fn a_request_that_borrows_within_its_department_goes_before_one_that_borrows_above_it() {
    // dept-a: a1 (1 GPU) and a2 (2); dept-b: b1 (2) and b2 (1). a2 and b2 use 1 each: 4 of
    // the organisation's 6 are free.
    let mut s = Sim::classical(vec![
        dept_team("a1", "dept-a", 1),
        dept_team("a2", "dept-a", 2),
        dept_team("b1", "dept-b", 2),
        dept_team("b2", "dept-b", 1),
    ]);
    s.st.set_cohort(dept("dept-a", "org", None, None)).unwrap();
    s.st.set_cohort(dept("dept-b", "org", None, None)).unwrap();
    s.nodes(F, "g", 6, 1);
    s.submit(wl("a2-w", "a2", 0, 1, &[("gpu", "1")]))
        .submit(wl("b2-w", "b2", 0, 1, &[("gpu", "1")]))
        .settle();
    // Both borrow and only one fits. b1-big is older, but what it borrows is beyond its
    // department's quota (1 + 3 > 3): it borrows from the organisation, level 2. a1-w's
    // borrowing stays within dept-a (1 + 2 <= 3), level 1, so it goes first (Kueue's borrow
    // level); submit time decides only between equal levels.
    s.at(1).submit(wl("b1-big", "b1", 0, 3, &[("gpu", "1")]));
    s.at(2)
        .submit(wl("a1-w", "a1", 0, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("a1-w"), WlState::Admitted);
    assert_eq!(s.state("b1-big"), WlState::Pending);
    // In a flat cohort both would be at level 1, and the older goes first.
    let mut s = Sim::classical(vec![
        gpu_team("a1", 1, None),
        gpu_team("a2", 2, None),
        gpu_team("b1", 2, None),
        gpu_team("b2", 1, None),
    ]);
    s.nodes(F, "g", 6, 1);
    s.submit(wl("a2-w", "a2", 0, 1, &[("gpu", "1")]))
        .submit(wl("b2-w", "b2", 0, 1, &[("gpu", "1")]))
        .settle();
    s.at(1).submit(wl("b1-big", "b1", 0, 3, &[("gpu", "1")]));
    s.at(2)
        .submit(wl("a1-w", "a1", 0, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("b1-big"), WlState::Admitted);
    assert_eq!(s.state("a1-w"), WlState::Pending);
}

#[test]
fn fair_sharing_in_a_tree_compares_departments_where_they_part() {
    // dept-a: a1 (1 GPU) and a2 (7); dept-b: b1 (4). a2 runs 4 of its own; b1 runs 8, 4 of
    // them borrowed through the organisation: all 12 are in use.
    let weighted = |name: &str, dept: &str, nominal: i64| {
        let mut t = dept_team(name, dept, nominal);
        t.fair_share_weight = 1;
        t
    };
    let mut s = Sim::fair_share(vec![
        weighted("a1", "dept-a", 1),
        weighted("a2", "dept-a", 7),
        weighted("b1", "dept-b", 4),
    ]);
    s.st.set_cohort(dept("dept-a", "org", None, None)).unwrap();
    s.st.set_cohort(dept("dept-b", "org", None, None)).unwrap();
    s.nodes(F, "g", 12, 1);
    for i in 0..4 {
        s.submit(wl(&format!("a2-w{i}"), "a2", 0, 1, &[("gpu", "1")]));
    }
    for i in 0..8 {
        s.submit(wl(&format!("b1-w{i}"), "b1", 0, 1, &[("gpu", "1")]));
    }
    s.settle();
    // a1 asks for 4, 3 above its own 1. Team against team, a1's share after admission (3
    // borrowed) would stand level with b1's after each eviction, and only one of b1's jobs
    // could go. But a1 and b1 part at the organisation: dept-a, with a1's request, stays within
    // its own 8 (share 0) while dept-b borrows 4, so fair sharing takes b1's borrowed work
    // until a1 fits (Kueue compares the subtrees where the two paths part).
    s.at(1)
        .submit(wl("a1-w", "a1", 10, 4, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.state("a1-w"), WlState::Admitted, "{}", s.message("a1-w"));
    let v = victims_of(&s, "a1-w");
    assert_eq!(v.len(), 4, "{v:?}");
    assert!(v.iter().all(|(w, _)| w.starts_with("b1-")), "{v:?}");
}

#[test]
fn admission_in_a_tree_runs_a_round_at_each_cohort() {
    // dept-a: a1 (6 GPUs) and a2 (2); dept-b: b1 (4) and b2 (3). dept-a runs 10, 2 of them
    // borrowed through the organisation; b1 runs 4: one GPU of the 15 is free. Nobody may
    // preempt: the order alone decides who gets it. a2 weighs 4, the others 1.
    let team = |name: &str, dept: &str, nominal: i64| {
        let mut t = dept_team(name, dept, nominal);
        t.fair_share_weight = if name == "a2" { 4 } else { 1 };
        t.preemption.reclaim_within_cohort = ReclaimWithinCohort::Never;
        t.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::Never;
        t
    };
    let mut s = Sim::fair_share(vec![
        team("a1", "dept-a", 6),
        team("a2", "dept-a", 2),
        team("b1", "dept-b", 4),
        team("b2", "dept-b", 3),
    ]);
    s.st.set_cohort(dept("dept-a", "org", None, None)).unwrap();
    s.st.set_cohort(dept("dept-b", "org", None, None)).unwrap();
    s.nodes(F, "g", 15, 1);
    s.submit(wl("a1-w", "a1", 0, 8, &[("gpu", "1")]));
    s.submit(wl("a2-w", "a2", 0, 2, &[("gpu", "1")]));
    s.submit(wl("b1-w", "b1", 0, 4, &[("gpu", "1")]));
    s.settle();
    for name in ["a1-w", "a2-w", "b1-w"] {
        assert_eq!(s.state(name), WlState::Admitted, "{name}");
    }
    // a2 and b1 each ask for one more, above their nominal. Team against team a2 is lower
    // (one GPU over at a quarter of b1's weight), but at the organisation dept-a with a2's GPU
    // borrows 3 while dept-b with b1's borrows nothing: dept-b's entry wins the round there
    // (the previous order admitted a2-x).
    let a2 = quota::share(&s.st, s.st.acct(), s.tid("a2"), &[(s.fr("gpu"), 1)]);
    let b1 = quota::share(&s.st, s.st.acct(), s.tid("b1"), &[(s.fr("gpu"), 1)]);
    assert!(
        a2 < b1,
        "the teams' own shares would put a2 first: {a2:?} {b1:?}"
    );
    s.at(1).submit(wl("a2-x", "a2", 0, 1, &[("gpu", "1")]));
    s.submit(wl("b1-x", "b1", 0, 1, &[("gpu", "1")]));
    s.settle();
    assert_eq!(s.state("b1-x"), WlState::Admitted);
    assert_eq!(s.state("a2-x"), WlState::Pending);
    assert_eq!(s.preemptions(), vec![]);
}

#[test]
fn a_cohort_tree_with_a_cycle_or_too_deep_is_refused() {
    let mut s = Sim::classical(vec![dept_team("a1", "x", 1)]);
    s.st.set_cohort(dept("x", "y", None, None)).unwrap();
    let e =
        s.st.set_cohort(dept("y", "x", None, None))
            .unwrap_err()
            .to_string();
    assert!(e.contains("cycle (y -> x -> y)"), "{e}");
    let e =
        s.st.set_cohort(dept("z", "z", None, None))
            .unwrap_err()
            .to_string();
    assert!(e.contains("cycle"), "{e}");
    for i in 0..15 {
        s.st.set_cohort(dept(&format!("l{i}"), &format!("l{}", i + 1), None, None))
            .unwrap();
    }
    let e =
        s.st.set_cohort(dept("l15", "l16", None, None))
            .unwrap_err()
            .to_string();
    assert!(e.contains("deeper than 16"), "{e}");
    // Limits on a root stay refused.
    let e =
        s.st.set_cohort(CohortSpec {
            fair_share_weight: None,
            parent: None,
            ..dept("root", "none", Some(1), None)
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("need a parent"), "{e}");
}

// ---------------------------------------------------------------- §2 policy on submit

#[test]
fn unknown_priority_class_is_rejected_with_valid_names() {
    let mut s = Sim::new(
        ClusterPolicy {
            priority_classes: vec![
                allot_common::PriorityClass {
                    name: "inference".into(),
                    weight: 90,
                },
                allot_common::PriorityClass {
                    name: "training".into(),
                    weight: 70,
                },
            ],
            ..kueue()
        },
        vec![gpu_team("a", 1, None)],
    );
    let mut w = wl("x", "a", 0, 1, &[("gpu", "1")]);
    w.priority = PriorityRef::Class("urgent".into());
    let e = s.st.submit(w, 0).unwrap_err().to_string();
    assert!(
        e.contains("urgent") && e.contains("inference, training"),
        "{e}"
    );
    let mut w = wl("y", "a", 0, 1, &[("gpu", "1")]);
    w.priority = PriorityRef::Class("training".into());
    let (id, _) = s.st.submit(w, 0).unwrap();
    assert_eq!(s.st.workload(id).priority, 70);
    let _ = s.settle();
}

#[test]
fn same_input_same_plan() {
    let build = || {
        let mut s = Sim::new(
            kueue(),
            vec![gpu_team("a", 2, None), gpu_team("b", 3, None)],
        );
        s.nodes(F, "g", 3, 2);
        for i in 0..6 {
            s.submit(wl(&format!("a{i}"), "a", i % 3, 1, &[("gpu", "1")]));
            s.submit(wl(&format!("b{i}"), "b", 2 - i % 3, 1, &[("gpu", "1")]));
        }
        s
    };
    let (s1, s2) = (build(), build());
    assert_eq!(schedule(&s1.st, 0), schedule(&s2.st, 0));
}

/// Improve on Kueue (spec §6 promises it for fair sharing; allot keeps it in classical
/// preemption too): a workload never takes back the workload that evicted it. `l1` reclaims
/// its team's nominal from the higher-priority borrower `b1` (reclaim `Any`). Once team-l
/// borrows too (`l2`, priority 10), Kueue's rules let `b1` reclaim while borrowing from team-l
/// and evict `l1`, whose team would then be under its nominal: the start of the back and forth
/// the property suite found. `l1` is not `b1`'s candidate, so `b1` waits.
#[test]
fn a_workload_never_takes_back_the_workload_that_evicted_it() {
    let mut l = gpu_team("team-l", 2, None);
    l.preemption.reclaim_within_cohort = ReclaimWithinCohort::Any;
    l.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::Never;
    let mut b = gpu_team("team-b", 0, None);
    b.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    b.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::LowerPriority;
    let mut s = Sim::classical(vec![l, b, gpu_team("team-x", 5, None)]);
    s.submit(wl("b1", "team-b", 5, 6, &[("gpu", "1")])).settle();
    s.at(1)
        .submit(wl("l1", "team-l", 0, 2, &[("gpu", "1")]))
        .settle();
    assert_eq!(
        s.preemptions(),
        vec![("b1".into(), "l1".into(), PreemptReason::InCohortReclamation)]
    );
    s.at(2)
        .submit(wl("l2", "team-l", 10, 1, &[("gpu", "1")]))
        .settle();
    assert_eq!(s.preemptions().len(), 1, "{:?}", s.preemptions());
    assert_eq!(s.state("l1"), WlState::Admitted);
    assert_eq!(s.state("l2"), WlState::Admitted);
    assert_eq!(s.state("b1"), WlState::Pending);
    let why = allot_core::explain::explain_state(&s.st, s.st.find_workload("b1").unwrap(), s.now)
        .join("\n");
    assert!(
        why.contains("l1 evicted it and is never taken back by it"),
        "{why}"
    );
}

/// Shapes that differ only in priority share one request fingerprint (a cycle finds their
/// tournament-key part once), and anything a flavor assignment reads tells requests apart.
#[test]
fn request_fingerprint_ignores_priority_only() {
    let mut sim = Sim::classical(vec![gpu_team("a", 8, None), gpu_team("b", 8, None)]);
    sim.submit(wl("low", "a", 10, 1, &[("gpu", "2")]))
        .submit(wl("high", "a", 90, 1, &[("gpu", "2")]))
        .submit(wl("two-pods", "a", 10, 2, &[("gpu", "2")]))
        .submit(wl("more-gpu", "a", 10, 1, &[("gpu", "4")]))
        .submit(wl("other-team", "b", 10, 1, &[("gpu", "2")]));
    let get = |name: &str| sim.st.workload(sim.st.find_workload(name).unwrap());
    let (low, high) = (get("low"), get("high"));
    assert_ne!(low.shape_fingerprint(), high.shape_fingerprint());
    assert_eq!(low.request_fingerprint(), high.request_fingerprint());
    for other in ["two-pods", "more-gpu", "other-team"] {
        assert_ne!(
            low.request_fingerprint(),
            get(other).request_fingerprint(),
            "{other}"
        );
    }
}

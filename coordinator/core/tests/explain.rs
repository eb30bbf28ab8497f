//! `allot explain`: one test per kind of reason a workload waits or was preempted, from
//! shared/spec/scheduling.md. The assertions pick key phrases with their numbers, not whole
//! lines, so the wording can evolve.
//!
//! Spec section -> test:
//! - §1 quota: no quota for the resource or flavor (NoMatchingFlavor) -> `no_quota_for_the_resource_or_flavor`
//! - §1, §7 request above nominal + borrowing limit (ExceedsMaxQuota) -> `request_above_nominal_plus_borrow_limit`
//! - §1 request above what the cohort can ever lend (ExceedsMaxQuota) -> `request_above_what_the_cohort_can_lend`
//! - §1 borrowing limit reached by running work (WaitingForQuota) -> `borrow_limit_reached_by_running_work`
//! - §1 not enough unused quota in the cohort, with its borrowers -> `cohort_pool_short_names_the_borrowers`
//! - §1, §5 quota fits but no node has room -> `quota_fits_but_no_node_has_room`
//! - §5 no nodes of the flavor -> `no_nodes_of_the_flavor`
//! - §7 requeued after a node failure -> `requeued_after_a_node_failure`
//! - §3, §5 gang placed whole or not at all -> `gang_is_placed_whole_or_not_at_all`
//! - §3 min_count -> `min_count_is_mentioned`
//! - §3 position in the team's queue and the cohort's order -> `position_in_team_queue_and_cohort_order`
//! - §3 StrictFIFO head blocks the team -> `strict_fifo_head_blocks_later_workloads`
//! - §4 no eligible victims (policy Never, priorities) -> `no_eligible_victims_under_the_team_policy`
//! - §4 larger than nominal preempts only through borrow_within_cohort -> `larger_than_nominal_cannot_preempt_without_borrow_within_cohort`
//! - §4, §7 waiting for evictions (WaitingForPreemptedWorkloads) and preempted by reclaim ->
//!   `waiting_for_evictions_and_preempted_by_reclaim`
//! - §4 preempted by priority within the team (InClusterQueue) -> `preempted_by_higher_priority_in_same_team`
//! - §6 fair sharing: weighted shares and the cohort order -> `fair_share_standing_and_order`
//! - §8 cohort-owned quota in the pool -> `cohort_owned_quota_is_shown_in_the_pool`
//! - §7 admitted/running (where, since, borrowing) -> `admitted_shows_where_since_and_borrowing`
//! - §7 finished and cancelled -> `finished_and_cancelled_are_one_line`
//! - the same through the replicated machine's commands -> `through_machine_commands`

use allot_common::api::{ActivationState, ComputeQuotaInput, SubmitInput};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::quota::{
    BorrowWithinCohortPolicy, QueueingStrategy, ReclaimWithinCohort, WithinTeam,
};
use allot_common::{Catalog, CohortSpec, FlavorQuota, ResourceName, WorkloadSpec};
use allot_core::explain::{explain, fmt_time};
use allot_core::machine::{Command, Entry, Machine};
use allot_core::state::Event;
use allot_core::{schedule, WlState};

mod support;

use support::{gpu_team, rq, team, wl, Sim, F};
const G: &str = "ml.p4d.24xlarge";

fn gpus(name: &str, team: &str, priority: i32, count: u32, per_pod: &str) -> WorkloadSpec {
    wl(name, team, priority, count, &[("gpu", per_pod)])
}

/// What only these tests ask of the shared state.
impl Sim {
    /// One cycle; victims stay Evicting.
    fn step(&mut self) -> Vec<Event> {
        let plan = schedule(&self.st, self.now);
        let ev = self.st.apply_plan(&plan, self.now);
        self.st.check_invariants().unwrap();
        ev
    }
    fn explain(&self, name: &str) -> Vec<String> {
        let mut m = Machine::new();
        m.state = self.st.clone();
        explain(&m, self.st.find_workload(name).unwrap(), self.now)
    }
}

/// Some line contains every one of `parts`.
#[track_caller]
fn has(lines: &[String], parts: &[&str]) {
    assert!(
        lines.iter().any(|l| parts.iter().all(|p| l.contains(p))),
        "no line contains all of {parts:?}:\n{}",
        lines.join("\n")
    );
}

#[track_caller]
fn lacks(lines: &[String], part: &str) {
    assert!(
        !lines.iter().any(|l| l.contains(part)),
        "a line contains {part:?}:\n{}",
        lines.join("\n")
    );
}

// ---------------------------------------------------------------- §1 quota

#[test]
fn no_quota_for_the_resource_or_flavor() {
    // Two flavors in one group: the first has no cpu quota, the second no gpu quota.
    let mut s = Sim::classical(vec![team(
        "team-a",
        &[
            (F, &[("gpu", rq(4, None, None))]),
            ("ml.c5.xlarge", &[("cpu", rq(8000, None, None))]),
        ],
    )]);
    s.submit(wl("both", "team-a", 0, 1, &[("gpu", "1"), ("cpu", "1")]))
        .submit(wl("trn", "team-a", 0, 1, &[("neuron", "1")]))
        .settle();
    let l = s.explain("both");
    has(
        &l,
        &[
            "in ml.g5.8xlarge",
            "no quota",
            "no quota for cpu in ml.g5.8xlarge",
        ],
    );
    has(&l, &["in ml.c5.xlarge", "no quota for gpu in ml.c5.xlarge"]);
    has(&l, &["now:", "does not fit"]);
    let l = s.explain("trn");
    has(
        &l,
        &["no quota for neuron in any flavor", "NoMatchingFlavor"],
    );
    has(
        &l,
        &["would be admitted if team team-a had quota for neuron"],
    );
}

#[test]
fn request_above_nominal_plus_borrow_limit() {
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 2, Some(1)),
        gpu_team("team-b", 4, None),
    ]);
    s.submit(gpus("big", "team-a", 0, 1, "4")).settle();
    let l = s.explain("big");
    has(
        &l,
        &[
            "last scheduling decision",
            "ExceedsMaxQuota",
            "borrowing limit",
        ],
    );
    has(
        &l,
        &[
            "exceeds the borrowing limit",
            "requests 4 gpu",
            "nominal 2 gpu + borrowing limit 1 gpu allow at most 3 gpu",
            "over by 1 gpu",
        ],
    );
    has(
        &l,
        &["would be admitted if team-a's borrow limit for gpu in ml.g5.8xlarge were 2"],
    );
}

#[test]
fn request_above_what_the_cohort_can_lend() {
    // team-b lends only 1 of its 4: team-a can reach 2 + 1 = 3 at most.
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 2, None),
        team("team-b", &[(F, &[("gpu", rq(4, None, Some(1)))])]),
    ]);
    s.submit(gpus("big", "team-a", 0, 1, "5")).settle();
    let l = s.explain("big");
    has(
        &l,
        &[
            "exceeds the most team team-a can ever use",
            "requests 5 gpu",
            "at most 3 gpu",
            "lendable pool 3",
            "over by 2 gpu",
            "ExceedsMaxQuota",
        ],
    );
    has(
        &l,
        &["would be admitted if team-a's nominal for gpu in ml.g5.8xlarge were 4"],
    );
}

#[test]
fn borrow_limit_reached_by_running_work() {
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 2, Some(1)),
        gpu_team("team-b", 4, None),
    ]);
    s.submit(gpus("a-1", "team-a", 0, 1, "2"))
        .submit(gpus("a-2", "team-a", 0, 1, "1"))
        .settle();
    s.at(1000).submit(gpus("a-3", "team-a", 0, 1, "1")).settle();
    assert_eq!(s.state("a-3"), WlState::Pending);
    let l = s.explain("a-3");
    has(
        &l,
        &[
            "requests 1 gpu",
            "available 0 gpu",
            "missing 1 gpu",
            "team team-a uses 3 of nominal 2",
            "borrowing limit reached: borrowing 1 of at most 1",
        ],
    );
    has(
        &l,
        &[
            "would be admitted if team-a's borrow limit for gpu in ml.g5.8xlarge were 2",
            "or if team team-a frees 1 gpu in ml.g5.8xlarge",
        ],
    );
    has(
        &l,
        &[
            "no workload may be preempted for it",
            "team team-a's 2 workload(s) on gpu in ml.g5.8xlarge have priority >= 0",
            "no other team of cohort shared-pool borrows gpu in ml.g5.8xlarge",
        ],
    );
    has(&l, &["now:", "no workload may be preempted"]);
}

#[test]
fn cohort_pool_short_names_the_borrowers() {
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 4, None),
        gpu_team("team-b", 4, None),
    ]);
    s.submit(gpus("b-1", "team-b", 0, 1, "6"))
        .submit(gpus("a-1", "team-a", 0, 1, "2"))
        .settle();
    // a-2 would take team-a to 5 > 4: it must borrow, so it cannot reclaim b-1.
    s.at(2000).submit(gpus("a-2", "team-a", 0, 1, "3")).settle();
    assert_eq!(s.state("a-2"), WlState::Pending);
    let l = s.explain("a-2");
    has(
        &l,
        &[
            "requests 3 gpu",
            "available 0 gpu",
            "missing 3 gpu",
            "cohort shared-pool has not enough unused lendable quota: 0 free of 8",
        ],
    );
    has(
        &l,
        &[
            "lendable pool of gpu in ml.g5.8xlarge: 8, in use 8",
            "team team-b uses 6 (borrowing 2 above its nominal 4)",
        ],
    );
    has(
        &l,
        &["would be admitted if team team-b frees 3 gpu in ml.g5.8xlarge"],
    );
    lacks(&l, "team team-a frees");
    has(
        &l,
        &[
            "no workload may be preempted",
            "team team-b borrows gpu in ml.g5.8xlarge",
        ],
    );
    // The cohort's standing.
    has(
        &l,
        &["team team-b: gpu in ml.g5.8xlarge: uses 6 of nominal 4 (borrowing 2)"],
    );
    has(
        &l,
        &["team team-a: gpu in ml.g5.8xlarge: uses 2 of nominal 4"],
    );
    has(
        &l,
        &[
            "cohort shared-pool lendable pool of gpu in ml.g5.8xlarge: 8",
            "in use 8, free 0",
        ],
    );
}

// ---------------------------------------------------------------- §5 placement

#[test]
fn quota_fits_but_no_node_has_room() {
    let mut s = Sim::classical(vec![gpu_team("team-a", 16, None)]);
    s.nodes(F, "n", 2, 8);
    s.submit(gpus("a-1", "team-a", 0, 2, "6")).settle();
    s.at(1000).submit(gpus("a-2", "team-a", 0, 1, "4")).settle();
    assert_eq!(s.state("a-2"), WlState::Pending);
    let l = s.explain("a-2");
    has(
        &l,
        &[
            "1 pod(s) x 4 gpu in ml.g5.8xlarge",
            "quota fits but no node has room: 0 of 1 pod(s) can be placed",
            "2 schedulable node(s) of ml.g5.8xlarge",
            "0 can take a pod",
            "n0: 2 gpu free of 8, room for 0 pod(s)",
        ],
    );
    has(
        &l,
        &["would be admitted if nodes of ml.g5.8xlarge had room for 1 more pod(s) of 4 gpu"],
    );
    has(&l, &["no workload may be preempted", "have priority >= 0"]);
}

#[test]
fn requeued_after_a_node_failure() {
    let mut s = Sim::classical(vec![gpu_team("team-a", 8, None)]);
    s.nodes(F, "n", 1, 8);
    s.submit(gpus("a-1", "team-a", 0, 1, "4")).settle();
    s.st.set_node_health("n0", false, 3000).unwrap();
    s.at(3000).settle();
    assert_eq!(s.state("a-1"), WlState::Pending);
    let l = s.explain("a-1");
    has(&l, &["evicted t=3s: NodeFailures: node n0 failed"]);
    has(&l, &["requeued t=3s with its original submit time t=0s"]);
    has(
        &l,
        &[
            "quota fits but no node has room: 0 of 1 pod(s)",
            "0 schedulable node(s) of ml.g5.8xlarge (1 unhealthy or cordoned)",
        ],
    );
    lacks(&l, "preempted t=");
}

#[test]
fn no_nodes_of_the_flavor() {
    let mut s = Sim::classical(vec![team("team-a", &[(G, &[("gpu", rq(8, None, None))])])]);
    s.nodes(F, "n", 1, 8);
    s.submit(gpus("a-1", "team-a", 0, 1, "1")).settle();
    let l = s.explain("a-1");
    has(
        &l,
        &[
            "in ml.p4d.24xlarge",
            "quota fits but the cluster has no nodes of ml.p4d.24xlarge",
        ],
    );
    has(
        &l,
        &["would be admitted if nodes of ml.p4d.24xlarge joined the cluster"],
    );
}

#[test]
fn gang_is_placed_whole_or_not_at_all() {
    let mut s = Sim::classical(vec![gpu_team("team-a", 32, None)]);
    s.nodes(F, "n", 2, 8);
    s.submit(gpus("a-1", "team-a", 0, 1, "4")).settle();
    s.at(1000)
        .submit(gpus("gang", "team-a", 0, 4, "4"))
        .settle();
    assert_eq!(s.state("gang"), WlState::Pending);
    let l = s.explain("gang");
    has(
        &l,
        &[
            "4 pod(s) x 4 gpu",
            "quota fits but no node has room: 3 of 4 pod(s) can be placed",
        ],
    );
    has(&l, &["2 can take a pod"]);
    has(
        &l,
        &["gang: all 4 pods are admitted and placed together or not at all"],
    );
    has(&l, &["had room for 1 more pod(s) of 4 gpu"]);
}

#[test]
fn min_count_is_mentioned() {
    let mut s = Sim::classical(vec![gpu_team("team-a", 4, Some(0))]);
    s.submit(gpus("a-1", "team-a", 0, 1, "3")).settle();
    let mut w = gpus("elastic", "team-a", 0, 4, "1");
    w.pod_sets[0].min_count = Some(2);
    s.at(1000).submit(w);
    // Explained before a cycle admits one pod of it.
    let l = s.explain("elastic");
    has(&l, &["not considered by a scheduling cycle yet"]);
    has(
        &l,
        &["as few as 2 of 4 pods (min_count)", "does not fit either"],
    );
    has(&l, &["missing 3 gpu"]);
}

// ---------------------------------------------------------------- §3 order

#[test]
fn position_in_team_queue_and_cohort_order() {
    let mut s = Sim::fair_share(vec![
        gpu_team("team-a", 2, Some(0)),
        gpu_team("team-b", 2, Some(0)),
    ]);
    s.submit(gpus("a-0", "team-a", 10, 1, "2"))
        .submit(gpus("b-0", "team-b", 10, 1, "2"))
        .settle();
    s.at(1000).submit(gpus("a-1", "team-a", 0, 1, "1"));
    s.at(1500).submit(gpus("b-1", "team-b", 3, 1, "1"));
    s.at(2000).submit(gpus("a-2", "team-a", 5, 1, "1"));
    s.at(3000).submit(gpus("a-3", "team-a", 0, 1, "1"));
    s.settle();
    let l = s.explain("a-1");
    has(
        &l,
        &[
            "position 2 of 3 in team team-a's queue",
            "BestEffortFIFO",
            "ahead: a-2 (priority 5, submitted t=2s)",
        ],
    );
    has(
        &l,
        &[
            "cohort order: position 3 of 4 pending in cohort shared-pool",
            "ahead: team-a/a-2",
            "team-b/b-1",
        ],
    );
    has(&l, &["weighted share after admitting it would be 250"]);
    has(
        &l,
        &[
            "team team-a: gpu in ml.g5.8xlarge: uses 2 of nominal 2 (borrowing limit 0)",
            "weighted share 0 (weight 1)",
        ],
    );
    let l = s.explain("a-2");
    has(&l, &["position 1 of 3 in team team-a's queue"]);
    has(&l, &["cohort order: position 1 of 4"]);
}

#[test]
fn strict_fifo_head_blocks_later_workloads() {
    let mut t = gpu_team("team-a", 4, Some(0));
    t.queueing = QueueingStrategy::StrictFIFO;
    let mut s = Sim::classical(vec![t]);
    s.submit(gpus("a-0", "team-a", 10, 1, "3")).settle();
    s.at(1000).submit(gpus("a-1", "team-a", 0, 1, "2"));
    s.at(2000).submit(gpus("a-2", "team-a", 0, 1, "1"));
    s.settle();
    assert_eq!(s.state("a-2"), WlState::Pending);
    let l = s.explain("a-2");
    has(&l, &["StrictFIFO: waiting behind a-1"]);
    has(
        &l,
        &[
            "blocked by StrictFIFO",
            "a-1 ahead of it does not fit",
            "1 more needed",
        ],
    );
    has(&l, &["now: fits on its own"]);
    has(&l, &["would be admitted if a-1 is admitted or cancelled"]);
    has(&l, &["position 2 of 2 in team team-a's queue (StrictFIFO"]);
}

// ---------------------------------------------------------------- §4 preemption

#[test]
fn no_eligible_victims_under_the_team_policy() {
    let mut never = team("team-a", &[(F, &[("gpu", rq(4, None, None))])]);
    never.cohort = None;
    never.preemption.within_team = WithinTeam::Never;
    let mut lower = team("team-b", &[(F, &[("gpu", rq(4, None, None))])]);
    lower.cohort = None;
    let mut s = Sim::classical(vec![never, lower]);
    s.submit(gpus("a-1", "team-a", 0, 1, "4"))
        .submit(gpus("b-1", "team-b", 10, 1, "4"))
        .settle();
    s.at(1000)
        .submit(gpus("a-2", "team-a", 10, 1, "2"))
        .submit(gpus("b-2", "team-b", 5, 1, "2"))
        .settle();
    let l = s.explain("a-2");
    has(
        &l,
        &[
            "no workload may be preempted for it",
            "team team-a never preempts its own workloads (PreemptTeamTasks=Never)",
            "team team-a has no cohort",
        ],
    );
    has(
        &l,
        &["missing 2 gpu", "the team has no cohort to borrow from"],
    );
    has(
        &l,
        &["cohort order: position 1 of 1 pending in team team-a (no cohort)"],
    );
    let l = s.explain("b-2");
    has(
        &l,
        &["team team-b's 1 workload(s) on gpu in ml.g5.8xlarge have priority >= 5"],
    );
    has(
        &l,
        &["would be admitted if team team-b frees 2 gpu in ml.g5.8xlarge"],
    );
}

#[test]
fn a_borrower_of_higher_priority_is_named_with_the_rule_that_spares_it() {
    // team-b borrows 2 of team-a's GPUs at priority 10; team-a reclaims only from lower
    // priorities, and asks for its nominal back at priority 5.
    let mut a = gpu_team("team-a", 2, None);
    a.preemption.reclaim_within_cohort = ReclaimWithinCohort::LowerPriority;
    let mut s = Sim::classical(vec![a, gpu_team("team-b", 2, None)]);
    s.submit(gpus("b-1", "team-b", 10, 1, "4")).settle();
    s.at(1000).submit(gpus("a-1", "team-a", 5, 1, "2")).settle();
    assert_eq!(s.state("a-1"), WlState::Pending);
    has(
        &s.explain("a-1"),
        &[
            "no workload may be preempted for it",
            "no workload of team team-a uses gpu in ml.g5.8xlarge",
            "team team-b borrows gpu in ml.g5.8xlarge but its 1 workload(s) there have priority >= 5 (reclaim_within_cohort LowerPriority)",
        ],
    );
    // At priority 20 b-1 is a candidate, and the search takes it.
    s.at(2000)
        .submit(gpus("a-2", "team-a", 20, 1, "2"))
        .settle();
    assert_eq!(s.state("a-2"), WlState::Admitted);
    assert_eq!(s.state("b-1"), WlState::Pending);
}

#[test]
fn larger_than_nominal_cannot_preempt_without_borrow_within_cohort() {
    let mut a = gpu_team("team-a", 2, None);
    a.preemption.borrow_within_cohort.policy = BorrowWithinCohortPolicy::Never;
    let mut s = Sim::classical(vec![a, gpu_team("team-b", 4, None)]);
    s.submit(gpus("b-1", "team-b", 0, 1, "5")).settle();
    s.at(1000)
        .submit(gpus("a-1", "team-a", 10, 1, "3"))
        .settle();
    assert_eq!(s.state("a-1"), WlState::Pending);
    let l = s.explain("a-1");
    has(&l, &["requests 3 gpu", "available 1 gpu", "missing 2 gpu"]);
    has(
        &l,
        &[
            "cannot preempt for it",
            "requests 3 gpu, more than team team-a's nominal 2 for gpu in ml.g5.8xlarge",
            "borrow_within_cohort, which is Never",
        ],
    );
    has(
        &l,
        &["would be admitted if team team-b frees 2 gpu in ml.g5.8xlarge"],
    );
}

#[test]
fn waiting_for_evictions_and_preempted_by_reclaim() {
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 4, None),
        gpu_team("team-b", 4, None),
    ]);
    s.submit(gpus("b-1", "team-b", 5, 1, "8")).settle();
    s.at(5000).submit(gpus("a-1", "team-a", 0, 1, "4"));
    let ev = s.step();
    assert!(ev.iter().any(|e| matches!(e, Event::Preempted { .. })));
    assert_eq!(s.state("b-1"), WlState::Evicting);

    // The preemptor waits for its victim.
    let l = s.explain("a-1");
    has(
        &l,
        &["last scheduling decision (t=5s): WaitingForPreemptedWorkloads"],
    );
    has(
        &l,
        &[
            "waiting for evictions to finish: 1 workload(s) it preempted",
            "team-b/b-1 (priority 5, Evicting) (preempted t=5s)",
        ],
    );
    has(&l, &["would be admitted if b-1 finishes stopping"]);
    lacks(&l, "b-1 is evicted");

    // The victim: who, why, when.
    let l = s.explain("b-1");
    has(
        &l,
        &["workload b-1: team team-b, priority 5, Evicting, submitted t=0s"],
    );
    has(
        &l,
        &[
            "preempted t=5s by team-a/a-1 (priority 0, Pending)",
            "reclamation within the cohort (InCohortReclamation)",
            "team team-a took back quota it lends; team team-b was borrowing it",
        ],
    );
    has(
        &l,
        &["preemption message: Preempted to accommodate workload team-a/a-1"],
    );
    has(&l, &["eviction in progress"]);

    // Requeued: still says who preempted it, and why it waits now.
    let id = s.st.find_workload("b-1").unwrap();
    s.at(7000);
    s.st.complete_eviction(id, 7000);
    s.settle();
    assert_eq!(s.state("a-1"), WlState::Admitted);
    let l = s.explain("b-1");
    has(&l, &["Pending, submitted t=0s"]);
    has(
        &l,
        &[
            "preempted t=5s by team-a/a-1 (priority 0, Admitted)",
            "InCohortReclamation",
        ],
    );
    has(&l, &["requeued t=7s with its original submit time t=0s"]);
    has(&l, &["requests 8 gpu", "available 4 gpu", "missing 4 gpu"]);
    has(
        &l,
        &["would be admitted if team team-a frees 4 gpu in ml.g5.8xlarge"],
    );
}

#[test]
fn preempted_by_higher_priority_in_same_team() {
    let mut s = Sim::classical(vec![gpu_team("team-a", 4, Some(0))]);
    s.submit(gpus("lo", "team-a", 0, 1, "4")).settle();
    s.at(2000).submit(gpus("hi", "team-a", 10, 1, "4"));
    // Before a cycle: it can preempt lo.
    let l = s.explain("hi");
    has(&l, &["now: it can be admitted only by preempting"]);
    has(&l, &["can preempt: team-a/lo (priority 0, InClusterQueue)"]);
    has(&l, &["would be admitted if lo is evicted"]);
    s.settle();
    assert_eq!(s.state("hi"), WlState::Admitted);
    let l = s.explain("lo");
    has(
        &l,
        &[
            "preempted t=2s by team-a/hi (priority 10, Admitted)",
            "prioritization in the team (InClusterQueue)",
            "higher priority needed the room (priority 10 > 0)",
        ],
    );
    has(&l, &["requeued t=2s"]);
    has(&l, &["position 1 of 1 in team team-a's queue"]);
    has(
        &l,
        &["team team-a's 1 workload(s) on gpu in ml.g5.8xlarge have priority >= 0"],
    );
    let l = s.explain("hi");
    has(
        &l,
        &[
            "admitted since t=2s in team team-a",
            "pod set main: 1 pod(s) in ml.g5.8xlarge",
        ],
    );
    has(&l, &["within team team-a's nominal quota"]);
}

// ---------------------------------------------------------------- §6 fair sharing

#[test]
fn fair_share_standing_and_order() {
    let mut b = gpu_team("team-b", 4, None);
    b.fair_share_weight = 2;
    let mut s = Sim::fair_share(vec![
        gpu_team("team-a", 4, None),
        b,
        gpu_team("team-c", 4, None),
    ]);
    s.submit(gpus("a-1", "team-a", 0, 1, "6"))
        .submit(gpus("b-1", "team-b", 0, 1, "6"))
        .settle();
    s.at(1000)
        .submit(gpus("a-2", "team-a", 0, 1, "1"))
        .submit(gpus("b-2", "team-b", 0, 1, "1"));
    let l = s.explain("a-2");
    has(
        &l,
        &[
            "team team-a: gpu in ml.g5.8xlarge: uses 6 of nominal 4 (borrowing 2)",
            "weighted share 166.7 (weight 1)",
        ],
    );
    has(&l, &["team team-b:", "weighted share 83.3 (weight 2)"]);
    has(
        &l,
        &[
            "team team-c:",
            "uses 0 of nominal 4",
            "weighted share 0 (weight 1)",
        ],
    );
    has(
        &l,
        &[
            "cohort order: position 2 of 2 pending in cohort shared-pool",
            "lower weighted share after admission",
            "it ranks as not borrowing",
            "would be 250",
            "ahead: team-b/b-2 (not borrowing, share after 125)",
        ],
    );
    has(&l, &["missing 1 gpu", "0 free of 12"]);
}

// ---------------------------------------------------------------- §8 cohort-owned quota

#[test]
fn cohort_owned_quota_is_shown_in_the_pool() {
    let mut s = Sim::classical(vec![]);
    s.st.set_cohort(CohortSpec {
        fair_share_weight: None,
        name: "shared-pool".into(),
        parent: None,
        quotas: vec![FlavorQuota {
            flavor: F.into(),
            resources: vec![(ResourceName::gpu(), rq(2, None, None))],
        }],
    })
    .unwrap();
    s.st.set_team(gpu_team("team-a", 1, None)).unwrap();
    s.submit(gpus("a-1", "team-a", 0, 1, "4")).settle();
    let l = s.explain("a-1");
    has(
        &l,
        &[
            "at most 3 gpu",
            "lendable pool 3 of which 2 owned by the cohort",
            "over by 1 gpu",
        ],
    );
    has(&l, &["cohort shared-pool lendable pool of gpu in ml.g5.8xlarge: 3 (2 owned by the cohort; in use 0, free 3)"]);
    has(
        &l,
        &["would be admitted if team-a's nominal for gpu in ml.g5.8xlarge were 2"],
    );
}

// ---------------------------------------------------------------- §7 states

#[test]
fn admitted_shows_where_since_and_borrowing() {
    let mut s = Sim::classical(vec![
        gpu_team("team-a", 4, None),
        gpu_team("team-b", 12, None),
    ]);
    s.nodes(F, "n", 2, 8);
    s.at(1000).submit(gpus("a-1", "team-a", 0, 2, "4")).settle();
    let id = s.st.find_workload("a-1").unwrap();
    s.st.mark_running(id);
    let l = s.explain("a-1");
    has(
        &l,
        &["workload a-1: team team-a, priority 0, Running, submitted t=1s"],
    );
    has(
        &l,
        &[
            "admitted since t=1s in team team-a",
            "pod set main: 2 pod(s) in ml.g5.8xlarge on n0 (2 pod(s); gpu 0,1,2,3; gpu 4,5,6,7)",
        ],
    );
    has(&l, &["borrows 4 gpu above team team-a's nominal"]);
    has(
        &l,
        &["team team-a now: gpu in ml.g5.8xlarge: uses 8 of nominal 4 (borrowing 4)"],
    );
    lacks(&l, "preempted");
}

#[test]
fn finished_and_cancelled_are_one_line() {
    let mut s = Sim::classical(vec![gpu_team("team-a", 4, None)]);
    s.submit(gpus("done", "team-a", 0, 1, "1"))
        .submit(gpus("gone", "team-a", 0, 1, "1"))
        .settle();
    let done = s.st.find_workload("done").unwrap();
    let gone = s.st.find_workload("gone").unwrap();
    s.st.finish(done, true, 3000).unwrap();
    s.st.cancel(gone, 4500).unwrap();
    let l = s.explain("done");
    assert_eq!(l.len(), 1, "{l:?}");
    has(&l, &["workload done (team team-a) is Succeeded since t=3s"]);
    let l = s.explain("gone");
    assert_eq!(l.len(), 1, "{l:?}");
    has(&l, &["is Cancelled since t=4.5s", "cancelled by the user"]);
}

#[test]
fn times_are_seconds() {
    assert_eq!(fmt_time(0), "t=0s");
    assert_eq!(fmt_time(12_300), "t=12.3s");
    assert_eq!(fmt_time(1_005), "t=1.005s");
    assert_eq!(fmt_time(-1_500), "t=-1.5s");
}

// ---------------------------------------------------------------- the replicated machine

#[test]
// The quotas are written as a user writes them and read before the commands exist.
#[allow(clippy::disallowed_methods)]
fn through_machine_commands() {
    fn apply(m: &mut Machine, now: i64, cmd: Command) {
        let (r, _) = m.apply(&Entry { now, cmd });
        r.unwrap();
    }
    let mut m = Machine::new();
    for (t, count) in [("team-a", 1), ("team-b", 1)] {
        let config = ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType={G},Count={count}}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=50}},PreemptTeamTasks=LowerPriority"
        ))
        .unwrap();
        apply(
            &mut m,
            0,
            Command::CreateComputeQuota(ComputeQuotaInput {
                name: format!("q-{t}"),
                description: None,
                team: t.into(),
                fair_share_weight: 1,
                config,
                activation: ActivationState::Enabled,
            }),
        );
    }
    let caps = Catalog::builtin().get(G).unwrap().resources();
    for n in 0..2 {
        apply(
            &mut m,
            0,
            Command::RegisterNode {
                name: format!("p4d-{n}"),
                instance_type: G.into(),
                capacity: caps.clone(),
            },
        );
    }
    let submit = |name: &str, team: &str, gpu: &str| {
        let mut w = gpus(name, team, 0, 1, gpu);
        w.instance_type = Some(G.into());
        Command::Submit(SubmitInput {
            spec: w,
            run: None,
            client_token: None,
        })
    };
    // team-a: nominal 8 gpu, borrowing limit 4 (50%).
    apply(&mut m, 1000, submit("a-1", "team-a", "8"));
    apply(&mut m, 1000, submit("a-2", "team-a", "4"));
    apply(&mut m, 1000, submit("a-3", "team-a", "1"));
    let plan = schedule(&m.state, 1000);
    apply(&mut m, 1000, Command::Plan(plan));
    let id = m.state.find_workload("a-3").unwrap();
    assert_eq!(m.state.workload(id).state, WlState::Pending);
    let l = explain(&m, id, 1000);
    has(
        &l,
        &["workload a-3: team team-a, priority 0, Pending, submitted t=1s"],
    );
    has(
        &l,
        &[
            "1 pod(s) x 1 gpu in ml.p4d.24xlarge",
            "missing 1 gpu",
            "team team-a uses 12 of nominal 8",
            "borrowing limit reached: borrowing 4 of at most 4",
        ],
    );
    has(
        &l,
        &["team-a's borrow limit for gpu in ml.p4d.24xlarge were 5"],
    );
    has(&l, &["position 1 of 1 in team team-a's queue"]);
}

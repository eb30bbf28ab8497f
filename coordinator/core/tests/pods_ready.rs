//! Gang readiness on the state machine: a workload whose pods have not all started within the
//! timeout is evicted (`PodsReadyTimeout`), waits out a doubling backoff out of its queue, and
//! is queued again with its original submit time; block admission; the settings' checks.

use allot_common::api::{NodeReport, PodExit};
use allot_common::pods_ready::PodsReadyPolicy;
use allot_common::Catalog;
use allot_core::conditions::ConditionType;
use allot_core::machine::{Command, Machine};
use allot_core::WlState;

mod support;

const T: &str = "ml.g5.12xlarge"; // 4 GPUs

fn apply(m: &mut Machine, now: i64, cmd: Command) -> Result<(), String> {
    support::apply_cmd(m, now, cmd)
}

fn machine(policy: PodsReadyPolicy) -> Machine {
    let mut m = support::machine_with_team_a(&format!(
        "ComputeQuotaResources=[{{InstanceType={T},Count=1}}]"
    ));
    let report = NodeReport {
        name: "n1".into(),
        instance_type: T.into(),
        capacity: Catalog::builtin().get(T).unwrap().resources(),
        lease_ms: 10_000,
        ..Default::default()
    };
    apply(&mut m, 0, Command::ReportNode(report)).expect("node");
    apply(&mut m, 0, Command::SetPodsReady(Some(policy))).expect("policy");
    m
}

fn submit(m: &mut Machine, name: &str, pods: u32, now: i64) {
    support::submit_a(m, name, "gpu", 1, pods, now);
}

fn cycle(m: &mut Machine, now: i64) {
    support::cycle_at(m, now);
}

fn id(m: &Machine, name: &str) -> allot_core::WlId {
    m.state.find_workload(name).unwrap()
}

fn state(m: &Machine, name: &str) -> WlState {
    m.state.workload(id(m, name)).state
}

fn started(m: &mut Machine, name: &str, ranks: Vec<u32>, now: i64) {
    let w = m.state.workload(id(m, name));
    let attempt = w.attempt;
    apply(
        m,
        now,
        Command::PodsStarted {
            node: Some("n1".into()),
            workload: name.into(),
            workload_id: Some(id(m, name).0),
            attempt,
            ranks,
        },
    )
    .expect("started");
}

fn timeout(m: &mut Machine, name: &str, now: i64) {
    let attempt = m.state.workload(id(m, name)).attempt;
    apply(
        m,
        now,
        Command::PodsReadyTimeout {
            workload_id: id(m, name).0,
            attempt,
            message: "pod 1 on n1 has not started".into(),
        },
    )
    .expect("timeout applies");
}

/// The agent stopped the pods (they never started).
fn stopped(m: &mut Machine, name: &str, pods: u32, now: i64) {
    let attempt = m.state.workload(id(m, name)).attempt;
    apply(
        m,
        now,
        Command::PodsExited {
            node: Some("n1".into()),
            workload: name.into(),
            workload_id: Some(id(m, name).0),
            attempt,
            exits: (0..pods)
                .map(|rank| PodExit {
                    rank,
                    succeeded: false,
                    lost: false,
                    detail: "stopped before it started".into(),
                    exit_code: None,
                })
                .collect(),
        },
    )
    .expect("exited");
}

const POLICY: PodsReadyPolicy = PodsReadyPolicy {
    timeout_s: 10,
    block_admission: false,
    backoff_base_s: 5,
    backoff_max_s: 8,
};

#[test]
fn a_gang_not_ready_in_time_is_evicted_and_waits_out_a_doubling_backoff() {
    let mut m = machine(POLICY);
    submit(&mut m, "gang", 2, 1_000);
    cycle(&mut m, 2_000);
    assert_eq!(state(&m, "gang"), WlState::Admitted);
    // One pod of two started: not ready. Nothing is due before the timeout.
    started(&mut m, "gang", vec![0], 3_000);
    assert!(m.unready(11_999).is_empty());
    let u = m.unready(12_000);
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].pods, vec![(1, "n1".to_string())]);
    timeout(&mut m, "gang", 12_000);
    assert_eq!(state(&m, "gang"), WlState::Evicting);
    let w = m.state.workload(id(&m, "gang"));
    let evicted = w.condition(ConditionType::Evicted).unwrap();
    assert_eq!(&*evicted.reason, "PodsReadyTimeout");
    assert!(
        evicted.message.contains("pod 1 on n1 has not started"),
        "{}",
        evicted.message
    );
    assert!(
        evicted.message.contains("backoff of 5 s"),
        "{}",
        evicted.message
    );
    // Once its pods are gone it waits out of its queue: the next cycle does not admit it.
    stopped(&mut m, "gang", 2, 13_000);
    assert_eq!(state(&m, "gang"), WlState::Pending);
    assert!(m.state.workload(id(&m, "gang")).is_parked());
    // Its team still lists it, explain says why it waits, and its quota cannot go under it.
    let filter = allot_common::api::WorkloadFilter {
        team: Some("team-a".into()),
        all: false,
    };
    let listed = allot_core::views::workloads(&m, &filter);
    assert!(listed.iter().any(|w| w.name == "gang"), "{listed:?}");
    let why = allot_core::explain::explain(&m, id(&m, "gang"), 13_000).join("\n");
    assert!(
        why.contains("out of its team's queue") && why.contains("backoff"),
        "{why}"
    );
    let refused = apply(
        &mut m,
        13_500,
        Command::DeleteComputeQuota { name: "qa".into() },
    );
    assert!(
        refused.is_err_and(|e| e.contains("1 pending")),
        "deleted under a parked workload"
    );
    cycle(&mut m, 14_000);
    assert_eq!(state(&m, "gang"), WlState::Pending);
    assert!(m.backoffs_due(16_999).is_empty());
    assert_eq!(m.backoffs_due(17_000), vec![id(&m, "gang")]);
    // Too early is refused quietly; on time it is queued and admitted again.
    let gang = id(&m, "gang").0;
    apply(
        &mut m,
        16_000,
        Command::BackoffFinished { workload_id: gang },
    )
    .unwrap();
    assert!(m.state.workload(id(&m, "gang")).is_parked());
    apply(
        &mut m,
        17_000,
        Command::BackoffFinished { workload_id: gang },
    )
    .unwrap();
    let w = m.state.workload(id(&m, "gang"));
    assert!(!w.is_parked());
    assert_eq!(
        &*w.condition(ConditionType::Requeued).unwrap().reason,
        "BackoffFinished"
    );
    cycle(&mut m, 18_000);
    assert_eq!(state(&m, "gang"), WlState::Admitted);
    // A second timeout doubles the backoff, up to its cap (8 s).
    timeout(&mut m, "gang", 28_000);
    let msg = m
        .state
        .workload(id(&m, "gang"))
        .condition(ConditionType::Evicted)
        .unwrap()
        .message
        .clone();
    assert!(msg.contains("backoff of 8 s (timeout 2"), "{msg}");
    // Its record goes when it ends.
    apply(
        &mut m,
        29_000,
        Command::Cancel {
            name: "gang".into(),
            team: None,
        },
    )
    .unwrap();
    stopped(&mut m, "gang", 2, 30_000);
    assert!(m.pods_ready.backoff.is_empty(), "{:?}", m.pods_ready);
}

#[test]
fn a_ready_gang_is_left_alone_and_a_stale_timeout_changes_nothing() {
    let mut m = machine(POLICY);
    submit(&mut m, "gang", 2, 1_000);
    cycle(&mut m, 2_000);
    let attempt = m.state.workload(id(&m, "gang")).attempt;
    let gang = id(&m, "gang").0;
    started(&mut m, "gang", vec![0, 1], 3_000);
    assert!(m.unready(60_000).is_empty());
    // A timeout proposed before the pods started is stale when it applies.
    apply(
        &mut m,
        60_000,
        Command::PodsReadyTimeout {
            workload_id: gang,
            attempt,
            message: "late".into(),
        },
    )
    .unwrap();
    assert_eq!(state(&m, "gang"), WlState::Running);
    // Turned off, nothing is timed.
    apply(&mut m, 61_000, Command::SetPodsReady(None)).unwrap();
    submit(&mut m, "other", 1, 61_000);
    cycle(&mut m, 62_000);
    assert!(m.unready(1_000_000).is_empty());
}

#[test]
fn a_pod_that_ended_before_its_start_was_seen_came_up() {
    let mut m = machine(POLICY);
    submit(&mut m, "gang", 2, 1_000);
    cycle(&mut m, 2_000);
    started(&mut m, "gang", vec![0], 3_000);
    // Rank 1 ran and exited before its agent saw it run: no start was reported.
    let attempt = m.state.workload(id(&m, "gang")).attempt;
    let exit = PodExit {
        rank: 1,
        succeeded: true,
        lost: false,
        detail: "exit code 0".into(),
        exit_code: Some(0),
    };
    let gang = id(&m, "gang").0;
    apply(
        &mut m,
        3_500,
        Command::PodsExited {
            node: Some("n1".into()),
            workload: "gang".into(),
            workload_id: Some(gang),
            attempt,
            exits: vec![exit],
        },
    )
    .expect("exited");
    assert!(m.unready(60_000).is_empty(), "{:?}", m.unready(60_000));
}

#[test]
fn block_admission_holds_the_cluster_while_a_gang_starts() {
    let mut m = machine(PodsReadyPolicy {
        block_admission: true,
        ..POLICY
    });
    submit(&mut m, "first", 1, 1_000);
    cycle(&mut m, 2_000);
    assert!(m.blocks_admission());
    started(&mut m, "first", vec![0], 3_000);
    assert!(!m.blocks_admission());
}

#[test]
fn settings_out_of_range_are_refused_by_name() {
    let mut m = machine(POLICY);
    let e = apply(
        &mut m,
        1,
        Command::SetPodsReady(Some(PodsReadyPolicy {
            timeout_s: 0,
            ..POLICY
        })),
    )
    .unwrap_err();
    assert!(e.contains("timeout 0 s"), "{e}");
}

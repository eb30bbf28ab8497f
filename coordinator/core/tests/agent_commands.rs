//! What agents report, as the state machine applies it: node reports with device health,
//! pods that start, end, fail or are lost, node loss, and the assignments each node is given.

use allot_common::api::{DeviceInfo, NodeReport, PodExit, SubmitInput};
use allot_common::{Catalog, ResourceName, Resources, WorkloadSpec};
use allot_core::machine::{Command, Entry, Machine};
use allot_core::{schedule, views, WlState};

mod support;

const T: &str = "ml.g5.12xlarge"; // 4 GPUs per node

fn apply(m: &mut Machine, now: i64, cmd: Command) {
    let (r, _) = m.apply(&Entry { now, cmd });
    r.expect("command applies");
    m.state.check_invariants().expect("invariants hold");
}

fn report(node: &str, unhealthy: &[u32]) -> NodeReport {
    let capacity = Catalog::builtin().get(T).unwrap().resources();
    NodeReport {
        name: node.into(),
        instance_type: T.into(),
        devices: (0..4)
            .map(|i| DeviceInfo {
                resource: "gpu".into(),
                index: i,
                id: format!("GPU-{node}-{i}"),
                healthy: !unhealthy.contains(&i),
                reason: if unhealthy.contains(&i) {
                    "XID 79".into()
                } else {
                    String::new()
                },
                ..Default::default()
            })
            .collect(),
        capacity,
        address: format!("10.0.0.{}", node.len()),
        http: String::new(),
        lease_ms: 10_000,
        agent_version: "test".into(),
        sources: Default::default(),
        topology: Default::default(),
    }
}

fn cluster(nodes: &[&str]) -> Machine {
    let mut m = support::machine_with_team_a(&format!(
        "ComputeQuotaResources=[{{InstanceType={T},Count=2}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=50}}"
    ));
    for n in nodes {
        apply(&mut m, 0, Command::ReportNode(report(n, &[])));
    }
    m
}

fn submit(m: &mut Machine, name: &str, count: u32, gpus: i64) {
    let mut r = Resources::new();
    r.add(&ResourceName::gpu(), gpus);
    apply(
        m,
        1,
        Command::Submit(SubmitInput {
            spec: WorkloadSpec::single(name, "team-a", count, r),
            run: None,
            client_token: None,
        }),
    );
}

fn cycle(m: &mut Machine, now: i64) {
    let plan = schedule(&m.state, now);
    apply(m, now, Command::Plan(plan));
}

fn state(m: &Machine, name: &str) -> WlState {
    m.state.workload(m.state.find_workload(name).unwrap()).state
}

fn exited(m: &mut Machine, node: &str, wl: &str, attempt: u32, rank: u32, ok: bool, lost: bool) {
    apply(
        m,
        5,
        Command::PodsExited {
            node: Some(node.into()),
            workload: wl.into(),
            workload_id: None,
            attempt,
            exits: vec![PodExit {
                rank,
                succeeded: ok,
                lost,
                detail: "test".into(),
                exit_code: None,
            }],
        },
    );
}

#[test]
fn assignments_name_ranks_devices_and_the_master() {
    let mut m = cluster(&["n1", "n2"]);
    submit(&mut m, "gang", 2, 4);
    cycle(&mut m, 2);
    let a1 = views::assignments(&m, "n1");
    let a2 = views::assignments(&m, "n2");
    let pods: Vec<_> = a1.pods.iter().chain(a2.pods.iter()).collect();
    assert_eq!(pods.len(), 2);
    let mut ranks: Vec<u32> = pods.iter().map(|p| p.rank).collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1]);
    for p in &pods {
        assert_eq!((p.world_size, p.local_rank, p.attempt), (2, 0, 1));
        assert_eq!(p.devices["gpu"], vec![0, 1, 2, 3]);
        assert_eq!(p.master_addr, "10.0.0.2", "both nodes' names are 2 long");
        assert!(p.stop.is_none());
    }
    // The digest changes with the assignments and is stable otherwise.
    assert_eq!(a1.digest, views::assignments(&m, "n1").digest);
    assert!(a1.registered && a1.healthy);
    assert!(!views::assignments(&m, "nowhere").registered);
}

#[test]
fn an_unhealthy_gpu_evicts_its_pod_and_is_never_given_again() {
    let mut m = cluster(&["n1"]);
    submit(&mut m, "w", 1, 2);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "w"), WlState::Admitted);
    // GPU 1 (held by w) fails.
    apply(&mut m, 3, Command::ReportNode(report("n1", &[1])));
    assert_eq!(state(&m, "w"), WlState::Evicting);
    let a = views::assignments(&m, "n1");
    assert!(a.pods[0].stop.as_deref().unwrap().contains("DeviceFailure"));
    exited(&mut m, "n1", "w", 1, 0, false, false);
    assert_eq!(state(&m, "w"), WlState::Pending, "requeued, not failed");
    // Three healthy GPUs remain: a 2-GPU pod fits, and never on GPU 1.
    cycle(&mut m, 6);
    let id = m.state.find_workload("w").unwrap();
    let pods = views::workload(&m, id).pods;
    assert_eq!(pods[0].devices["gpu"], vec![0, 2]);
    assert_eq!(m.state.workload(id).attempt, 2);
    // A 4-GPU workload cannot fit while GPU 1 is unhealthy; it can once it is healthy again.
    exited(&mut m, "n1", "w", 2, 0, true, false);
    assert_eq!(state(&m, "w"), WlState::Succeeded);
    submit(&mut m, "big", 1, 4);
    cycle(&mut m, 7);
    assert_eq!(state(&m, "big"), WlState::Pending);
    apply(&mut m, 8, Command::ReportNode(report("n1", &[])));
    cycle(&mut m, 9);
    assert_eq!(state(&m, "big"), WlState::Admitted);
}

#[test]
fn a_failed_pod_stops_the_gang_and_fails_the_workload() {
    let mut m = cluster(&["n1", "n2"]);
    submit(&mut m, "gang", 2, 4);
    cycle(&mut m, 2);
    let node_of = |m: &Machine, rank: usize| {
        let id = m.state.find_workload("gang").unwrap();
        views::workload(m, id).pods[rank].node.clone()
    };
    let (n0, n1) = (node_of(&m, 0), node_of(&m, 1));
    exited(&mut m, &n0, "gang", 1, 0, false, false);
    assert_eq!(state(&m, "gang"), WlState::Evicting);
    let a = views::assignments(&m, &n1);
    assert!(a.pods[0].stop.as_deref().unwrap().contains("PodFailed"));
    assert!(
        views::assignments(&m, &n0).pods.is_empty(),
        "rank 0 is gone"
    );
    exited(&mut m, &n1, "gang", 1, 1, false, false);
    assert_eq!(state(&m, "gang"), WlState::Failed);
}

/// Submits a two-pod gang with auto-resume on and `retries` retries.
fn submit_resuming(m: &mut Machine, name: &str, retries: u32) {
    use allot_common::auto_resume::{ENABLE_LABEL, MAX_RETRY_LABEL};
    let mut r = Resources::new();
    r.add(&ResourceName::gpu(), 4);
    let mut spec = WorkloadSpec::single(name, "team-a", 2, r);
    spec.labels.insert(ENABLE_LABEL.into(), "true".into());
    spec.labels
        .insert(MAX_RETRY_LABEL.into(), retries.to_string());
    apply(
        m,
        1,
        Command::Submit(SubmitInput {
            spec,
            run: None,
            client_token: None,
        }),
    );
}

/// Both pods of attempt `attempt` of `name` fail.
fn gang_fails(m: &mut Machine, name: &str, attempt: u32) {
    let id = m.state.find_workload(name).unwrap();
    let nodes: Vec<String> = (views::workload(m, id).pods.iter())
        .map(|p| p.node.clone())
        .collect();
    for (rank, node) in nodes.iter().enumerate() {
        exited(m, node, name, attempt, rank as u32, false, false);
    }
}

#[test]
fn auto_resume_queues_a_failed_gang_again_until_its_retries_are_spent() {
    let mut m = cluster(&["n1", "n2"]);
    m.format = allot_core::machine::FORMAT_AUTO_RESUME;
    submit_resuming(&mut m, "gang", 2);
    for attempt in 1..=2 {
        cycle(&mut m, 2 + attempt as i64);
        assert_eq!(state(&m, "gang"), WlState::Admitted);
        gang_fails(&mut m, "gang", attempt);
        let id = m.state.find_workload("gang").unwrap();
        let w = m.state.workload(id);
        assert_eq!(
            w.state,
            WlState::Pending,
            "attempt {attempt} is queued again"
        );
        let requeued = w
            .conditions
            .iter()
            .find(|c| c.kind == "Evicted")
            .expect("said");
        assert_eq!(&*requeued.reason, "AutoResume");
        assert!(
            requeued.message.contains(&format!("retry {attempt} of 2")),
            "{}",
            requeued.message
        );
    }
    // The third failure is the last: retries spent.
    cycle(&mut m, 10);
    assert_eq!(
        m.state
            .workload(m.state.find_workload("gang").unwrap())
            .attempt,
        3
    );
    gang_fails(&mut m, "gang", 3);
    assert_eq!(state(&m, "gang"), WlState::Failed);
    let w = m.state.workload(m.state.find_workload("gang").unwrap());
    let end = w
        .conditions
        .iter()
        .find(|c| c.kind == "Finished")
        .expect("ended");
    assert!(
        end.message.contains("all 2 retries spent"),
        "{}",
        end.message
    );
}

#[test]
fn before_the_cluster_format_allows_it_a_failed_workload_is_not_resumed() {
    // A replica of a release before auto-resume marks it failed: until every replica is
    // upgraded (the cluster's format raised), all must.
    let mut m = cluster(&["n1", "n2"]);
    m.format = allot_core::machine::FORMAT_AUTO_RESUME - 1;
    submit_resuming(&mut m, "gang", 2);
    cycle(&mut m, 2);
    gang_fails(&mut m, "gang", 1);
    assert_eq!(state(&m, "gang"), WlState::Failed);
    assert!(m.auto_resumed.is_empty());
}

#[test]
fn lost_pods_requeue_and_stale_attempts_are_ignored() {
    let mut m = cluster(&["n1"]);
    submit(&mut m, "w", 1, 1);
    cycle(&mut m, 2);
    exited(&mut m, "n1", "w", 1, 0, false, true);
    assert_eq!(state(&m, "w"), WlState::Pending);
    cycle(&mut m, 3);
    assert_eq!(state(&m, "w"), WlState::Admitted);
    // A late report about attempt 1 changes nothing about attempt 2.
    exited(&mut m, "n1", "w", 1, 0, true, false);
    assert_eq!(state(&m, "w"), WlState::Admitted);
    apply(
        &mut m,
        4,
        Command::PodsStarted {
            node: Some("n1".into()),
            workload: "w".into(),
            workload_id: None,
            attempt: 2,
            ranks: vec![0],
        },
    );
    assert_eq!(state(&m, "w"), WlState::Running);
    // A node reporting for a workload with no pod on it is refused.
    apply(&mut m, 4, Command::ReportNode(report("n2", &[])));
    let (r, _) = m.apply(&Entry {
        now: 5,
        cmd: Command::PodsExited {
            node: Some("n2".into()),
            workload: "w".into(),
            workload_id: None,
            attempt: 2,
            exits: vec![],
        },
    });
    assert!(r.unwrap_err().message.contains("no pod on node"));
}

#[test]
fn node_loss_fences_then_requeues_and_a_new_report_brings_the_node_back() {
    let mut m = cluster(&["n1"]);
    submit(&mut m, "w", 1, 1);
    cycle(&mut m, 2);
    apply(
        &mut m,
        3,
        Command::NodeLost {
            name: "n1".into(),
            reason: "no heartbeat for 20s".into(),
        },
    );
    // The first NodeLost fails the node, and its workload is evicted but keeps its room: a
    // sync its agent made just before may have started the pod, which is told to stop.
    assert_eq!(state(&m, "w"), WlState::Evicting);
    let a = views::assignments(&m, "n1");
    assert!(!a.healthy && a.health_reason.contains("no heartbeat"));
    assert_eq!(a.pods.len(), 1);
    assert!(a.pods[0]
        .stop
        .as_deref()
        .is_some_and(|s| s.contains("NodeFailures")));
    cycle(&mut m, 3);
    assert_eq!(state(&m, "w"), WlState::Evicting, "no replacement yet");
    // The second, once the agent's lease has run out for certain, requeues it.
    apply(
        &mut m,
        3,
        Command::NodeLost {
            name: "n1".into(),
            reason: "no heartbeat for 20s".into(),
        },
    );
    assert_eq!(state(&m, "w"), WlState::Pending);
    let a = views::assignments(&m, "n1");
    assert!(a.pods.is_empty());
    apply(&mut m, 4, Command::ReportNode(report("n1", &[])));
    assert!(views::assignments(&m, "n1").healthy);
    cycle(&mut m, 5);
    assert_eq!(state(&m, "w"), WlState::Admitted);
}

#[test]
fn bad_reports_are_refused_with_the_value() {
    let mut m = cluster(&[]);
    let mut r = report("n1", &[]);
    r.devices[0].index = 9;
    let (res, _) = m.apply(&Entry {
        now: 1,
        cmd: Command::ReportNode(r),
    });
    let e = res.unwrap_err().message;
    assert!(e.contains("index 9"), "{e}");
    // A type the catalog does not list: refused without cpu and memory to learn it from,
    // accepted (and learned) with them.
    let mut r = report("n9", &[]);
    r.instance_type = "ml.nope.xlarge".into();
    r.capacity = Default::default();
    r.devices.clear();
    let (res, _) = m.apply(&Entry {
        now: 1,
        cmd: Command::ReportNode(r.clone()),
    });
    let e = res.unwrap_err().message;
    assert!(
        e.contains("ml.nope.xlarge") && e.contains("no cpu or memory"),
        "{e}"
    );
    assert!(m.learned_types.is_empty());
    r.capacity = Catalog::builtin().get(T).unwrap().resources();
    let (res, _) = m.apply(&Entry {
        now: 1,
        cmd: Command::ReportNode(r),
    });
    res.expect("accepted");
    assert_eq!(
        m.catalog().get("ml.nope.xlarge").map(|t| t.vcpu),
        Ok(Catalog::builtin().get(T).unwrap().vcpu)
    );
    // A listed type without a GPU count in the catalog's sources takes its node's: 4 GPUs.
    assert!(m.catalog().get_for_quota("ml.g7.24xlarge").is_err());
    let mut r = report("n10", &[]);
    r.instance_type = "ml.g7.24xlarge".into();
    r.capacity = Catalog::builtin()
        .get("ml.g7.24xlarge")
        .unwrap()
        .resources();
    r.capacity.set(ResourceName::gpu(), 4);
    r.devices.clear();
    let (res, _) = m.apply(&Entry {
        now: 1,
        cmd: Command::ReportNode(r),
    });
    res.expect("accepted");
    let g7 = m.catalog();
    let g7 = g7.get_for_quota("ml.g7.24xlarge").expect("complete now");
    assert_eq!((g7.vcpu, g7.gpu, g7.catalogued), (96, 4, true));
}

#[test]
fn a_failed_node_keeps_its_workloads_until_their_pods_are_reported_stopped() {
    // An admin marks a node whose agent holds a lease failed: the workload is evicted, but a
    // replacement waits until the agent reports the pod stopped.
    let mut m = cluster(&["n1", "n2"]);
    submit(&mut m, "w", 1, 1);
    cycle(&mut m, 2);
    let node = views::workload(&m, m.state.find_workload("w").expect("exists")).pods[0]
        .node
        .clone();
    apply(
        &mut m,
        3,
        Command::SetNodeHealth {
            name: node.clone(),
            healthy: false,
            reason: "maintenance".into(),
        },
    );
    assert_eq!(state(&m, "w"), WlState::Evicting);
    cycle(&mut m, 4);
    assert_eq!(state(&m, "w"), WlState::Evicting, "no replacement yet");
    apply(
        &mut m,
        5,
        Command::PodsExited {
            node: Some(node),
            workload: "w".into(),
            workload_id: None,
            attempt: 1,
            exits: vec![allot_common::api::PodExit {
                rank: 0,
                succeeded: false,
                lost: false,
                detail: "stopped".into(),
                exit_code: None,
            }],
        },
    );
    assert_eq!(state(&m, "w"), WlState::Pending);
    cycle(&mut m, 6);
    assert_eq!(state(&m, "w"), WlState::Admitted);
}

#[test]
fn a_gang_waits_for_its_pods_on_a_leased_node_when_a_node_without_an_agent_fails() {
    // One pod on n1 (an agent with a lease), one on n2 (registered by an admin, no agent).
    let mut m = cluster(&["n1"]);
    let capacity = Catalog::builtin().get(T).unwrap().resources();
    apply(
        &mut m,
        0,
        Command::RegisterNode {
            name: "n2".into(),
            instance_type: T.into(),
            capacity,
        },
    );
    submit(&mut m, "g", 2, 4);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "g"), WlState::Admitted);
    apply(
        &mut m,
        3,
        Command::SetNodeHealth {
            name: "n2".into(),
            healthy: false,
            reason: "maintenance".into(),
        },
    );
    // n2's pod is gone at once (nothing runs it), but n1's may still run: no replacement yet.
    assert_eq!(state(&m, "g"), WlState::Evicting);
    cycle(&mut m, 4);
    assert_eq!(state(&m, "g"), WlState::Evicting);
    let a = views::assignments(&m, "n1");
    assert_eq!(a.pods.len(), 1);
    assert!(a.pods[0].stop.is_some(), "n1 is told to stop its pod");
    let rank = a.pods[0].rank;
    exited(&mut m, "n1", "g", 1, rank, false, false);
    assert_eq!(state(&m, "g"), WlState::Pending);
}

/// Issue 23, finding 1: with a gang on n1 and n2, n2's certificate reported n1's rank failed and
/// failed the whole workload. A node reports only ranks placed on it.
#[test]
fn a_node_cannot_report_another_nodes_rank() {
    let mut m = cluster(&["n1", "n2", "n3"]);
    submit(&mut m, "gang", 2, 4);
    cycle(&mut m, 2);
    let id = m.state.find_workload("gang").unwrap();
    let pods = views::workload(&m, id).pods;
    let (n0, n1) = (pods[0].node.clone(), pods[1].node.clone());
    let outsider = ["n1", "n2", "n3"]
        .into_iter()
        .find(|n| *n != n0 && *n != n1)
        .unwrap();
    let report = |node: &str, rank: u32| Command::PodsExited {
        node: Some(node.into()),
        workload: "gang".into(),
        workload_id: None,
        attempt: 1,
        exits: vec![PodExit {
            rank,
            succeeded: false,
            lost: false,
            detail: "forged".into(),
            exit_code: None,
        }],
    };
    // The gang's other node, and a node with no pod of it.
    for (node, rank) in [(n1.as_str(), 0), (outsider, 0)] {
        let (res, _) = m.apply(&Entry {
            now: 3,
            cmd: report(node, rank),
        });
        let e = res.unwrap_err();
        assert_eq!(e.kind, allot_common::api::ErrorKind::Forbidden, "{e:?}");
        assert!(e.message.contains(&format!("{node:?}")), "{}", e.message);
        assert_eq!(state(&m, "gang"), WlState::Admitted, "nothing changed");
    }
    // PodsStarted is held to the same rule.
    let (res, _) = m.apply(&Entry {
        now: 3,
        cmd: Command::PodsStarted {
            node: Some(n1.clone()),
            workload: "gang".into(),
            workload_id: None,
            attempt: 1,
            ranks: vec![0],
        },
    });
    let e = res.unwrap_err().message;
    assert!(
        e.contains("rank 0") && e.contains(&format!("runs on node {n0:?}")),
        "{e}"
    );
    // A rank past the gang is invalid, from anyone.
    let (res, _) = m.apply(&Entry {
        now: 3,
        cmd: report(&n0, 7),
    });
    assert!(res.unwrap_err().message.contains("rank 7 does not exist"));
    // Its own rank, it may report.
    exited(&mut m, &n0, "gang", 1, 0, false, false);
    assert_eq!(state(&m, "gang"), WlState::Evicting);
}

/// Names are unique within a team only (issue 23): two teams' workloads named alike may even
/// share a node, and an agent's report, which carries the workload's id, changes only its own.
#[test]
fn same_named_workloads_of_two_teams_are_told_apart_by_id() {
    let mut m = cluster(&["n1"]);
    apply(
        &mut m,
        0,
        support::create_quota(
            "qb",
            "team-b",
            &format!("ComputeQuotaResources=[{{InstanceType={T},Count=2}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=50}}"),
        ),
    );
    for team in ["team-a", "team-b"] {
        let mut r = Resources::new();
        r.add(&ResourceName::gpu(), 2);
        apply(
            &mut m,
            1,
            Command::Submit(SubmitInput {
                spec: WorkloadSpec::single("same", team, 1, r),
                run: None,
                client_token: None,
            }),
        );
    }
    cycle(&mut m, 2);
    let ids: Vec<_> = m.state.named("same").collect();
    assert_eq!(ids.len(), 2);
    let team_of = |m: &Machine, id| {
        m.state.teams()[m.state.workload(id).team.idx()]
            .name()
            .to_string()
    };
    let b = *ids.iter().find(|id| team_of(&m, **id) == "team-b").unwrap();
    let a = *ids.iter().find(|id| **id != b).unwrap();
    for id in [a, b] {
        assert_eq!(m.state.workload(id).state, WlState::Admitted);
    }
    let exit = |id: Option<u64>| Command::PodsExited {
        node: Some("n1".into()),
        workload: "same".into(),
        workload_id: id,
        attempt: 1,
        exits: vec![PodExit {
            rank: 0,
            succeeded: false,
            lost: false,
            detail: "exit code 1".into(),
            exit_code: None,
        }],
    };
    // Without the id, the name alone cannot say which: refused, nothing changes.
    let (res, _) = m.apply(&Entry {
        now: 3,
        cmd: exit(None),
    });
    let e = res.unwrap_err().message;
    assert!(e.contains("2 teams have a workload named \"same\""), "{e}");
    // With it, only team-b's workload fails.
    apply(&mut m, 3, exit(Some(b.0)));
    assert_eq!(m.state.workload(b).state, WlState::Failed);
    assert_eq!(m.state.workload(a).state, WlState::Admitted);
    // An id that is not this name's is refused.
    let (res, _) = m.apply(&Entry {
        now: 4,
        cmd: Command::PodsExited {
            node: Some("n1".into()),
            workload: "other".into(),
            workload_id: Some(a.0),
            attempt: 1,
            exits: vec![],
        },
    });
    assert!(res.is_err());
    // A user of team-a cancels its own "same" only.
    apply(
        &mut m,
        5,
        Command::Cancel {
            name: "same".into(),
            team: Some("team-a".into()),
        },
    );
    assert_eq!(m.state.workload(a).state, WlState::Cancelled);
    assert_eq!(m.state.workload(b).state, WlState::Failed);
}

/// Node maintenance: a cordoned node takes no new pods and keeps what runs there; a drained
/// one has its work stopped (with the grace period: the workload keeps its room until its pods
/// exit) and requeued elsewhere; uncordoned, it takes pods again.
#[test]
fn cordon_drain_and_uncordon_move_work_off_a_node() {
    let mut m = cluster(&["n1", "n2"]);
    submit(&mut m, "w", 1, 4);
    cycle(&mut m, 2);
    let node_of = |m: &Machine, name: &str| {
        let id = m.state.find_workload(name).expect("known");
        views::workload(m, id).pods[0].node.clone()
    };
    let first = node_of(&m, "w");
    let other = if first == "n1" { "n2" } else { "n1" };
    apply(
        &mut m,
        3,
        Command::CordonNode {
            name: other.into(),
            cordoned: true,
        },
    );
    assert!(views::nodes(&m)
        .iter()
        .any(|n| n.name == other && n.cordoned));
    submit(&mut m, "x", 1, 4);
    cycle(&mut m, 4);
    assert_eq!(
        state(&m, "x"),
        WlState::Pending,
        "the only free node is cordoned"
    );
    apply(
        &mut m,
        5,
        Command::CordonNode {
            name: other.into(),
            cordoned: false,
        },
    );
    cycle(&mut m, 6);
    assert_eq!(node_of(&m, "x"), other);
    // Drain x's node: x stops (its room held until its pod exits), then waits: w holds the
    // other node.
    apply(&mut m, 7, Command::DrainNode { name: other.into() });
    assert_eq!(state(&m, "x"), WlState::Evicting);
    assert_eq!(
        state(&m, "w"),
        WlState::Admitted,
        "work elsewhere is not touched"
    );
    exited(&mut m, other, "x", 1, 0, false, false);
    assert_eq!(state(&m, "x"), WlState::Pending, "requeued, not failed");
    cycle(&mut m, 8);
    assert_eq!(
        state(&m, "x"),
        WlState::Pending,
        "the drained node stays cordoned"
    );
    apply(
        &mut m,
        9,
        Command::CordonNode {
            name: other.into(),
            cordoned: false,
        },
    );
    cycle(&mut m, 10);
    assert_eq!(node_of(&m, "x"), other);
    let unknown = m.apply(&Entry {
        now: 11,
        cmd: Command::DrainNode { name: "n9".into() },
    });
    assert!(unknown.0.expect_err("unknown node").message.contains("n9"));
}

#[test]
fn a_node_is_removed_only_once_out_of_service_and_empty_and_comes_back_if_it_reports() {
    let mut m = cluster(&["n1", "n2"]);
    submit(&mut m, "w", 1, 4);
    cycle(&mut m, 2);
    let id = m.state.find_workload("w").unwrap();
    let node = views::workload(&m, id).pods[0].node.clone();
    let remove = |m: &mut Machine, name: &str| {
        m.apply(&Entry {
            now: 3,
            cmd: Command::RemoveNode { name: name.into() },
        })
        .0
    };
    let e = remove(&mut m, &node).unwrap_err();
    assert!(
        e.message.contains("in service: cordon or drain it first"),
        "{}",
        e.message
    );
    apply(
        &mut m,
        3,
        Command::CordonNode {
            name: node.clone(),
            cordoned: true,
        },
    );
    let e = remove(&mut m, &node).unwrap_err();
    assert!(
        e.message.contains("still hold room") && e.message.contains('w'),
        "{}",
        e.message
    );
    exited(&mut m, &node, "w", 1, 0, true, false);
    remove(&mut m, &node).expect("removed");
    m.state.check_invariants().expect("invariants hold");
    assert!(views::nodes(&m).iter().all(|n| n.name != node));
    assert_eq!(views::nodes(&m).len(), 1);
    // Nothing is placed there, and it cannot be removed twice.
    submit(&mut m, "after", 1, 4);
    cycle(&mut m, 6);
    let id = m.state.find_workload("after").unwrap();
    assert!(views::workload(&m, id).pods.iter().all(|p| p.node != node));
    assert!(remove(&mut m, &node)
        .unwrap_err()
        .message
        .contains("unknown node"));
    // Its agent reports again: it is back, cordoned.
    apply(&mut m, 7, Command::ReportNode(report(&node, &[])));
    let back = views::nodes(&m)
        .into_iter()
        .find(|n| n.name == node)
        .expect("back");
    assert!(back.cordoned, "{back:?}");
}

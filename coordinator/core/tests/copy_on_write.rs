//! A copy of the machine (what a snapshot encodes off the raft thread) shares its workloads
//! with the live machine until one changes: changing the live machine afterwards must never
//! show through in the copy.

mod support;

use allot_common::api::{RunSpec, SubmitInput};
use allot_common::{ResourceName, Resources, WorkloadSpec};
use allot_core::machine::{Command, Entry, Machine};

fn apply(m: &mut Machine, now: i64, cmd: Command) {
    let (r, _) = m.apply(&Entry { now, cmd });
    r.expect("the command applies");
}

fn submit(name: &str) -> Command {
    let mut r = Resources::new();
    r.add(&ResourceName::cpu(), 1);
    Command::Submit(SubmitInput {
        spec: WorkloadSpec::single(name, "team-a", 1, r),
        run: Some(RunSpec {
            command: vec!["sleep".into(), "60".into()],
            ..RunSpec::default()
        }),
        client_token: Some(format!("token-{name}")),
    })
}

fn encode(m: &Machine) -> Vec<u8> {
    allot_net::wire::encode_snapshot(m).expect("the machine encodes")
}

#[test]
fn a_copy_keeps_the_state_it_was_made_at() {
    let mut m = support::machine_with_team_a(
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}]",
    );
    for i in 0..4 {
        apply(&mut m, i, submit(&format!("w{i}")));
    }
    apply(
        &mut m,
        10,
        Command::Cancel {
            name: "w3".into(),
            team: None,
        },
    );
    let copy = m.clone();
    let at_copy = encode(&copy);
    // Change the shared records in the live machine: workloads in place (admitted by a plan,
    // cancelled), a new submit with its run and token, and the name index.
    let caps = allot_common::Catalog::builtin()
        .get("ml.g5.8xlarge")
        .expect("in the catalog")
        .resources();
    apply(
        &mut m,
        19,
        Command::RegisterNode {
            name: "n1".into(),
            instance_type: "ml.g5.8xlarge".into(),
            capacity: caps,
        },
    );
    let plan = allot_core::schedule(&m.state, 19);
    assert!(plan.has_decisions(), "the plan admits something");
    apply(&mut m, 19, Command::Plan(plan));
    apply(
        &mut m,
        20,
        Command::Cancel {
            name: "w0".into(),
            team: None,
        },
    );
    apply(&mut m, 21, submit("w4"));
    let w1 = m.state.find_workload("w1").expect("w1");
    assert_eq!(m.state.workload(w1).state, allot_core::WlState::Admitted);
    assert_ne!(encode(&m), at_copy, "the live machine changed");
    assert_eq!(encode(&copy), at_copy, "the copy did not");
    assert!(copy.state.find_workload("w4").is_err());
    for name in ["w0", "w1"] {
        let id = copy.state.find_workload(name).expect("in the copy");
        assert_eq!(copy.state.workload(id).state, allot_core::WlState::Pending);
    }
}

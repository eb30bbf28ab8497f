//! A workload names its priority class as allot's job files do (`training`) or as HyperPod's
//! jobs label it (`training-priority`): both get the class's priority, and the workload keeps
//! the class's own name (in `get workloads`, `history` and usage reports alike).

use allot_common::api::SubmitInput;
use allot_common::workload::PriorityRef;
use allot_common::{ClusterPolicy, PriorityClass, ResourceName, Resources, WorkloadSpec};
use allot_core::machine::{Command, Entry};

mod support;

#[test]
fn the_hyperpod_label_form_names_the_class() {
    let mut m = support::machine_with_team_a(
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]",
    );
    m.state
        .set_policy(ClusterPolicy {
            priority_classes: vec![PriorityClass {
                name: "training".into(),
                weight: 70,
            }],
            ..Default::default()
        })
        .expect("a policy");
    for (name, class) in [("a", "training"), ("b", "training-priority"), ("c", "")] {
        let mut r = Resources::new();
        r.add(&ResourceName::gpu(), 1);
        let mut spec = WorkloadSpec::single(name, "team-a", 1, r);
        if !class.is_empty() {
            spec.priority = PriorityRef::Class(class.into());
        }
        let cmd = Command::Submit(SubmitInput {
            spec,
            run: None,
            client_token: None,
        });
        m.apply(&Entry { now: 1, cmd }).0.expect("submitted");
    }
    let wl = |n: &str| m.state.workload(m.state.find_workload(n).expect("known"));
    assert_eq!((wl("a").priority, wl("b").priority), (70, 70));
    assert_eq!(wl("b").spec.priority, PriorityRef::Class("training".into()));
    assert_eq!(wl("c").priority, 0, "no class: priority 0, as HyperPod");
    let mut r = Resources::new();
    r.add(&ResourceName::gpu(), 1);
    let mut spec = WorkloadSpec::single("d", "team-a", 1, r);
    spec.priority = PriorityRef::Class("serving-priority".into());
    let cmd = Command::Submit(SubmitInput {
        spec,
        run: None,
        client_token: None,
    });
    let e = m
        .apply(&Entry { now: 1, cmd })
        .0
        .expect_err("unknown class");
    assert!(
        e.message.contains("serving-priority") && e.message.contains("training"),
        "{}",
        e.message
    );
}

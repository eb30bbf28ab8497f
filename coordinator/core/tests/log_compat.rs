//! Log entries written by an earlier release still decode and apply. Entries are bincode, read
//! by variant index and field order: a field added to a command's variant makes every entry
//! written before it undecodable, and the replicas skip it (issue 55 is to version the
//! formats). These bytes are entries as the release 75e4f1d wrote them (`wire::encode` of an
//! `Entry`), so this test fails when a change makes them unreadable.

use allot_core::machine::{Command, Entry, Machine, SchedulerConfigChange};
use allot_net::wire;

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `create-cluster-scheduler-config --name default --scheduler-config FairShare=Enabled
/// --max-pending-per-team 7 --description d`, at 1,700,000,000,000 ms.
const CREATE: &str =
    "fd00d0ca9f17030000030764656661756c74114661697253686172653d456e61626c656401070000010164";
/// `update-cluster-scheduler-config` of it to `FairShare=Disabled`, target version 1.
const UPDATE: &str =
    "fd00d0ca9f17030000040764656661756c74124661697253686172653d44697361626c65640100000000";

#[test]
fn scheduler_config_entries_written_before_the_stability_rules_decode_and_apply() {
    let create: Entry = wire::decode(&bytes(CREATE)).expect("the old create entry decodes");
    assert!(matches!(
        &create.cmd,
        Command::CreateSchedulerConfig { name, config, description, .. }
            if name == "default" && config == "FairShare=Enabled" && description.as_deref() == Some("d")
    ));
    let update: Entry = wire::decode(&bytes(UPDATE)).expect("the old update entry decodes");
    let mut m = Machine::new();
    let (r, _) = m.apply(&create);
    r.expect("the old create applies");
    // A config made by an entry without the rules gets the live defaults.
    assert_eq!(m.state.policy.stability, allot_common::Stability::default());
    let (r, _) = m.apply(&update);
    r.expect("the old update applies");
    assert!(!m.state.policy.fair_share);
    let view = &m.scheduler_config.as_ref().expect("a config").view;
    assert_eq!((view.version, view.limits.max_pending_per_team), (2, 7));
}

/// The stability rules travel in a variant appended to the command enum: a current entry
/// round-trips, and the bare commands keep the layout above.
#[test]
fn a_scheduler_config_entry_with_the_stability_rules_round_trips() {
    let old: Entry = wire::decode(&bytes(CREATE)).expect("decodes");
    assert_eq!(wire::encode(&old).expect("encodes"), bytes(CREATE));
    let Command::CreateSchedulerConfig {
        name,
        config,
        limits,
        description,
    } = old.cmd
    else {
        panic!("the old entry is a create");
    };
    let e = Entry {
        now: old.now,
        cmd: Command::WithStability {
            change: SchedulerConfigChange::Create {
                name,
                config,
                limits,
                description,
            },
            stability: allot_common::api::StabilityInput {
                minimum_run_time_s: Some(60),
                preemption_budget: Some(0),
            },
        },
    };
    let back: Entry = wire::decode(&wire::encode(&e).expect("encodes")).expect("decodes");
    assert_eq!(back, e);
    let mut m = Machine::new();
    m.apply(&back).0.expect("applies");
    assert_eq!(
        m.state.policy.stability,
        allot_common::Stability {
            minimum_run_time_s: 60,
            preemption_budget: 0
        }
    );
}

//! Log entries written by an earlier release still decode and apply. Entries are bincode, read
//! by variant index and field order: a field added to a command's variant makes every entry
//! written before it undecodable, and the replicas skip it (issue 55 is to version the
//! formats). These bytes are entries as the release 75e4f1d wrote them (`wire::encode` of an
//! `Entry`), so this test fails when a change makes them unreadable. They are read the way a
//! replica reads its log (`SnapshotCodec::wire`), which turns the scheduler config text of
//! older entries into the typed command the core applies.

use allot_common::api::StabilityInput;
use allot_common::Stability;
use allot_coordinator::config_text::upgrade;
use allot_coordinator::replica::SnapshotCodec;
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

/// An entry as a replica reads it from its log.
fn read(b: &[u8]) -> Entry {
    (SnapshotCodec::wire().decode_cmd)(b, allot_coordinator::format::CURRENT)
        .expect("the entry decodes")
}

#[test]
fn scheduler_config_entries_written_before_the_stability_rules_decode_and_apply() {
    let raw: Entry = wire::decode(&bytes(CREATE)).expect("the old create entry decodes");
    assert!(matches!(
        &raw.cmd,
        Command::CreateSchedulerConfig { name, config, description, .. }
            if name == "default" && config == "FairShare=Enabled" && description.as_deref() == Some("d")
    ));
    // The core reads no AWS text: the entry as written is refused, as read it applies.
    let err = Machine::new()
        .apply(&raw)
        .0
        .expect_err("the core refuses the text form");
    assert!(err.message.contains("log reader"), "{}", err.message);
    let create = read(&bytes(CREATE));
    let Command::SetSchedulerConfig(set) = &create.cmd else {
        panic!(
            "the old create is read as the typed command: {:?}",
            create.cmd
        );
    };
    assert!(set.policy.fair_share && set.target_version.is_none());
    let update = read(&bytes(UPDATE));
    let mut m = Machine::new();
    let (r, _) = m.apply(&create);
    r.expect("the old create applies");
    // A config made by an entry without the rules gets the live defaults.
    assert_eq!(m.state.policy().stability, Stability::default());
    let (r, _) = m.apply(&update);
    r.expect("the old update applies");
    assert!(!m.state.policy().fair_share);
    let view = &m.scheduler_config.as_ref().expect("a config").view;
    assert_eq!((view.version, view.limits.max_pending_per_team), (2, 7));
    assert_eq!(view.description.as_deref(), Some("d"));
}

/// An entry written with the stability rules (`WithStability`, the text form) keeps its rules
/// when it is read into the typed form.
#[test]
fn a_scheduler_config_entry_with_the_stability_rules_is_read_with_them() {
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
            stability: StabilityInput {
                minimum_run_time_s: Some(60),
                preemption_budget: Some(0),
            },
        },
    };
    let back = read(&wire::encode(&e).expect("encodes"));
    assert!(matches!(back.cmd, Command::SetSchedulerConfig(_)));
    let mut m = Machine::new();
    m.apply(&back).0.expect("applies");
    assert_eq!(
        m.state.policy().stability,
        Stability {
            minimum_run_time_s: 60,
            preemption_budget: 0
        }
    );
}

/// An old entry whose text never parsed stays refused, with nothing changed, on every replica.
#[test]
fn an_old_entry_with_bad_text_is_still_refused() {
    let e = Entry {
        now: 1,
        cmd: Command::CreateSchedulerConfig {
            name: "default".into(),
            config: "FairShare=Sometimes".into(),
            limits: Default::default(),
            description: None,
        },
    };
    let read = upgrade(e.clone());
    assert!(
        matches!(read.cmd, Command::WithStability { .. }),
        "{:?}",
        read.cmd
    );
    let mut m = Machine::new();
    assert!(m.apply(&read).0.is_err());
    assert!(m.scheduler_config.is_none());
}

/// The typed command round-trips through the log's encoding.
#[test]
fn the_typed_command_round_trips() {
    let e = read(&bytes(UPDATE));
    let again = read(&wire::encode(&e).expect("encodes"));
    assert_eq!(again, e);
}

/// A snapshot as 2d6bbda (the release before the usage ledger) wrote it: team-a with a quota of
/// two ml.g5.8xlarge, one such node, three one-GPU workloads submitted and a plan applied.
const SNAPSHOT_2D6BBDA: &str = include_str!("data/snapshot-2d6bbda.hex");

#[test]
fn a_snapshot_written_before_the_usage_ledger_is_read_with_one() {
    let b = bytes(SNAPSHOT_2D6BBDA.trim());
    assert!(
        wire::decode_snapshot::<Machine>(&b).is_err(),
        "the fixture is in the older layout"
    );
    let m = (SnapshotCodec::wire().decode_machine)(&b, allot_coordinator::format::CURRENT)
        .expect("the old snapshot is read");
    let holding: Vec<_> = (m.state.workloads().iter())
        .filter(|(_, w)| w.state.holds_quota())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(m.state.workloads().len(), 3);
    assert!(!holding.is_empty(), "the plan admitted something");
    let counted: Vec<_> = m.usage.counted().collect();
    assert_eq!(counted, holding, "what runs is counted from here on");
    // Usage accrues from the latest time the snapshot shows (its plan, at 3,000 ms).
    let mut m = m;
    let q = allot_common::usage::UsageQuery {
        since_ms: 0,
        until_ms: 4 * 3_600_000,
        team: None,
        by: vec![],
    };
    m.apply(&Entry {
        now: 3_600_000,
        cmd: Command::Cancel {
            name: "w2".into(),
            team: None,
        },
    })
    .0
    .expect("applies");
    let r = allot_core::usage_report::report(&m.usage, &q, 2 * 3_600_000).expect("a report");
    let gpu = r
        .lines
        .iter()
        .find(|l| l.resource == "gpu")
        .expect("a gpu line");
    assert_eq!(
        gpu.amounts.used,
        holding.len() as i128 * (2 * 3_600_000 - 3_000),
        "one GPU each from the plan to the report"
    );
}

//! Finished workloads are kept for a day, or for ten minutes once more than `FINISHED_KEEP_MAX`
//! are kept, then forgotten: the replicated state (and so its snapshots and a restart) stays
//! the same size however many workloads a cluster has run.

use allot_common::api::{ErrorKind, Reply, RunSpec, SubmitInput};
use allot_common::{ResourceName, Resources, WorkloadSpec};
use allot_core::machine::{
    Command, Entry, Machine, FINISHED_KEEP_MAX, FINISHED_KEEP_MS, FINISHED_MIN_KEEP_MS,
};
use allot_core::WlState;

mod support;

fn apply(m: &mut Machine, now: i64, cmd: Command) -> Reply {
    let (r, _) = m.apply(&Entry { now, cmd });
    r.expect("command applies")
}

fn machine() -> Machine {
    support::machine_with_team_a("ComputeQuotaResources=[{InstanceType=ml.g5.12xlarge,Count=1}]")
}

fn input(name: &str) -> SubmitInput {
    let mut r = Resources::new();
    r.add(&ResourceName::cpu(), 1);
    SubmitInput {
        spec: WorkloadSpec::single(name, "team-a", 1, r),
        run: Some(RunSpec::default()),
        client_token: Some(format!("token-{name}")),
    }
}

fn submit_and_cancel(m: &mut Machine, name: &str, now: i64) {
    apply(m, now, Command::Submit(input(name)));
    apply(
        m,
        now,
        Command::Cancel {
            name: name.into(),
            team: None,
        },
    );
}

fn known(m: &Machine, name: &str) -> bool {
    m.state.find_workload(name).is_ok()
}

#[test]
fn a_finished_workload_is_forgotten_a_day_after_it_finished() {
    let mut m = machine();
    submit_and_cancel(&mut m, "w", 1_000);
    let id = m.state.find_workload("w").expect("w is known");
    assert_eq!(m.state.workload(id).state, WlState::Cancelled);

    // A retried submit (same token) within the day finds it: it is not run again.
    let again = apply(
        &mut m,
        1_000 + FINISHED_KEEP_MS,
        Command::Submit(input("w")),
    );
    assert!(
        matches!(again, Reply::Submitted { ref state, .. } if state == "Cancelled"),
        "{again:?}"
    );
    assert!(known(&m, "w"));

    // Any entry after the day has passed forgets it, with what the machine kept beside it.
    submit_and_cancel(&mut m, "other", 1_001 + FINISHED_KEEP_MS);
    assert!(!known(&m, "w"), "w is still kept after a day");
    assert!(!m.runs.contains_key(&id) && !m.tokens.contains_key(&id));
    assert!(m.finished.iter().all(|(_, f)| *f != id));
    let (r, _) = m.apply(&Entry {
        now: 1_002 + FINISHED_KEEP_MS,
        cmd: Command::Cancel {
            name: "w".into(),
            team: None,
        },
    });
    let e = r.expect_err("cancelling a forgotten workload is refused");
    assert_eq!(e.kind, ErrorKind::NotFound, "{e:?}");

    // Its name can be used again, for a new workload.
    apply(
        &mut m,
        1_003 + FINISHED_KEEP_MS,
        Command::Submit(input("w")),
    );
    let new = m.state.find_workload("w").expect("the new w");
    assert_ne!(new, id);
    assert_eq!(m.state.workload(new).state, WlState::Pending);
    m.state.check_invariants().expect("invariants hold");
}

#[test]
fn beyond_the_cap_the_oldest_are_forgotten_once_ten_minutes_old() {
    let mut m = machine();
    let extra = 5;
    for i in 0..FINISHED_KEEP_MAX + extra {
        submit_and_cancel(&mut m, &format!("w-{i:05}"), 10 + i as i64);
    }
    // Over the cap, but none has been finished for ten minutes: all are kept.
    submit_and_cancel(&mut m, "late", FINISHED_MIN_KEEP_MS);
    assert_eq!(m.finished.len(), FINISHED_KEEP_MAX + extra + 1);
    assert!(known(&m, "w-00000"));

    // Ten minutes on, the oldest go until the cap holds; the newest stay.
    let later = FINISHED_MIN_KEEP_MS + 10 + extra as i64 + 2;
    apply(&mut m, later, Command::Submit(input("pending")));
    assert_eq!(m.finished.len(), FINISHED_KEEP_MAX);
    for i in 0..=extra {
        assert!(!known(&m, &format!("w-{i:05}")), "w-{i:05} is still kept");
    }
    assert!(known(&m, &format!("w-{:05}", extra + 1)));
    assert!(known(&m, "late"));
    // Only finished workloads are ever forgotten.
    assert!(known(&m, "pending"));
    assert_eq!(m.state.workloads().len(), FINISHED_KEEP_MAX + 1);
    assert_eq!(m.runs.len(), FINISHED_KEEP_MAX + 1);
    m.state.check_invariants().expect("invariants hold");
}

/// A name is unique among a team's active workloads only: once its workload finished, the same
/// submit (another token) queues a new workload under the name, and the finished one keeps its
/// record under its id until it is forgotten.
#[test]
fn a_finished_workloads_name_can_be_used_again() {
    let mut m = machine();
    submit_and_cancel(&mut m, "w", 1_000);
    let first = m.state.find_workload("w").expect("w is known");

    // While the new one is active, a third submit of the name is refused, saying why.
    let mut rerun = input("w");
    rerun.client_token = Some("second-run".into());
    let r = apply(&mut m, 2_000, Command::Submit(rerun.clone()));
    let Reply::Submitted { id, existing, .. } = r else {
        panic!("{r:?}")
    };
    assert!(!existing);
    assert_ne!(id, first.0);
    assert_eq!(m.state.find_workload("w").map(|i| i.0), Ok(id));
    assert_eq!(m.state.workload(first).state, WlState::Cancelled);
    let mut third = input("w");
    third.client_token = Some("third-run".into());
    let (r, _) = m.apply(&Entry {
        now: 3_000,
        cmd: Command::Submit(third),
    });
    let e = r.expect_err("the name is taken while its workload is active");
    assert_eq!(e.kind, ErrorKind::Conflict);
    assert!(e.message.contains("still pending"), "{}", e.message);

    // A retry of the second submit (same token) still finds the second workload.
    let r = apply(&mut m, 4_000, Command::Submit(rerun));
    assert!(
        matches!(r, Reply::Submitted { id: i, existing: true, .. } if i == id),
        "{r:?}"
    );

    // Forgetting the first (a day later) leaves the name with the second.
    apply(
        &mut m,
        1_001 + FINISHED_KEEP_MS,
        Command::Submit(input("x")),
    );
    assert!(m.state.workloads().get(&first).is_none());
    assert_eq!(m.state.find_workload("w").map(|i| i.0), Ok(id));
}

/// An element whose name an active workload holds is skipped, and takes none of the array's
/// room: the next element is queued in its place.
#[test]
fn an_element_whose_name_is_taken_leaves_its_room_to_the_next() {
    let mut m = machine();
    apply(&mut m, 1_000, Command::Submit(input("w-0")));
    let r = apply(
        &mut m,
        2_000,
        Command::SubmitArray {
            input: input("w"),
            array: "0-2%1".into(),
        },
    );
    assert!(
        matches!(
            r,
            Reply::ArraySubmitted {
                elements: 3,
                queued: 1,
                ..
            }
        ),
        "{r:?}"
    );
    let rec = m.arrays.values().next().expect("the array");
    assert_eq!((rec.refused, rec.released), (1, 2));
    assert!(m.state.find_scoped("w-1", Some("team-a")).is_ok());
}

//! Usage accounting reconciles: a cluster run through the machine's commands with known
//! durations and a preemption, and the report's totals checked to the millisecond. The ledger
//! survives a copy through a snapshot's encoding, and a report of part of the period sums to
//! the whole.

use allot_common::api::{NodeReport, PodExit, SubmitInput};
use allot_common::usage::{UsageBy, UsageQuery, UsageReport};
use allot_common::{Catalog, ResourceName, Resources, WorkloadSpec};
use allot_core::machine::{Command, Entry, Machine};
use allot_core::usage_report::report;
use allot_core::{schedule, WlState};

mod support;

const T: &str = "ml.g5.12xlarge"; // 4 GPUs per node
const H: i64 = 3_600_000;
/// One GPU for one hour, in the ledger's unit (GPU-milliseconds).
const GPU_H: i128 = H as i128;

fn apply(m: &mut Machine, now: i64, cmd: Command) {
    let (r, _) = m.apply(&Entry { now, cmd });
    r.expect("command applies");
    let mut counted: Vec<_> = m.usage.counted().collect();
    counted.sort();
    let mut holding: Vec<_> = (m.state.workloads().iter())
        .filter(|(_, w)| w.state.holds_quota())
        .map(|(id, _)| id)
        .collect();
    holding.sort();
    assert_eq!(
        counted, holding,
        "the ledger counts what holds quota, at {now}"
    );
    (m.usage.check_rows(&m.state)).expect("the rows an entry left equal a recomputation");
}

fn node(name: &str) -> NodeReport {
    NodeReport {
        name: name.into(),
        instance_type: T.into(),
        capacity: Catalog::builtin().get(T).expect("type").resources(),
        address: "10.0.0.1".into(),
        lease_ms: 10_000,
        agent_version: "test".into(),
        ..Default::default()
    }
}

fn submit(m: &mut Machine, now: i64, team: &str, name: &str) {
    let mut r = Resources::new();
    r.add(&ResourceName::gpu(), 4);
    apply(
        m,
        now,
        Command::Submit(SubmitInput {
            spec: WorkloadSpec::single(name, team, 1, r),
            run: None,
            client_token: None,
        }),
    );
}

fn cycle(m: &mut Machine, now: i64) {
    let plan = schedule(&m.state, now);
    apply(m, now, Command::Plan(plan));
}

fn exited(m: &mut Machine, now: i64, wl: &str, ok: bool) {
    let id = m.state.find_workload(wl).expect("known");
    let w = m.state.workload(id);
    let node = allot_core::views::workload(m, id).pods[0].node.clone();
    let attempt = w.attempt;
    apply(
        m,
        now,
        Command::PodsExited {
            node: Some(node),
            workload: wl.into(),
            workload_id: None,
            attempt,
            exits: vec![PodExit {
                rank: 0,
                succeeded: ok,
                lost: false,
                detail: "test".into(),
                exit_code: None,
            }],
        },
    );
}

fn state(m: &Machine, name: &str) -> WlState {
    m.state.workload(m.state.find_workload(name).unwrap()).state
}

/// Two teams of 4 GPUs each in one cohort, on two 4-GPU nodes. team-a runs `a1` from 1 h to
/// 5 h and `a2` (borrowing team-b's 4) from 2 h until team-b reclaims them at 3 h; `a2`'s pods
/// stop 10 s later and `b1` runs from then to 5 h.
fn run() -> Machine {
    let shorthand = format!(
        "ComputeQuotaResources=[{{InstanceType={T},Count=1}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}}"
    );
    let mut m = support::machine_with_team_a(&shorthand);
    apply(&mut m, 0, support::create_quota("qb", "team-b", &shorthand));
    apply(&mut m, 0, Command::ReportNode(node("n1")));
    apply(&mut m, 0, Command::ReportNode(node("n2")));
    submit(&mut m, H, "team-a", "a1");
    cycle(&mut m, H);
    submit(&mut m, 2 * H, "team-a", "a2");
    cycle(&mut m, 2 * H);
    assert_eq!(
        (state(&m, "a1"), state(&m, "a2")),
        (WlState::Admitted, WlState::Admitted)
    );
    submit(&mut m, 3 * H, "team-b", "b1");
    cycle(&mut m, 3 * H);
    assert_eq!(
        state(&m, "a2"),
        WlState::Evicting,
        "team-b reclaims its nominal"
    );
    exited(&mut m, 3 * H + 10_000, "a2", false);
    assert_eq!(state(&m, "a2"), WlState::Pending);
    cycle(&mut m, 3 * H + 10_000);
    assert_eq!(state(&m, "b1"), WlState::Admitted);
    exited(&mut m, 5 * H, "a1", true);
    exited(&mut m, 5 * H, "b1", true);
    m
}

fn gpu_line<'a>(r: &'a UsageReport, group: &[&str]) -> &'a allot_common::usage::UsageAmounts {
    &r.lines
        .iter()
        .find(|l| l.resource == "gpu" && l.group == group)
        .unwrap_or_else(|| panic!("no gpu line for {group:?} in {:#?}", r.lines))
        .amounts
}

fn query(by: Vec<UsageBy>) -> UsageQuery {
    UsageQuery {
        since_ms: 0,
        until_ms: 6 * H,
        team: None,
        by,
    }
}

#[test]
fn the_totals_reconcile_to_the_millisecond() {
    let m = run();
    let r = report(&m.usage, &query(vec![UsageBy::Team]), 6 * H).expect("a report");
    let ten_s = 4 * 10_000i128; // 4 GPUs for 10 s
    let a = gpu_line(&r, &["team-a"]);
    assert_eq!(a.used, 4 * 4 * GPU_H + 4 * GPU_H + ten_s);
    assert_eq!(a.lost, 4 * GPU_H, "a2 ran 1 h before its preemption");
    let qa = a.quota.expect("a team row has the quota split");
    assert_eq!(qa.own, 4 * 4 * GPU_H);
    assert_eq!(qa.borrowed, 4 * GPU_H + ten_s);
    assert_eq!(qa.lent, 0);
    assert_eq!(qa.nominal, 4 * 6 * GPU_H);
    assert_eq!(qa.idle, qa.nominal - qa.own);
    let b = gpu_line(&r, &["team-b"]);
    assert_eq!(b.used, 4 * 2 * GPU_H - ten_s);
    let qb = b.quota.expect("split");
    assert_eq!(qb.lent, 4 * GPU_H + ten_s, "b lent a2 its 4 GPUs");
    assert_eq!(qb.own + qb.lent + qb.idle, qb.nominal);
    let lent: Vec<_> = r.lending.iter().filter(|l| l.resource == "gpu").collect();
    assert_eq!(lent.len(), 1, "{lent:?}");
    assert_eq!(
        (
            lent[0].borrower.as_str(),
            lent[0].lender.as_str(),
            lent[0].amount
        ),
        ("team-a", "team-b", 4 * GPU_H + ten_s)
    );
}

#[test]
fn groupings_and_periods_sum_to_the_same_totals() {
    let m = run();
    let whole = report(&m.usage, &query(vec![UsageBy::Team]), 6 * H).expect("a report");
    let a = gpu_line(&whole, &["team-a"]).used;
    // By class: the workloads name none.
    let by_class =
        report(&m.usage, &query(vec![UsageBy::Team, UsageBy::Class]), 6 * H).expect("report");
    let c = gpu_line(&by_class, &["team-a", "-"]);
    assert_eq!(c.used, a);
    assert!(c.quota.is_none(), "quota belongs to teams, not classes");
    // Two halves of the period add up to the whole.
    let half = |since_ms, until_ms| {
        let q = UsageQuery {
            since_ms,
            until_ms,
            ..query(vec![UsageBy::Team])
        };
        gpu_line(&report(&m.usage, &q, 6 * H).expect("report"), &["team-a"]).used
    };
    assert_eq!(half(0, 2 * H) + half(2 * H, 6 * H), a);
    // A team filter keeps that team's rows and the lending it took part in.
    let q = UsageQuery {
        team: Some("team-b".into()),
        ..query(vec![UsageBy::Team])
    };
    let only_b = report(&m.usage, &q, 6 * H).expect("report");
    assert!(only_b.lines.iter().all(|l| l.group == ["team-b"]));
    assert_eq!(only_b.lending.len(), whole.lending.len());
}

#[test]
fn the_open_interval_counts_up_to_now_and_a_copy_through_a_snapshot_agrees() {
    let shorthand = format!("ComputeQuotaResources=[{{InstanceType={T},Count=1}}]");
    let mut m = support::machine_with_team_a(&shorthand);
    apply(&mut m, 0, Command::ReportNode(node("n1")));
    submit(&mut m, H, "team-a", "a1");
    cycle(&mut m, H);
    // Nothing has happened since 1 h; a report at 2.5 h counts a1's 1.5 h.
    let r = report(&m.usage, &query(vec![UsageBy::Team]), 5 * H / 2).expect("report");
    assert_eq!(gpu_line(&r, &["team-a"]).used, 4 * 3 * GPU_H / 2);
    let bytes = allot_net::wire::encode_snapshot(&m).expect("encodes");
    let back: Machine = allot_net::wire::decode_snapshot(&bytes).expect("decodes");
    assert_eq!(back.usage, m.usage);
    let mut back = back;
    exited(&mut back, 2 * H, "a1", true);
    exited(&mut m, 2 * H, "a1", true);
    let later = |m: &Machine| report(&m.usage, &query(vec![UsageBy::Day]), 6 * H).expect("r");
    assert_eq!(later(&back), later(&m));
    assert_eq!(gpu_line(&later(&m), &["1970-01-01"]).used, 4 * GPU_H);
}

#[test]
fn bad_periods_are_refused_with_the_values() {
    let m = Machine::new();
    let q = UsageQuery {
        since_ms: 2 * H,
        until_ms: H,
        team: None,
        by: vec![],
    };
    let e = report(&m.usage, &q, 0).expect_err("refused");
    assert!(
        e.contains("--until") && e.contains("1970-01-01T01:00:00Z"),
        "{e}"
    );
    let q = UsageQuery {
        since_ms: 0,
        until_ms: 1000 * 24 * H,
        team: None,
        by: vec![],
    };
    assert!(report(&m.usage, &q, 0)
        .expect_err("too long")
        .contains("400 days"));
}

/// Hours past the 31 kept by the hour are folded into days: the totals stay, the rows shrink.
#[test]
fn old_hours_fold_into_days_with_the_same_totals() {
    let shorthand = format!("ComputeQuotaResources=[{{InstanceType={T},Count=1}}]");
    let mut m = support::machine_with_team_a(&shorthand);
    apply(&mut m, 0, Command::ReportNode(node("n1")));
    // A workload runs for 40 days, with an entry every 6 hours that moves another.
    submit(&mut m, 0, "team-a", "long");
    cycle(&mut m, 0);
    let days = 40;
    let mut d = 0;
    for k in 1..(days * 4) {
        let now = k * 6 * H;
        let mut r = Resources::new();
        r.add(&ResourceName::cpu(), 1000);
        apply(
            &mut m,
            now,
            Command::Submit(SubmitInput {
                spec: WorkloadSpec::single(&format!("s{k}"), "team-a", 1, r),
                run: None,
                client_token: None,
            }),
        );
        cycle(&mut m, now);
        exited(&mut m, now + 1000, &format!("s{k}"), true);
        d = now + 1000;
    }
    let (hours, days_kept, _) = m.usage.size();
    assert!(hours <= 31 * 24 + 1, "{hours} hours kept by the hour");
    assert!(days_kept >= 8, "{days_kept} days folded");
    let q = UsageQuery {
        since_ms: 0,
        until_ms: d,
        team: None,
        by: vec![UsageBy::Team],
    };
    let r = report(&m.usage, &q, d).expect("report");
    assert_eq!(gpu_line(&r, &["team-a"]).used, 4 * i128::from(d));
    let by_day = report(
        &m.usage,
        &UsageQuery {
            by: vec![UsageBy::Day],
            ..q
        },
        d,
    )
    .expect("r");
    let first = gpu_line(&by_day, &["1970-01-01"]).used;
    assert_eq!(first, 4 * 24 * GPU_H, "a folded day holds its 24 hours");
}

/// By workload (HyperPod's detailed report): each workload's windows, and its preemption's
/// loss; the workloads of a team add up to the team.
#[test]
fn rows_by_workload_add_up_to_the_team() {
    let m = run();
    let q = query(vec![UsageBy::Team, UsageBy::Workload]);
    let r = report(&m.usage, &q, 6 * H).expect("a report");
    let ten_s = 4 * 10_000i128;
    let a2 = gpu_line(&r, &["team-a", "a2"]);
    assert_eq!((a2.used, a2.lost), (4 * GPU_H + ten_s, 4 * GPU_H));
    assert!(a2.quota.is_none());
    assert_eq!(gpu_line(&r, &["team-a", "a1"]).used, 4 * 4 * GPU_H);
    let team = report(&m.usage, &query(vec![UsageBy::Team]), 6 * H).expect("a report");
    let a = gpu_line(&team, &["team-a"]);
    let sum: i128 = (r.lines.iter())
        .filter(|l| l.resource == "gpu" && l.group[0] == "team-a")
        .map(|l| l.amounts.used)
        .sum();
    assert_eq!(sum, a.used);
    // A period that cuts a window counts its part.
    let q = UsageQuery {
        since_ms: 2 * H,
        until_ms: 3 * H,
        ..query(vec![UsageBy::Workload])
    };
    let part = report(&m.usage, &q, 6 * H).expect("a report");
    assert_eq!(gpu_line(&part, &["a2"]).used, 4 * GPU_H);
    assert!(
        part.lines.iter().all(|l| l.group != ["b1"]),
        "b1 ran after the period"
    );
}

/// `allot what-if`'s record: what was submitted in the period, and what was submitted before
/// and had not ended at its start (carried in), with a run under way at the start counted from
/// there.
#[test]
fn the_record_carries_in_what_had_not_ended_when_the_period_began() {
    let m = run();
    let names = |r: &allot_common::recorded::Recorded| -> Vec<(String, bool, Option<i64>)> {
        (r.workloads.iter())
            .map(|w| (w.spec.name.clone(), w.carried, w.ran_ms))
            .collect()
    };
    let r = allot_core::recorded::recorded(&m, 5 * H / 2, 6 * H);
    assert_eq!(
        names(&r),
        vec![
            // a1 ran from 1 h to 5 h: in the period from 2.5 h.
            ("a1".into(), true, Some(5 * H - 5 * H / 2)),
            // a2 was evicted at 3 h and waits still.
            ("a2".into(), true, None),
            ("b1".into(), false, Some(5 * H - (3 * H + 10_000))),
        ]
    );
    // After every run ended, only the waiting a2 is carried in.
    let r = allot_core::recorded::recorded(&m, 6 * H, 7 * H);
    assert_eq!(names(&r), vec![("a2".into(), true, None)]);
    // Before anything: a1 submitted in the period.
    let r = allot_core::recorded::recorded(&m, 0, 3 * H / 2);
    assert_eq!(names(&r), vec![("a1".into(), false, Some(4 * H))]);
}

/// Borrowing across departments is lent by the team whose quota it took: team-a (in dept-a)
/// borrows team-b's 4 GPUs (in dept-b) through the organisation, and the lending row names
/// team-b, not capacity no team owns. Within a department, its own lenders come first.
#[test]
fn lending_across_departments_names_the_lending_team() {
    let shorthand = format!(
        "ComputeQuotaResources=[{{InstanceType={T},Count=1}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}}"
    );
    // team-a may borrow twice its nominal.
    let mut m =
        support::machine_with_team_a(&shorthand.replace("BorrowLimit=100", "BorrowLimit=200"));
    apply(&mut m, 0, support::create_quota("qb", "team-b", &shorthand));
    apply(&mut m, 0, support::create_quota("qc", "team-c", &shorthand));
    for (dept, teams) in [
        ("dept-a", &["team-a", "team-c"][..]),
        ("dept-b", &["team-b"][..]),
    ] {
        apply(
            &mut m,
            0,
            Command::SetCohort(allot_common::CohortSpec {
                fair_share_weight: None,
                name: dept.into(),
                parent: Some("org".into()),
                quotas: vec![],
            }),
        );
        for t in teams {
            apply(
                &mut m,
                0,
                Command::SetTeamCohort {
                    team: (*t).into(),
                    cohort: Some(dept.into()),
                },
            );
        }
    }
    for n in ["n1", "n2", "n3"] {
        apply(&mut m, 0, Command::ReportNode(node(n)));
    }
    // team-a runs three 4-GPU jobs from 1 h to 2 h: its own 4, team-c's 4 (its department),
    // and team-b's 4 (the other department, through the organisation).
    for w in ["a1", "a2", "a3"] {
        submit(&mut m, H, "team-a", w);
    }
    cycle(&mut m, H);
    for w in ["a1", "a2", "a3"] {
        assert_eq!(state(&m, w), WlState::Admitted, "{w}");
    }
    for w in ["a1", "a2", "a3"] {
        exited(&mut m, 2 * H, w, true);
    }
    let r = report(&m.usage, &query(vec![UsageBy::Team]), 3 * H).expect("a report");
    let mut lent: Vec<(&str, &str, i128)> = (r.lending.iter())
        .filter(|l| l.resource == "gpu")
        .map(|l| (l.borrower.as_str(), l.lender.as_str(), l.amount))
        .collect();
    lent.sort();
    assert_eq!(
        lent,
        vec![
            ("team-a", "team-b", 4 * GPU_H),
            ("team-a", "team-c", 4 * GPU_H)
        ]
    );
    for t in ["team-b", "team-c"] {
        let q = gpu_line(&r, &[t]).quota.expect("split");
        assert_eq!(q.lent, 4 * GPU_H, "{t}");
    }
}

//! Cohorts set on a live cluster's state machine: a tree an admin builds, teams moved into it
//! (and kept there when their compute quota changes), its pools in `get cohorts`, and what
//! is refused.

use allot_common::{CohortSpec, FlavorQuota, ResourceName, ResourceQuota};
use allot_core::machine::Command;

mod support;

use support::{apply_cmd, create_quota};

const QUOTA: &str = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow}";

fn dept(name: &str, bl: Option<i64>) -> Command {
    Command::SetCohort(CohortSpec {
        fair_share_weight: None,
        name: name.into(),
        parent: Some("org".into()),
        quotas: vec![FlavorQuota {
            flavor: "ml.g5.8xlarge".into(),
            resources: vec![(
                ResourceName::gpu(),
                ResourceQuota {
                    nominal: 0,
                    borrowing_limit: bl,
                    lending_limit: None,
                },
            )],
        }],
    })
}

fn move_team(team: &str, cohort: Option<&str>) -> Command {
    Command::SetTeamCohort {
        team: team.into(),
        cohort: cohort.map(str::to_string),
    }
}

/// The teams of cohort `name` in `views`.
fn teams_of<'v>(views: &'v [allot_common::api::CohortView], name: &str) -> &'v [String] {
    let v = views.iter().find(|v| v.name == name);
    &v.unwrap_or_else(|| panic!("no cohort {name}: {views:?}"))
        .teams
}

#[test]
fn an_admin_builds_a_tree_and_moves_teams_into_it() {
    let mut m = support::machine_with_team_a(QUOTA);
    apply_cmd(&mut m, 1, create_quota("qb", "team-b", QUOTA)).expect("team-b");
    apply_cmd(&mut m, 2, dept("dept-a", Some(1))).expect("dept-a");
    apply_cmd(&mut m, 3, dept("dept-b", None)).expect("dept-b");
    apply_cmd(&mut m, 4, move_team("team-a", Some("dept-a"))).expect("moved");
    apply_cmd(&mut m, 5, move_team("team-b", Some("dept-b"))).expect("moved");
    let views = m.cohort_views();
    let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["dept-a", "dept-b", "org"]);
    let org = &views[2];
    assert_eq!(org.children, ["dept-a", "dept-b"]);
    assert!(org.teams.is_empty());
    let gpu = |v: &allot_common::api::CohortView| {
        v.pairs
            .iter()
            .find(|p| p.resource == "gpu")
            .map(|p| (p.pool.clone(), p.borrowing_limit.clone()))
    };
    // Two g5.8xlarge of one GPU each per team: each department pools 2, the organisation 4.
    assert_eq!(gpu(&views[0]), Some(("2".into(), Some("1".into()))));
    assert_eq!(gpu(org), Some(("4".into(), None)));
    assert_eq!(views[0].teams, ["team-a"]);
    // A changed compute quota keeps the team in its cohort.
    let mut update = create_quota("qa", "team-a", QUOTA);
    if let Command::CreateComputeQuota(input) = update {
        update = Command::UpdateComputeQuota {
            input,
            target_version: 1,
        };
    }
    apply_cmd(&mut m, 6, update).expect("updated");
    assert_eq!(m.cohort_views()[0].teams, ["team-a"]);
    // Back to the default cohort.
    apply_cmd(&mut m, 7, move_team("team-a", None)).expect("moved back");
    let views = m.cohort_views();
    assert_eq!(teams_of(&views, "shared-pool"), ["team-a"]);
}

#[test]
fn a_cohort_in_use_or_a_cycle_is_refused_by_name() {
    let mut m = support::machine_with_team_a(QUOTA);
    apply_cmd(&mut m, 1, dept("dept-a", None)).expect("dept-a");
    apply_cmd(&mut m, 2, move_team("team-a", Some("dept-a"))).expect("moved");
    let e = apply_cmd(
        &mut m,
        3,
        Command::DeleteCohort {
            name: "dept-a".into(),
        },
    )
    .expect_err("has a team");
    assert!(e.contains("has teams team-a"), "{e}");
    let e = apply_cmd(&mut m, 3, Command::DeleteCohort { name: "org".into() })
        .expect_err("has a child");
    assert!(e.contains("parent of dept-a"), "{e}");
    let e = apply_cmd(
        &mut m,
        3,
        Command::SetCohort(CohortSpec {
            fair_share_weight: None,
            name: "org".into(),
            parent: Some("dept-a".into()),
            quotas: vec![],
        }),
    )
    .expect_err("cycle");
    assert!(e.contains("cycle"), "{e}");
    let e = apply_cmd(&mut m, 3, move_team("team-z", Some("dept-a"))).expect_err("no team");
    assert!(e.contains("team-z"), "{e}");
    let e = apply_cmd(&mut m, 3, move_team("team-a", Some("Not A Name"))).expect_err("bad");
    assert!(e.contains("Not A Name"), "{e}");
    apply_cmd(&mut m, 4, move_team("team-a", None)).expect("moved back");
    apply_cmd(
        &mut m,
        5,
        Command::DeleteCohort {
            name: "dept-a".into(),
        },
    )
    .expect("deleted");
    assert!(m.cohort_views().iter().all(|v| v.name != "dept-a"));
}

#[test]
fn a_team_created_again_starts_in_the_default_cohort_and_a_cohort_names_known_types() {
    let mut m = support::machine_with_team_a(QUOTA);
    apply_cmd(&mut m, 1, dept("dept-a", None)).expect("dept-a");
    apply_cmd(&mut m, 2, move_team("team-a", Some("dept-a"))).expect("moved");
    apply_cmd(&mut m, 3, Command::DeleteComputeQuota { name: "qa".into() }).expect("deleted");
    apply_cmd(
        &mut m,
        4,
        Command::DeleteCohort {
            name: "dept-a".into(),
        },
    )
    .expect("unused");
    apply_cmd(&mut m, 5, create_quota("qa", "team-a", QUOTA)).expect("again");
    let views = m.cohort_views();
    assert_eq!(teams_of(&views, "shared-pool"), ["team-a"]);
    assert!(views.iter().all(|v| v.name != "dept-a"), "{views:?}");
    let mut bad = dept("dept-x", None);
    if let Command::SetCohort(spec) = &mut bad {
        spec.quotas[0].flavor = "ml.nonsense".into();
    }
    let e = apply_cmd(&mut m, 6, bad).expect_err("unknown type");
    assert!(e.contains("\"ml.nonsense\" is not an instance type"), "{e}");
}

/// Cohort `name`'s weight as the scheduler reads it.
fn weight_of(m: &allot_core::machine::Machine, name: &str) -> Option<(u32, u32)> {
    let c = m.state.cohorts().iter().find(|c| c.name == name);
    c.and_then(|c| c.spec.as_ref())
        .and_then(|s| s.fair_share_weight)
}

#[test]
fn an_admin_weighs_a_cohort_and_the_weight_outlives_a_change_of_its_limits() {
    let mut m = support::machine_with_team_a(QUOTA);
    apply_cmd(&mut m, 1, dept("dept-a", None)).expect("dept-a");
    let weigh = |w: (u32, u32)| Command::SetCohortWeight {
        cohort: "dept-a".into(),
        weight: w,
    };
    apply_cmd(&mut m, 2, weigh((4, 2))).expect("weighed");
    assert_eq!(weight_of(&m, "dept-a"), Some((2, 1)), "in lowest terms");
    assert_eq!(m.cohort_weights.get("dept-a"), Some(&(2, 1)));
    // Setting the cohort again (new limits) keeps its weight.
    apply_cmd(&mut m, 3, dept("dept-a", Some(1))).expect("limits");
    assert_eq!(weight_of(&m, "dept-a"), Some((2, 1)));
    // Refused: out of range, more than 3 places, a cohort no admin created.
    for (w, part) in [
        ((101, 1), "from 0 to 100"),
        ((1, 0), "from 0 to 100"),
        ((1, 1001), "from 0 to 100"),
    ] {
        let e = apply_cmd(&mut m, 4, weigh(w))
            .expect_err("refused")
            .to_string();
        assert!(e.contains(part), "{w:?}: {e}");
    }
    let e = apply_cmd(
        &mut m,
        5,
        Command::SetCohortWeight {
            cohort: "dept-x".into(),
            weight: (2, 1),
        },
    )
    .expect_err("no such cohort")
    .to_string();
    assert!(
        e.contains("cohort dept-x does not exist") && e.contains("dept-a"),
        "{e}"
    );
    // Back to 1: nothing kept.
    apply_cmd(&mut m, 6, weigh((1, 1))).expect("reset");
    assert_eq!(weight_of(&m, "dept-a"), None);
    assert!(m.cohort_weights.is_empty());
    // Deleting the cohort drops its weight.
    apply_cmd(&mut m, 7, weigh((3, 1))).expect("weighed");
    apply_cmd(
        &mut m,
        8,
        Command::DeleteCohort {
            name: "dept-a".into(),
        },
    )
    .expect("deleted");
    assert!(m.cohort_weights.is_empty());
}

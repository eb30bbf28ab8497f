//! End-to-end: an admin builds a tree of cohorts on a running coordinator with the CLI, moves
//! a team into it, and reads it back with `allot get cohorts` and `allot describe cohort`; a
//! user may read it but not change it.

mod support;

use support::*;

#[test]
fn an_admin_builds_a_tree_of_cohorts_with_the_cli() {
    let c = Cluster::new(1, 10_000);
    setup_team(&c, "team-a");
    setup_team(&c, "team-b");
    let out = c.cli_ok(
        "admin-admin",
        &[
            "create-cohort",
            "dept-a",
            "--parent",
            "org",
            "--borrowing-limit",
            "ml.g5.8xlarge:gpu=1",
        ],
    );
    assert!(out.contains("cohort dept-a set under org"), "{out}");
    // A weight against its siblings: taken live (format 8), a bad one refused by name.
    let weighed = |w: &str| {
        let args = [
            "create-cohort",
            "dept-w",
            "--parent",
            "org",
            "--fair-share-weight",
            w,
        ];
        c.cli("admin-admin", &args)
    };
    let o = weighed("2.5");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("cohort dept-w set under org"),
        "{out}"
    );
    let o = weighed("101");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--fair-share-weight \"101\""),
        "{err}"
    );
    c.cli_ok("admin-admin", &["delete-cohort", "dept-w"]);
    c.cli_ok("admin-admin", &["set-team-cohort", "team-a", "dept-a"]);
    let table = c.cli_ok("user-team-a", &["get", "cohorts"]);
    assert!(table.contains("BORROW LIMIT"), "{table}");
    let json = c.cli_ok("admin-admin", &["get", "cohorts", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let cohorts = v["Cohorts"].as_array().expect("a list");
    let by = |name: &str| {
        cohorts
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no cohort {name} in {json}"))
            .clone()
    };
    assert_eq!(by("dept-a")["teams"][0], "team-a");
    assert_eq!(by("org")["children"][0], "dept-a");
    assert_eq!(by("shared-pool")["teams"][0], "team-b");
    let gpu = by("dept-a")["pairs"]
        .as_array()
        .expect("pairs")
        .iter()
        .find(|p| p["resource"] == "gpu")
        .cloned()
        .expect("a gpu pair");
    assert_eq!(gpu["borrowing_limit"], "1");
    // `describe cohort`: its place in the tree and its quota; an unknown name is named.
    let text = c.cli_ok("user-team-a", &["describe", "cohort", "dept-a"]);
    for part in [
        "place: dept-a < org (2 levels from its root)",
        "every team below it: team-a",
        "gpu: own 0, borrowing limit 1",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    let o = c.cli("admin-admin", &["describe", "cohort", "dept-z"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unknown cohort \"dept-z\"") && err.contains("dept-a"),
        "{err}"
    );
    // In use or with a child, a cohort stays; a user may not change the tree.
    let o = c.cli("admin-admin", &["delete-cohort", "dept-a"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("has teams team-a"),
        "{err}"
    );
    let o = c.cli("user-team-a", &["set-team-cohort", "team-a"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("admin"), "{err}");
    c.cli_ok("admin-admin", &["set-team-cohort", "team-a"]);
    c.cli_ok("admin-admin", &["delete-cohort", "dept-a"]);
    let json = c.cli_ok("admin-admin", &["get", "cohorts", "--output", "json"]);
    assert!(!json.contains("dept-a"), "{json}");
}

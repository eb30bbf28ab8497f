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
    // The weight read back: in the table, in JSON, in describe (1 where none was set).
    let table = c.cli_ok("user-team-a", &["get", "cohorts"]);
    let row = (table.lines())
        .find(|l| l.starts_with("dept-w "))
        .unwrap_or_else(|| panic!("no dept-w row in {table}"));
    assert!(row.split_whitespace().any(|x| x == "2.5"), "{row}");
    let text = c.cli_ok("user-team-a", &["describe", "cohort", "dept-w"]);
    assert!(
        text.contains("fair-share weight: 2.5 (against its sibling cohorts)"),
        "{text}"
    );
    let json = c.cli_ok("admin-admin", &["get", "cohorts", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let weight_of = |name: &str| {
        (v["Cohorts"].as_array().expect("a list").iter())
            .find(|c| c["name"] == name)
            .map(|c| c["fair_share_weight"].clone())
    };
    assert_eq!(weight_of("dept-w"), Some("2.5".into()), "{json}");
    assert_eq!(weight_of("dept-a"), Some("1".into()), "{json}");
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

/// Against a coordinator of the release before weights were shown (format 7: protocol 8),
/// `get cohorts` and `describe cohort` still answer, the weight left out, not an error.
#[test]
fn an_older_coordinator_shows_cohorts_without_weights() {
    let old = Build {
        bin: Build::current().bin,
        env: vec![("ALLOT_EMULATE_FORMAT".into(), "7".into())],
    };
    let c = Cluster::with_builds(1, 10_000, None, &[], vec![old]);
    c.cli_ok(
        "admin-admin",
        &["create-cohort", "dept-a", "--parent", "org"],
    );
    let table = c.cli_ok("admin-admin", &["get", "cohorts"]);
    let row = (table.lines())
        .find(|l| l.starts_with("dept-a "))
        .unwrap_or_else(|| panic!("no dept-a row in {table}"));
    assert_eq!(row.split_whitespace().nth(2), Some("-"), "{table}");
    let text = c.cli_ok("admin-admin", &["describe", "cohort", "dept-a"]);
    assert!(
        text.contains("fair-share weight: not shown by this coordinator"),
        "{text}"
    );
    let json = c.cli_ok("admin-admin", &["get", "cohorts", "--output", "json"]);
    assert!(json.contains("\"fair_share_weight\": null"), "{json}");
}

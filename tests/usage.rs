//! `allot usage` through the real CLI, coordinator and agent: a job's GPU time reconciles to the
//! millisecond with its admission and end as `allot history` shows them, a class named as
//! HyperPod's jobs label it counts under the class, rows by workload and CSV agree, and a team
//! user reads its own team only.

mod support;

use support::*;

#[test]
fn usage_reconciles_with_history_and_keeps_teams_apart() {
    let (c, _agent) = one_gpu_cluster();
    let submit = [
        "submit",
        "--name",
        "j1",
        "--priority",
        "training-priority",
        "--gpus",
        "1",
        "--",
        "sleep",
        "1",
    ];
    c.cli_ok("user-team-a", &submit);
    c.cli_ok(
        "user-team-a",
        &["wait", "j1", "--for", "finished", "--timeout", "60s"],
    );
    let h = c.cli_ok("user-team-a", &["history", "-o", "json"]);
    let h: serde_json::Value = serde_json::from_str(&h).expect("history is JSON");
    let row = &h[0];
    assert_eq!(
        row["priority_class"], "training",
        "stored by the class's name"
    );
    let ran =
        row["ended_ms"].as_i64().expect("ended") - row["admitted_ms"].as_i64().expect("admitted");
    assert!(ran >= 1000, "{row}");

    let u = c.cli_ok(
        "user-team-a",
        &["usage", "--since", "1d", "--by", "team,class", "-o", "json"],
    );
    let u: serde_json::Value = serde_json::from_str(&u).expect("usage is JSON");
    let gpu: Vec<&serde_json::Value> = (u["lines"].as_array().expect("lines").iter())
        .filter(|l| l["resource"] == "gpu")
        .collect();
    assert_eq!(gpu.len(), 1, "{u}");
    assert_eq!(gpu[0]["group"], serde_json::json!(["team-a", "training"]));
    assert_eq!(
        gpu[0]["amounts"]["used"].as_i64(),
        Some(ran),
        "one GPU from admission to end, in GPU-milliseconds: {u}"
    );
    let csv = c.cli_ok(
        "admin-admin",
        &["usage", "--since", "1d", "--by", "workload", "-o", "csv"],
    );
    let line = (csv.lines())
        .find(|l| l.starts_with("j1,gpu,"))
        .unwrap_or_else(|| panic!("no j1 row: {csv}"));
    let hours: f64 = line
        .split(',')
        .nth(3)
        .expect("used")
        .parse()
        .expect("a number");
    assert!(
        (hours * 3_600_000.0 - ran as f64).abs() < 5.0,
        "{line} against {ran} ms"
    );
    let o = c.cli("user-team-b", &["usage", "--team", "team-a"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("team \"team-b\" only"),
        "{err}"
    );
    let b = c.cli_ok("user-team-b", &["usage", "--since", "1d"]);
    assert!(
        !b.contains("team-a   gpu"),
        "team-b sees only its own rows: {b}"
    );
}

//! `allot what-if` through the real CLI, coordinator and agent: three one-GPU jobs queue on one
//! GPU; replayed unchanged, each waits within a second of what it really waited; a proposed
//! scheduler config replays beside it; the saved scenario runs in `allot simulate`; a job that
//! was running when a later period began is carried into it.

mod support;

use support::*;

#[test]
fn the_recorded_period_replays_as_it_happened() {
    let (c, _agent) = one_gpu_cluster();
    for i in 1..=3 {
        let name = format!("q{i}");
        let args = [
            "submit",
            "--name",
            &name,
            "--priority",
            "training",
            "--gpus",
            "1",
            "--",
            "sleep",
            "1",
        ];
        c.cli_ok("user-team-a", &args);
    }
    for i in 1..=3 {
        let name = format!("q{i}");
        c.cli_ok(
            "user-team-a",
            &["wait", &name, "--for", "finished", "--timeout", "60s"],
        );
    }
    let saved = c.dir.path().join("recorded.json");
    let out = c.cli_ok(
        "admin-admin",
        &[
            "what-if",
            "--since",
            "10m",
            "--scheduler-config",
            "PriorityClasses=[{Name=training,Weight=70}],FairShare=Disabled",
            "--save",
            saved.to_str().expect("a path"),
        ],
    );
    assert!(out.contains("3 workloads submitted"), "{out}");
    let team_a: Vec<&str> = out.lines().filter(|l| l.starts_with("team-a")).collect();
    assert_eq!(
        team_a.len(),
        3,
        "recorded, replayed, with the changes: {out}"
    );
    assert!(
        team_a.iter().all(|l| l.contains("3/3")),
        "all three admitted, really and in the replays: {out}"
    );
    assert!(
        out.contains("of 3 workloads admitted both in the cluster and in the unchanged replay, 3 waited within 1 s"),
        "{out}"
    );
    // A user may not read the whole cluster's record.
    let o = c.cli("user-team-a", &["what-if", "--since", "10m"]);
    assert!(!o.status.success());
    // The saved scenario is an allot simulate file.
    let o = std::process::Command::new(BIN)
        .args([
            "simulate",
            saved.to_str().expect("a path"),
            "--output",
            "json",
        ])
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A job running when the period begins is carried in, and replays as admitted.
    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "held", "--gpus", "1", "--", "sleep", "120",
        ],
    );
    c.cli_ok(
        "user-team-a",
        &["wait", "held", "--for", "running", "--timeout", "60s"],
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let out = c.cli_ok("admin-admin", &["what-if", "--since", "1s"]);
    assert!(
        out.contains("0 workloads submitted, 1 carried in from before"),
        "{out}"
    );
    let replayed = (out.lines())
        .find(|l| l.starts_with("team-a") && l.contains("replayed"))
        .unwrap_or_default();
    assert!(
        replayed.contains("1/1"),
        "held is admitted in the replay, and its wait began before the period: {out}"
    );
    c.cli_ok("user-team-a", &["cancel", "held"]);
}

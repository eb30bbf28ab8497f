//! Issue 24, items 2 to 5, through the real CLI against a running coordinator (and an agent
//! where pods must run): job arrays, pod times and `allot history`, labels and bulk cancel, and
//! names that are free again once their workload finished.

mod support;

use support::*;

fn one_replica() -> (Cluster, tokio::runtime::Runtime) {
    let c = Cluster::new(1, 10_000);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    (c, rt)
}

/// An agent for one one-GPU node, registered and Ready.
fn one_agent_ready(c: &Cluster) -> AgentProc {
    let agent = c.start_agent("g5-1", "ml.g5.8xlarge", 1, 3.0);
    wait_for(30, "a registered node", || {
        c.cli_ok("admin-admin", &["get", "nodes"])
            .contains("Ready")
            .then_some(())
    });
    agent
}

fn names_in(c: &Cluster, who: &str, args: &[&str]) -> Vec<String> {
    c.cli_ok(who, args)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

/// Item 5: a finished workload's name can be used again; while its workload is active it
/// cannot. Logs follow the name to the newest run.
#[test]
fn a_name_is_free_again_once_its_workload_finished() {
    let (c, _rt) = one_replica();
    setup_team(&c, "team-a");
    let submit = ["submit", "--name", "again", "--gpus", "1", "--", "true"];
    c.cli_ok("user-team-a", &submit);
    let o = c.cli("user-team-a", &submit);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("\"again\" is still pending") && err.contains("choose another name"),
        "{err}"
    );
    c.cli_ok("user-team-a", &["cancel", "again"]);
    let out = c.cli_ok("user-team-a", &submit);
    assert!(out.contains("workload again submitted"), "{out}");
    let ws = all_workloads(&c);
    let again: Vec<_> = ws.iter().filter(|w| w.name == "again").collect();
    assert_eq!(again.len(), 2, "{ws:?}");
    assert!(again.iter().any(|w| w.state == "Cancelled"));
    assert!(again.iter().any(|w| w.state == "Pending"));
    // The name means the newest, also to wait (the cancelled one is listed first).
    let d = c.cli_ok("user-team-a", &["describe", "workload", "again"]);
    assert!(d.contains("Pending"), "{d}");
    let o = c.cli(
        "user-team-a",
        &["wait", "again", "--for", "admitted", "--timeout", "1s"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("timed out: workload again is Pending"),
        "{err}"
    );
}

/// Item 4: labels on workloads, and cancel by label, by state, by team or everything, with the
/// scope of a user's certificate; an empty selection is refused.
#[test]
fn bulk_cancel_by_label_state_team_or_all() {
    let (c, _rt) = one_replica();
    setup_team(&c, "team-a");
    setup_team(&c, "team-b");
    for (name, label) in [("a1", "exp=sweep"), ("a2", "exp=sweep"), ("a3", "exp=base")] {
        c.cli_ok(
            "user-team-a",
            &[
                "submit", "--name", name, "-l", label, "--gpus", "1", "--", "true",
            ],
        );
    }
    for name in ["b1", "b2"] {
        c.cli_ok(
            "user-team-b",
            &[
                "submit",
                "--name",
                name,
                "-l",
                "exp=sweep",
                "--cpus",
                "1",
                "--",
                "true",
            ],
        );
    }
    let d = c.cli_ok("user-team-a", &["describe", "workload", "a1"]);
    assert!(d.contains("Labels: exp=sweep"), "{d}");

    // Not a terminal: no question asked. A user's selection stays in its team.
    let out = c.cli_ok("user-team-a", &["cancel", "-l", "exp=sweep"]);
    assert!(
        out.contains("Cancelled 2 workloads: team-a/a1, team-a/a2"),
        "{out}"
    );
    let o = c.cli("user-team-a", &["cancel", "--team", "team-b", "--all"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("acts for team \"team-a\" only"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = c.cli("admin-admin", &["cancel"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("say which workloads to cancel"));
    let o = c.cli("admin-admin", &["cancel", "--state", "sleeping", "--all"]);
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("use one of pending, admitted, running, evicting"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // By state in one team, then everything that is left.
    let out = c.cli_ok(
        "admin-admin",
        &["cancel", "--team", "team-b", "--state", "pending"],
    );
    assert!(out.contains("Cancelled 2 workloads"), "{out}");
    // On a terminal (`script` gives it one) it lists what it would cancel and asks: "n" keeps
    // them.
    let mut term = std::process::Command::new("script");
    term.args([
        "-qec",
        &format!("{} cancel --all", support::BIN),
        "/dev/null",
    ]);
    for (k, v) in c.cli_command("admin-admin", &[]).get_envs() {
        if let Some(v) = v {
            term.env(k, v);
        }
    }
    let mut child = term
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        std::thread::sleep(std::time::Duration::from_secs(2));
        stdin.write_all(b"n\n").expect("answer");
    }
    let o = child.wait_with_output().expect("script ends");
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("This cancels 1 workload: team-a/a3")
            && said.contains("Cancel them? [y/N]")
            && said.contains("nothing cancelled"),
        "{said}"
    );
    let out = c.cli_ok("admin-admin", &["cancel", "--all", "--yes"]);
    assert!(out.contains("Cancelled 1 workload: team-a/a3"), "{out}");
    assert!(all_workloads(&c).iter().all(|w| w.state == "Cancelled"));
}

/// Item 2 without nodes: an array queues as many elements as its limit allows, lists as one
/// row (expandable), and cancels by element (queued or held) or as a whole.
#[test]
fn an_array_is_one_row_queues_up_to_its_limit_and_cancels_by_element_or_whole() {
    let (c, _rt) = one_replica();
    setup_team(&c, "team-a");
    let out = c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "sweep", "--array", "0-5%2", "--gpus", "1", "--", "true",
        ],
    );
    assert!(
        out.contains("array sweep submitted: 6 elements (sweep-INDEX), 2 queued, 4 held"),
        "{out}"
    );
    let table = c.cli_ok("user-team-a", &["get", "workloads"]);
    assert!(
        table.contains("sweep[0-5%2]") && table.contains("2 Pending, 4 Held"),
        "{table}"
    );
    assert_eq!(
        names_in(&c, "user-team-a", &["get", "workloads", "--expand"]),
        ["sweep-0", "sweep-1"]
    );
    let o = c.cli(
        "user-team-a",
        &["submit", "--name", "x", "--array", "3-1", "--", "true"],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("ends before it begins"));

    // A held element is cancelled before it is queued; a queued one makes room for the next.
    c.cli_ok("user-team-a", &["cancel", "sweep-3"]);
    c.cli_ok("user-team-a", &["cancel", "sweep-0"]);
    assert_eq!(
        names_in(&c, "user-team-a", &["get", "workloads", "--expand"]),
        ["sweep-1", "sweep-2"]
    );
    let arrays = c.cli_ok("user-team-a", &["get", "arrays"]);
    assert!(
        arrays.contains("sweep") && arrays.contains("0-5%2"),
        "{arrays}"
    );
    // The whole array: its queued elements and the held ones.
    c.cli_ok("user-team-a", &["cancel", "sweep"]);
    assert!(names_in(&c, "user-team-a", &["get", "workloads"]).is_empty());
    assert!(names_in(&c, "user-team-a", &["get", "arrays"]).is_empty());
    let ws = all_workloads(&c);
    assert_eq!(ws.len(), 3, "sweep-0, -1 and -2 were queued: {ws:?}");
    assert!(ws.iter().all(|w| w.state == "Cancelled"));
}

/// Items 2 and 3 with an agent: array elements run with their index, each pod's start, end,
/// exit code and node are kept, and `allot history` lists finished work as table, JSON and
/// CSV, filtered by outcome, team and time.
#[test]
fn arrays_run_with_their_index_and_history_says_when_where_and_how_each_ran() {
    let (c, _rt) = one_replica();
    setup_team(&c, "team-a");
    let _agent = one_agent_ready(&c);
    let out = c.cli_ok(
        "user-team-a",
        &[
            "submit",
            "--name",
            "idx",
            "--array",
            "0-3%2",
            "--cpus",
            "1",
            "--",
            "sh",
            "-c",
            "echo index=$ALLOT_ARRAY_INDEX",
        ],
    );
    assert!(out.contains("2 queued"), "{out}");
    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "fails", "--cpus", "1", "--", "sh", "-c", "exit 3",
        ],
    );
    // Waiting for an array waits for all its elements.
    let out = c.cli_ok(
        "user-team-a",
        &["wait", "idx", "--for", "finished", "--timeout", "90s"],
    );
    assert_eq!(out, "array idx: 4 Succeeded\n");
    let o = c.cli(
        "user-team-a",
        &["wait", "fails", "--for", "finished", "--timeout", "90s"],
    );
    assert_eq!(o.status.code(), Some(1));
    wait_for(60, "every element finished", || {
        let rows: serde_json::Value =
            serde_json::from_str(&c.cli_ok("user-team-a", &["history", "-o", "json"])).ok()?;
        (rows.as_array()?.len() == 5).then_some(())
    });
    let logs = c.cli_ok("user-team-a", &["logs", "idx-3"]);
    assert_eq!(logs.trim(), "index=3");
    // A pod that printed nothing has an empty log, not an error.
    assert_eq!(c.cli_ok("user-team-a", &["logs", "fails"]), "");

    let rows: serde_json::Value =
        serde_json::from_str(&c.cli_ok("user-team-a", &["history", "-o", "json"])).expect("json");
    let rows = rows.as_array().expect("rows");
    let failed = rows.iter().find(|r| r["name"] == "fails").expect("fails");
    assert_eq!(failed["state"], "Failed");
    assert_eq!(failed["exit_code"], 3);
    for r in rows {
        assert_eq!(r["nodes"][0], "g5-1", "{r}");
        let (sub, started, ended) = (
            r["submitted_ms"].as_i64().expect("submitted"),
            r["started_ms"].as_i64().expect("started"),
            r["ended_ms"].as_i64().expect("ended"),
        );
        assert!(sub <= started && started <= ended, "{r}");
        assert!(
            r["wait_ms"].as_i64().is_some() && r["run_ms"].as_i64().is_some(),
            "{r}"
        );
    }
    let ok = names_in(&c, "user-team-a", &["history", "--state", "succeeded"]);
    assert_eq!(ok.len(), 4, "{ok:?}");
    assert!(ok.iter().all(|n| n.starts_with("idx-")), "{ok:?}");
    let csv = c.cli_ok("user-team-a", &["history", "-o", "csv", "--since", "1h"]);
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .is_some_and(|h| h.starts_with("id,name,team,priority_class,state,exit_code")));
    assert_eq!(lines.count(), 5, "{csv}");
    assert!(names_in(&c, "user-team-a", &["history", "--until", "2020-01-01"]).is_empty());
    let o = c.cli("user-team-a", &["history", "--since", "last week"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("use a time ago"));
    // describe shows the pod's times and exit.
    let d = c.cli_ok("user-team-a", &["describe", "workload", "fails"]);
    assert!(
        d.contains("on g5-1") && d.contains("started ") && d.contains("(exit 3, Failed"),
        "{d}"
    );
}

/// Issue 51, item 4: HyperPod's auto-resume through the real CLI and agent. A job that fails
/// runs again, up to its retries, each run a new attempt; then it fails for good, and
/// `describe` and `history` say so.
#[test]
fn a_failing_job_with_auto_resume_runs_again_until_its_retries_are_spent() {
    let (c, _rt) = one_replica();
    setup_team(&c, "team-a");
    let _agent = one_agent_ready(&c);
    let o = c.cli(
        "user-team-a",
        &[
            "submit",
            "--name",
            "bad",
            "--cpus",
            "1",
            "--max-retry",
            "2",
            "--",
            "true",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--auto-resume"), "{err}");
    c.cli_ok(
        "user-team-a",
        &[
            "submit",
            "--name",
            "flaky",
            "--cpus",
            "1",
            "--auto-resume",
            "--max-retry",
            "2",
            "--",
            "sh",
            "-c",
            "echo attempt $ALLOT_ATTEMPT; exit 3",
        ],
    );
    let o = c.cli(
        "user-team-a",
        &["wait", "flaky", "--for", "finished", "--timeout", "90s"],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    // The last run was the third attempt.
    let logs = c.cli_ok("user-team-a", &["logs", "flaky"]);
    assert_eq!(logs.trim(), "attempt 3");
    let d = c.cli_ok("user-team-a", &["describe", "workload", "flaky"]);
    assert!(
        d.contains("AutoResume") && d.contains("all 2 retries spent"),
        "{d}"
    );
    let rows: serde_json::Value =
        serde_json::from_str(&c.cli_ok("user-team-a", &["history", "-o", "json"])).expect("json");
    let row = (rows.as_array().expect("rows").iter())
        .find(|r| r["name"] == "flaky")
        .expect("in history")
        .clone();
    assert_eq!(row["state"], "Failed");
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("all 2 retries spent")),
        "{row}"
    );
}

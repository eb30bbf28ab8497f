//! `allot bench` end to end, small: it starts three real coordinators with fsync on, prints
//! every figure the README lists, admits every workload it submits, and cleans up after
//! itself. No timing is asserted; the figures themselves are for people to read.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_allot");

#[test]
fn a_small_bench_prints_every_figure_and_admits_everything() {
    let child = Command::new(BIN)
        .args([
            "bench",
            "--nodes",
            "20",
            "--teams",
            "4",
            "--workloads",
            "400",
        ])
        .args(["--samples", "20", "--rounds", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("allot bench starts");
    let dir = std::env::temp_dir().join(format!("allot-bench-{}", child.id()));
    let out = child.wait_with_output().expect("allot bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "allot bench failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    for expected in [
        "disk fsync (4 KiB append + fdatasync, 1000 samples before the cluster starts): p50 ",
        "the same with 3 writers at once",
        "4 teams, 20 nodes of ml.p4d.24xlarge registered",
        "raft threads (--raft-priority realtime): replica 1: ",
        "API round trip to the leader",
        "2 rounds of 20 fsync probes",
        "  round 1: fsync p50 ",
        "  round 2: fsync p50 ",
        "disk fsync over the rounds (40 samples): p50 ",
        "submit-to-admit over the rounds (40 samples, ",
        "x the fsync p99 over the same rounds; rounds ",
        "sustained: 400 workloads submitted",
        "(0 still pending)",
    ] {
        assert!(
            stdout.contains(expected),
            "the output lacks {expected:?}:\n{stdout}"
        );
    }
    // Without --keep, its data directory (named after its pid) is gone.
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

#[test]
fn a_deep_backlog_bench_measures_the_rounds_again_with_the_backlog_waiting() {
    let out = Command::new(BIN)
        .args(["bench", "--nodes", "10", "--teams", "3", "--pending", "300"])
        .args(["--samples", "20", "--rounds", "1"])
        .output()
        .expect("allot bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The bench itself fails if the leadership changed.
    assert!(
        out.status.success(),
        "allot bench --pending failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    for expected in [
        "backlog: 300 workloads of 8 GPUs submitted to 2 teams and settled in ",
        " pending",
        "submit-to-admit with ",
        "leader's scheduling cycles during those rounds: p50 ",
        "submit-to-admit p99 with the backlog / idle p99: ",
        "leadership changes: 0",
        // Every probe that must preempt found the cluster full, and was planned and admitted.
        "a node's GPUs for team-0, reclaimed by preempting a borrower, with ",
        "(20 samples; 0 found a node free and are left out): plan committed p50 ",
        "; admitted once the victim's end is reported p50 ",
        "leader's scheduling cycles during the reclaims: p50 ",
        // Freed room is taken back by the waiting queue.
        "a deep queue drains as its capacity frees, with ",
        ": a running workload's end to the next admission p50 ",
        "(20 samples); ",
    ] {
        assert!(
            stdout.contains(expected),
            "the output lacks {expected:?}:\n{stdout}"
        );
    }
    // 10 nodes of 8 GPUs hold at most 10 of the 300: the rest wait through the rounds.
    let pending: u32 = stdout
        .lines()
        .find(|l| l.starts_with("backlog: "))
        .and_then(|l| l.rsplit(": ").next())
        .and_then(|p| p.strip_suffix(" pending"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pending count in the backlog line:\n{stdout}"));
    assert!(
        (290..=300).contains(&pending),
        "{pending} pending:\n{stdout}"
    );
    assert!(!stdout.contains("sustained:"), "{stdout}");
}

#[test]
fn the_failover_bench_kills_leaders_and_checks_nothing_was_lost_or_restarted() {
    let child = Command::new(BIN)
        .args(["bench", "--failover", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("allot bench starts");
    let dir = std::env::temp_dir().join(format!("allot-failover-{}", child.id()));
    let out = child.wait_with_output().expect("allot bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The bench itself fails when a workload was lost, duplicated or restarted.
    assert!(
        out.status.success(),
        "allot bench --failover failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    for expected in [
        "3 replicas, 4 agents (ml.g5.8xlarge, 1 fake GPU each), 4 long-running workloads running; 2 leader kills:",
        "  kill 1: replica ",
        "  kill 2: replica ",
        "elections: p50 ",
        "kill to first admission (a new client per submit, as the CLI): p50 ",
        "workloads lost: 0, duplicated: 0, long-running ones restarted: 0 of 4",
        "agents' leases (5 s): ",
        ", longest gap between two ",
    ] {
        assert!(
            stdout.contains(expected),
            "the output lacks {expected:?}:\n{stdout}"
        );
    }
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

#[test]
fn bad_bench_arguments_are_refused_with_the_value() {
    for (args, expected) in [
        (&["--rounds", "0"][..], "0"),
        (&["--failover", "0"][..], "0"),
        (&["--samples", "0"][..], "0"),
        (&["--instance-type", "ml.nope"][..], "ml.nope"),
        (
            &["--raft-priority", "fifo"][..],
            "\"fifo\" is not a raft thread priority; accepted: realtime, normal",
        ),
    ] {
        let out = Command::new(BIN)
            .arg("bench")
            .args(args)
            .output()
            .expect("allot bench starts");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            stderr.contains(expected),
            "{args:?}: the error does not name {expected:?}: {stderr}"
        );
    }
}

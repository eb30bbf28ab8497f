//! End-to-end: gang scheduling (HyperPod's, Kueue's waitForPodsReady) with a real coordinator,
//! agent and CLI. The agent is frozen (SIGSTOP) so an admitted workload's pod cannot start: the
//! workload is evicted once the timeout passes, with a reason naming the pod and its node,
//! waits out its backoff out of the queue, and once the agent runs again is admitted again
//! and runs.

mod support;

use support::*;

fn signal(agent: &AgentProc, sig: i32) {
    let pid = agent.child.as_ref().expect("the agent runs").id();
    // SAFETY: kill(2) on our own child.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

fn describe(c: &Cluster, name: &str) -> String {
    c.cli_ok(
        "admin-admin",
        &["describe", "workload", name, "--team", "team-a"],
    )
}

#[test]
fn a_gang_whose_pods_do_not_start_in_time_is_requeued_after_a_backoff() {
    let c = Cluster::new(1, 10_000);
    setup_team(&c, "team-a");
    let off = c.cli_ok("user-team-a", &["get", "gang-scheduling"]);
    assert!(off.contains("gang scheduling: off"), "{off}");
    // A user may read it, not change it.
    let o = c.cli("user-team-a", &["set-gang-scheduling", "--timeout", "2s"]);
    assert!(!o.status.success(), "a user set gang scheduling");
    let on = c.cli_ok(
        "admin-admin",
        &[
            "set-gang-scheduling",
            "--timeout",
            "2s",
            "--backoff-base",
            "3s",
            "--backoff-max",
            "10s",
        ],
    );
    assert!(on.contains("timeout:          2 s"), "{on}");
    let shown = c.cli_ok("user-team-a", &["get", "gang-scheduling"]);
    assert!(
        shown.contains("backoff:          3 s, doubling up to 10 s"),
        "{shown}"
    );

    let agent = c.start_agent("g5-1", "ml.g5.8xlarge", 1, 15.0);
    wait_for(30, "a registered node", || {
        c.cli_ok("admin-admin", &["get", "nodes"])
            .contains("Ready")
            .then_some(())
    });
    // Frozen, the agent never starts the pod.
    signal(&agent, libc::SIGSTOP);
    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "gang", "--gpus", "1", "--", "sleep", "60",
        ],
    );
    let evicted = wait_for(20, "the timeout's eviction", || {
        let d = describe(&c, "gang");
        d.contains("PodsReadyTimeout").then_some(d)
    });
    assert!(
        evicted.contains(
            "not every pod started within 2 s of its admission: pod 0 on g5-1 has not started"
        ),
        "{evicted}"
    );
    assert!(evicted.contains("backoff of 3 s"), "{evicted}");
    signal(&agent, libc::SIGCONT);
    // Its pod never started, so the eviction ends at once; it waits out the backoff.
    let waiting = wait_for(20, "the workload waiting out its backoff", || {
        let d = describe(&c, "gang");
        d.contains("waits out a backoff").then_some(d)
    });
    assert!(waiting.contains("Pending"), "{waiting}");
    // Then it is queued again, admitted, and its pod starts.
    wait_for(30, "the workload running again", || {
        let w = all_workloads(&c).into_iter().find(|w| w.name == "gang")?;
        (w.state == "Running").then_some(())
    });
    let d = describe(&c, "gang");
    assert!(d.contains("BackoffFinished"), "{d}");
}

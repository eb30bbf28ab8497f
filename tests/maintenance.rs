//! Node maintenance through the real CLI, coordinator and agents: `allot drain` moves a running
//! job to another node (stopped there, requeued, started elsewhere), `get nodes` and `describe
//! node` show the node cordoned until `allot uncordon`, and only admins may drain.

mod support;

use support::*;

fn running_on(c: &Cluster, name: &str) -> Option<String> {
    all_workloads(c)
        .into_iter()
        .find(|w| w.name == name && w.state == "Running")
        .and_then(|w| w.pods.first().map(|p| p.node.clone()))
}

/// One replica, team-a's quota and two one-GPU nodes with their agents.
fn two_nodes_one_team() -> (Cluster, (AgentProc, AgentProc)) {
    let c = Cluster::new(1, 10_000);
    create_scheduler_config(&c, "FairShare=Enabled");
    setup_team(&c, "team-a");
    let agents = two_gpu_nodes(&c);
    (c, agents)
}

#[test]
fn drain_moves_work_off_a_node_until_it_is_uncordoned() {
    let (c, _agents) = two_nodes_one_team();
    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "long", "--gpus", "1", "--", "sleep", "600",
        ],
    );
    let first = wait_for(30, "long running", || running_on(&c, "long"));
    let o = c.cli("user-team-a", &["drain", &first]);
    assert!(!o.status.success(), "a team user may not drain");
    let out = c.cli_ok("admin-admin", &["drain", &first]);
    assert!(out.contains("draining"), "{out}");
    let second = wait_for(60, "long running elsewhere", || {
        running_on(&c, "long").filter(|n| *n != first)
    });
    assert_ne!(first, second);
    let nodes = c.cli_ok("admin-admin", &["get", "nodes"]);
    let line = (nodes.lines())
        .find(|l| l.starts_with(first.as_str()))
        .unwrap_or_else(|| panic!("{nodes}"));
    assert!(line.contains("Cordoned"), "{nodes}");
    // describe node: the drained one is cordoned with nothing on it, the other runs the job.
    let d = c.cli_ok("admin-admin", &["describe", "node", &first]);
    assert!(
        d.contains("Cordoned") && d.contains("Pods:           none"),
        "{d}"
    );
    let d = c.cli_ok("user-team-a", &["describe", "node", &second]);
    assert!(d.contains("long") && d.contains("gpu=0"), "{d}");
    let o = c.cli("admin-admin", &["describe", "node", "nope"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown node \"nope\"") && err.contains(&first),
        "{err}"
    );
    c.cli_ok("admin-admin", &["uncordon", &first]);
    let nodes = c.cli_ok("admin-admin", &["get", "nodes"]);
    assert_eq!(nodes.matches("Ready").count(), 2, "{nodes}");
    c.cli_ok("user-team-a", &["cancel", "long"]);
}

/// Issue 55, item 6: `drain --wait` lets the work on a node finish (cordoned at once, nothing
/// new placed there), and `--timeout` stops and requeues what is left after it.
#[test]
fn drain_wait_lets_work_finish_and_its_timeout_moves_what_is_left() {
    let (c, _agents) = two_nodes_one_team();
    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "short", "--gpus", "1", "--", "sleep", "3",
        ],
    );
    let node = wait_for(30, "short running", || running_on(&c, "short"));
    let o = c.cli("admin-admin", &["drain", &node, "--wait", "--evict"]);
    assert!(
        !o.status.success(),
        "--wait and --evict together were taken"
    );
    let out = c.cli_ok("admin-admin", &["drain", &node, "--wait"]);
    assert!(
        out.contains("drained in") && !out.contains("timeout"),
        "{out}"
    );
    // It ran to its end where it was: not stopped, not requeued.
    let w = all_workloads(&c)
        .into_iter()
        .find(|w| w.name == "short")
        .expect("short");
    assert_eq!(w.state, "Succeeded", "{w:?}");
    c.cli_ok("admin-admin", &["uncordon", &node]);

    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "long", "--gpus", "1", "--", "sleep", "600",
        ],
    );
    let node = wait_for(30, "long running", || running_on(&c, "long"));
    let out = c.cli_ok(
        "admin-admin",
        &["drain", &node, "--wait", "--timeout", "2s"],
    );
    assert!(
        out.contains("the timeout passed") && out.contains("drained in"),
        "{out}"
    );
    let elsewhere = wait_for(60, "long running elsewhere", || {
        running_on(&c, "long").filter(|n| *n != node)
    });
    assert_ne!(elsewhere, node);
    c.cli_ok("user-team-a", &["cancel", "long"]);
}

/// Issue 55, item 6: a node that will not come back is removed once its work has left; before
/// that (in service, or holding work) the removal is refused, and only admins may remove.
#[test]
fn a_node_that_will_not_come_back_is_removed_once_its_work_has_left() {
    let (c, (a1, a2)) = two_nodes_one_team();
    let mut agents = [a1, a2];
    c.cli_ok(
        "user-team-a",
        &[
            "submit", "--name", "long", "--gpus", "1", "--", "sleep", "600",
        ],
    );
    let node = wait_for(30, "long running", || running_on(&c, "long"));
    let o = c.cli("admin-admin", &["delete-node", &node]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("in service"), "{err}");
    let o = c.cli("user-team-a", &["delete-node", &node]);
    assert!(!o.status.success(), "a team user removed a node");
    c.cli_ok("admin-admin", &["drain", &node]);
    wait_for(60, "long running elsewhere", || {
        running_on(&c, "long").filter(|n| *n != node)
    });
    // The machine is gone for good: its agent stops, and the node is removed.
    if let Some(a) = agents.iter_mut().find(|a| a.name == node) {
        a.kill();
    }
    let out = c.cli_ok("admin-admin", &["delete-node", &node]);
    assert!(out.contains("removed"), "{out}");
    let nodes = c.cli_ok("admin-admin", &["get", "nodes"]);
    assert!(!nodes.contains(node.as_str()), "{nodes}");
    let o = c.cli("admin-admin", &["describe", "node", &node]);
    assert!(!o.status.success());
    c.cli_ok("user-team-a", &["cancel", "long"]);
}

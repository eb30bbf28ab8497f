//! End-to-end: topology-aware gangs through the real CLI, coordinator and agents with fake
//! GPUs. Agents report racks (`--topology`, and `--topology-file` as the DaemonSet's init step
//! writes it); `get topology` and `describe node` show them; a gang submitted with
//! `--topology rack` runs on one rack, the tightest that takes it; a gang that requires more
//! than a rack holds waits, and `explain` names the racks that came closest.

mod support;

use support::*;

fn nodes_of(c: &Cluster, name: &str) -> Vec<String> {
    let mut nodes: Vec<String> = all_workloads(c)
        .into_iter()
        .find(|w| w.name == name)
        .map(|w| w.pods.into_iter().map(|p| p.node).collect())
        .unwrap_or_default();
    nodes.sort();
    nodes.dedup();
    nodes
}

#[test]
fn gangs_run_in_one_rack_end_to_end() {
    let c = Cluster::new(1, 10_000);
    let o = create_quota(
        &c,
        "team-a",
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=4}],ResourceSharingConfig={Strategy=LendAndBorrow}",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Racks r0 (n0, n1) and r1 (n2, n3), each node 2 GPUs; n3 reads its rack from a labels
    // file as the DaemonSet's init step writes it.
    let labels = c.dir.path().join("n3-labels");
    std::fs::write(
        &labels,
        "kubernetes.io/arch=amd64\ntopology.k8s.aws/network-node-layer-3=nn-1\nrack=r1\n",
    )
    .expect("labels file");
    let mut agents = Vec::new();
    for (i, name) in ["n0", "n1", "n2", "n3"].iter().enumerate() {
        let extra: Vec<String> = if *name == "n3" {
            vec![
                "--topology-file".into(),
                labels.display().to_string(),
                "--topology-label".into(),
                "rack".into(),
                "--topology-label".into(),
                "topology.k8s.aws/".into(),
            ]
        } else {
            vec!["--topology".into(), format!("rack=r{}", i / 2)]
        };
        agents.push(c.start_agent_with(name, "ml.p5.48xlarge", 2, 3.0, &extra));
    }
    let topo = wait_for(30, "four nodes in two racks", || {
        let out = c.cli_ok("admin-admin", &["get", "topology"]);
        (out.contains("n0,n1") && out.contains("n2,n3")).then_some(out)
    });
    assert!(
        topo.contains("LEVEL") && topo.contains("r0") && topo.contains("r1"),
        "{topo}"
    );
    let only = c.cli_ok(
        "admin-admin",
        &[
            "get",
            "topology",
            "--level",
            "topology.k8s.aws/network-node-layer-3",
        ],
    );
    assert!(only.contains("nn-1") && !only.contains("r0"), "{only}");
    let described = c.cli_ok("admin-admin", &["describe", "node", "n3"]);
    assert!(
        described.contains("Topology:") && described.contains("rack=r1"),
        "{described}"
    );

    // One GPU busy (on n0, or on another node where an agent reported later): the single's
    // rack is the tightest that takes a 3-GPU gang.
    let submit = |name: &str, count: &str, extra: &[&str]| {
        let mut args = vec!["submit", "--name", name, "--count", count, "--gpus", "1"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sleep", "120"]);
        c.cli_ok("user-team-a", &args);
    };
    submit("single", "1", &[]);
    wait_for(30, "the single pod placed", || {
        (!nodes_of(&c, "single").is_empty()).then_some(())
    });
    submit("gang", "3", &["--topology", "rack"]);
    let gang = wait_for(30, "the gang placed", || {
        let n = nodes_of(&c, "gang");
        (!n.is_empty()).then_some(n)
    });
    let single = nodes_of(&c, "single");
    let rack = |n: &str| if n == "n0" || n == "n1" { "r0" } else { "r1" };
    assert!(
        gang.iter().all(|n| rack(n) == rack(&single[0])),
        "gang on {gang:?}, single on {single:?}"
    );
    // Five more GPUs in one rack: the other rack has four free.
    let other = if rack(&single[0]) == "r0" { "r1" } else { "r0" };
    submit("wide", "5", &["--topology", "rack"]);
    let why = wait_for(30, "the wide gang explained", || {
        let out = c.cli_ok("user-team-a", &["explain", "wide"]);
        out.contains("one domain").then_some(out)
    });
    assert!(
        why.contains("required rack") && why.contains(&format!("{other} takes 4 of 5 pods")),
        "{why}"
    );
    // A bad ask is refused at submit, naming what is accepted.
    let o = c.cli(
        "user-team-a",
        &[
            "submit",
            "--name",
            "bad",
            "--count",
            "3",
            "--gpus",
            "1",
            "--topology",
            "rack",
            "--topology-slice",
            "kubernetes.io/hostname:2",
            "--",
            "true",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("whole number of slices"),
        "{err}"
    );
    drop(agents);
}

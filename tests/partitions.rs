//! End-to-end: GPU partitions (MIG) through the real CLI, coordinator and agent with fake GPUs
//! in MIG mode. A compute quota with `AcceleratorPartition`, a job file asking for
//! `nvidia.com/mig-1g.10gb`, pods that see their partitions' MIG UUIDs, `get nodes` and
//! `describe node` showing partitions used and free, and a GPU in MIG mode never given whole.

mod support;

use support::*;

fn job(c: &Cluster, name: &str, requests: &str, secs: u32) -> String {
    let path = c.dir.path().join(format!("{name}.yaml"));
    let script = format!("echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; sleep {secs}");
    std::fs::write(
        &path,
        format!(
            "name: {name}\nteam: team-a\nrequests: {requests}\ncommand: [\"sh\", \"-c\", {script:?}]\ngrace: 1\n"
        ),
    )
    .expect("job file");
    path.display().to_string()
}

fn state(c: &Cluster, name: &str) -> String {
    all_workloads(c)
        .into_iter()
        .find(|w| w.name == name)
        .map(|w| w.state)
        .unwrap_or_default()
}

#[test]
fn partitions_are_quota_placement_and_devices_end_to_end() {
    let c = Cluster::new(1, 10_000);
    // A quota of one whole GPU and seven 1g.10gb partitions on p5.
    let o = create_quota(
        &c,
        "team-a",
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=1,AcceleratorPartition={Type=mig-1g.10gb,Count=7}}]",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let described = c.cli_ok(
        "admin-admin",
        &[
            "describe-compute-quota",
            "--compute-quota-id",
            "team-a-quota",
        ],
    );
    assert!(
        described.contains("AcceleratorPartition={Type=mig-1g.10gb,Count=7}"),
        "{described}"
    );
    // A profile p5 lacks is refused with the ones it has.
    let o = create_quota(
        &c,
        "team-b",
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.5gb,Count=1}}]",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("mig-1g.10gb, mig-1g.20gb"),
        "{err}"
    );

    // Two GPUs; GPU 0 in MIG mode with seven 1g.10gb partitions.
    let _agent = c.start_agent_with(
        "p5-1",
        "ml.p5.48xlarge",
        2,
        3.0,
        &["--fake-mig".into(), "0=1g.10gb*7".into()],
    );
    let nodes = wait_for(30, "the node with its partitions", || {
        let out = c.cli_ok("admin-admin", &["get", "nodes"]);
        (out.contains("Ready") && out.contains("mig-1g.10gb=7")).then_some(out)
    });
    assert!(nodes.contains("FREE PARTITIONS"), "{nodes}");

    let small = job(&c, "small", "{nvidia.com/mig-1g.10gb: 2}", 60);
    c.cli_ok("user-team-a", &["submit", "-f", &small]);
    let log = wait_for(30, "the pod's devices in its log", || {
        let o = c.cli("user-team-a", &["logs", "small"]);
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        s.contains("CUDA_VISIBLE_DEVICES=").then_some(s)
    });
    let visible = log
        .lines()
        .find_map(|l| l.strip_prefix("CUDA_VISIBLE_DEVICES="))
        .unwrap_or_default()
        .to_string();
    let uuids: Vec<&str> = visible.split(',').collect();
    assert_eq!(uuids.len(), 2, "{log}");
    assert!(uuids.iter().all(|u| u.starts_with("MIG-fake-0-")), "{log}");

    let node = c.cli_ok("admin-admin", &["describe", "node", "p5-1"]);
    assert!(node.contains("Partitions:"), "{node}");
    let row = node
        .lines()
        .find(|l| l.split_whitespace().next() == Some("mig-1g.10gb"))
        .unwrap_or_default();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols, vec!["mig-1g.10gb", "0", "7", "2", "5"], "{node}");
    assert!(
        node.contains("MIG mode: handed out as its partitions"),
        "{node}"
    );
    assert!(node.contains("Held out:       gpu0 (MIG mode)"), "{node}");

    // GPU 0 is partitioned: of two GPUs, one can be had whole; a second whole-GPU job waits.
    let whole = job(&c, "whole", "{gpu: 1}", 60);
    c.cli_ok("user-team-a", &["submit", "-f", &whole]);
    wait_for(30, "the whole-GPU job running", || {
        (state(&c, "whole") == "Running").then_some(())
    });
    let log = wait_for(30, "the whole GPU in its log", || {
        let o = c.cli("user-team-a", &["logs", "whole"]);
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        s.contains("CUDA_VISIBLE_DEVICES=").then_some(s)
    });
    assert!(log.contains("CUDA_VISIBLE_DEVICES=1\n"), "{log}");
    let more = job(&c, "more", "{gpu: 1}", 60);
    c.cli_ok("user-team-a", &["submit", "-f", &more]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(state(&c, "more"), "Pending");

    // HyperPod's CLI flags; and a pod may not mix whole GPUs and partitions.
    let out = c.cli_ok(
        "user-team-a",
        &[
            "submit",
            "--name",
            "hyp",
            "--accelerator-partition-type",
            "mig-1g.10gb",
            "--accelerator-partition-count",
            "3",
            "--",
            "sleep",
            "60",
        ],
    );
    assert!(out.contains("Admitted"), "{out}");
    let o = c.cli(
        "user-team-a",
        &[
            "submit",
            "--name",
            "mixed",
            "--request",
            "gpu=1,nvidia.com/mig-1g.10gb=1",
            "--",
            "true",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("whole GPUs and GPU partitions"),
        "{err}"
    );
}

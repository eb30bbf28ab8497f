//! End-to-end: a coordinator and real `allot agent` processes with fake GPUs on loopback,
//! running real jobs. The seed walkthrough (borrow, reclaim, priority preemption) as
//! processes that print their CUDA_VISIBLE_DEVICES; an agent restart that adopts its pods; a
//! coordinator restart that leaves pods running; an agent killed for good, whose work is
//! requeued once its lease is over, never running twice.

mod support;

use std::time::{Duration, Instant};

use allot_common::api::WorkloadView;
use support::*;

const SCHEDULER_CONFIG: &str = "PriorityClasses=[{Name=inference,Weight=90},{Name=experimentation,Weight=80},{Name=fine-tuning,Weight=50},{Name=training,Weight=70}],FairShare=Enabled";

fn workloads(c: &Cluster) -> Vec<WorkloadView> {
    all_workloads(c)
}

fn workload(c: &Cluster, name: &str) -> Option<WorkloadView> {
    workloads(c).into_iter().find(|w| w.name == name)
}

/// A job file: `count` pods of 1 GPU each; the program prints its devices, then sleeps
/// `secs`, and says so when it gets SIGTERM.
fn job_file(
    c: &Cluster,
    run: &str,
    name: &str,
    team: &str,
    class: &str,
    count: u32,
    secs: u32,
) -> String {
    let path = c.dir.path().join(format!("{name}.yaml"));
    let script = format!(
        "trap 'echo got SIGTERM; exit 143' TERM; echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES RANK=$RANK WORLD_SIZE=$WORLD_SIZE; sleep {secs} & wait"
    );
    let yaml = format!(
        "name: {name}\nteam: {team}\npriority: {class}\ncount: {count}\nrequests: {{gpu: 1, cpu: 8, memory: 32Gi}}\ncommand: [\"sh\", \"-c\", {script:?}]\nenv: {{TEST_RUN: {run}}}\ngrace: 5\n"
    );
    std::fs::write(&path, yaml).expect("job file");
    path.display().to_string()
}

fn setup(c: &Cluster) {
    create_scheduler_config(c, SCHEDULER_CONFIG);
    setup_team(c, "team-a");
    setup_team(c, "team-b");
}

fn state_of(c: &Cluster, name: &str) -> String {
    workload(c, name).map(|w| w.state).unwrap_or_default()
}

fn run_id(c: &Cluster) -> String {
    c.dir
        .path()
        .file_name()
        .map(|s| s.to_string_lossy().replace('.', ""))
        .unwrap_or_default()
}

#[test]
fn seed_walkthrough_runs_as_real_jobs() {
    let c = Cluster::new(1, 10_000);
    setup(&c);
    let agents: Vec<AgentProc> = (1..=3)
        .map(|i| c.start_agent(&format!("g5-{i}"), "ml.g5.8xlarge", 1, 3.0))
        .collect();
    wait_for(30, "three registered nodes", || {
        let out = c.cli_ok("admin-admin", &["get", "nodes"]);
        (out.matches("Ready").count() == 3).then_some(())
    });
    let run = run_id(&c);
    let watch = GpuWatch::start(&run);

    // 1. team-a's 3-GPU job borrows team-b's idle GPU and starts on all three nodes.
    let a = job_file(
        &c,
        &run,
        "imagenet-gpu-team-a-1",
        "team-a",
        "training",
        3,
        60,
    );
    c.cli_ok("user-team-a", &["submit", "-f", &a]);
    let w = wait_for(30, "team-a's job running on 3 nodes", || {
        workload(&c, "imagenet-gpu-team-a-1").filter(|w| w.state == "Running" && w.pods.len() == 3)
    });
    let mut nodes: Vec<&str> = w.pods.iter().map(|p| p.node.as_str()).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "{w:?}");
    wait_for(20, "three team-a processes", || {
        (pod_processes(&run).len() == 3).then_some(())
    });
    for rank in 0..3 {
        let log = wait_for(10, "the pod's log through allot logs", || {
            let o = c.cli(
                "user-team-a",
                &["logs", "imagenet-gpu-team-a-1", "--rank", &rank.to_string()],
            );
            let s = String::from_utf8_lossy(&o.stdout).to_string();
            s.contains("CUDA_VISIBLE_DEVICES").then_some(s)
        });
        assert!(log.contains("CUDA_VISIBLE_DEVICES=0 "), "{log}");
        assert!(log.contains(&format!("RANK={rank} WORLD_SIZE=3")), "{log}");
    }
    // Another team's certificate reads nothing (issue 23: the agent's HTTP /logs served anyone
    // on the node; logs now go through the cluster, which checks the reader).
    let o = c.cli("user-team-b", &["logs", "imagenet-gpu-team-a-1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && o.stdout.is_empty(),
        "team-b read team-a's log"
    );
    // Names are per team: to team-b, team-a's workload does not exist.
    assert!(err.contains("NotFound: unknown workload"), "{err}");

    // 2. team-b reclaims its quota: team-a's job is evicted with SIGTERM.
    let b = job_file(&c, &run, "mnist-team-b", "team-b", "training", 2, 4);
    c.cli_ok("user-team-b", &["submit", "-f", &b]);
    wait_for(30, "mnist-team-b running", || {
        (state_of(&c, "mnist-team-b") == "Running").then_some(())
    });
    let a_view = workload(&c, "imagenet-gpu-team-a-1").expect("team-a job");
    assert!(a_view.preemptions >= 1, "{a_view:?}");
    let term_log = c.cli_ok(
        "user-team-a",
        &[
            "logs",
            "imagenet-gpu-team-a-1",
            "--rank",
            "0",
            "--attempt",
            "1",
        ],
    );
    assert!(term_log.contains("got SIGTERM"), "{term_log}");
    let why = c.cli_ok("user-team-a", &["explain", "imagenet-gpu-team-a-1"]);
    assert!(
        why.contains("mnist-team-b"),
        "explain names the preemptor: {why}"
    );

    // 3. A higher-priority team-b job preempts team-b's own lower-priority one.
    let b2 = job_file(
        &c,
        &run,
        "imagenet-gpu-team-b-2",
        "team-b",
        "inference",
        2,
        4,
    );
    c.cli_ok("user-team-b", &["submit", "-f", &b2]);
    wait_for(30, "imagenet-gpu-team-b-2 running", || {
        (state_of(&c, "imagenet-gpu-team-b-2") == "Running").then_some(())
    });
    assert!(workload(&c, "mnist-team-b").expect("mnist").preemptions >= 1);

    // 4. As team-b's jobs finish, capacity frees and team-a's job runs again, to the end.
    wait_for(120, "every job to succeed", || {
        let ws = workloads(&c);
        ws.iter().all(|w| w.state == "Succeeded").then_some(())
    });
    let a_final = workload(&c, "imagenet-gpu-team-a-1").expect("team-a job");
    assert!(a_final.preemptions >= 1);
    let (samples, violations) = watch.finish();
    assert!(samples > 20, "the GPU watch barely ran ({samples} samples)");
    assert!(violations.is_empty(), "GPU indices shared: {violations:?}");
    assert!(pod_processes(&run).is_empty(), "processes left behind");
    drop(agents);
}

#[test]
fn agent_and_coordinator_restarts_keep_pods_and_a_lost_agent_is_replaced() {
    let mut c = Cluster::new(1, 10_000);
    setup(&c);
    let lease = 8.0;
    let mut agents: Vec<AgentProc> = (1..=2)
        .map(|i| c.start_agent(&format!("n-{i}"), "ml.g5.8xlarge", 1, lease))
        .collect();
    wait_for(30, "two registered nodes", || {
        let out = c.cli_ok("admin-admin", &["get", "nodes"]);
        (out.matches("Ready").count() == 2).then_some(())
    });
    let run = run_id(&c);
    let watch = GpuWatch::start(&run);
    let j = job_file(&c, &run, "long", "team-a", "training", 1, 300);
    c.cli_ok("user-team-a", &["submit", "-f", &j]);
    let first = wait_for(30, "the job's process", || {
        pod_processes(&run).into_iter().next()
    });
    let node = first.node.clone();
    let idx = agents
        .iter()
        .position(|a| a.name == node)
        .expect("its agent");

    // An agent restart adopts the running pod: same process, same attempt.
    agents[idx].kill();
    agents[idx].start();
    std::thread::sleep(Duration::from_secs_f64(lease * 3.0));
    assert_eq!(
        pod_processes(&run),
        vec![first.clone()],
        "{}",
        agents[idx].log()
    );
    assert!(
        agents[idx].log().contains("still running under shim"),
        "{}",
        agents[idx].log()
    );
    // The cluster knows it runs, even if the agent was killed before its report went out
    // (the agent's successor reports the pods it adopts).
    assert_eq!(state_of(&c, "long"), "Running");

    // A coordinator restart (SIGKILL) within the lease leaves it running.
    c.kill(0);
    std::thread::sleep(Duration::from_millis(500));
    c.start(0);
    rt().block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    std::thread::sleep(Duration::from_secs_f64(lease * 2.5));
    assert_eq!(
        pod_processes(&run),
        vec![first.clone()],
        "{}\n{}",
        agents[idx].log(),
        c.logs()
    );
    assert_eq!(state_of(&c, "long"), "Running");

    // The agent dies for good: its pod stops within the lease, the node is lost after two
    // leases, and the job runs again on the other node (attempt 2), never twice at once.
    let killed = Instant::now();
    agents[idx].kill();
    wait_for(
        10,
        "the orphaned pod to stop at the end of the lease",
        || pod_processes(&run).is_empty().then_some(()),
    );
    let stopped_after = killed.elapsed();
    let second = wait_for(30, "the job on the other node", || {
        pod_processes(&run).into_iter().find(|p| p.node != node)
    });
    let moved_after = killed.elapsed();
    assert_eq!(second.attempt, "2");
    assert!(
        // The leader counts two leases from the last heartbeat it heard, which left up to a
        // fifth of a lease before the kill; the orphan stopped long before.
        moved_after >= Duration::from_secs_f64(lease * 1.8)
            && stopped_after + Duration::from_secs_f64(lease / 2.0) < moved_after,
        "stopped after {stopped_after:?}, moved after {moved_after:?}"
    );
    let nodes = c.cli_ok("admin-admin", &["get", "nodes"]);
    assert!(nodes.contains("Unhealthy"), "{nodes}");
    let w = c.cli_ok("admin-admin", &["describe", "workload", "long"]);
    assert!(w.contains("no heartbeat"), "{w}");

    // The agent comes back: the node is healthy again and its stale pod is not restarted.
    agents[idx].start();
    wait_for(20, "the node back", || {
        let out = c.cli_ok("admin-admin", &["get", "nodes"]);
        (!out.contains("Unhealthy")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(pod_processes(&run), vec![second]);
    c.cli_ok("user-team-a", &["cancel", "long"]);
    wait_for(20, "the cancelled job to stop", || {
        pod_processes(&run).is_empty().then_some(())
    });
    let (_, violations) = watch.finish();
    assert!(violations.is_empty(), "{violations:?}");
}

/// Resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Issue 23, finding 6: six concurrent reads of a 200 MB log through the agent's HTTP /logs
/// took the agent from 12 MB to 1.2 GB (it read each log whole into memory). Logs now stream
/// in 64 KiB pieces through the cluster: six readers of a 16 MiB log while memory is sampled,
/// then `logs --follow` on a pod that is still writing, which ends when the pod does.
#[test]
fn logs_stream_in_bounded_memory_and_follow_a_running_pod() {
    const BIG: usize = 16 << 20;
    let c = Cluster::new(1, 10_000);
    setup(&c);
    let agent = c.start_agent("g5-1", "ml.g5.8xlarge", 1, 3.0);
    wait_for(30, "a registered node", || {
        let out = c.cli_ok("admin-admin", &["get", "nodes"]);
        out.contains("Ready").then_some(())
    });
    let script =
        format!("head -c {BIG} /dev/zero | tr '\\0' x; echo; echo first; sleep 10; echo last");
    let path = c.dir.path().join("big.yaml");
    std::fs::write(
        &path,
        format!(
            "name: big\nteam: team-a\ncount: 1\nrequests: {{gpu: 1, cpu: 1, memory: 1Gi}}\ncommand: [\"sh\", \"-c\", {script:?}]\n"
        ),
    )
    .expect("job file");
    c.cli_ok(
        "user-team-a",
        &["submit", "-f", &path.display().to_string()],
    );
    // Follow from as soon as the log says "first" (the big part is written by then).
    wait_for(90, "the pod's first line", || {
        let o = c.cli("user-team-a", &["logs", "big"]);
        (o.stdout.len() > BIG).then_some(())
    });
    let follow_out = c.dir.path().join("follow.out");
    let follow = c
        .cli_command("user-team-a", &["logs", "big", "--follow"])
        .stdout(std::fs::File::create(&follow_out).expect("file"))
        .spawn()
        .expect("logs --follow");

    // Six readers at once, into files; memory sampled meanwhile.
    let agent_pid = agent.child.as_ref().expect("agent").id();
    let coord_pid = c.procs[0].as_ref().expect("coordinator").id();
    let before = (rss_mib(agent_pid), rss_mib(coord_pid));
    let readers: Vec<(std::process::Child, std::path::PathBuf)> = (0..6)
        .map(|i| {
            let out = c.dir.path().join(format!("reader-{i}.out"));
            let child = c
                .cli_command("admin-admin", &["logs", "big"])
                .stdout(std::fs::File::create(&out).expect("file"))
                .spawn()
                .expect("logs");
            (child, out)
        })
        .collect();
    let mut peak = before;
    let mut readers = readers;
    let t = Instant::now();
    while readers
        .iter_mut()
        .any(|(r, _)| r.try_wait().ok().flatten().is_none())
    {
        peak.0 = peak.0.max(rss_mib(agent_pid));
        peak.1 = peak.1.max(rss_mib(coord_pid));
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "readers still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for (r, out) in &mut readers {
        assert!(r.wait().expect("wait").success());
        let n = std::fs::metadata(&*out).expect("output").len() as usize;
        assert!(n > BIG, "a reader got {n} bytes");
    }
    eprintln!(
        "six readers of a {} MiB log: agent RSS {:.0} -> {:.0} MiB, coordinator {:.0} -> {:.0} MiB, {:?}",
        BIG >> 20,
        before.0,
        peak.0,
        before.1,
        peak.1,
        t.elapsed()
    );
    // Unbounded, the agent alone held each log whole: 6 x 64 MiB.
    assert!(peak.0 - before.0 < 48.0, "agent RSS {before:?} -> {peak:?}");
    assert!(
        peak.1 - before.1 < 96.0,
        "coordinator RSS {before:?} -> {peak:?}"
    );

    // --follow ends by itself when the pod does, with everything it wrote.
    let mut follow = follow;
    let status = wait_for(40, "logs --follow to end with the pod", || {
        follow.try_wait().ok().flatten()
    });
    assert!(status.success());
    let text = std::fs::read(&follow_out).expect("follow output");
    assert!(text.len() > BIG, "{}", text.len());
    assert!(
        text.ends_with(b"\nfirst\nlast\n"),
        "{:?}",
        &text[text.len().saturating_sub(40)..]
    );
    drop(agent);
}

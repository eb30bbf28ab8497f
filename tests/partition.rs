//! Partitions, live: three coordinator replicas and two agents as real processes, and the
//! leader cut off from both followers by packet filtering on loopback (iptables), while a
//! client streams submissions through every replica's address. The old leader stops
//! admitting and answering reads; the followers elect a new leader that takes the stream; no
//! acknowledged submission is lost and no workload runs two attempts at once; once the cut is
//! lifted the old leader catches up. And one agent cut off from the leader only: its lease runs
//! out, it stops its pod, and the work runs on the other node, never two attempts at once. A
//! replica's QUIC traffic, in and out, uses its listen port, and an agent's the ports of its
//! sockets (read from /proc), so the rules name ports. Packet filtering needs root and iptables (CI runs as root,
//! `.ci/run` installs iptables); elsewhere the test says it was skipped, unless
//! `ALLOT_REQUIRE_IPTABLES=1` (`.ci/run`), where that is a failure.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use allot_common::api::{Body, Reply};
use allot_common::ResourceName;
use support::*;

/// Rules that drop UDP between one port and others, both ways; removed when dropped.
struct Cut(Vec<Vec<String>>);

impl Cut {
    fn between(port: u16, others: &[u16]) -> Option<Cut> {
        let mut cut = Cut(Vec::new());
        for &o in others {
            for (from, to) in [(port, o), (o, port)] {
                let rule: Vec<String> = [
                    "INPUT",
                    "-p",
                    "udp",
                    "-s",
                    "127.0.0.1",
                    "--sport",
                    &from.to_string(),
                    "--dport",
                    &to.to_string(),
                    "-j",
                    "DROP",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                let ok = Command::new("iptables")
                    .arg("-I")
                    .args(&rule)
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    return None;
                }
                cut.0.push(rule);
            }
        }
        Some(cut)
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for rule in &self.0 {
            let _ = Command::new("iptables").arg("-D").args(rule).status();
        }
    }
}

/// Whether this machine can filter packets (a harmless rule is tried); says so when it cannot,
/// and fails where `ALLOT_REQUIRE_IPTABLES=1`.
fn can_filter() -> bool {
    if Cut::between(1, &[2]).is_some() {
        return true;
    }
    assert!(
        std::env::var("ALLOT_REQUIRE_IPTABLES").as_deref() != Ok("1"),
        "ALLOT_REQUIRE_IPTABLES=1 but iptables cannot add a rule here (needs root)"
    );
    println!("skipped: iptables cannot add a rule here (needs root)");
    false
}

/// Three replicas with a leader, two one-GPU agents (`node-1`, `node-2`) with leases of
/// `lease_s`, team-a's quota and `long` hour-long GPU jobs of `run` (`rt` entered).
fn three_replicas_two_nodes(
    rt: &tokio::runtime::Runtime,
    run: &str,
    lease_s: f64,
    long: usize,
) -> (Cluster, Vec<AgentProc>) {
    let c = Cluster::new(3, 100_000);
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    let agents = (1..=2)
        .map(|i| c.start_agent(&format!("node-{i}"), "ml.g5.8xlarge", 1, lease_s))
        .collect();
    rt.block_on(quota_and_long_jobs(&c, long, |name| {
        sleep_job(name, ResourceName::gpu(), 3600, run)
    }));
    (c, agents)
}

fn port(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

/// Which replica `cl` (which may reach only some) says leads, if one answers.
async fn leader_seen(cl: &mut allot_net::client::Client) -> Option<u64> {
    match tokio::time::timeout(Duration::from_secs(2), cl.call(Body::Hello)).await {
        Ok(Ok(Ok(Reply::Hello { leader, .. }))) => leader,
        _ => None,
    }
}

#[test]
fn a_leader_cut_off_from_its_followers_stops_and_a_new_one_takes_over() {
    // A harmless rule first: can this machine filter packets at all?
    if !can_filter() {
        return;
    }
    let rt = rt();
    let _in_rt = rt.enter();
    let run = format!("partition-{}", std::process::id());
    let (c, _agents) = three_replicas_two_nodes(&rt, &run, 5.0, 2);
    wait_for(30, "the long-running pods", || {
        let n = pod_processes(&run)
            .iter()
            .filter(|p| p.workload.starts_with("long-"))
            .count();
        (n == 2).then_some(())
    });
    let watch = AttemptWatch::start(&run);
    let (acked, done, stream) = one_second_stream(&c, &run);
    std::thread::sleep(Duration::from_secs(1));

    let leader = rt
        .block_on(leader_seen(&mut c.client("admin-admin")))
        .expect("a leader") as usize
        - 1;
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let cut = Cut::between(
        port(&c.addrs[leader]),
        &others
            .iter()
            .map(|&i| port(&c.addrs[i]))
            .collect::<Vec<_>>(),
    )
    .expect("the cut");
    let t = Instant::now();
    // The old leader, asked alone, stops answering reads.
    let only_old = |c: &Cluster| {
        allot_net::client::Client::new(vec![c.addrs[leader].clone()], &c.certs(), "admin-admin")
            .expect("client")
    };
    let stopped = rt.block_on(async {
        let mut cl = only_old(&c);
        loop {
            let r = tokio::time::timeout(Duration::from_secs(2), cl.call(Body::GetNodes)).await;
            if !matches!(r, Ok(Ok(Ok(Reply::Nodes(_))))) {
                return t.elapsed();
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "the cut-off leader still answered reads after 15s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // The followers elect a new leader among them.
    let new_leader = rt.block_on(async {
        let addrs = others.iter().map(|&i| c.addrs[i].clone()).collect();
        let mut cl =
            allot_net::client::Client::new(addrs, &c.certs(), "admin-admin").expect("client");
        loop {
            if let Some(l) = leader_seen(&mut cl).await {
                if l as usize - 1 != leader {
                    return (l, t.elapsed());
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "no new leader within 15s of the cut"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // The stream goes on through the new leader.
    let before = acked.lock().expect("lock").len();
    wait_for(20, "submissions taken by the new leader", || {
        (acked.lock().ok()?.len() >= before + 10).then_some(())
    });
    // The old leader takes no write either.
    let write = rt.block_on(async {
        let mut cl = only_old(&c);
        tokio::time::timeout(
            Duration::from_secs(3),
            cl.call(Body::Submit(sleep_job(
                "to-old",
                ResourceName::cpu(),
                1,
                &run,
            ))),
        )
        .await
    });
    assert!(
        !matches!(write, Ok(Ok(Ok(Reply::Submitted { .. })))),
        "the cut-off replica acknowledged a write: {write:?}"
    );

    drop(cut);
    let healed = Instant::now();
    let target = wait_for(10, "the new leader's commit index", || {
        c.metric(new_leader.0 as usize - 1, "allot_raft_commit_index")
    });
    wait_for(30, "the old leader to catch up", || {
        (c.metric(leader, "allot_raft_applied_index")? >= target).then_some(())
    });
    let caught_up = healed.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    stream.join().expect("the submit stream refused nothing");

    let acked = acked.lock().expect("lock").clone();
    let names = assert_each_acknowledged_once(&c, &acked);
    assert!(
        !names.iter().any(|n| n == "to-old"),
        "a write sent only to the cut-off replica was taken"
    );
    let (samples, twice) = watch.finish();
    assert!(samples > 20, "only {samples} samples of the pods");
    assert!(twice.is_empty(), "{twice:?}");
    eprintln!(
        "leader {} cut off: it stopped answering reads after {:?}; replica {} led after {:?}; {} submissions acknowledged; the old leader caught up {:?} after the cut was lifted",
        leader + 1,
        stopped,
        new_leader.0,
        new_leader.1,
        acked.len(),
        caught_up
    );
}

/// The UDP ports process `pid` has sockets on (its QUIC clients'), from /proc: its file
/// descriptors' socket inodes, looked up in the system's UDP tables.
fn udp_ports_of(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().to_string();
                    l.strip_prefix("socket:[")
                        .and_then(|s| s.strip_suffix(']'))
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (cols.get(1), cols.get(9)) else {
                continue;
            };
            if !inodes.iter().any(|i| i == inode) {
                continue;
            }
            if let Some(p) = local
                .rsplit(':')
                .next()
                .and_then(|h| u16::from_str_radix(h, 16).ok())
            {
                ports.push(p);
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// One agent cut off from the leader only (it still reaches the followers): its lease runs
/// out, it stops its pod, the leader fails its node and runs the work on the other node, and
/// the two attempts never run at once; once the cut is lifted the node comes back.
#[test]
fn an_agent_cut_off_from_the_leader_stops_its_pods_before_they_run_elsewhere() {
    if !can_filter() {
        return;
    }
    let rt = rt();
    let _in_rt = rt.enter();
    let run = format!("agent-cut-{}", std::process::id());
    let (c, agents) = three_replicas_two_nodes(&rt, &run, 3.0, 1);
    let first = wait_for(30, "the long-running pod", || {
        pod_processes(&run)
            .into_iter()
            .find(|p| p.workload.starts_with("long-"))
    });
    let watch = AttemptWatch::start(&run);
    let isolated = agents
        .iter()
        .find(|a| a.name == first.node)
        .expect("the pod's agent");
    let pid = isolated.child.as_ref().expect("the agent runs").id();
    let ports = udp_ports_of(pid);
    assert!(!ports.is_empty(), "no UDP sockets found for agent {pid}");
    let leader = rt
        .block_on(leader_seen(&mut c.client("admin-admin")))
        .expect("a leader") as usize
        - 1;
    let leader_port = port(&c.addrs[leader]);
    let cuts: Vec<Cut> = ports
        .iter()
        .map(|&p| Cut::between(p, &[leader_port]).expect("the cut"))
        .collect();
    let t = Instant::now();
    // The agent's lease (3 s) runs out: it stops its pod.
    wait_for(20, "the cut-off agent stopping its pod", || {
        (!pod_processes(&run).iter().any(|p| p.pid == first.pid)).then_some(())
    });
    let stopped = t.elapsed();
    // The work runs again on the other node.
    let moved = wait_for(40, "the work running on the other node", || {
        pod_processes(&run)
            .into_iter()
            .find(|p| p.workload == first.workload && p.node != first.node)
    });
    let elsewhere = t.elapsed();
    assert_ne!(moved.attempt, first.attempt);
    drop(cuts);
    // Heard again, the node is back in service.
    wait_for(30, "the node back", || {
        c.cli_ok("admin-admin", &["get", "nodes"])
            .lines()
            .filter(|l| l.contains("Ready"))
            .count()
            .eq(&2)
            .then_some(())
    });
    let (samples, twice) = watch.finish();
    assert!(samples > 20, "only {samples} samples of the pods");
    assert!(twice.is_empty(), "two attempts ran at once: {twice:?}");
    eprintln!(
        "agent {} cut off from leader {}: its pod stopped after {stopped:?}; the work ran on another node after {elsewhere:?}",
        first.node,
        leader + 1
    );
}

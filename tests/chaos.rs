//! Chaos, end to end and bounded in time: three coordinator replicas and four agents as real
//! processes on loopback. While a client streams submissions (each repeated with its key while
//! its outcome is unknown), the leader is SIGKILLed twice, an agent is SIGKILLed and restarted,
//! and a follower is SIGKILLed, its journal cut in the middle of its last record, and restarted.
//! Then: every acknowledged submission is there exactly once; the long-running workloads still
//! run their first attempt (no leader change or agent restart restarted them); no two attempts
//! of a workload ever ran at once, checked from the nodes' side twice over: a watcher samples
//! the pod processes all along, and every pod writes a start and a stop record.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use allot_common::api::SubmitInput;
use allot_common::ResourceName;
use support::*;

const NODES: usize = 4;
/// Half the default (10 s): an agent's renewal must reach the new leader within the election
/// and a round trip, or its pods stop when their lease runs out, and the long-running pods
/// below would not be their first processes any more. `ALLOT_CHAOS_LEASE_S` sets another.
fn lease_s() -> f64 {
    std::env::var("ALLOT_CHAOS_LEASE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0)
}

fn workload(name: &str, res: ResourceName, secs: u32, script: &str, run: &str) -> SubmitInput {
    let command = vec!["sh".into(), script.into(), secs.to_string()];
    run_job(name, res, command, run)
}

/// Cuts `journal` in the middle of its last record (the file is zero-filled past it).
fn cut_last_record(journal: &std::path::Path) -> u64 {
    let data = std::fs::read(journal).expect("journal");
    let end = data.iter().rposition(|&b| b != 0).expect("records") as u64 + 1;
    let cut = end.saturating_sub(40);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(journal)
        .expect("open journal");
    f.set_len(cut).expect("cut");
    cut
}

#[test]
fn leader_kills_an_agent_kill_and_a_cut_journal_lose_nothing_and_run_nothing_twice() {
    let mut c = Cluster::new(3, 100_000);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    let run = format!("chaos-{}", std::process::id());
    let records = c.dir.path().join("records.txt");
    let script = c.dir.path().join("rec.sh");
    std::fs::write(
        &script,
        format!(
            "rec() {{ echo \"$1 $ALLOT_WORKLOAD $ALLOT_ATTEMPT $ALLOT_NODE $(date +%s%N)\" >> {}; }}\nrec start\ntrap 'rec stop; exit 143' TERM\nsleep \"$1\" & wait\nrec stop\n",
            records.display()
        ),
    )
    .expect("script");
    let script = script.display().to_string();
    let mut agents: Vec<AgentProc> = (1..=NODES)
        .map(|i| c.start_agent(&format!("node-{i}"), "ml.g5.8xlarge", 1, lease_s()))
        .collect();
    rt.block_on(quota_and_long_jobs(&c, NODES, |name| {
        workload(name, ResourceName::gpu(), 3600, &script, &run)
    }));
    let first: Vec<SeenPod> = wait_for(30, "the long-running pods", || {
        let ps: Vec<SeenPod> = pod_processes(&run)
            .into_iter()
            .filter(|p| p.workload.starts_with("long-"))
            .collect();
        (ps.len() == NODES).then_some(ps)
    });
    let watch = AttemptWatch::start(&run);

    // The submit stream, on its own thread, while the faults happen below.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let stream = {
        let (script, run) = (script.clone(), run.clone());
        submit_stream(&c, acked.clone(), done.clone(), move |name| {
            workload(name, ResourceName::cpu(), 1, &script, &run)
        })
    };

    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(2));
        let l = rt.block_on(leader_index(&c));
        c.kill(l);
        std::thread::sleep(Duration::from_secs(1));
        c.start(l);
        // Back in the quorum before the next fault: two replicas down at once is a majority.
        caught_up(&c, l, &rt);
    }
    // An agent dies and comes back within its lease: its pods run on, adopted.
    std::thread::sleep(Duration::from_secs(1));
    agents[1].kill();
    std::thread::sleep(Duration::from_millis(800));
    agents[1].start();
    // A follower loses the end of its journal.
    std::thread::sleep(Duration::from_secs(1));
    let l = rt.block_on(leader_index(&c));
    let f = (l + 1) % 3;
    c.kill(f);
    let journal = c.data_root.join(format!("data-{}/raft.journal", f + 1));
    let cut = cut_last_record(&journal);
    c.start(f);
    std::thread::sleep(Duration::from_secs(3));
    done.store(true, Ordering::SeqCst);
    stream.join().expect("the submit stream");

    // The cut follower said what it repaired and caught up with the leader.
    let log = std::fs::read_to_string(c.dir.path().join(format!("coordinator-{}.log", f + 1)))
        .unwrap_or_default();
    assert!(
        log.contains(&journal.display().to_string()) && log.contains("catches up from its peers"),
        "replica {} did not report the journal cut at {cut}:\n{log}",
        f + 1
    );
    caught_up(&c, f, &rt);

    // Every acknowledged submission exactly once.
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() > 20,
        "only {} submissions acknowledged",
        acked.len()
    );
    assert_each_acknowledged_once(&c, &acked);

    // The long-running pods are the same processes, on their first attempt.
    let now: Vec<SeenPod> = pod_processes(&run)
        .into_iter()
        .filter(|p| p.workload.starts_with("long-"))
        .collect();
    assert_eq!(
        now,
        first,
        "a long-running workload was restarted\n{}\n{}",
        (1..=NODES)
            .map(|i| c.cli_ok(
                "admin-admin",
                &["describe", "workload", &format!("long-{i}")]
            ))
            .collect::<String>(),
        grep_logs(
            &c,
            &[
                "lost",
                "lease",
                "NodeFailures",
                "Pod",
                "evict",
                "WARN",
                "ERROR"
            ]
        )
    );

    let (samples, violations) = watch.finish();
    assert!(samples > 50, "only {samples} samples");
    assert!(violations.is_empty(), "{violations:?}");
    // The pods' own records: an attempt's stop comes before a later attempt's start.
    let text = std::fs::read_to_string(&records).unwrap_or_default();
    let mut spans: BTreeMap<(String, u32), (u128, Option<u128>)> = BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let [what, w, attempt, _node, t] = f[..] else {
            continue;
        };
        let (Ok(a), Ok(t)) = (attempt.parse::<u32>(), t.parse::<u128>()) else {
            continue;
        };
        let e = spans.entry((w.to_string(), a)).or_insert((t, None));
        if what == "stop" {
            e.1 = Some(t);
        }
    }
    assert!(
        spans.len() > 20,
        "only {} pod records:\n{text}",
        spans.len()
    );
    for ((w, a), (_, stop)) in &spans {
        if let (Some(stop), Some((next, _))) = (stop, spans.get(&(w.clone(), a + 1))) {
            assert!(
                stop <= next,
                "{w}: attempt {} started before attempt {a} stopped",
                a + 1
            );
        }
    }
    drop(agents);
}

/// The lines of every process's log that mention one of `words`.
fn grep_logs(c: &Cluster, words: &[&str]) -> String {
    let mut out = String::new();
    let Ok(dir) = std::fs::read_dir(c.dir.path()) else {
        return out;
    };
    let mut files: Vec<_> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for l in text.lines().filter(|l| words.iter().any(|w| l.contains(w))) {
            out.push_str(&format!("{}: {l}\n", f.display()));
        }
    }
    out
}

//! A rolling upgrade, end to end: three coordinator replicas and two agents of the release
//! before, with work running and a client streaming submissions, are upgraded to this build
//! one replica and one agent at a time. Nothing acknowledged is lost, no running pod is
//! restarted, no request is refused; the cluster keeps writing the old format until the last
//! replica runs the new build, then raises it; and a replica of the old build can then no
//! longer join (it stops with a message saying why instead of misreading the log).
//!
//! The release before is a real binary when `ALLOT_UPGRADE_FROM` names one (a build of an
//! earlier commit); otherwise it is this build reading and writing only what the release
//! before did (`ALLOT_EMULATE_FORMAT=0`: format 0, protocol 2).

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use allot_common::ResourceName;
use support::*;

const NODES: usize = 2;
const LEASE_S: f64 = 5.0;

/// The release before, and whether it is a real older binary.
fn old_build() -> (Build, bool) {
    match std::env::var("ALLOT_UPGRADE_FROM") {
        Ok(bin) if !bin.is_empty() => (
            Build {
                bin: bin.into(),
                env: Vec::new(),
            },
            true,
        ),
        _ => (
            Build {
                bin: BIN.into(),
                env: vec![("ALLOT_EMULATE_FORMAT".into(), "0".into())],
            },
            false,
        ),
    }
}

/// The cluster format replica `i` reports (`None` for a build from before formats).
fn format_of(c: &Cluster, i: usize) -> Option<f64> {
    c.metric(i, "allot_format_cluster")
}

#[test]
fn a_rolling_upgrade_loses_restarts_and_refuses_nothing() {
    let (old, real_old) = old_build();
    let new = Build::current();
    let mut c = Cluster::with_builds(3, 100_000, None, &[], vec![old.clone(); 3]);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    let run = format!("upgrade-{}", std::process::id());
    let mut agents: Vec<AgentProc> = (1..=NODES)
        .map(|i| {
            let name = format!("node-{i}");
            c.start_agent_build(&name, "ml.g5.8xlarge", 1, LEASE_S, &[], old.clone())
        })
        .collect();
    rt.block_on(quota_and_long_jobs(&c, NODES, |name| {
        sleep_job(name, ResourceName::gpu(), 3600, &run)
    }));
    let first: Vec<SeenPod> = wait_for(30, "the long-running pods", || {
        let ps: Vec<SeenPod> = pod_processes(&run)
            .into_iter()
            .filter(|p| p.workload.starts_with("long-"))
            .collect();
        (ps.len() == NODES).then_some(ps)
    });

    let (acked, done, stream) = one_second_stream(&c, &run);

    // One replica at a time, then the agent beside it. Until the last replica runs the new
    // build, the cluster writes the old format.
    for i in 0..3 {
        std::thread::sleep(Duration::from_secs(1));
        c.kill(i);
        c.builds[i] = new.clone();
        c.start(i);
        caught_up(&c, i, &rt);
        if let Some(a) = agents.get_mut(i) {
            a.kill();
            a.build = new.clone();
            a.start();
        }
        if i < 2 {
            // A leader of the new build asks its peers every 2 s: give it two rounds.
            std::thread::sleep(Duration::from_secs(5));
            for k in 0..3 {
                let f = format_of(&c, k);
                assert!(
                    f.is_none_or(|f| f == 0.0),
                    "replica {} reports cluster format {f:?} with {} of 3 replicas upgraded",
                    k + 1,
                    i + 1
                );
            }
        }
    }
    let current = f64::from(allot_coordinator::format::CURRENT);
    wait_for(30, "every replica at the current format", || {
        (0..3)
            .all(|k| format_of(&c, k) == Some(current))
            .then_some(())
    });
    // Work goes on in the new format.
    std::thread::sleep(Duration::from_secs(3));
    done.store(true, Ordering::SeqCst);
    stream.join().expect("the submit stream refused nothing");

    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() > 50,
        "only {} submissions acknowledged",
        acked.len()
    );
    let names = assert_each_acknowledged_once(&c, &acked);
    let listed = names.len();
    let now: Vec<SeenPod> = pod_processes(&run)
        .into_iter()
        .filter(|p| p.workload.starts_with("long-"))
        .collect();
    assert_eq!(now, first, "a long-running workload was restarted");

    // The old build cannot come back: it stops at the first entry in the new format. (A real
    // release from before formats has no such check; only the emulation is tried.)
    if !real_old {
        let l = rt.block_on(leader_index(&c));
        let f = (l + 1) % 3;
        c.kill(f);
        c.builds[f] = old.clone();
        c.start(f);
        let log_path = c.dir.path().join(format!("coordinator-{}.log", f + 1));
        wait_for(20, "the old build to stop", || {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            log.contains("this build reads formats up to 0")
                .then_some(())
        });
        let exited = c.procs[f]
            .as_mut()
            .map(|p| wait_for(10, "the old build to exit", || p.try_wait().ok().flatten()));
        assert!(
            exited.is_some_and(|s| !s.success()),
            "the old build exited {exited:?}"
        );
    }
    eprintln!(
        "upgrade from {}: {} submissions acknowledged, {} workloads listed, long-running pods untouched",
        if real_old { "a real older build" } else { "the emulated release before" },
        acked.len(),
        listed
    );
}

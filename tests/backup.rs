//! Backup and restore, end to end: `allot backup FILE` from a live three-replica cluster while
//! a client submits, every replica destroyed, a new cluster started from the file with
//! `allot coordinator --restore FILE`; every workload acknowledged before the backup, the
//! quota, the registry credentials and the usage records are there.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use allot_common::api::Body;
use allot_common::ResourceName;
use support::*;

#[test]
fn a_backup_taken_under_load_restores_a_new_cluster_with_everything_acknowledged() {
    let (c, agent) = one_gpu_cluster();
    // Usage to keep: a job that ran to its end.
    c.cli_ok(
        "user-team-a",
        &["submit", "--name", "ran", "--gpus", "1", "--", "sleep", "1"],
    );
    c.cli_ok(
        "user-team-a",
        &["wait", "ran", "--for", "finished", "--timeout", "60s"],
    );
    let rt = rt();
    let _in_rt = rt.enter();
    let put = rt.block_on(c.client("admin-admin").call(Body::PutRegistryCredentials {
        team: "team-a".into(),
        registry: "registry.example:5000".into(),
        credentials: allot_common::image::Credentials {
            username: "robot".into(),
            password: "s3cret".into(),
        },
    }));
    assert!(matches!(put, Ok(Ok(_))), "{put:?}");
    drop(agent);

    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let stream = submit_stream(&c, acked.clone(), done.clone(), |name| {
        sleep_job(name, ResourceName::cpu(), 60, "backup")
    });
    wait_for(20, "some submissions", || {
        (acked.lock().ok()?.len() >= 20).then_some(())
    });
    let before: Vec<String> = acked.lock().expect("lock").clone();
    let file = c.dir.path().join("cluster.backup");
    let o = c.cli("user-team-a", &["backup", file.to_str().expect("utf-8")]);
    assert!(!o.status.success(), "a team user took a backup");
    let out = c.cli_ok("admin-admin", &["backup", file.to_str().expect("utf-8")]);
    assert!(out.contains("written to"), "{out}");
    done.store(true, Ordering::SeqCst);
    stream.join().expect("the submit stream");
    let usage_before = c.cli_ok(
        "admin-admin",
        &["usage", "--since", "1d", "--by", "team", "-o", "csv"],
    );

    // Every replica goes; a new cluster (new addresses, new data) starts from the file.
    let file_arg = file.to_str().expect("utf-8").to_string();
    let restored = Cluster::with(3, 100_000, None, &["--restore", &file_arg]);
    rt.block_on(async { wait_leader(&mut restored.client("admin-admin")).await });
    drop(c);
    let names = assert_each_acknowledged_once(&restored, &before);
    assert!(names.iter().any(|n| n == "ran"), "{names:?}");
    let quotas = restored.cli_ok("admin-admin", &["list-compute-quotas"]);
    assert!(quotas.contains("team-a"), "{quotas}");
    let creds = restored.cli_ok(
        "admin-admin",
        &["list-registry-credentials", "--team", "team-a"],
    );
    assert!(creds.contains("registry.example:5000"), "{creds}");
    let usage_after = restored.cli_ok(
        "admin-admin",
        &["usage", "--since", "1d", "--by", "team", "-o", "csv"],
    );
    // The GPU hours used (the idle hours go on growing with the clock).
    let gpu_line = |csv: &str| {
        csv.lines()
            .find(|l| l.starts_with("team-a,gpu,"))
            .and_then(|l| l.split(',').nth(3))
            .map(str::to_string)
    };
    assert!(gpu_line(&usage_before).is_some(), "{usage_before}");
    assert_eq!(
        gpu_line(&usage_after),
        gpu_line(&usage_before),
        "the GPU hours the team used before the backup"
    );
    let log =
        std::fs::read_to_string(restored.dir.path().join("coordinator-1.log")).unwrap_or_default();
    assert!(
        log.contains("restored") && log.contains("workloads"),
        "{log}"
    );
    // A replica that was not restored from the file (here a fresh one at replica 3's place)
    // is not of this cluster: its raft streams are refused, and it never catches up.
    let mut restored = restored;
    restored.kill(2);
    std::fs::remove_dir_all(restored.data_root.join("data-3")).expect("replica 3's data");
    restored.extra.clear();
    restored.start(2);
    std::thread::sleep(std::time::Duration::from_secs(4));
    let sub = rt.block_on(restored.client("admin-admin").call(Body::Submit(sleep_job(
        "after",
        ResourceName::cpu(),
        1,
        "backup",
    ))));
    assert!(matches!(sub, Ok(Ok(_))), "{sub:?}");
    let commit = wait_for(10, "the leader's commit index", || {
        let l = (0..2).find(|&i| restored.metric(i, "allot_raft_is_leader") == Some(1.0))?;
        restored.metric(l, "allot_raft_commit_index")
    });
    let stranger = restored
        .metric(2, "allot_raft_applied_index")
        .unwrap_or(0.0);
    assert!(
        stranger < commit,
        "the fresh replica joined: applied {stranger} of {commit}"
    );
    let logs: String = (1..=2)
        .map(|i| {
            std::fs::read_to_string(restored.dir.path().join(format!("coordinator-{i}.log")))
                .unwrap_or_default()
        })
        .collect();
    assert!(
        logs.contains("does not open with this cluster's identity"),
        "no refusal logged"
    );
    eprintln!(
        "backed up with {} acknowledged ({} listed after the restore)",
        before.len(),
        names.len()
    );
}

/// A state above what one answer carries (16 MiB) travels in pieces, and restores.
#[test]
fn a_backup_larger_than_one_frame_is_streamed_and_restores() {
    let c = Cluster::new(1, 1_000_000);
    setup_team(&c, "team-a");
    let rt = rt();
    let _in_rt = rt.enter();
    let mut client = c.client("user-team-a");
    // Six workloads with 3 MiB of environment each: about 18 MiB of state.
    let big = "x".repeat(3 << 20);
    for i in 0..6 {
        let mut job = sleep_job(&format!("big-{i}"), ResourceName::cpu(), 60, "big");
        if let Some(run) = job.run.as_mut() {
            run.env.insert("PAYLOAD".into(), big.clone());
        }
        let r = rt.block_on(client.call(Body::Submit(job)));
        assert!(matches!(r, Ok(Ok(_))), "{r:?}");
    }
    let keep = tempfile::tempdir().expect("a directory for the backup");
    let file = keep.path().join("big.backup");
    let file_arg = file.to_str().expect("utf-8").to_string();
    let out = c.cli_ok("admin-admin", &["backup", &file_arg]);
    assert!(out.contains("written to"), "{out}");
    let size = std::fs::metadata(&file).expect("the backup").len();
    assert!(size > 17 << 20, "a backup of {size} bytes");
    assert!(!file.with_extension("partial").exists());
    drop(c);
    let restored = Cluster::with(1, 1_000_000, None, &["--restore", &file_arg]);
    rt.block_on(async { wait_leader(&mut restored.client("admin-admin")).await });
    // (Listing them all would not fit one answer either: each is described.)
    for i in 0..6 {
        let d = restored.cli_ok(
            "admin-admin",
            &[
                "describe",
                "workload",
                &format!("big-{i}"),
                "--team",
                "team-a",
            ],
        );
        assert!(
            d.contains(&format!("big-{i}")),
            "{}",
            &d[..d.len().min(500)]
        );
    }
}

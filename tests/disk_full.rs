//! A disk that fills up: three real coordinators whose data directories share a small tmpfs.
//! Once the free space falls below the reserve, the leader refuses writes with an error that
//! says why, reads go on, and writes are taken again as soon as space is freed. Mounting a
//! tmpfs needs root (CI runs as root); elsewhere the test says it was skipped, unless
//! `ALLOT_REQUIRE_TMPFS=1` (`.ci/run`), where that is a failure.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use allot_common::api::{Body, ErrorKind, Reply, WorkloadFilter};
use support::*;

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, mib: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn free_mib(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1M"])
        .arg(path)
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df prints the free space")
}

#[test]
fn a_full_disk_refuses_writes_serves_reads_and_recovers_when_space_returns() {
    let root = tempfile::tempdir().expect("tempdir");
    let mnt = root.path().join("disk");
    // Three journals of 16 MiB, their databases, and room to fill.
    let Some(fs) = Tmpfs::mount(&mnt, 160) else {
        assert!(
            std::env::var("ALLOT_REQUIRE_TMPFS").as_deref() != Ok("1"),
            "ALLOT_REQUIRE_TMPFS=1 but a tmpfs cannot be mounted here (needs root)"
        );
        println!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let mut c = Cluster::with(3, 100_000, Some(mnt.clone()), &["--disk-reserve-mb", "16"]);
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    setup_team(&c, "team-a");
    let _in_rt = rt.enter();
    let mut cl = c.client("admin-admin");
    let r = rt.block_on(cl.call(Body::Submit(job("before", "team-a"))));
    assert!(matches!(r, Ok(Ok(Reply::Submitted { .. }))), "{r:?}");

    // Fill the disk to 8 MiB free, below the 16 MiB reserve.
    let filler = mnt.join("filler");
    let fill = free_mib(&mnt).saturating_sub(8);
    let f = std::fs::File::create(&filler).expect("filler");
    use std::io::Write;
    let chunk = vec![1u8; 1 << 20];
    let mut w = std::io::BufWriter::new(f);
    for _ in 0..fill {
        w.write_all(&chunk).expect("filling");
    }
    w.flush().expect("filled");
    drop(w);
    std::thread::sleep(std::time::Duration::from_millis(200));

    let r = rt.block_on(cl.call(Body::Submit(job("while-full", "team-a"))));
    let Ok(Err(e)) = r else {
        panic!("a write was taken with the disk full: {r:?}");
    };
    assert_eq!(e.kind, ErrorKind::NoSpace);
    for part in [
        "MiB free, below the 16 MiB it keeps in reserve",
        "reads are served",
    ] {
        assert!(e.message.contains(part), "{:?} lacks {part:?}", e.message);
    }
    // The CLI says so at once, and does not call the outcome unknown: nothing was written.
    let job_file = c.dir.path().join("job.yaml");
    std::fs::write(
        &job_file,
        "name: cli-full\nteam: team-a\ncount: 1\nrequests: {gpu: 1}\n",
    )
    .expect("job file");
    let out = c.cli(
        "admin-admin",
        &["submit", "-f", job_file.to_str().expect("utf-8")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("NoSpace: the disk of coordinator"), "{err}");
    assert!(!err.contains("unknown"), "{err}");
    let out = c.cli("admin-admin", &["get", "workloads"]);
    assert!(out.status.success(), "a read failed with the disk full");
    assert!(String::from_utf8_lossy(&out.stdout).contains("before"));
    let r = rt.block_on(cl.call(Body::GetWorkloads(WorkloadFilter::default())));
    assert!(matches!(r, Ok(Ok(Reply::Workloads(_)))), "{r:?}");
    // No replica stopped.
    let mut exited = Vec::new();
    for (i, p) in c.procs.iter_mut().enumerate() {
        if p.as_mut()
            .is_some_and(|p| p.try_wait().ok().flatten().is_some())
        {
            exited.push(i + 1);
        }
    }
    assert!(
        exited.is_empty(),
        "replicas {exited:?} exited with the disk full\n{}",
        c.logs()
    );

    // Space returns: writes are taken again.
    std::fs::remove_file(&filler).expect("free the space");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let r = rt.block_on(cl.call(Body::Submit(job("after", "team-a"))));
    assert!(matches!(r, Ok(Ok(Reply::Submitted { .. }))), "{r:?}");
    drop(c);
    drop(fs);
}

/// Fills `dir`'s file system to the last byte; returns the file to remove to free it.
fn fill_up(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).expect("filler");
    let chunk = vec![1u8; 1 << 20];
    while f.write_all(&chunk).is_ok() {}
    let small = vec![1u8; 4096];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
    filler
}

/// Issue 55, item 7: a follower whose own disk fills stops acknowledging and voting, says why
/// in its log and `/readyz`, waits instead of exiting, and catches up once space returns; the
/// two others go on taking writes meanwhile.
#[test]
fn a_follower_whose_disk_fills_waits_and_catches_up_when_space_returns() {
    let root = tempfile::tempdir().expect("tempdir");
    // A tmpfs per replica: only the follower's fills.
    let mut disks = Vec::new();
    for i in 1..=3 {
        let Some(fs) = Tmpfs::mount(&root.path().join(format!("data-{i}")), 96) else {
            assert!(
                std::env::var("ALLOT_REQUIRE_TMPFS").as_deref() != Ok("1"),
                "ALLOT_REQUIRE_TMPFS=1 but a tmpfs cannot be mounted here (needs root)"
            );
            println!("skipped: cannot mount a tmpfs here (needs root)");
            return;
        };
        disks.push(fs);
    }
    // Snapshots every 20 entries: the follower writes one soon after its disk is full.
    let mut c = Cluster::with(
        3,
        20,
        Some(root.path().to_path_buf()),
        &["--disk-reserve-mb", "16"],
    );
    let rt = rt();
    rt.block_on(async { wait_leader(&mut c.client("admin-admin")).await });
    setup_team(&c, "team-a");
    let _in_rt = rt.enter();
    let mut cl = c.client("admin-admin");
    let leader = wait_for(10, "a leader", || {
        (0..3).find(|&i| c.metric(i, "allot_raft_is_leader") == Some(1.0))
    });
    let f = (leader + 1) % 3;
    let dir = root.path().join(format!("data-{}", f + 1));
    let filler = fill_up(&dir);
    let log_path = c.dir.path().join(format!("coordinator-{}.log", f + 1));
    let mut n = 0;
    let submit = |cl: &mut allot_net::client::Client, n: &mut u32| {
        *n += 1;
        let r = rt.block_on(cl.call(Body::Submit(job(&format!("w-{n}"), "team-a"))));
        assert!(matches!(r, Ok(Ok(Reply::Submitted { .. }))), "{r:?}");
    };
    wait_for(60, "the follower to wait for its disk", || {
        submit(&mut cl, &mut n);
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.contains("waits for the disk").then_some(())
    });
    let ready = http_get(&format!("127.0.0.1:{}", c.http[f]), "/readyz").unwrap_or_default();
    assert!(ready.contains("waits for its disk"), "readyz: {ready:?}");
    // The others go on: writes are taken and acknowledged by the two of them.
    for _ in 0..20 {
        submit(&mut cl, &mut n);
    }
    assert!(
        c.procs[f]
            .as_mut()
            .is_some_and(|p| p.try_wait().ok().flatten().is_none()),
        "the follower exited instead of waiting\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );

    std::fs::remove_file(&filler).expect("free the space");
    wait_for(30, "the follower to open its replica again", || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.contains("takes writes again").then_some(())
    });
    let target = wait_for(10, "the leader's commit index", || {
        let l = (0..3).find(|&i| c.metric(i, "allot_raft_is_leader") == Some(1.0))?;
        c.metric(l, "allot_raft_commit_index")
    });
    wait_for(30, "the follower to catch up", || {
        (c.metric(f, "allot_raft_applied_index")? >= target).then_some(())
    });
    let ready = http_get(&format!("127.0.0.1:{}", c.http[f]), "/readyz").unwrap_or_default();
    assert!(ready.contains("\r\n\r\nready: "), "readyz after: {ready:?}");
    eprintln!(
        "{n} submits taken while follower {} waited for its disk and after",
        f + 1
    );
    drop(c);
    drop(disks);
}

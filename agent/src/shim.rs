//! The pod shim: one small process per pod, between the agent and the workload's program.
//!
//! The agent starts `allot agent-shim` in its own session, so the pod survives an agent restart;
//! the shim starts the program in its own process group, waits for it and writes how it ended
//! to `exit.json` in the pod's directory, where a restarted agent finds it. Two things stop
//! the program: SIGTERM to the shim (the agent evicting the pod: SIGTERM to the program's
//! group, the grace period, then SIGKILL), and the node's lease running out (the agent could not
//! reach a coordinator quorum, or died): the shim reads the lease file the agent renews after
//! every confirmed heartbeat, and stops the program once it is past, so the coordinator can
//! give the pod's devices to someone else after two leases without anything running twice.
//!
//! Only std and libc: no runtime, a few hundred KiB of memory per pod.

use std::fs;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use crate::pod_dir::*;

/// The shim takes its pod's claim before anything else, waiting a moment for an agent that is
/// checking it; `Err` says why it must not run the pod.
fn claim_pod(dir: &Path) -> Result<fs::File, String> {
    let deadline = Instant::now() + CLAIM_WAIT;
    loop {
        match try_claim(dir) {
            Ok(Some(f)) => {
                if dir.join(EXIT_FILE).exists() {
                    // The agent found the pod without a shim after a restart and recorded it
                    // lost; it runs again elsewhere, so it must not start here now.
                    return Err("the pod was already recorded as ended; not starting it".into());
                }
                let _ = write_atomic(
                    &dir.join(SHIM_PID_FILE),
                    std::process::id().to_string().as_bytes(),
                );
                return Ok(f);
            }
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => return Err("another shim runs this pod".into()),
            Err(e) => return Err(format!("could not take the pod's claim: {e}")),
        }
    }
}

fn signal_group(pgid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

fn describe(status: ExitStatus) -> (Option<i32>, Option<i32>, String) {
    match (status.code(), status.signal()) {
        (Some(c), _) => (Some(c), None, format!("exit code {c}")),
        (None, Some(s)) => (None, Some(s), format!("killed by signal {s}")),
        _ => (None, None, "ended".into()),
    }
}

/// Runs the shim; returns the process exit code.
pub fn run(args: &ShimArgs) -> i32 {
    // SAFETY: installs an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }
    // Held until the shim exits: while it is, the pod's directory says a shim runs the pod.
    let _claim = match claim_pod(&args.dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("agent-shim: {}: {e}", args.dir.display());
            return EXIT_CLAIMED;
        }
    };
    if args.container {
        return crate::containerd::run::run(args);
    }
    if let Some(cg) = &args.cgroup {
        // Join the pod's cgroup first: the program and its children inherit it.
        if let Err(e) = fs::write(cg.join("cgroup.procs"), std::process::id().to_string()) {
            eprintln!("agent-shim: could not join cgroup {}: {e}", cg.display());
        }
    }
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(args.dir.join(LOG_FILE));
    let (out, err) = match log.and_then(|f| Ok((f.try_clone()?, f))) {
        Ok((a, b)) => (Stdio::from(a), Stdio::from(b)),
        Err(_) => (Stdio::null(), Stdio::null()),
    };
    let mut cmd = Command::new(&args.program[0]);
    cmd.args(&args.program[1..])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if let Some(w) = &args.workdir {
        cmd.current_dir(w);
    }
    let record = |r: ExitRecord| {
        if let Err(e) = write_exit(&args.dir, &r) {
            eprintln!("agent-shim: could not record the exit: {e}");
        }
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            record(ExitRecord {
                code: None,
                signal: None,
                succeeded: false,
                lease_expired: false,
                stopped: false,
                lost: false,
                detail: format!("could not start {:?}: {e}", args.program[0]),
                ended_ms: now_ms(),
            });
            return 1;
        }
    };
    let pgid = child.id() as i32;
    let _ = write_atomic(&args.dir.join(CHILD_PID_FILE), pgid.to_string().as_bytes());
    let mut kill_at: Option<Instant> = None;
    let mut stopped = false;
    let mut lease_expired = false;
    let mut last_lease_check = Instant::now() - Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let (code, signal, mut detail) = describe(status);
                if lease_expired {
                    detail = format!("{detail} (stopped: the node's lease expired)");
                } else if stopped {
                    detail = format!("{detail} (stopped by the agent)");
                }
                // Make sure nothing of the group lingers on the devices.
                signal_group(pgid, libc::SIGKILL);
                record(ExitRecord {
                    code,
                    signal,
                    succeeded: status.success() && !stopped && !lease_expired,
                    lease_expired,
                    stopped,
                    lost: false,
                    detail,
                    ended_ms: now_ms(),
                });
                return 0;
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("agent-shim: waiting for the program: {e}");
            }
        }
        if kill_at.is_none() {
            let mut grace = args.grace_ms;
            if TERM.load(Ordering::SeqCst) {
                stopped = true;
            } else if last_lease_check.elapsed() >= Duration::from_millis(200) {
                last_lease_check = Instant::now();
                if args.lease_ms > 0 && now_ms() > read_lease(&args.lease_file) {
                    lease_expired = true;
                    // The coordinator reassigns after two leases: be gone well before.
                    grace = grace.min(args.lease_ms * 4 / 5);
                }
            }
            if stopped || lease_expired {
                signal_group(pgid, libc::SIGTERM);
                kill_at = Some(Instant::now() + Duration::from_millis(grace));
            }
        } else if kill_at.is_some_and(|t| Instant::now() >= t) {
            signal_group(pgid, libc::SIGKILL);
            kill_at = Some(Instant::now() + Duration::from_secs(3600));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn args_round_trip() {
        let a = ShimArgs {
            dir: "/var/lib/allot/pods/1-1-0".into(),
            lease_file: "/var/lib/allot/lease".into(),
            lease_ms: 10_000,
            grace_ms: 30_000,
            cgroup: Some("/sys/fs/cgroup/allot/p".into()),
            workdir: None,
            container: false,
            adopt: false,
            program: vec!["python".into(), "--".into(), "train.py".into()],
        };
        assert_eq!(ShimArgs::parse(&a.to_args()).unwrap(), a);
    }

    #[test]
    fn bad_args_are_named() {
        let e = ShimArgs::parse(&["--lease-ms".into(), "soon".into()]).unwrap_err();
        assert!(e.contains("\"soon\""), "{e}");
        let e = ShimArgs::parse(&[
            "--dir".into(),
            "/x".into(),
            "--lease-file".into(),
            "/y".into(),
        ])
        .unwrap_err();
        assert!(e.contains("no program"), "{e}");
    }

    fn shim_dir() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let lease = d.path().join("lease");
        (d, lease)
    }

    fn exit_of(dir: &Path) -> ExitRecord {
        serde_json::from_slice(&fs::read(dir.join(EXIT_FILE)).unwrap()).unwrap()
    }

    #[test]
    fn records_how_the_program_ended() {
        let (d, lease) = shim_dir();
        fs::write(&lease, (now_ms() + 60_000).to_string()).unwrap();
        let mut a = test_args(d.path(), &lease, &["sh", "-c", "echo hi; exit 3"]);
        assert_eq!(run(&a), 0);
        let r = exit_of(d.path());
        assert_eq!(
            (r.code, r.succeeded, r.lease_expired),
            (Some(3), false, false)
        );
        assert_eq!(fs::read_to_string(d.path().join(LOG_FILE)).unwrap(), "hi\n");
        // A directory holds one run: a record there means the pod ended.
        assert_eq!(run(&a), EXIT_CLAIMED);
        fs::remove_file(d.path().join(EXIT_FILE)).unwrap();
        a.program = vec!["true".into()];
        run(&a);
        assert!(exit_of(d.path()).succeeded);
    }

    #[test]
    fn a_shim_runs_its_pod_only_while_it_holds_the_claim() {
        let (d, lease) = shim_dir();
        fs::write(&lease, (now_ms() + 60_000).to_string()).unwrap();
        let marker = d.path().join("ran");
        let a = test_args(d.path(), &lease, &["touch", &marker.display().to_string()]);
        // Another shim holds the pod: this one waits a moment, then leaves it alone.
        let other = try_claim(d.path()).unwrap().expect("free");
        assert!(try_claim(d.path()).unwrap().is_none());
        assert_eq!(run(&a), EXIT_CLAIMED);
        assert!(!marker.exists() && !d.path().join(EXIT_FILE).exists());
        drop(other);
        assert_eq!(run(&a), 0);
        assert!(marker.exists());
        assert_eq!(
            fs::read_to_string(d.path().join(SHIM_PID_FILE)).unwrap(),
            std::process::id().to_string()
        );
        // Its claim went with it.
        assert!(!claim_held(d.path()));
    }

    #[test]
    fn an_expired_lease_stops_the_program() {
        let (d, lease) = shim_dir();
        fs::write(&lease, (now_ms() - 1).to_string()).unwrap();
        let a = ShimArgs {
            lease_ms: 500,
            grace_ms: 30_000,
            ..test_args(d.path(), &lease, &["sleep", "30"])
        };
        let t = Instant::now();
        run(&a);
        let r = exit_of(d.path());
        assert!(r.lease_expired && !r.succeeded, "{r:?}");
        // Stopped by SIGTERM at once, not after the 30 s sleep or the 30 s grace.
        assert_eq!(r.signal, Some(libc::SIGTERM));
        assert!(t.elapsed() < Duration::from_secs(20));
    }
}

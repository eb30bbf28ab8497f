//! A pod's directory: the files the agent, the pod's shim (`shim`) and the container runner
//! (`containerd::run`) share, how they are written, the shim's arguments, and the stop
//! request the shim's signal handler records. Apart from the shim's process, so that the
//! container runner (which the shim runs) and the shim do not import each other.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How the program ended, as the shim writes it to `exit.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub succeeded: bool,
    /// Stopped because the node's lease ran out (not the program's own failure).
    pub lease_expired: bool,
    /// Stopped because the agent asked (eviction or cancel).
    pub stopped: bool,
    /// The pod is gone without its own exit (its container vanished): run it again elsewhere.
    #[serde(default)]
    pub lost: bool,
    pub detail: String,
    pub ended_ms: i64,
}

pub const EXIT_FILE: &str = "exit.json";
pub const CHILD_PID_FILE: &str = "child.pid";
pub const LOG_FILE: &str = "output.log";
/// The shim's pid, written by the shim itself once it holds the pod's claim.
pub const SHIM_PID_FILE: &str = "shim.pid";
/// The pod's claim: a shim holds an exclusive lock on this file for as long as it lives, so
/// "a shim runs this pod" is one question the kernel answers, whatever was or was not written.
pub const CLAIM_FILE: &str = "shim.lock";
/// How long a starting shim waits for a claim the agent holds for a moment (while it checks a
/// pod after a restart); another shim never lets go that soon.
pub(crate) const CLAIM_WAIT: Duration = Duration::from_secs(1);
/// The shim's exit code when another shim already runs the pod.
pub const EXIT_CLAIMED: i32 = 3;

/// Tries to take `dir`'s claim: `Ok(Some(lock))` holds it until dropped, `Ok(None)` means another
/// process holds it.
pub fn try_claim(dir: &Path) -> std::io::Result<Option<fs::File>> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(CLAIM_FILE))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Whether a live shim holds `dir`'s claim. Checking takes the lock for a moment when it is
/// free, which a starting shim waits out.
pub fn claim_held(dir: &Path) -> bool {
    matches!(try_claim(dir), Ok(None))
}

/// What the agent passes on the shim's command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShimArgs {
    pub dir: PathBuf,
    pub lease_file: PathBuf,
    pub lease_ms: u64,
    pub grace_ms: u64,
    /// cgroup (v2) directory to join before starting the program.
    pub cgroup: Option<PathBuf>,
    pub workdir: Option<PathBuf>,
    /// Run the pod as a container (`containerd::run`, from `container.json` in `dir`).
    pub container: bool,
    /// With `container`: take over the pod's existing container instead of creating one.
    pub adopt: bool,
    pub program: Vec<String>,
}

impl ShimArgs {
    /// Renders the arguments after `allot agent-shim`.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--dir".into(),
            self.dir.display().to_string(),
            "--lease-file".into(),
            self.lease_file.display().to_string(),
            "--lease-ms".into(),
            self.lease_ms.to_string(),
            "--grace-ms".into(),
            self.grace_ms.to_string(),
        ];
        if let Some(c) = &self.cgroup {
            a.push("--cgroup".into());
            a.push(c.display().to_string());
        }
        if let Some(w) = &self.workdir {
            a.push("--workdir".into());
            a.push(w.display().to_string());
        }
        if self.container {
            a.push("--container".into());
        }
        if self.adopt {
            a.push("--adopt".into());
        }
        a.push("--".into());
        a.extend(self.program.iter().cloned());
        a
    }

    /// Parses what `to_args` rendered; errors name the bad argument.
    pub fn parse(args: &[String]) -> Result<ShimArgs, String> {
        let mut out = ShimArgs {
            dir: PathBuf::new(),
            lease_file: PathBuf::new(),
            lease_ms: 0,
            grace_ms: 30_000,
            cgroup: None,
            workdir: None,
            container: false,
            adopt: false,
            program: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--" {
                out.program = it.cloned().collect();
                break;
            }
            if a == "--container" {
                out.container = true;
                continue;
            }
            if a == "--adopt" {
                out.adopt = true;
                continue;
            }
            let v = it
                .next()
                .ok_or_else(|| format!("agent-shim: {a} needs a value"))?;
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("agent-shim: {a} {v:?} is not a number of milliseconds"))
            };
            match a.as_str() {
                "--dir" => out.dir = PathBuf::from(v),
                "--lease-file" => out.lease_file = PathBuf::from(v),
                "--lease-ms" => out.lease_ms = num(v)?,
                "--grace-ms" => out.grace_ms = num(v)?,
                "--cgroup" => out.cgroup = Some(PathBuf::from(v)),
                "--workdir" => out.workdir = Some(PathBuf::from(v)),
                other => return Err(format!("agent-shim: unknown argument {other:?}")),
            }
        }
        if out.dir.as_os_str().is_empty() || out.lease_file.as_os_str().is_empty() {
            return Err("agent-shim: --dir and --lease-file are required".into());
        }
        if out.program.is_empty() && !out.container {
            return Err("agent-shim: no program after --".into());
        }
        Ok(out)
    }
}

/// A process pod's arguments for tests: 10 s lease, 1 s grace, no cgroup or workdir.
#[cfg(test)]
pub(crate) fn test_args(dir: &Path, lease_file: &Path, program: &[&str]) -> ShimArgs {
    ShimArgs {
        dir: dir.to_path_buf(),
        lease_file: lease_file.to_path_buf(),
        lease_ms: 10_000,
        grace_ms: 1000,
        cgroup: None,
        workdir: None,
        container: false,
        adopt: false,
        program: program.iter().map(|a| a.to_string()).collect(),
    }
}

pub(crate) static TERM: AtomicBool = AtomicBool::new(false);

pub(crate) extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

/// Whether the agent asked the pod to stop (SIGTERM or SIGINT to the shim).
pub fn term_requested() -> bool {
    TERM.load(Ordering::SeqCst)
}

pub use allot_common::timefmt::now_ms;

/// The lease deadline the agent last wrote (ms since the epoch); 0 when unreadable.
pub fn read_lease(path: &Path) -> i64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes a file whole or not at all (write to a temporary name, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)
}

/// Records how a pod ended in its directory's `exit.json` (whole or not at all).
pub fn write_exit(dir: &Path, r: &ExitRecord) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
    write_atomic(&dir.join(EXIT_FILE), &bytes)
}

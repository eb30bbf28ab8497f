//! Where a container's output goes, and how the shim knows it has all arrived.
//!
//! containerd's shim copies the container's stdout and stderr pipes into the pod's log itself,
//! so the output keeps flowing while the agent or its shim is down. With the `file://` scheme
//! both copies share one descriptor, which the stdout copy closes as soon as stdout ends; the
//! last stderr lines of a container that exits at once are then dropped (containerd 1.6 and
//! later: its `copyPipes` hands stdout the descriptor itself and only stderr the counted one).
//! So the task is given the log as two plain paths that differ as strings (`DIR/output.log`
//! and `DIR/./output.log`): containerd opens each for appending on its own descriptor, and
//! each copy closes its own. The log must exist first (containerd does not create it).
//!
//! Each copy closes its descriptor once its stream is drained, and both streams end when the
//! container's last process does: an inotify watch on the log, added before the task is
//! created, sees the first close (`IN_CLOSE_WRITE`; readers close without writing and are not
//! seen; the kernel may fold the two closes into one event). Deleting the task then waits for
//! a copy still running (containerd gives it two seconds).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// How often an unfinished wait looks again.
const POLL: Duration = Duration::from_millis(10);

/// Creates the pod's log if it is not there and returns the task's (stdout, stderr) paths for
/// it.
pub(crate) fn prepare(log: &Path) -> Result<(String, String), String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("creating the log {}: {e}", log.display()))?;
    let name = log
        .file_name()
        .ok_or_else(|| format!("{}: the log needs a file name", log.display()))?;
    let dir = log.parent().unwrap_or(Path::new("."));
    let again = dir.join(".").join(name);
    Ok((log.display().to_string(), again.display().to_string()))
}

/// A watch for the close of a log by its writers.
pub(crate) struct OutputEnd {
    fd: OwnedFd,
}

impl OutputEnd {
    /// Watches `log` for its writers' closes. `None` when the watch cannot be made (no
    /// inotify, the file gone, the watch limit reached): callers fall back to waiting for the
    /// log's size to settle.
    pub(crate) fn watch(log: &Path) -> Option<OutputEnd> {
        let path = CString::new(log.as_os_str().as_bytes()).ok()?;
        // SAFETY: inotify_init1 takes flags only and returns a new descriptor or -1.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        // SAFETY: `raw` is a descriptor just returned to this function, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a valid descriptor and a NUL-terminated path that outlives the call.
        let wd =
            unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_CLOSE_WRITE) };
        (wd >= 0).then_some(OutputEnd { fd })
    }

    /// Whether a writer has closed the log (or the log is gone) since the watch began.
    fn closed(&self) -> bool {
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a buffer this function owns, at most its length.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        // Only IN_CLOSE_WRITE is asked for; the kernel adds IN_IGNORED when the log is gone,
        // after which nothing more is written to it.
        n > 0
    }

    /// Waits until a writer closes the log, at most `limit`; returns whether one did.
    pub(crate) async fn wait(self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.closed() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn open_append(path: &str) -> std::fs::File {
        std::fs::OpenOptions::new().append(true).open(path).unwrap()
    }

    #[tokio::test]
    async fn each_stream_writes_on_its_own_descriptor_and_a_writer_closing_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        let (out_path, err_path) = prepare(&log).unwrap();
        assert_ne!(out_path, err_path);
        let end = OutputEnd::watch(&log).expect("inotify works here");
        let mut out = open_append(&out_path);
        let mut err = open_append(&err_path);
        out.write_all(b"hello\n").unwrap();
        // A reader's close is not the end.
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "hello\n");
        let end = end;
        assert!(!end.closed());
        // stdout ends while stderr has more to say: the second descriptor still writes.
        drop(out);
        err.write_all(b"oops\n").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "hello\noops\n");
        drop(err);
        assert!(end.wait(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_log_removed_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        prepare(&log).unwrap();
        let end = OutputEnd::watch(&log).unwrap();
        std::fs::remove_file(&log).unwrap();
        assert!(end.wait(Duration::from_secs(5)).await);
    }

    #[test]
    fn an_existing_log_is_kept_and_a_missing_one_gives_no_watch() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        std::fs::write(&log, "attempt 1\n").unwrap();
        prepare(&log).unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "attempt 1\n");
        assert!(OutputEnd::watch(&dir.path().join("absent.log")).is_none());
    }
}

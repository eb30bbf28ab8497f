//! A container's first process, watched and signalled without containerd. When containerd goes
//! away while a pod runs (stopped, crashed, restarting), the pod's shim keeps its promises
//! through this: an expired lease or a stop still ends the container (SIGKILL to the first
//! process of a pid namespace ends every process in it, and allot's containers always have
//! their own), and the shim still notices when the container has ended.
//!
//! The process is named by its pid and its start time, read when the shim learns the pid from
//! containerd: a later process that reuses the pid has another start time and is never
//! signalled.

use std::path::Path;

/// In a pod's directory: the container's first process, `PID START`.
const TASK_PROCESS_FILE: &str = "task.process";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskProcess {
    pub(crate) pid: i32,
    /// Clock ticks after boot when it started (`/proc/PID/stat`, field 22).
    start: u64,
}

impl TaskProcess {
    /// The running process `pid`, as it is now; `None` if there is none.
    pub(crate) fn of(pid: u32) -> Option<TaskProcess> {
        Self::of_in(Path::new("/proc"), pid)
    }

    fn of_in(proc_root: &Path, pid: u32) -> Option<TaskProcess> {
        let pid = i32::try_from(pid).ok().filter(|p| *p > 0)?;
        let (state, start) = stat(proc_root, pid)?;
        (state != 'Z').then_some(TaskProcess { pid, start })
    }

    /// Whether the same process still runs (a zombie has ended: only its reaping is left).
    pub(crate) fn alive(&self) -> bool {
        self.alive_in(Path::new("/proc"))
    }

    fn alive_in(&self, proc_root: &Path) -> bool {
        stat(proc_root, self.pid).is_some_and(|(state, start)| start == self.start && state != 'Z')
    }

    /// Keeps the process's name in the pod's directory, for a shim that adopts the pod while
    /// containerd is away.
    pub(crate) fn record(&self, pod_dir: &Path) {
        let _ = crate::pod_dir::write_atomic(
            &pod_dir.join(TASK_PROCESS_FILE),
            format!("{} {}\n", self.pid, self.start).as_bytes(),
        );
    }

    /// The process `record` kept in `pod_dir`, whether or not it still runs.
    pub(crate) fn recorded(pod_dir: &Path) -> Option<TaskProcess> {
        let text = std::fs::read_to_string(pod_dir.join(TASK_PROCESS_FILE)).ok()?;
        let mut f = text.split_whitespace();
        let pid = f.next()?.parse().ok().filter(|p: &i32| *p > 0)?;
        let start = f.next()?.parse().ok()?;
        Some(TaskProcess { pid, start })
    }

    /// Sends `signal` to the process if it is still the one named.
    pub(crate) fn signal(&self, signal: i32) {
        if self.alive() {
            // SAFETY: kill(2) with a pid and a signal number touches no memory of ours.
            unsafe { libc::kill(self.pid, signal) };
        }
    }
}

/// A process's state letter and start time, from `/proc/PID/stat`.
fn stat(proc_root: &Path, pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&text)
}

/// The command name (field 2) is in parentheses and may hold spaces and parentheses itself:
/// the fields after it start after the last `)`. Field 3 is the state, field 22 the start time.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4 to 21 lie between the state and the start time.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_stat(root: &Path, pid: i32, comm: &str, state: char, start: u64) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("dir");
        let between = (4..=21)
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        std::fs::write(
            dir.join("stat"),
            format!("{pid} ({comm}) {state} {between} {start} 23 24\n"),
        )
        .expect("stat");
    }

    #[test]
    fn the_start_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let between = (4..=21)
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let text = format!("42 (a) b (c)) S {between} 987654 1 2");
        assert_eq!(parse_stat(&text), Some(('S', 987654)));
        assert_eq!(parse_stat("42 (cut short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis at all"), None);
    }

    #[test]
    fn a_reused_pid_or_a_zombie_is_not_the_process() {
        let root = tempfile::tempdir().expect("tmp");
        write_stat(root.path(), 77, "sleep 1000", 'S', 5000);
        let p = TaskProcess::of_in(root.path(), 77).expect("runs");
        assert!(p.alive_in(root.path()));
        // It ended and was reaped; another process got the pid.
        write_stat(root.path(), 77, "bash", 'R', 9000);
        assert!(!p.alive_in(root.path()));
        // Ended, not reaped yet.
        write_stat(root.path(), 77, "sleep 1000", 'Z', 5000);
        assert!(!p.alive_in(root.path()));
        assert_eq!(TaskProcess::of_in(root.path(), 77), None);
        assert_eq!(TaskProcess::of_in(root.path(), 78), None);
        assert_eq!(TaskProcess::of_in(root.path(), 0), None);
    }

    #[test]
    fn a_recorded_process_reads_back_and_a_damaged_record_is_none() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(TaskProcess::recorded(dir.path()), None);
        let p = TaskProcess::of(std::process::id()).expect("this process");
        p.record(dir.path());
        assert_eq!(TaskProcess::recorded(dir.path()), Some(p));
        std::fs::write(dir.path().join(TASK_PROCESS_FILE), "12 x\n").expect("write");
        assert_eq!(TaskProcess::recorded(dir.path()), None);
        std::fs::write(dir.path().join(TASK_PROCESS_FILE), "-4 7\n").expect("write");
        assert_eq!(TaskProcess::recorded(dir.path()), None);
    }

    #[test]
    fn this_process_is_found_and_alive() {
        let me = TaskProcess::of(std::process::id()).expect("this process");
        assert!(me.alive());
    }
}

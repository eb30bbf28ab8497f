//! The raft thread's CPU scheduling policy.
//!
//! Every commit waits on a chain of wake-ups: the leader's raft thread, a follower's, the
//! leader's again. When a replica shares its CPUs with other work, each wake-up can wait behind
//! whatever else is runnable, and on a busy host that wait, not the disk, makes the slowest
//! commits slow. Under `SCHED_FIFO` the raft thread runs as soon as it is woken. Cluster
//! managers with the same need do the same (corosync runs real-time by default).
//!
//! Threads the raft thread starts (the snapshot encoder, tokio's blocking pool) go back to the
//! normal policy (`SCHED_RESET_ON_FORK`): only the thread on the commit path is raised. The
//! snapshot encoder then lowers itself (`make_background`). The kernel's real-time throttling
//! (by default at most 0.95 s of every second) bounds what a busy raft thread can take from
//! the rest of the host.

use std::fmt;
use std::str::FromStr;

/// How the raft thread is scheduled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RaftPriority {
    /// `SCHED_FIFO` at priority 1 where the process may (`CAP_SYS_NICE`, or an `RLIMIT_RTPRIO`
    /// of 1 or more, as systemd's `LimitRTPRIO=1` gives); the normal policy where it may not.
    #[default]
    Realtime,
    /// The normal policy, like every other thread.
    Normal,
}

impl FromStr for RaftPriority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "realtime" => Ok(RaftPriority::Realtime),
            "normal" => Ok(RaftPriority::Normal),
            other => Err(format!(
                "{other:?} is not a raft thread priority; accepted: realtime, normal"
            )),
        }
    }
}

impl fmt::Display for RaftPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RaftPriority::Realtime => "realtime",
            RaftPriority::Normal => "normal",
        })
    }
}

/// Applies `want` to the calling thread. Returns what the thread now runs under, in words, for
/// the start-up line; a refused `Realtime` leaves the thread as it was and says why.
pub fn apply(want: RaftPriority) -> String {
    match want {
        RaftPriority::Normal => "normal priority (--raft-priority normal)".to_string(),
        RaftPriority::Realtime => match make_realtime() {
            Ok(()) => "real-time priority (SCHED_FIFO 1)".to_string(),
            Err(why) => format!(
                "normal priority: real-time was refused ({why}); it needs CAP_SYS_NICE or an \
                 RLIMIT_RTPRIO of 1 or more (systemd: LimitRTPRIO=1); --raft-priority normal \
                 asks for none"
            ),
        },
    }
}

/// `SCHED_RESET_ON_FORK` from `<linux/sched.h>`, or'ed into the policy.
#[cfg(target_os = "linux")]
const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;

/// Puts the calling thread under `SCHED_FIFO` at priority 1; threads it starts get the normal
/// policy.
#[cfg(target_os = "linux")]
pub fn make_realtime() -> Result<(), String> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the calling
    // thread.
    os_status(unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | SCHED_RESET_ON_FORK, &param)
    })
}

/// A libc call's return code as a result: 0 is success, anything else the OS error it left.
#[cfg(target_os = "linux")]
fn os_status(rc: libc::c_int) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

#[cfg(not(target_os = "linux"))]
pub fn make_realtime() -> Result<(), String> {
    Err("only supported on Linux".to_string())
}

/// The niceness of background work (`make_background`): the lowest priority there is.
pub const BACKGROUND_NICE: libc::c_int = 19;

/// Lowers the calling thread to the lowest priority of the normal policy (nice 19), for work
/// that must not take the CPU from the request path: encoding a snapshot of a deep backlog
/// (tens of MB, tens of milliseconds of CPU) competed with the threads that answer clients
/// and delayed their commits. It still gets the CPU the host leaves idle, and a little under
/// load (the kernel never starves a runnable thread). Any user may lower a thread's priority;
/// on Linux niceness is per thread, so only the caller is lowered.
#[cfg(target_os = "linux")]
pub fn make_background() -> Result<(), String> {
    // SAFETY: no pointers; who 0 is the calling thread.
    os_status(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE) })
}

#[cfg(not(target_os = "linux"))]
pub fn make_background() -> Result<(), String> {
    Err("only supported on Linux".to_string())
}

/// Starts `work` on a new thread named `name` that first lowers itself (`make_background`): for
/// what the raft thread hands off so that commits do not wait for it (encoding a snapshot,
/// freeing the log entries a snapshot compacted, removing older snapshots' files). When no
/// thread can be started the error is returned and `work` is dropped unrun.
pub fn in_background(
    name: String,
    work: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(move || {
        if let Err(e) = make_background() {
            tracing::debug!("a background thread keeps the normal priority: {e}");
        }
        work()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's scheduling policy, without the reset-on-fork flag (`libc::SCHED_*`).
    #[cfg(target_os = "linux")]
    fn current_policy() -> libc::c_int {
        // SAFETY: no arguments besides the calling thread's pid (0).
        unsafe { libc::sched_getscheduler(0) & !SCHED_RESET_ON_FORK }
    }

    #[test]
    fn parses_the_two_priorities_and_names_the_accepted_ones() {
        assert_eq!("realtime".parse(), Ok(RaftPriority::Realtime));
        assert_eq!(" normal ".parse(), Ok(RaftPriority::Normal));
        let e = "high".parse::<RaftPriority>().unwrap_err();
        assert!(
            e.contains("\"high\"") && e.contains("realtime, normal"),
            "{e}"
        );
        for p in [RaftPriority::Realtime, RaftPriority::Normal] {
            assert_eq!(p.to_string().parse(), Ok(p));
        }
    }

    #[test]
    fn normal_leaves_the_thread_alone() {
        let said = std::thread::spawn(|| apply(RaftPriority::Normal))
            .join()
            .unwrap();
        assert!(said.starts_with("normal priority"), "{said}");
    }

    /// Where the test may raise a thread (root, CAP_SYS_NICE or RLIMIT_RTPRIO), the thread runs
    /// SCHED_FIFO and a thread it starts does not; where it may not, the refusal says what
    /// would allow it and the thread keeps the normal policy.
    #[cfg(target_os = "linux")]
    #[test]
    fn realtime_raises_only_the_calling_thread() {
        let (said, own, child) = std::thread::spawn(|| {
            let said = apply(RaftPriority::Realtime);
            let own = current_policy();
            let child = std::thread::spawn(current_policy).join().unwrap();
            (said, own, child)
        })
        .join()
        .unwrap();
        if said.starts_with("real-time") {
            assert_eq!(own, libc::SCHED_FIFO, "{said}");
        } else {
            assert!(
                said.contains("CAP_SYS_NICE") && said.contains("LimitRTPRIO"),
                "{said}"
            );
            assert_eq!(own, libc::SCHED_OTHER, "{said}");
        }
        assert_eq!(
            child,
            libc::SCHED_OTHER,
            "a thread started by the raft thread: {said}"
        );
        assert_eq!(current_policy(), libc::SCHED_OTHER, "the test's own thread");
    }

    /// Lowering a thread lowers that thread only: the thread that started it keeps its
    /// niceness.
    #[cfg(target_os = "linux")]
    #[test]
    fn background_lowers_only_the_calling_thread() {
        // SAFETY: no pointers; who 0 is the calling thread.
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let before = nice();
        let (done, lowered) = std::thread::spawn(move || (make_background(), nice()))
            .join()
            .unwrap();
        assert_eq!(done, Ok(()));
        assert_eq!(lowered, BACKGROUND_NICE);
        assert_eq!(nice(), before, "the test's own thread");
    }
}

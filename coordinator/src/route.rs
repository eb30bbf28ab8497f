//! What a request becomes once its caller may make it (`Route`): a write for the log, or a read
//! of the applied state. The request handlers (`admin_requests.rs`, `agent_requests.rs`,
//! `user_requests.rs`) check who asks and translate; the node (`node.rs`) carries the route
//! out, in the server as in the simulation. Requests that stream, long-poll or answer from a
//! replica's own soft state are the shell's (`requests.rs`).

use allot_common::api::Response;
use allot_common::ClusterPolicy;
use allot_core::machine::{Command, Machine};

/// A read: runs against the applied state once a quorum has confirmed this replica leads at
/// an index it has applied.
pub type Query = Box<dyn FnOnce(&Machine) -> Response + Send>;

pub enum Route {
    /// A write, answered once applied.
    Propose(Command),
    /// Submissions: `count` taken from a user's submission rate first.
    Submits {
        cmd: Command,
        count: usize,
    },
    /// A scheduler config change, answered with the config as `policy` renders it.
    Config {
        cmd: Command,
        policy: ClusterPolicy,
    },
    /// An agent's registration: heard from its node (as a heartbeat), then written.
    Report {
        node: String,
        cmd: Command,
    },
    /// A membership change (`members.rs`): a configuration change in the log, answered once
    /// applied.
    Member(crate::members::MemberChange),
    Read(Query),
    /// A read that can take tens of milliseconds on a large cluster (an explanation, a
    /// history, a usage report, every workload): it runs on a copy of the machine away from
    /// the raft thread (`Io::read_elsewhere`), so commits and heartbeats do not wait for it.
    HeavyRead(Query),
}

impl Route {
    /// Whether it writes to the log (and so may be refused when the disk is full).
    pub fn writes(&self) -> bool {
        !matches!(self, Route::Read(_) | Route::HeavyRead(_))
    }
}

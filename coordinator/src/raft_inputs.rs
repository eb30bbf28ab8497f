//! What goes into the raft thread (`Input`: peer messages, proposals, reads, reports from the
//! threads that work for it) and what the rest of the process sees of it (`Status`). Apart
//! from the raft thread itself (`server`), so that the health and metrics endpoints
//! (`http`) reach it without importing the server.

use std::time::{Duration, Instant};

use allot_common::api::{Body, Response};
use allot_net::tls::Identity;
use raft::eraftpb::Message;
use tokio::sync::oneshot;

use crate::leader::CycleDone;
use crate::raftlog::SnapshotFile;

pub(crate) use crate::route::Query;

pub(crate) enum Input {
    Raft(Message),
    /// An API request the node routes (checks who asks, translates, proposes or reads).
    Request {
        body: Box<Body>,
        who: Identity,
        reply: oneshot::Sender<Response>,
    },
    Read {
        query: Query,
        reply: oneshot::Sender<Response>,
    },
    Unreachable(u64),
    SnapshotStatus(u64, bool),
    /// An agent's heartbeat arrived (counted by the leader only).
    Heartbeat(String),
    /// `/metrics` is being scraped: bring the gauges up to date, then answer. Counting every
    /// team's usage takes the raft thread up to a millisecond with a hundred teams, so it is
    /// done when someone asks, not on a timer on the commit path.
    RefreshMetrics(oneshot::Sender<()>),
    /// A snapshot was encoded off the raft thread (`Replica::take_snapshot_job`), or could not
    /// be.
    SnapshotEncoded(SnapshotDone),
    /// A scheduling cycle computed off the raft thread, and how long it took.
    CycleDone(CycleDone, Duration),
    /// A peer replica said which formats it reads (`connections::format_prober`).
    PeerFormat {
        peer: u64,
        reads: u32,
    },
}

/// What the snapshot thread sends back to the raft thread.
pub(crate) struct SnapshotDone {
    pub(crate) index: u64,
    pub(crate) term: u64,
    pub(crate) data: Result<Vec<u8>, String>,
    /// The file the data was written to, unless that failed (then it goes into redb).
    pub(crate) file: Option<SnapshotFile>,
    /// Encoding it and storing the file (on the snapshot's thread).
    pub(crate) took: [Duration; 2],
}

/// A member as `Status::members` lists it: its id, whether it is a learner, and on the
/// leader the index it has matched and whether it was heard from recently.
pub type MemberStatus = (u64, bool, Option<(u64, bool)>);

/// What the rest of the process can see of the raft thread.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub id: u64,
    pub leader: u64,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    pub is_leader: bool,
    /// When the raft loop last went round (it does at least every tick); `None` until it first
    /// has. `/healthz` fails when this is too old, so a stuck replica is restarted.
    pub beat: Option<Instant>,
    /// The admission limits in force, as last applied.
    pub limits: allot_common::api::AdmissionLimits,
    /// This replica leads a cluster whose format is below what it reads: it asks its peers
    /// theirs (`connections::format_prober`).
    pub wants_formats: bool,
    /// Set while a failed write keeps the replica out of the cluster (`Stop::Disk`): why, and
    /// since when. `/readyz` says so.
    pub disk_wait: Option<String>,
    /// The voters then the learners, each with whether it is a learner and, on the leader,
    /// the index it has matched and whether it was heard from recently (a follower keeps no
    /// progress of its peers).
    pub members: Vec<MemberStatus>,
}

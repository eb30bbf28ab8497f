//! What the request handlers hold of a replica (`Shared`): the way to the raft thread
//! (proposals, linearizable reads, long polls on the applied index), the client budgets and
//! submission rates, the log relay, and what agents said of pods that do not run yet. The raft
//! thread and the sockets are `server.rs`; the handlers are `requests.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_common::api::{ApiError, Body, ErrorKind, Reply, Response};
use allot_core::machine::Machine;
use allot_net::tls::Identity;
use tokio::sync::{mpsc, oneshot};

use crate::raft_inputs::{Input, Query, Status};

/// The longest an agent's sync waits for its assignments to change.
pub(crate) const MAX_SYNC_WAIT_MS: u32 = 30_000;
/// How long a write waits to be applied before the client is told to retry.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) id: u64,
    pub(crate) input: mpsc::UnboundedSender<Input>,
    pub(crate) status: Arc<Mutex<Status>>,
    pub(crate) peers: Arc<std::sync::RwLock<BTreeMap<u64, String>>>,
    /// The applied index, published after every batch of applied entries.
    pub(crate) applied: tokio::sync::watch::Receiver<u64>,
    /// What clients may hold: connections, request bytes in flight.
    pub(crate) budgets: Arc<crate::budget::Budgets>,
    /// Pod logs on their way from agents to readers.
    pub(crate) logs: Arc<crate::logs::LogRelay>,
    /// What pods that do not run yet are doing, as agents said: (workload id, rank) ->
    /// (status, when). Soft state of this replica, not replicated.
    pub(crate) progress: Arc<Mutex<Progress>>,
    /// The web dashboard's login tickets, signed with this replica's key; its HTTP address
    /// once it listens.
    pub(crate) web: Arc<crate::web_session::WebSessions>,
    pub(crate) http: Arc<std::sync::OnceLock<std::net::SocketAddr>>,
    /// The newest log and snapshot format this replica reads (`format.rs`), and the newest
    /// request protocol it answers.
    pub(crate) format_reads: u32,
    pub(crate) protocol: u32,
    /// The cluster's identity when it was restored from a backup (`backup.rs`).
    pub(crate) cluster_id: Option<String>,
}

/// (workload id, rank) -> (status, when the agent said it).
pub(crate) type Progress = BTreeMap<(u64, u32), (String, Instant)>;

/// Pods whose progress a replica holds at most; beyond, the oldest half is forgotten.
const MAX_PROGRESS: usize = 100_000;
/// How long an agent's word on a pod's progress holds without a newer one.
const PROGRESS_TTL: Duration = Duration::from_secs(60);

/// What an agent last said of a pod that has not started, while it holds.
pub(crate) fn progress_of(p: &Mutex<Progress>, workload: u64, rank: u32) -> Option<String> {
    let p = p.lock().ok()?;
    p.get(&(workload, rank))
        .filter(|(_, t)| t.elapsed() < PROGRESS_TTL)
        .map(|(s, _)| s.clone())
}

impl Shared {
    pub(crate) fn record_progress(&self, id: u64, rank: u32, status: String) {
        let Ok(mut p) = self.progress.lock() else {
            return;
        };
        if p.len() >= MAX_PROGRESS {
            let mut times: Vec<Instant> = p.values().map(|(_, t)| *t).collect();
            times.sort();
            let cut = times[times.len() / 2];
            p.retain(|_, (_, t)| *t > cut);
        }
        p.insert((id, rank), (status, Instant::now()));
    }

    /// Fills the status of pods that have not started from what their agents said.
    pub(crate) fn add_progress(&self, w: &mut allot_common::api::WorkloadView) {
        let Ok(p) = self.progress.lock() else {
            return;
        };
        for (rank, pod) in w.pods.iter_mut().enumerate() {
            if pod.started_ms.is_some() || pod.ended_ms.is_some() {
                continue;
            }
            if let Some((s, t)) = p.get(&(w.id, rank as u32)) {
                if t.elapsed() < PROGRESS_TTL {
                    pod.status = Some(s.clone());
                }
            }
        }
    }
}

impl Shared {
    pub(crate) fn status(&self) -> Status {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
    /// `NotLeader` (with the leader's address) unless this replica leads: for what only the
    /// leader holds, such as the agents' log requests.
    pub(crate) fn leader_only(&self) -> Result<(), ApiError> {
        if self.status().is_leader {
            Ok(())
        } else {
            Err(self.with_leader(ApiError::new(
                ErrorKind::NotLeader,
                "this coordinator is not the leader; ask the leader",
            )))
        }
    }
    pub(crate) fn leader_addr(&self, leader: u64) -> Option<String> {
        self.peer_address(leader)
    }
    /// Where replica `id` is reached, as the raft thread last set it from the membership.
    pub(crate) fn peer_address(&self, id: u64) -> Option<String> {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner());
        peers.get(&id).cloned()
    }
    pub(crate) fn with_leader(&self, mut e: ApiError) -> ApiError {
        if e.kind == ErrorKind::NotLeader {
            let l = self.status().leader;
            if l != 0 {
                e.leader = self.leader_addr(l);
            }
        }
        e
    }
    /// Hands an input to the raft thread and waits up to the write timeout for its answer (a
    /// redirect names the leader's address).
    async fn ask(
        &self,
        input: impl FnOnce(oneshot::Sender<Response>) -> Input,
    ) -> Result<Response, Unanswered> {
        let (tx, rx) = oneshot::channel();
        self.input
            .send(input(tx))
            .map_err(|_| Unanswered::ShuttingDown)?;
        match tokio::time::timeout(WRITE_TIMEOUT, rx).await {
            Ok(Ok(r)) => Ok(r.map_err(|e| self.with_leader(e))),
            Ok(Err(_)) => Err(Unanswered::Dropped),
            Err(_) => Err(Unanswered::TimedOut),
        }
    }

    /// `body` from `who`, routed by the node on the raft thread (a write waits to be
    /// applied, a read for a quorum to confirm it).
    pub(crate) async fn request(&self, body: Body, who: &Identity) -> Response {
        let asked = self
            .ask(|reply| Input::Request {
                body: Box::new(body),
                who: who.clone(),
                reply,
            })
            .await;
        match asked {
            Ok(r) => r,
            Err(Unanswered::ShuttingDown) => Err(shutting_down()),
            Err(Unanswered::Dropped) => Err(ApiError::new(
                ErrorKind::Unavailable,
                "leadership changed before the write was applied; it may or may not have been: retry (submits with the same client token are idempotent)",
            )),
            Err(Unanswered::TimedOut) => Err(ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "no answer within {}s (a write may or may not have been applied); retry",
                    WRITE_TIMEOUT.as_secs()
                ),
            )),
        }
    }
    /// Answers `query` at once if its digest differs from `known`, else when it changes, or
    /// after `wait_ms` at the latest. Every answer is a quorum-confirmed read.
    pub(crate) async fn long_poll(
        &self,
        known: u64,
        wait_ms: u32,
        query: impl Fn(&Machine) -> (u64, Reply) + Send + Sync + Clone + 'static,
    ) -> Response {
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(u64::from(wait_ms.min(MAX_SYNC_WAIT_MS)));
        let mut applied = self.applied.clone();
        loop {
            applied.mark_unchanged();
            let q = query.clone();
            let (tx, rx) = oneshot::channel();
            let r = self
                .read(Box::new(move |m: &Machine| {
                    let (d, r) = q(m);
                    let _ = tx.send(d);
                    Ok(r)
                }))
                .await?;
            let digest = rx.await.unwrap_or(0);
            if digest != known || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::select! {
                c = applied.changed() => {
                    if c.is_err() {
                        return Ok(r);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Ok(r),
            }
        }
    }

    pub(crate) async fn read(&self, query: Query) -> Response {
        match self.ask(|reply| Input::Read { query, reply }).await {
            Ok(r) => r,
            Err(Unanswered::ShuttingDown) => Err(shutting_down()),
            Err(_) => Err(ApiError::new(
                ErrorKind::Unavailable,
                "the read could not be confirmed by a quorum; retry",
            )),
        }
    }
}

/// Why an input handed to the raft thread got no answer.
enum Unanswered {
    ShuttingDown,
    /// The raft thread dropped it (a write it forgot, its leadership lost).
    Dropped,
    TimedOut,
}

fn shutting_down() -> ApiError {
    ApiError::new(ErrorKind::Unavailable, "the coordinator is shutting down")
}

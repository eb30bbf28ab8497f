//! Pod logs, relayed by the leader from a node's agent to an authorized reader over the same
//! mutually authenticated QUIC API (no separate, unauthenticated endpoint).
//!
//! A reader's [`Body::Logs`](allot_common::api::Body::Logs) is queued for the node; the node's
//! agent, long-polling with `LogPoll`, picks it up and opens a `LogData` stream to this
//! coordinator; the reader's task then copies that stream's pieces to the reader, one at a
//! time. QUIC's flow control on both streams is the backpressure, so a relay holds at most one
//! piece ([`LOG_CHUNK`]) whatever the log's size, and at most [`MAX_RELAYS`] run at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use allot_common::api::{LogRequest, LOG_CHUNK};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Relays running at once on one coordinator.
pub const MAX_RELAYS: usize = 64;
/// Requests waiting for one node's agent.
pub const MAX_QUEUED_PER_NODE: usize = 16;
/// How long a reader waits for the agent to answer.
pub const AGENT_ANSWER: Duration = Duration::from_secs(10);
/// How long a request handed to a poll may go unanswered before the next poll is offered it
/// again: the poll that took it may have been a dead agent's, still open on this coordinator
/// until its connection times out, while the restarted agent polls beside it.
pub const REOFFER: Duration = Duration::from_secs(2);
/// Largest frame of an agent's log stream (a piece and its framing).
pub const MAX_PIECE_FRAME: usize = LOG_CHUNK + 64;

/// A request the node's agent has not answered yet.
struct Queued {
    req: LogRequest,
    /// When a poll last took it.
    offered: Option<Instant>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Requests not yet answered, by node: a request stays until the agent's stream arrives or
    /// its reader goes.
    queued: BTreeMap<String, Vec<Queued>>,
    /// Readers waiting for their agent's stream, by request id.
    waiting: BTreeMap<u64, oneshot::Sender<quinn::RecvStream>>,
    /// Wakes a node's long poll.
    wake: BTreeMap<String, Arc<Notify>>,
}

pub struct LogRelay {
    inner: Mutex<Inner>,
    relays: Arc<Semaphore>,
}

impl Default for LogRelay {
    fn default() -> Self {
        LogRelay {
            inner: Mutex::new(Inner::default()),
            relays: Arc::new(Semaphore::new(MAX_RELAYS)),
        }
    }
}

/// A reader's place in the relay: the agent's stream arrives on `stream`; dropping it (the
/// reader went) forgets the request.
pub struct Pending {
    relay: Arc<LogRelay>,
    id: u64,
    pub stream: oneshot::Receiver<quinn::RecvStream>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Ok(mut g) = self.relay.inner.lock() {
            g.waiting.remove(&self.id);
            g.forget(self.id);
        }
    }
}

impl Inner {
    /// Drops request `id` from the queues: answered, or its reader went.
    fn forget(&mut self, id: u64) {
        for q in self.queued.values_mut() {
            q.retain(|r| r.req.id != id);
        }
        self.queued.retain(|_, q| !q.is_empty());
    }

    /// Takes `node`'s requests that no poll holds (never offered, or offered [`REOFFER`] ago
    /// and still unanswered), or says when the next one will be free to take again.
    fn offer(&mut self, node: &str, now: Instant) -> Result<Vec<LogRequest>, Option<Instant>> {
        let Some(q) = self.queued.get_mut(node) else {
            return Err(None);
        };
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        for r in q.iter_mut() {
            match r.offered {
                Some(at) if now < at + REOFFER => {
                    next = Some(next.map_or(at + REOFFER, |n| n.min(at + REOFFER)));
                }
                _ => {
                    r.offered = Some(now);
                    out.push(r.req.clone());
                }
            }
        }
        if out.is_empty() {
            Err(next)
        } else {
            Ok(out)
        }
    }
}

fn wake_of(g: &mut Inner, node: &str) -> Arc<Notify> {
    g.wake.entry(node.to_string()).or_default().clone()
}

impl LogRelay {
    /// Queues `req` (its id is assigned here) for `node`'s agent.
    pub fn request(self: &Arc<Self>, node: &str, mut req: LogRequest) -> Result<Pending, String> {
        let permit = self.relays.clone().try_acquire_owned().map_err(|_| {
            format!("this coordinator relays {MAX_RELAYS} logs at once, its limit; try again")
        })?;
        let mut g = self.inner.lock().map_err(|_| "log relay lock poisoned")?;
        let queued = g.queued.get(node).map_or(0, Vec::len);
        if queued >= MAX_QUEUED_PER_NODE {
            return Err(format!(
                "node {node:?} has {MAX_QUEUED_PER_NODE} log requests waiting for its agent"
            ));
        }
        g.next_id += 1;
        req.id = g.next_id;
        let (tx, rx) = oneshot::channel();
        g.waiting.insert(req.id, tx);
        g.queued.entry(node.to_string()).or_default().push(Queued {
            req: req.clone(),
            offered: None,
        });
        // Every poll of the node wakes: a dead agent's poll may still wait beside the live one.
        wake_of(&mut g, node).notify_waiters();
        Ok(Pending {
            relay: self.clone(),
            id: req.id,
            stream: rx,
            _permit: permit,
        })
    }

    /// The requests for `node`, waiting up to `wait` for one. A request stays offered to the
    /// poll that took it for [`REOFFER`]; unanswered by then, the next poll takes it again.
    pub async fn poll(&self, node: &str, wait: Duration) -> Vec<LogRequest> {
        let deadline = Instant::now() + wait;
        loop {
            let Some(notify) = self.inner.lock().ok().map(|mut g| wake_of(&mut g, node)) else {
                return Vec::new();
            };
            // Registered before the queue is read, so a request queued after the read wakes it.
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let offered = match self.inner.lock() {
                Ok(mut g) => g.offer(node, now),
                Err(_) => return Vec::new(),
            };
            let until = match offered {
                Ok(requests) => return requests,
                Err(next) => next.map_or(deadline, |n| n.min(deadline)),
            };
            if now >= deadline {
                return Vec::new();
            }
            let _ = tokio::time::timeout_at(until, notified).await;
        }
    }

    /// Hands the agent's stream for request `id` to its reader; false when no reader waits.
    pub fn deliver(&self, id: u64, stream: quinn::RecvStream) -> bool {
        let tx = self.answered(id);
        tx.is_some_and(|tx| tx.send(stream).is_ok())
    }

    /// The reader waiting for request `id`, which leaves the queues: its agent answered.
    fn answered(&self, id: u64) -> Option<oneshot::Sender<quinn::RecvStream>> {
        let mut g = self.inner.lock().ok()?;
        g.forget(id);
        g.waiting.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> LogRequest {
        LogRequest {
            id: 0,
            workload_id: None,
            workload: "w".into(),
            rank: 0,
            attempt: None,
            follow: false,
        }
    }

    #[tokio::test]
    async fn requests_reach_their_node_and_are_forgotten_with_their_reader() {
        let relay = Arc::new(LogRelay::default());
        let p = relay.request("n1", req()).unwrap();
        assert_eq!(p.id, 1);
        assert!(relay.poll("n2", Duration::from_millis(1)).await.is_empty());
        let got = relay.poll("n1", Duration::from_millis(1)).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, 1);
        // A reader that goes takes its request with it.
        let p2 = relay.request("n1", req()).unwrap();
        drop(p2);
        assert!(relay.poll("n1", Duration::from_millis(1)).await.is_empty());
        drop(p);
        assert!(relay.inner.lock().unwrap().waiting.is_empty());
    }

    #[tokio::test]
    async fn a_long_poll_wakes_when_a_request_comes() {
        let relay = Arc::new(LogRelay::default());
        let r2 = relay.clone();
        let poll = tokio::spawn(async move { r2.poll("n1", Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        let _p = relay.request("n1", req()).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), poll)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got.len(), 1);
    }

    /// A dead agent's poll, still open on the coordinator, took the request; the restarted
    /// agent's poll is offered it again once [`REOFFER`] has passed, and an answered request
    /// is offered to nobody.
    #[tokio::test(start_paused = true)]
    async fn a_request_a_dead_poll_took_is_offered_again() {
        let relay = Arc::new(LogRelay::default());
        let (dead, live) = (relay.clone(), relay.clone());
        let dead = tokio::spawn(async move { dead.poll("n1", Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        let live = tokio::spawn(async move { live.poll("n1", Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        let p = relay.request("n1", req()).unwrap();
        let started = Instant::now();
        let (a, b) = (dead.await.unwrap(), live.await.unwrap());
        // One poll took it at once; the other was offered it again after REOFFER.
        assert_eq!((a.len(), b.len()), (1, 1));
        assert_eq!((a[0].id, b[0].id), (p.id, p.id));
        assert_eq!(started.elapsed(), REOFFER);
        // Answered: gone from the queue, whatever time passes.
        assert!(relay.answered(p.id).is_some());
        tokio::time::advance(REOFFER * 2).await;
        assert!(relay.poll("n1", Duration::from_millis(1)).await.is_empty());
        assert!(relay.answered(p.id).is_none());
    }

    #[test]
    fn queues_and_relays_are_bounded() {
        let relay = Arc::new(LogRelay::default());
        let held: Vec<Pending> = (0..MAX_QUEUED_PER_NODE)
            .map(|_| relay.request("n1", req()).unwrap())
            .collect();
        let e = relay.request("n1", req()).err().unwrap();
        assert!(e.contains("16 log requests waiting"), "{e}");
        let more: Vec<Pending> = (0..MAX_RELAYS - MAX_QUEUED_PER_NODE)
            .map(|i| relay.request(&format!("m{i}"), req()).unwrap())
            .collect();
        let e = relay.request("other", req()).err().unwrap();
        assert!(e.contains("64 logs at once"), "{e}");
        drop((held, more));
        relay.request("other", req()).unwrap();
    }
}

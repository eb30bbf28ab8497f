//! What a client may hold of a coordinator: connections, and request bytes being read.
//!
//! Any certificate holder can open connections and streams and announce frames; without
//! limits, 24 streams each announcing 16 MiB and sending 15 MiB took a coordinator from 41 to
//! 417 MiB (issue 23). The budgets here, with the QUIC flow-control windows in
//! [`allot_net::tls::transport_config`], bound that:
//!
//! - a request frame is at most [`MAX_REQUEST`] bytes (coordinators, which send raft traffic
//!   and forward nothing larger than a frame, keep [`wire::MAX_FRAME`]);
//! - a request must arrive whole within [`REQUEST_DEADLINE`] of its stream opening, or the
//!   stream is dropped with its bytes;
//! - the bytes of requests being read are reserved before they are read: at most
//!   [`IDENTITY_BYTES`] per identity, and for each role its own share of the server's
//!   [`SERVER_BYTES`] ([`NODE_BYTES`], [`USER_BYTES`], [`ADMIN_BYTES`]), so that what nodes
//!   hold, compromised or not, never leaves admins or users waiting; a request that finds no
//!   room waits, within its deadline;
//! - each identity holds at most [`IDENTITY_CONNECTIONS`] connections, the server
//!   [`SERVER_CONNECTIONS`]; one more is closed at once with the limit in its reason;
//! - everything is released when the request is decoded or its connection goes, and the
//!   freed memory is given back to the system a few seconds after connections close
//!   ([`release_memory`]: the allocator would otherwise keep QUIC's many small buffers).
//!
//! Coordinators (raft peers) are exempt: their certificates are the cluster's own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use allot_net::tls::Identity;
use allot_net::wire;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest request a client may send. A workload with 18 pod sets, its command and a long
/// environment is a few KiB; Kubernetes caps a whole object at 1.5 MiB.
pub const MAX_REQUEST: usize = 4 << 20;
/// How long a request may take to arrive, from its stream opening to its last byte.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Request bytes one identity may have in flight across its connections.
pub const IDENTITY_BYTES: usize = 16 << 20;
/// Request bytes the whole server may have in flight: the roles' shares below.
pub const SERVER_BYTES: usize = NODE_BYTES + USER_BYTES + ADMIN_BYTES;
/// Request bytes all nodes' agents together may have in flight.
pub const NODE_BYTES: usize = 96 << 20;
/// Request bytes all team users together may have in flight.
pub const USER_BYTES: usize = 96 << 20;
/// Request bytes all admins together may have in flight (the dashboard's reads included).
pub const ADMIN_BYTES: usize = 64 << 20;
/// Connections one identity may hold (`allot bench` uses 9 at once; an agent 1 or 2).
pub const IDENTITY_CONNECTIONS: usize = 32;
/// Connections the server holds in all.
pub const SERVER_CONNECTIONS: usize = 4096;

/// Semaphores count KiB, so a permit count stays far inside `u32`.
const UNIT: usize = 1024;

fn units(bytes: usize) -> u32 {
    // MAX_FRAME / UNIT fits a u32 many times over.
    bytes.div_ceil(UNIT) as u32
}

struct PerIdentity {
    connections: usize,
    bytes: Arc<Semaphore>,
}

/// The server's budgets; one per coordinator process.
pub struct Budgets {
    /// The share of request bytes of nodes, users and admins.
    roles: [Arc<Semaphore>; 3],
    state: Mutex<State>,
    /// A client connection closed since memory was last given back.
    closed: AtomicBool,
}

#[derive(Default)]
struct State {
    connections: usize,
    /// Identities holding a connection now (entries go with their last connection).
    by_identity: BTreeMap<String, PerIdentity>,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            roles: [NODE_BYTES, USER_BYTES, ADMIN_BYTES]
                .map(|b| Arc::new(Semaphore::new(units(b) as usize))),
            state: Mutex::new(State::default()),
            closed: AtomicBool::new(false),
        }
    }
}

/// One admitted connection; dropping it gives the connection back.
pub struct Connection {
    budgets: Arc<Budgets>,
    /// `None` for coordinators: no limits.
    key: Option<String>,
    bytes: Option<Arc<Semaphore>>,
    /// Its role's share of the server's request bytes.
    role: Option<Arc<Semaphore>>,
}

/// The reservation for one request's bytes, held while it is read and decoded.
pub struct Reserved {
    _identity: Option<OwnedSemaphorePermit>,
    _server: Option<OwnedSemaphorePermit>,
}

impl Budgets {
    /// Admits a connection from `who`, or says which limit it would pass.
    pub fn connect(self: &Arc<Self>, who: &Identity) -> Result<Connection, String> {
        if matches!(who, Identity::Coordinator { .. }) {
            return Ok(Connection {
                budgets: self.clone(),
                key: None,
                bytes: None,
                role: None,
            });
        }
        let role = match who {
            Identity::Node { .. } => &self.roles[0],
            Identity::User { .. } => &self.roles[1],
            Identity::Admin { .. } | Identity::Coordinator { .. } => &self.roles[2],
        };
        let key = who.to_string();
        let mut st = self.state.lock().map_err(|_| "budget lock poisoned")?;
        if st.connections >= SERVER_CONNECTIONS {
            return Err(format!(
                "the coordinator holds {SERVER_CONNECTIONS} client connections, its limit"
            ));
        }
        let entry = st
            .by_identity
            .entry(key.clone())
            .or_insert_with(|| PerIdentity {
                connections: 0,
                bytes: Arc::new(Semaphore::new(units(IDENTITY_BYTES) as usize)),
            });
        if entry.connections >= IDENTITY_CONNECTIONS {
            return Err(format!(
                "{who} holds {IDENTITY_CONNECTIONS} connections, the limit per certificate"
            ));
        }
        entry.connections += 1;
        let bytes = entry.bytes.clone();
        st.connections += 1;
        Ok(Connection {
            budgets: self.clone(),
            key: Some(key),
            bytes: Some(bytes),
            role: Some(role.clone()),
        })
    }

    /// Connections held now, in all and by `who` (for tests and metrics).
    pub fn connections(&self, who: &Identity) -> (usize, usize) {
        let Ok(st) = self.state.lock() else {
            return (0, 0);
        };
        let mine = st
            .by_identity
            .get(&who.to_string())
            .map_or(0, |e| e.connections);
        (st.connections, mine)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let Some(key) = &self.key else { return };
        self.budgets.closed.store(true, Ordering::Relaxed);
        if let Ok(mut st) = self.budgets.state.lock() {
            st.connections = st.connections.saturating_sub(1);
            if let Some(e) = st.by_identity.get_mut(key) {
                e.connections = e.connections.saturating_sub(1);
                if e.connections == 0 {
                    st.by_identity.remove(key);
                }
            }
        }
    }
}

/// How often [`release_memory`] looks whether connections closed.
const RELEASE_EVERY: Duration = Duration::from_secs(5);

/// Runs for the server's life: every few seconds, if a client connection closed meanwhile,
/// hands the allocator's free pages back to the system (glibc keeps them otherwise, so a
/// burst of connections would leave the coordinator's memory at its peak for good).
pub async fn release_memory(budgets: Arc<Budgets>) {
    loop {
        tokio::time::sleep(RELEASE_EVERY).await;
        if budgets.closed.swap(false, Ordering::Relaxed) {
            trim();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only returns free memory to the kernel; it touches no live
    // allocation and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

impl Connection {
    /// The largest request this connection may send.
    pub fn max_request(&self) -> usize {
        if self.key.is_some() {
            MAX_REQUEST
        } else {
            wire::MAX_FRAME
        }
    }

    /// Reserves `len` bytes from the identity's and its role's budgets, waiting for room.
    async fn reserve(&self, len: usize) -> Result<Reserved, String> {
        let (Some(mine), Some(role)) = (&self.bytes, &self.role) else {
            return Ok(Reserved {
                _identity: None,
                _server: None,
            });
        };
        let n = units(len);
        let closed = |_| "the coordinator is shutting down".to_string();
        let identity = mine.clone().acquire_many_owned(n).await.map_err(closed)?;
        let server = role.clone().acquire_many_owned(n).await.map_err(closed)?;
        Ok(Reserved {
            _identity: Some(identity),
            _server: Some(server),
        })
    }

    /// Reads one request frame's payload from `r` under this connection's budgets: the length
    /// is checked, the bytes reserved, then read into a buffer of exactly that size. The whole
    /// read must end within [`REQUEST_DEADLINE`]. `Ok(None)`: the stream ended before a frame.
    pub async fn read_request<R: AsyncRead + Unpin>(
        &self,
        r: &mut R,
    ) -> Result<Option<(Vec<u8>, Reserved)>, String> {
        tokio::time::timeout(REQUEST_DEADLINE, self.read_request_now(r))
            .await
            .map_err(|_| {
                format!(
                    "the request did not arrive whole within {} s",
                    REQUEST_DEADLINE.as_secs()
                )
            })?
    }

    async fn read_request_now<R: AsyncRead + Unpin>(
        &self,
        r: &mut R,
    ) -> Result<Option<(Vec<u8>, Reserved)>, String> {
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < len.len() {
            let n = r
                .read(&mut len[got..])
                .await
                .map_err(|e| format!("reading the request: {e}"))?;
            if n == 0 {
                return if got == 0 {
                    Ok(None)
                } else {
                    Err(format!("the stream ended after {got} of 4 length bytes"))
                };
            }
            got += n;
        }
        let len = u32::from_be_bytes(len) as usize;
        let max = self.max_request();
        if len > max {
            return Err(format!(
                "a request of {len} bytes is over the limit of {max} bytes per request"
            ));
        }
        let reserved = self.reserve(len).await?;
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload)
            .await
            .map_err(|e| format!("reading the request's {len} bytes: {e}"))?;
        Ok(Some((payload, reserved)))
    }
}

/// Each user certificate's submissions: a token bucket per certificate, refilled at
/// `submits_per_second` up to `submit_burst`. Held by the leader only (a new leader starts
/// everyone with a full bucket). Buckets that are full again are dropped, so the map holds
/// only certificates that submitted within the last `burst / rate` seconds.
#[derive(Default)]
pub struct SubmitRates {
    /// Per certificate: the tokens left, and when (milliseconds on the node's clock).
    buckets: BTreeMap<String, (f64, u64)>,
}

impl SubmitRates {
    /// Takes `n` submissions from `who`'s bucket at `now`, or says how long until they fit.
    pub fn take(
        &mut self,
        who: &str,
        n: usize,
        limits: &allot_common::api::AdmissionLimits,
        now: u64,
    ) -> Result<(), String> {
        let since = |at: u64| now.saturating_sub(at) as f64 / 1000.0;
        let rate = f64::from(limits.submits_per_second.max(1));
        let burst = f64::from(limits.submit_burst.max(1));
        // Forget buckets that have refilled: they would start full anyway.
        self.buckets
            .retain(|_, (level, at)| *level + since(*at) * rate < burst);
        let (level, at) = self.buckets.get(who).copied().unwrap_or((burst, now));
        let level = (level + since(at) * rate).min(burst);
        let want = n as f64;
        if want > burst {
            return Err(format!(
                "{n} submissions at once are more than the burst of {} (submit_burst); send \
                 them in smaller batches",
                limits.submit_burst
            ));
        }
        if want > level {
            let wait = (want - level) / rate;
            return Err(format!(
                "submitting faster than {} workloads a second (submits_per_second, with bursts \
                 of {}); {n} more fit in {wait:.1} s",
                limits.submits_per_second, limits.submit_burst
            ));
        }
        self.buckets.insert(who.to_string(), (level - want, now));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(team: &str) -> Identity {
        Identity::User { team: team.into() }
    }

    #[test]
    fn submissions_follow_the_rate_with_bursts() {
        let limits = allot_common::api::AdmissionLimits {
            max_pending_per_team: 10,
            submits_per_second: 10,
            submit_burst: 100,
        };
        let mut r = SubmitRates::default();
        let t0 = 1_000_000u64;
        r.take("a", 60, &limits, t0).unwrap();
        r.take("a", 40, &limits, t0).unwrap();
        let e = r.take("a", 5, &limits, t0).unwrap_err();
        assert!(e.contains("faster than 10 workloads a second"), "{e}");
        assert!(e.contains("5 more fit in 0.5 s"), "{e}");
        // Another certificate has its own bucket.
        r.take("b", 100, &limits, t0).unwrap();
        // Half a second later, 5 fit again, and no more.
        let t1 = t0 + 500;
        r.take("a", 5, &limits, t1).unwrap();
        assert!(r.take("a", 1, &limits, t1).is_err());
        let e = r.take("c", 101, &limits, t1).unwrap_err();
        assert!(e.contains("more than the burst of 100"), "{e}");
        // Once full again, buckets are forgotten.
        r.take("c", 1, &limits, t1 + 60_000).unwrap();
        assert_eq!(r.buckets.len(), 1, "only c's, just used");
    }

    #[test]
    fn connections_are_counted_per_identity_and_given_back() {
        let b = Arc::new(Budgets::default());
        let a = user("team-a");
        let held: Vec<Connection> = (0..IDENTITY_CONNECTIONS)
            .map(|_| b.connect(&a).unwrap())
            .collect();
        let e = b.connect(&a).err().unwrap();
        assert!(
            e.contains("32 connections, the limit per certificate"),
            "{e}"
        );
        assert!(e.contains("team-a"), "{e}");
        // Another identity is not affected, nor is a coordinator.
        let other = b.connect(&user("team-b")).unwrap();
        let _peer = b.connect(&Identity::Coordinator { id: 2 }).unwrap();
        assert_eq!(b.connections(&a), (IDENTITY_CONNECTIONS + 1, 32));
        drop(held);
        drop(other);
        assert_eq!(b.connections(&a), (0, 0));
        assert!(b.state.lock().unwrap().by_identity.is_empty());
        b.connect(&a).unwrap();
    }

    #[tokio::test]
    async fn a_request_over_the_limit_is_refused_before_it_is_read() {
        let b = Arc::new(Budgets::default());
        let c = b.connect(&user("team-a")).unwrap();
        let mut input: &[u8] = &((MAX_REQUEST + 1) as u32).to_be_bytes();
        let e = c.read_request(&mut input).await.err().unwrap();
        assert_eq!(
            e,
            format!(
                "a request of {} bytes is over the limit of {MAX_REQUEST} bytes per request",
                MAX_REQUEST + 1
            )
        );
        let mut frame = 3u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"abc");
        let (payload, _) = c.read_request(&mut &frame[..]).await.unwrap().unwrap();
        assert_eq!(payload, b"abc");
        assert!(c.read_request(&mut &[][..]).await.unwrap().is_none());
        let e = c.read_request(&mut &[0u8, 0][..]).await.err().unwrap();
        assert!(e.contains("2 of 4 length bytes"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn half_sent_requests_hold_the_budget_until_their_deadline() {
        let b = Arc::new(Budgets::default());
        let c = Arc::new(b.connect(&user("team-a")).unwrap());
        // Four streams announce 4 MiB each and never send it: the identity's 16 MiB is held.
        let mut held = Vec::new();
        for _ in 0..4 {
            let (mut tx, mut rx) = tokio::io::duplex(64);
            let c = c.clone();
            held.push(tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                tx.write_all(&(MAX_REQUEST as u32).to_be_bytes())
                    .await
                    .unwrap();
                let r = c.read_request(&mut rx).await;
                drop(tx);
                r.map(|_| ())
            }));
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // Five seconds on, a fifth request waits for room: it is not read while the four hold
        // the identity's budget, and goes through once their deadline drops them.
        tokio::time::advance(Duration::from_secs(5)).await;
        let c5 = c.clone();
        let fifth = tokio::spawn(async move {
            let mut frame = 2u32.to_be_bytes().to_vec();
            frame.extend_from_slice(b"ok");
            c5.read_request(&mut &frame[..])
                .await
                .map(|r| r.map(|(p, _)| p))
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!fifth.is_finished(), "read past the identity's budget");
        for h in held {
            let e = h.await.unwrap().err().unwrap();
            assert_eq!(e, "the request did not arrive whole within 10 s");
        }
        assert_eq!(fifth.await.unwrap(), Ok(Some(b"ok".to_vec())));
    }
}

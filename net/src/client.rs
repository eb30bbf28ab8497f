//! A client's connection to a coordinator cluster: QUIC with the user's certificate, one
//! request per stream, redirects to the leader, retries while an election is under way.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::tls::{self, TlsFiles};
use crate::wire;
use allot_common::api::{ApiError, Body, ErrorKind, Reply, Request, Response};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Setup(String),
    #[error("coordinator {addr}: {what}")]
    Transport { addr: String, what: String },
    /// A TLS refusal, which retrying cannot cure: it fails the call at once.
    #[error("coordinator {addr}: {what}")]
    Auth { addr: String, what: String },
    /// The coordinator closed the connection over a limit (connections per certificate, or
    /// in all): said at once, not retried until the call's time runs out.
    #[error("coordinator {addr} refused the connection: {what}")]
    Refused { addr: String, what: String },
    #[error("{last}; no coordinator leader answered within {secs}s (tried {tried})")]
    NoLeader {
        last: String,
        secs: u64,
        tried: String,
    },
}

fn transport(addr: &str, what: impl std::fmt::Display) -> ClientError {
    ClientError::Transport {
        addr: addr.to_string(),
        what: what.to_string(),
    }
}

/// Whether `e` is a TLS handshake failure (a QUIC crypto error: `0x100` plus the TLS alert).
fn is_tls_refusal(e: &quinn::ConnectionError) -> bool {
    let code = match e {
        quinn::ConnectionError::TransportError(t) => u64::from(t.code),
        quinn::ConnectionError::ConnectionClosed(c) => u64::from(c.error_code),
        _ => return false,
    };
    code & !0xff == 0x100
}

/// Whether `e` is a coordinator closing the connection over one of its limits, and if so why.
fn over_limit(e: &quinn::ConnectionError) -> Option<String> {
    match e {
        quinn::ConnectionError::ApplicationClosed(a)
            if a.error_code == quinn::VarInt::from_u32(wire::CLOSE_OVER_LIMIT) =>
        {
            Some(String::from_utf8_lossy(&a.reason).into_owned())
        }
        _ => None,
    }
}

/// The error for a TLS refusal at `addr`: which side refused which certificate, and why.
fn auth_error(addr: &str, e: &quinn::ConnectionError, cert: &str, ca: &str) -> ClientError {
    let what = match e {
        // The peer closed the handshake: it refused our certificate.
        quinn::ConnectionError::ConnectionClosed(_) => format!(
            "refused {cert}: {e} (an expired or not yet valid certificate, one from another \
             cluster's CA, or the wrong role; issue a new one with `allot certs issue`, or pick \
             another with --as/--certs)"
        ),
        // We refused the coordinator's certificate.
        _ => format!(
            "its certificate is not trusted by {ca}: {e} (is it this cluster's CA? --certs \
             chooses the directory)"
        ),
    };
    ClientError::Auth {
        addr: addr.to_string(),
        what,
    }
}

pub struct Client {
    endpoint: quinn::Endpoint,
    /// `certificate "user-team-a" (certs/user-team-a.pem)`, for errors.
    cert: String,
    /// The CA file, for errors.
    ca: String,
    config: quinn::ClientConfig,
    addrs: Vec<String>,
    /// The address that last answered (the leader, for a write), tried first.
    conn: Option<(String, quinn::Connection)>,
    /// What the last race's dials came to, by address: a connection not used yet, still
    /// dialling, or failed.
    spare: Arc<Mutex<BTreeMap<String, Dial>>>,
}

enum Dial {
    Dialling,
    Up(quinn::Connection),
    Failed,
}

/// How long a connection attempt may take. A replica that answers does so in milliseconds
/// (one round trip and a TLS handshake); a dead one never does, and every second spent on it
/// is a second of failover the user waits through.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How long [`Client::close`] gives the close frames to leave.
const CLOSE_SEND: Duration = Duration::from_millis(1);

/// The error when no coordinator address is given, with the ways to give one.
const NO_ADDRESS: &str =
    "no coordinator address given: pass --coordinators HOST:PORT[,HOST:PORT...], \
     set ALLOT_COORDINATORS to the same list, or, for `allot agent`, list them under the \
     coordinators: key of its YAML config (--config)";

/// How long the client keeps retrying while no leader is known.
const RETRY_FOR: Duration = Duration::from_secs(15);

impl Client {
    /// A client for the coordinators at `addrs`, presenting certificate `stem` from `dir`.
    pub fn new(addrs: Vec<String>, dir: &Path, stem: &str) -> Result<Self, ClientError> {
        if addrs.is_empty() {
            return Err(ClientError::Setup(NO_ADDRESS.into()));
        }
        let files = TlsFiles::in_dir(dir, stem);
        let config = tls::client_config(&files).map_err(|e| {
            ClientError::Setup(format!(
                "loading certificate {stem:?} from {}: {e} (choose one with --as, --certs or ALLOT_AS/ALLOT_CERTS)",
                dir.display()
            ))
        })?;
        let bind = SocketAddr::from(([0, 0, 0, 0], 0));
        let endpoint = quinn::Endpoint::client(bind)
            .map_err(|e| ClientError::Setup(format!("opening a UDP socket: {e}")))?;
        Ok(Client {
            endpoint,
            cert: format!("certificate {stem:?} ({})", files.cert.display()),
            ca: files.ca.display().to_string(),
            config,
            addrs,
            conn: None,
            spare: Arc::new(Mutex::new(BTreeMap::new())),
        })
    }

    /// Tries `addr` first on the next request (the leader a previous run found).
    pub fn prefer(&mut self, addr: &str) {
        if let Some(i) = self.addrs.iter().position(|a| a == addr) {
            let a = self.addrs.remove(i);
            self.addrs.insert(0, a);
        }
    }

    /// The coordinator addresses, in the order they are tried.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The address that answered the last request.
    pub fn answered_by(&self) -> Option<&str> {
        self.conn.as_ref().map(|(a, _)| a.as_str())
    }

    async fn connect(&mut self, addr: &str) -> Result<quinn::Connection, ClientError> {
        if let Some((a, c)) = &self.conn {
            if a == addr && c.close_reason().is_none() {
                return Ok(c.clone());
            }
        }
        let spare = self
            .spare
            .lock()
            .ok()
            .and_then(|mut s| match s.remove(addr) {
                Some(Dial::Up(c)) => Some(c),
                _ => None,
            });
        let conn = match spare.filter(|c| c.close_reason().is_none()) {
            Some(c) => c,
            None => dial(&self.endpoint, &self.config, addr, &self.cert, &self.ca).await?,
        };
        self.conn = Some((addr.to_string(), conn.clone()));
        Ok(conn)
    }

    /// Dials every address in `addrs` at once and returns the first that connects; the others
    /// that connect later are kept for the redirect that usually follows (a follower names the
    /// leader). Fails when none connects within `CONNECT_TIMEOUT`.
    async fn race(&mut self, addrs: &[String]) -> Result<String, ClientError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        if let Ok(mut s) = self.spare.lock() {
            s.clear();
            for a in addrs {
                s.insert(a.clone(), Dial::Dialling);
            }
        }
        for a in addrs {
            let (ep, cfg, a, tx, spare) = (
                self.endpoint.clone(),
                self.config.clone(),
                a.clone(),
                tx.clone(),
                self.spare.clone(),
            );
            let (cert, ca) = (self.cert.clone(), self.ca.clone());
            tokio::spawn(async move {
                let r = dial(&ep, &cfg, &a, &cert, &ca).await;
                if let Ok(mut s) = spare.lock() {
                    // Unless a later race has started over.
                    if let Some(d) = s.get_mut(&a).filter(|d| matches!(d, Dial::Dialling)) {
                        *d = match &r {
                            Ok(c) => Dial::Up(c.clone()),
                            Err(_) => Dial::Failed,
                        };
                    }
                }
                let _ = tx.send((a, r.map(|_| ())));
            });
        }
        drop(tx);
        let mut errors = Vec::new();
        let mut refusal = None;
        while let Some((a, r)) = rx.recv().await {
            match r {
                Ok(()) => return Ok(a),
                Err(e @ ClientError::Auth { .. }) => refusal = refusal.or(Some(e)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        // A refused certificate says more than the replicas that did not answer.
        Err(refusal.unwrap_or_else(|| ClientError::Setup(errors.join("; "))))
    }

    /// Sends `body` on a new stream to `addr` and reads the first frame of the answer; the
    /// stream stays open for answers of many frames.
    async fn request(
        &mut self,
        addr: &str,
        body: &Body,
    ) -> Result<(Response, quinn::RecvStream), ClientError> {
        let (mut send, mut recv, failed) = self.open(addr, body).await?;
        send.finish().map_err(|e| failed(&e))?;
        let resp: Option<Response> = wire::read_frame(&mut recv).await.map_err(|e| failed(&e))?;
        let resp = resp.ok_or_else(|| failed(&"closed the stream without answering"))?;
        Ok((resp, recv))
    }

    /// Opens a stream to `addr` and writes `body` as its first frame; with the stream comes
    /// how to name a failure on it.
    async fn open(
        &mut self,
        addr: &str,
        body: &Body,
    ) -> Result<
        (
            quinn::SendStream,
            quinn::RecvStream,
            impl Fn(&dyn std::fmt::Display) -> ClientError,
        ),
        ClientError,
    > {
        let conn = self.connect(addr).await?;
        // TLS 1.3: the client's handshake ends before the coordinator has checked its
        // certificate, so a refusal shows up as the connection closing under the request.
        let (cert, ca, at) = (self.cert.clone(), self.ca.clone(), addr.to_string());
        let c = conn.clone();
        let failed = move |e: &dyn std::fmt::Display| {
            let reason = c.close_reason();
            match (&reason, reason.as_ref().and_then(over_limit)) {
                (Some(r), _) if is_tls_refusal(r) => auth_error(&at, r, &cert, &ca),
                (_, Some(what)) => ClientError::Refused {
                    addr: at.clone(),
                    what,
                },
                _ => transport(&at, e),
            }
        };
        let (mut send, recv) = conn.open_bi().await.map_err(|e| failed(&e))?;
        let req = Request {
            version: wire::protocol_of(body),
            body: body.clone(),
        };
        let bytes = wire::encode_request(&req).map_err(|e| failed(&e))?;
        wire::write_frame_bytes(&mut send, &bytes)
            .await
            .map_err(|e| failed(&e))?;
        Ok((send, recv, failed))
    }

    async fn once(&mut self, addr: &str, body: &Body) -> Result<Response, ClientError> {
        self.request(addr, body).await.map(|(r, _)| r)
    }

    /// Closes every connection and waits, briefly, for the closes to be sent, so that the
    /// coordinators free what they hold for this client at once. A one-shot command calls it
    /// before it exits: a connection left open counts against its certificate's limit until
    /// the idle timeout, and a loop of quick commands would otherwise run into that limit.
    pub async fn close(&mut self) {
        if let Some((_, c)) = self.conn.take() {
            c.close(0u32.into(), b"done");
        }
        if let Ok(mut s) = self.spare.lock() {
            for (_, d) in std::mem::take(&mut *s) {
                if let Dial::Up(c) = d {
                    c.close(0u32.into(), b"done");
                }
            }
        }
        self.endpoint.close(0u32.into(), b"done");
        // The close frames go out as soon as the connections' drivers run (a UDP send, local
        // to this machine whatever the network); waiting for the endpoint to be idle would
        // add the drain period (three probe timeouts, tens of ms), which the coordinator does
        // not need.
        let _ = tokio::time::timeout(CLOSE_SEND, self.endpoint.wait_idle()).await;
    }

    /// Forgets the current connection (after a request timed out on it): the next request
    /// connects afresh.
    pub fn reset(&mut self) {
        if let Some((_, c)) = self.conn.take() {
            c.close(0u32.into(), b"request timed out");
        }
    }

    /// Sends `body` on a stream of its own to the leader and returns the first frame of the
    /// answer with the stream, for answers of many frames (`allot logs`). Follows the
    /// leader's address when a follower names it.
    pub async fn stream(
        &mut self,
        body: Body,
    ) -> Result<(Response, quinn::RecvStream), ClientError> {
        if self.conn.is_none() {
            // Find a live coordinator the usual way (dials all at once); Hello is always
            // answered, so only a transport failure is an error here.
            let _ = self.call(Body::Hello).await?;
        }
        let mut tries = 0;
        loop {
            let addr = self
                .answered_by()
                .map(str::to_string)
                .or_else(|| self.addrs.first().cloned())
                .ok_or_else(|| ClientError::Setup(NO_ADDRESS.into()))?;
            let (first, recv) = self.request(&addr, &body).await?;
            match &first {
                Err(e) if e.kind == ErrorKind::NotLeader && tries < 5 => {
                    tries += 1;
                    match e.leader.clone() {
                        Some(l) => {
                            self.connect(&l).await?;
                        }
                        None => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
                _ => return Ok((first, recv)),
            }
        }
    }

    /// Opens a stream to exactly `addr` and sends `body` as its first frame; the caller writes
    /// the rest (an agent's log pieces).
    pub async fn send_stream(
        &mut self,
        addr: &str,
        body: &Body,
    ) -> Result<quinn::SendStream, ClientError> {
        let (send, _recv, _) = self.open(addr, body).await?;
        Ok(send)
    }

    /// Sends one request to exactly `addr`, without redirects or retries.
    pub async fn call_one(
        &mut self,
        addr: &str,
        body: Body,
    ) -> Result<Result<Reply, ApiError>, ClientError> {
        self.once(addr, &body).await
    }

    /// Sends one request to the cluster: follows leader hints, tries every address, and
    /// retries while an election is under way. API errors come back as `Ok(Err(_))`.
    ///
    /// The connection that answered last is used again. Without one, or once it fails, every
    /// address not known to be down is dialled at once and the first to connect is asked; a hint that
    /// names an address that just failed (followers name a killed leader until they elect
    /// another) is not followed. So a dead replica costs at most one `CONNECT_TIMEOUT`, not one
    /// per try.
    pub async fn call(&mut self, body: Body) -> Result<Result<Reply, ApiError>, ClientError> {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        // A live connection is used again; without one, every address is dialled at once
        // (the last known leader first), so a dead one costs nothing when another answers.
        let mut next: Option<String> = self
            .conn
            .as_ref()
            .filter(|(_, c)| c.close_reason().is_none())
            .map(|(a, _)| a.clone());
        // Addresses that failed in this call, and when.
        let mut down: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        let mut last_err = String::new();
        loop {
            let now = tokio::time::Instant::now();
            // An address that failed is tried again after a second (it may have restarted).
            down.retain(|_, t| now.duration_since(*t) < Duration::from_secs(1));
            let addr = match next.take().filter(|a| !down.contains_key(a)) {
                Some(a) => Some(a),
                None => {
                    let up: Vec<String> = self
                        .addrs
                        .iter()
                        .filter(|a| !down.contains_key(*a))
                        .cloned()
                        .collect();
                    if up.is_empty() {
                        None
                    } else {
                        match self.race(&up).await {
                            Ok(a) => Some(a),
                            Err(e @ ClientError::Auth { .. }) => return Err(e),
                            Err(e) => {
                                last_err = e.to_string();
                                for a in up {
                                    down.insert(a, now);
                                }
                                None
                            }
                        }
                    }
                }
            };
            if let Some(addr) = addr {
                match self.once(&addr, &body).await {
                    Ok(Err(e)) if e.kind == ErrorKind::NotLeader => {
                        next = self.follow(&addr, e.leader.clone(), &mut down).await;
                        last_err = e.message;
                    }
                    Ok(Err(e)) if e.kind == ErrorKind::Unavailable && retry_safe(&body) => {
                        last_err = e.message;
                    }
                    Ok(r) => return Ok(r),
                    Err(e @ (ClientError::Auth { .. } | ClientError::Refused { .. })) => {
                        self.conn = None;
                        return Err(e);
                    }
                    Err(e) => {
                        self.conn = None;
                        down.insert(addr, tokio::time::Instant::now());
                        last_err = e.to_string();
                    }
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ClientError::NoLeader {
                    last: last_err,
                    secs: RETRY_FOR.as_secs(),
                    tried: self.addrs.join(", "),
                });
            }
            if next.is_none() {
                // No leader named (an election is under way): a short pause before asking
                // again.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Client {
    /// Where to go after `asked` named `hint` as the leader. Followers go on naming a killed
    /// leader until they elect another, so a hint whose dial (from the last race) failed or is
    /// still under way is not waited on for a whole `CONNECT_TIMEOUT`: after a short pause the
    /// follower is asked again, and by then it may name the new leader.
    async fn follow(
        &mut self,
        asked: &str,
        hint: Option<String>,
        down: &mut BTreeMap<String, tokio::time::Instant>,
    ) -> Option<String> {
        let hint = hint?;
        let pause = Duration::from_millis(50);
        let t = tokio::time::Instant::now();
        loop {
            let (dialling, failed) =
                self.spare
                    .lock()
                    .ok()
                    .map_or((false, false), |s| match s.get(&hint) {
                        Some(Dial::Dialling) => (true, false),
                        Some(Dial::Failed) => (false, true),
                        _ => (false, false),
                    });
            if failed {
                down.insert(hint, t);
                tokio::time::sleep(pause).await;
                return Some(asked.to_string());
            }
            // Connected, or not dialled in this race: go there.
            if !dialling {
                return Some(hint);
            }
            if t.elapsed() >= pause {
                return Some(asked.to_string());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Connects to `addr`, within `CONNECT_TIMEOUT`.
async fn dial(
    endpoint: &quinn::Endpoint,
    config: &quinn::ClientConfig,
    addr: &str,
    cert: &str,
    ca: &str,
) -> Result<quinn::Connection, ClientError> {
    let sock = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| transport(addr, format!("resolving: {e}")))?
        .next()
        .ok_or_else(|| transport(addr, "resolves to no address"))?;
    let connecting = endpoint
        .connect_with(config.clone(), sock, tls::SERVER_NAME)
        .map_err(|e| transport(addr, e))?;
    tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| {
            transport(
                addr,
                format!("no answer within {} ms", CONNECT_TIMEOUT.as_millis()),
            )
        })?
        .map_err(|e| {
            if is_tls_refusal(&e) {
                auth_error(addr, &e, cert, ca)
            } else {
                transport(addr, e)
            }
        })
}

/// Whether a request may be sent again after an ambiguous failure.
fn retry_safe(b: &Body) -> bool {
    match b {
        Body::Submit(s) => s.client_token.is_some(),
        Body::SubmitBatch(v) => v.iter().all(|s| s.client_token.is_some()),
        Body::SubmitArray { input, .. } => input.client_token.is_some(),
        Body::CancelMatching { dry_run, .. } => *dry_run,
        Body::CreateComputeQuota(_)
        | Body::UpdateComputeQuota { .. }
        | Body::DeleteComputeQuota { .. }
        | Body::CreateSchedulerConfig { .. }
        | Body::UpdateSchedulerConfig { .. }
        | Body::Cancel { .. } => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_address_says_how_to_give_one() {
        let Err(e) = Client::new(Vec::new(), Path::new("certs"), "admin-admin") else {
            panic!("a client without coordinator addresses was created");
        };
        let e = e.to_string();
        for how in ["--coordinators", "ALLOT_COORDINATORS", "coordinators:"] {
            assert!(e.contains(how), "{e:?} does not mention {how}");
        }
    }
}

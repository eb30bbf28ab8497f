//! A client's connection to a coordinator cluster: QUIC with the user's certificate, one
//! request per stream, redirects to the leader, retries while an election is under way.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::api::{ApiError, Body, ErrorKind, Reply, Request};
use crate::tls::{self, TlsFiles};
use crate::wire;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Setup(String),
    #[error("coordinator {addr}: {what}")]
    Transport { addr: String, what: String },
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

pub struct Client {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    addrs: Vec<String>,
    conn: Option<(String, quinn::Connection)>,
}

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
            config,
            addrs,
            conn: None,
        })
    }

    async fn connect(&mut self, addr: &str) -> Result<quinn::Connection, ClientError> {
        if let Some((a, c)) = &self.conn {
            if a == addr && c.close_reason().is_none() {
                return Ok(c.clone());
            }
        }
        let sock = tokio::net::lookup_host(addr)
            .await
            .map_err(|e| transport(addr, format!("resolving: {e}")))?
            .next()
            .ok_or_else(|| transport(addr, "resolves to no address"))?;
        let connecting = self
            .endpoint
            .connect_with(self.config.clone(), sock, tls::SERVER_NAME)
            .map_err(|e| transport(addr, e))?;
        let conn = tokio::time::timeout(Duration::from_secs(3), connecting)
            .await
            .map_err(|_| transport(addr, "no answer within 3s"))?
            .map_err(|e| transport(addr, e))?;
        self.conn = Some((addr.to_string(), conn.clone()));
        Ok(conn)
    }

    async fn once(
        &mut self,
        addr: &str,
        body: &Body,
    ) -> Result<Result<Reply, ApiError>, ClientError> {
        let conn = self.connect(addr).await?;
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| transport(addr, e))?;
        let req = Request {
            version: wire::PROTOCOL_VERSION,
            body: body.clone(),
        };
        wire::write_frame(&mut send, &req)
            .await
            .map_err(|e| transport(addr, e))?;
        send.finish().map_err(|e| transport(addr, e))?;
        let resp: Option<Result<Reply, ApiError>> = wire::read_frame(&mut recv)
            .await
            .map_err(|e| transport(addr, e))?;
        resp.ok_or_else(|| transport(addr, "closed the stream without answering"))
    }

    /// Forgets the current connection (after a request timed out on it): the next request
    /// connects afresh.
    pub fn reset(&mut self) {
        if let Some((_, c)) = self.conn.take() {
            c.close(0u32.into(), b"request timed out");
        }
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
    pub async fn call(&mut self, body: Body) -> Result<Result<Reply, ApiError>, ClientError> {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut next: Option<String> = self.conn.as_ref().map(|(a, _)| a.clone());
        let mut i = 0usize;
        let mut last_err: String;
        loop {
            let addr = next.take().unwrap_or_else(|| {
                let a = self.addrs[i % self.addrs.len()].clone();
                i += 1;
                a
            });
            match self.once(&addr, &body).await {
                Ok(Err(e)) if e.kind == ErrorKind::NotLeader => {
                    next = e.leader.clone();
                    last_err = e.message;
                }
                Ok(Err(e)) if e.kind == ErrorKind::Unavailable && retry_safe(&body) => {
                    last_err = e.message;
                }
                Ok(r) => return Ok(r),
                Err(e) => {
                    self.conn = None;
                    last_err = e.to_string();
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ClientError::NoLeader {
                    last: last_err,
                    secs: RETRY_FOR.as_secs(),
                    tried: self.addrs.join(", "),
                });
            }
            if next.is_none() && i.is_multiple_of(self.addrs.len()) {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }
    }
}

/// Whether a request may be sent again after an ambiguous failure.
fn retry_safe(b: &Body) -> bool {
    match b {
        Body::Submit(s) => s.client_token.is_some(),
        Body::SubmitBatch(v) => v.iter().all(|s| s.client_token.is_some()),
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

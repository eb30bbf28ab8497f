//! The CLI's connection to a coordinator cluster: QUIC with the user's certificate, one
//! request per stream, redirects to the leader, retries while an election is under way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use allot_common::api::{ApiError, Body, ErrorKind, Reply, Request};
use allot_common::tls::{self, TlsFiles};
use allot_common::wire;
use anyhow::{anyhow, Context};

/// Where the cluster is and who we are.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientOpts {
    /// Coordinator addresses (host:port, comma-separated); any of them will do.
    #[arg(long, env = "ALLOT_COORDINATORS", value_delimiter = ',', global = true)]
    pub coordinators: Vec<String>,
    /// Directory with ca.pem and the certificate to use.
    #[arg(long, env = "ALLOT_CERTS", global = true)]
    pub certs: Option<PathBuf>,
    /// Which certificate in --certs to present: its file stem (admin-admin, user-team-a,
    /// node-gpu-1).
    #[arg(long = "as", env = "ALLOT_AS", global = true)]
    pub identity: Option<String>,
}

pub struct Client {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    addrs: Vec<String>,
    conn: Option<(String, quinn::Connection)>,
}

/// How long the client keeps retrying while no leader is known.
const RETRY_FOR: Duration = Duration::from_secs(15);

impl Client {
    pub fn new(opts: &ClientOpts) -> anyhow::Result<Self> {
        let addrs = if opts.coordinators.is_empty() {
            vec!["127.0.0.1:7400".to_string()]
        } else {
            opts.coordinators.clone()
        };
        let dir = opts.certs.clone().unwrap_or_else(|| PathBuf::from("certs"));
        let stem = opts
            .identity
            .clone()
            .unwrap_or_else(|| "admin-admin".to_string());
        let files = TlsFiles::in_dir(&dir, &stem);
        let config = tls::client_config(&files).with_context(|| {
            format!(
                "loading certificate {stem:?} from {} (choose one with --as, --certs or ALLOT_AS/ALLOT_CERTS)",
                dir.display()
            )
        })?;
        let bind: SocketAddr = "0.0.0.0:0".parse().context("bind address")?;
        let endpoint = quinn::Endpoint::client(bind).context("opening a UDP socket")?;
        Ok(Client {
            endpoint,
            config,
            addrs,
            conn: None,
        })
    }

    async fn connect(&mut self, addr: &str) -> anyhow::Result<quinn::Connection> {
        if let Some((a, c)) = &self.conn {
            if a == addr && c.close_reason().is_none() {
                return Ok(c.clone());
            }
        }
        let sock = tokio::net::lookup_host(addr)
            .await
            .with_context(|| format!("resolving {addr}"))?
            .next()
            .ok_or_else(|| anyhow!("{addr} resolves to no address"))?;
        let conn = tokio::time::timeout(
            Duration::from_secs(3),
            self.endpoint
                .connect_with(self.config.clone(), sock, tls::SERVER_NAME)?,
        )
        .await
        .map_err(|_| anyhow!("no answer from {addr} within 3s"))??;
        self.conn = Some((addr.to_string(), conn.clone()));
        Ok(conn)
    }

    async fn once(&mut self, addr: &str, body: &Body) -> anyhow::Result<Result<Reply, ApiError>> {
        let conn = self.connect(addr).await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        let req = Request {
            version: wire::PROTOCOL_VERSION,
            body: body.clone(),
        };
        wire::write_frame(&mut send, &req).await?;
        send.finish()?;
        let resp: Option<Result<Reply, ApiError>> = wire::read_frame(&mut recv).await?;
        resp.ok_or_else(|| anyhow!("{addr} closed the stream without answering"))
    }

    /// Sends one request to the cluster: follows leader hints, tries every address, and
    /// retries while an election is under way. API errors come back as `Ok(Err(_))`.
    pub async fn call(&mut self, body: Body) -> anyhow::Result<Result<Reply, ApiError>> {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut next: Option<String> = self.conn.as_ref().map(|(a, _)| a.clone());
        let mut i = 0usize;
        let mut last_err = anyhow!("no coordinator address given");
        loop {
            let addr = next.take().unwrap_or_else(|| {
                let a = self.addrs[i % self.addrs.len()].clone();
                i += 1;
                a
            });
            match self.once(&addr, &body).await {
                Ok(Err(e)) if e.kind == ErrorKind::NotLeader => {
                    next = e.leader.clone();
                    last_err = anyhow!("{}", e.message);
                }
                Ok(Err(e)) if e.kind == ErrorKind::Unavailable && retry_safe(&body) => {
                    last_err = anyhow!("{}", e.message);
                }
                Ok(r) => return Ok(r),
                Err(e) => {
                    self.conn = None;
                    last_err = e.context(format!("coordinator {addr}"));
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(last_err.context(format!(
                    "no coordinator leader answered within {}s (tried {})",
                    RETRY_FOR.as_secs(),
                    self.addrs.join(", ")
                )));
            }
            if next.is_none() && i % self.addrs.len() == 0 {
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

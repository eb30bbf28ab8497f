//! `allot coordinator`: flags and a YAML config file (flags win), then the server until
//! Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use allot_coordinator::server::{self, ServerConfig};
use anyhow::{anyhow, bail};
use serde::Deserialize;

#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// YAML config file with the same keys as the flags (snake_case); flags override it.
    #[arg(long, env = "ALLOT_CONFIG")]
    pub config: Option<PathBuf>,
    /// This replica's id (1, 2, 3, ...), unique in the cluster.
    #[arg(long)]
    pub id: Option<u64>,
    /// UDP address for QUIC (peers, agents and clients) [default: 127.0.0.1:7400].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Every replica as ID=HOST:PORT, comma-separated, this one included
    /// [default: this replica alone].
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Where the raft log and snapshots live [default: ./allot-data/<id>].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Directory with ca.pem and coordinator-<id>.pem/-key.pem [default: certs].
    #[arg(long)]
    pub certs: Option<PathBuf>,
    /// HTTP address for /metrics, /healthz, /readyz, or "off" [default: 127.0.0.1:9400].
    #[arg(long)]
    pub http: Option<String>,
    /// Raft tick length in milliseconds [default: 50].
    #[arg(long)]
    pub tick_ms: Option<u64>,
    /// Ticks before a follower starts an election (drawn up to twice this) [default: 10].
    #[arg(long)]
    pub election_ticks: Option<usize>,
    /// Ticks between leader heartbeats [default: 2].
    #[arg(long)]
    pub heartbeat_ticks: Option<usize>,
    /// Snapshot the state after this many log entries [default: 10000].
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// Longest pause between scheduling cycles when nothing changes, ms [default: 1000].
    #[arg(long)]
    pub schedule_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<u64>,
    listen: Option<SocketAddr>,
    peers: Option<BTreeMap<u64, String>>,
    data_dir: Option<PathBuf>,
    certs: Option<PathBuf>,
    http: Option<String>,
    tick_ms: Option<u64>,
    election_ticks: Option<usize>,
    heartbeat_ticks: Option<usize>,
    snapshot_every: Option<u64>,
    schedule_interval_ms: Option<u64>,
}

pub fn parse_peers(list: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for p in list {
        let (id, addr) = p.split_once('=').ok_or_else(|| {
            anyhow!("--peers: {p:?} is not ID=HOST:PORT (for example 1=10.0.0.1:7400)")
        })?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| anyhow!("--peers: {id:?} in {p:?} is not a replica id (1, 2, 3, ...)"))?;
        if id == 0 {
            bail!("--peers: replica id 0 is reserved; use 1, 2, 3, ...");
        }
        if out.insert(id, addr.trim().to_string()).is_some() {
            bail!("--peers: replica {id} is listed twice");
        }
    }
    Ok(out)
}

pub fn resolve(a: CoordinatorArgs) -> anyhow::Result<ServerConfig> {
    let f: FileConfig = crate::config::load(a.config.as_deref())?;
    let id = a.id.or(f.id).unwrap_or(1);
    if id == 0 {
        bail!("--id 0 is reserved; use 1, 2, 3, ...");
    }
    let listen = a
        .listen
        .or(f.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7400)));
    let mut peers = if a.peers.is_empty() {
        f.peers.unwrap_or_default()
    } else {
        parse_peers(&a.peers)?
    };
    if peers.is_empty() {
        peers.insert(id, listen.to_string());
    }
    if !peers.contains_key(&id) {
        bail!(
            "--peers lists replicas {:?} but not this one ({id}); list every replica, this one included",
            peers.keys().collect::<Vec<_>>()
        );
    }
    let http = crate::config::http_addr(a.http.or(f.http).as_deref(), 9400)?;
    let tick_ms = a.tick_ms.or(f.tick_ms).unwrap_or(50);
    let election_ticks = a.election_ticks.or(f.election_ticks).unwrap_or(10);
    let heartbeat_ticks = a.heartbeat_ticks.or(f.heartbeat_ticks).unwrap_or(2);
    if tick_ms == 0 || heartbeat_ticks == 0 || election_ticks <= heartbeat_ticks {
        bail!(
            "need tick_ms > 0 and election_ticks ({election_ticks}) > heartbeat_ticks ({heartbeat_ticks}) > 0"
        );
    }
    Ok(ServerConfig {
        id,
        listen,
        peers,
        data_dir: a
            .data_dir
            .or(f.data_dir)
            .unwrap_or_else(|| PathBuf::from(format!("allot-data/{id}"))),
        certs: a
            .certs
            .or(f.certs)
            .unwrap_or_else(|| PathBuf::from("certs")),
        http,
        tick_ms,
        election_ticks,
        heartbeat_ticks,
        snapshot_every: a
            .snapshot_every
            .or(f.snapshot_every)
            .unwrap_or(10_000)
            .max(1),
        schedule_interval_ms: a
            .schedule_interval_ms
            .or(f.schedule_interval_ms)
            .unwrap_or(1000),
    })
}

pub async fn run(a: CoordinatorArgs) -> anyhow::Result<()> {
    let cfg = resolve(a)?;
    let running = server::start(cfg.clone())
        .await
        .map_err(|e| anyhow!("coordinator {}: {e}", cfg.id))?;
    eprintln!(
        "allot coordinator {} serving on {} (peers: {}){}",
        cfg.id,
        cfg.listen,
        cfg.peers
            .iter()
            .map(|(i, a)| format!("{i}={a}"))
            .collect::<Vec<_>>()
            .join(","),
        running
            .http_addr
            .map(|a| format!(", metrics on http://{a}/metrics"))
            .unwrap_or_default()
    );
    shutdown_signal().await;
    eprintln!("allot coordinator {}: stopping", cfg.id);
    running.endpoint.close(0u32.into(), b"shutting down");
    Ok(())
}

pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_errors_name_the_value() {
        let p = parse_peers(&["1=127.0.0.1:7401".into(), "2=h:7402".into()]).unwrap();
        assert_eq!(p[&2], "h:7402");
        let e = parse_peers(&["x=1".into()]).unwrap_err().to_string();
        assert!(e.contains("\"x\""), "{e}");
        let e = parse_peers(&["1=a".into(), "1=b".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
    }
}

//! `allot coordinator`: flags and a YAML config file (flags win), then the server until
//! Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use allot_coordinator::server::{self, RaftPriority, ServerConfig};
use anyhow::{anyhow, bail};
use serde::Deserialize;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CoordinatorArgs {
    /// Ask the running cluster about its replicas instead of running one.
    #[command(subcommand)]
    pub cmd: Option<CoordinatorCmd>,
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
    /// Ticks before a follower starts an election (drawn up to twice this) [default: 6]: with
    /// 50 ms ticks a dead leader is replaced within 300 to 600 ms, three heartbeats missed.
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
    /// How the raft thread is scheduled: "realtime" (SCHED_FIFO 1 where the process may: root,
    /// CAP_SYS_NICE or an RLIMIT_RTPRIO of 1; otherwise it says so and runs normally) or
    /// "normal" [default: realtime].
    #[arg(long)]
    pub raft_priority: Option<String>,
    /// Free space, in MiB, the data directory's file system keeps in reserve: below it the
    /// leader refuses writes (reads go on) until space is freed [default: 64].
    #[arg(long)]
    pub disk_reserve_mb: Option<u64>,
    /// Start a new cluster from a backup (`allot backup FILE`): written into the empty data
    /// directory as the state the replica starts from. Every replica of the new cluster is
    /// started with the same file; a data directory that already holds a log is refused.
    #[arg(long)]
    pub restore: Option<PathBuf>,
    /// Join a running cluster as a new replica, after `allot coordinator members add ID
    /// ADDRESS` named it: the replica starts with no configuration and waits for the leader's
    /// snapshot. `--peers` lists the running replicas and this one. Only for an empty data
    /// directory's first start; afterwards the flag changes nothing. With `--restore`, only
    /// the restored cluster's identity is taken from the file.
    #[arg(long)]
    pub join: bool,
}

/// What `allot coordinator` does instead of running a replica.
#[derive(Debug, clap::Subcommand)]
pub enum CoordinatorCmd {
    /// The cluster's coordinator replicas.
    Members {
        #[command(subcommand)]
        cmd: MembersCmd,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum MembersCmd {
    /// Each replica as the leader sees it: address, role, the log index it has matched, how far
    /// behind the commit index it is, and whether the leader hears from it (admins).
    List {
        #[command(flatten)]
        out: crate::cli::Out,
    },
    /// Add replica ID, reached at ADDRESS (HOST:PORT), to the cluster (admins). It joins as a
    /// learner (it gets the log but does not vote) and becomes a voter once it has caught up.
    /// Start it with `allot coordinator --id ID --join` and a certificate for coordinator ID
    /// (`allot certs issue --role coordinator --id ID`).
    Add {
        /// The new replica's id: unique, never used before in this cluster.
        id: u64,
        /// Where its peers and clients reach it (HOST:PORT, UDP).
        address: String,
        /// Return once the replica is a learner, without waiting for it to become a voter.
        #[arg(long)]
        no_wait: bool,
    },
    /// Remove replica ID from the cluster (admins), one at a time. Refused when the voters left
    /// could not form a quorum; removing the leader hands leadership to another voter first.
    Remove { id: u64 },
}

/// Runs a `members` subcommand against the cluster.
pub async fn members(cmd: MembersCmd, opts: &crate::client::ClientOpts) -> anyhow::Result<()> {
    use crate::client::api;
    use allot_common::api::Body;
    let (body, what) = match cmd {
        MembersCmd::List { out } => {
            let get = crate::cli::ClusterCmd::Get {
                what: crate::cli::GetWhat::Members { out },
            };
            return crate::cli::run(get, opts).await;
        }
        MembersCmd::Add {
            id,
            address,
            no_wait,
        } => (
            Body::AddMember {
                id,
                address: address.clone(),
            },
            (!no_wait).then_some(id),
        ),
        MembersCmd::Remove { id } => (Body::RemoveMember { id }, None),
    };
    let mut c = opts.connect()?;
    let added = matches!(body, Body::AddMember { .. });
    let id = match &body {
        Body::AddMember { id, .. } | Body::RemoveMember { id } => *id,
        _ => 0,
    };
    let r = api(c.call(body).await);
    let r = match (r, what) {
        (Err(e), _) => Err(e),
        (Ok(_), None) => Ok(()),
        (Ok(_), Some(id)) => {
            eprintln!("replica {id} added as a learner; waiting for it to catch up and become a voter (start it with --join)");
            wait_for_voter(&mut c, id).await
        }
    };
    opts.remember(&c);
    c.close().await;
    r?;
    if added {
        println!("replica {id} is a member (see allot coordinator members list)");
    } else {
        println!("replica {id} removed from the cluster; stop its process");
    }
    Ok(())
}

/// Polls the members until replica `id` votes (or a minute passes).
async fn wait_for_voter(c: &mut allot_net::client::Client, id: u64) -> anyhow::Result<()> {
    use allot_common::api::{Body, Reply};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Reply::Members(ms) = crate::client::api(c.call(Body::GetMembers).await)? {
            if ms.iter().any(|m| m.id == id && m.role != "learner") {
                return Ok(());
            }
        }
        if std::time::Instant::now() > deadline {
            bail!("replica {id} is still a learner after a minute: is it running with --join, and can the leader reach it? (allot coordinator members list shows how far behind it is)");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<u64>,
    /// Text, not `SocketAddr`, so that a bad one is refused with its value.
    listen: Option<String>,
    peers: Option<BTreeMap<u64, String>>,
    data_dir: Option<PathBuf>,
    certs: Option<PathBuf>,
    http: Option<String>,
    tick_ms: Option<u64>,
    election_ticks: Option<usize>,
    heartbeat_ticks: Option<usize>,
    snapshot_every: Option<u64>,
    schedule_interval_ms: Option<u64>,
    raft_priority: Option<String>,
    disk_reserve_mb: Option<u64>,
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
        if out.insert(id, addr.trim().to_string()).is_some() {
            bail!("--peers: replica {id} is listed twice");
        }
    }
    check_peers("--peers", &out)?;
    Ok(out)
}

/// The checks every peer list gets, from `--peers` or from the config file's `peers`: ids
/// 1, 2, 3, ..., each address HOST:PORT (not resolved), no address given to two replicas.
fn check_peers(source: &str, peers: &BTreeMap<u64, String>) -> anyhow::Result<()> {
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for (&id, addr) in peers {
        if id == 0 {
            bail!("{source}: replica id 0 (address {addr:?}) is reserved; use 1, 2, 3, ...");
        }
        crate::config::check_host_port(addr).map_err(|why| {
            anyhow!(
                "{source}: replica {id}'s address {addr:?} is not valid ({why}); expected {}",
                crate::config::HOST_PORT_FORM
            )
        })?;
        if let Some(other) = seen.insert(addr, id) {
            bail!(
                "{source}: replicas {other} and {id} both have the address {addr:?}; \
                 each replica needs its own HOST:PORT"
            );
        }
    }
    Ok(())
}

/// Accepted ranges for the raft timing settings. `election_ticks` is at least 2 so that some
/// heartbeat interval fits below it, and bounded so that the randomised timeout (up to twice
/// it) cannot overflow; `heartbeat_ticks` must be below `election_ticks`.
const TICK_MS: RangeInclusive<u64> = 1..=10_000;
const ELECTION_TICKS: RangeInclusive<usize> = 2..=1_000;
const SNAPSHOT_EVERY_MAX: u64 = 1_000_000_000;
/// A reserve above a petabyte is a typo.
const DISK_RESERVE_MB_MAX: u64 = 1 << 30;

/// Refuses `value` outside `range`, naming the flag, its config-file key, the value and the range.
fn in_range<T: PartialOrd + Display>(
    flag: &str,
    value: T,
    range: &RangeInclusive<T>,
) -> anyhow::Result<T> {
    if !range.contains(&value) {
        bail!(
            "--{flag} (config file: {}) is {value}; accepted: {} to {}",
            flag.replace('-', "_"),
            range.start(),
            range.end()
        );
    }
    Ok(value)
}

pub fn resolve(a: CoordinatorArgs) -> anyhow::Result<ServerConfig> {
    let f: FileConfig = crate::config::load(a.config.as_deref())?;
    let id = a.id.or(f.id).unwrap_or(1);
    if id == 0 {
        bail!("--id 0 is reserved; use 1, 2, 3, ...");
    }
    let file_listen = match f.listen.as_deref().map(str::trim) {
        None => None,
        Some(s) => Some(s.parse::<SocketAddr>().map_err(|_| {
            anyhow!(
                "config file listen: {s:?} is not IP:PORT; expected a local address to bind, \
                 such as 0.0.0.0:7400, 127.0.0.1:7400 or [::]:7400 (no host names)"
            )
        })?),
    };
    let listen = a
        .listen
        .or(file_listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7400)));
    let mut peers = if a.peers.is_empty() {
        let peers = f.peers.unwrap_or_default();
        check_peers("config file peers", &peers)?;
        peers
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
    let tick_ms = in_range("tick-ms", a.tick_ms.or(f.tick_ms).unwrap_or(50), &TICK_MS)?;
    let election_ticks = in_range(
        "election-ticks",
        a.election_ticks.or(f.election_ticks).unwrap_or(6),
        &ELECTION_TICKS,
    )?;
    // Below election_ticks: followers must hear a heartbeat before they call an election.
    let heartbeat_ticks = in_range(
        "heartbeat-ticks",
        a.heartbeat_ticks.or(f.heartbeat_ticks).unwrap_or(2),
        &(1..=election_ticks - 1),
    )
    .map_err(|e| anyhow!("{e} (below --election-ticks {election_ticks})"))?;
    // 0 has always meant "after every entry", as 1 does.
    let snapshot_every = in_range(
        "snapshot-every",
        a.snapshot_every
            .or(f.snapshot_every)
            .unwrap_or(10_000)
            .max(1),
        &(1..=SNAPSHOT_EVERY_MAX),
    )?;
    let raft_priority = match a.raft_priority.or(f.raft_priority) {
        None => RaftPriority::default(),
        Some(s) => s
            .parse()
            .map_err(|e| anyhow!("--raft-priority (config file: raft_priority): {e}"))?,
    };
    let disk_reserve_mb = in_range(
        "disk-reserve-mb",
        a.disk_reserve_mb.or(f.disk_reserve_mb).unwrap_or(64),
        &(0..=DISK_RESERVE_MB_MAX),
    )?;
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
        snapshot_every,
        schedule_interval_ms: a
            .schedule_interval_ms
            .or(f.schedule_interval_ms)
            .unwrap_or(1000),
        raft_priority,
        disk_reserve_bytes: disk_reserve_mb << 20,
        restore: a.restore,
        join: a.join,
    })
}

pub async fn run(a: CoordinatorArgs) -> anyhow::Result<()> {
    let cfg = resolve(a)?;
    let running = server::start(cfg.clone())
        .await
        .map_err(|e| anyhow!("coordinator {}: {e}", cfg.id))?;
    eprintln!(
        "allot coordinator {} serving on {} (peers: {}){}; raft thread at {}",
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
            .unwrap_or_default(),
        running.raft_priority
    );
    crate::signals::shutdown_signal().await;
    eprintln!("allot coordinator {}: stopping", cfg.id);
    running.endpoint.close(0u32.into(), b"shutting down");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: CoordinatorArgs,
    }

    /// `resolve` on these flags (and `yaml` as the config file, when given).
    fn resolve_with(flags: &[&str], yaml: Option<&str>) -> anyhow::Result<ServerConfig> {
        let dir = tempfile::tempdir().unwrap();
        let mut argv = vec!["allot".to_string()];
        if let Some(y) = yaml {
            let p = dir.path().join("coordinator.yaml");
            std::fs::write(&p, y).unwrap();
            argv.extend(["--config".to_string(), p.display().to_string()]);
        }
        argv.extend(flags.iter().map(|f| f.to_string()));
        resolve(Cli::try_parse_from(argv).unwrap().a)
    }

    fn err(flags: &[&str], yaml: Option<&str>) -> String {
        format!("{:#}", resolve_with(flags, yaml).unwrap_err())
    }

    #[test]
    fn peers_parse_and_errors_name_the_value() {
        let p = parse_peers(&["1=127.0.0.1:7401".into(), "2=h:7402".into()]).unwrap();
        assert_eq!(p[&2], "h:7402");
        let e = parse_peers(&["x=1".into()]).unwrap_err().to_string();
        assert!(e.contains("\"x\""), "{e}");
        let e = parse_peers(&["1=a:1".into(), "1=b:2".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn flag_peers_are_host_port() {
        let e = err(&["--peers", "1=h1:7400,2=h2:74OO"], None);
        assert!(e.contains("replica 2") && e.contains("\"h2:74OO\""), "{e}");
        assert!(e.contains("HOST:PORT") && e.contains("1..=65535"), "{e}");
        for (p, why) in [
            ("1=h1:7400,2=", "\"\""),
            ("0=h0:7400,1=h1:7400", "replica id 0"),
            (
                "1=h1:7400,2=h1:7400",
                "replicas 1 and 2 both have the address \"h1:7400\"",
            ),
            ("1=h1:0", "port 0 is outside 1..=65535"),
        ] {
            let e = err(&["--peers", p], None);
            assert!(e.starts_with("--peers") && e.contains(why), "{p}: {e}");
        }
    }

    #[test]
    fn config_file_peers_get_the_flag_checks() {
        let good = "peers:\n  1: coordinator-0.allot:7000\n  2: \"[fd00::2]:7000\"\n";
        let cfg = resolve_with(&[], Some(good)).unwrap();
        assert_eq!(cfg.peers[&1], "coordinator-0.allot:7000");
        for (yaml, why) in [
            (
                "peers:\n  0: h0:7400\n  1: h1:7400\n",
                "replica id 0 (address \"h0:7400\") is reserved",
            ),
            (
                "peers:\n  1: h1:7400\n  2: \"\"\n",
                "replica 2's address \"\"",
            ),
            (
                "peers:\n  1: h1:7400\n  2: h1:7400\n",
                "replicas 1 and 2 both have",
            ),
            (
                "peers:\n  1: h1:7400\n  2: h2\n",
                "replica 2's address \"h2\" is not valid (it has no :PORT)",
            ),
            (
                "peers:\n  1: h1:7400\n  2: h2:99999\n",
                "port 99999 is outside 1..=65535",
            ),
        ] {
            let e = err(&[], Some(yaml));
            assert!(
                e.starts_with("config file peers") && e.contains(why),
                "{yaml}: {e}"
            );
            assert!(
                e.contains("expected HOST:PORT")
                    || why.contains("reserved")
                    || why.contains("both"),
                "{e}"
            );
        }
        let e = err(&[], Some("listen: 0.0.0.0:74OO\n"));
        assert!(
            e.contains("listen: \"0.0.0.0:74OO\"") && e.contains("0.0.0.0:7400"),
            "{e}"
        );
        let cfg = resolve_with(&[], Some("listen: \"[::]:7401\"\n")).unwrap();
        assert_eq!(cfg.listen.port(), 7401);
        assert_eq!(cfg.peers[&1], "[::]:7401");
        // Flags win over the file, and only the list that is used is checked.
        let cfg = resolve_with(&["--peers", "1=h1:7400"], Some("peers:\n  1: h1\n")).unwrap();
        assert_eq!(cfg.peers[&1], "h1:7400");
    }

    #[test]
    fn shipped_config_files_pass_the_checks() {
        let bare_metal = include_str!("../deploy/config/coordinator.yaml");
        let cfg = resolve_with(&[], Some(bare_metal)).unwrap();
        assert_eq!(cfg.peers.len(), 3);
        let k8s = include_str!("../deploy/kubernetes/base/config/coordinator.yaml");
        let peers = "1=allot-coordinator-0.allot-coordinator-peers.ns.svc:7400";
        resolve_with(&["--id", "1", "--peers", peers], Some(k8s)).unwrap();
    }

    #[test]
    fn tick_settings_are_bounded() {
        let cfg = resolve_with(&[], None).unwrap();
        assert_eq!(
            (
                cfg.tick_ms,
                cfg.election_ticks,
                cfg.heartbeat_ticks,
                cfg.snapshot_every
            ),
            (50, 6, 2, 10_000)
        );
        for (flags, want) in [
            (&["--tick-ms", "0"][..], "--tick-ms (config file: tick_ms) is 0; accepted: 1 to 10000"),
            (&["--tick-ms", "10001"], "is 10001; accepted: 1 to 10000"),
            (&["--election-ticks", "1"], "--election-ticks (config file: election_ticks) is 1; accepted: 2 to 1000"),
            (&["--election-ticks", "18446744073709551615"], "is 18446744073709551615; accepted: 2 to 1000"),
            (&["--heartbeat-ticks", "0"], "--heartbeat-ticks (config file: heartbeat_ticks) is 0; accepted: 1 to 5 (below --election-ticks 6)"),
            (&["--heartbeat-ticks", "6"], "is 6; accepted: 1 to 5"),
            (&["--snapshot-every", "18446744073709551615"], "--snapshot-every (config file: snapshot_every) is 18446744073709551615; accepted: 1 to 1000000000"),
        ] {
            let e = err(flags, None);
            assert!(e.contains(want), "{flags:?}: {e}");
        }
        // From the config file too, and the ends of each range are accepted.
        let e = err(&[], Some("election_ticks: 5000\n"));
        assert!(e.contains("is 5000; accepted: 2 to 1000"), "{e}");
        let cfg = resolve_with(
            &[
                "--tick-ms",
                "10000",
                "--election-ticks",
                "1000",
                "--heartbeat-ticks",
                "999",
            ],
            None,
        )
        .unwrap();
        assert_eq!((cfg.election_ticks, cfg.heartbeat_ticks), (1000, 999));
        let cfg = resolve_with(&["--election-ticks", "2", "--heartbeat-ticks", "1"], None).unwrap();
        assert_eq!(cfg.election_ticks, 2);
        // snapshot_every 0 keeps meaning 1, as it always has.
        assert_eq!(
            resolve_with(&["--snapshot-every", "0"], None)
                .unwrap()
                .snapshot_every,
            1
        );
    }

    #[test]
    fn disk_reserve_defaults_to_64_mib_and_a_bad_one_is_named() {
        assert_eq!(
            resolve_with(&[], None).unwrap().disk_reserve_bytes,
            64 << 20
        );
        let cfg = resolve_with(&["--disk-reserve-mb", "0"], Some("disk_reserve_mb: 8\n")).unwrap();
        assert_eq!(cfg.disk_reserve_bytes, 0);
        let e = resolve_with(&[], Some("disk_reserve_mb: 9999999999\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("disk-reserve-mb") && e.contains("9999999999"),
            "{e}"
        );
    }

    #[test]
    fn raft_priority_defaults_to_realtime_and_names_what_it_accepts() {
        assert_eq!(
            resolve_with(&[], None).unwrap().raft_priority,
            RaftPriority::Realtime
        );
        let cfg = resolve_with(&[], Some("raft_priority: normal\n")).unwrap();
        assert_eq!(cfg.raft_priority, RaftPriority::Normal);
        // The flag wins over the file.
        let cfg = resolve_with(
            &["--raft-priority", "realtime"],
            Some("raft_priority: normal\n"),
        )
        .unwrap();
        assert_eq!(cfg.raft_priority, RaftPriority::Realtime);
        let e = err(&["--raft-priority", "fifo"], None);
        assert!(
            e.contains("--raft-priority (config file: raft_priority): \"fifo\" is not a raft thread priority; accepted: realtime, normal"),
            "{e}"
        );
    }
}

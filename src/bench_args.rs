//! `allot bench`'s arguments and the small measures both of its runs (`bench`, and the
//! failover run, `failover`) share: apart from both, so that neither imports the other.

use std::net::UdpSocket;
use std::time::Duration;

use allot_coordinator::priority::RaftPriority;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Simulated nodes registered for the throughput run.
    #[arg(long, default_value_t = 1000)]
    pub nodes: u32,
    /// Teams (each with an equal compute quota).
    #[arg(long, default_value_t = 100)]
    pub teams: u32,
    /// Workloads submitted in the throughput run.
    #[arg(long, default_value_t = 50_000)]
    pub workloads: u32,
    /// Submit-to-admit samples per round on the idle cluster (and as many fsync probes).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub samples: u32,
    /// Rounds of the latency run: each takes the disk's fsync baseline, then the submit-to-admit
    /// samples, so both are measured over the same minutes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Keep the data directory (printed) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// Instance type of the simulated nodes.
    #[arg(long, default_value = "ml.p4d.24xlarge")]
    pub instance_type: String,
    /// Passed to each `allot coordinator --raft-priority` (realtime or normal); the bench
    /// prints what each replica's raft thread got.
    #[arg(long, default_value = "realtime", value_parser = |s: &str| s.parse::<RaftPriority>())]
    pub raft_priority: RaftPriority,
    /// Instead of the runs above: three replicas and four agents with running work, the
    /// leader SIGKILLed this many times; prints the elections and the time from each kill to
    /// the first admission, and checks that nothing was lost, duplicated or restarted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub failover: Option<u32>,
    /// After the idle rounds: submit this many 8-GPU workloads (more than the nodes hold) to
    /// the other teams, and once they settle run the latency rounds again with that backlog
    /// waiting; prints the leader's cycle time p50/p99, submit-to-admit p50/p99 against the
    /// idle figure, and leadership changes (there must be none). Skips the sustained run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub pending: Option<u32>,
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `--peers` for replicas 1, 2, ... at `addrs`.
pub(crate) fn peers_arg(addrs: &[String]) -> String {
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

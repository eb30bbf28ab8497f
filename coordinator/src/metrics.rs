//! Prometheus metrics of one replica: raft progress, workloads by state, admissions and
//! preemptions, per-team usage against quota, and scheduling cycle time.

use std::sync::Mutex;

use allot_core::WlState;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::raftlog::Disk;
use crate::replica::Replica;

type Labels = Vec<(String, String)>;

pub struct Metrics {
    registry: Mutex<Registry>,
    term: Gauge,
    commit: Gauge,
    applied: Gauge,
    apply_lag: Gauge,
    is_leader: Gauge,
    snapshot_index: Gauge,
    snapshots_installed: Gauge,
    format_cluster: Gauge,
    format_reads: Gauge,
    workloads: Family<Labels, Gauge>,
    totals: Family<Labels, Gauge>,
    team_usage: Family<Labels, Gauge>,
    team_nominal: Family<Labels, Gauge>,
    team_borrowed: Family<Labels, Gauge>,
    pub cycle_seconds: Histogram,
}

impl Metrics {
    pub fn new(id: u64) -> Self {
        let mut reg = Registry::with_prefix_and_labels(
            "allot",
            [(
                std::borrow::Cow::Borrowed("replica"),
                std::borrow::Cow::Owned(id.to_string()),
            )]
            .into_iter(),
        );
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            term: Gauge::default(),
            commit: Gauge::default(),
            applied: Gauge::default(),
            apply_lag: Gauge::default(),
            is_leader: Gauge::default(),
            snapshot_index: Gauge::default(),
            snapshots_installed: Gauge::default(),
            format_cluster: Gauge::default(),
            format_reads: Gauge::default(),
            workloads: Family::default(),
            totals: Family::default(),
            team_usage: Family::default(),
            team_nominal: Family::default(),
            team_borrowed: Family::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
        };
        reg.register("raft_term", "Current raft term", m.term.clone());
        reg.register(
            "raft_commit_index",
            "Highest committed log index",
            m.commit.clone(),
        );
        reg.register(
            "raft_applied_index",
            "Highest applied log index",
            m.applied.clone(),
        );
        reg.register(
            "raft_apply_lag",
            "Committed entries not yet applied",
            m.apply_lag.clone(),
        );
        reg.register(
            "raft_is_leader",
            "1 when this replica leads",
            m.is_leader.clone(),
        );
        reg.register(
            "raft_snapshot_index",
            "Log index of the latest snapshot",
            m.snapshot_index.clone(),
        );
        reg.register(
            "raft_snapshots_installed",
            "Snapshots received from a leader since start",
            m.snapshots_installed.clone(),
        );
        reg.register(
            "format_cluster",
            "The format the cluster writes its log entries and snapshots in",
            m.format_cluster.clone(),
        );
        reg.register(
            "format_reads",
            "The newest format this replica reads",
            m.format_reads.clone(),
        );
        reg.register("workloads", "Workloads by state", m.workloads.clone());
        reg.register(
            "events",
            "Totals since the log began: submitted, admitted, preempted, retried, finished, plans, and preempted_run_seconds (run time preemptions threw away)",
            m.totals.clone(),
        );
        reg.register(
            "team_usage",
            "Usage per team and resource (base units)",
            m.team_usage.clone(),
        );
        reg.register(
            "team_nominal",
            "Nominal quota per team and resource",
            m.team_nominal.clone(),
        );
        reg.register(
            "team_borrowed",
            "Borrowed per team and resource",
            m.team_borrowed.clone(),
        );
        reg.register(
            "schedule_cycle_seconds",
            "Time to compute one scheduling cycle (leader only)",
            m.cycle_seconds.clone(),
        );
        if let Ok(mut r) = m.registry.lock() {
            *r = reg;
        }
        m
    }

    pub fn update<D: Disk>(&self, rep: &Replica<D>) {
        self.term.set(rep.term() as i64);
        self.commit.set(rep.commit_index() as i64);
        self.applied.set(rep.applied_index() as i64);
        self.apply_lag
            .set(rep.commit_index().saturating_sub(rep.applied_index()) as i64);
        self.is_leader.set(i64::from(rep.is_leader()));
        self.snapshot_index.set(rep.snapshot_index() as i64);
        self.snapshots_installed
            .set(rep.snapshots_installed() as i64);
        self.format_cluster.set(i64::from(rep.machine.format));
        self.format_reads.set(i64::from(rep.format_reads()));
        self.update_machine(&rep.machine);
    }

    /// The figures the replicated state gives (every replica's are the same).
    pub fn update_machine(&self, m: &allot_core::machine::Machine) {
        let mut counts = [0i64; 8];
        let states = [
            WlState::Pending,
            WlState::Admitted,
            WlState::Running,
            WlState::Evicting,
            WlState::Succeeded,
            WlState::Failed,
            WlState::Cancelled,
        ];
        for w in m.state.workloads().values() {
            if let Some(i) = states.iter().position(|s| *s == w.state) {
                counts[i] += 1;
            }
        }
        for (i, s) in states.iter().enumerate() {
            self.workloads
                .get_or_create(&vec![("state".into(), s.as_str().to_lowercase())])
                .set(counts[i]);
        }
        let c = &m.counters;
        for (k, v) in [
            ("submitted", c.submitted),
            ("admitted", c.admitted),
            ("preempted", c.preempted),
            ("retried", c.retried),
            ("finished", c.finished),
            ("plans", c.plans),
            ("preempted_run_seconds", c.preempted_run_ms / 1000),
        ] {
            self.totals
                .get_or_create(&vec![("kind".into(), k.into())])
                .set(v as i64);
        }
        self.team_usage.clear();
        self.team_nominal.clear();
        self.team_borrowed.clear();
        for t in allot_core::views::teams(m) {
            for (fam, res) in [
                (&self.team_usage, &t.usage),
                (&self.team_nominal, &t.nominal),
                (&self.team_borrowed, &t.borrowed),
            ] {
                for (r, v) in res.iter() {
                    fam.get_or_create(&vec![
                        ("team".into(), t.name.clone()),
                        ("resource".into(), r.to_string()),
                    ])
                    .set(v);
                }
            }
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(r) = self.registry.lock() {
            let _ = encode(&mut out, &r);
        }
        out
    }
}

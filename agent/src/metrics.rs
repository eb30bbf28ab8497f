//! The agent's Prometheus metrics: pods by phase, starts and stops, syncs with the cluster,
//! the lease, and devices by health.

use std::sync::Mutex;
use std::time::Instant;

use allot_common::api::DeviceInfo;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::executor::{Executor, PodPhase};

type Labels = Vec<(String, String)>;

pub struct AgentMetrics {
    registry: Registry,
    pods: Family<Labels, Gauge>,
    devices: Family<Labels, Gauge>,
    pub starts: Counter,
    pub stops: Counter,
    pub syncs: Counter,
    pub sync_errors: Counter,
    lease_until: Mutex<Option<Instant>>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new()
    }
}

impl AgentMetrics {
    pub fn new() -> Self {
        let mut m = AgentMetrics {
            registry: Registry::with_prefix("allot_agent"),
            pods: Family::default(),
            devices: Family::default(),
            starts: Counter::default(),
            stops: Counter::default(),
            syncs: Counter::default(),
            sync_errors: Counter::default(),
            lease_until: Mutex::new(None),
        };
        let r = &mut m.registry;
        r.register("pods", "Pods on this node by phase", m.pods.clone());
        r.register(
            "devices",
            "Discovered devices by resource and health",
            m.devices.clone(),
        );
        r.register("pod_starts", "Pods started", m.starts.clone());
        r.register("pod_ends", "Pods that ended", m.stops.clone());
        r.register(
            "syncs",
            "Heartbeats the cluster answered (each renews the lease)",
            m.syncs.clone(),
        );
        r.register(
            "sync_errors",
            "Heartbeats that failed or were refused",
            m.sync_errors.clone(),
        );
        m
    }

    pub fn lease_renewed(&self, until: Instant) {
        if let Ok(mut l) = self.lease_until.lock() {
            *l = Some(until);
        }
    }

    /// Seconds left on the lease (negative once expired); `None` before the first heartbeat.
    pub fn lease_left(&self) -> Option<f64> {
        let l = *self.lease_until.lock().ok()?;
        l.map(|u| {
            let now = Instant::now();
            if u >= now {
                (u - now).as_secs_f64()
            } else {
                -(now - u).as_secs_f64()
            }
        })
    }

    pub fn set_pods(&self, exec: &Executor) {
        let mut counts = [0i64; 4];
        for p in exec.pods.values() {
            let i = match p.phase {
                PodPhase::Running => 0,
                PodPhase::Stopping => 1,
                PodPhase::Exited(_) => 2,
                PodPhase::Lost(_) => 3,
            };
            counts[i] += 1;
        }
        self.set_phase_counts(counts);
    }

    /// Pods running, stopping, exited and lost.
    pub fn set_phase_counts(&self, counts: [i64; 4]) {
        for (i, name) in ["running", "stopping", "exited", "lost"].iter().enumerate() {
            self.pods
                .get_or_create(&vec![("phase".into(), name.to_string())])
                .set(counts[i]);
        }
    }

    pub fn set_inventory(&self, devices: &[DeviceInfo]) {
        self.devices.clear();
        for d in devices {
            self.devices
                .get_or_create(&vec![
                    ("resource".into(), d.resource.clone()),
                    ("healthy".into(), d.healthy.to_string()),
                ])
                .inc();
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        if let Some(l) = self.lease_left() {
            out = out.trim_end_matches("# EOF\n").to_string();
            out.push_str(&format!(
                "# HELP allot_agent_lease_seconds_left Seconds before this node's lease runs out.\n# TYPE allot_agent_lease_seconds_left gauge\nallot_agent_lease_seconds_left {l:.3}\n# EOF\n"
            ));
        }
        out
    }
}

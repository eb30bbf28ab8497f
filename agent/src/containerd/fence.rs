//! The node's fence for containers whose shims are gone.
//!
//! A pod's shim stops its container when the node's lease runs out, so a node cut off from the
//! cluster stops its pods before the cluster runs them elsewhere. On Kubernetes the shims live
//! in the agent's container and die with it; until the restarted agent adopts the containers,
//! nothing would stop them. `allot agent-fence` runs beside the agent (another container of its
//! pod, which an agent crash does not restart) and does what the shims would: once the lease
//! in the agent's data directory has run out (plus a tenth of a lease, at most a second, so a
//! live shim acts first), it sends SIGTERM to every task of allot's containers in the
//! namespace, and SIGKILL to all their processes when 4/5 of a lease has passed since the
//! deadline, as the shims do, so they are gone before the cluster, two leases after the last
//! renewal, runs the work again. It only stops: the restarted agent adopts the stopped
//! containers and reports how they ended.
//!
//! The decision is [`Fence::poll`] (sans-I/O: the lease deadline and the time passed in); the
//! loop around it talks to containerd.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use super::Containerd;
use crate::shim;

/// How long after the lease runs out the fence acts at most (a live shim acts at once).
pub const MAX_SLACK_MS: i64 = 1000;

/// What to do to one container now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Term,
    Kill,
}

/// The fence's memory: the containers sent SIGTERM, and whether SIGKILL followed.
#[derive(Debug, Default)]
pub struct Fence {
    lease_ms: i64,
    termed: BTreeMap<String, bool>,
}

impl Fence {
    pub fn new(lease_ms: i64) -> Fence {
        Fence {
            lease_ms,
            termed: BTreeMap::new(),
        }
    }

    /// Whether the lease (deadline `lease_deadline`, ms since the epoch; 0: none written) has
    /// run out at `now` for the fence.
    pub fn expired(&self, now: i64, lease_deadline: i64) -> bool {
        now > lease_deadline.saturating_add(self.slack())
    }

    fn slack(&self) -> i64 {
        (self.lease_ms / 10).min(MAX_SLACK_MS)
    }

    /// The actions due at `now` for the running `containers`.
    pub fn poll(
        &mut self,
        now: i64,
        lease_deadline: i64,
        containers: &[String],
    ) -> Vec<(String, Action)> {
        if !self.expired(now, lease_deadline) {
            // Renewed (an agent is back): start afresh next time.
            self.termed.clear();
            return Vec::new();
        }
        self.termed.retain(|id, _| containers.contains(id));
        // SIGKILL when 4/5 of a lease has passed since the deadline, as a shim kills: whatever
        // the fence's own delay, everything is gone within 1.8 leases of the last renewal.
        let kill_due = now >= lease_deadline.saturating_add(self.lease_ms * 4 / 5);
        let mut out = Vec::new();
        for id in containers {
            match self.termed.get_mut(id) {
                None if kill_due => {
                    self.termed.insert(id.clone(), true);
                    out.push((id.clone(), Action::Kill));
                }
                None => {
                    self.termed.insert(id.clone(), false);
                    out.push((id.clone(), Action::Term));
                }
                Some(killed) if !*killed && kill_due => {
                    *killed = true;
                    out.push((id.clone(), Action::Kill));
                }
                Some(_) => {}
            }
        }
        out
    }
}

pub struct FenceConfig {
    pub socket: PathBuf,
    pub namespace: String,
    pub lease_file: PathBuf,
    pub lease: Duration,
}

/// allot's containers (those with a pod label) whose task runs.
async fn running(ctd: &Containerd) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (id, pod) in ctd.containers().await.map_err(|e| e.to_string())? {
        if pod.is_empty() {
            continue;
        }
        // Status 2 is RUNNING in containerd's task API (1 CREATED, 3 STOPPED, 4 PAUSED).
        if let Ok(Some(p)) = ctd.task(&id).await {
            if p.status == 2 || p.status == 4 {
                out.push(id);
            }
        }
    }
    Ok(out)
}

/// Runs the fence until `stop` resolves.
pub async fn run(cfg: &FenceConfig, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut fence = Fence::new(cfg.lease.as_millis() as i64);
    let mut ctd: Option<Containerd> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut warned = false;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        let deadline = shim::read_lease(&cfg.lease_file);
        let now = shim::now_ms();
        if !fence.expired(now, deadline) {
            fence.poll(now, deadline, &[]);
            continue;
        }
        if ctd.is_none() {
            match Containerd::connect(&cfg.socket, &cfg.namespace).await {
                Ok(c) => ctd = Some(c),
                Err(e) => {
                    if !warned {
                        eprintln!("agent-fence: cannot reach containerd: {e}");
                        warned = true;
                    }
                    continue;
                }
            }
        }
        let Some(c) = &ctd else { continue };
        let ids = match running(c).await {
            Ok(ids) => ids,
            Err(e) => {
                eprintln!("agent-fence: listing containers: {e}");
                ctd = None;
                continue;
            }
        };
        for (id, action) in fence.poll(now, deadline, &ids) {
            let (signal, all, what) = match action {
                Action::Term => (libc::SIGTERM, false, "SIGTERM"),
                Action::Kill => (libc::SIGKILL, true, "SIGKILL"),
            };
            eprintln!(
                "agent-fence: the node's lease ran out {} ms ago and no shim stopped {id}: {what}",
                now - deadline
            );
            super::run::kill(c, &id, signal, all).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nothing_while_the_lease_holds_then_term_then_kill() {
        let mut f = Fence::new(10_000);
        let c = ids(&["a", "b"]);
        // Within the lease and its slack (a tenth of it, at most a second): nothing.
        assert!(f.poll(50_000, 50_000, &c).is_empty());
        assert!(f.poll(51_000, 50_000, &c).is_empty());
        // Past it: SIGTERM once each.
        let t = f.poll(51_001, 50_000, &c);
        assert_eq!(
            t,
            [
                ("a".to_string(), Action::Term),
                ("b".to_string(), Action::Term)
            ]
        );
        assert!(f.poll(52_000, 50_000, &c).is_empty());
        // 4/5 of a lease after the deadline: SIGKILL, once.
        assert!(f.poll(57_999, 50_000, &ids(&["a"])).is_empty());
        let k = f.poll(58_000, 50_000, &ids(&["a"]));
        assert_eq!(k, [("a".to_string(), Action::Kill)]);
        assert!(f.poll(60_000, 50_000, &ids(&["a"])).is_empty());
    }

    #[test]
    fn a_short_lease_is_killed_within_two_leases_of_the_last_renewal() {
        // A 2 s lease renewed at 0 (deadline 2 s): SIGTERM after 0.2 s of slack, SIGKILL at
        // 3.6 s, before the cluster's 4 s; a fence that first looks late kills at once.
        let mut f = Fence::new(2_000);
        let c = ids(&["a"]);
        assert!(f.poll(2_200, 2_000, &c).is_empty());
        assert_eq!(f.poll(2_201, 2_000, &c), [("a".into(), Action::Term)]);
        assert_eq!(f.poll(3_600, 2_000, &c), [("a".into(), Action::Kill)]);
        let mut late = Fence::new(2_000);
        assert_eq!(late.poll(3_700, 2_000, &c), [("a".into(), Action::Kill)]);
    }

    #[test]
    fn a_renewed_lease_forgets_and_no_lease_file_counts_as_run_out() {
        let mut f = Fence::new(10_000);
        let c = ids(&["a"]);
        assert_eq!(f.poll(51_500, 50_000, &c).len(), 1);
        // The agent came back and renewed: nothing, and the next expiry starts over.
        assert!(f.poll(52_000, 80_000, &c).is_empty());
        assert_eq!(f.poll(81_500, 80_000, &c), [("a".into(), Action::Term)]);
        // No lease ever written (0): a node whose agent never ran keeps nothing running.
        let mut g = Fence::new(10_000);
        assert_eq!(g.poll(5_000, 0, &c), [("a".into(), Action::Term)]);
    }
}

//! The raft thread's links to the other replicas: a sender task (and a format prober) per
//! member, started and stopped as the membership changes (`members.rs`). Where a member is
//! reached: the address its addition put in the log (`Machine::members`), else `--peers`.

use std::collections::BTreeMap;

use raft::eraftpb::Message;
use tokio::sync::mpsc;

use crate::connections::{format_prober, peer_sender};
use crate::raftlog::Disk;
use crate::replica::Replica;
use crate::shared::Shared;

pub(crate) struct PeerLinks {
    endpoint: quinn::Endpoint,
    client_tls: quinn::ClientConfig,
    shared: Shared,
    /// `--peers`: where the replicas the cluster started with are reached.
    configured: BTreeMap<u64, String>,
    /// The address each linked peer's sender task dials.
    linked: BTreeMap<u64, String>,
    /// The replica's count of configuration changes at the last sync.
    seen: Option<u64>,
}

impl PeerLinks {
    pub(crate) fn new(
        endpoint: quinn::Endpoint,
        client_tls: quinn::ClientConfig,
        shared: Shared,
        configured: BTreeMap<u64, String>,
    ) -> Self {
        PeerLinks {
            endpoint,
            client_tls,
            shared,
            configured,
            linked: BTreeMap::new(),
            seen: None,
        }
    }

    /// The replica was opened again: the next `sync` looks at its membership anew.
    pub(crate) fn forget(&mut self) {
        self.seen = None;
    }

    /// Brings the sender tasks (`senders`, which the raft loop sends through) in line with the
    /// replica's membership, once per configuration change; a task whose sender is dropped
    /// ends.
    pub(crate) fn sync<D: Disk>(
        &mut self,
        rep: &Replica<D>,
        senders: &mut BTreeMap<u64, mpsc::UnboundedSender<Message>>,
    ) {
        if self.seen == Some(rep.conf_changes()) {
            return;
        }
        self.seen = Some(rep.conf_changes());
        let want = wanted(rep, &self.configured);
        let me = self.shared.id;
        for (id, addr) in &self.linked {
            if want.get(id) != Some(addr) {
                senders.remove(id);
                tracing::info!("replica {me}: no longer sends to replica {id} at {addr}");
            }
        }
        self.linked
            .retain(|id, addr| want.get(id) == Some(addr) && senders.contains_key(id));
        for (&id, addr) in &want {
            if id == me || self.linked.contains_key(&id) {
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(peer_sender(
                id,
                addr.clone(),
                (self.endpoint.clone(), self.client_tls.clone()),
                rx,
                self.shared.input.clone(),
                self.shared.cluster_id.clone(),
            ));
            tokio::spawn(format_prober(
                id,
                addr.clone(),
                (self.endpoint.clone(), self.client_tls.clone()),
                tx.downgrade(),
                self.shared.clone(),
            ));
            tracing::info!("replica {me}: sends to replica {id} at {addr}");
            senders.insert(id, tx);
            self.linked.insert(id, addr.clone());
        }
        let mut book = self.shared.peers.write().unwrap_or_else(|p| p.into_inner());
        *book = want;
    }
}

/// Each member this replica reaches (itself included), with its address. A replica joining a
/// cluster has no configuration until the leader's snapshot: until then it answers the
/// replicas of `--peers`.
fn wanted<D: Disk>(rep: &Replica<D>, configured: &BTreeMap<u64, String>) -> BTreeMap<u64, String> {
    if rep.joining() {
        return configured.clone();
    }
    let me = rep.id();
    rep.voters()
        .iter()
        .chain(rep.learners())
        .chain(std::iter::once(&me))
        .filter_map(|id| {
            let addr = rep.machine.members.get(id).or_else(|| configured.get(id));
            if addr.is_none() {
                tracing::warn!(
                    "replica {me}: member {id} has no address (not in --peers, and not added with one): list it in --peers"
                );
            }
            Some((*id, addr?.clone()))
        })
        .collect()
}

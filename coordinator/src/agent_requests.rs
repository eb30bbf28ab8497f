//! An agent's requests: registering its node, reporting its inventory and health, syncing for its
//! assignments (the lease), the pods it started and that ended, their progress, and the log
//! requests it polls for. Each is bound to the node its certificate names.

use std::ops::ControlFlow;
use std::time::Duration;

use allot_common::api::{ApiError, Body, ErrorKind, Reply, Response};
use allot_core::machine::{Command, Machine};
use allot_core::views;
use allot_net::tls::Identity;

use crate::auth::*;
use crate::raft_inputs::Input;
use crate::shared::{Shared, MAX_SYNC_WAIT_MS};

/// The answer to `body` if it is one of these requests; otherwise `body` back.
pub(crate) async fn handle(body: Body, who: &Identity, sh: &Shared) -> ControlFlow<Response, Body> {
    match body {
        b @ (Body::PodProgress { .. }
        | Body::RegisterNode { .. }
        | Body::SetNodeHealth { .. }
        | Body::WorkloadStarted { .. }
        | Body::WorkloadExited { .. }
        | Body::ReportNode(..)
        | Body::LogPoll { .. }
        | Body::AgentSync { .. }
        | Body::PodsStarted { .. }
        | Body::PodsExited { .. }) => ControlFlow::Break(answer(b, who, sh).await),
        other => ControlFlow::Continue(other),
    }
}

async fn answer(body: Body, who: &Identity, sh: &Shared) -> Response {
    match body {
        Body::PodProgress {
            node,
            workload_id,
            rank,
            status,
        } => {
            node_scope(who, &node, "report pod progress")?;
            let status: String = status.chars().take(200).collect();
            sh.record_progress(workload_id, rank, status);
            Ok(Reply::Done)
        }
        Body::RegisterNode {
            name,
            instance_type,
            capacity,
        } => {
            node_scope(who, &name, "register nodes")?;
            sh.propose(Command::RegisterNode {
                name,
                instance_type,
                capacity,
            })
            .await
        }
        Body::SetNodeHealth {
            name,
            healthy,
            reason,
        } => {
            node_scope(who, &name, "report node health")?;
            sh.propose(Command::SetNodeHealth {
                name,
                healthy,
                reason,
            })
            .await
        }
        Body::WorkloadStarted { name } => {
            let node = report_scope(who)?;
            sh.propose(Command::WorkloadStarted { name, node }).await
        }
        Body::WorkloadExited { name, succeeded } => {
            let node = report_scope(who)?;
            sh.propose(Command::WorkloadExited {
                name,
                succeeded,
                node,
            })
            .await
        }
        Body::ReportNode(report) => {
            node_scope(who, &report.name, "report nodes")?;
            // An agent's registration is heard from it, as a sync is: a restarted agent's node
            // has been silent for longer than its lease, and without this the leader would
            // find it silent again between the registration and the first sync, and fail the
            // node it just took back (requeueing what was placed on it meanwhile).
            if report.lease_ms > 0 {
                let _ = sh.input.send(Input::Heartbeat(report.name.clone()));
            }
            sh.propose(Command::ReportNode(report)).await
        }
        Body::LogPoll { node, wait_ms } => {
            node_scope(who, &node, "poll for log requests")?;
            sh.leader_only()?;
            let wait = Duration::from_millis(u64::from(wait_ms.min(MAX_SYNC_WAIT_MS)));
            Ok(Reply::LogRequests(sh.logs.poll(&node, wait).await))
        }
        Body::AgentSync {
            node,
            known_digest,
            wait_ms,
        } => {
            node_scope(who, &node, "sync")?;
            let _ = sh.input.send(Input::Heartbeat(node.clone()));
            sh.long_poll(known_digest, wait_ms, move |m: &Machine| {
                let a = views::assignments(m, &node);
                (a.digest, Reply::Assignments(a))
            })
            .await
        }
        Body::PodsStarted {
            node,
            workload,
            workload_id,
            attempt,
            ranks,
        } => {
            let node = node_scope(who, &node, "report pods")?;
            sh.propose(Command::PodsStarted {
                node,
                workload,
                workload_id: Some(workload_id),
                attempt,
                ranks,
            })
            .await
        }
        Body::PodsExited {
            node,
            workload,
            workload_id,
            attempt,
            exits,
        } => {
            let node = node_scope(who, &node, "report pods")?;
            sh.propose(Command::PodsExited {
                node,
                workload,
                workload_id: Some(workload_id),
                attempt,
                exits,
            })
            .await
        }
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request routed to the agent handlers that is not one of theirs",
        )),
    }
}

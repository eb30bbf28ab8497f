//! An agent's writes: registering its node, reporting its inventory and health, the pods it
//! started and that ended. Each is bound to the node its certificate names. (Its syncs, pod
//! progress and log polls are the shell's: `requests.rs`.)

use std::ops::ControlFlow;

use allot_common::api::{ApiError, Body, ErrorKind};
use allot_core::machine::Command;
use allot_net::tls::Identity;

use crate::auth::*;
use crate::route::Route;

/// What `body` becomes if it is one of these requests (or why `who` may not make it);
/// otherwise `body` back.
pub(crate) fn route(body: Body, who: &Identity) -> ControlFlow<Result<Route, ApiError>, Body> {
    match body {
        b @ (Body::RegisterNode { .. }
        | Body::SetNodeHealth { .. }
        | Body::WorkloadStarted { .. }
        | Body::WorkloadExited { .. }
        | Body::ReportNode(..)
        | Body::PodsStarted { .. }
        | Body::PodsExited { .. }) => ControlFlow::Break(answer(b, who)),
        other => ControlFlow::Continue(other),
    }
}

fn answer(body: Body, who: &Identity) -> Result<Route, ApiError> {
    let cmd = match body {
        Body::RegisterNode {
            name,
            instance_type,
            capacity,
        } => {
            node_scope(who, &name, "register nodes")?;
            Command::RegisterNode {
                name,
                instance_type,
                capacity,
            }
        }
        Body::SetNodeHealth {
            name,
            healthy,
            reason,
        } => {
            node_scope(who, &name, "report node health")?;
            Command::SetNodeHealth {
                name,
                healthy,
                reason,
            }
        }
        Body::WorkloadStarted { name } => {
            let node = report_scope(who)?;
            Command::WorkloadStarted { name, node }
        }
        Body::WorkloadExited { name, succeeded } => {
            let node = report_scope(who)?;
            Command::WorkloadExited {
                name,
                succeeded,
                node,
            }
        }
        Body::ReportNode(report) => {
            node_scope(who, &report.name, "report nodes")?;
            // An agent's registration is heard from it, as a sync is: a restarted agent's node
            // has been silent for longer than its lease, and without this the leader would
            // find it silent again between the registration and the first sync, and fail the
            // node it just took back (requeueing what was placed on it meanwhile).
            if report.lease_ms > 0 {
                return Ok(Route::Report {
                    node: report.name.clone(),
                    cmd: Command::ReportNode(report),
                });
            }
            Command::ReportNode(report)
        }
        Body::PodsStarted {
            node,
            workload,
            workload_id,
            attempt,
            ranks,
        } => {
            let node = node_scope(who, &node, "report pods")?;
            Command::PodsStarted {
                node,
                workload,
                workload_id: Some(workload_id),
                attempt,
                ranks,
            }
        }
        Body::PodsExited {
            node,
            workload,
            workload_id,
            attempt,
            exits,
        } => {
            let node = node_scope(who, &node, "report pods")?;
            Command::PodsExited {
                node,
                workload,
                workload_id: Some(workload_id),
                attempt,
                exits,
            }
        }
        _ => {
            return Err(ApiError::new(
                ErrorKind::Invalid,
                "a request routed to the agent handlers that is not one of theirs",
            ))
        }
    };
    Ok(Route::Propose(cmd))
}

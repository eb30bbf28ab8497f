//! The shell's side of the API: every request, with the caller's identity, either goes to the
//! node on the raft thread (`Input::Request`: the node checks who asks and translates it, in
//! `admin_requests.rs`, `agent_requests.rs` and `user_requests.rs`), or is one the shell serves
//! itself: what streams or long-polls (watches, agents' syncs and log polls), and what answers
//! from this replica's own soft state (hello, the dashboard's login, pods' progress).

use std::time::Duration;

use allot_common::api::{ApiError, Body, ErrorKind, Reply, Response};
use allot_core::machine::Machine;
use allot_core::views;
use allot_net::tls::Identity;

use crate::auth::*;
use crate::raft_inputs::Input;
use crate::shared::{Shared, MAX_SYNC_WAIT_MS};

/// The answer to `body` from `who`.
pub(crate) async fn handle_request(body: Body, who: &Identity, sh: &Shared) -> Response {
    match body {
        Body::Hello => {
            let s = sh.status();
            Ok(Reply::Hello {
                version: sh.protocol,
                replica: sh.id,
                leader: (s.leader != 0).then_some(s.leader),
                leader_addr: sh.leader_addr(s.leader),
                identity: who.to_string(),
            })
        }
        Body::WebTicket => web_ticket(who, sh),
        Body::GetMembers => members(who, sh),
        Body::FormatProbe => match who {
            Identity::Coordinator { .. } => Ok(Reply::Format {
                reads: sh.format_reads,
            }),
            _ => Err(ApiError::new(
                ErrorKind::Forbidden,
                format!("{who} may not ask a replica's formats; only coordinators do"),
            )),
        },
        // Handled with their streams in serve_request.
        Body::Logs { .. } | Body::LogData { .. } => Err(ApiError::new(
            ErrorKind::Invalid,
            "logs are streamed: send this request on its own stream",
        )),
        Body::WatchWorkloads {
            filter,
            known_digest,
            wait_ms,
        } => {
            let filter = scoped_filter(who, filter)?;
            sh.long_poll(known_digest, wait_ms, move |m: &Machine| {
                let workloads = views::workloads(m, &filter);
                let digest = allot_common::api::digest_of(&workloads);
                (digest, Reply::WorkloadsAt { digest, workloads })
            })
            .await
        }
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
        other => {
            // What agents said of pods that do not run yet is this replica's soft state.
            let progress = matches!(other, Body::GetWorkloads(_) | Body::DescribeWorkload { .. });
            let mut r = sh.request(other, who).await;
            if progress {
                match &mut r {
                    Ok(Reply::Workloads(ws)) => ws.iter_mut().for_each(|w| sh.add_progress(w)),
                    Ok(Reply::Workload(w)) => sh.add_progress(w),
                    _ => {}
                }
            }
            r
        }
    }
}

/// A one-time login for this replica's dashboard, for an admin or a team user.
fn web_ticket(who: &Identity, sh: &Shared) -> Response {
    if !is_person(who) {
        return Err(forbidden(who, "sign in to the dashboard"));
    }
    let http = sh.http.get().ok_or_else(|| {
        ApiError::new(
            ErrorKind::Unavailable,
            format!(
                "coordinator {} serves no web pages: it was started without an HTTP address (--http)",
                sh.id
            ),
        )
    })?;
    let (ticket, expires_ms) = sh.web.issue(
        who,
        crate::web_session::Kind::Ticket,
        allot_common::timefmt::now_ms(),
    );
    Ok(Reply::WebTicket {
        ticket,
        http: http.to_string(),
        expires_ms,
    })
}

/// The replicas as this replica, the leader, sees them (a follower sends the caller to it).
fn members(who: &Identity, sh: &Shared) -> Response {
    admin_only(who, "list the coordinator replicas")?;
    // One look at the status: progress and roles from the same turn of a leader.
    let s = sh.status();
    if !s.is_leader {
        return Err(sh.leader_only().err().unwrap_or_else(|| {
            ApiError::new(
                ErrorKind::Unavailable,
                "this coordinator became the leader while answering; ask again",
            )
        }));
    }
    let members = s
        .members
        .iter()
        .map(|&(id, learner, progress)| {
            let (matched, active) = progress.unwrap_or((0, false));
            let role = match (id == s.leader, learner) {
                (true, _) => "leader",
                (_, true) => "learner",
                _ => "follower",
            };
            allot_common::api::MemberView {
                id,
                address: sh.peer_address(id).unwrap_or_default(),
                role: role.to_string(),
                matched,
                behind: s.commit.saturating_sub(matched),
                active,
            }
        })
        .collect();
    Ok(Reply::Members(members))
}

//! API requests into commands and reads: each request, with the caller's identity, is checked
//! (`auth.rs`), then proposed to the log or read from the applied state (`shared.rs`).

use allot_common::api::{
    ApiError, Body, ErrorKind, HistoryFilter, Reply, Response, WorkloadFilter, WorkloadSelector,
};
use allot_core::machine::{Command, Machine};
use allot_core::views;
use allot_net::tls::Identity;
use allot_net::wire;
use std::ops::ControlFlow;

use crate::auth::*;
use crate::shared::Shared;

/// The answer to `body` from `who`: an admin's configuration requests (`admin_requests.rs`), an
/// agent's (`agent_requests.rs`), or a user's: submissions and cancels here, reads in `read`.
pub(crate) async fn handle_request(body: Body, who: &Identity, sh: &Shared) -> Response {
    let body = match crate::admin_requests::handle(body, who, sh).await {
        ControlFlow::Break(r) => return r,
        ControlFlow::Continue(b) => b,
    };
    let body = match crate::agent_requests::handle(body, who, sh).await {
        ControlFlow::Break(r) => return r,
        ControlFlow::Continue(b) => b,
    };
    match body {
        Body::Hello => {
            let s = sh.status();
            Ok(Reply::Hello {
                version: wire::PROTOCOL_VERSION,
                replica: sh.id,
                leader: (s.leader != 0).then_some(s.leader),
                leader_addr: sh.leader_addr(s.leader),
                identity: who.to_string(),
            })
        }
        Body::WebTicket => web_ticket(who, sh),
        Body::Submit(input) => {
            check_submit_team(who, &input.spec.team)?;
            check_placeable(&input)?;
            sh.check_submit_rate(who, 1)?;
            sh.propose(Command::Submit(input)).await
        }
        Body::SubmitBatch(inputs) => {
            for i in &inputs {
                check_submit_team(who, &i.spec.team)?;
                check_placeable(i)?;
            }
            sh.check_submit_rate(who, inputs.len())?;
            sh.propose(Command::SubmitBatch(inputs)).await
        }
        Body::Cancel { name, team } => {
            let team = workload_scope(who, team, "cancel workloads")?;
            sh.propose(Command::Cancel { name, team }).await
        }
        Body::CancelMatching { selector, dry_run } => {
            let scope = team_scope(who, "cancel workloads")?;
            let selector = match (scope, selector.team.clone()) {
                (Some(mine), Some(asked)) if mine != asked => {
                    return Err(forbidden(
                        who,
                        &format!(
                            "cancel team {asked:?}'s workloads; it acts for team {mine:?} only"
                        ),
                    ))
                }
                (Some(mine), _) => WorkloadSelector {
                    team: Some(mine),
                    ..selector
                },
                (None, _) => selector,
            };
            selector
                .check()
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            if dry_run {
                sh.read(Box::new(move |m: &Machine| m.cancel_preview(&selector)))
                    .await
            } else {
                sh.propose(Command::CancelMatching { selector }).await
            }
        }
        Body::SubmitArray { input, array } => {
            check_submit_team(who, &input.spec.team)?;
            check_placeable(&input)?;
            let n = allot_common::array::ArrayIndices::parse(&array)
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            sh.check_submit_rate(who, n.max_running.unwrap_or(n.len()).min(n.len()) as usize)?;
            sh.propose(Command::SubmitArray { input, array }).await
        }
        other => read(other, who, sh).await,
    }
}

/// A user's reads: lists, descriptions, history, usage, explanations, watches.
async fn read(body: Body, who: &Identity, sh: &Shared) -> Response {
    match body {
        Body::GetArrays { team } => {
            let filter = scoped_filter(who, WorkloadFilter { team, all: false })?;
            sh.read(Box::new(move |m: &Machine| {
                Ok(Reply::Arrays(m.array_views(filter.team.as_deref())))
            }))
            .await
        }
        Body::Usage(q) => {
            let team = match (team_scope(who, "read usage reports")?, q.team.clone()) {
                (Some(mine), Some(asked)) if mine != asked => {
                    return Err(forbidden(
                        who,
                        &format!("read team {asked:?}'s usage; it acts for team {mine:?} only"),
                    ))
                }
                (mine, asked) => mine.or(asked),
            };
            let q = allot_common::usage::UsageQuery { team, ..q };
            let now = allot_common::timefmt::now_ms();
            sh.read(Box::new(move |m: &Machine| {
                allot_core::usage_report::report(&m.usage, &q, now)
                    .map(Reply::Usage)
                    .map_err(|e| ApiError::new(ErrorKind::Invalid, e))
            }))
            .await
        }
        Body::Recorded(q) => {
            admin_only(who, "read what the cluster recorded")?;
            if q.until_ms <= q.since_ms {
                return Err(ApiError::new(
                    ErrorKind::Invalid,
                    "the period ends before it starts: --until must be later than --since",
                ));
            }
            sh.read(Box::new(move |m: &Machine| {
                let r = allot_core::recorded::recorded(m, q.since_ms, q.until_ms);
                Ok(Reply::Recorded(Box::new(r)))
            }))
            .await
        }
        Body::History(f) => {
            let scoped = scoped_filter(
                who,
                WorkloadFilter {
                    team: f.team.clone(),
                    all: true,
                },
            )?;
            let f = HistoryFilter {
                team: scoped.team,
                ..f
            };
            sh.read(Box::new(move |m: &Machine| {
                m.history_rows(&f).map(Reply::History)
            }))
            .await
        }
        Body::GetWorkloads(filter) => {
            let filter = scoped_filter(who, filter)?;
            let mut r = sh
                .read(Box::new(move |m: &Machine| {
                    Ok(Reply::Workloads(views::workloads(m, &filter)))
                }))
                .await;
            if let Ok(Reply::Workloads(ws)) = &mut r {
                ws.iter_mut().for_each(|w| sh.add_progress(w));
            }
            r
        }
        Body::DescribeWorkload { name, team } => {
            let scope = workload_scope(who, team, "describe workloads")?;
            let mut r = sh
                .read(Box::new(move |m: &Machine| {
                    let id = m.state.find_scoped(&name, scope.as_deref())?;
                    Ok(Reply::Workload(Box::new(views::workload(m, id))))
                }))
                .await;
            if let Ok(Reply::Workload(w)) = &mut r {
                sh.add_progress(w);
            }
            r
        }
        Body::GetNodes => {
            sh.read(Box::new(|m: &Machine| Ok(Reply::Nodes(views::nodes(m)))))
                .await
        }
        Body::GetTeams => {
            sh.read(Box::new(|m: &Machine| Ok(Reply::Teams(views::teams(m)))))
                .await
        }
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
        Body::Explain { name, team } => {
            let scope = workload_scope(who, team, "explain workloads")?;
            sh.read(Box::new(move |m: &Machine| {
                let id = m.state.find_scoped(&name, scope.as_deref())?;
                Ok(Reply::Explanation(allot_core::explain::explain(m, id)))
            }))
            .await
        }
        // Answered in handle_request, admin_requests.rs or agent_requests.rs.
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request neither the admin, the agent nor the user handlers answer",
        )),
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

/// A live cluster places every pod on a node: a pod set that requests nothing is refused.
fn check_placeable(input: &allot_common::api::SubmitInput) -> Result<(), ApiError> {
    input
        .spec
        .check_placeable()
        .map_err(|e| ApiError::new(ErrorKind::Invalid, e.to_string()))
}

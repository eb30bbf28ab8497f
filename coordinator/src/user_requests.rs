//! A user's requests: submissions and cancels, and the reads of lists, descriptions, history,
//! usage and explanations. Each is checked against who asks (`auth.rs`) and becomes a route
//! (`route.rs`) that the node carries out. (Watches, logs and the dashboard's login are the
//! shell's: `requests.rs`.)

use std::ops::ControlFlow;

use allot_common::api::{
    ApiError, Body, ErrorKind, HistoryFilter, Reply, WorkloadFilter, WorkloadSelector,
};
use allot_core::machine::{Command, Machine};
use allot_core::views;
use allot_net::tls::Identity;

use crate::auth::*;
use crate::route::Route;

/// What `body` becomes if it is one of these requests (or why `who` may not make it), `wall`
/// being the time reads of usage count to; otherwise `body` back.
pub(crate) fn route(
    body: Body,
    who: &Identity,
    wall: i64,
) -> ControlFlow<Result<Route, ApiError>, Body> {
    match body {
        b @ (Body::Submit(..)
        | Body::SubmitBatch(..)
        | Body::Cancel { .. }
        | Body::CancelMatching { .. }
        | Body::SubmitArray { .. }) => ControlFlow::Break(write(b, who)),
        b @ (Body::GetArrays { .. }
        | Body::Usage(..)
        | Body::Recorded(..)
        | Body::History(..)
        | Body::GetWorkloads(..)
        | Body::DescribeWorkload { .. }
        | Body::GetNodes
        | Body::GetTopology
        | Body::GetTeams
        | Body::Explain { .. }) => ControlFlow::Break(read(b, who, wall)),
        other => ControlFlow::Continue(other),
    }
}

fn write(body: Body, who: &Identity) -> Result<Route, ApiError> {
    match body {
        Body::Submit(input) => {
            check_submit_team(who, &input.spec.team)?;
            check_placeable(&input)?;
            Ok(Route::Submits {
                cmd: Command::Submit(input),
                count: 1,
            })
        }
        Body::SubmitBatch(inputs) => {
            for i in &inputs {
                check_submit_team(who, &i.spec.team)?;
                check_placeable(i)?;
            }
            let count = inputs.len();
            Ok(Route::Submits {
                cmd: Command::SubmitBatch(inputs),
                count,
            })
        }
        Body::Cancel { name, team } => {
            let team = workload_scope(who, team, "cancel workloads")?;
            Ok(Route::Propose(Command::Cancel { name, team }))
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
                Ok(Route::Read(Box::new(move |m: &Machine| {
                    m.cancel_preview(&selector)
                })))
            } else {
                Ok(Route::Propose(Command::CancelMatching { selector }))
            }
        }
        Body::SubmitArray { input, array } => {
            check_submit_team(who, &input.spec.team)?;
            check_placeable(&input)?;
            let n = allot_common::array::ArrayIndices::parse(&array)
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            let count = n.max_running.unwrap_or(n.len()).min(n.len()) as usize;
            Ok(Route::Submits {
                cmd: Command::SubmitArray { input, array },
                count,
            })
        }
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request routed to the user's writes that is not one of them",
        )),
    }
}

/// A user's reads: lists, descriptions, history, usage, explanations.
fn read(body: Body, who: &Identity, wall: i64) -> Result<Route, ApiError> {
    match body {
        Body::GetArrays { team } => {
            let filter = scoped_filter(who, WorkloadFilter { team, all: false })?;
            Ok(Route::Read(Box::new(move |m: &Machine| {
                Ok(Reply::Arrays(m.array_views(filter.team.as_deref())))
            })))
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
            let now = wall;
            Ok(Route::HeavyRead(Box::new(move |m: &Machine| {
                allot_core::usage_report::report(&m.usage, &q, now)
                    .map(Reply::Usage)
                    .map_err(|e| ApiError::new(ErrorKind::Invalid, e))
            })))
        }
        Body::Recorded(q) => {
            admin_only(who, "read what the cluster recorded")?;
            if q.until_ms <= q.since_ms {
                return Err(ApiError::new(
                    ErrorKind::Invalid,
                    "the period ends before it starts: --until must be later than --since",
                ));
            }
            Ok(Route::HeavyRead(Box::new(move |m: &Machine| {
                let r = allot_core::recorded::recorded(m, q.since_ms, q.until_ms);
                Ok(Reply::Recorded(Box::new(r)))
            })))
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
            Ok(Route::HeavyRead(Box::new(move |m: &Machine| {
                m.history_rows(&f).map(Reply::History)
            })))
        }
        Body::GetWorkloads(filter) => {
            let filter = scoped_filter(who, filter)?;
            Ok(Route::HeavyRead(Box::new(move |m: &Machine| {
                Ok(Reply::Workloads(views::workloads(m, &filter)))
            })))
        }
        Body::DescribeWorkload { name, team } => {
            let scope = workload_scope(who, team, "describe workloads")?;
            Ok(Route::Read(Box::new(move |m: &Machine| {
                let id = m.state.find_scoped(&name, scope.as_deref())?;
                Ok(Reply::Workload(Box::new(views::workload(m, id))))
            })))
        }
        Body::GetNodes => Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::Nodes(views::nodes(m)))
        }))),
        Body::GetTopology => Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::Topology(views::topology(m)))
        }))),
        Body::GetTeams => Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::Teams(views::teams(m)))
        }))),
        Body::Explain { name, team } => {
            let scope = workload_scope(who, team, "explain workloads")?;
            Ok(Route::HeavyRead(Box::new(move |m: &Machine| {
                let id = m.state.find_scoped(&name, scope.as_deref())?;
                Ok(Reply::Explanation(allot_core::explain::explain(
                    m, id, wall,
                )))
            })))
        }
        // The shell's (`requests.rs`), or another handler's.
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request neither the admin, the agent nor the user handlers answer",
        )),
    }
}

/// A live cluster places every pod on a node: a pod set that requests nothing is refused.
/// What a submit is checked for before it is proposed: that it can be placed at all, and its
/// auto-resume and topology labels. (Checks here, not where the log is applied, so that replicas of the
/// release before, which apply the same entries, decide them alike.)
fn check_placeable(input: &allot_common::api::SubmitInput) -> Result<(), ApiError> {
    let invalid = |e: String| ApiError::new(ErrorKind::Invalid, e);
    input
        .spec
        .check_placeable()
        .map_err(|e| invalid(e.to_string()))?;
    allot_common::auto_resume::retries(&input.spec.labels)
        .map_err(|e| invalid(format!("workload {:?}: {e}", input.spec.name)))?;
    let counts: Vec<u32> = input.spec.pod_sets.iter().map(|p| p.count).collect();
    allot_common::topology::ask(&input.spec.labels, &counts)
        .map_err(|e| invalid(format!("workload {:?}: {e}", input.spec.name)))?;
    Ok(())
}

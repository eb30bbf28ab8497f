//! An admin's configuration requests: compute quotas, the cluster scheduler config, teams'
//! registry credentials (which a team's own users may set too), and node maintenance (cordon,
//! uncordon, drain), and the coordinator replicas themselves (`members.rs`).

use std::ops::ControlFlow;

use allot_common::api::{ApiError, Body, ErrorKind, RegistryCredentialView, Reply};
use allot_core::machine::{Command, Machine, SchedulerConfigSet};
use allot_net::tls::Identity;

use crate::auth::*;
use crate::config_text;
use crate::members::MemberChange;
use crate::route::Route;

/// What `body` becomes if it is one of these requests (or why `who` may not make it);
/// otherwise `body` back.
pub(crate) fn route(body: Body, who: &Identity) -> ControlFlow<Result<Route, ApiError>, Body> {
    match body {
        b @ (Body::CreateComputeQuota(..)
        | Body::UpdateComputeQuota { .. }
        | Body::DeleteComputeQuota { .. }
        | Body::DescribeComputeQuota { .. }
        | Body::ListComputeQuotas
        | Body::CreateSchedulerConfig { .. }
        | Body::UpdateSchedulerConfig { .. }
        | Body::DescribeSchedulerConfig
        | Body::PutRegistryCredentials { .. }
        | Body::DeleteRegistryCredentials { .. }
        | Body::ListRegistryCredentials { .. }
        | Body::CordonNode { .. }
        | Body::DrainNode { .. }
        | Body::RemoveNode { .. }
        | Body::Backup
        | Body::BackupStream
        | Body::SetGangScheduling(_)
        | Body::GetGangScheduling) => ControlFlow::Break(answer(b, who)),
        Body::AddMember { id, address } => ControlFlow::Break(
            admin_only(who, "add coordinator replicas")
                .map(|_| Route::Member(MemberChange::Add { id, address })),
        ),
        Body::RemoveMember { id } => ControlFlow::Break(
            admin_only(who, "remove coordinator replicas")
                .map(|_| Route::Member(MemberChange::Remove { id })),
        ),
        Body::SetCohort(spec) => ControlFlow::Break(
            admin_only(who, "create or change cohorts")
                .map(|_| Route::Propose(Command::SetCohort(spec))),
        ),
        Body::DeleteCohort { name } => ControlFlow::Break(
            admin_only(who, "delete cohorts")
                .map(|_| Route::Propose(Command::DeleteCohort { name })),
        ),
        Body::SetTeamCohort { team, cohort } => ControlFlow::Break(
            admin_only(who, "put teams in cohorts")
                .map(|_| Route::Propose(Command::SetTeamCohort { team, cohort })),
        ),
        Body::SetCohortWeight { cohort, weight } => ControlFlow::Break(
            admin_only(who, "weigh cohorts")
                .map(|_| Route::Propose(Command::SetCohortWeight { cohort, weight })),
        ),
        Body::ListCohorts => ControlFlow::Break(Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::Cohorts(m.cohort_views()))
        })))),
        Body::ListCohortWeights => ControlFlow::Break(Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::CohortWeights(m.cohort_weight_views()))
        })))),
        other => ControlFlow::Continue(other),
    }
}

fn answer(body: Body, who: &Identity) -> Result<Route, ApiError> {
    match body {
        Body::CreateComputeQuota(input) => {
            admin_only(who, "create compute quotas")?;
            allot_core::machine::check_quota_input(&input)?;
            Ok(Route::Propose(Command::CreateComputeQuota(input)))
        }
        Body::UpdateComputeQuota {
            input,
            target_version,
        } => {
            admin_only(who, "update compute quotas")?;
            allot_core::machine::check_quota_input(&input)?;
            Ok(Route::Propose(Command::UpdateComputeQuota {
                input,
                target_version,
            }))
        }
        Body::DeleteComputeQuota { name } => {
            admin_only(who, "delete compute quotas")?;
            Ok(Route::Propose(Command::DeleteComputeQuota { name }))
        }
        Body::DescribeComputeQuota { name } => {
            Ok(Route::Read(Box::new(move |m: &Machine| {
                match m.quotas.get(&name) {
                    Some(q) => Ok(Reply::Quota(q.view())),
                    None => Err(ApiError::new(
                        ErrorKind::NotFound,
                        format!(
                            "unknown compute quota {name:?}; compute quotas: {}",
                            m.quotas.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    )),
                }
            })))
        }
        Body::ListComputeQuotas => Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::Quotas(m.quotas.values().map(|q| q.view()).collect()))
        }))),
        Body::CreateSchedulerConfig {
            name,
            config,
            limits,
            description,
            stability,
        } => {
            admin_only(who, "create the cluster scheduler config")?;
            allot_common::names::check_entity_name("scheduler config", &name)
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            let set = config_text::request(name, None, &config, limits, description, stability)?;
            Ok(config_route(set))
        }
        Body::UpdateSchedulerConfig {
            name,
            config,
            target_version,
            limits,
            description,
            stability,
        } => {
            admin_only(who, "update the cluster scheduler config")?;
            let target = Some(target_version);
            let set = config_text::request(name, target, &config, limits, description, stability)?;
            Ok(config_route(set))
        }
        Body::DescribeSchedulerConfig => Ok(Route::Read(Box::new(|m: &Machine| {
            match &m.scheduler_config {
                Some(r) => Ok(Reply::SchedulerConfig(config_text::with_text(
                    r.view.clone(),
                    m.state.policy(),
                ))),
                None => Err(ApiError::new(
                    ErrorKind::NotFound,
                    "the cluster has no scheduler config; create one with create-cluster-scheduler-config",
                )),
            }
        }))),
        Body::PutRegistryCredentials {
            team,
            registry,
            credentials,
        } => {
            check_team_secret(who, &team, "store registry credentials")?;
            allot_common::image::check_registry_credentials(&registry, &credentials)
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            Ok(Route::Propose(Command::PutRegistryCredentials {
                team,
                registry,
                credentials,
            }))
        }
        Body::DeleteRegistryCredentials { team, registry } => {
            check_team_secret(who, &team, "delete registry credentials")?;
            Ok(Route::Propose(Command::DeleteRegistryCredentials {
                team,
                registry,
            }))
        }
        Body::ListRegistryCredentials { team } => {
            let scope = team_scope(who, "list registry credentials")?;
            if let (Some(mine), Some(t)) = (&scope, &team) {
                if mine != t {
                    return Err(forbidden(
                        who,
                        &format!(
                            "list team {t:?}'s registry credentials; it acts for {mine:?} only"
                        ),
                    ));
                }
            }
            let want = scope.or(team);
            Ok(Route::Read(Box::new(move |m: &Machine| {
                Ok(Reply::RegistryCredentials(
                    m.registry_credentials
                        .iter()
                        .filter(|(t, _)| want.as_ref().is_none_or(|w| w == *t))
                        .flat_map(|(t, regs)| {
                            regs.iter().map(move |(r, c)| RegistryCredentialView {
                                team: t.clone(),
                                registry: r.clone(),
                                username: c.username.clone(),
                            })
                        })
                        .collect(),
                ))
            })))
        }
        b @ (Body::CordonNode { .. }
        | Body::Backup
        | Body::BackupStream
        | Body::RemoveNode { .. }
        | Body::DrainNode { .. }) => maintenance(b, who),
        b @ (Body::SetGangScheduling(_) | Body::GetGangScheduling) => gang_scheduling(b, who),
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request routed to the admin handlers that is not one of theirs",
        )),
    }
}

/// Gang scheduling: set by admins, read by anyone (it says how long a user's gang may take to
/// start).
fn gang_scheduling(body: Body, who: &Identity) -> Result<Route, ApiError> {
    match body {
        Body::SetGangScheduling(policy) => {
            admin_only(who, "set gang scheduling")?;
            if let Some(p) = &policy {
                p.validate()
                    .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            }
            Ok(Route::Propose(Command::SetPodsReady(policy)))
        }
        _ => Ok(Route::Read(Box::new(|m: &Machine| {
            Ok(Reply::GangScheduling(m.pods_ready.policy))
        }))),
    }
}

/// Node maintenance and backups (admins only).
fn maintenance(body: Body, who: &Identity) -> Result<Route, ApiError> {
    match body {
        Body::CordonNode { name, cordoned } => {
            let what = if cordoned {
                "cordon nodes"
            } else {
                "uncordon nodes"
            };
            admin_only(who, what)?;
            Ok(Route::Propose(Command::CordonNode { name, cordoned }))
        }
        Body::Backup => {
            admin_only(who, "take backups")?;
            Ok(Route::HeavyRead(Box::new(|m: &Machine| {
                crate::backup::take(m, allot_common::timefmt::now_ms())
            })))
        }
        Body::BackupStream => {
            admin_only(who, "take backups")?;
            Ok(Route::HeavyRead(Box::new(|m: &Machine| {
                crate::backup::take_whole(m, allot_common::timefmt::now_ms())
            })))
        }
        Body::RemoveNode { name } => {
            admin_only(who, "remove nodes")?;
            Ok(Route::Propose(Command::RemoveNode { name }))
        }
        Body::DrainNode { name } => {
            admin_only(who, "drain nodes")?;
            Ok(Route::Propose(Command::DrainNode { name }))
        }
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request routed to node maintenance that is not one of it",
        )),
    }
}

/// A scheduler config change; the answer shows the config as the policy set renders.
fn config_route(set: SchedulerConfigSet) -> Route {
    let policy = set.policy.clone();
    Route::Config {
        cmd: Command::SetSchedulerConfig(set),
        policy,
    }
}

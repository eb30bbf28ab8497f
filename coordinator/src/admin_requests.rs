//! An admin's configuration requests: compute quotas, the cluster scheduler config, teams'
//! registry credentials (which a team's own users may set too), and node maintenance (cordon,
//! uncordon, drain).

use std::ops::ControlFlow;

use allot_common::api::{ApiError, Body, ErrorKind, RegistryCredentialView, Reply, Response};
use allot_core::machine::{Command, Machine, SchedulerConfigSet};
use allot_net::tls::Identity;

use crate::auth::*;
use crate::config_text;
use crate::shared::Shared;

/// The answer to `body` if it is one of these requests; otherwise `body` back.
pub(crate) async fn handle(body: Body, who: &Identity, sh: &Shared) -> ControlFlow<Response, Body> {
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
        | Body::DrainNode { .. }) => ControlFlow::Break(answer(b, who, sh).await),
        other => ControlFlow::Continue(other),
    }
}

async fn answer(body: Body, who: &Identity, sh: &Shared) -> Response {
    match body {
        Body::CreateComputeQuota(input) => {
            admin_only(who, "create compute quotas")?;
            allot_core::machine::check_quota_input(&input)?;
            sh.propose(Command::CreateComputeQuota(input)).await
        }
        Body::UpdateComputeQuota {
            input,
            target_version,
        } => {
            admin_only(who, "update compute quotas")?;
            allot_core::machine::check_quota_input(&input)?;
            sh.propose(Command::UpdateComputeQuota {
                input,
                target_version,
            })
            .await
        }
        Body::DeleteComputeQuota { name } => {
            admin_only(who, "delete compute quotas")?;
            sh.propose(Command::DeleteComputeQuota { name }).await
        }
        Body::DescribeComputeQuota { name } => {
            sh.read(Box::new(move |m: &Machine| match m.quotas.get(&name) {
                Some(q) => Ok(Reply::Quota(q.view())),
                None => Err(ApiError::new(
                    ErrorKind::NotFound,
                    format!(
                        "unknown compute quota {name:?}; compute quotas: {}",
                        m.quotas.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )),
            }))
            .await
        }
        Body::ListComputeQuotas => {
            sh.read(Box::new(|m: &Machine| {
                Ok(Reply::Quotas(m.quotas.values().map(|q| q.view()).collect()))
            }))
            .await
        }
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
            propose_config(sh, set).await
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
            propose_config(sh, set).await
        }
        Body::DescribeSchedulerConfig => {
            sh.read(Box::new(|m: &Machine| match &m.scheduler_config {
                Some(r) => Ok(Reply::SchedulerConfig(config_text::with_text(
                    r.view.clone(),
                    &m.state.policy,
                ))),
                None => Err(ApiError::new(
                    ErrorKind::NotFound,
                    "the cluster has no scheduler config; create one with create-cluster-scheduler-config",
                )),
            }))
            .await
        }
        Body::PutRegistryCredentials {
            team,
            registry,
            credentials,
        } => {
            check_team_secret(who, &team, "store registry credentials")?;
            allot_common::image::check_registry_credentials(&registry, &credentials)
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
            sh.propose(Command::PutRegistryCredentials {
                team,
                registry,
                credentials,
            })
            .await
        }
        Body::DeleteRegistryCredentials { team, registry } => {
            check_team_secret(who, &team, "delete registry credentials")?;
            sh.propose(Command::DeleteRegistryCredentials { team, registry })
                .await
        }
        Body::ListRegistryCredentials { team } => {
            let scope = team_scope(who, "list registry credentials")?;
            if let (Some(mine), Some(t)) = (&scope, &team) {
                if mine != t {
                    return Err(forbidden(
                        who,
                        &format!("list team {t:?}'s registry credentials; it acts for {mine:?} only"),
                    ));
                }
            }
            let want = scope.or(team);
            sh.read(Box::new(move |m: &Machine| {
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
            }))
            .await
        }
        Body::CordonNode { name, cordoned } => {
            let what = if cordoned { "cordon nodes" } else { "uncordon nodes" };
            admin_only(who, what)?;
            sh.propose(Command::CordonNode { name, cordoned }).await
        }
        Body::DrainNode { name } => {
            admin_only(who, "drain nodes")?;
            sh.propose(Command::DrainNode { name }).await
        }
        _ => Err(ApiError::new(
            ErrorKind::Invalid,
            "a request routed to the admin handlers that is not one of theirs",
        )),
    }
}

/// Proposes a scheduler config change; the reply shows the config as the policy set renders.
async fn propose_config(sh: &Shared, set: SchedulerConfigSet) -> Response {
    let policy = set.policy.clone();
    match sh.propose(Command::SetSchedulerConfig(set)).await? {
        Reply::SchedulerConfig(view) => Ok(Reply::SchedulerConfig(config_text::with_text(
            view, &policy,
        ))),
        other => Ok(other),
    }
}

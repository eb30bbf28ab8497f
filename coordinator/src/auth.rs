//! Who may do what: the scope of each identity (an admin acts on every team, a user on its own
//! team, a node on itself), checked before a request becomes a command.

use allot_common::api::{ApiError, Body, ErrorKind, WorkloadFilter};
use allot_net::tls::Identity;

pub(crate) fn forbidden(who: &Identity, what: &str) -> ApiError {
    ApiError::new(ErrorKind::Forbidden, format!("{who} may not {what}"))
}

pub(crate) fn admin_only(who: &Identity, what: &str) -> Result<(), ApiError> {
    match who {
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(()),
        _ => Err(forbidden(
            who,
            &format!("{what}; it needs an admin certificate"),
        )),
    }
}

/// Whose workload a request names: a user's own team always; for admins the team they name,
/// if any (names are unique within a team only).
pub(crate) fn workload_scope(
    who: &Identity,
    team: Option<String>,
    what: &str,
) -> Result<Option<String>, ApiError> {
    match who {
        Identity::User { team: mine } => Ok(Some(mine.clone())),
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(team),
        Identity::Node { .. } => Err(forbidden(who, what)),
    }
}

/// The team a user certificate is bound to (`None` for admins: every team).
pub(crate) fn team_scope(who: &Identity, what: &str) -> Result<Option<String>, ApiError> {
    match who {
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(None),
        Identity::User { team } => Ok(Some(team.clone())),
        Identity::Node { .. } => Err(forbidden(who, what)),
    }
}

/// The node a node certificate is bound to (`None` for admins).
pub(crate) fn node_scope(
    who: &Identity,
    node: &str,
    what: &str,
) -> Result<Option<String>, ApiError> {
    match who {
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(None),
        Identity::Node { node: mine } if mine == node => Ok(Some(mine.clone())),
        Identity::Node { node: mine } => Err(forbidden(
            who,
            &format!("{what} for node {node:?}; it reports only for node {mine:?}"),
        )),
        Identity::User { .. } => Err(forbidden(
            who,
            &format!("{what}; it needs a node certificate"),
        )),
    }
}

/// A user lists its own team's workloads only.
pub(crate) fn scoped_filter(
    who: &Identity,
    filter: WorkloadFilter,
) -> Result<WorkloadFilter, ApiError> {
    let scope = team_scope(who, "list workloads")?;
    match (scope, filter.team.clone()) {
        (Some(mine), Some(asked)) if mine != asked => Err(forbidden(
            who,
            &format!("list team {asked:?}'s workloads; it acts for team {mine:?} only"),
        )),
        (Some(mine), _) => Ok(WorkloadFilter {
            team: Some(mine),
            ..filter
        }),
        (None, _) => Ok(filter),
    }
}

pub(crate) fn report_scope(who: &Identity) -> Result<Option<String>, ApiError> {
    match who {
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(None),
        Identity::Node { node } => Ok(Some(node.clone())),
        Identity::User { .. } => Err(forbidden(
            who,
            "report workload state; it needs a node certificate",
        )),
    }
}

/// A team's secrets are set by admins and by the team's own users, nobody else.
pub(crate) fn check_team_secret(who: &Identity, team: &str, what: &str) -> Result<(), ApiError> {
    match who {
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(()),
        Identity::User { team: mine } if mine == team => Ok(()),
        Identity::User { team: mine } => Err(forbidden(
            who,
            &format!("{what} of team {team:?}; it acts for team {mine:?} only"),
        )),
        Identity::Node { .. } => Err(forbidden(who, what)),
    }
}

pub(crate) fn check_submit_team(who: &Identity, team: &str) -> Result<(), ApiError> {
    match who {
        Identity::Admin { .. } | Identity::Coordinator { .. } => Ok(()),
        Identity::User { team: mine } if mine == team => Ok(()),
        Identity::User { team: mine } => Err(forbidden(
            who,
            &format!("submit workloads to team {team:?}; it acts for team {mine:?} only"),
        )),
        Identity::Node { .. } => Err(forbidden(who, "submit workloads")),
    }
}

/// Whether `who` is a person (an admin or a team user), not a node or a coordinator.
pub(crate) fn is_person(who: &Identity) -> bool {
    matches!(who, Identity::Admin { .. } | Identity::User { .. })
}

/// The request and identity a coordinator's `OnBehalf` carries: an admin's or a team user's,
/// never an agent's or another coordinator's, and never wrapped twice.
pub(crate) fn on_behalf(
    who: &Identity,
    identity: &str,
    body: Body,
) -> Result<(Body, Identity), ApiError> {
    if !matches!(who, Identity::Coordinator { .. }) {
        return Err(forbidden(who, "send requests on behalf of others"));
    }
    let as_who = Identity::from_uri(identity).map_err(|e| {
        ApiError::new(
            ErrorKind::Invalid,
            format!("on behalf of {identity:?}: {e}"),
        )
    })?;
    if !is_person(&as_who) {
        return Err(ApiError::new(
            ErrorKind::Invalid,
            format!("on behalf of {as_who}: only admins and team users are forwarded"),
        ));
    }
    if matches!(body, Body::OnBehalf { .. }) {
        return Err(ApiError::new(
            ErrorKind::Invalid,
            "a forwarded request forwards nothing further",
        ));
    }
    Ok((body, as_who))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_coordinators_forward_and_only_for_admins_and_team_users() {
        let coordinator = Identity::Coordinator { id: 2 };
        let user = Identity::User {
            team: "team-a".into(),
        };
        let (body, who) = on_behalf(&coordinator, &user.uri(), Body::GetTeams).unwrap();
        assert_eq!((body, who), (Body::GetTeams, user.clone()));
        // A user cannot pass as another.
        let other = Identity::User {
            team: "team-b".into(),
        };
        let e = on_behalf(&user, &other.uri(), Body::GetTeams).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Forbidden, "{}", e.message);
        // Agents and coordinators are not forwarded; nothing is forwarded twice.
        let node = Identity::Node { node: "n1".into() };
        let e = on_behalf(&coordinator, &node.uri(), Body::GetTeams).unwrap_err();
        assert!(
            e.message.contains("only admins and team users"),
            "{}",
            e.message
        );
        let twice = Body::OnBehalf {
            identity: user.uri(),
            body: Box::new(Body::GetTeams),
        };
        let e = on_behalf(&coordinator, &user.uri(), twice).unwrap_err();
        assert!(
            e.message.contains("forwards nothing further"),
            "{}",
            e.message
        );
        let e = on_behalf(&coordinator, "https://x", Body::GetTeams).unwrap_err();
        assert!(e.message.contains("https://x"), "{}", e.message);
    }
}

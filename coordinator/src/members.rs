//! Membership changes: coordinator replicas added and removed with raft's configuration
//! changes, one at a time (`Replica::propose_member_change`).
//!
//! - **Add** puts the new replica in as a *learner*: it gets the log (first a snapshot, taken
//!   by every replica as it applies the change, so that the snapshot's configuration holds the
//!   learner) but does not vote, so a replica still catching up never counts toward a quorum.
//!   The leader makes it a voter once it has matched the log to within `CAUGHT_UP` entries
//!   (`Replica::promote_caught_up`). The address goes into the log entry's context, and every
//!   replica keeps it in `Machine::members`, so a replica that restarts, or one that becomes
//!   leader, reaches the new one.
//! - **Remove** takes a voter or a learner out. It is refused when the voters that would remain
//!   could not form a quorum among those the leader has heard from lately, and for the leader
//!   itself, which hands leadership to the most caught-up voter first (the caller asks again,
//!   and the new leader removes it).
//!
//! Changes need cluster format 7 (`FORMAT_MEMBERS`): a replica of a release before would not
//! apply them.

use allot_common::api::{ApiError, ErrorKind};

/// A change an admin asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    Add { id: u64, address: String },
    Remove { id: u64 },
}

/// A learner this close to the leader's commit index (in entries) is made a voter.
pub const CAUGHT_UP: u64 = 100;

/// Checks an address peers and clients reach a replica at: `HOST:PORT`.
pub fn check_address(address: &str) -> Result<(), ApiError> {
    let bad = |why: &str| {
        ApiError::new(
            ErrorKind::Invalid,
            format!("replica address {address:?}: {why}; expected HOST:PORT, for example 10.0.0.4:7000 or coord-4.allot:7000"),
        )
    };
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("no host, or a host with spaces"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("the port is not a number from 1 to 65535")),
    }
}

/// The context of a configuration change's log entry: the proposer's id and token (so its
/// caller is answered once the change is applied; token 0 answers no one), then the address of
/// an added replica, and a line `ID=ADDRESS` for each member whose address the replicated
/// state does not hold yet (the replicas of the proposer's `--peers`), so that every replica,
/// and the snapshot a joiner starts from, holds every member's address.
pub fn context(proposer: u64, token: u64, address: &str, others: &[(u64, &str)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + address.len());
    v.extend_from_slice(&proposer.to_be_bytes());
    v.extend_from_slice(&token.to_be_bytes());
    v.extend_from_slice(address.as_bytes());
    for (id, a) in others {
        v.extend_from_slice(format!("\n{id}={a}").as_bytes());
    }
    v
}

/// The other members' addresses a context carries (`context`), skipping lines that do not
/// parse.
pub fn other_addresses(text: &str) -> Vec<(u64, String)> {
    (text.lines().skip(1))
        .filter_map(|l| {
            let (id, a) = l.split_once('=')?;
            Some((id.parse().ok()?, a.to_string()))
        })
        .collect()
}

/// What `context` wrote: the proposer, its token, and the address (empty for none).
pub fn parse_context(b: &[u8]) -> Option<(u64, u64, String)> {
    if b.len() < 16 {
        return None;
    }
    let proposer = u64::from_be_bytes(b[..8].try_into().ok()?);
    let token = u64::from_be_bytes(b[8..16].try_into().ok()?);
    let address = String::from_utf8_lossy(&b[16..]).into_owned();
    Some((proposer, token, address))
}

/// Whether the voters left after removing `id` still form a quorum among those heard from
/// lately (`active`); why not, in words.
pub fn quorum_after_remove(
    voters: &[u64],
    id: u64,
    active: impl Fn(u64) -> bool,
) -> Result<(), String> {
    let left: Vec<u64> = voters.iter().copied().filter(|v| *v != id).collect();
    if left.is_empty() {
        return Err(format!(
            "replica {id} is the only voter: a cluster keeps at least one"
        ));
    }
    let quorum = left.len() / 2 + 1;
    let reachable = left.iter().filter(|v| active(**v)).count();
    if reachable < quorum {
        return Err(format!(
            "removing replica {id} would leave {reachable} of the {} remaining voters reachable, below their quorum of {quorum}: bring a replica back (or add one) first",
            left.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_a_host_and_a_port() {
        assert!(check_address("10.0.0.4:7000").is_ok());
        assert!(check_address("coord-4.allot.svc:7000").is_ok());
        assert!(check_address("[::1]:7000").is_ok());
        for bad in [
            "10.0.0.4",
            ":7000",
            "host:0",
            "host:70000",
            "a b:1",
            "host:x",
        ] {
            let e = check_address(bad).expect_err(bad);
            assert!(e.message.contains(bad), "{}", e.message);
        }
    }

    #[test]
    fn a_context_round_trips() {
        let c = context(3, 99, "10.0.0.9:7000", &[]);
        assert_eq!(parse_context(&c), Some((3, 99, "10.0.0.9:7000".into())));
        assert_eq!(
            parse_context(&context(1, 0, "", &[])),
            Some((1, 0, String::new()))
        );
        let c = context(3, 99, "h4:7000", &[(1, "h1:7000"), (2, "h2:7000")]);
        let (_, _, text) = parse_context(&c).expect("parses");
        assert_eq!(text.lines().next(), Some("h4:7000"));
        assert_eq!(
            other_addresses(&text),
            vec![(1, "h1:7000".to_string()), (2, "h2:7000".to_string())]
        );
        assert_eq!(parse_context(&[1, 2, 3]), None);
    }

    #[test]
    fn a_removal_keeps_a_reachable_quorum() {
        let all = |_| true;
        assert!(quorum_after_remove(&[1, 2, 3], 3, all).is_ok());
        assert!(quorum_after_remove(&[1], 1, all).is_err());
        // 5 voters, 4 and 5 down: removing 3 leaves 1, 2 of 1, 2, 4, 5: no quorum.
        let up = |v: u64| v <= 3;
        let e = quorum_after_remove(&[1, 2, 3, 4, 5], 3, up).expect_err("no quorum");
        assert!(e.contains("2 of the 4"), "{e}");
        // Removing a dead one is fine: 1, 2, 3 of 1, 2, 3, 4.
        assert!(quorum_after_remove(&[1, 2, 3, 4, 5], 5, up).is_ok());
    }
}

//! End-to-end: `allot coordinator members list` on three real replicas: each with its
//! address and role as the leader sees it, a killed replica shown silent and falling behind,
//! and only admins may ask.

mod support;

use support::*;

/// The rows of `members list` (JSON), as (id, role, behind, active).
fn members(c: &Cluster) -> Vec<(u64, String, u64, bool)> {
    let out = c.cli_ok(
        "admin-admin",
        &["coordinator", "members", "list", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    v["Members"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().unwrap_or(0),
                m["role"].as_str().unwrap_or("").to_string(),
                m["behind"].as_u64().unwrap_or(0),
                m["active"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[test]
fn members_list_shows_each_replica_as_the_leader_sees_it() {
    let mut c = Cluster::new(3, 10_000);
    let all = wait_for(30, "three active replicas, one leading", || {
        let m = members(&c);
        (m.len() == 3 && m.iter().all(|r| r.3) && m.iter().filter(|r| r.1 == "leader").count() == 1)
            .then_some(m)
    });
    let table = c.cli_ok("admin-admin", &["coordinator", "members", "list"]);
    assert!(
        table.contains("ADDRESS") && table.contains(&c.addrs[0]),
        "{table}"
    );
    // A follower killed: the leader stops hearing from it, and it falls behind as the
    // cluster goes on.
    let leader = all
        .iter()
        .find(|r| r.1 == "leader")
        .map(|r| r.0)
        .expect("leader");
    let follower = (1..=3u64).find(|id| *id != leader).expect("a follower");
    c.kill((follower - 1) as usize);
    setup_team(&c, "team-a");
    let seen = wait_for(30, "the killed replica silent and behind", || {
        members(&c)
            .into_iter()
            .find(|r| r.0 == follower && !r.3 && r.2 > 0)
    });
    assert_eq!(seen.1, "follower");
    let o = c.cli("user-team-a", &["coordinator", "members", "list"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("admin"), "{err}");
}

//! End-to-end: `allot coordinator members list` on three real replicas: each with its
//! address and role as the leader sees it, a killed replica shown silent and falling behind,
//! and only admins may ask. Then membership changes with real processes under a submit
//! stream: a dead replica replaced by one at a new address, and a cluster grown from three
//! to five and shrunk back, with every acknowledged submission kept once.

mod support;

use std::sync::atomic::Ordering;

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

/// The members' ids, once the leader lists exactly `want`, every one active and one leading.
fn wait_members(c: &Cluster, want: &[u64]) -> Vec<(u64, String, u64, bool)> {
    wait_for(60, &format!("the members {want:?}, all active"), || {
        let m = members(c);
        let ids: Vec<u64> = m.iter().map(|r| r.0).collect();
        let leaders = m.iter().filter(|r| r.1 == "leader").count();
        (ids == want && m.iter().all(|r| r.3 && r.1 != "learner") && leaders == 1).then_some(m)
    })
}

/// The leader's id, as the members list says.
fn leader_of(c: &Cluster) -> u64 {
    members(c)
        .iter()
        .find(|r| r.1 == "leader")
        .map(|r| r.0)
        .expect("a leader")
}

/// Starts the cluster's next replica with `--join` and adds it (the CLI waits until it votes).
fn add_replica(c: &mut Cluster) -> u64 {
    let i = c.add_slot();
    c.start_args(i, &["--join"]);
    let id = (i + 1).to_string();
    let out = c.cli_ok(
        "admin-admin",
        &["coordinator", "members", "add", &id, &c.addrs[i].clone()],
    );
    assert!(out.contains(&format!("replica {id} is a member")), "{out}");
    i as u64 + 1
}

fn remove_replica(c: &Cluster, id: u64) {
    let out = c.cli_ok(
        "admin-admin",
        &["coordinator", "members", "remove", &id.to_string()],
    );
    assert!(out.contains(&format!("replica {id} removed")), "{out}");
}

/// Three replicas taking a stream of submits of one-second jobs (`one_second_stream`).
type Stream = (
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
);

fn three_under_submits(snapshot_every: u64, run: &str) -> (Cluster, Stream) {
    let c = Cluster::new(3, snapshot_every);
    setup_team(&c, "team-a");
    wait_members(&c, &[1, 2, 3]);
    let stream = one_second_stream(&c, run);
    (c, stream)
}

/// Stops the stream: it was acknowledged often, and every submit it saw acknowledged is there
/// once.
fn stream_kept(c: &Cluster, (acked, done, stream): Stream) {
    done.store(true, Ordering::SeqCst);
    stream.join().expect("the submit stream");
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() > 20,
        "only {} submits acknowledged",
        acked.len()
    );
    assert_each_acknowledged_once(c, &acked);
}

#[test]
fn a_dead_replica_is_replaced_by_one_at_a_new_address_under_submits() {
    // Snapshots as by default, far apart: the new replica still starts from the one taken
    // where it was added.
    let (mut c, stream) = three_under_submits(10_000, "replace");
    std::thread::sleep(std::time::Duration::from_secs(2));
    // Replica 3's machine is gone for good.
    c.kill(2);
    let new = add_replica(&mut c);
    assert_eq!(new, 4);
    remove_replica(&c, 3);
    wait_members(&c, &[1, 2, 4]);
    // The new replica votes: with replica 1 killed, 2 and 4 are a quorum of three and go on.
    c.kill(0);
    std::thread::sleep(std::time::Duration::from_secs(3));
    stream_kept(&c, stream);
    let m = members(&c);
    let leader = m.iter().find(|r| r.1 == "leader").map(|r| r.0);
    assert!(matches!(leader, Some(2 | 4)), "{m:?}");
    let o = c.cli(
        "user-team-a",
        &["coordinator", "members", "add", "9", "127.0.0.1:1"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("admin"), "{err}");
}

#[test]
fn a_cluster_grows_from_three_to_five_and_shrinks_back_under_submits() {
    let (mut c, stream) = three_under_submits(200, "grow");
    add_replica(&mut c);
    add_replica(&mut c);
    wait_members(&c, &[1, 2, 3, 4, 5]);
    // Back to three: the leader first (it hands leadership over), then another of the first
    // three; each is stopped once removed.
    let leader = leader_of(&c);
    let second = [1u64, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("one");
    for id in [leader, second] {
        remove_replica(&c, id);
        c.kill((id - 1) as usize);
    }
    let mut left: Vec<u64> = (1..=5)
        .filter(|id| *id != leader && *id != second)
        .collect();
    left.sort_unstable();
    wait_members(&c, &left);
    // A removal that would leave no quorum is refused, naming why: two of three are needed.
    let leader = leader_of(&c);
    let dead = *left.iter().find(|id| **id != leader).expect("a follower");
    c.kill((dead - 1) as usize);
    wait_for(30, "the killed replica shown silent", || {
        members(&c)
            .iter()
            .any(|r| r.0 == dead && !r.3)
            .then_some(())
    });
    let survivor = *left
        .iter()
        .find(|id| **id != leader && **id != dead)
        .expect("the other follower");
    let o = c.cli(
        "admin-admin",
        &["coordinator", "members", "remove", &survivor.to_string()],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("quorum"), "{err}");
    c.start(dead as usize - 1);
    wait_members(&c, &left);
    stream_kept(&c, stream);
}

//! `State::add_nodes` (what `allot simulate` registers a scenario's nodes with) derives the
//! same state as adding the nodes one at a time: idle capacity, cohort pools, warnings.

mod support;

use allot_common::{ClusterPolicy, ResourceName, Resources};
use allot_core::state::State;
use support::gpu_team;

fn resources(gpus: i64) -> Resources {
    let mut r = Resources::new();
    r.set(ResourceName::gpu(), gpus);
    r.set(ResourceName::cpu(), 32_000);
    r
}

fn cluster() -> State {
    let mut st = State::new(ClusterPolicy {
        fair_share: true,
        idle_resource_sharing: true,
        ..Default::default()
    });
    // 12 GPUs of nominal quota on `support::F`; ml.p5.48xlarge has none.
    st.set_team(gpu_team("team-a", 8, None)).unwrap();
    st.set_team(gpu_team("team-b", 4, Some(4))).unwrap();
    st
}

fn nodes() -> Vec<(String, String, Resources)> {
    let mut out = Vec::new();
    for i in 0..7 {
        out.push((format!("g5-{i}"), support::F.to_string(), resources(2)));
    }
    out.push((
        "p5-0".to_string(),
        "ml.p5.48xlarge".to_string(),
        resources(8),
    ));
    out
}

/// Everything the state holds, derived parts included (it has no hash maps, so the text
/// is the same for equal states).
fn encoded(st: &State) -> String {
    format!("{st:?}")
}

#[test]
fn nodes_added_in_bulk_derive_what_one_at_a_time_does() {
    let mut one = cluster();
    let mut bulk = cluster();
    let list = nodes();
    for (i, (name, flavor, cap)) in list.iter().enumerate() {
        one.add_node(name, flavor, cap).unwrap();
        if i == 2 {
            // Below the nominal (6 GPUs of 12): a warning.
            assert!(!one.warnings().is_empty());
        }
    }
    let ids = bulk
        .add_nodes(list.iter().map(|(n, f, c)| (n.as_str(), f.as_str(), c)))
        .unwrap();
    assert_eq!(ids.len(), list.len());
    assert_eq!(encoded(&bulk), encoded(&one));
    assert_eq!(bulk.warnings(), one.warnings());
    // 14 GPUs against 12 of quota, and the p5 node's 8: idle capacity, no warning.
    assert_eq!(
        bulk.idle_capacity().values().sum::<i64>(),
        2 + 8 + 8 * 32_000
    );
    assert!(bulk.warnings().is_empty(), "{:?}", bulk.warnings());
}

#[test]
fn a_bad_node_in_bulk_stops_there_and_keeps_those_before_it() {
    let mut st = cluster();
    let mut list = nodes();
    list.insert(2, list[0].clone());
    let e = st
        .add_nodes(list.iter().map(|(n, f, c)| (n.as_str(), f.as_str(), c)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"g5-0\"") && e.contains("twice"), "{e}");
    let mut two = cluster();
    for (n, f, c) in &list[..2] {
        two.add_node(n, f, c).unwrap();
    }
    assert_eq!(encoded(&st), encoded(&two));
}

//! Placement by topology domain (`domains.rs`): the tightest domain that takes a gang, required
//! and preferred levels, slices, the hostname level, and nodes' topology through snapshots.

use std::collections::BTreeMap;

use allot_common::topology::{Ask, Slice, HOSTNAME};
use allot_common::ResourceName;
use allot_core::ids::{FlavorId, Interner, NodeId, ResId};
use allot_core::nodes::{NodeSet, PodAlloc, ResKind};
use allot_core::topology::node_topo;
use proptest::prelude::*;

mod support;

/// `n` nodes of 8 GPUs, `per_rack` to a rack (`r0`, `r1`, ...), every rack in block `b0`.
fn racks(n: u32, per_rack: u32) -> (NodeSet, FlavorId, ResId) {
    let mut names = Interner::default();
    let f = names.flavor("p5");
    let g = names.resource(&ResourceName::gpu());
    let mut ns = NodeSet::default();
    for k in 0..n {
        let id = ns
            .add(&format!("n{k}"), f, vec![(g, 8, ResKind::Accelerator)])
            .unwrap();
        let t: BTreeMap<String, String> = [
            ("rack".to_string(), format!("r{}", k / per_rack)),
            ("block".to_string(), "b0".to_string()),
        ]
        .into();
        assert!(ns.set_topology(id, node_topo(&t)));
    }
    (ns, f, g)
}

fn required(level: &str) -> Option<Ask<'_>> {
    Some(Ask {
        level,
        required: true,
        slice: None,
    })
}

fn rack_of(ns: &NodeSet, id: NodeId) -> String {
    let t = &ns.node(id).topology;
    t.iter()
        .find(|(l, _)| &**l == "rack")
        .map(|(_, d)| d.to_string())
        .unwrap_or_default()
}

#[test]
fn a_gang_goes_to_the_tightest_rack_and_large_racks_stay_whole() {
    let (mut ns, f, g) = racks(8, 4);
    // One node of rack r0 is half used: r0 is now the tightest rack that takes two nodes.
    let one = ns.place_in(f, &[(g, 4)], 1, None).unwrap();
    assert_eq!(
        rack_of(&ns, one[0].node),
        "r0",
        "the most-allocated node first"
    );
    let two = ns.place_in(f, &[(g, 8)], 2, required("rack")).unwrap();
    assert!(two.iter().all(|a| rack_of(&ns, a.node) == "r0"), "{two:?}");
    // Rack r1 is whole: a 4-node gang fits there and nowhere else.
    let four = ns.place_in(f, &[(g, 8)], 4, required("rack")).unwrap();
    assert!(
        four.iter().all(|a| rack_of(&ns, a.node) == "r1"),
        "{four:?}"
    );
}

#[test]
fn a_required_level_fails_with_the_most_one_domain_takes_and_a_preferred_one_widens() {
    let (mut ns, f, g) = racks(8, 4);
    let fail = ns.place_in(f, &[(g, 8)], 5, required("rack")).unwrap_err();
    assert_eq!((fail.placed, fail.wanted), (4, 5));
    assert!(ns.try_place_in(f, &[(g, 8)], 5, required("rack")).is_err());
    let described = ns.describe_domains(f, &[(g, 8)], 5, required("rack").unwrap());
    assert!(
        described.contains("r0 takes 4 of 5 pods") && described.contains("2 domain(s)"),
        "{described}"
    );
    // Preferred: no rack takes five, the block around both does.
    let pref = Ask {
        level: "rack",
        required: false,
        slice: None,
    };
    let five = ns.place_in(f, &[(g, 8)], 5, Some(pref)).unwrap();
    assert_eq!(five.len(), 5);
    // A level no node has: required never fits; preferred places anywhere.
    assert!(ns.place_in(f, &[(g, 8)], 1, required("row")).is_err());
    let anywhere = Ask {
        level: "row",
        required: false,
        slice: None,
    };
    assert_eq!(
        ns.place_in(f, &[(g, 8)], 3, Some(anywhere)).unwrap().len(),
        3
    );
    let described = ns.describe_domains(f, &[(g, 8)], 1, required("row").unwrap());
    assert!(described.contains("has topology level row"), "{described}");
}

#[test]
fn slices_share_a_host_and_the_hostname_level_is_one_node() {
    let (mut ns, f, g) = racks(4, 2);
    ns.place_in(f, &[(g, 6)], 1, None).unwrap();
    let sliced = Ask {
        level: "block",
        required: true,
        slice: Some(Slice {
            level: HOSTNAME,
            size: 2,
        }),
    };
    let pods = ns.place_in(f, &[(g, 4)], 6, Some(sliced)).unwrap();
    for pair in pods.chunks(2) {
        assert_eq!(pair[0].node, pair[1].node, "a slice on one host: {pods:?}");
    }
    let mut hosts: Vec<NodeId> = pods.iter().map(|a| a.node).collect();
    hosts.dedup();
    assert_eq!(
        hosts.len(),
        3,
        "three slices on three hosts, not the part-used one"
    );
    // The part-used host has 2 GPUs: a 2-pod gang of 1 GPU that requires one host fits there.
    let host = ns.place_in(f, &[(g, 1)], 2, required(HOSTNAME)).unwrap();
    assert_eq!(host[0].node, host[1].node);
    assert!(ns.place_in(f, &[(g, 3)], 3, required(HOSTNAME)).is_err());
}

#[test]
fn topology_survives_a_snapshot_and_older_layouts_refuse_it() {
    let (ns, _, _) = racks(4, 2);
    let bytes = allot_net::wire::encode_snapshot(&ns).unwrap();
    let back: NodeSet = allot_net::wire::decode_snapshot(&bytes).unwrap();
    assert_eq!(rack_of(&back, NodeId(3)), "r1");
    let members = &back.topo_level("rack").unwrap().domains[1].nodes;
    assert_eq!(members, &vec![NodeId(2), NodeId(3)], "the index is rebuilt");
    let older = allot_common::layout::scoped(allot_common::layout::PARTITIONS, || {
        allot_net::wire::encode_snapshot(&ns)
    });
    assert!(older.is_err(), "a node with topology in a format before it");
    // A node set without topology still reads and writes the older layout.
    let (mut plain, f, g) = racks(0, 1);
    plain
        .add("x", f, vec![(g, 8, ResKind::Accelerator)])
        .unwrap();
    let b = allot_common::layout::scoped(allot_common::layout::PARTITIONS, || {
        allot_net::wire::encode_snapshot(&plain)
    })
    .unwrap();
    let back: NodeSet = allot_common::layout::scoped(allot_common::layout::PARTITIONS, || {
        allot_net::wire::decode_snapshot(&b)
    })
    .unwrap();
    assert_eq!(back.node(NodeId(0)).name.as_ref(), "x");
}

proptest! {
    /// Over random fills, a placement in a domain keeps every pod in one rack, agrees with
    /// `try_place_in`, and gives everything back when released.
    #[test]
    fn placement_in_a_rack_is_all_in_one_rack(
        used in proptest::collection::vec(0i64..=8, 12),
        per_pod in 1i64..=8,
        count in 1u32..=8,
    ) {
        let (mut ns, f, g) = racks(12, 3);
        for (k, u) in used.iter().enumerate().filter(|(_, u)| **u > 0) {
            let taken = PodAlloc {
                node: NodeId(k as u32),
                req: vec![(g, *u)],
                devices: vec![(g, (0..*u as u8).collect())],
            };
            ns.take_exact(&taken).unwrap();
        }
        let before = allot_net::wire::encode_snapshot(&ns).unwrap();
        let tried = ns.try_place_in(f, &[(g, per_pod)], count, required("rack"));
        prop_assert_eq!(allot_net::wire::encode_snapshot(&ns).unwrap(), before.clone());
        match ns.place_in(f, &[(g, per_pod)], count, required("rack")) {
            Ok(allocs) => {
                prop_assert!(tried.is_ok());
                prop_assert_eq!(allocs.len(), count as usize);
                let r = rack_of(&ns, allocs[0].node);
                prop_assert!(allocs.iter().all(|a| rack_of(&ns, a.node) == r));
                for a in allocs.iter().rev() {
                    ns.release(a);
                }
                prop_assert_eq!(allot_net::wire::encode_snapshot(&ns).unwrap(), before);
            }
            Err(fail) => {
                prop_assert!(tried.is_err());
                prop_assert!(fail.placed < count);
            }
        }
    }
}

#[test]
fn room_in_one_domain_counts_what_is_given_back_per_domain() {
    let (mut ns, f, g) = racks(8, 4);
    let full: Vec<PodAlloc> = (0..8)
        .map(|_| ns.place_in(f, &[(g, 8)], 1, None).unwrap().remove(0))
        .collect();
    let by_node = |id: u32| full.iter().find(|a| a.node == NodeId(id)).unwrap();
    let mut room = ns.room_count_in(f, &[(g, 8)], 3, "rack").unwrap();
    assert!(!room.fits());
    // Two nodes of r0 and one of r1 back: three pods fit over two racks, not in one.
    for id in [0, 1, 4] {
        room.release(&ns, by_node(id));
    }
    assert!(!room.fits());
    assert_eq!(room.room(), 2);
    room.release(&ns, by_node(2));
    assert!(room.fits(), "rack r0 has three nodes back");
    // The hostname level: one node takes at most one 8-GPU pod.
    let mut host = ns.room_count_in(f, &[(g, 4)], 2, HOSTNAME).unwrap();
    assert!(!host.fits());
    host.release(&ns, by_node(7));
    assert!(host.fits());
    // A level no node has: no count (never room).
    assert!(ns.room_count_in(f, &[(g, 8)], 1, "row").is_none());
}

/// Partial admission of a gang in slices keeps whole slices: six pods in slices of two on
/// hosts with room for one slice each is admitted as four, not five.
#[test]
fn partial_admission_keeps_whole_slices() {
    use allot_common::topology::{REQUIRED_LABEL, SLICE_LEVEL_LABEL, SLICE_SIZE_LABEL};
    use support::*;
    let mut sim = Sim::classical(vec![gpu_team("a", 16, None)]);
    // Two hosts of 2 GPUs and one of 1 GPU, in one block: 5 pods of 1 GPU fit, but only two
    // slices of two.
    sim.nodes(F, "h", 2, 2);
    sim.nodes(F, "small", 1, 1);
    let block = [("block".to_string(), "b0".to_string())].into();
    for n in ["h0", "h1", "small0"] {
        sim.st.set_node_topology(n, &block).unwrap();
    }
    let mut w = wl("sliced", "a", 0, 6, &[("gpu", "1")]);
    w.pod_sets[0].min_count = Some(3);
    w.labels = [
        (REQUIRED_LABEL.to_string(), "block".to_string()),
        (SLICE_LEVEL_LABEL.to_string(), HOSTNAME.to_string()),
        (SLICE_SIZE_LABEL.to_string(), "2".to_string()),
    ]
    .into();
    sim.submit(w).settle();
    let st = &sim.st;
    let id = st.find_workload("sliced").unwrap();
    let adm = st
        .workload(id)
        .admission
        .as_ref()
        .expect("admitted in part");
    assert_eq!(adm.pod_sets[0].count, 4, "two whole slices");
}

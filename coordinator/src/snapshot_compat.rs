//! The machine in a snapshot, in each format (`format.rs`). A snapshot is the machine in
//! bincode, field by field; a field appended to `Machine` is absent from the snapshots of
//! earlier formats. Each such field is appended last with an empty default, so an older
//! snapshot reads as the current one once the default fields' own encoding is appended to it,
//! and a snapshot for an older format is the current encoding with them cut off (they are
//! empty while the cluster writes that format).
//!
//! | format | what `Machine` ends with |
//! |---|---|
//! | 0, before the usage ledger (2d6bbda and earlier) | `registry_credentials` |
//! | 0 and 1 | `usage` |
//! | 2 | `auto_resumed` |
//! | 3 and 4 | `removed_nodes` (format 4 changed the layout of compute quota rows inside, see `allot_common::layout`, and appended nothing) |
//! | 5 and 6 | `pods_ready` (format 6 changed the layout of nodes and node reports inside, see `allot_common::layout`, and appended nothing) |
//! | 7 | `members`, `team_cohorts` |
//! | 8 | `cohort_weights` |

use allot_core::machine::Machine;
use allot_net::wire;

/// The bincode of the fields appended in `format` (an empty map: its length, zero).
fn tail_since(format: u32) -> &'static [u8] {
    match format {
        2 | 3 => &[0],
        // Format 4 appended no field; 5 a policy (`None`) and a map.
        5 => &[0, 0],
        7 => &[0, 0],
        8 => &[0],
        _ => &[],
    }
}

/// Whether the field format `f` appended is empty in `m` (so an older format can leave it out).
fn empty_since(m: &Machine, f: u32) -> bool {
    match f {
        2 => m.auto_resumed.is_empty(),
        3 => m.removed_nodes.is_empty(),
        5 => m.pods_ready.is_empty(),
        7 => m.members.is_empty() && m.team_cohorts.is_empty(),
        8 => m.cohort_weights.is_empty(),
        _ => true,
    }
}

/// `m` as a snapshot of its own format (`m.format`), without the envelope.
pub fn encode_machine(m: &Machine) -> Result<Vec<u8>, String> {
    let mut b = wire::encode_snapshot(m).map_err(|e| e.to_string())?;
    for f in ((m.format + 1)..=crate::format::CURRENT).rev() {
        if !empty_since(m, f) {
            return Err(format!(
                "the machine holds what format {f} added, and its format {} cannot hold it",
                m.format
            ));
        }
        let tail = tail_since(f);
        if !b.ends_with(tail) {
            return Err("the machine's encoding does not end with its last field".into());
        }
        b.truncate(b.len() - tail.len());
    }
    Ok(b)
}

/// The machine in `b`, a snapshot of `format` (of any release of it).
pub fn decode_machine(b: &[u8], format: u32) -> Result<Machine, String> {
    let mut longer = b.to_vec();
    for f in (format + 1)..=crate::format::CURRENT {
        longer.extend_from_slice(tail_since(f));
    }
    let err = match wire::decode_snapshot::<Machine>(&longer) {
        Ok(mut m) => {
            m.state.refresh_queue_shapes();
            m.state.refresh_cohort_tree();
            m.restore_cohort_weights();
            return Ok(m);
        }
        Err(e) => e,
    };
    if format > 0 {
        return Err(err.to_string());
    }
    // Before the usage ledger (2d6bbda and earlier): the ledger starts empty, before the
    // fields appended since.
    let ledger =
        wire::encode_snapshot(&allot_core::usage::Ledger::default()).map_err(|e| e.to_string())?;
    let mut older = b.to_vec();
    older.extend_from_slice(&ledger);
    for f in 1..=crate::format::CURRENT {
        older.extend_from_slice(tail_since(f));
    }
    let mut m = wire::decode_snapshot::<Machine>(&older).map_err(|_| err.to_string())?;
    // It counts what runs from here on. Replicas that read their old snapshots at different
    // log positions may differ on the hours of the upgrade itself; reports come from the
    // leader, and a snapshot the leader sends brings a follower its figures.
    m.usage = allot_core::usage::Ledger::seeded(&m.state);
    m.state.refresh_queue_shapes();
    m.state.refresh_cohort_tree();
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn each_format_round_trips_and_older_ones_are_shorter() {
        let mut m = Machine::new();
        let mut lens = BTreeMap::new();
        for f in 0..=crate::format::CURRENT {
            m.format = f;
            let b = encode_machine(&m).expect("encodes");
            let back = decode_machine(&b, f).expect("decodes");
            assert_eq!(back.auto_resumed, m.auto_resumed);
            lens.insert(f, b.len());
        }
        assert_eq!(lens[&1] + 1, lens[&2], "{lens:?}");
        assert_eq!(lens[&2] + 1, lens[&3], "{lens:?}");
        assert_eq!(lens[&0], lens[&1]);
        assert_eq!(lens[&3], lens[&4], "{lens:?}");
        assert_eq!(lens[&4] + 2, lens[&5], "{lens:?}");
        assert_eq!(lens[&6] + 2, lens[&7], "{lens:?}");
        assert_eq!(lens[&7] + 1, lens[&8], "{lens:?}");
        // Format 7 holds the replicas a membership change added; format 6 cannot.
        m.members.insert(4, "10.0.0.4:7000".into());
        // Format 8 holds cohort weights, and puts them back into the cohorts' specs (which
        // do not store them); format 7 cannot hold them.
        let mut w = Machine::new();
        w.format = 8;
        let org = allot_common::CohortSpec {
            fair_share_weight: None,
            name: "org".into(),
            parent: None,
            quotas: Vec::new(),
        };
        let dept = allot_common::CohortSpec {
            name: "dept-a".into(),
            parent: Some("org".into()),
            ..org.clone()
        };
        w.state.set_cohort(org).expect("org");
        w.state.set_cohort(dept).expect("dept-a");
        w.state
            .set_cohort_weight("dept-a", Some((2, 1)))
            .expect("weighed");
        w.cohort_weights.insert("dept-a".into(), (2, 1));
        let back = decode_machine(&encode_machine(&w).expect("encodes"), 8).expect("decodes");
        assert_eq!(back.cohort_weights, w.cohort_weights);
        let spec = back.state.cohorts().iter().find(|c| c.name == "dept-a");
        assert_eq!(
            spec.and_then(|c| c.spec.as_ref())
                .and_then(|s| s.fair_share_weight),
            Some((2, 1))
        );
        w.format = 7;
        assert!(encode_machine(&w).is_err());
        m.format = 7;
        let b = encode_machine(&m).expect("encodes");
        assert_eq!(decode_machine(&b, 7).expect("decodes").members, m.members);
        m.format = 6;
        assert!(encode_machine(&m).is_err());
        m.members.clear();
        // Format 5 holds gang readiness; format 4 cannot.
        m.pods_ready.policy = Some(Default::default());
        m.format = 5;
        let b = encode_machine(&m).expect("encodes");
        assert_eq!(
            decode_machine(&b, 5).expect("decodes").pods_ready,
            m.pods_ready
        );
        m.format = 4;
        assert!(encode_machine(&m).is_err());
        m.pods_ready = Default::default();
        // Format 2 holds what older formats cannot.
        m.auto_resumed.insert(allot_core::WlId(7), 2);
        m.removed_nodes.insert("gone".into());
        m.format = 3;
        let b = encode_machine(&m).expect("encodes");
        assert_eq!(
            decode_machine(&b, 3).expect("decodes").removed_nodes,
            m.removed_nodes
        );
        assert!(
            {
                m.format = 2;
                encode_machine(&m).is_err()
            },
            "format 2 cannot hold a removed node"
        );
        m.removed_nodes.clear();
        m.format = 2;
        let b = encode_machine(&m).expect("encodes");
        assert_eq!(
            decode_machine(&b, 2).expect("decodes").auto_resumed,
            m.auto_resumed
        );
        m.format = 1;
        assert!(encode_machine(&m).is_err());
    }
}

//! Versioned formats: how log entries and snapshots say which format they are in, which
//! formats this build reads, and which commands need which format.
//!
//! Format 0 is what releases before versioned formats wrote: bare bincode. Every later format
//! puts an envelope in front of the bincode: the byte `0xFF` (no bincode encoding of an enum
//! or of the machine starts with it: a variable-length integer's first byte is at most 254)
//! and the version as a variable-length integer. A build reads every format up to its own.
//!
//! A replica writes the cluster's format (`Machine::format`), never its own: the leader raises
//! the cluster's format with a `SetFormat` entry only once every voter has said it reads the
//! new one (`Node::handle_peer_format`), so no replica is ever sent an entry or a snapshot it
//! cannot read, and an upgrade can go one replica at a time. Once raised, the format is never
//! lowered: a replica of an older build can no longer join (it stops with a message saying
//! so), and going back to it means restoring a backup taken before.
//!
//! A format also gates what every replica must decide alike: from format 2 on, a failed
//! workload with auto-resume on is queued again, which a replica of a release before would
//! mark failed instead; from format 6 on, a workload that asks for a topology level is placed
//! in one domain, which a release before would not know to do.
//!
//! | format | what it added |
//! |---|---|
//! | 0 | (releases before versioned formats: bare bincode) |
//! | 1 | the envelope; `SetFormat` |
//! | 2 | auto-resume: `Machine::auto_resumed` at the end of a snapshot, and failed workloads queued again |
//! | 3 | `RemoveNode`, and `Machine::removed_nodes` at the end of a snapshot |
//! | 4 | GPU partitions: compute quota rows with `AcceleratorPartition` (layout 1 of `allot_common::layout`), and node reports with MIG devices |
//! | 5 | gang readiness: `SetPodsReady`, `PodsReadyTimeout`, `BackoffFinished`, and `Machine::pods_ready` at the end of a snapshot |
//! | 6 | topology: node reports and nodes with topology levels (layout 2 of `allot_common::layout`), and workloads that ask for a level |
//! | 7 | membership changes: raft configuration changes, and `Machine::members` (the added replicas' addresses) at the end of a snapshot; cohorts set live (`SetCohort`, `DeleteCohort`, `SetTeamCohort`), and `Machine::team_cohorts` after it |
//! | 8 | cohort weights: `SetCohortWeight`, and `Machine::cohort_weights` at the end of a snapshot |
//!
//! API requests carry a protocol version (`allot_net::wire`): a client sends the oldest one
//! that has its request, so a newer client talks to an older coordinator during an upgrade,
//! and a coordinator answers every version from `OLDEST_PROTOCOL_VERSION` to its own.

use allot_core::machine::Command;

/// The newest format this build reads and writes.
pub const CURRENT: u32 = 8;

/// The first byte of an enveloped (format 1 or later) entry or snapshot.
const ENVELOPE: u8 = 0xFF;

/// Set to `0` for a build that reads and writes only what the releases before versioned
/// formats did (format 0, protocol 2), or to another format below `CURRENT` for a build that
/// stops there: the upgrade test's "old release" when no old binary is given. Not for
/// production.
pub const EMULATE_ENV: &str = "ALLOT_EMULATE_FORMAT";

/// The newest format this process reads and writes: `CURRENT`, or less when emulating an
/// older release (`EMULATE_ENV`).
pub fn reads_from_env() -> Result<u32, String> {
    match std::env::var(EMULATE_ENV) {
        Err(_) => Ok(CURRENT),
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n <= CURRENT => Ok(n),
            _ => Err(format!(
                "{EMULATE_ENV}={v:?}: expected a format version from 0 to {CURRENT}"
            )),
        },
    }
}

/// Why bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Written in a format newer than this build reads: the replica must not go on.
    #[error("written in format {found}, and this build reads formats up to {reads}: run a newer allot (an upgrade is never undone once the cluster writes the new format)")]
    Newer { found: u32, reads: u32 },
    /// An envelope that ends early or whose version does not parse.
    #[error("a format envelope that does not parse ({0} bytes)")]
    BadEnvelope(usize),
    /// A format this build reads, but the bytes are not what it writes.
    #[error("{0}")]
    Undecodable(String),
}

/// `payload` in format `version`'s framing.
pub fn seal(version: u32, payload: Vec<u8>) -> Vec<u8> {
    if version == 0 {
        return payload;
    }
    let mut out = Vec::with_capacity(payload.len() + 6);
    out.push(ENVELOPE);
    let mut v = version;
    loop {
        let low = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(&payload);
    out
}

/// The format `b` is in and its payload, if this build (reading formats up to `reads`) reads it.
pub fn open(b: &[u8], reads: u32) -> Result<(u32, &[u8]), FormatError> {
    if b.first() != Some(&ENVELOPE) {
        return Ok((0, b));
    }
    let mut version: u32 = 0;
    for (i, &byte) in b.iter().enumerate().skip(1).take(5) {
        version |= u32::from(byte & 0x7F) << (7 * (i - 1));
        if byte & 0x80 == 0 {
            if version > reads {
                return Err(FormatError::Newer {
                    found: version,
                    reads,
                });
            }
            return Ok((version, &b[i + 1..]));
        }
    }
    Err(FormatError::BadEnvelope(b.len()))
}

/// The oldest format a log entry of `cmd` can be written in (what each format added).
pub fn needs(cmd: &Command) -> u32 {
    match cmd {
        Command::SetFormat { version } => *version,
        Command::RemoveNode { .. } => 3,
        Command::CreateComputeQuota(input) | Command::UpdateComputeQuota { input, .. }
            if input.config.has_partitions() =>
        {
            4
        }
        Command::SetPodsReady(_)
        | Command::PodsReadyTimeout { .. }
        | Command::BackoffFinished { .. } => 5,
        Command::SetCohort(_) | Command::DeleteCohort { .. } | Command::SetTeamCohort { .. } => 7,
        Command::SetCohortWeight { .. } => 8,
        Command::ReportNode(r) if !r.topology.is_empty() => 6,
        Command::Submit(input)
        | Command::SubmitPlanned { input, .. }
        | Command::SubmitArray { input, .. }
            if asks_topology(input) =>
        {
            6
        }
        Command::SubmitBatch(inputs) if inputs.iter().any(asks_topology) => 6,
        Command::ReportNode(r) if reports_partitions(r) => 4,
        _ => 0,
    }
}

/// Whether a submit asks for a topology level (`allot_common::topology`).
fn asks_topology(input: &allot_common::api::SubmitInput) -> bool {
    allot_common::topology::asks(&input.spec.labels)
}

/// Whether a node report names GPU partitions, as devices or capacity.
fn reports_partitions(r: &allot_common::api::NodeReport) -> bool {
    let partition =
        |name: &str| allot_common::ResourceName::parse(name).is_ok_and(|n| n.is_partition());
    r.devices.iter().any(|d| partition(&d.resource))
        || r.capacity.iter().any(|(n, _)| n.is_partition())
}

/// The layout of the shared types (`allot_common::layout`) that entries and snapshots of
/// `format` are encoded in.
pub fn layout(format: u32) -> u32 {
    match format {
        0..=3 => 0,
        4 | 5 => allot_common::layout::PARTITIONS,
        _ => allot_common::layout::TOPOLOGY,
    }
}

/// The newest request protocol a build reading formats up to `reads` answers.
pub fn protocol(reads: u32) -> u32 {
    match reads {
        0 => allot_net::wire::OLDEST_PROTOCOL_VERSION,
        1..=3 => 3,
        4 => 4,
        5 => 6,
        6 => 7,
        7 => 8,
        _ => allot_net::wire::PROTOCOL_VERSION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_0_is_bare_and_later_ones_round_trip() {
        assert_eq!(seal(0, vec![3, 4]), vec![3, 4]);
        assert_eq!(open(&[3, 4], 0), Ok((0, &[3u8, 4][..])));
        for v in [1, 2, 127, 128, 300, u32::MAX] {
            let b = seal(v, vec![9, 8, 7]);
            assert_eq!(b[0], ENVELOPE);
            assert_eq!(open(&b, u32::MAX), Ok((v, &[9u8, 8, 7][..])));
        }
        // An empty payload (the version alone) still reads.
        assert_eq!(open(&seal(1, vec![]), 1), Ok((1, &[][..])));
    }

    #[test]
    fn a_newer_format_is_refused_by_name_and_a_torn_envelope_is_bad() {
        let b = seal(2, vec![1]);
        assert_eq!(open(&b, 1), Err(FormatError::Newer { found: 2, reads: 1 }));
        assert!(open(&b, 1)
            .unwrap_err()
            .to_string()
            .contains("format 2, and this build reads formats up to 1"));
        assert_eq!(open(&[ENVELOPE], 1), Err(FormatError::BadEnvelope(1)));
        assert_eq!(
            open(&[ENVELOPE, 0x80, 0x80], 1),
            Err(FormatError::BadEnvelope(3))
        );
    }

    #[test]
    fn bincode_never_starts_an_enum_or_a_machine_with_the_envelope_byte() {
        // Variable-length integers start with at most 254 (251 to 254 announce a wider
        // integer), so a format-0 entry is never mistaken for an envelope.
        let e = allot_core::machine::Entry {
            now: 1,
            cmd: Command::SetFormat { version: 1 },
        };
        let b = allot_net::wire::encode(&e).expect("encodes");
        assert_ne!(b[0], ENVELOPE);
        let m = allot_net::wire::encode_snapshot(&allot_core::machine::Machine::new())
            .expect("encodes");
        assert_ne!(m[0], ENVELOPE);
    }

    fn quota(shorthand: &str) -> Command {
        Command::CreateComputeQuota(allot_common::api::ComputeQuotaInput {
            name: "q".into(),
            description: None,
            team: "t".into(),
            fair_share_weight: 1,
            config: allot_common::hyperpod::ComputeQuotaConfig::parse_shorthand(shorthand)
                .expect("a valid config"),
            activation: allot_common::api::ActivationState::Enabled,
        })
    }

    #[test]
    fn partitions_need_format_4_and_older_formats_keep_the_older_layout() {
        let codec = crate::replica::SnapshotCodec::wire();
        let plain = quota("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=1}]");
        let mig = quota("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=3}}]");
        assert_eq!((needs(&plain), needs(&mig)), (0, 4));
        let entry = |cmd: &Command| allot_core::machine::Entry {
            now: 1,
            cmd: cmd.clone(),
        };
        let (plain, mig) = (entry(&plain), entry(&mig));
        // An entry of format 3 is what the release before wrote: one byte less per row.
        let old = (codec.encode_cmd)(&plain, 3).expect("encodes");
        let new = (codec.encode_cmd)(&plain, 4).expect("encodes");
        assert_eq!(old.len() + 1, new.len());
        assert_eq!((codec.decode_cmd)(&old, 3), Ok(plain.clone()));
        assert_eq!((codec.decode_cmd)(&new, 4), Ok(plain.clone()));
        assert_eq!(
            (codec.decode_cmd)(&new, 3),
            Err(FormatError::Newer { found: 4, reads: 3 })
        );
        assert!((codec.encode_cmd)(&mig, 3).is_err());
        let b = (codec.encode_cmd)(&mig, 4).expect("encodes");
        assert_eq!((codec.decode_cmd)(&b, 4), Ok(mig.clone()));
        // A machine holding a quota, as a snapshot of format 3 and of format 4.
        let mut m = allot_core::machine::Machine::new();
        assert!(m.apply(&plain).0.is_ok());
        for f in [3, 4] {
            m.format = f;
            let b = (codec.encode_machine)(&m).expect("encodes");
            let back = (codec.decode_machine)(&b, CURRENT).expect("decodes");
            assert_eq!(back.format, f);
            assert_eq!(back.quotas, m.quotas);
        }
        // A replica at format 3 refuses what a release before cannot read.
        m.format = 3;
        let mut report = allot_common::api::NodeReport {
            name: "n".into(),
            instance_type: "ml.p5.48xlarge".into(),
            ..Default::default()
        };
        report.devices.push(allot_common::api::DeviceInfo {
            resource: "mig-1g.10gb".into(),
            healthy: true,
            ..Default::default()
        });
        assert_eq!(needs(&Command::ReportNode(report)), 4);
        assert_eq!(needs(&Command::SetPodsReady(None)), 5);
        assert_eq!(needs(&Command::BackoffFinished { workload_id: 1 }), 5);
    }

    #[test]
    fn topology_needs_format_6_and_a_machine_with_it_reads_back() {
        let codec = crate::replica::SnapshotCodec::wire();
        let report = |topology: &[(&str, &str)]| allot_common::api::NodeReport {
            name: "n".into(),
            instance_type: "ml.p5.48xlarge".into(),
            capacity: allot_common::Catalog::builtin()
                .get("ml.p5.48xlarge")
                .expect("in the catalog")
                .resources(),
            topology: topology
                .iter()
                .map(|(l, d)| (l.to_string(), d.to_string()))
                .collect(),
            ..Default::default()
        };
        let with = Command::ReportNode(report(&[("rack", "r1")]));
        assert_eq!(needs(&Command::ReportNode(report(&[]))), 0);
        assert_eq!(needs(&with), 6);
        let entry = allot_core::machine::Entry {
            now: 1,
            cmd: with.clone(),
        };
        // Entries of format 5 are what the release before wrote: no topology in them.
        assert!((codec.encode_cmd)(&entry, 5).is_err());
        let b = (codec.encode_cmd)(&entry, 6).expect("encodes");
        assert_eq!((codec.decode_cmd)(&b, 6), Ok(entry.clone()));
        let mut m = allot_core::machine::Machine::new();
        m.format = 6;
        assert!(m.apply(&entry).0.is_ok());
        let b = (codec.encode_machine)(&m).expect("encodes");
        let back = (codec.decode_machine)(&b, CURRENT).expect("decodes");
        let id = back.state.acct().nodes.find("n").expect("the node");
        let t = &back.state.acct().nodes.node(id).topology;
        assert_eq!(t.len(), 1);
        assert_eq!((&*t[0].0, &*t[0].1), ("rack", "r1"));
        // The same machine cannot be written in format 5, which has no place for it.
        m.format = 5;
        assert!((codec.encode_machine)(&m).is_err());
        let submit = allot_common::api::SubmitInput {
            spec: allot_common::WorkloadSpec {
                name: "w".into(),
                team: "t".into(),
                priority: allot_common::PriorityRef::None,
                instance_type: None,
                pod_sets: Vec::new(),
                labels: [(allot_common::topology::REQUIRED_LABEL.into(), "rack".into())].into(),
                array: None,
            },
            run: None,
            client_token: None,
        };
        assert_eq!(needs(&Command::Submit(submit)), 6);
    }
}

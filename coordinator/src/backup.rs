//! Backups: the replicated state taken from a live cluster (`allot backup FILE`, a heavy read
//! on a copy of the machine, so admissions go on), and a new cluster started from one
//! (`allot coordinator --restore FILE`).
//!
//! A backup file is a header line, `allot-backup 1 format=F taken_ms=T\n`, then the machine as
//! a snapshot of format F (the envelope included). Restoring writes it into an empty data
//! directory as the replica's snapshot at index 1, term 1, with the voters of `--peers`: every
//! replica of the new cluster is restored from the same file, so they start identical and
//! elect a leader at term 2.
//!
//! A restored cluster has an identity: the first 16 bytes of the backup file's SHA-256, in the
//! data directory's `cluster-id`, the same on every replica restored from that file. Its
//! replicas open every raft stream with it and take raft streams only from peers that open
//! with the same (`cluster_hello`), so a replica of the old cluster (or a fresh one) given the
//! new cluster's peers is refused instead of joining it. Clusters that were never restored
//! have no identity and send no such frame, as before.

use std::path::Path;

use allot_common::api::{ApiError, ErrorKind, Reply, Response};
use allot_core::machine::Machine;
use raft::eraftpb::{ConfState, HardState, Snapshot};

use crate::raftlog::{Batch, Disk, RedbDisk};
use crate::replica::SnapshotCodec;

const MAGIC: &str = "allot-backup 1";

/// Where a restored replica keeps its cluster's identity.
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// The identity of the cluster whose data directory is `dir`, if it was restored.
pub fn cluster_id(dir: &Path) -> Option<String> {
    let id = std::fs::read_to_string(dir.join(CLUSTER_ID_FILE)).ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty())
}

/// The first frame of a restored cluster's raft streams. It starts with a zero byte, which no
/// protobuf message starts with (field number 0 is invalid), so a replica that expects none
/// refuses the stream rather than misreading it.
pub fn cluster_hello(id: &str) -> Vec<u8> {
    let mut b = vec![0u8];
    b.extend_from_slice(b"allot-cluster ");
    b.extend_from_slice(id.as_bytes());
    b
}

/// The answer to `Body::Backup`: `m` encoded as a snapshot of its format.
pub fn take(m: &Machine, taken_ms: i64) -> Response {
    let data = match take_whole(m, taken_ms)? {
        Reply::Backup { data, .. } => data,
        _ => Vec::new(),
    };
    let limit = allot_net::wire::MAX_FRAME - 4096;
    if data.len() > limit {
        return Err(ApiError::new(
            ErrorKind::Invalid,
            format!(
                "the cluster's state is {} MiB, above the {} MiB one answer carries: use an allot of this release, which streams it",
                data.len() >> 20,
                limit >> 20
            ),
        ));
    }
    Ok(Reply::Backup {
        format: m.format,
        taken_ms,
        data,
    })
}

/// `m` encoded as a snapshot of its format, of any size (`Body::BackupStream`: the
/// connection sends it in pieces).
pub fn take_whole(m: &Machine, taken_ms: i64) -> Response {
    let data = (SnapshotCodec::wire().encode_machine)(m)
        .map_err(|e| ApiError::new(ErrorKind::Invalid, format!("encoding the state: {e}")))?;
    Ok(Reply::Backup {
        format: m.format,
        taken_ms,
        data,
    })
}

/// The header of a backup file (its snapshot's bytes follow).
pub fn file_header(format: u32, taken_ms: i64) -> String {
    format!(
        "{MAGIC} format={format} taken_ms={taken_ms}
"
    )
}

/// The bytes of a backup file.
pub fn file_bytes(format: u32, taken_ms: i64, data: &[u8]) -> Vec<u8> {
    let mut out = file_header(format, taken_ms).into_bytes();
    out.extend_from_slice(data);
    out
}

/// The snapshot bytes of a backup file, checked: it must read as the machine of a format this
/// build reads.
fn parse(bytes: &[u8]) -> Result<(&[u8], Machine), String> {
    let nl = (bytes.iter().take(200).position(|&b| b == b'\n'))
        .ok_or("not an allot backup: no header line")?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| "not an allot backup")?;
    if !header.starts_with(MAGIC) {
        return Err(format!(
            "not an allot backup: the header is {header:?}, expected one starting {MAGIC:?}"
        ));
    }
    let data = &bytes[nl + 1..];
    let m = (SnapshotCodec::wire().decode_machine)(data, crate::format::CURRENT)
        .map_err(|e| format!("the backup's state does not read: {e}"))?;
    Ok((data, m))
}

/// Writes the identity of the cluster restored from `backup` (its bytes) into `dir`.
fn write_identity(dir: &Path, backup: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, backup);
    let id: String = (digest.as_ref().iter().take(16))
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(dir.join(CLUSTER_ID_FILE), &id)
        .map_err(|e| format!("writing {}: {e}", dir.join(CLUSTER_ID_FILE).display()))
}

/// Writes the backup `file` into the empty data directory `dir` as the replica's snapshot at
/// index 1, term 1, with `voters`. Returns what was restored, in words. A replica that `join`s
/// the restored cluster later (`members add`) takes only its identity: its state comes from
/// the leader.
pub fn restore(dir: &Path, file: &Path, voters: &[u64], join: bool) -> Result<String, String> {
    let db = dir.join("raft.redb");
    if db.exists() {
        return Err(format!(
            "{} already holds a log: restore into an empty data directory",
            dir.display()
        ));
    }
    let bytes =
        std::fs::read(file).map_err(|e| format!("reading the backup {}: {e}", file.display()))?;
    let (data, mut m) = parse(&bytes).map_err(|e| format!("{}: {e}", file.display()))?;
    write_identity(dir, &bytes)?;
    if join {
        return Ok(format!(
            "took the identity of the cluster restored from {}; the state comes from the leader once this replica is added",
            file.display()
        ));
    }
    let mut disk = RedbDisk::open(&db).map_err(|e| e.to_string())?;
    // The restored cluster is the replicas of `--peers`: the addresses of replicas the old
    // one added are not its own.
    let data = if m.members.is_empty() {
        data.to_vec()
    } else {
        m.members.clear();
        (SnapshotCodec::wire().encode_machine)(&m)?
    };
    let mut snap = Snapshot {
        data: data.into(),
        ..Default::default()
    };
    let meta = snap.mut_metadata();
    meta.index = 1;
    meta.term = 1;
    let mut cs = ConfState::default();
    cs.set_voters(voters.to_vec());
    meta.set_conf_state(cs);
    let hs = HardState {
        term: 1,
        commit: 1,
        ..Default::default()
    };
    disk.write(&Batch {
        hard_state: Some(&hs),
        entries: &[],
        install: Some(&snap),
        local: None,
        local_file: None,
        compact_to: None,
    })
    .map_err(|e| e.to_string())?;
    Ok(format!(
        "restored {} workloads, {} quotas and {} nodes from {} (format {})",
        m.state.workloads().len(),
        m.quotas.len(),
        m.state.acct().nodes.nodes.len(),
        file.display(),
        m.format
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_restores_into_an_empty_directory_only_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Machine::new();
        m.format = crate::format::CURRENT;
        let Ok(Reply::Backup {
            format,
            taken_ms,
            data,
        }) = take(&m, 7)
        else {
            panic!("no backup");
        };
        let file = dir.path().join("b");
        std::fs::write(&file, file_bytes(format, taken_ms, &data)).expect("write");
        let data_dir = dir.path().join("data");
        // A replica joining the restored cluster takes its identity only.
        let joiner = dir.path().join("joiner");
        let what = restore(&joiner, &file, &[1, 2, 3], true).expect("joins");
        assert!(what.contains("identity"), "{what}");
        assert!(!joiner.join("raft.redb").exists());
        let what = restore(&data_dir, &file, &[1, 2, 3], false).expect("restores");
        assert_eq!(cluster_id(&joiner), cluster_id(&data_dir));
        assert!(what.contains("restored 0 workloads"), "{what}");
        // The replica opens on it: the machine at index 1, in the backup's format.
        let disk = RedbDisk::open(&data_dir.join("raft.redb")).expect("opens");
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let rep = crate::replica::Replica::open(
            crate::replica::ReplicaConfig::new(1, vec![1, 2, 3]),
            disk,
            SnapshotCodec::wire(),
            &logger,
        )
        .expect("the replica opens");
        assert_eq!(rep.applied_index(), 1);
        assert_eq!(rep.machine.format, crate::format::CURRENT);
        drop(rep);
        let again = restore(&data_dir, &file, &[1, 2, 3], false).unwrap_err();
        assert!(again.contains("already holds a log"), "{again}");
        std::fs::write(&file, b"something else\n").expect("write");
        let bad = restore(&dir.path().join("other"), &file, &[1], false).unwrap_err();
        assert!(bad.contains("not an allot backup"), "{bad}");
    }
}

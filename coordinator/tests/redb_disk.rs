//! The real disk (redb behind its journal) against the in-memory model (`MemDisk`): the same
//! seeded sequence of raft writes (appends that overwrite a suffix, hard states, local
//! snapshots with compaction, installed snapshots), with reopens in between, must load back
//! exactly what the model holds. A small journal makes folds, and records too big for the
//! journal, frequent.

use allot_coordinator::raftlog::{Batch, Disk, MemDisk, Persisted, RedbDisk};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn same(what: &str, step: usize, a: &Persisted, b: &Persisted) {
    let key = |p: &Persisted| {
        (
            p.hard_state.clone(),
            // The model keeps the conf state in the snapshot it came with.
            if p.conf_state.voters.is_empty() {
                p.snapshot.get_metadata().get_conf_state().clone()
            } else {
                p.conf_state.clone()
            },
            p.snapshot.get_metadata().index,
            p.snapshot.get_metadata().term,
            p.snapshot.data.to_vec(),
            p.entries
                .iter()
                .map(|e| (e.index, e.term, e.data.to_vec()))
                .collect::<Vec<_>>(),
        )
    };
    let (ka, kb) = (key(a), key(b));
    assert_eq!(ka.0, kb.0, "{what}: hard state after step {step}");
    assert_eq!(ka.1, kb.1, "{what}: conf state after step {step}");
    assert_eq!(
        (ka.2, ka.3, &ka.4),
        (kb.2, kb.3, &kb.4),
        "{what}: snapshot after step {step}"
    );
    assert!(
        ka.5 == kb.5,
        "{what}: entries after step {step}: disk has {:?}, model {:?}",
        a.entries
            .iter()
            .map(|e| (e.index, e.term))
            .collect::<Vec<_>>(),
        b.entries
            .iter()
            .map(|e| (e.index, e.term))
            .collect::<Vec<_>>()
    );
}

fn snapshot(index: u64, term: u64, rng: &mut Rng) -> Snapshot {
    let mut s = Snapshot::default();
    s.mut_metadata().index = index;
    s.mut_metadata().term = term;
    s.mut_metadata().set_conf_state(ConfState {
        voters: vec![1, 2, 3],
        ..Default::default()
    });
    s.data = vec![rng.below(256) as u8; 50 + rng.below(200) as usize].into();
    s
}

fn run(seed: u64, journal_bytes: u64, steps: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft.redb");
    let mut disk = RedbDisk::open_with_journal(&path, journal_bytes).expect("open");
    let mut model = MemDisk::new(false);
    let mut rng = Rng(seed | 1);
    let mut term = 1u64;
    for step in 0..steps {
        let m = model.load().expect("model");
        let snap = m.snapshot.get_metadata().index;
        let last = m.entries.last().map_or(snap, |e| e.index);
        let first = m.entries.first().map_or(snap + 1, |e| e.index);
        let hs;
        let s;
        let file;
        let entries: Vec<Entry>;
        let batch = match rng.below(20) {
            // Appends, some overwriting a suffix, some too big for the journal.
            0..=11 => {
                if rng.below(4) == 0 {
                    term += 1;
                }
                let from = (last + 1).saturating_sub(rng.below(3)).max(snap + 1);
                let big = rng.below(10) == 0;
                let n = 1 + rng.below(if big { 40 } else { 4 });
                let size = 20 + rng.below(300) as usize;
                entries = (from..from + n)
                    .map(|i| Entry {
                        index: i,
                        term,
                        data: vec![(i % 251) as u8; size].into(),
                        ..Default::default()
                    })
                    .collect();
                Batch {
                    entries: &entries,
                    ..Default::default()
                }
            }
            12..=14 => {
                hs = HardState {
                    term,
                    vote: rng.below(4),
                    commit: last,
                    ..Default::default()
                };
                Batch {
                    hard_state: Some(&hs),
                    ..Default::default()
                }
            }
            // A local snapshot of applied state, and the log compacted up to it.
            // Half of them with the data written to its own file first, as the server does.
            15..=16 if last > first => {
                let at = first + rng.below(last - first);
                s = snapshot(at, term, &mut rng);
                // The server only writes files above the latest snapshot; this model also
                // goes below it, so it lets the removal of replaced files finish first.
                disk.wait_for_removals();
                file = match rng.below(2) {
                    0 => Some(
                        disk.snapshot_store()
                            .write(at, &s.data)
                            .expect("snapshot file"),
                    ),
                    _ => None,
                };
                Batch {
                    local: Some(&s),
                    local_file: file.as_ref(),
                    compact_to: Some(at.saturating_sub(rng.below(2))),
                    ..Default::default()
                }
            }
            // A snapshot from the leader, ahead of the log, with the hard state raft-rs
            // writes beside it.
            17 => {
                s = snapshot(last + 1 + rng.below(5), term, &mut rng);
                hs = HardState {
                    term,
                    vote: m.hard_state.vote,
                    commit: s.get_metadata().index,
                    ..Default::default()
                };
                Batch {
                    install: Some(&s),
                    hard_state: Some(&hs),
                    ..Default::default()
                }
            }
            _ => {
                drop(disk);
                disk = RedbDisk::open_with_journal(&path, journal_bytes).expect("reopen");
                same("the reopened disk", step, &disk.load().expect("load"), &m);
                continue;
            }
        };
        if std::env::var_os("ALLOT_TEST_TRACE").is_some() {
            eprintln!(
                "step {step}: hs {:?} entries {:?} install {:?} local {:?} compact {:?}",
                batch.hard_state.map(|h| (h.term, h.commit)),
                batch
                    .entries
                    .first()
                    .map(|e| (e.index, batch.entries.len())),
                batch.install.map(|s| s.get_metadata().index),
                batch.local.map(|s| s.get_metadata().index),
                batch.compact_to
            );
        }
        disk.write(&batch).expect("write");
        model.write(&batch).expect("model write");
    }
    drop(disk);
    let mut disk = RedbDisk::open_with_journal(&path, journal_bytes).expect("reopen");
    same(
        "the disk at the end",
        steps,
        &disk.load().expect("load"),
        &model.load().expect("model"),
    );
}

#[test]
fn redb_behind_its_journal_loads_what_the_model_holds() {
    for seed in 1..=12u64 {
        run(seed * 7919, 4096, 300);
    }
}

#[test]
fn a_journal_that_never_fills_loads_the_same() {
    run(42, 1 << 20, 400);
}

#[test]
fn a_log_with_a_gap_is_reported_as_corrupt_not_loaded() {
    use protobuf::Message as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft.redb");
    {
        let db = redb::Database::create(&path).expect("create");
        let tx = db.begin_write().expect("begin");
        {
            let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("raft_log");
            let mut log = tx.open_table(table).expect("table");
            for index in [1u64, 2, 4] {
                let e = Entry {
                    index,
                    term: 1,
                    ..Default::default()
                };
                let bytes = e.write_to_bytes().expect("encode");
                log.insert(index, bytes.as_slice()).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    let mut disk = RedbDisk::open(&path).expect("open");
    let err = disk.load().expect_err("a gap must not load").to_string();
    assert!(
        err.contains("gap after entry 2") && err.contains("is 4"),
        "{err}"
    );
}

fn snapshot_files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".snapshot-"))
        .collect();
    v.sort();
    v
}

/// Entries 1..=n, then a local snapshot at `at` whose data is in its own file.
fn disk_with_file_snapshot(path: &std::path::Path, at: u64, data: &[u8]) -> RedbDisk {
    let mut disk = RedbDisk::open(path).expect("open");
    let entries: Vec<Entry> = (1..=at + 2)
        .map(|index| Entry {
            index,
            term: 1,
            ..Default::default()
        })
        .collect();
    disk.write(&Batch {
        entries: &entries,
        ..Default::default()
    })
    .expect("append");
    let mut s = Snapshot::default();
    s.mut_metadata().index = at;
    s.mut_metadata().term = 1;
    s.data = data.to_vec().into();
    let f = disk.snapshot_store().write(at, data).expect("file");
    disk.write(&Batch {
        local: Some(&s),
        local_file: Some(&f),
        compact_to: Some(at),
        ..Default::default()
    })
    .expect("snapshot");
    disk
}

#[test]
fn a_damaged_snapshot_file_is_reported_with_its_name_not_loaded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft.redb");
    drop(disk_with_file_snapshot(
        &path,
        5,
        b"the state at entry five",
    ));
    let files = snapshot_files(dir.path());
    assert_eq!(files.len(), 1);
    assert!(
        files[0].starts_with("raft.snapshot-00000000000000000005-"),
        "{files:?}"
    );
    let mut disk = RedbDisk::open(&path).expect("open");
    let p = disk.load().expect("load");
    assert_eq!(&p.snapshot.data[..], b"the state at entry five");
    assert_eq!(p.snapshot.get_metadata().index, 5);
    drop(disk);
    std::fs::write(dir.path().join(&files[0]), b"the state at entry fivE").expect("damage");
    let err = RedbDisk::open(&path)
        .expect("open")
        .load()
        .expect_err("a damaged snapshot must not load")
        .to_string();
    assert!(
        err.contains(&files[0]) && err.contains("CRC-32"),
        "the error names the file and what was wrong: {err}"
    );
}

#[test]
fn snapshot_files_nothing_refers_to_are_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft.redb");
    let disk = disk_with_file_snapshot(&path, 5, b"five");
    // A snapshot written to its file, then a crash before its batch: nothing refers to it.
    disk.snapshot_store().write(7, b"seven").expect("file");
    std::fs::write(
        dir.path().join("raft.snapshot-00000000000000000008-1.tmp"),
        b"ei",
    )
    .expect("tmp");
    drop(disk);
    let mut disk = RedbDisk::open(&path).expect("reopen");
    let files = snapshot_files(dir.path());
    assert!(
        files.len() == 1 && files[0].starts_with("raft.snapshot-00000000000000000005-"),
        "{files:?}"
    );
    // A later snapshot replaces the earlier one's file; one taken into redb removes both.
    let mut s = Snapshot::default();
    s.mut_metadata().index = 6;
    s.mut_metadata().term = 1;
    s.data = b"six".to_vec().into();
    let f = disk.snapshot_store().write(6, b"six").expect("file");
    disk.write(&Batch {
        local: Some(&s),
        local_file: Some(&f),
        compact_to: Some(6),
        ..Default::default()
    })
    .expect("snapshot");
    // The replaced files go on a background thread.
    disk.wait_for_removals();
    assert_eq!(snapshot_files(dir.path()), vec![f.name.clone()]);
    assert!(f.name.starts_with("raft.snapshot-00000000000000000006-"));
    s.mut_metadata().index = 7;
    s.data = b"seven".to_vec().into();
    disk.write(&Batch {
        local: Some(&s),
        compact_to: Some(7),
        ..Default::default()
    })
    .expect("snapshot in redb");
    disk.wait_for_removals();
    assert!(snapshot_files(dir.path()).is_empty());
    assert_eq!(&disk.load().expect("load").snapshot.data[..], b"seven");
}

/// A fold writes the journal's records net of each other: a record that replaced the log's
/// tail with a shorter one leaves nothing of the old tail behind, in redb as in the journal.
#[test]
fn a_fold_keeps_only_what_the_last_overwrite_left() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft.redb");
    let entries = |from: u64, to: u64, term: u64| -> Vec<Entry> {
        (from..=to)
            .map(|index| Entry {
                index,
                term,
                data: vec![index as u8; 8].into(),
                ..Default::default()
            })
            .collect()
    };
    let mut disk = RedbDisk::open(&path).expect("open");
    let mut model = MemDisk::new(false);
    let mut rng = Rng(5);
    let mut write = |disk: &mut RedbDisk, b: &Batch<'_>| {
        disk.write(b).expect("write");
        model.write(b).expect("model write");
    };
    fn append(entries: &[Entry]) -> Batch<'_> {
        Batch {
            entries,
            ..Default::default()
        }
    }
    fn snapshot_at(s: &Snapshot) -> Batch<'_> {
        Batch {
            local: Some(s),
            compact_to: Some(s.get_metadata().index),
            ..Default::default()
        }
    }
    // 1..=10 folded into redb with a first snapshot, then 8.. replaced by one entry and 4..
    // by two, in the journal; a second snapshot folds them.
    write(&mut disk, &append(&entries(1, 10, 1)));
    write(&mut disk, &snapshot_at(&snapshot(2, 1, &mut rng)));
    write(&mut disk, &append(&entries(8, 8, 2)));
    write(&mut disk, &append(&entries(4, 5, 3)));
    write(&mut disk, &snapshot_at(&snapshot(3, 1, &mut rng)));
    drop(disk);
    let loaded = RedbDisk::open(&path).expect("reopen").load().expect("load");
    let got: Vec<(u64, u64)> = loaded.entries.iter().map(|e| (e.index, e.term)).collect();
    assert_eq!(got, vec![(3, 1), (4, 3), (5, 3)]);
    same(
        "the disk after the fold",
        5,
        &loaded,
        &model.load().expect("model"),
    );
}

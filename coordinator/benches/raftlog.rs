//! The cost of one durable raft write (`RedbDisk::write`: one entry appended to the journal and
//! fdatasync'ed; every few thousand, the journal folded into redb), the step every commit waits
//! for on each replica: `cargo bench -p allot-coordinator --bench raftlog`.
//! Set `ALLOT_BENCH_DIR` to put the file on another disk (e.g. /dev/shm for the CPU cost alone).

use std::hint::black_box;

use allot_coordinator::raftlog::{Batch, Disk, RedbDisk};
use criterion::{criterion_group, criterion_main, Criterion};
use raft::eraftpb::{Entry, HardState};

/// A submit-sized entry (a few hundred bytes), as the leader appends and followers persist.
fn submit_sized(index: u64) -> Entry {
    Entry {
        index,
        term: 1,
        data: vec![7u8; 400].into(),
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let base = std::env::var_os("ALLOT_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    let mut disk = RedbDisk::open(&dir.path().join("raft.redb")).expect("open");
    let mut g = c.benchmark_group("raftlog");
    g.sample_size(20);
    let mut index = 0u64;
    g.bench_function("append-one-entry-fsync", |b| {
        b.iter(|| {
            index += 1;
            let e = submit_sized(index);
            disk.write(&Batch {
                entries: std::slice::from_ref(&e),
                ..Default::default()
            })
            .expect("write");
            black_box(index)
        })
    });
    g.bench_function("append-one-entry-and-vote-fsync", |b| {
        b.iter(|| {
            index += 1;
            let e = submit_sized(index);
            let hs = HardState {
                term: 1,
                vote: 1,
                commit: index,
                ..Default::default()
            };
            disk.write(&Batch {
                hard_state: Some(&hs),
                entries: std::slice::from_ref(&e),
                ..Default::default()
            })
            .expect("write");
            black_box(index)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

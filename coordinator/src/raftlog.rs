//! Raft's log and hard state: an in-memory cache that raft-rs reads through its `Storage` trait,
//! written through to a `Disk` that makes it durable before anything is acknowledged.
//!
//! Two disks: `RedbDisk` (redb behind a write-ahead journal, every write fdatasync'ed before it
//! returns; see `crate::journal`) for the real coordinator, and
//! `MemDisk` for the deterministic simulation, which keeps staged writes apart from synced ones so
//! a simulated crash can lose exactly what a real one could.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};
use redb::{ReadableDatabase, ReadableTable};

pub use crate::journal::DiskError;
use crate::journal::{encode_record, Journal, Record, JOURNAL_BYTES};

/// What raft-rs needs back after a restart.
#[derive(Clone, Debug, Default)]
pub struct Persisted {
    pub hard_state: HardState,
    pub conf_state: ConfState,
    /// The latest snapshot, data included (empty when none was taken).
    pub snapshot: Snapshot,
    /// Entries after the snapshot.
    pub entries: Vec<Entry>,
}

/// One batch of changes, written atomically.
#[derive(Default)]
pub struct Batch<'a> {
    pub hard_state: Option<&'a HardState>,
    /// Appended; entries at and after the first one's index are replaced.
    pub entries: &'a [Entry],
    /// A snapshot received from the leader: replaces the whole log.
    pub install: Option<&'a Snapshot>,
    /// A snapshot taken locally of applied state: kept, the log stays.
    pub local: Option<&'a Snapshot>,
    /// With `local`: its data is already durable in this file (`SnapshotStore::write`), so
    /// only the reference goes into the batch. `MemDisk` ignores it.
    pub local_file: Option<&'a SnapshotFile>,
    /// Drop entries before this index (after a local snapshot).
    pub compact_to: Option<u64>,
}

pub trait Disk {
    /// What was synced before; `Persisted::default()` on a fresh disk.
    fn load(&mut self) -> Result<Persisted, DiskError>;
    /// Writes a batch and makes it durable before returning.
    fn write(&mut self, b: &Batch<'_>) -> Result<(), DiskError>;
}

// ---------------------------------------------------------------------------------- the cache

/// The log as raft-rs sees it. Everything here has been written to the disk first.
#[derive(Default)]
pub struct LogCache {
    pub hard_state: HardState,
    pub conf_state: ConfState,
    pub snapshot: Snapshot,
    pub entries: Vec<Entry>,
}

impl LogCache {
    pub fn from_persisted(p: Persisted, voters: &[u64]) -> Self {
        let mut conf_state = p.conf_state;
        if conf_state.voters.is_empty() {
            conf_state.voters = voters.to_vec();
        }
        // The commit index is written lazily (see `Replica::handle_ready_with`), so the one on
        // disk may lag; a snapshot holds only applied, hence committed, entries.
        let mut hard_state = p.hard_state;
        let mut c = LogCache {
            hard_state: HardState::default(),
            conf_state,
            snapshot: p.snapshot,
            entries: p.entries,
        };
        // Never past the log either (raft-rs refuses to start then): a log that lost its last
        // entries (a journal cut short) goes on from what it has.
        hard_state.commit = hard_state.commit.min(c.last()).max(c.snap_index());
        c.hard_state = hard_state;
        c
    }
    fn snap_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }
    /// Entries before a local snapshot may be kept for slow followers, so the first entry can
    /// come before the snapshot.
    pub fn first(&self) -> u64 {
        self.entries.first().map_or(self.snap_index() + 1, |e| {
            e.index.min(self.snap_index() + 1)
        })
    }
    pub fn last(&self) -> u64 {
        self.entries.last().map_or(self.snap_index(), |e| e.index)
    }
    pub fn append(&mut self, ents: &[Entry]) {
        let Some(first) = ents.first() else { return };
        let keep = first.index.saturating_sub(self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(ents);
    }
    /// Installs a snapshot from the leader: the whole log is replaced.
    pub fn install(&mut self, s: &Snapshot) {
        let meta = s.get_metadata();
        self.entries.clear();
        self.conf_state = meta.get_conf_state().clone();
        if self.hard_state.commit < meta.index {
            self.hard_state.commit = meta.index;
        }
        if self.hard_state.term < meta.term {
            self.hard_state.term = meta.term;
        }
        self.snapshot = s.clone();
    }
    /// Records a snapshot taken locally and returns the one it replaces; entries stay until
    /// compacted.
    pub fn record(&mut self, s: &Snapshot) -> Snapshot {
        std::mem::replace(&mut self.snapshot, s.clone())
    }
    /// Drops the entries before `to` and returns them, for the caller to free where it
    /// suits: ten thousand entries took milliseconds to free.
    pub fn compact(&mut self, to: u64) -> Vec<Entry> {
        let n = self.entries.partition_point(|e| e.index < to);
        let kept = self.entries.split_off(n);
        std::mem::replace(&mut self.entries, kept)
    }
}

fn store_err(e: StorageError) -> raft::Error {
    raft::Error::Store(e)
}

impl raft::Storage for LogCache {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state.clone(),
            conf_state: self.conf_state.clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _ctx: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(store_err(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(store_err(StorageError::Unavailable));
        }
        let off = self.first();
        if self.entries.first().map(|e| e.index) != Some(off) && low < high {
            return Err(store_err(StorageError::Compacted));
        }
        let max = max_size.into().unwrap_or(u64::MAX);
        let mut out = Vec::new();
        let mut size = 0u64;
        for e in &self.entries[(low - off) as usize..(high - off) as usize] {
            size += u64::from(e.compute_size());
            if !out.is_empty() && size > max {
                break;
            }
            out.push(e.clone());
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx > self.last() {
            return Err(store_err(StorageError::Unavailable));
        }
        match self.entries.first() {
            Some(e) if idx >= e.index => Ok(self.entries[(idx - e.index) as usize].term),
            _ => Err(store_err(StorageError::Compacted)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // A replica just added refuses a snapshot whose configuration lacks it: it waits for
        // the one taken where it was added.
        let conf = self.snapshot.get_metadata().get_conf_state();
        let has_to = conf.voters.contains(&to) || conf.learners.contains(&to);
        if self.snap_index() < request_index || self.snapshot.data.is_empty() || !has_to {
            return Err(store_err(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}

// ---------------------------------------------------------------------------------- MemDisk

/// A disk in memory for the simulation. `write` stages; `sync` makes durable; `crash` drops
/// what was staged and not synced.
#[derive(Clone, Default)]
pub struct MemDisk {
    inner: Arc<Mutex<MemDiskInner>>,
}

#[derive(Default)]
struct MemDiskInner {
    synced: LogCache,
    staged: Option<LogCache>,
    /// When set, writes stay staged until `sync` (the simulation's fault model).
    manual_sync: bool,
}

fn copy(c: &LogCache) -> LogCache {
    LogCache {
        hard_state: c.hard_state.clone(),
        conf_state: c.conf_state.clone(),
        snapshot: c.snapshot.clone(),
        entries: c.entries.clone(),
    }
}

impl MemDisk {
    pub fn new(manual_sync: bool) -> Self {
        let d = MemDisk::default();
        d.lock().manual_sync = manual_sync;
        d
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, MemDiskInner> {
        // A poisoned lock only means a test thread panicked; the data is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Makes staged writes durable.
    pub fn sync(&self) {
        let mut g = self.lock();
        if let Some(s) = g.staged.take() {
            g.synced = s;
        }
    }
    /// Loses everything not synced.
    pub fn crash(&self) {
        self.lock().staged = None;
    }
    pub fn synced_last_index(&self) -> u64 {
        self.lock().synced.last()
    }
    /// Loses up to the last `n` durable entries after the snapshot (a journal cut short: the
    /// journal holds only what came after the last fold, which every snapshot does), and
    /// anything not synced. Returns how many were lost.
    pub fn lose_tail(&self, n: usize) -> usize {
        let mut g = self.lock();
        g.staged = None;
        let snap = g.synced.snap_index();
        let after = g.synced.entries.iter().filter(|e| e.index > snap).count();
        let lost = n.min(after);
        let keep = g.synced.entries.len() - lost;
        g.synced.entries.truncate(keep);
        lost
    }
}

impl Disk for MemDisk {
    fn load(&mut self) -> Result<Persisted, DiskError> {
        let g = self.lock();
        let c = copy(&g.synced);
        Ok(Persisted {
            hard_state: c.hard_state,
            conf_state: c.conf_state,
            snapshot: c.snapshot,
            entries: c.entries,
        })
    }
    fn write(&mut self, b: &Batch<'_>) -> Result<(), DiskError> {
        let mut g = self.lock();
        let mut next = match &g.staged {
            Some(s) => copy(s),
            None => copy(&g.synced),
        };
        apply_batch(&mut next, b);
        if g.manual_sync {
            g.staged = Some(next);
        } else {
            g.synced = next;
        }
        Ok(())
    }
}

fn apply_batch(c: &mut LogCache, b: &Batch<'_>) {
    if let Some(s) = b.install {
        c.install(s);
    }
    if let Some(s) = b.local {
        c.record(s);
        // What the disk gives back on load is the configuration at its snapshot; changes
        // after it are applied again from the log (as `RedbDisk` does).
        c.conf_state = s.get_metadata().get_conf_state().clone();
    }
    c.append(b.entries);
    if let Some(hs) = b.hard_state {
        c.hard_state = hs.clone();
    }
    if let Some(to) = b.compact_to {
        c.compact(to);
    }
}

// ---------------------------------------------------------------------------------- RedbDisk

/// A snapshot's data in its own file beside the redb file, written by `SnapshotStore::write`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The file's name in the redb file's directory.
    pub name: String,
    pub len: u64,
    pub crc: u32,
}

impl SnapshotFile {
    fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + self.name.len());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.crc.to_le_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Result<Self, DiskError> {
        let bad = || {
            DiskError::Corrupt(format!(
                "{SNAPSHOT_FILE} holds {} bytes that do not name a snapshot file",
                b.len()
            ))
        };
        if b.len() < 13 {
            return Err(bad());
        }
        let len = u64::from_le_bytes(b[..8].try_into().map_err(|_| bad())?);
        let crc = u32::from_le_bytes(b[8..12].try_into().map_err(|_| bad())?);
        let name = std::str::from_utf8(&b[12..])
            .map_err(|_| bad())?
            .to_string();
        Ok(SnapshotFile { name, len, crc })
    }
}

/// Writes snapshot data into files beside a `RedbDisk`, from any thread: a snapshot's data is
/// most of its cost to write, and written into redb it held the raft thread up for as long as
/// that took. The reference then goes into redb with the compaction (`Batch::local_file`).
#[derive(Clone, Debug)]
pub struct SnapshotStore {
    dir: PathBuf,
    /// `raft` for `raft.redb`: files are `raft.snapshot-<index>-<nanoseconds>`.
    stem: String,
}

impl SnapshotStore {
    fn for_db(path: &Path) -> Self {
        SnapshotStore {
            dir: path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            stem: path
                .file_stem()
                .map_or_else(|| "raft".to_string(), |s| s.to_string_lossy().into_owned()),
        }
    }

    /// A new name for the snapshot at `index`: never one a recorded snapshot has, so writing
    /// it cannot replace the data a committed reference points at.
    fn name(&self, index: u64) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}.snapshot-{index:020}-{nanos:x}", self.stem)
    }

    /// The index in a snapshot file's name, for files of this store.
    fn index_of(&self, name: &str) -> Option<u64> {
        let rest = name.strip_prefix(&self.stem)?.strip_prefix(".snapshot-")?;
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    }

    /// Writes the data of the snapshot at `index` and makes it durable: a temporary file,
    /// fsync'ed, renamed into place, and the directory fsync'ed.
    pub fn write(&self, index: u64, data: &[u8]) -> Result<SnapshotFile, DiskError> {
        let name = self.name(index);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let io = |what: String| DiskError::Io {
            path: path.display().to_string(),
            what,
        };
        let mut f = std::fs::File::create(&tmp)
            .map_err(|e| io(format!("creating {}: {e}", tmp.display())))?;
        f.write_all(data)
            .and_then(|_| f.sync_all())
            .map_err(|e| io(format!("writing {}: {e}", tmp.display())))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| io(format!("renaming {}: {e}", tmp.display())))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(format!("syncing directory {}: {e}", self.dir.display())))?;
        Ok(SnapshotFile {
            name,
            len: data.len() as u64,
            crc: crc32fast::hash(data),
        })
    }

    fn read(&self, f: &SnapshotFile) -> Result<Vec<u8>, DiskError> {
        let path = self.dir.join(&f.name);
        let data = std::fs::read(&path).map_err(|e| {
            DiskError::Corrupt(format!(
                "the snapshot file {} cannot be read: {e}",
                path.display()
            ))
        })?;
        let crc = crc32fast::hash(&data);
        if data.len() as u64 != f.len || crc != f.crc {
            return Err(DiskError::Corrupt(format!(
                "the snapshot file {} holds {} bytes with CRC-32 {crc:08x}; {} bytes with CRC-32 {:08x} were written",
                path.display(),
                data.len(),
                f.len,
                f.crc
            )));
        }
        Ok(data)
    }

    /// Removes this store's files for snapshots before `index`, except `keep`, and leftover
    /// temporary files before it (best effort: a file left behind only takes space).
    fn remove_older(&self, index: u64, keep: Option<&str>) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if Some(name.as_str()) == keep {
                continue;
            }
            if self.index_of(&name).is_some_and(|i| i < index) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

const LOG: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("raft_log");
const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("raft_meta");

/// Which journal generation redb already holds (u64, little-endian).
const FOLDED: &str = "journal_folded";
/// When the latest snapshot's data is in its own file: which (`SnapshotFile::to_bytes`).
const SNAPSHOT_FILE: &str = "snapshot_file";

/// The durable log in a redb file, written through a journal (`crate::journal`): each batch is
/// one record appended and fdatasync'ed there; the records are folded into redb in one
/// transaction, committed with fsync, when the journal fills up and with every snapshot.
pub struct RedbDisk {
    db: redb::Database,
    path: String,
    journal: Journal,
    /// What the journal holds that redb does not yet, in the order it was written.
    pending: Vec<Record>,
    snapshots: SnapshotStore,
    /// Removing the files of snapshots a fold replaced, on a thread of its own: unlinking a
    /// file of tens of MB held the raft thread for up to 10 ms.
    removing: Option<std::thread::JoinHandle<()>>,
}

/// What a run of journal records leaves once each has replaced the log from its first entry
/// on: folding writes this in one pass, not each record in turn (a per-record range delete
/// over ten thousand records held the raft thread for milliseconds).
struct Net<'a> {
    /// The lowest index any record replaced the log from: the stored log is cut there.
    cut: Option<u64>,
    /// The entries the records leave from `cut` on, in index order, without those below the
    /// fold's compaction point.
    entries: Vec<&'a Entry>,
    /// The last hard state written.
    hard_state: Option<&'a HardState>,
}

impl<'a> Net<'a> {
    fn of(records: &'a [Record], dropped: u64) -> Self {
        let mut net = Net {
            cut: None,
            entries: Vec::new(),
            hard_state: None,
        };
        for r in records {
            if let Some(first) = r.entries.first() {
                net.cut = Some(net.cut.map_or(first.index, |c| c.min(first.index)));
                let kept = net.entries.partition_point(|e| e.index < first.index);
                net.entries.truncate(kept);
                net.entries
                    .extend(r.entries.iter().filter(|e| e.index >= dropped));
            }
            if let Some(hs) = &r.hard_state {
                net.hard_state = Some(hs);
            }
        }
        net
    }
}

impl RedbDisk {
    /// Opens `path` and the journal beside it (`raft.journal` for `raft.redb`).
    pub fn open(path: &Path) -> Result<Self, DiskError> {
        Self::open_with_journal(path, JOURNAL_BYTES)
    }

    /// Like `open`, with a journal of `journal_bytes` if it has to be created.
    pub fn open_with_journal(path: &Path, journal_bytes: u64) -> Result<Self, DiskError> {
        let p = path.display().to_string();
        let io = |what: String| DiskError::Io {
            path: p.clone(),
            what,
        };
        let db = redb::Database::create(path).map_err(|e| io(e.to_string()))?;
        let tx = db.begin_write().map_err(|e| io(e.to_string()))?;
        tx.open_table(LOG).map_err(|e| io(e.to_string()))?;
        let folded = {
            let meta = tx.open_table(META).map_err(|e| io(e.to_string()))?;
            let v = meta.get(FOLDED).map_err(|e| io(e.to_string()))?;
            match v {
                None => 0,
                Some(v) => {
                    let b: [u8; 8] = v.value().try_into().map_err(|_| {
                        DiskError::Corrupt(format!(
                            "{FOLDED} holds {} bytes, not 8",
                            v.value().len()
                        ))
                    })?;
                    u64::from_le_bytes(b)
                }
            }
        };
        tx.commit().map_err(|e| io(e.to_string()))?;
        let (journal, pending) =
            Journal::open(&path.with_extension("journal"), journal_bytes, folded)?;
        let disk = RedbDisk {
            db,
            path: p,
            journal,
            pending,
            snapshots: SnapshotStore::for_db(path),
            removing: None,
        };
        // Files of snapshots that were never recorded (a crash before their batch) or that a
        // later one replaced: nothing refers to them.
        let file = disk.current_snapshot_file()?;
        disk.snapshots
            .remove_older(u64::MAX, file.as_ref().map(|f| f.name.as_str()));
        Ok(disk)
    }

    /// What opening repaired in the journal (a torn last record, a file cut short), if
    /// anything.
    pub fn repaired(&self) -> Option<&str> {
        self.journal.repaired()
    }

    /// Where snapshot data can be written from another thread (`Batch::local_file`).
    pub fn snapshot_store(&self) -> SnapshotStore {
        self.snapshots.clone()
    }

    /// Removes the files of snapshots before `index`, except `keep`, on a background thread
    /// (here, if none can be started).
    fn remove_older_later(&mut self, index: u64, keep: Option<String>) {
        self.wait_for_removals();
        let files = self.snapshots.clone();
        let name = format!("{}-files", self.snapshots.stem);
        let k = keep.clone();
        match crate::priority::in_background(name, move || files.remove_older(index, k.as_deref()))
        {
            Ok(h) => self.removing = Some(h),
            Err(_) => self.snapshots.remove_older(index, keep.as_deref()),
        }
    }

    /// Waits until the files of replaced snapshots are removed.
    pub fn wait_for_removals(&mut self) {
        if let Some(h) = self.removing.take() {
            let _ = h.join();
        }
    }

    /// The file the latest snapshot's data is in, if it has one.
    fn current_snapshot_file(&self) -> Result<Option<SnapshotFile>, DiskError> {
        let tx = self.db.begin_read().map_err(|e| self.io(e))?;
        let meta = tx.open_table(META).map_err(|e| self.io(e))?;
        let v = meta.get(SNAPSHOT_FILE).map_err(|e| self.io(e))?;
        v.map(|v| SnapshotFile::from_bytes(v.value())).transpose()
    }
    fn io(&self, e: impl std::fmt::Display) -> DiskError {
        DiskError::Io {
            path: self.path.clone(),
            what: e.to_string(),
        }
    }

    /// Writes what the journal holds, then `extra`, into redb in one transaction that also
    /// records the journal's generation as folded; the journal then starts a new generation.
    fn fold(&mut self, extra: Option<&Batch<'_>>) -> Result<(), DiskError> {
        let mut tx = self.db.begin_write().map_err(|e| self.io(e))?;
        tx.set_durability(redb::Durability::Immediate)
            .map_err(|e| self.io(e))?;
        {
            let mut log = tx.open_table(LOG).map_err(|e| self.io(e))?;
            let mut meta = tx.open_table(META).map_err(|e| self.io(e))?;
            // Entries that `extra` compacts away are never written: a snapshot folds some ten
            // thousand records, and writing the entries it then deletes was most of its cost.
            let dropped = extra.and_then(|b| b.compact_to).unwrap_or(0);
            let net = Net::of(&self.pending, dropped);
            if let Some(from) = net.cut {
                log.retain_in(from.max(dropped).., |_, _| false)
                    .map_err(|e| self.io(e))?;
            }
            for e in &net.entries {
                log.insert(e.index, encode(*e)?.as_slice())
                    .map_err(|e| self.io(e))?;
            }
            if let Some(hs) = net.hard_state {
                meta.insert("hard_state", encode(hs)?.as_slice())
                    .map_err(|e| self.io(e))?;
            }
            if let Some(b) = extra {
                self.apply(&mut log, &mut meta, b)?;
            }
            meta.insert(FOLDED, self.journal.generation().to_le_bytes().as_slice())
                .map_err(|e| self.io(e))?;
        }
        tx.commit().map_err(|e| self.io(e))?;
        let folded = std::mem::take(&mut self.pending);
        if folded.len() > 1 {
            // Freeing ten thousand records held the raft thread for milliseconds.
            let name = format!("{}-folded", self.snapshots.stem);
            let _ = crate::priority::in_background(name, move || drop(folded));
        }
        self.journal.next_generation();
        if let Some(s) = extra.and_then(|b| b.install.or(b.local)) {
            // Files of earlier snapshots; a later one may be being written beside them.
            let keep = extra.and_then(|b| b.local_file).map(|f| f.name.clone());
            self.remove_older_later(s.get_metadata().index, keep);
        }
        Ok(())
    }

    fn apply(
        &self,
        log: &mut redb::Table<u64, &[u8]>,
        meta: &mut redb::Table<&str, &[u8]>,
        b: &Batch<'_>,
    ) -> Result<(), DiskError> {
        if let Some(s) = b.install.or(b.local) {
            if b.install.is_some() {
                log.retain(|_, _| false).map_err(|e| self.io(e))?;
            }
            match b.local_file.filter(|_| b.install.is_none()) {
                Some(f) => {
                    let mut without_data = s.clone();
                    without_data.data = Default::default();
                    meta.insert("snapshot", encode(&without_data)?.as_slice())
                        .map_err(|e| self.io(e))?;
                    meta.insert(SNAPSHOT_FILE, f.to_bytes().as_slice())
                        .map_err(|e| self.io(e))?;
                }
                None => {
                    meta.insert("snapshot", encode(s)?.as_slice())
                        .map_err(|e| self.io(e))?;
                    meta.remove(SNAPSHOT_FILE).map_err(|e| self.io(e))?;
                }
            }
            meta.insert(
                "conf_state",
                encode(s.get_metadata().get_conf_state())?.as_slice(),
            )
            .map_err(|e| self.io(e))?;
        }
        if let Some(first) = b.entries.first() {
            log.retain_in(first.index.., |_, _| false)
                .map_err(|e| self.io(e))?;
            for e in b.entries {
                log.insert(e.index, encode(e)?.as_slice())
                    .map_err(|e| self.io(e))?;
            }
        }
        if let Some(hs) = b.hard_state {
            meta.insert("hard_state", encode(hs)?.as_slice())
                .map_err(|e| self.io(e))?;
        }
        if let Some(to) = b.compact_to {
            log.retain_in(..to, |_, _| false).map_err(|e| self.io(e))?;
        }
        Ok(())
    }
}

impl Drop for RedbDisk {
    fn drop(&mut self) {
        self.wait_for_removals();
    }
}

/// Replays one journal record over what redb held.
fn replay(p: &mut Persisted, r: &Record) -> Result<(), DiskError> {
    if let Some(first) = r.entries.first() {
        if let Some(last) = p.entries.last() {
            if first.index > last.index + 1 {
                return Err(DiskError::Corrupt(format!(
                    "the journal continues the log at entry {} but the log ends at {}",
                    first.index, last.index
                )));
            }
        }
        p.entries.retain(|e| e.index < first.index);
        p.entries.extend(r.entries.iter().cloned());
    }
    if let Some(hs) = &r.hard_state {
        p.hard_state = hs.clone();
    }
    Ok(())
}

fn decode<M: protobuf::Message>(what: &str, b: &[u8]) -> Result<M, DiskError> {
    M::parse_from_bytes(b).map_err(|e| DiskError::Corrupt(format!("{what}: {e}")))
}

fn encode<M: protobuf::Message>(m: &M) -> Result<Vec<u8>, DiskError> {
    m.write_to_bytes()
        .map_err(|e| DiskError::Corrupt(format!("encoding: {e}")))
}

impl Disk for RedbDisk {
    fn load(&mut self) -> Result<Persisted, DiskError> {
        let tx = self.db.begin_read().map_err(|e| self.io(e))?;
        let meta = tx.open_table(META).map_err(|e| self.io(e))?;
        let log = tx.open_table(LOG).map_err(|e| self.io(e))?;
        let mut p = Persisted::default();
        if let Some(v) = meta.get("hard_state").map_err(|e| self.io(e))? {
            p.hard_state = decode("hard state", v.value())?;
        }
        if let Some(v) = meta.get("snapshot").map_err(|e| self.io(e))? {
            p.snapshot = decode("snapshot", v.value())?;
            p.conf_state = p.snapshot.get_metadata().get_conf_state().clone();
        }
        if let Some(v) = meta.get(SNAPSHOT_FILE).map_err(|e| self.io(e))? {
            let f = SnapshotFile::from_bytes(v.value())?;
            p.snapshot.data = self.snapshots.read(&f)?.into();
        }
        if let Some(v) = meta.get("conf_state").map_err(|e| self.io(e))? {
            p.conf_state = decode("conf state", v.value())?;
        }
        for item in log.range(0..).map_err(|e| self.io(e))? {
            let (k, v) = item.map_err(|e| self.io(e))?;
            let e: Entry = decode("log entry", v.value())?;
            if e.index != k.value() {
                return Err(DiskError::Corrupt(format!(
                    "log key {} holds entry {}",
                    k.value(),
                    e.index
                )));
            }
            // The storage indexes entries by offset from the first: a gap would misplace them.
            if let Some(prev) = p.entries.last() {
                if e.index != prev.index + 1 {
                    return Err(DiskError::Corrupt(format!(
                        "the log has a gap after entry {}: the next one stored is {}",
                        prev.index, e.index
                    )));
                }
            }
            p.entries.push(e);
        }
        for r in &self.pending {
            replay(&mut p, r)?;
        }
        Ok(p)
    }

    fn write(&mut self, b: &Batch<'_>) -> Result<(), DiskError> {
        if b.install.is_none() && b.local.is_none() && b.compact_to.is_none() {
            let payload = encode_record(b.hard_state, b.entries)?;
            if self.journal.append(&payload)? {
                self.pending.push(Record {
                    hard_state: b.hard_state.cloned(),
                    entries: b.entries.to_vec(),
                });
                return Ok(());
            }
        }
        // Snapshots, and whatever does not fit in the journal, go to redb with it.
        self.fold(Some(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(first: u64, n: u64, term: u64, commit: Option<u64>) -> Record {
        Record {
            hard_state: commit.map(|commit| HardState {
                term,
                commit,
                ..Default::default()
            }),
            entries: (first..first + n)
                .map(|index| Entry {
                    index,
                    term,
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn records_net_of_each_other_as_if_written_in_turn() {
        // 1..=6 at term 1, 4..=6 replaced at term 2, 7..=8 appended, then 5.. replaced again.
        let records = [
            record(1, 6, 1, None),
            record(4, 3, 2, Some(3)),
            record(7, 2, 2, None),
            record(5, 2, 3, Some(6)),
        ];
        let net = Net::of(&records, 0);
        assert_eq!(net.cut, Some(1));
        let got: Vec<(u64, u64)> = net.entries.iter().map(|e| (e.index, e.term)).collect();
        assert_eq!(got, vec![(1, 1), (2, 1), (3, 1), (4, 2), (5, 3), (6, 3)]);
        assert_eq!(net.hard_state.map(|h| h.commit), Some(6));
        // With the fold compacting up to 5, nothing before it is written; the cut stays.
        let net = Net::of(&records, 5);
        assert_eq!(net.cut, Some(1));
        let got: Vec<u64> = net.entries.iter().map(|e| e.index).collect();
        assert_eq!(got, vec![5, 6]);
        // Records without entries cut nothing.
        let empty = [record(1, 0, 1, Some(0))];
        let net = Net::of(&empty, 0);
        assert_eq!((net.cut, net.entries.len()), (None, 0));
    }
}

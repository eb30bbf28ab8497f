//! A team's queue: the order of its entries (`QueueKey`), and the entries grouped by shape with
//! the pending texts each group's entries show (`ShapeIndex`).
//!
//! A cycle settles a waiting workload from its shape's outcome alone (see `scheduler`). Where
//! every entry of a shape already shows that outcome, settling them changes nothing, so the
//! cycle passes over a stretch of such entries in one step instead of entry by entry; a
//! decision later in the cycle finds, here, per shape, the first entry it must take back. With
//! a deep backlog that walk was most of a cycle's cost. Below `state`, which keeps the index
//! as entries come, go and change what they show.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::WlId;

/// What a pending workload shows as its QuotaReserved reason and message (`None`: nothing
/// yet; see `Workload::shown`).
pub type Shown = Option<(Arc<str>, Arc<str>)>;

/// Whether two shared texts say the same: by address first (texts said again are the same
/// allocation), else by content.
pub fn same_text(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// A map keyed by shape fingerprint (or a key that starts with one).
pub type ByShape<K, V> = HashMap<K, V, BuildHasherDefault<FingerprintHasher>>;

/// The hasher of a cycle's per-shape maps (`scheduler`, `cycle_cache`), whose keys start with a 128-bit SipHash
/// fingerprint: already uniform, so it needs only folding. Looked up once per queue entry, they
/// are the fast cycle's inner loop. Never iterated where the order could change a result (only
/// into ordered maps).
#[derive(Default)]
pub struct FingerprintHasher(u64);

impl FingerprintHasher {
    fn mix(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.mix(u64::from(*b));
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.mix(v as u64 ^ (v >> 64) as u64);
    }
    fn write_i64(&mut self, v: i64) {
        self.mix(v as u64);
    }
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }
}

/// Queue order inside a team: higher priority first, then submit time, name, id.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueueKey {
    pub neg_priority: i64,
    /// Its submit time (a `state::Time`).
    pub submit: i64,
    /// Shared, so copying a queue (every cycle the leader runs copies the state) allocates no
    /// name.
    pub name: Arc<str>,
    pub id: WlId,
    /// The workload's shape fingerprint (`Workload::shape_fingerprint`), so a cycle can tell
    /// workloads of one shape apart from the queue alone. Not part of the order (the id is
    /// unique); 0 in queues written before it existed, which a cycle treats as unknown.
    #[serde(default)]
    pub shape: u128,
}

impl PartialEq for QueueKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for QueueKey {}
impl PartialOrd for QueueKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for QueueKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.neg_priority, self.submit, &self.name, self.id).cmp(&(
            other.neg_priority,
            other.submit,
            &other.name,
            other.id,
        ))
    }
}

/// One shape's entries in a team's queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShapeQueue {
    /// In queue order.
    pub keys: BTreeSet<QueueKey>,
    /// The distinct texts the entries show, each with how many show it (a few at most: a
    /// cycle gives one shape one outcome, but arrivals show nothing yet).
    shows: Vec<(Shown, u32)>,
    /// The first of `keys`, kept beside the counts: a cycle asks every shape for it, and
    /// finding it in the tree cost a few cache misses each.
    first: Option<QueueKey>,
}

impl ShapeQueue {
    /// The shape's first entry in queue order.
    pub fn first(&self) -> Option<&QueueKey> {
        debug_assert_eq!(self.first.as_ref(), self.keys.first());
        self.first.as_ref()
    }

    /// Whether every entry shows `reason` and `message` (compared by address first).
    pub fn all_show(&self, reason: &Arc<str>, message: &Arc<str>) -> bool {
        match self.shows.as_slice() {
            [(Some((r, m)), n)] => {
                *n as usize == self.keys.len() && same_text(r, reason) && same_text(m, message)
            }
            _ => false,
        }
    }

    fn count(&mut self, shown: Shown, add: bool) {
        match self.shows.iter().position(|(s, _)| *s == shown) {
            Some(i) if add => self.shows[i].1 += 1,
            Some(i) => {
                self.shows[i].1 -= 1;
                if self.shows[i].1 == 0 {
                    self.shows.swap_remove(i);
                }
            }
            None if add => self.shows.push((shown, 1)),
            // Removing what was never counted: the invariant check reports the drift.
            None => {}
        }
    }
}

/// A team's queue by shape fingerprint (`QueueKey::shape`; 0, an entry written before
/// fingerprints existed, groups the unknown). Copy-on-write, like the queue: a copy of the
/// state shares it until one side changes a shape, which then copies that shape alone. Not
/// saved: `built` is false in a state read back, and the first change to the state's queues
/// builds it (`State::shape_index`); until then a cycle walks the queue.
#[derive(Clone, Debug, Default)]
pub struct ShapeIndex {
    pub built: bool,
    shapes: Arc<BTreeMap<u128, Arc<ShapeQueue>>>,
}

impl PartialEq for ShapeIndex {
    fn eq(&self, other: &Self) -> bool {
        self.built == other.built && self.shapes == other.shapes
    }
}

impl ShapeIndex {
    /// The index of an empty queue.
    pub fn new() -> Self {
        Self::build(std::iter::empty())
    }

    /// The index of a queue whose entries are `entries` (each with what it shows).
    pub fn build<'a>(entries: impl IntoIterator<Item = (&'a QueueKey, Shown)>) -> Self {
        let mut index = ShapeIndex {
            built: true,
            shapes: Arc::default(),
        };
        for (k, s) in entries {
            index.insert(k, s);
        }
        index
    }

    pub fn shapes(&self) -> impl Iterator<Item = (u128, &ShapeQueue)> {
        self.shapes.iter().map(|(s, q)| (*s, &**q))
    }

    pub fn get(&self, shape: u128) -> Option<&ShapeQueue> {
        self.shapes.get(&shape).map(|q| &**q)
    }

    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    fn shape_mut(&mut self, shape: u128) -> &mut ShapeQueue {
        Arc::make_mut(Arc::make_mut(&mut self.shapes).entry(shape).or_default())
    }

    pub fn insert(&mut self, key: &QueueKey, shown: Shown) {
        if !self.built {
            return;
        }
        let q = self.shape_mut(key.shape);
        if q.keys.insert(key.clone()) {
            q.count(shown, true);
            if q.first.as_ref().is_none_or(|f| key < f) {
                q.first = Some(key.clone());
            }
        }
    }

    pub fn remove(&mut self, key: &QueueKey, shown: Shown) {
        if !self.built {
            return;
        }
        let q = self.shape_mut(key.shape);
        if q.keys.remove(key) {
            q.count(shown, false);
            if q.first.as_ref() == Some(key) {
                q.first = q.keys.first().cloned();
            }
        }
        if q.keys.is_empty() {
            Arc::make_mut(&mut self.shapes).remove(&key.shape);
        }
    }

    /// Where this index differs from `whole`, one built from the queue as it is: the first
    /// shape that differs, or `Ok`. (The order of a shape's counts carries nothing.)
    pub fn differs_from(&self, whole: &ShapeIndex) -> Result<(), String> {
        let sorted = |q: &ShapeQueue| {
            let mut v = q.shows.clone();
            v.sort();
            v
        };
        let shapes: BTreeSet<u128> = self
            .shapes
            .keys()
            .chain(whole.shapes.keys())
            .copied()
            .collect();
        for s in shapes {
            let (a, b) = (self.get(s), whole.get(s));
            let same = match (a, b) {
                (Some(a), Some(b)) => a.keys == b.keys && sorted(a) == sorted(b),
                _ => false,
            };
            if !same {
                return Err(format!(
                    "shape {s:032x}: the index holds {:?}, the queue {:?}",
                    a.map(|q| (q.keys.len(), sorted(q))),
                    b.map(|q| (q.keys.len(), sorted(q)))
                ));
            }
        }
        Ok(())
    }

    /// An entry of `shape` now shows `now` instead of `was`.
    pub fn change(&mut self, shape: u128, was: Shown, now: Shown) {
        if !self.built || was == now {
            return;
        }
        let q = self.shape_mut(shape);
        q.count(was, false);
        q.count(now, true);
    }
}

//! `WlMap`: workloads by id, cheap to copy. The leader copies the whole state for every cycle
//! it computes off its raft thread; with tens of thousands of workloads, copying an ordinary
//! ordered map (a reference count and a tree node per entry) took most of ten milliseconds on
//! that thread. Here ids fall into chunks of `CHUNK` consecutive ids, each chunk shared between
//! copies until one side changes it: a copy costs a reference count per chunk, and the first
//! change to a shared chunk copies that chunk alone.
//!
//! Iteration is in id order, as the ordered map's was, and it is stored as the same map (a
//! snapshot written before it existed reads back unchanged).
//!
//! `NameMap`, workloads by (name, team), is shared the same way in buckets by a hash of the
//! name (all of one name's entries in one bucket).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{TeamId, WlId};

/// Ids per chunk.
const CHUNK: u64 = 256;

/// The most chunks the dense window spans (2^20 chunks: 268 million consecutive ids, 8 MiB of
/// pointers at most). Ids are handed out in order, so live ones stay within it; an id that would
/// stretch it further (only a damaged or hand-made state has one) goes to `outside`.
const MAX_SPAN: u64 = 1 << 20;

#[derive(Clone, Debug)]
pub struct WlMap<V> {
    /// Chunk `base + i` at index `i`: ids `(base + i) * CHUNK ..` up to the next chunk, a slot
    /// per id. Emptied chunks at either end are dropped, so the window follows the live ids.
    window: VecDeque<Option<Arc<Chunk<V>>>>,
    base: u64,
    /// Entries whose chunk lies outside the window and could not join it.
    outside: BTreeMap<WlId, V>,
    len: usize,
}

#[derive(Clone, Debug)]
struct Chunk<V> {
    slots: Vec<Option<V>>,
    used: usize,
}

impl<V> Default for WlMap<V> {
    fn default() -> Self {
        WlMap {
            window: VecDeque::new(),
            base: 0,
            outside: BTreeMap::new(),
            len: 0,
        }
    }
}

/// The chunk and the slot of `id`.
fn place(id: &WlId) -> (u64, usize) {
    (id.0 / CHUNK, (id.0 % CHUNK) as usize)
}

impl<V: Clone> WlMap<V> {
    /// The window index of chunk `c`, if the window covers it.
    fn index(&self, c: u64) -> Option<usize> {
        let i = c.checked_sub(self.base)?;
        (i < self.window.len() as u64).then_some(i as usize)
    }

    pub fn get(&self, id: &WlId) -> Option<&V> {
        let (c, i) = place(id);
        match self.index(c) {
            Some(w) => self.window[w].as_ref()?.slots[i].as_ref(),
            None => self.outside.get(id),
        }
    }

    /// The value to change: its chunk is copied first if a copy of the map still shares it.
    pub fn get_mut(&mut self, id: &WlId) -> Option<&mut V> {
        let (c, i) = place(id);
        match self.index(c) {
            Some(w) => {
                let chunk = self.window[w].as_mut()?;
                chunk.slots[i].as_ref()?;
                Arc::make_mut(chunk).slots[i].as_mut()
            }
            None => self.outside.get_mut(id),
        }
    }

    pub fn contains_key(&self, id: &WlId) -> bool {
        self.get(id).is_some()
    }

    /// Stretches the window to cover chunk `c` if that keeps it within `MAX_SPAN`.
    fn cover(&mut self, c: u64) -> Option<usize> {
        if self.window.is_empty() {
            self.base = c;
            self.window.push_back(None);
            return Some(0);
        }
        if c < self.base {
            let grow = self.base - c;
            if grow + self.window.len() as u64 > MAX_SPAN {
                return None;
            }
            for _ in 0..grow {
                self.window.push_front(None);
            }
            self.base = c;
            return Some(0);
        }
        let i = c - self.base;
        if i >= MAX_SPAN {
            return None;
        }
        while self.window.len() as u64 <= i {
            self.window.push_back(None);
        }
        Some(i as usize)
    }

    pub fn insert(&mut self, id: WlId, v: V) -> Option<V> {
        let (c, i) = place(&id);
        let Some(w) = self.index(c).or_else(|| self.cover(c)) else {
            let old = self.outside.insert(id, v);
            if old.is_none() {
                self.len += 1;
            }
            return old;
        };
        let chunk = self.window[w].get_or_insert_with(|| {
            Arc::new(Chunk {
                slots: vec![None; CHUNK as usize],
                used: 0,
            })
        });
        let chunk = Arc::make_mut(chunk);
        let old = chunk.slots[i].replace(v);
        if old.is_none() {
            chunk.used += 1;
            self.len += 1;
        }
        old
    }

    pub fn remove(&mut self, id: &WlId) -> Option<V> {
        let (c, i) = place(id);
        let Some(w) = self.index(c) else {
            let old = self.outside.remove(id);
            if old.is_some() {
                self.len -= 1;
            }
            return old;
        };
        let shared = self.window[w].as_mut()?;
        shared.slots[i].as_ref()?;
        let chunk = Arc::make_mut(shared);
        let old = chunk.slots[i].take();
        chunk.used -= 1;
        self.len -= 1;
        if chunk.used == 0 {
            self.window[w] = None;
            while self.window.front().is_some_and(|c| c.is_none()) {
                self.window.pop_front();
                self.base += 1;
            }
            while self.window.back().is_some_and(|c| c.is_none()) {
                self.window.pop_back();
            }
        }
        old
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries in id order.
    pub fn iter(&self) -> impl Iterator<Item = (WlId, &V)> {
        let first = self.base * CHUNK;
        let below = self.outside.range(..WlId(first)).map(|(k, v)| (*k, v));
        let above = self.outside.range(WlId(first)..).map(|(k, v)| (*k, v));
        let base = self.base;
        let inside = self.window.iter().enumerate().flat_map(move |(w, chunk)| {
            chunk.iter().flat_map(move |chunk| {
                chunk.slots.iter().enumerate().filter_map(move |(i, v)| {
                    v.as_ref()
                        .map(|v| (WlId((base + w as u64) * CHUNK + i as u64), v))
                })
            })
        });
        below.chain(inside).chain(above)
    }

    pub fn keys(&self) -> impl Iterator<Item = WlId> + '_ {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

/// Like the ordered map's: for ids known to be present (it panics otherwise).
impl<V: Clone> std::ops::Index<&WlId> for WlMap<V> {
    type Output = V;
    fn index(&self, id: &WlId) -> &V {
        match self.get(id) {
            Some(v) => v,
            None => panic!("workload id {} is not in the map", id.0),
        }
    }
}

impl<V: Clone> FromIterator<(WlId, V)> for WlMap<V> {
    fn from_iter<I: IntoIterator<Item = (WlId, V)>>(iter: I) -> Self {
        let mut m = WlMap::default();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// A map of known length (binary formats need it up front), entry by entry.
fn serialize_entries<'a, S: Serializer, K: Serialize + 'a, V: Serialize + 'a>(
    s: S,
    len: usize,
    entries: impl Iterator<Item = (&'a K, &'a V)>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(len))?;
    for (k, v) in entries {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

impl<V: Clone + Serialize> Serialize for WlMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.len))?;
        for (k, v) in self.iter() {
            map.serialize_entry(&k, v)?;
        }
        map.end()
    }
}

impl<'de, V: Clone + Deserialize<'de>> Deserialize<'de> for WlMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m: BTreeMap<WlId, V> = BTreeMap::deserialize(d)?;
        Ok(m.into_iter().collect())
    }
}

/// Buckets of `NameMap`.
const BUCKETS: usize = 256;

type NameKey = (Arc<str>, TeamId);

/// Workloads by (name, team), cheap to copy: see the module's comment.
#[derive(Clone, Debug)]
pub struct NameMap {
    buckets: Vec<Arc<BTreeMap<NameKey, WlId>>>,
}

impl Default for NameMap {
    fn default() -> Self {
        NameMap {
            buckets: vec![Arc::default(); BUCKETS],
        }
    }
}

/// FNV-1a over the name: fixed, so every replica buckets alike.
fn bucket_of(name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % BUCKETS as u64) as usize
}

impl NameMap {
    pub fn get(&self, key: &NameKey) -> Option<&WlId> {
        self.buckets[bucket_of(&key.0)].get(key)
    }

    pub fn contains_key(&self, key: &NameKey) -> bool {
        self.get(key).is_some()
    }

    pub fn insert(&mut self, key: NameKey, id: WlId) -> Option<WlId> {
        Arc::make_mut(&mut self.buckets[bucket_of(&key.0)]).insert(key, id)
    }

    pub fn remove(&mut self, key: &NameKey) -> Option<WlId> {
        let b = &mut self.buckets[bucket_of(&key.0)];
        if !b.contains_key(key) {
            return None;
        }
        Arc::make_mut(b).remove(key)
    }

    /// The ids named `name`, by team.
    pub fn named(&self, name: &str) -> impl Iterator<Item = WlId> + '_ {
        let key: Arc<str> = name.into();
        self.buckets[bucket_of(name)]
            .range((key.clone(), TeamId(0))..=(key, TeamId(u32::MAX)))
            .map(|(_, id)| *id)
    }

    pub fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.iter().all(|b| b.is_empty())
    }
}

impl Serialize for NameMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_entries(s, self.len(), self.buckets.iter().flat_map(|b| b.iter()))
    }
}

impl<'de> Deserialize<'de> for NameMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m: BTreeMap<NameKey, WlId> = BTreeMap::deserialize(d)?;
        let mut out = NameMap::default();
        for (k, v) in m {
            out.insert(k, v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_chunks_until_one_side_changes_one() {
        let mut a: WlMap<u32> = (0..1000u64).map(|i| (WlId(i), i as u32)).collect();
        let b = a.clone();
        *a.get_mut(&WlId(5)).unwrap() = 99;
        assert_eq!(a.get(&WlId(5)), Some(&99));
        assert_eq!(b.get(&WlId(5)), Some(&5));
        // Only the changed chunk was copied.
        let shared = a
            .window
            .iter()
            .zip(&b.window)
            .filter(|(x, y)| match (x, y) {
                (Some(x), Some(y)) => Arc::ptr_eq(x, y),
                _ => false,
            })
            .count();
        assert_eq!(shared, a.window.len() - 1);
        assert_eq!(a.remove(&WlId(5)), Some(99));
        assert_eq!(a.remove(&WlId(5)), None);
        assert_eq!((a.len(), b.len()), (999, 1000));
        assert!(a.get_mut(&WlId(5)).is_none());
    }

    #[test]
    fn names_are_found_per_team_in_copies_that_share_buckets() {
        let mut a = NameMap::default();
        a.insert(("train".into(), TeamId(2)), WlId(7));
        a.insert(("train".into(), TeamId(1)), WlId(9));
        a.insert(("eval".into(), TeamId(1)), WlId(3));
        let b = a.clone();
        assert_eq!(a.remove(&("train".into(), TeamId(1))), Some(WlId(9)));
        assert_eq!(a.named("train").collect::<Vec<_>>(), vec![WlId(7)]);
        assert_eq!(b.named("train").collect::<Vec<_>>(), vec![WlId(9), WlId(7)]);
        assert_eq!(a.get(&("eval".into(), TeamId(1))), Some(&WlId(3)));
        assert_eq!((a.len(), b.len()), (2, 3));
    }

    #[test]
    fn iterates_in_id_order_and_stores_as_an_ordered_map() {
        let ids = [700u64, 3, 256, 255, 1 << 50, 0];
        let m: WlMap<u64> = ids.iter().map(|i| (WlId(*i), *i)).collect();
        let mut sorted = ids.to_vec();
        sorted.sort();
        assert_eq!(m.keys().map(|k| k.0).collect::<Vec<_>>(), sorted);
        let plain: BTreeMap<WlId, u64> = ids.iter().map(|i| (WlId(*i), *i)).collect();
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, serde_json::to_string(&plain).unwrap());
        let back: WlMap<u64> = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            m.iter().collect::<Vec<_>>()
        );
        // Emptied chunks go away.
        let mut m = m;
        for i in ids {
            m.remove(&WlId(i));
        }
        assert!(m.is_empty() && m.window.is_empty() && m.outside.is_empty());
    }
}

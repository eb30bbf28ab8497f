//! Nodes, their free capacity and device indices, and pod placement.
//!
//! Each flavor keeps an ordered index of its schedulable nodes keyed by the free amount of the
//! flavor's primary resource (its accelerator, else cpu), so finding the most-allocated node that
//! still fits a pod is a range query, not a scan of every node.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::ids::{FlavorId, Interner, NodeId, ResId};
use crate::topology::{NodeTopo, TopoIndex};

/// Device indices are tracked in a 64-bit mask per device resource.
pub const MAX_DEVICES: i64 = 64;
/// The most of one resource a node may have (2^48: 256 TiB of memory in bytes). Capacities come
/// from agents over the network; with this bound, sums over tens of thousands of nodes stay exact.
pub const MAX_NODE_CAPACITY: i64 = 1 << 48;

/// A pod gives back device `i` (its `used` was already lowered): a healthy device becomes
/// free, an unhealthy one is held out of use.
fn release_device(nr: &mut NodeRes, i: u8) {
    let bit = 1u64 << i;
    if nr.bad_mask & bit != 0 {
        nr.parked_mask |= bit;
        nr.used += 1;
    } else if let Some(mask) = nr.free_mask.as_mut() {
        *mask |= bit;
    }
}

/// Undoes `release_device` (its `used` is raised by the caller).
fn retake_device(nr: &mut NodeRes, i: u8) {
    let bit = 1u64 << i;
    if nr.parked_mask & bit != 0 {
        nr.parked_mask &= !bit;
        nr.used -= 1;
    } else if let Some(mask) = nr.free_mask.as_mut() {
        *mask &= !bit;
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRes {
    pub res: ResId,
    pub cap: i64,
    pub used: i64,
    /// Free device indices (bit i = index i free) for device resources.
    pub free_mask: Option<u64>,
    /// Devices reported unhealthy: never given out again until reported healthy.
    #[serde(default)]
    pub bad_mask: u64,
    /// Unhealthy devices held out of use (counted in `used`, given to no pod). An unhealthy
    /// device still held by a pod joins this set when the pod releases it.
    #[serde(default)]
    pub parked_mask: u64,
}

impl NodeRes {
    /// Devices held out of use because they are unhealthy.
    pub fn parked(&self) -> i64 {
        i64::from(self.parked_mask.count_ones())
    }
    /// Devices reported unhealthy (held out of use or still held by a pod).
    pub fn bad(&self) -> i64 {
        i64::from(self.bad_mask.count_ones())
    }
}

/// A node's resources: cpu, memory and up to two device kinds stay inline, so copying a node
/// set (every scheduling cycle does) allocates nothing per node.
pub type NodeResources = SmallVec<[NodeRes; 4]>;

/// Encoded in two layouts (`allot_common::layout`): without `topology` for the formats from
/// before topology levels, with it from then on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Shared between copies of the node set (names never change).
    pub name: Arc<str>,
    pub flavor: FlavorId,
    /// Sorted by resource id.
    pub res: NodeResources,
    pub healthy: bool,
    pub cordoned: bool,
    /// Its network topology, level → domain (`topology.rs`).
    pub topology: NodeTopo,
}

/// A node as written from layout 2 on.
#[derive(Serialize, Deserialize)]
#[serde(rename = "Node")]
struct NodeNow {
    name: Arc<str>,
    flavor: FlavorId,
    res: NodeResources,
    healthy: bool,
    cordoned: bool,
    #[serde(default)]
    topology: Vec<(Arc<str>, Arc<str>)>,
}

/// A node as layouts 0 and 1 wrote it: before topology levels.
#[derive(Serialize, Deserialize)]
#[serde(rename = "Node")]
struct NodeBefore {
    name: Arc<str>,
    flavor: FlavorId,
    res: NodeResources,
    healthy: bool,
    cordoned: bool,
}

impl Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.clone();
        if s.is_human_readable()
            || allot_common::layout::current() >= allot_common::layout::TOPOLOGY
        {
            return NodeNow {
                name: n.name,
                flavor: n.flavor,
                res: n.res,
                healthy: n.healthy,
                cordoned: n.cordoned,
                topology: n.topology.to_vec(),
            }
            .serialize(s);
        }
        if !n.topology.is_empty() {
            return Err(serde::ser::Error::custom(
                "a node with topology levels cannot be written in a format before them (6)",
            ));
        }
        NodeBefore {
            name: n.name,
            flavor: n.flavor,
            res: n.res,
            healthy: n.healthy,
            cordoned: n.cordoned,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable()
            || allot_common::layout::current() >= allot_common::layout::TOPOLOGY
        {
            let n = NodeNow::deserialize(d)?;
            return Ok(Node {
                name: n.name,
                flavor: n.flavor,
                res: n.res,
                healthy: n.healthy,
                cordoned: n.cordoned,
                topology: n.topology.into(),
            });
        }
        let n = NodeBefore::deserialize(d)?;
        Ok(Node {
            name: n.name,
            flavor: n.flavor,
            res: n.res,
            healthy: n.healthy,
            cordoned: n.cordoned,
            topology: Arc::from([]),
        })
    }
}

/// Nodes per chunk of a `NodeVec`.
const NODE_CHUNK: usize = 128;

/// The nodes by id, in chunks shared between copies: the scheduler copies the node set for
/// every cycle's working state, and the cycle cache keeps a copy to see which nodes changed.
/// Copying a plain vector of 10,000 nodes (a reference count each, and as many to drop) was a
/// third of a cycle that had little else to do. A copy now costs a reference count per chunk,
/// and nodes that changed are found by comparing chunks first. Stored as a plain sequence.
#[derive(Clone, Debug, Default)]
pub struct NodeVec {
    chunks: Vec<Arc<Vec<Arc<Node>>>>,
    len: usize,
}

impl NodeVec {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> Option<&Arc<Node>> {
        self.chunks.get(i / NODE_CHUNK)?.get(i % NODE_CHUNK)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Node>> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    fn push(&mut self, n: Arc<Node>) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < NODE_CHUNK => Arc::make_mut(c).push(n),
            _ => {
                let mut c = Vec::with_capacity(NODE_CHUNK);
                c.push(n);
                self.chunks.push(Arc::new(c));
            }
        }
        self.len += 1;
    }

    /// Node `i`, its chunk copied first if a copy of this vector still shares it.
    fn get_mut(&mut self, i: usize) -> &mut Arc<Node> {
        &mut Arc::make_mut(&mut self.chunks[i / NODE_CHUNK])[i % NODE_CHUNK]
    }

    /// Whether `other` is this very vector: every chunk shared, none changed since the copy.
    pub fn shares_all(&self, other: &NodeVec) -> bool {
        self.len == other.len
            && self
                .chunks
                .iter()
                .zip(&other.chunks)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// The nodes that are not the very ones `before` has at their index, with what `before`
    /// had there (`None`: a node added since). Chunks still shared are skipped whole.
    pub fn changed_since<'a>(
        &'a self,
        before: &'a NodeVec,
    ) -> impl Iterator<Item = (Option<&'a Arc<Node>>, &'a Arc<Node>)> + 'a {
        self.chunks
            .iter()
            .enumerate()
            .filter(move |(k, c)| !before.chunks.get(*k).is_some_and(|o| Arc::ptr_eq(o, c)))
            .flat_map(move |(k, c)| {
                let old = before.chunks.get(k);
                c.iter()
                    .enumerate()
                    .filter_map(move |(i, n)| match old.and_then(|o| o.get(i)) {
                        Some(a) if Arc::ptr_eq(a, n) => None,
                        a => Some((a, n)),
                    })
            })
    }
}

impl std::ops::Index<usize> for NodeVec {
    type Output = Arc<Node>;
    fn index(&self, i: usize) -> &Arc<Node> {
        &self.chunks[i / NODE_CHUNK][i % NODE_CHUNK]
    }
}

impl PartialEq for NodeVec {
    fn eq(&self, other: &NodeVec) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for NodeVec {}

impl Serialize for NodeVec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        // With its length up front, as a vector's: bincode needs it.
        let mut seq = s.serialize_seq(Some(self.len))?;
        for n in self.iter() {
            seq.serialize_element(n)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for NodeVec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = NodeVec::default();
        for n in Vec::<Arc<Node>>::deserialize(d)? {
            v.push(n);
        }
        Ok(v)
    }
}

impl Node {
    pub fn free(&self, r: ResId) -> i64 {
        self.res
            .iter()
            .find(|x| x.res == r)
            .map(|x| x.cap - x.used)
            .unwrap_or(0)
    }
    pub fn capacity(&self, r: ResId) -> i64 {
        self.res
            .iter()
            .find(|x| x.res == r)
            .map(|x| x.cap)
            .unwrap_or(0)
    }
    pub fn schedulable(&self) -> bool {
        self.healthy && !self.cordoned
    }
    /// How many pods with per-pod request `req` fit in the free capacity (capped at `limit`).
    pub fn pods_fit(&self, req: &[(ResId, i64)], limit: u32) -> u32 {
        let mut n = limit as i64;
        for (r, v) in req {
            if *v <= 0 {
                continue;
            }
            n = n.min(self.free(*r) / v);
        }
        n.max(0) as u32
    }
}

/// What a node's resource is to placement: devices get indices; a flavor's index is keyed by
/// its accelerator, else its first device, else its first resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResKind {
    Plain,
    Device,
    Accelerator,
}

/// Amounts per resource, inline for the few a pod asks for.
type Amounts = SmallVec<[(ResId, i64); 4]>;

/// The room for a number of pods of one request on one flavor's schedulable nodes, counted
/// from what is free and raised by each pod allocation given back, without changing the node
/// set: what `release_many`, `try_place` and `retake_many` would tell. `place` fills each node
/// it picks as far as the pods go, so it succeeds exactly when the pods each node can take add
/// up to the count. Room only grows as pods are given back, so a caller stops once it
/// [`fits`](Self::fits): a preemption bound over thousands of candidates usually reads a few.
pub struct RoomCount {
    flavor: FlavorId,
    req: Amounts,
    want: i64,
    /// Pods the nodes take, counting each node at most `want`.
    total: i64,
    /// Per node given something back: the amounts per resource (a broken device stays held),
    /// and the pods it takes with them.
    touched: BTreeMap<NodeId, (Amounts, i64)>,
    /// For pods that must share one domain of a topology level: the level, and the pods each
    /// of its domains takes (by domain index; by node id for the hostname level). `total` is
    /// then the most one domain takes.
    domains: Option<(Arc<str>, BTreeMap<u32, i64>)>,
}

impl RoomCount {
    pub fn fits(&self) -> bool {
        self.total >= self.want
    }

    /// The pods that fit, at most the count asked for.
    pub fn room(&self) -> u32 {
        u32::try_from(self.total.clamp(0, self.want)).unwrap_or(0)
    }

    /// Counts pod allocation `a` of `ns` (the node set the count started on) as given back.
    pub fn release(&mut self, ns: &NodeSet, a: &PodAlloc) {
        if self.fits() {
            return;
        }
        let Some(node) = ns.nodes.get(a.node.idx()) else {
            return;
        };
        if node.flavor != self.flavor || !node.schedulable() {
            return;
        }
        let (req, want) = (&self.req, self.want);
        let (back, room) = self
            .touched
            .entry(a.node)
            .or_insert_with(|| (Amounts::new(), i64::from(node.pods_fit(req, want as u32))));
        let before = *room;
        for (r, v) in &a.req {
            let mut amount = *v;
            if let (Some(nr), Some((_, idx))) = (
                node.res.iter().find(|x| x.res == *r),
                a.devices.iter().find(|(d, _)| d == r),
            ) {
                amount -= idx
                    .iter()
                    .filter(|i| **i < 64 && nr.bad_mask & (1u64 << **i) != 0)
                    .count() as i64;
            }
            match back.iter_mut().find(|(x, _)| x == r) {
                Some((_, sum)) => *sum += amount,
                None => back.push((*r, amount)),
            }
        }
        let mut n = want;
        for (r, v) in req {
            if *v <= 0 {
                continue;
            }
            let extra = back
                .iter()
                .find(|(x, _)| x == r)
                .map(|(_, a)| *a)
                .unwrap_or(0);
            n = n.min((node.free(*r) + extra) / v);
        }
        let n = n.max(0);
        *room = n;
        match &mut self.domains {
            None => self.total += n - before,
            Some((level, per)) => {
                let domain = if &**level == allot_common::topology::HOSTNAME {
                    Some(a.node.0)
                } else {
                    ns.topo.level(level).and_then(|l| l.domain_index(a.node))
                };
                if let Some(d) = domain {
                    let pods = per.entry(d).or_insert(0);
                    *pods += n - before;
                    self.total = self.total.max(*pods);
                }
            }
        }
    }
}

/// One pod's allocation on one node: what to give back when it goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodAlloc {
    pub node: NodeId,
    pub req: Vec<(ResId, i64)>,
    /// Device indices per device resource.
    pub devices: Vec<(ResId, Vec<u8>)>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct FlavorNodes {
    primary: Option<ResId>,
    index: BTreeSet<(i64, NodeId)>,
    /// Derived from the indexed nodes (rebuilt when a node set is read back): how many of them
    /// have each free amount of each resource, so "how many pods fit counting one resource"
    /// reads the distinct amounts, not every node.
    #[serde(skip)]
    free_hist: BTreeMap<(ResId, i64), u32>,
    /// Derived too: total capacity and free amount per resource over the indexed nodes.
    #[serde(skip)]
    totals: BTreeMap<ResId, (i128, i128)>,
}

impl FlavorNodes {
    /// How much of the primary resource (the index's key) one pod of `req` asks for: nodes
    /// keyed below it take none of these pods.
    fn per_pod_primary(&self, req: &[(ResId, i64)]) -> i64 {
        self.primary
            .and_then(|p| req.iter().find(|(r, _)| *r == p).map(|(_, v)| *v))
            .unwrap_or(0)
    }

    /// Counts `node` (being added to the index, `sign` 1, or leaving it, -1) in the derived sums.
    fn count(&mut self, node: &Node, sign: i32) {
        for nr in &node.res {
            let free = nr.cap - nr.used;
            let key = (nr.res, free);
            if sign > 0 {
                *self.free_hist.entry(key).or_insert(0) += 1;
            } else if let Some(n) = self.free_hist.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.free_hist.remove(&key);
                }
            }
            let t = self.totals.entry(nr.res).or_insert((0, 0));
            t.0 += i128::from(sign) * i128::from(nr.cap);
            t.1 += i128::from(sign) * i128::from(free);
        }
    }
}

/// A node set as stored: the derived sums are rebuilt from the nodes when it is read back.
#[derive(Deserialize)]
struct NodeSetStored {
    nodes: NodeVec,
    by_name: Arc<BTreeMap<String, NodeId>>,
    flavors: BTreeMap<FlavorId, FlavorNodes>,
}

impl From<NodeSetStored> for NodeSet {
    fn from(s: NodeSetStored) -> Self {
        let mut set = NodeSet {
            nodes: s.nodes,
            by_name: s.by_name,
            flavors: s.flavors,
            healthy: BTreeMap::new(),
            topo: Arc::default(),
        };
        let mut topo = TopoIndex::default();
        let none: NodeTopo = Arc::from([]);
        for (i, n) in set.nodes.iter().enumerate() {
            if !n.topology.is_empty() {
                topo.set(NodeId(i as u32), &none, &n.topology);
            }
        }
        set.topo = Arc::new(topo);
        for i in 0..set.nodes.len() {
            set.count_healthy(NodeId(i as u32), 1);
        }
        for f in set.flavors.values_mut() {
            f.free_hist.clear();
            f.totals.clear();
            let ids: Vec<NodeId> = f.index.iter().map(|(_, id)| *id).collect();
            for id in ids {
                if let Some(node) = set.nodes.get(id.idx()) {
                    f.count(node, 1);
                }
            }
        }
        set
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "NodeSetStored")]
pub struct NodeSet {
    /// Copy-on-write: a copy of the node set (the scheduler's working copy) shares every node
    /// until one is changed, in chunks (`NodeVec`).
    pub nodes: NodeVec,
    /// Shared between copies of the node set; only adding a node changes it.
    by_name: Arc<BTreeMap<String, NodeId>>,
    flavors: BTreeMap<FlavorId, FlavorNodes>,
    /// Per (flavor, resource): how many healthy nodes have the resource, and their capacity
    /// less their unhealthy devices (`healthy_capacity`). Kept as nodes change: summing it
    /// afresh at each of 10,000 nodes' registration made registering them quadratic.
    #[serde(skip)]
    healthy: BTreeMap<(FlavorId, ResId), (u32, i128)>,
    /// Derived: which nodes share each topology domain (rebuilt when a node set is read back).
    #[serde(skip)]
    pub(crate) topo: Arc<TopoIndex>,
}

/// Why a pod set could not be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceFailure {
    pub placed: u32,
    pub wanted: u32,
    pub schedulable_nodes: usize,
}

impl NodeSet {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.idx()]
    }

    /// A node to change: copied first if a copy of the node set still shares it.
    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        Arc::make_mut(self.nodes.get_mut(id.idx()))
    }

    pub fn has_flavor(&self, f: FlavorId) -> bool {
        self.flavors.contains_key(&f)
    }

    /// The resource a flavor's nodes are ordered by in placement (`None`: no nodes).
    pub fn primary(&self, f: FlavorId) -> Option<ResId> {
        self.flavors.get(&f).and_then(|x| x.primary)
    }

    /// Adds a node with the given capacity. Devices beyond `MAX_DEVICES` are an error.
    pub fn add(
        &mut self,
        name: &str,
        flavor: FlavorId,
        capacity: Vec<(ResId, i64, ResKind)>,
    ) -> Result<NodeId, String> {
        if self.by_name.contains_key(name) {
            return Err(format!("node {name:?} is defined twice"));
        }
        let mut res = NodeResources::new();
        let mut accelerator = None;
        for (r, cap, kind) in capacity {
            let is_device = kind != ResKind::Plain;
            if kind == ResKind::Accelerator && accelerator.is_none_or(|a| r < a) {
                accelerator = Some(r);
            }
            if !(0..=MAX_NODE_CAPACITY).contains(&cap) {
                return Err(format!(
                    "node {name:?}: capacity {cap} of one resource must be between 0 and {MAX_NODE_CAPACITY}"
                ));
            }
            if is_device && cap > MAX_DEVICES {
                return Err(format!(
                    "node {name:?}: {cap} devices of one kind; at most {MAX_DEVICES} are supported"
                ));
            }
            let free_mask = is_device.then(|| {
                if cap == 64 {
                    u64::MAX
                } else {
                    (1u64 << cap) - 1
                }
            });
            res.push(NodeRes {
                res: r,
                cap,
                used: 0,
                free_mask,
                bad_mask: 0,
                parked_mask: 0,
            });
        }
        res.sort_by_key(|r| r.res);
        let id = NodeId(self.nodes.len() as u32);
        let fnodes = self.flavors.entry(flavor).or_default();
        if fnodes.primary.is_none() {
            // Chosen from the flavor's first node: its accelerator (not its EFA interfaces,
            // which pods rarely ask for: keyed by them, every range query read every node),
            // else its first device resource, else its first resource.
            fnodes.primary = accelerator.or_else(|| {
                res.iter()
                    .find(|r| r.free_mask.is_some())
                    .or_else(|| res.first())
                    .map(|r| r.res)
            });
        }
        self.nodes.push(Arc::new(Node {
            name: Arc::from(name),
            flavor,
            res,
            healthy: true,
            cordoned: false,
            topology: Arc::from([]),
        }));
        Arc::make_mut(&mut self.by_name).insert(name.to_string(), id);
        self.index_insert(id);
        self.count_healthy(id, 1);
        Ok(id)
    }

    /// Counts node `id` in the healthy capacity (`sign` 1) or takes it out (-1): around any
    /// change to its health or its devices' health.
    fn count_healthy(&mut self, id: NodeId, sign: i32) {
        let n = &self.nodes[id.idx()];
        if !n.healthy {
            return;
        }
        for r in &n.res {
            let key = (n.flavor, r.res);
            let e = self.healthy.entry(key).or_insert((0, 0));
            e.1 += i128::from(sign) * i128::from(r.cap - r.bad());
            e.0 = e.0.saturating_add_signed(sign);
            if e.0 == 0 {
                self.healthy.remove(&key);
            }
        }
    }

    fn key(&self, id: NodeId) -> i64 {
        let n = &self.nodes[id.idx()];
        match self.flavors.get(&n.flavor).and_then(|f| f.primary) {
            Some(p) => n.free(p),
            None => 0,
        }
    }

    fn index_insert(&mut self, id: NodeId) {
        if !self.nodes[id.idx()].schedulable() {
            return;
        }
        let k = self.key(id);
        let node = &self.nodes[id.idx()];
        if let Some(fnodes) = self.flavors.get_mut(&node.flavor) {
            if fnodes.index.insert((k, id)) {
                fnodes.count(node, 1);
            }
        }
    }

    fn index_remove(&mut self, id: NodeId) {
        let k = self.key(id);
        let node = &self.nodes[id.idx()];
        if let Some(fnodes) = self.flavors.get_mut(&node.flavor) {
            if fnodes.index.remove(&(k, id)) {
                fnodes.count(node, -1);
            }
        }
    }

    /// Grows device resource `r` of node `id` to `cap` devices, the new ones free, adding the
    /// resource when the node had none of it: GPU partitions created after the node
    /// registered. Never shrinks (a device that goes is reported unhealthy instead); true when
    /// anything changed.
    pub fn grow_devices(&mut self, id: NodeId, r: ResId, cap: i64) -> Result<bool, String> {
        let node = &self.nodes[id.idx()];
        if !(0..=MAX_DEVICES).contains(&cap) {
            return Err(format!(
                "node {}: {cap} devices of one kind; at most {MAX_DEVICES} are supported",
                node.name
            ));
        }
        let old = node.res.iter().find(|x| x.res == r);
        match old {
            Some(nr) if nr.free_mask.is_none() => {
                return Err(format!(
                    "node {}: a counted resource cannot become devices",
                    node.name
                ))
            }
            Some(nr) if nr.cap >= cap => return Ok(false),
            _ => {}
        }
        let from = old.map_or(0, |nr| nr.cap);
        let added = (from..cap).fold(0u64, |m, i| m | (1u64 << i));
        self.index_remove(id);
        self.count_healthy(id, -1);
        let node = self.node_mut(id);
        match node.res.iter_mut().find(|x| x.res == r) {
            Some(nr) => {
                nr.free_mask = nr.free_mask.map(|m| m | added);
                nr.cap = cap;
            }
            None => {
                node.res.push(NodeRes {
                    res: r,
                    cap,
                    used: 0,
                    free_mask: Some(added),
                    bad_mask: 0,
                    parked_mask: 0,
                });
                node.res.sort_by_key(|x| x.res);
            }
        }
        self.count_healthy(id, 1);
        self.index_insert(id);
        Ok(true)
    }

    pub fn set_health(&mut self, id: NodeId, healthy: bool) {
        self.index_remove(id);
        self.count_healthy(id, -1);
        self.node_mut(id).healthy = healthy;
        self.count_healthy(id, 1);
        self.index_insert(id);
    }

    /// Sets node `id`'s topology; returns whether it changed.
    pub fn set_topology(&mut self, id: NodeId, topology: NodeTopo) -> bool {
        let old = self.node(id).topology.clone();
        if old == topology {
            return false;
        }
        Arc::make_mut(&mut self.topo).set(id, &old, &topology);
        self.node_mut(id).topology = topology;
        true
    }

    /// The schedulable nodes of `flavor`, most allocated first.
    pub(crate) fn schedulable_of(&self, flavor: FlavorId) -> impl Iterator<Item = NodeId> + '_ {
        self.flavors
            .get(&flavor)
            .into_iter()
            .flat_map(|f| f.index.iter().map(|(_, id)| *id))
    }

    /// The free amount of `flavor`'s primary resource on node `id` (what placement orders by).
    pub(crate) fn primary_free(&self, flavor: FlavorId, id: NodeId) -> i64 {
        match self.primary(flavor) {
            Some(p) => self.nodes[id.idx()].free(p),
            None => 0,
        }
    }

    /// Whether node `id` is a schedulable node of `flavor`.
    pub(crate) fn takes(&self, flavor: FlavorId, id: NodeId) -> bool {
        let n = &self.nodes[id.idx()];
        n.flavor == flavor && n.schedulable()
    }

    /// How many schedulable nodes `flavor` has.
    pub(crate) fn schedulable_count(&self, flavor: FlavorId) -> usize {
        self.flavors.get(&flavor).map_or(0, |f| f.index.len())
    }

    pub fn set_cordoned(&mut self, id: NodeId, cordoned: bool) {
        self.index_remove(id);
        self.node_mut(id).cordoned = cordoned;
        self.index_insert(id);
    }

    /// Marks one device healthy or unhealthy. A free unhealthy device is held out of use at
    /// once; one a pod holds is held out when the pod releases it. Returns whether anything
    /// changed; an index beyond the node's devices is an error.
    pub fn set_device_health(
        &mut self,
        id: NodeId,
        r: ResId,
        index: u8,
        healthy: bool,
    ) -> Result<bool, String> {
        let node = &self.nodes[id.idx()];
        let Some(nr) = node
            .res
            .iter()
            .find(|x| x.res == r && x.free_mask.is_some())
        else {
            return Err(format!("node {} has no devices of that kind", node.name));
        };
        if i64::from(index) >= nr.cap {
            return Err(format!(
                "node {}: device index {index} is out of range (it has {})",
                node.name, nr.cap
            ));
        }
        let bit = 1u64 << index;
        if (nr.bad_mask & bit != 0) != healthy {
            return Ok(false);
        }
        self.index_remove(id);
        self.count_healthy(id, -1);
        let node = self.node_mut(id);
        let nr = node
            .res
            .iter_mut()
            .find(|x| x.res == r)
            .expect("checked above");
        let free = nr.free_mask.get_or_insert(0);
        if healthy {
            nr.bad_mask &= !bit;
            if nr.parked_mask & bit != 0 {
                nr.parked_mask &= !bit;
                *free |= bit;
                nr.used -= 1;
            }
        } else {
            nr.bad_mask |= bit;
            if *free & bit != 0 {
                *free &= !bit;
                nr.parked_mask |= bit;
                nr.used += 1;
            }
        }
        self.count_healthy(id, 1);
        self.index_insert(id);
        Ok(true)
    }

    /// Allocates one pod on `id`, taking the lowest free device indices. The caller has checked
    /// that it fits.
    pub(crate) fn allocate(&mut self, id: NodeId, req: &[(ResId, i64)]) -> PodAlloc {
        self.index_remove(id);
        let node = self.node_mut(id);
        let mut devices = Vec::new();
        for (r, v) in req {
            if *v <= 0 {
                continue;
            }
            if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                nr.used += v;
                if let Some(mask) = nr.free_mask.as_mut() {
                    let mut idx = Vec::new();
                    for bit in 0..64u8 {
                        if idx.len() as i64 == *v {
                            break;
                        }
                        if *mask & (1u64 << bit) != 0 {
                            *mask &= !(1u64 << bit);
                            idx.push(bit);
                        }
                    }
                    devices.push((*r, idx));
                }
            }
        }
        self.index_insert(id);
        PodAlloc {
            node: id,
            req: req.iter().filter(|(_, v)| *v > 0).copied().collect(),
            devices,
        }
    }

    /// Gives a pod's allocation back.
    pub fn release(&mut self, a: &PodAlloc) {
        let id = a.node;
        self.index_remove(id);
        let node = self.node_mut(id);
        for (r, v) in &a.req {
            if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                nr.used -= v;
            }
        }
        for (r, idx) in &a.devices {
            if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                for i in idx {
                    release_device(nr, *i);
                }
            }
        }
        self.index_insert(id);
    }

    /// Takes back what is still free of an allocation released earlier: its devices that
    /// nothing took since, and up to its amount of each other resource. A preempted pod holds
    /// its room until it stops, while its preemptor's reservation may already sit in part of it.
    pub fn retake_free_part(&mut self, a: &PodAlloc) {
        if self.nodes.get(a.node.idx()).is_none() {
            return;
        }
        self.index_remove(a.node);
        let node = self.node_mut(a.node);
        for (r, v) in &a.req {
            let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) else {
                continue;
            };
            match a.devices.iter().find(|(d, _)| d == r) {
                Some((_, idx)) if nr.free_mask.is_some() => {
                    for &i in idx.iter().filter(|i| **i < 64) {
                        let bit = 1u64 << i;
                        if nr.parked_mask & bit != 0 {
                            // Released while broken: still counted as used, parked.
                            nr.parked_mask &= !bit;
                        } else if let Some(mask) = nr.free_mask.as_mut() {
                            if *mask & bit != 0 {
                                *mask &= !bit;
                                nr.used += 1;
                            }
                        }
                    }
                }
                _ => nr.used += (*v).min(nr.cap - nr.used).max(0),
            }
        }
        self.index_insert(a.node);
    }

    /// Gives back many allocations, updating the index once per touched node.
    pub fn release_many<'a>(&mut self, allocs: impl Iterator<Item = &'a PodAlloc> + Clone) {
        self.batch(allocs, -1);
    }

    /// Re-takes many allocations released by `release_many` (nothing else took them since).
    pub fn retake_many<'a>(&mut self, allocs: impl Iterator<Item = &'a PodAlloc> + Clone) {
        self.batch(allocs, 1);
    }

    fn batch<'a>(&mut self, allocs: impl Iterator<Item = &'a PodAlloc> + Clone, sign: i64) {
        let touched: BTreeSet<NodeId> = allocs.clone().map(|a| a.node).collect();
        for id in &touched {
            self.index_remove(*id);
        }
        for a in allocs {
            let node = self.node_mut(a.node);
            for (r, v) in &a.req {
                if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                    nr.used += sign * v;
                }
            }
            for (r, idx) in &a.devices {
                if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                    for i in idx {
                        if sign < 0 {
                            release_device(nr, *i);
                        } else {
                            retake_device(nr, *i);
                        }
                    }
                }
            }
        }
        for id in &touched {
            self.index_insert(*id);
        }
    }

    /// Re-takes an exact allocation (used when applying a decided placement). Fails without
    /// changing anything if the node is not schedulable, lacks capacity or a device is taken.
    pub fn take_exact(&mut self, a: &PodAlloc) -> Result<(), String> {
        let node = self
            .nodes
            .get(a.node.idx())
            .ok_or_else(|| format!("node id {} does not exist", a.node.0))?;
        if !node.schedulable() {
            return Err(format!("node {} is not schedulable", node.name));
        }
        for (r, v) in &a.req {
            if node.free(*r) < *v {
                return Err(format!("node {} no longer has room", node.name));
            }
        }
        for (r, idx) in &a.devices {
            let mask = node
                .res
                .iter()
                .find(|x| x.res == *r)
                .and_then(|x| x.free_mask)
                .unwrap_or(0);
            if idx.iter().any(|i| *i >= 64 || mask & (1u64 << i) == 0) {
                return Err(format!("node {}: device {:?} is taken", node.name, idx));
            }
        }
        self.index_remove(a.node);
        let node = self.node_mut(a.node);
        for (r, v) in &a.req {
            if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                nr.used += v;
            }
        }
        for (r, idx) in &a.devices {
            if let Some(nr) = node.res.iter_mut().find(|x| x.res == *r) {
                if let Some(mask) = nr.free_mask.as_mut() {
                    for i in idx {
                        *mask &= !(1u64 << i);
                    }
                }
            }
        }
        self.index_insert(a.node);
        Ok(())
    }

    /// Whether `count` pods of `req` could be placed on `flavor` now, and if not how many
    /// could: counted on the nodes (see [`RoomCount`]), without placing anything. Debug
    /// builds (every test) also place them, give them back, and compare.
    pub fn try_place(
        &mut self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
    ) -> Result<(), PlaceFailure> {
        let counted = match self.room_count(flavor, req, count).map(|r| r.room()) {
            Some(n) if n >= count => Ok(()),
            n => Err(PlaceFailure {
                placed: n.unwrap_or(0),
                wanted: count,
                schedulable_nodes: self.schedulable_count(flavor),
            }),
        };
        #[cfg(debug_assertions)]
        {
            let placed = self.place(flavor, req, count).map(|allocs| {
                for a in allocs.iter().rev() {
                    self.release(a);
                }
            });
            assert_eq!(counted, placed, "counting room disagrees with placing");
        }
        counted
    }

    /// Places `count` pods of `req` on schedulable nodes of `flavor`, all or nothing.
    ///
    /// Preference: the most-allocated node that takes every remaining pod; when no single node
    /// can, the node with the most free room first (fewest nodes for a gang).
    pub fn place(
        &mut self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
    ) -> Result<Vec<PodAlloc>, PlaceFailure> {
        let Some(fnodes) = self.flavors.get(&flavor) else {
            return Err(PlaceFailure {
                placed: 0,
                wanted: count,
                schedulable_nodes: 0,
            });
        };
        let schedulable_nodes = fnodes.index.len();
        let per_pod_primary = fnodes.per_pod_primary(req);
        let mut allocs: Vec<PodAlloc> = Vec::new();
        let mut remaining = count;
        while remaining > 0 {
            let Some(fnodes) = self.flavors.get(&flavor) else {
                break;
            };
            let need = per_pod_primary.saturating_mul(i64::from(remaining));
            let whole = fnodes
                .index
                .range((need, NodeId(0))..)
                .map(|(_, id)| *id)
                .find(|id| self.nodes[id.idx()].pods_fit(req, remaining) == remaining);
            let (target, n) = match whole {
                Some(id) => (Some(id), remaining),
                None => {
                    let mut pick = None;
                    for (_, id) in fnodes.index.iter().rev() {
                        let m = self.nodes[id.idx()].pods_fit(req, remaining);
                        if m > 0 {
                            pick = Some((*id, m));
                            break;
                        }
                        if per_pod_primary > 0 && self.key(*id) < per_pod_primary {
                            break;
                        }
                    }
                    match pick {
                        Some((id, m)) => (Some(id), m),
                        None => (None, 0),
                    }
                }
            };
            let Some(id) = target else { break };
            for _ in 0..n {
                allocs.push(self.allocate(id, req));
            }
            remaining -= n;
        }
        if remaining > 0 {
            let placed = count - remaining;
            for a in allocs.iter().rev() {
                self.release(a);
            }
            return Err(PlaceFailure {
                placed,
                wanted: count,
                schedulable_nodes,
            });
        }
        Ok(allocs)
    }

    /// Starts counting the room for `count` pods of `req` on the schedulable nodes of
    /// `flavor`, from what is free now; `None` when the flavor has no nodes.
    pub fn room_count(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
    ) -> Option<RoomCount> {
        let f = self.flavors.get(&flavor)?;
        let mut room = RoomCount {
            flavor,
            req: req.iter().copied().collect(),
            want: i64::from(count),
            total: 0,
            touched: BTreeMap::new(),
            domains: None,
        };
        let per_pod_primary = f.per_pod_primary(req);
        if count > 0 {
            for (_, id) in f.index.range((per_pod_primary, NodeId(0))..) {
                room.total += i64::from(self.nodes[id.idx()].pods_fit(req, count));
                if room.fits() {
                    break;
                }
            }
        }
        Some(room)
    }

    /// `room_count` for pods that must all be in one domain of topology level `level`: the
    /// room is the most pods one domain takes. `None` when the flavor has no nodes or no node
    /// has the level (no room however much is given back).
    pub fn room_count_in(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        level: &str,
    ) -> Option<RoomCount> {
        let f = self.flavors.get(&flavor)?;
        let mut per: BTreeMap<u32, i64> = BTreeMap::new();
        let fit = |id: NodeId| {
            if self.takes(flavor, id) {
                i64::from(self.nodes[id.idx()].pods_fit(req, count))
            } else {
                0
            }
        };
        if level == allot_common::topology::HOSTNAME {
            for (_, id) in &f.index {
                per.insert(id.0, fit(*id));
            }
        } else {
            // A level no node has: never room (the bound fails at once, reading nothing).
            let l = self.topo.level(level)?;
            for (d, dom) in l.domains.iter().enumerate() {
                per.insert(d as u32, dom.nodes.iter().map(|id| fit(*id)).sum());
            }
        }
        Some(RoomCount {
            flavor,
            req: req.iter().copied().collect(),
            want: i64::from(count),
            total: per.values().copied().max().unwrap_or(0),
            touched: BTreeMap::new(),
            domains: Some((Arc::from(level), per)),
        })
    }

    /// Total and free capacity of one resource over the schedulable nodes of a flavor.
    pub fn flavor_free(&self, flavor: FlavorId, r: ResId) -> (i64, i64) {
        let clamp = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
        match self.flavors.get(&flavor).and_then(|f| f.totals.get(&r)) {
            Some((cap, free)) => (clamp(*cap), clamp(*free)),
            None => (0, 0),
        }
    }

    /// The resources of `req` that alone keep `count` pods off the schedulable nodes of
    /// `flavor`: counting that resource only, fewer than `count` pods fit. Empty when each
    /// resource has room on its own (and the pods fail only because the room is split).
    pub fn short_resources(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
    ) -> Vec<ResId> {
        let Some(f) = self.flavors.get(&flavor) else {
            return req
                .iter()
                .filter(|(_, v)| *v > 0)
                .map(|(r, _)| *r)
                .collect();
        };
        let want = i64::from(count);
        req.iter()
            .filter(|(_, v)| *v > 0)
            .filter(|(r, v)| {
                let mut fit = 0i64;
                if f.primary == Some(*r) {
                    // The index is keyed by this resource's free amount: walk it from the
                    // freest node and stop at the first that cannot take one pod.
                    for (k, _) in f.index.iter().rev() {
                        if *k < *v {
                            break;
                        }
                        fit = fit.saturating_add(k / v);
                        if fit >= want {
                            return false;
                        }
                    }
                    return true;
                }
                for ((_, free), n) in f.free_hist.range((*r, *v)..=(*r, i64::MAX)).rev() {
                    fit = fit.saturating_add((free / v).saturating_mul(i64::from(*n)));
                    if fit >= want {
                        return false;
                    }
                }
                true
            })
            .map(|(r, _)| *r)
            .collect()
    }

    /// Healthy capacity per (flavor, resource), for idle-capacity accounting and warnings.
    pub fn healthy_capacity(&self) -> BTreeMap<(FlavorId, ResId), i64> {
        self.healthy
            .iter()
            .map(|(k, (_, sum))| (*k, i64::try_from(*sum).unwrap_or(i64::MAX)))
            .collect()
    }

    /// The healthy capacity summed afresh from the nodes, as `healthy` keeps it.
    fn healthy_afresh(&self) -> BTreeMap<(FlavorId, ResId), (u32, i128)> {
        let mut m = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| n.healthy) {
            for r in &n.res {
                let e = m.entry((n.flavor, r.res)).or_insert((0u32, 0i128));
                e.0 += 1;
                e.1 += i128::from(r.cap - r.bad());
            }
        }
        m
    }

    /// Devices given out on a node, for invariant checks: (resource, index) pairs in use.
    pub fn used_devices(&self, id: NodeId) -> Vec<(ResId, u8)> {
        let n = &self.nodes[id.idx()];
        let mut out = Vec::new();
        for r in &n.res {
            if let Some(mask) = r.free_mask {
                for bit in 0..(r.cap.min(64) as u8) {
                    if (mask | r.parked_mask) & (1u64 << bit) == 0 {
                        out.push((r.res, bit));
                    }
                }
            }
        }
        out
    }

    /// Whether the sums derived from each flavor's indexed nodes match the nodes (invariants).
    pub fn check_derived(&self) -> Result<(), String> {
        if self.healthy != self.healthy_afresh() {
            return Err("the healthy capacity drifted from the nodes".to_string());
        }
        for (flavor, f) in &self.flavors {
            let mut fresh = FlavorNodes::default();
            for (k, id) in &f.index {
                let node = &self.nodes[id.idx()];
                if *k != self.key(*id) || !node.schedulable() {
                    return Err(format!("node {} is indexed stale", node.name));
                }
                fresh.count(node, 1);
            }
            fresh.totals.retain(|_, t| *t != (0, 0));
            let totals: BTreeMap<ResId, (i128, i128)> = f
                .totals
                .iter()
                .filter(|(_, t)| **t != (0, 0))
                .map(|(r, t)| (*r, *t))
                .collect();
            if fresh.free_hist != f.free_hist || fresh.totals != totals {
                return Err(format!(
                    "flavor {}: the free-room sums drifted from its nodes",
                    flavor.0
                ));
            }
        }
        Ok(())
    }

    /// Describes the free room of a flavor for messages: `3 schedulable nodes, free gpu 1 of 8`.
    pub fn describe_room(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        names: &Interner,
    ) -> String {
        let nodes = self.schedulable_count(flavor);
        let parts: Vec<String> = req
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(r, _)| {
                let (cap, free) = self.flavor_free(flavor, *r);
                format!(
                    "{} free {} of {}",
                    names.resource_name(*r),
                    names.format_qty(*r, free),
                    names.format_qty(*r, cap)
                )
            })
            .collect();
        format!("{nodes} schedulable node(s); {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_common::ResourceName;

    fn setup(n: usize, gpus: i64) -> (NodeSet, Interner, FlavorId, ResId, ResId) {
        let mut i = Interner::default();
        let f = i.flavor("f");
        let g = i.resource(&ResourceName::gpu());
        let c = i.resource(&ResourceName::cpu());
        let mut ns = NodeSet::default();
        for k in 0..n {
            ns.add(
                &format!("n{k}"),
                f,
                vec![(g, gpus, ResKind::Accelerator), (c, 32_000, ResKind::Plain)],
            )
            .unwrap();
        }
        (ns, i, f, g, c)
    }

    #[test]
    fn retaking_the_free_part_leaves_what_another_pod_took_since() {
        let (mut ns, _, _, g, c) = setup(1, 4);
        let victim = PodAlloc {
            node: NodeId(0),
            req: vec![(g, 4), (c, 24_000)],
            devices: vec![(g, vec![0, 1, 2, 3])],
        };
        ns.take_exact(&victim).unwrap();
        ns.release(&victim);
        // A preemptor's reservation takes two of the victim's GPUs and more cpu than was free.
        let preemptor = PodAlloc {
            node: NodeId(0),
            req: vec![(g, 2), (c, 16_000)],
            devices: vec![(g, vec![1, 2])],
        };
        ns.take_exact(&preemptor).unwrap();
        ns.retake_free_part(&victim);
        let n = ns.node(NodeId(0));
        assert_eq!((n.free(g), n.free(c)), (0, 0));
        // Nothing the victim held is left for anyone else, and releasing the preemptor frees
        // exactly its own devices.
        ns.release(&preemptor);
        let n = ns.node(NodeId(0));
        let mask = n.res.iter().find(|r| r.res == g).and_then(|r| r.free_mask);
        assert_eq!(mask, Some(0b0110));
        assert_eq!((n.free(g), n.free(c)), (2, 16_000));
    }

    #[test]
    fn counting_released_room_agrees_with_placing_into_it() {
        let (mut ns, _, f, g, c) = setup(3, 4);
        let mut allocs = Vec::new();
        for node in 0..3u32 {
            for pod in 0..2u8 {
                let a = PodAlloc {
                    node: NodeId(node),
                    req: vec![(g, 2), (c, 10_000)],
                    devices: vec![(g, vec![2 * pod, 2 * pod + 1])],
                };
                ns.take_exact(&a).unwrap();
                allocs.push(a);
            }
        }
        // A broken device stays held when its pod goes.
        ns.set_device_health(NodeId(2), g, 0, false).unwrap();
        for (count, gpus) in [
            (1, 4),
            (2, 4),
            (3, 4),
            (4, 2),
            (5, 2),
            (6, 2),
            (7, 1),
            (1, 5),
        ] {
            let req = [(g, gpus), (c, 1_000)];
            for take in [0usize, 1, 2, 3, 4, 6] {
                let released = &allocs[..take];
                let mut room = ns.room_count(f, &req, count).unwrap();
                for a in released {
                    room.release(&ns, a);
                }
                let counted = room.fits();
                ns.release_many(released.iter());
                let placed = ns.try_place(f, &req, count).is_ok();
                ns.retake_many(released.iter());
                assert_eq!(
                    counted, placed,
                    "{count} pods of {gpus} GPUs, {take} released"
                );
            }
        }
        ns.check_derived().unwrap();
    }

    #[test]
    fn the_free_room_sums_are_rebuilt_when_a_node_set_is_read_back() {
        let (mut ns, _, f, g, c) = setup(3, 8);
        ns.place(f, &[(g, 3), (c, 1_000)], 2).unwrap();
        ns.set_cordoned(NodeId(1), true);
        let text = serde_json::to_string(&ns).unwrap();
        let back: NodeSet = serde_json::from_str(&text).unwrap();
        back.check_derived().unwrap();
        assert_eq!(back.flavor_free(f, g), ns.flavor_free(f, g));
        assert_eq!(
            back.short_resources(f, &[(g, 8)], 2),
            ns.short_resources(f, &[(g, 8)], 2)
        );
    }

    #[test]
    fn a_copy_of_the_nodes_shares_them_until_one_changes() {
        let (mut ns, _, f, g, _) = setup(300, 8);
        let before = ns.clone();
        assert!(ns.nodes.shares_all(&before.nodes));
        assert_eq!(ns.nodes.changed_since(&before.nodes).count(), 0);
        // Nodes in the first and third chunks change; one is added to the last.
        ns.set_cordoned(NodeId(5), true);
        ns.set_health(NodeId(260), false);
        ns.add("n300", f, vec![(g, 8, ResKind::Accelerator)])
            .unwrap();
        let changed: Vec<(Option<&str>, &str)> = ns
            .nodes
            .changed_since(&before.nodes)
            .map(|(a, b)| (a.map(|a| &*a.name), &*b.name))
            .collect();
        assert_eq!(
            changed,
            vec![(Some("n5"), "n5"), (Some("n260"), "n260"), (None, "n300")]
        );
        assert!(!ns.nodes.shares_all(&before.nodes));
        assert!(before.nodes[5].schedulable() && !ns.nodes[5].schedulable());
        assert_eq!(ns.nodes.len(), 301);
        assert_eq!(ns.nodes.iter().count(), 301);
        assert_eq!(ns.nodes.get(301), None);
        // Stored as a plain sequence, read back equal.
        let back: NodeSet = serde_json::from_str(&serde_json::to_string(&ns).unwrap()).unwrap();
        assert_eq!(back.nodes, ns.nodes);
        let text = serde_json::to_value(&ns).unwrap();
        assert_eq!(text["nodes"].as_array().map(|a| a.len()), Some(301));
    }

    #[test]
    fn the_healthy_capacity_follows_node_and_device_health() {
        let (mut ns, _, f, g, c) = setup(3, 8);
        let cap = |ns: &NodeSet| {
            ns.check_derived().unwrap();
            let m = ns.healthy_capacity();
            (m.get(&(f, g)).copied(), m.get(&(f, c)).copied())
        };
        assert_eq!(cap(&ns), (Some(24), Some(96_000)));
        // A device held by a pod, then marked unhealthy: out of the capacity at once.
        ns.place(f, &[(g, 2), (c, 1_000)], 1).unwrap();
        assert!(ns.set_device_health(NodeId(0), g, 0, false).unwrap());
        assert!(ns.set_device_health(NodeId(2), g, 7, false).unwrap());
        assert_eq!(cap(&ns), (Some(22), Some(96_000)));
        ns.set_health(NodeId(1), false);
        assert_eq!(cap(&ns), (Some(14), Some(64_000)));
        // Unhealthy devices of an unhealthy node count neither way.
        ns.set_health(NodeId(2), false);
        assert!(ns.set_device_health(NodeId(2), g, 7, true).unwrap());
        assert_eq!(cap(&ns), (Some(7), Some(32_000)));
        ns.set_health(NodeId(0), false);
        assert_eq!(cap(&ns), (None, None));
        for id in 0..3 {
            ns.set_health(NodeId(id), true);
        }
        assert_eq!(cap(&ns), (Some(23), Some(96_000)));
        // Read back, the sums are rebuilt from the nodes.
        let back: NodeSet = serde_json::from_str(&serde_json::to_string(&ns).unwrap()).unwrap();
        assert_eq!(cap(&back), cap(&ns));
    }

    #[test]
    fn short_resources_are_those_that_alone_keep_the_pods_off() {
        let (mut ns, _, f, g, c) = setup(2, 4);
        // Node 0: 1 GPU and 2 cpu free; node 1: 4 GPUs and 1 cpu free.
        for (node, gpus, cpu) in [(0, 3, 30_000), (1, 0, 31_000)] {
            ns.take_exact(&PodAlloc {
                node: NodeId(node),
                req: vec![(g, gpus), (c, cpu)],
                devices: vec![(g, (0..gpus as u8).collect())],
            })
            .unwrap();
        }
        // Cpu alone is short: a pod of 3 cpu fits nowhere, whatever the GPUs.
        assert!(ns.try_place(f, &[(g, 1), (c, 3_000)], 1).is_err());
        assert_eq!(ns.short_resources(f, &[(g, 1), (c, 3_000)], 1), vec![c]);
        // Two pods of 2 GPUs fit by GPUs (node 1) and by cpu (one per node) but not together:
        // no resource is short on its own.
        assert!(ns.try_place(f, &[(g, 2), (c, 1_000)], 2).is_err());
        assert!(ns.short_resources(f, &[(g, 2), (c, 1_000)], 2).is_empty());
        // Both short; a resource not requested is never short.
        assert_eq!(ns.short_resources(f, &[(g, 5), (c, 3_000)], 1), vec![g, c]);
        assert_eq!(ns.short_resources(f, &[(g, 0), (c, 3_000)], 1), vec![c]);
    }

    #[test]
    fn a_capacity_outside_the_bound_is_refused_with_the_value_and_the_bound() {
        let (mut ns, _, f, _, c) = setup(1, 8);
        for bad in [-1, MAX_NODE_CAPACITY + 1, i64::MAX] {
            let e = ns
                .add("huge", f, vec![(c, bad, ResKind::Plain)])
                .unwrap_err();
            assert!(
                e.contains(&bad.to_string()) && e.contains(&MAX_NODE_CAPACITY.to_string()),
                "{e}"
            );
        }
        ns.add("largest", f, vec![(c, MAX_NODE_CAPACITY, ResKind::Plain)])
            .unwrap();
        ns.add("second", f, vec![(c, MAX_NODE_CAPACITY, ResKind::Plain)])
            .unwrap();
        let total = ns.healthy_capacity()[&(f, c)];
        assert_eq!(total, 2 * MAX_NODE_CAPACITY + 32_000);
    }

    #[test]
    fn a_copy_shares_nodes_until_one_side_changes_them() {
        let (mut ns, _, f, g, c) = setup(3, 8);
        let mut copy = ns.clone();
        assert!((0..3).all(|k| Arc::ptr_eq(&ns.nodes[k], &copy.nodes[k])));
        let a = ns.place(f, &[(g, 2), (c, 1_000)], 1).unwrap();
        let n = a[0].node;
        // Only the changed node was copied; the copy still sees it as it was.
        assert!(!Arc::ptr_eq(&ns.nodes[n.idx()], &copy.nodes[n.idx()]));
        assert_eq!(ns.node(n).free(g), 6);
        assert_eq!(copy.node(n).free(g), 8);
        assert_eq!(copy.node(n).free(c), 32_000);
        assert!((0..3)
            .filter(|k| *k != n.idx())
            .all(|k| Arc::ptr_eq(&ns.nodes[k], &copy.nodes[k])));
        // The copy places on its own nodes without touching the original's.
        let b = copy.place(f, &[(g, 8)], 1).unwrap();
        assert_eq!(copy.node(b[0].node).free(g), 0);
        assert_eq!(
            ns.node(b[0].node).free(g),
            if b[0].node == n { 6 } else { 8 }
        );
        ns.release(&a[0]);
        assert_eq!(ns.node(n).free(g), 8);
    }

    #[test]
    fn devices_are_distinct_and_released() {
        let (mut ns, _, f, g, _) = setup(1, 8);
        let a = ns.place(f, &[(g, 3)], 1).unwrap();
        let b = ns.place(f, &[(g, 2)], 1).unwrap();
        assert_eq!(a[0].devices, vec![(g, vec![0, 1, 2])]);
        assert_eq!(b[0].devices, vec![(g, vec![3, 4])]);
        ns.release(&a[0]);
        let c = ns.place(f, &[(g, 4)], 1).unwrap();
        assert_eq!(c[0].devices, vec![(g, vec![0, 1, 2, 5])]);
        assert!(ns.place(f, &[(g, 3)], 1).is_err());
    }

    /// A p5 node has 8 GPUs and 32 EFA interfaces; pods ask for GPUs. Keyed by its EFA (the
    /// first device by id), the index told nothing and every range query read every node.
    #[test]
    fn the_index_is_keyed_by_the_accelerator_not_the_efa_interfaces() {
        let mut i = Interner::default();
        let f = i.flavor("p5");
        let efa = i.resource(&ResourceName::efa());
        let g = i.resource(&ResourceName::gpu());
        assert!(efa < g);
        let mut ns = NodeSet::default();
        for k in 0..3 {
            ns.add(
                &format!("n{k}"),
                f,
                vec![(efa, 32, ResKind::Device), (g, 8, ResKind::Accelerator)],
            )
            .unwrap();
        }
        assert_eq!(ns.flavors[&f].primary, Some(g));
        // Most allocated by GPUs first: two GPUs go beside the six, not beside the three.
        let a = ns.place(f, &[(g, 3)], 1).unwrap();
        let b = ns.place(f, &[(g, 6)], 1).unwrap();
        let c = ns.place(f, &[(g, 2)], 1).unwrap();
        assert_ne!(a[0].node, b[0].node);
        assert_eq!(c[0].node, b[0].node);
        // Without an accelerator, the first device.
        let h = i.flavor("plain");
        let c = i.resource(&ResourceName::cpu());
        ns.add(
            "e",
            h,
            vec![(c, 4, ResKind::Plain), (efa, 2, ResKind::Device)],
        )
        .unwrap();
        assert_eq!(ns.flavors[&h].primary, Some(efa));
    }

    #[test]
    fn most_allocated_node_first() {
        let (mut ns, _, f, g, _) = setup(3, 8);
        let first = ns.place(f, &[(g, 6)], 1).unwrap();
        let second = ns.place(f, &[(g, 2)], 1).unwrap();
        assert_eq!(second[0].node, first[0].node, "fills the busy node");
    }

    #[test]
    fn gang_uses_fewest_nodes_and_is_all_or_nothing() {
        let (mut ns, _, f, g, _) = setup(3, 8);
        ns.place(f, &[(g, 7)], 1).unwrap();
        // 12 pods of 1 GPU: the two empty nodes (8 + 4), not the busy one.
        let gang = ns.place(f, &[(g, 1)], 12).unwrap();
        let nodes: BTreeSet<NodeId> = gang.iter().map(|a| a.node).collect();
        assert_eq!(nodes.len(), 2);
        // 5 more do not fit (1 + 4 free): nothing is taken.
        let before = ns.nodes.clone();
        let err = ns.place(f, &[(g, 1)], 6).unwrap_err();
        assert_eq!(err.wanted, 6);
        assert_eq!(ns.nodes, before);
    }

    #[test]
    fn unhealthy_nodes_are_skipped_and_exact_take_checks() {
        let (mut ns, _, f, g, _) = setup(2, 1);
        ns.set_health(NodeId(0), false);
        let a = ns.place(f, &[(g, 1)], 1).unwrap();
        assert_eq!(a[0].node, NodeId(1));
        assert!(ns.place(f, &[(g, 1)], 1).is_err());
        ns.release(&a[0]);
        ns.take_exact(&a[0]).unwrap();
        assert!(ns.take_exact(&a[0]).is_err());
    }
}

//! Which nodes share a domain of each topology level (a rack, a network block): the index that
//! placement reads to put a pod set's pods in one domain (`domains.rs`). Kept as nodes' topology
//! changes, never rebuilt whole: nodes register one by one.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ids::NodeId;

/// A node's topology, level → domain, sorted by level (shared between copies of the node).
pub type NodeTopo = Arc<[(Arc<str>, Arc<str>)]>;

/// `t` as a node carries it.
pub fn node_topo(t: &BTreeMap<String, String>) -> NodeTopo {
    t.iter()
        .map(|(l, d)| (Arc::from(l.as_str()), Arc::from(d.as_str())))
        .collect()
}

/// One domain of a level: its name and its nodes, by id.
#[derive(Clone, Debug, Default)]
pub struct Domain {
    pub name: Arc<str>,
    pub nodes: Vec<NodeId>,
}

/// One level's domains.
#[derive(Clone, Debug, Default)]
pub struct Level {
    /// In the order first seen; a domain whose nodes all left stays, empty.
    pub domains: Vec<Domain>,
    by_name: BTreeMap<Arc<str>, u32>,
    of_node: BTreeMap<NodeId, u32>,
}

impl Level {
    /// The domain node `id` is in, if it has this level.
    pub fn domain_of(&self, id: NodeId) -> Option<&Domain> {
        self.of_node
            .get(&id)
            .and_then(|d| self.domains.get(*d as usize))
    }

    /// The index of the domain node `id` is in, if it has this level.
    pub fn domain_index(&self, id: NodeId) -> Option<u32> {
        self.of_node.get(&id).copied()
    }

    /// Domains with at least one node.
    pub fn count(&self) -> usize {
        self.domains.iter().filter(|d| !d.nodes.is_empty()).count()
    }
}

/// Every level's domains.
#[derive(Clone, Debug, Default)]
pub struct TopoIndex {
    levels: BTreeMap<Arc<str>, Level>,
}

impl TopoIndex {
    pub fn level(&self, name: &str) -> Option<&Level> {
        self.levels.get(name)
    }

    /// The levels, by name.
    pub fn levels(&self) -> impl Iterator<Item = (&Arc<str>, &Level)> {
        self.levels.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Moves node `id` from the domains of `old` to those of `new`.
    pub fn set(&mut self, id: NodeId, old: &NodeTopo, new: &NodeTopo) {
        for (level, _) in old.iter() {
            if let Some(l) = self.levels.get_mut(level) {
                if let Some(d) = l.of_node.remove(&id) {
                    if let Some(dom) = l.domains.get_mut(d as usize) {
                        dom.nodes.retain(|n| *n != id);
                    }
                }
            }
        }
        for (level, domain) in new.iter() {
            let l = self.levels.entry(level.clone()).or_default();
            let d = match l.by_name.get(domain) {
                Some(d) => *d,
                None => {
                    let d = l.domains.len() as u32;
                    l.domains.push(Domain {
                        name: domain.clone(),
                        nodes: Vec::new(),
                    });
                    l.by_name.insert(domain.clone(), d);
                    d
                }
            };
            let nodes = &mut l.domains[d as usize].nodes;
            if let Err(at) = nodes.binary_search(&id) {
                nodes.insert(at, id);
            }
            l.of_node.insert(id, d);
        }
    }

    /// The levels wider than `level`, narrowest first: fewer domains, and each of `level`'s
    /// domains inside one of theirs. Where a preferred domain has no room, placement tries
    /// these before giving up on topology.
    pub fn wider_than(&self, level: &str, hostname: bool) -> Vec<Arc<str>> {
        let own = self.levels.get(level);
        let mut out: Vec<(usize, Arc<str>)> = Vec::new();
        for (name, l) in &self.levels {
            if &**name == level {
                continue;
            }
            let nests = match own {
                // Every level holds nodes, each a domain of its own.
                None if hostname => true,
                None => false,
                Some(own) => {
                    l.count() < own.count()
                        && own.domains.iter().all(|d| {
                            let mut outer = d.nodes.iter().map(|n| l.of_node.get(n));
                            match outer.next() {
                                None => true,
                                Some(first) => first.is_some() && outer.all(|o| o == first),
                            }
                        })
                }
            };
            if nests {
                out.push((l.count(), name.clone()));
            }
        }
        out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        out.into_iter().map(|(_, n)| n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(pairs: &[(&str, &str)]) -> NodeTopo {
        node_topo(
            &pairs
                .iter()
                .map(|(l, d)| (l.to_string(), d.to_string()))
                .collect(),
        )
    }

    #[test]
    fn nodes_move_between_domains_and_wider_levels_nest() {
        let mut ix = TopoIndex::default();
        let none = topo(&[]);
        for i in 0..8u32 {
            let t = topo(&[
                ("rack", &format!("r{}", i / 2)),
                ("block", &format!("b{}", i / 4)),
                ("odd", &format!("o{}", i % 2)),
            ]);
            ix.set(NodeId(i), &none, &t);
        }
        let rack = ix.level("rack").unwrap();
        assert_eq!(rack.count(), 4);
        assert_eq!(&*rack.domain_of(NodeId(5)).unwrap().name, "r2");
        // `odd` has fewer domains but cuts across racks: not wider.
        let wider: Vec<String> = ix
            .wider_than("rack", false)
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(wider, vec!["block".to_string()]);
        assert_eq!(ix.wider_than("kubernetes.io/hostname", true).len(), 3);
        let old = topo(&[("rack", "r2"), ("block", "b1"), ("odd", "o1")]);
        ix.set(NodeId(5), &old, &topo(&[("rack", "r9")]));
        let rack = ix.level("rack").unwrap();
        assert_eq!(&*rack.domain_of(NodeId(5)).unwrap().name, "r9");
        assert_eq!(rack.count(), 5);
        assert!(ix.level("block").unwrap().domain_of(NodeId(5)).is_none());
    }
}

//! Placement by topology domain: a pod set whose workload asks for a topology level
//! (`allot_common::topology::Ask`) is placed in one domain of that level.
//!
//! The domain chosen is the tightest that takes every pod: of the domains with room, the one
//! with the least free primary resource (Kueue's best fit), so a small gang fills a part-used
//! rack and large domains stay whole for the gangs that need them. Within it, pods go as
//! `NodeSet::place` puts them: the most-allocated node that takes all that remain, else the
//! one that takes most. With slices, each slice of the pod set goes in one domain of the
//! slice's level inside that domain, tightest first. A preferred level with no domain that has
//! room tries the wider levels that hold it (a block around a rack), then places the pods as
//! if nothing were asked.
//!
//! `kubernetes.io/hostname` is a level every node has: each node is a domain of its own.
//!
//! Whether pods fit in a domain is counted without placing them (`try_place_in`), except for
//! slices, which only placing tells. The preemption bound counts the room a required domain
//! gains per domain as candidates go (`NodeSet::room_count_in`); a preferred level or slices
//! it places with the candidates gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use allot_common::topology::{Ask, Slice, HOSTNAME};

use crate::ids::{FlavorId, Interner, NodeId, ResId};
use crate::nodes::{NodeSet, PlaceFailure, PodAlloc};

/// A domain considered for a pod set: its name, its schedulable nodes of the flavor, the pods
/// they take, and their free primary resource.
struct Candidate {
    name: Arc<str>,
    nodes: Vec<NodeId>,
    room: u32,
    free: i64,
}

impl NodeSet {
    /// The domains of topology level `name` (none for the hostname level, which has no index).
    pub fn topo_level(&self, name: &str) -> Option<&crate::topology::Level> {
        self.topo.level(name)
    }

    /// Places `count` pods of `req` on `flavor`, in one domain of the level `ask` names (no
    /// ask: as `place`). All or nothing; the failure's `placed` is the most pods one domain
    /// takes.
    pub fn place_in(
        &mut self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        ask: Option<Ask>,
    ) -> Result<Vec<PodAlloc>, PlaceFailure> {
        let Some(ask) = ask else {
            return self.place(flavor, req, count);
        };
        let fail = |best: u32, ns: &NodeSet| PlaceFailure {
            placed: best,
            wanted: count,
            schedulable_nodes: ns.schedulable_count(flavor),
        };
        let mut best = match self.place_at(flavor, req, count, ask.level, ask.slice) {
            Ok(allocs) => return Ok(allocs),
            Err(best) => best,
        };
        if ask.required {
            return Err(fail(best, self));
        }
        for level in self.topo.wider_than(ask.level, ask.level == HOSTNAME) {
            match self.place_at(flavor, req, count, &level, ask.slice) {
                Ok(allocs) => return Ok(allocs),
                Err(b) => best = best.max(b),
            }
        }
        let all: Vec<NodeId> = self.schedulable_of(flavor).collect();
        let placed = match ask.slice {
            Some(s) => self.place_slices(flavor, &all, req, count, s),
            None => self.place(flavor, req, count).ok(),
        };
        placed.ok_or_else(|| fail(best, self))
    }

    /// Whether `place_in` would succeed now; nothing stays placed.
    pub fn try_place_in(
        &mut self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        ask: Option<Ask>,
    ) -> Result<(), PlaceFailure> {
        let Some(ask) = ask else {
            return self.try_place(flavor, req, count);
        };
        if ask.slice.is_none() {
            let counted = self.count_in(flavor, req, count, ask);
            // Debug builds (every test) also place them, give them back, and compare.
            #[cfg(debug_assertions)]
            {
                let placed = self.place_in(flavor, req, count, Some(ask)).map(|allocs| {
                    for a in allocs.iter().rev() {
                        self.release(a);
                    }
                });
                assert_eq!(
                    counted, placed,
                    "counting room in a domain disagrees with placing"
                );
            }
            return counted;
        }
        // Slices are placed greedily: only placing them tells.
        let allocs = self.place_in(flavor, req, count, Some(ask))?;
        for a in allocs.iter().rev() {
            self.release(a);
        }
        Ok(())
    }

    /// `try_place_in` for an ask without slices, counted without placing: in a domain, pods
    /// go on nodes each taking what it can (`place_on`), so they fit exactly when the pods its
    /// nodes take add up to the count.
    fn count_in(
        &mut self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        ask: Ask,
    ) -> Result<(), PlaceFailure> {
        let mut best = self.most_in_one(flavor, req, count, ask.level);
        if best < count && !ask.required {
            for level in self.topo.wider_than(ask.level, ask.level == HOSTNAME) {
                best = best.max(self.most_in_one(flavor, req, count, &level));
                if best >= count {
                    break;
                }
            }
            if best < count && self.try_place(flavor, req, count).is_ok() {
                best = count;
            }
        }
        if best >= count {
            return Ok(());
        }
        Err(PlaceFailure {
            placed: best,
            wanted: count,
            schedulable_nodes: self.schedulable_count(flavor),
        })
    }

    /// The most pods of `req` (at most `count`) one domain of `level` takes on `flavor`.
    fn most_in_one(&self, flavor: FlavorId, req: &[(ResId, i64)], count: u32, level: &str) -> u32 {
        if level == HOSTNAME {
            return self
                .schedulable_of(flavor)
                .map(|id| self.node(id).pods_fit(req, count))
                .max()
                .unwrap_or(0);
        }
        let Some(l) = self.topo.level(level) else {
            return 0;
        };
        let mut best = 0;
        for d in &l.domains {
            let on_flavor = d.nodes.iter().copied().filter(|id| self.takes(flavor, *id));
            best = best.max(self.room_on(on_flavor, req, count));
            if best >= count {
                break;
            }
        }
        best
    }

    /// `describe_room`, and with an ask, the domains that come closest: `by rack: r3 takes 2
    /// of 4 pods, r1 takes 1 (8 domains)`.
    pub fn describe_room_in(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        ask: Option<Ask>,
        names: &Interner,
    ) -> String {
        let room = self.describe_room(flavor, req, names);
        match ask {
            Some(ask) => format!("{room}; {}", self.describe_domains(flavor, req, count, ask)),
            None => room,
        }
    }

    /// The domains of the asked level that come closest to taking the pods, roomiest first.
    pub fn describe_domains(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        ask: Ask,
    ) -> String {
        let mut cands = self.candidates(flavor, req, count, ask.level);
        if cands.is_empty() {
            return format!(
                "no schedulable node of this flavor has topology level {}",
                ask.level
            );
        }
        cands.sort_by(|a, b| b.room.cmp(&a.room).then_with(|| a.name.cmp(&b.name)));
        let shown: Vec<String> = cands
            .iter()
            .take(3)
            .map(|c| format!("{} takes {} of {count} pods", c.name, c.room))
            .collect();
        format!(
            "{} {}: {}{} ({} domain(s) tried{})",
            if ask.required {
                "required"
            } else {
                "preferred"
            },
            ask.level,
            shown.join(", "),
            if cands.len() > 3 { ", ..." } else { "" },
            cands.len(),
            match ask.slice {
                Some(s) => format!(", in slices of {} pods by {}", s.size, s.level),
                None => String::new(),
            }
        )
    }

    /// Places the pods in the tightest domain of `level` that takes them; else the most pods
    /// one domain takes.
    fn place_at(
        &mut self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        level: &str,
        slice: Option<Slice>,
    ) -> Result<Vec<PodAlloc>, u32> {
        let mut cands = self.candidates(flavor, req, count, level);
        let best = cands.iter().map(|c| c.room).max().unwrap_or(0);
        cands.retain(|c| c.room >= count);
        cands.sort_by(|a, b| a.free.cmp(&b.free).then_with(|| a.name.cmp(&b.name)));
        for c in &cands {
            let placed = match slice {
                Some(s) => self.place_slices(flavor, &c.nodes, req, count, s),
                None => self.place_on(flavor, &c.nodes, req, count),
            };
            if let Some(allocs) = placed {
                return Ok(allocs);
            }
        }
        Err(best.min(count.saturating_sub(1)))
    }

    /// The domains of `level` with schedulable nodes of `flavor`, and the room in each.
    fn candidates(
        &self,
        flavor: FlavorId,
        req: &[(ResId, i64)],
        count: u32,
        level: &str,
    ) -> Vec<Candidate> {
        let candidate = |name: Arc<str>, nodes: Vec<NodeId>| {
            let room = self.room_on(nodes.iter().copied(), req, count);
            let free = nodes.iter().map(|id| self.primary_free(flavor, *id)).sum();
            Candidate {
                name,
                nodes,
                room,
                free,
            }
        };
        if level == HOSTNAME {
            return self
                .schedulable_of(flavor)
                .map(|id| candidate(self.node(id).name.clone(), vec![id]))
                .collect();
        }
        let Some(l) = self.topo.level(level) else {
            return Vec::new();
        };
        // The index's domains, in the order first seen: callers order them by what they
        // compare (free room, then name), so every replica picks alike.
        l.domains
            .iter()
            .filter_map(|d| {
                let nodes: Vec<NodeId> = d
                    .nodes
                    .iter()
                    .copied()
                    .filter(|id| self.takes(flavor, *id))
                    .collect();
                (!nodes.is_empty()).then(|| candidate(d.name.clone(), nodes))
            })
            .collect()
    }

    /// The domain of `level` node `id` is in.
    fn domain_name(&self, id: NodeId, level: &str) -> Option<Arc<str>> {
        if level == HOSTNAME {
            return Some(self.node(id).name.clone());
        }
        self.topo
            .level(level)?
            .domain_of(id)
            .map(|d| d.name.clone())
    }

    /// Pods of `req` that `nodes` take, at most `count`.
    fn room_on(
        &self,
        nodes: impl IntoIterator<Item = NodeId>,
        req: &[(ResId, i64)],
        count: u32,
    ) -> u32 {
        let mut room = 0u32;
        for id in nodes {
            room = room.saturating_add(self.node(id).pods_fit(req, count));
            if room >= count {
                return count;
            }
        }
        room
    }

    /// Places `count` pods on `nodes` (sorted by id) as `place` does on a flavor's nodes: the
    /// most-allocated node that takes every remaining pod, else the one that takes most.
    fn place_on(
        &mut self,
        flavor: FlavorId,
        nodes: &[NodeId],
        req: &[(ResId, i64)],
        count: u32,
    ) -> Option<Vec<PodAlloc>> {
        let mut allocs = Vec::new();
        let mut remaining = count;
        while remaining > 0 {
            let mut whole: Option<(i64, NodeId)> = None;
            let mut most: Option<(u32, i64, NodeId)> = None;
            for id in nodes {
                let fit = self.node(*id).pods_fit(req, remaining);
                if fit == 0 {
                    continue;
                }
                let free = self.primary_free(flavor, *id);
                if fit == remaining && whole.is_none_or(|(f, _)| free < f) {
                    whole = Some((free, *id));
                }
                if most.is_none_or(|(m, f, _)| (fit, free) > (m, f)) {
                    most = Some((fit, free, *id));
                }
            }
            let (id, n) = match (whole, most) {
                (Some((_, id)), _) => (id, remaining),
                (None, Some((m, _, id))) => (id, m),
                (None, None) => {
                    for a in allocs.iter().rev() {
                        self.release(a);
                    }
                    return None;
                }
            };
            for _ in 0..n {
                allocs.push(self.allocate(id, req));
            }
            remaining -= n;
        }
        Some(allocs)
    }

    /// Places `count` pods on `nodes` in slices of `slice.size` (the last may be smaller), each
    /// in the tightest domain of the slice's level that takes it.
    fn place_slices(
        &mut self,
        flavor: FlavorId,
        nodes: &[NodeId],
        req: &[(ResId, i64)],
        count: u32,
        slice: Slice,
    ) -> Option<Vec<PodAlloc>> {
        let mut groups: BTreeMap<Arc<str>, Vec<NodeId>> = BTreeMap::new();
        for id in nodes {
            if let Some(d) = self.domain_name(*id, slice.level) {
                groups.entry(d).or_default().push(*id);
            }
        }
        let mut allocs: Vec<PodAlloc> = Vec::new();
        let mut remaining = count;
        while remaining > 0 {
            let size = slice.size.max(1).min(remaining);
            let pick = groups
                .iter()
                .filter(|(_, g)| self.room_on(g.iter().copied(), req, size) >= size)
                .map(|(name, g)| {
                    let free: i64 = g.iter().map(|id| self.primary_free(flavor, *id)).sum();
                    (free, name.clone())
                })
                .min();
            let placed = pick.and_then(|(_, name)| {
                let g = groups.get(&name)?.clone();
                self.place_on(flavor, &g, req, size)
            });
            match placed {
                Some(a) => allocs.extend(a),
                None => {
                    for a in allocs.iter().rev() {
                        self.release(a);
                    }
                    return None;
                }
            }
            remaining -= size;
        }
        Some(allocs)
    }
}

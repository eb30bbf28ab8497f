//! The tree of cohorts (hierarchical cohorts): which cohort is whose parent, and what each one
//! keeps for its own subtree, lends up and could draw at most (`quota::Tree`), after Kueue's
//! formulas (kueue-reference.md §2):
//!
//! - `pool(C)` (Kueue's SubtreeQuota) = what C owns + what its teams lend + what each child
//!   cohort lends up, `pool(child) - local(child)`;
//! - `local(C)` = `pool(C) - lending_limit` where C has a lending limit (kept for its subtree,
//!   never lent up), else 0;
//! - `potential(C)` = `local(C) + potential(parent)`, at most `pool(C) + borrowing_limit`; a
//!   root's is its pool.
//!
//! A flat cohort is a root without children: its tree holds only its depth and height (1
//! each), and its numbers are the ones it had before trees existed.

use std::collections::BTreeMap;

use crate::ids::{CohortId, FrId, FrVec, Interner, TeamId};
use crate::quota::CohortRt;

/// Deeper than this, a cohort is refused (`State::set_cohort`): the walks up a tree stay short.
pub const MAX_DEPTH: usize = 16;

/// Links `cohorts` into their trees from their specs' parents: parent, depth, limits, `local`,
/// `potential`, the teams each tree shares. With `lend_up`, first adds what each child lends
/// up to its parent's pool (the pools then hold only what the cohorts own and their teams
/// lend), and sets every cohort's fair-share divisor; without it, the pools are already whole
/// (a state read back from a snapshot).
pub(crate) fn link(cohorts: &mut [CohortRt], names: &Interner, lend_up: bool) {
    let index: BTreeMap<&str, usize> = (cohorts.iter().enumerate())
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    let parents: Vec<Option<usize>> = cohorts
        .iter()
        .map(|c| {
            let p = c.spec.as_ref()?.parent.as_deref()?;
            index.get(p).copied()
        })
        .collect();
    let depths: Vec<u8> = (0..cohorts.len())
        .map(|i| up_to_root(&parents, i).0)
        .collect();
    for (i, c) in cohorts.iter_mut().enumerate() {
        c.tree = Default::default();
        c.tree.depth = depths[i];
        c.tree.parent = parents[i].map(|p| CohortId(p as u32));
        if parents[i].is_some() {
            c.tree.limits = limits_of(c, names);
        }
    }
    // Children before parents.
    let mut up: Vec<usize> = (0..cohorts.len()).collect();
    up.sort_by_key(|&i| (std::cmp::Reverse(depths[i]), i));
    for &i in &up {
        let Some(p) = parents[i] else { continue };
        let local = local_of(&cohorts[i]);
        if lend_up {
            let lent = lent_up(&cohorts[i].pool, &local);
            for (k, v) in lent.0.iter().enumerate() {
                if *v != 0 {
                    cohorts[p].pool.add(FrId(k as u32), *v);
                }
            }
        }
        cohorts[i].tree.local = local;
    }
    // Heights, children before parents: a cohort of teams is 1 high, its parent one more.
    for &i in &up {
        let own = u8::from(!cohorts[i].members.is_empty());
        let h = cohorts[i].tree.height.max(own);
        cohorts[i].tree.height = h;
        if let Some(p) = parents[i] {
            cohorts[p].tree.height = cohorts[p].tree.height.max(h.saturating_add(1));
        }
    }
    // Parents before children.
    for &i in up.iter().rev() {
        let Some(p) = parents[i] else { continue };
        let above = match parents[p] {
            None => cohorts[p].pool.clone(),
            Some(_) => cohorts[p].tree.potential.clone(),
        };
        cohorts[i].tree.potential = potential_of(&cohorts[i], &above, names.fr_count());
    }
    share_teams(cohorts, &parents);
    if lend_up {
        for c in cohorts.iter_mut() {
            let by = if c.tree.parent.is_some() {
                &c.tree.potential
            } else {
                &c.pool
            };
            let mut lendable = BTreeMap::new();
            for (i, v) in by.0.iter().enumerate() {
                let (_, r) = names.fr_parts(FrId(i as u32));
                *lendable.entry(r).or_insert(0) += v;
            }
            c.lendable_by_res = lendable;
        }
    }
}

/// Cohort `i`'s levels up to its root, itself included, and the root (at most `MAX_DEPTH`
/// levels are walked).
fn up_to_root(parents: &[Option<usize>], mut i: usize) -> (u8, usize) {
    let mut depth = 1u8;
    while let Some(p) = parents[i] {
        if depth as usize >= MAX_DEPTH {
            break;
        }
        depth += 1;
        i = p;
    }
    (depth, i)
}

/// A cohort's own quotas with their limits, by (flavor, resource), sorted.
fn limits_of(c: &CohortRt, names: &Interner) -> Vec<(FrId, allot_common::ResourceQuota)> {
    let mut out = Vec::new();
    for fq in c.spec.iter().flat_map(|s| s.quotas.iter()) {
        let Some(f) = names.find_flavor(&fq.flavor) else {
            continue;
        };
        for (r, q) in &fq.resources {
            if let Some(fr) = names.find_resource(r).and_then(|r| names.find_fr(f, r)) {
                out.push((fr, *q));
            }
        }
    }
    out.sort_by_key(|(fr, _)| *fr);
    out
}

/// `pool - lending_limit` on each pair the cohort limits (0 elsewhere).
fn local_of(c: &CohortRt) -> FrVec {
    let mut local = FrVec::default();
    for (fr, q) in &c.tree.limits {
        if let Some(ll) = q.lending_limit {
            local.set(*fr, (c.pool.get(*fr) - ll).max(0));
        }
    }
    local
}

/// What a cohort lends up: `pool - local`.
fn lent_up(pool: &FrVec, local: &FrVec) -> FrVec {
    let mut out = FrVec::default();
    for (k, v) in pool.0.iter().enumerate() {
        let fr = FrId(k as u32);
        out.set(fr, v - local.get(fr));
    }
    out
}

/// `local + above`, at most `pool + borrowing_limit` where the cohort has one.
fn potential_of(c: &CohortRt, above: &FrVec, pairs: usize) -> FrVec {
    let mut out = FrVec::default();
    for k in 0..pairs {
        let fr = FrId(k as u32);
        let mut v = c.tree.local.get(fr) + above.get(fr);
        if let Some(bl) = c.limit(fr).and_then(|q| q.borrowing_limit) {
            v = v.min(c.pool.get(fr) + bl);
        }
        if v != 0 {
            out.set(fr, v);
        }
    }
    out
}

/// Every cohort of a tree with more than one cohort gets the teams of the whole tree, sorted.
fn share_teams(cohorts: &mut [CohortRt], parents: &[Option<usize>]) {
    let roots: Vec<usize> = (0..cohorts.len())
        .map(|i| up_to_root(parents, i).1)
        .collect();
    let nested: std::collections::BTreeSet<usize> = (0..cohorts.len())
        .filter(|&i| parents[i].is_some())
        .map(|i| roots[i])
        .collect();
    let mut trees: BTreeMap<usize, Vec<TeamId>> = BTreeMap::new();
    for (i, c) in cohorts.iter().enumerate() {
        if nested.contains(&roots[i]) {
            trees.entry(roots[i]).or_default().extend(&c.members);
        }
    }
    for teams in trees.values_mut() {
        teams.sort_unstable();
    }
    for (i, c) in cohorts.iter_mut().enumerate() {
        if let Some(teams) = trees.get(&roots[i]) {
            c.tree.shared = teams.clone();
        }
    }
}

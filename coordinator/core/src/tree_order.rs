//! The admission order in a tree of cohorts under fair sharing: Kueue's tournament.
//!
//! In a flat cohort the next workload is the team head with the least key (`EntryKey`: the
//! preemptors whose victims are leaving, whether it borrows, its team's share with it
//! admitted, priority, submit time, name). In a tree, each cohort holds a round between its
//! children (teams and cohorts): a team puts up its head, a cohort the winner of its own
//! round, and each contender is compared by the share of the child it came through, with its
//! own request admitted (`Standing`). The root's winner goes next. A department that borrows
//! much then waits behind one that borrows little, whichever of its teams asks: a team's own
//! share decides only against its siblings.
//!
//! A contender's standing reads only the accounting and its own request, so it is found once
//! per head and decision (`Standings`: the working accounting changes only at a decision,
//! victim searches put back what they take); a round costs a comparison per head of the tree.

use crate::decision::{assign, full_counts};
use crate::ids::{CohortId, TeamId, WlId};
use crate::quota::{self, Share};
use crate::shapes::ByShape;
use crate::working::Ctx;

/// A head's order key (the scheduler's `EntryKey`) as a round reads it: the head, and the
/// same key with another share in place of its team's.
pub(crate) trait Contender: Copy + Ord {
    fn id(&self) -> WlId;
    fn with_share(self, share: Share) -> Self;
}

/// A head's place in its tree: the cohorts on its path from the root down to its team's own,
/// and per cohort but the last the share it competes with there (that of the next cohort,
/// with its request admitted); at its team's own cohort it competes with its team's share,
/// which its key holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Standing {
    /// The cycle's decision count (`Changes::clock`) it was found at.
    at: u64,
    path: Vec<CohortId>,
    shares: Vec<Share>,
}

/// The heads' standings, kept until the next decision: per team and request fingerprint for
/// a plain entry (a team's entries of one request stand alike, whatever their priority), per
/// team and head otherwise.
#[derive(Default)]
pub(crate) struct Standings {
    by_request: ByShape<(TeamId, u128), Standing>,
    by_head: Vec<Option<(WlId, Standing)>>,
}

impl Standings {
    /// Finds team `t`'s standing with head `key` (of request fingerprint `request` where it
    /// is a plain entry) again where none is kept for it since the last decision.
    fn update(
        &mut self,
        ctx: &mut Ctx,
        t: TeamId,
        key: &impl Contender,
        request: Option<u128>,
    ) -> &Standing {
        let clock = ctx.changes.clock;
        let slot = match request {
            Some(r) => self.by_request.entry((t, r)).or_insert_with(|| Standing {
                at: u64::MAX,
                path: Vec::new(),
                shares: Vec::new(),
            }),
            None => {
                if self.by_head.len() <= t.idx() {
                    self.by_head.resize(t.idx() + 1, None);
                }
                let slot = &mut self.by_head[t.idx()];
                if slot.as_ref().is_none_or(|(id, _)| *id != key.id()) {
                    *slot = Some((key.id(), standing(ctx, t, key)));
                }
                match slot {
                    Some((_, s)) => s,
                    None => unreachable!("set above"),
                }
            }
        };
        if slot.at == clock {
            // Debug builds (every test) check that only a decision moves a standing.
            debug_assert_eq!(*slot, standing(ctx, t, key), "{t:?}");
        } else {
            *slot = standing(ctx, t, key);
        }
        slot
    }

    /// Team `t`'s standing as `update` left it.
    #[cfg(debug_assertions)]
    fn get(&self, t: TeamId, request: Option<u128>) -> Option<&Standing> {
        match request {
            Some(r) => self.by_request.get(&(t, r)),
            None => self.by_head.get(t.idx())?.as_ref().map(|(_, s)| s),
        }
    }
}

fn standing(ctx: &mut Ctx, t: TeamId, key: &impl Contender) -> Standing {
    let st = ctx.st;
    let wl = st.workload(key.id());
    let usage = assign(ctx, wl, &full_counts(wl), true).usage;
    let mut path: Vec<CohortId> = quota::ancestors(st, st.teams[t.idx()].cohort).collect();
    path.reverse();
    let shares = ctx.acct.with_added(st, (t, &usage), |acct| {
        (path[1..].iter())
            .map(|c| quota::cohort_share(st, acct, *c))
            .collect()
    });
    Standing {
        at: ctx.changes.clock,
        path,
        shares,
    }
}

/// The winner of the tree's round among `heads` (teams of one tree, each with its head's
/// key): at every cohort from the bottom up, the contender with the least key once its share
/// is the one compared there. Held anew each time: debug builds check `Rounds` against it.
#[cfg(debug_assertions)]
pub(crate) fn winner<K: Contender>(
    ctx: &mut Ctx,
    standings: &mut Standings,
    heads: &[(TeamId, K, Option<u128>)],
) -> Option<TeamId> {
    for (t, key, request) in heads {
        let _ = standings.update(ctx, *t, key, *request);
    }
    let stood: Vec<&Standing> = (heads.iter())
        .filter_map(|(t, _, request)| standings.get(*t, *request))
        .collect();
    debug_assert_eq!(stood.len(), heads.len());
    let keys: Vec<K> = heads.iter().map(|h| h.1).collect();
    let all: Vec<usize> = (0..heads.len()).collect();
    round(&keys, &stood, &all, 0).map(|i| heads[i].0)
}

/// The winner among `entrants` (indexes into `heads`), all below the cohort at `depth` of
/// their paths: each child of that cohort puts up its own winner, then they are compared.
#[cfg(debug_assertions)]
fn round<K: Contender>(
    heads: &[K],
    stood: &[&Standing],
    entrants: &[usize],
    depth: usize,
) -> Option<usize> {
    // Children of this cohort: a cohort deeper on a path, or the team itself at its end.
    let mut children: Vec<(Option<CohortId>, Vec<usize>)> = Vec::new();
    for &i in entrants {
        let child = stood[i].path.get(depth + 1).copied();
        let team_child = child.is_none();
        match children
            .iter_mut()
            .find(|(c, _)| !team_child && *c == child)
        {
            Some((_, v)) => v.push(i),
            None => children.push((child, vec![i])),
        }
    }
    let mut best: Option<usize> = None;
    for (child, members) in children {
        let contender = match child {
            Some(_) => round(heads, stood, &members, depth + 1),
            None => members.first().copied(),
        };
        let Some(c) = contender else { continue };
        let better = best
            .is_none_or(|b| compared(heads, stood, c, depth) < compared(heads, stood, b, depth));
        if better {
            best = Some(c);
        }
    }
    best
}

/// Entrant `i`'s key at the cohort at `depth`: its share there in place of its team's.
#[cfg(debug_assertions)]
fn compared<K: Contender>(heads: &[K], stood: &[&Standing], i: usize, depth: usize) -> K {
    match stood[i].shares.get(depth) {
        Some(share) => heads[i].with_share(*share),
        None => heads[i],
    }
}

/// Each tree's rounds, kept per cohort until a head below it changes or a decision is made:
/// after a head is taken, only the rounds on its team's way up are held again.
#[derive(Default)]
pub(crate) struct Rounds {
    /// Per cohort (by index) of a tree: its child cohorts and its teams.
    children: Vec<(Vec<CohortId>, Vec<TeamId>)>,
    /// Per cohort: its round's winner, at the decision count (`Changes::clock`) it was held at.
    kept: Vec<Option<(u64, Option<TeamId>)>>,
}

impl Rounds {
    /// The rounds of the trees that `teams` are in.
    pub(crate) fn new(st: &crate::state::State, teams: impl Iterator<Item = TeamId>) -> Rounds {
        let mut teams = teams.peekable();
        if teams.peek().is_none() {
            return Rounds::default();
        }
        let n = st.cohorts.len();
        let mut children: Vec<(Vec<CohortId>, Vec<TeamId>)> = vec![Default::default(); n];
        for t in teams {
            let c = st.teams[t.idx()].cohort;
            children[c.idx()].1.push(t);
            let mut below = c;
            for up in quota::ancestors(st, c).skip(1) {
                if !children[up.idx()].0.contains(&below) {
                    children[up.idx()].0.push(below);
                }
                below = up;
            }
        }
        for (cohorts, _) in &mut children {
            cohorts.sort_unstable();
        }
        Rounds {
            children,
            kept: vec![None; n],
        }
    }

    /// Team `t`'s head changed: the rounds on its way up are held again.
    pub(crate) fn touch(&mut self, st: &crate::state::State, t: TeamId) {
        for c in quota::ancestors(st, st.teams[t.idx()].cohort) {
            match self.kept.get_mut(c.idx()) {
                Some(slot) if slot.is_some() => *slot = None,
                // Kept rounds above a cleared one were cleared with it.
                _ => break,
            }
        }
    }

    /// The winner of the round at `root` among the teams' heads (`head`: a team's head key and
    /// request fingerprint, where it has a head).
    pub(crate) fn winner<K: Contender>(
        &mut self,
        ctx: &mut Ctx,
        standings: &mut Standings,
        root: CohortId,
        head: &dyn Fn(TeamId) -> Option<(K, Option<u128>)>,
    ) -> Option<TeamId> {
        let clock = ctx.changes.clock;
        if let Some(Some((at, won))) = self.kept.get(root.idx()) {
            if *at == clock {
                return *won;
            }
        }
        let (cohorts, teams) = std::mem::take(&mut self.children[root.idx()]);
        let mut best: Option<(K, TeamId)> = None;
        let mut enter = |ctx: &mut Ctx, standings: &mut Standings, t: TeamId| {
            let Some((key, request)) = head(t) else {
                return;
            };
            let compared = at_cohort(standings.update(ctx, t, &key, request), root, key);
            if best.as_ref().is_none_or(|(b, _)| compared < *b) {
                best = Some((compared, t));
            }
        };
        for c in &cohorts {
            if let Some(t) = self.winner(ctx, standings, *c, head) {
                enter(ctx, standings, t);
            }
        }
        for t in &teams {
            enter(ctx, standings, *t);
        }
        self.children[root.idx()] = (cohorts, teams);
        let won = best.map(|(_, t)| t);
        self.kept[root.idx()] = Some((clock, won));
        won
    }
}

/// A head's key at cohort `c` of its path: its share there in place of its team's (which
/// stands at its team's own cohort).
fn at_cohort<K: Contender>(s: &Standing, c: CohortId, key: K) -> K {
    match (s.path.iter().position(|x| *x == c)).and_then(|i| s.shares.get(i)) {
        Some(share) => key.with_share(*share),
        None => key,
    }
}

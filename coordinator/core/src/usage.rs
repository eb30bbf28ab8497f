//! Usage accounting: who used, borrowed and lent what, hour by hour (issue 52).
//!
//! The [`Ledger`] lives in the replicated machine and is changed only by applying log entries,
//! with the entries' own times: every replica, a restart from a snapshot and a new leader hold
//! the same figures, and a replayed entry cannot count twice (it is never applied twice).
//!
//! What is counted is quota held: a workload counts from the entry that admits it to the entry
//! after which it holds quota no more (finished, cancelled, requeued once its eviction ended),
//! in its team's name, priority class and instance type (the flavor it was admitted on). Per
//! team and instance type the ledger also keeps the nominal quota and how it was used:
//! - **own**: used within the nominal, `min(used, nominal)`;
//! - **borrowed**: used above the nominal, `max(0, used - nominal)`;
//! - **lent**: the part of the unused nominal that the cohort's borrowers used. A cohort's
//!   borrowing is split over its lenders in proportion to what each could lend at that instant
//!   (unused nominal, at most its lending limit); what the lenders' idle quota does not cover
//!   came from capacity no team owns ([`CLUSTER`]: cohort quota, idle resource sharing);
//! - **idle**: nominal neither used nor lent, `nominal - own - lent`;
//! - **lost**: run time thrown away by preemption, the workload's usage times the time from its
//!   admission to its preemption, counted in the hour of the preemption.
//!
//! Amounts are quantities (the resource's base unit: millicores, bytes, devices) times
//! milliseconds, in `i128`: exact, whatever the sums. Each row (a team's class on a resource, a
//! team's quota split, a lender and a borrower) holds its rate since its last change; a change
//! closes that row's interval into the hours (split at hour boundaries) and opens the next.
//! An entry costs only the rows it changes: those of the workloads it moved, and of their
//! team's cohort on the resources they hold. Hours older than [`HOURLY_FOR_HOURS`] are folded
//! into UTC days, and days older than [`KEEP_HOURS`] are dropped. An
//! entry stamped earlier than the last change (a new leader whose clock is behind) counts as
//! stamped at it: nothing is integrated backwards.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use allot_common::workload::PriorityRef;
use serde::{Deserialize, Serialize};

use crate::chunked::WlMap;
use crate::ids::{CohortId, FrId, TeamId, WlId};
use crate::quota::Limits;
use crate::state::{Event, State, Time};

pub const HOUR_MS: i64 = 3_600_000;
/// Hours kept: 400 days, a year's reports and a month to spare.
pub const KEEP_HOURS: i64 = 400 * 24;
/// Hours older than this are folded into days (a 24th of the rows): reports of the last 31
/// days read whole hours, older ones whole days.
pub const HOURLY_FOR_HOURS: i64 = 31 * 24;
/// The lender of borrowed capacity that no team's idle quota covered.
pub const CLUSTER: &str = "(cluster)";
/// The most workloads whose runs the ledger keeps for `allot usage --by workload`: every one
/// that holds quota, and the latest that ended.
pub const MAX_RUNS: usize = 20_000;
/// The most windows kept per workload (the latest).
pub const MAX_WINDOWS: usize = 64;

/// The class of a workload that names none (or a bare priority value).
pub const NO_CLASS: &str = "-";

/// A string's index in the ledger's own table (teams, classes, instance types, resources).
pub type Name = u32;

/// Team, class, instance type, resource.
pub type UsedKey = (Name, Name, Name, Name);
/// Team, instance type, resource.
pub type QuotaKey = (Name, Name, Name);
/// Borrower, lender, instance type, resource.
pub type LendKey = (Name, Name, Name, Name);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsedAmount {
    pub used: i128,
    pub lost: i128,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaAmount {
    pub nominal: i128,
    pub own: i128,
    pub borrowed: i128,
    pub lent: i128,
}

impl QuotaAmount {
    /// Nominal neither used nor lent.
    pub fn idle(&self) -> i128 {
        (self.nominal - self.own - self.lent).max(0)
    }
}

/// One hour's amounts (quantity times milliseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hour {
    pub used: BTreeMap<UsedKey, UsedAmount>,
    pub quota: BTreeMap<QuotaKey, QuotaAmount>,
    pub lending: BTreeMap<LendKey, i128>,
}

impl Hour {
    /// Adds `o`'s amounts to this one's.
    pub fn add(&mut self, o: &Hour) {
        for (k, a) in &o.used {
            let e = self.used.entry(*k).or_default();
            e.used += a.used;
            e.lost += a.lost;
        }
        for (k, a) in &o.quota {
            let e = self.quota.entry(*k).or_default();
            e.nominal += a.nominal;
            e.own += a.own;
            e.borrowed += a.borrowed;
            e.lent += a.lent;
        }
        for (k, a) in &o.lending {
            *self.lending.entry(*k).or_default() += a;
        }
    }
}

/// Each row's rate and since when it holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Rates {
    used: BTreeMap<UsedKey, (i64, Time)>,
    /// Per team and instance type: nominal, own, borrowed, lent.
    quota: BTreeMap<QuotaKey, ([i64; 4], Time)>,
    lending: BTreeMap<LendKey, (i64, Time)>,
}

/// One workload's times holding quota: a workload is counted while its last window is open.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub name: String,
    pub team: Name,
    pub team_id: TeamId,
    pub class: Name,
    pub windows: Vec<Window>,
}

/// From its admission to when it held quota no more (`None`: it holds it now).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub from: Time,
    pub to: Option<Time>,
    /// When a preemption picked it, if one did.
    pub preempted_at: Option<Time>,
    /// (flavor and resource, instance type, resource, quantity).
    pub usage: Vec<(FrId, Name, Name, i64)>,
}

impl Run {
    fn last_end(&self) -> Option<Time> {
        match self.windows.last() {
            Some(Window { to: Some(t), .. }) => Some(*t),
            _ => None,
        }
    }

    /// The window it holds quota in now, if it does.
    fn open(&self) -> Option<&Window> {
        self.windows.last().filter(|w| w.to.is_none())
    }
}

/// The interned strings the keys point into (append-only).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Names {
    list: Vec<String>,
    #[serde(skip)]
    index: BTreeMap<String, Name>,
}

impl PartialEq for Names {
    /// The index is a cache of the list.
    fn eq(&self, other: &Names) -> bool {
        self.list == other.list
    }
}

impl Names {
    fn id(&mut self, s: &str) -> Name {
        if self.index.len() != self.list.len() {
            self.reindex();
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as Name;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    fn reindex(&mut self) {
        self.index = (self.list.iter().enumerate())
            .map(|(i, s)| (s.clone(), i as Name))
            .collect();
    }

    /// The string `n` stands for.
    pub fn get(&self, n: Name) -> &str {
        self.list.get(n as usize).map_or("?", String::as_str)
    }

    /// The index of `s`, if the ledger has seen it.
    pub fn find(&self, s: &str) -> Option<Name> {
        self.list.iter().position(|x| x == s).map(|i| i as Name)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    pub names: Names,
    /// The latest entry time seen: a later entry stamped earlier counts as stamped at it.
    last: Option<Time>,
    rates: Rates,
    /// By hour (milliseconds since the epoch divided by [`HOUR_MS`]); shared between copies of
    /// the machine, so a snapshot's copy does not copy a year of hours.
    hours: BTreeMap<i64, Arc<Hour>>,
    /// Hours older than [`HOURLY_FOR_HOURS`], summed by UTC day (keyed by the day's first hour).
    days: BTreeMap<i64, Arc<Hour>>,
    /// Per workload, when it held quota (at most [`MAX_RUNS`]; never one that holds quota now).
    /// Shared chunk by chunk between copies (a snapshot copies the machine on the raft
    /// thread), like the state's workloads.
    runs: WlMap<Arc<Run>>,
    /// Team and (flavor, resource) ids to the ledger's names: a cache (a name is interned
    /// when first used, whether or not the cache knows it), cleared when the teams change.
    #[serde(skip)]
    team_names: BTreeMap<TeamId, Name>,
    #[serde(skip)]
    fr_names: BTreeMap<FrId, (Name, Name)>,
}

impl PartialEq for Ledger {
    /// The name caches are not the ledger's content.
    fn eq(&self, o: &Ledger) -> bool {
        (self.names == o.names)
            && (self.last == o.last)
            && (self.rates == o.rates)
            && (self.hours == o.hours)
            && (self.days == o.days)
            && self.runs.iter().eq(o.runs.iter())
    }
}

impl Ledger {
    /// A ledger for a state that had none (a snapshot written before the ledger existed): it
    /// counts what holds quota from the latest time the state shows (its last admission or
    /// submission). What was used before is not known.
    pub fn seeded(st: &State) -> Ledger {
        let mut l = Ledger::default();
        let at = (st.workloads.iter())
            .map(|(_, w)| w.admitted_at.unwrap_or(0).max(w.submit_time))
            .max()
            .unwrap_or(0);
        let holding: Vec<WlId> = (st.teams.iter())
            .flat_map(|t| t.admitted.iter().copied())
            .collect();
        let mut touched = Touched::new();
        for id in holding {
            l.start_counting(st, id, at, &mut touched);
        }
        l.all_quota_rows(st, at);
        l.last = Some(at);
        l
    }

    /// Takes in what the entry applied at `now` did: `events`, and whether it changed a quota
    /// or the policy (`config`). Nothing to do when it moved no workload and changed no quota.
    pub fn observe(&mut self, st: &State, now: Time, events: &[Event], config: bool) {
        let moved =
            |e: &&Event| !matches!(e, Event::Submitted { .. } | Event::AdmissionRetried { .. });
        // Decided by the entry alone: replicas that applied the same log hold the same
        // ledger, byte for byte.
        if !config && !events.iter().any(|e| moved(&e)) {
            return;
        }
        let at = self.last.map_or(now, |l| now.max(l));
        self.last = Some(at);
        if config {
            self.team_names.clear();
        }
        let mut touched = Touched::new();
        for e in events.iter().filter(moved) {
            self.take_event(st, e, at, &mut touched);
        }
        if config {
            self.all_quota_rows(st, at);
        } else {
            for ((c, fr), teams) in touched {
                self.quota_rows(st, c, fr, at, Rows::Touched(&teams));
            }
        }
        self.fold_and_drop(at);
    }

    /// Folds the hours past [`HOURLY_FOR_HOURS`] into their days, and drops what is past
    /// [`KEEP_HOURS`].
    fn fold_and_drop(&mut self, at: Time) {
        let now_h = at.div_euclid(HOUR_MS);
        while let Some((&h, _)) = self.hours.first_key_value() {
            if h >= now_h - HOURLY_FOR_HOURS {
                break;
            }
            let Some((_, hour)) = self.hours.pop_first() else {
                break;
            };
            if h >= now_h - KEEP_HOURS {
                let day = h.div_euclid(24) * 24;
                Arc::make_mut(self.days.entry(day).or_default()).add(&hour);
            }
        }
        while let Some((&d, _)) = self.days.first_key_value() {
            if d >= now_h - KEEP_HOURS {
                break;
            }
            self.days.pop_first();
        }
    }

    /// Counts or stops counting the workload `e` is about; notes the (cohort, flavor and
    /// resource) pairs whose quota split it may change.
    fn take_event(&mut self, st: &State, e: &Event, now: Time, touched: &mut Touched) {
        let id = match e {
            Event::Admitted { wl }
            | Event::Preempted { wl, .. }
            | Event::Evicted { wl, .. }
            | Event::Requeued { wl }
            | Event::Finished { wl, .. }
            | Event::Cancelled { wl } => *wl,
            Event::Submitted { .. } | Event::AdmissionRetried { .. } => return,
        };
        let open = self.runs.get(&id).is_some_and(|r| r.open().is_some());
        if let (Event::Preempted { .. }, true) = (e, open) {
            self.lose(id, now);
        }
        let holds =
            (st.workloads.get(&id)).is_some_and(|w| w.state.holds_quota() && w.admission.is_some());
        match (holds, open) {
            (true, false) => self.start_counting(st, id, now, touched),
            (false, true) => self.stop_counting(st, id, now, touched),
            _ => {}
        }
    }

    /// The run time a preemption at `now` throws away: the open window's usage times its
    /// length so far, counted in the hour of the preemption.
    fn lose(&mut self, id: WlId, now: Time) {
        let Some(run) = self.runs.get_mut(&id).map(Arc::make_mut) else {
            return;
        };
        let (team, class) = (run.team, run.class);
        let Some(win) = run.windows.last_mut().filter(|w| w.to.is_none()) else {
            return;
        };
        win.preempted_at.get_or_insert(now);
        let ran = i128::from((now - win.from).max(0));
        let hour = Arc::make_mut(self.hours.entry(now.div_euclid(HOUR_MS)).or_default());
        for &(_, it, res, q) in &win.usage {
            hour.used.entry((team, class, it, res)).or_default().lost += i128::from(q) * ran;
        }
    }

    /// Closes the workload's open window: it holds quota no more.
    fn stop_counting(&mut self, st: &State, id: WlId, now: Time, touched: &mut Touched) {
        let Some(run) = self.runs.get_mut(&id).map(Arc::make_mut) else {
            return;
        };
        let Some(win) = run.windows.last_mut().filter(|w| w.to.is_none()) else {
            return;
        };
        win.to = Some(now);
        let (team, class, team_id) = (run.team, run.class, run.team_id);
        let usage = win.usage.clone();
        let cohort = st.teams.get(team_id.idx()).map(|t| root_of(st, t.cohort));
        for (fr, it, res, q) in usage {
            self.add_used((team, class, it, res), -q, now);
            if let Some(cohort) = cohort {
                touched.entry((cohort, fr)).or_default().insert(team_id);
            }
        }
        self.trim_runs();
    }

    fn start_counting(&mut self, st: &State, id: WlId, now: Time, touched: &mut Touched) {
        let Some(w) = st.workloads.get(&id) else {
            return;
        };
        let Some(a) = w.admission.as_ref().filter(|_| w.state.holds_quota()) else {
            return;
        };
        let team = self.names.id(&w.spec.team);
        let class = self.names.id(match &w.spec.priority {
            PriorityRef::Class(c) => c,
            PriorityRef::None | PriorityRef::Value(_) => NO_CLASS,
        });
        let mut usage = Vec::with_capacity(a.usage.len());
        for &(fr, q) in a.usage.iter().filter(|(_, q)| *q != 0) {
            let (it, res) = self.fr_name(st, fr);
            usage.push((fr, it, res, q));
            self.add_used((team, class, it, res), q, now);
            (touched
                .entry((root_of(st, st.teams[w.team.idx()].cohort), fr))
                .or_default())
            .insert(w.team);
        }
        if !self.runs.contains_key(&id) {
            let run = Run {
                name: w.spec.name.clone(),
                team,
                team_id: w.team,
                class,
                windows: Vec::new(),
            };
            self.runs.insert(id, Arc::new(run));
        }
        let Some(run) = self.runs.get_mut(&id).map(Arc::make_mut) else {
            return;
        };
        if run.windows.len() >= MAX_WINDOWS {
            run.windows.remove(0);
        }
        run.windows.push(Window {
            from: now,
            to: None,
            preempted_at: None,
            usage,
        });
    }

    /// Past [`MAX_RUNS`] (by a tenth, so that this runs rarely), forgets the runs that ended
    /// longest ago.
    fn trim_runs(&mut self) {
        if self.runs.len() <= MAX_RUNS + MAX_RUNS / 10 {
            return;
        }
        let mut ended: Vec<(Time, WlId)> = (self.runs.iter())
            .filter_map(|(id, r)| r.last_end().map(|t| (t, id)))
            .collect();
        ended.sort_unstable();
        let excess = self.runs.len().saturating_sub(MAX_RUNS);
        for (_, id) in ended.into_iter().take(excess) {
            self.runs.remove(&id);
        }
    }

    /// The windows workload `id` held quota in, as far as the ledger keeps them.
    pub fn run(&self, id: WlId) -> Option<&Run> {
        self.runs.get(&id).map(|r| &**r)
    }

    /// Per-workload runs (for reports by workload).
    pub fn runs(&self) -> impl Iterator<Item = (WlId, &Run)> {
        self.runs.iter().map(|(id, r)| (id, &**r))
    }

    fn fr_name(&mut self, st: &State, fr: FrId) -> (Name, Name) {
        if let Some(&n) = self.fr_names.get(&fr) {
            return n;
        }
        let (f, r) = st.names.fr_parts(fr);
        let n = (
            self.names.id(st.names.flavor_name(f)),
            self.names.id(st.names.resource_name(r).as_str()),
        );
        self.fr_names.insert(fr, n);
        n
    }

    fn team_name(&mut self, st: &State, t: TeamId) -> Name {
        if let Some(&n) = self.team_names.get(&t) {
            return n;
        }
        let n = self.names.id(&st.teams[t.idx()].spec.name);
        self.team_names.insert(t, n);
        n
    }

    /// Every cohort's quota rows, from scratch; rows no longer produced (a team deleted, a
    /// quota dropped) are closed.
    fn all_quota_rows(&mut self, st: &State, at: Time) {
        let mut made = BTreeSet::new();
        for (c, cohort) in st.cohorts.iter().enumerate() {
            // One split per tree of cohorts, from its root (`quota_rows`).
            if cohort.tree.parent.is_some() {
                continue;
            }
            let mut frs = BTreeSet::new();
            for &t in cohort.sharing() {
                frs.extend(st.quotas(t).iter().map(|(fr, _)| *fr));
                let usage = st
                    .acct
                    .team_usage
                    .get(t.idx())
                    .map_or(&[][..], |u| &u.0[..]);
                frs.extend(
                    (usage.iter().enumerate())
                        .filter(|(_, q)| **q != 0)
                        .map(|(i, _)| FrId(i as u32)),
                );
            }
            for fr in frs {
                self.quota_rows(st, CohortId(c as u32), fr, at, Rows::All(&mut made));
            }
        }
        let gone: Vec<QuotaKey> = (self.rates.quota.keys())
            .filter(|k| !made.contains(&(k.0, u32::MAX, k.1, k.2)))
            .copied()
            .collect();
        for k in gone {
            self.set_quota(k, [0; 4], at);
        }
        let gone: Vec<LendKey> = (self.rates.lending.keys())
            .filter(|k| !made.contains(*k))
            .copied()
            .collect();
        for k in gone {
            self.set_lending(k, 0, at);
        }
    }

    /// The quota split of the teams of the tree rooted at cohort `c` on `fr`, and who lends to
    /// whom there (`split`).
    fn quota_rows(&mut self, st: &State, c: CohortId, fr: FrId, at: Time, rows: Rows<'_>) {
        let (mut made, touched) = match rows {
            Rows::All(made) => (Some(made), None),
            Rows::Touched(teams) => (None, Some(teams)),
        };
        let Some(cohort) = st.cohorts.get(c.idx()) else {
            return;
        };
        // Per team of the tree: (team, nominal, used, lendable).
        let members: Vec<Member> = (cohort.sharing().iter())
            .map(|&t| {
                let q = st.quota(t, fr);
                let nominal = q.map_or(0, |q| q.nominal);
                let used = st.acct.usage(t, fr).max(0);
                let lendable = q.map_or(0, |q| {
                    (q.nominal - used).clamp(0, q.lending_limit.unwrap_or(q.nominal))
                });
                (t, nominal, used, lendable)
            })
            .collect();
        let (it, res) = self.fr_name(st, fr);
        let borrowed: i64 = members.iter().map(|m| (m.2 - m.1).max(0)).sum();
        // Nobody borrows here, and nobody did: only the moved workloads' teams' rows change
        // (nothing is lent), so only they are written. The common case, and 100 teams' rows
        // on every admission otherwise.
        if let Some(touched) = touched.filter(|_| borrowed == 0) {
            let lent_here = (self.rates.lending.keys()).any(|k| k.2 == it && k.3 == res);
            if !lent_here {
                for &(t, nominal, used, _) in members.iter().filter(|m| touched.contains(&m.0)) {
                    let team = self.team_name(st, t);
                    self.set_quota((team, it, res), [nominal, used.min(nominal), 0, 0], at);
                }
                return;
            }
        }
        let (lent, pairs) = split(st, c, fr, &members);
        for &(t, nominal, used, _) in &members {
            let rate = [
                nominal,
                used.min(nominal),
                (used - nominal).max(0),
                lent.get(&t).copied().unwrap_or(0),
            ];
            let team = self.team_name(st, t);
            self.set_quota((team, it, res), rate, at);
            if let Some(m) = made.as_deref_mut() {
                m.insert((team, u32::MAX, it, res));
            }
        }
        // Who lends to whom: the rows of this tree's borrowers on this resource.
        let borrowers: BTreeSet<Name> = (members.iter())
            .map(|m| m.0)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| self.team_name(st, t))
            .collect();
        let cluster = self.names.id(CLUSTER);
        let mut rows: BTreeMap<LendKey, i64> = BTreeMap::new();
        for ((bt, lt), amount) in pairs {
            let lender = match lt {
                Some(lt) => self.team_name(st, lt),
                None => cluster,
            };
            let borrower = self.team_name(st, bt);
            *rows.entry((borrower, lender, it, res)).or_default() += amount;
        }
        let stale: Vec<LendKey> = (self.rates.lending.keys())
            .filter(|k| {
                k.2 == it && k.3 == res && borrowers.contains(&k.0) && !rows.contains_key(*k)
            })
            .copied()
            .collect();
        for k in stale {
            self.set_lending(k, 0, at);
        }
        for (k, v) in rows {
            self.set_lending(k, v, at);
            if let Some(m) = made.as_deref_mut() {
                m.insert(k);
            }
        }
    }

    fn add_used(&mut self, k: UsedKey, delta: i64, at: Time) {
        let (rate, since) = self.rates.used.get(&k).copied().unwrap_or((0, at));
        self.close(since, at, |h, dt| {
            h.used.entry(k).or_default().used += i128::from(rate) * dt
        });
        let rate = rate + delta;
        if rate == 0 {
            self.rates.used.remove(&k);
        } else {
            self.rates.used.insert(k, (rate, at));
        }
    }

    fn set_quota(&mut self, k: QuotaKey, new: [i64; 4], at: Time) {
        let (rate, since) = self.rates.quota.get(&k).copied().unwrap_or(([0; 4], at));
        if rate == new {
            return;
        }
        self.close(since, at, |h, dt| {
            add_quota(h.quota.entry(k).or_default(), rate, dt)
        });
        if new == [0; 4] {
            self.rates.quota.remove(&k);
        } else {
            self.rates.quota.insert(k, (new, at));
        }
    }

    fn set_lending(&mut self, k: LendKey, new: i64, at: Time) {
        let (rate, since) = self.rates.lending.get(&k).copied().unwrap_or((0, at));
        if rate == new {
            return;
        }
        self.close(since, at, |h, dt| {
            *h.lending.entry(k).or_default() += i128::from(rate) * dt
        });
        if new == 0 {
            self.rates.lending.remove(&k);
        } else {
            self.rates.lending.insert(k, (new, at));
        }
    }

    /// Adds a row's interval `[since, at)` to the hours it covers.
    fn close(&mut self, since: Time, at: Time, mut add: impl FnMut(&mut Hour, i128)) {
        split_hours(since, at, |h, dt| {
            add(Arc::make_mut(self.hours.entry(h).or_default()), dt)
        });
    }

    /// The hours from `from` to `until` (milliseconds), with each row's open interval counted
    /// as far as `now`: what a report reads.
    pub fn hours_between(&self, from: Time, until: Time, now: Time) -> Vec<(i64, Hour)> {
        let (h0, h1) = (from.div_euclid(HOUR_MS), (until - 1).div_euclid(HOUR_MS));
        // Folded days count whole when the period touches them.
        let mut out: BTreeMap<i64, Hour> = (self.days.range(h0.div_euclid(24) * 24..=h1))
            .chain(self.hours.range(h0..=h1))
            .fold(BTreeMap::new(), |mut out, (h, x)| {
                out.entry(*h).or_insert_with(Hour::default).add(x);
                out
            });
        let end = now.min(until);
        let mut open = |since: Time, add: &mut dyn FnMut(&mut Hour, i128)| {
            split_hours(since.max(from), end, |h, dt| {
                add(out.entry(h).or_default(), dt)
            });
        };
        for (k, &(rate, since)) in &self.rates.used {
            open(since, &mut |h, dt| {
                h.used.entry(*k).or_default().used += i128::from(rate) * dt
            });
        }
        for (k, &(rate, since)) in &self.rates.quota {
            open(since, &mut |h, dt| {
                add_quota(h.quota.entry(*k).or_default(), rate, dt)
            });
        }
        for (k, &(rate, since)) in &self.rates.lending {
            open(since, &mut |h, dt| {
                *h.lending.entry(*k).or_default() += i128::from(rate) * dt
            });
        }
        out.into_iter().collect()
    }

    /// How many hours and days are kept, and how many rows they hold (for the size figures).
    pub fn size(&self) -> (usize, usize, usize) {
        let rows = (self.hours.values().chain(self.days.values()))
            .map(|h| h.used.len() + h.quota.len() + h.lending.len())
            .sum();
        (self.hours.len(), self.days.len(), rows)
    }

    /// Whether the quota and lending rows equal a computation from scratch on `st` (the tests
    /// check it after every entry: an entry recomputes only what it can change).
    pub fn check_rows(&self, st: &State) -> Result<(), String> {
        let mut fresh = self.clone();
        fresh.team_names.clear();
        fresh.all_quota_rows(st, self.last.unwrap_or(0));
        let rates = |l: &Ledger| {
            let q: Vec<_> = l.rates.quota.iter().map(|(k, (r, _))| (*k, *r)).collect();
            let b: Vec<_> = l.rates.lending.iter().map(|(k, (r, _))| (*k, *r)).collect();
            (q, b)
        };
        if rates(&fresh) != rates(self) {
            return Err(format!(
                "quota rows {:?} differ from a recomputation {:?}",
                rates(self),
                rates(&fresh)
            ));
        }
        Ok(())
    }

    /// The workloads counted: those that hold quota (an invariant the tests check).
    pub fn counted(&self) -> impl Iterator<Item = WlId> + '_ {
        (self.runs.iter())
            .filter(|(_, r)| r.open().is_some())
            .map(|(id, _)| id)
    }
}

/// Per (root cohort of a tree, flavor and resource): the teams whose workloads an entry moved
/// there.
type Touched = BTreeMap<(CohortId, FrId), BTreeSet<TeamId>>;

/// Which quota rows to compute: every member's, noting what was made (quota rows as
/// `(team, MAX, type, resource)`), or after an entry that moved the given teams' workloads.
enum Rows<'a> {
    All(&'a mut BTreeSet<LendKey>),
    Touched(&'a BTreeSet<TeamId>),
}

/// `total * part / whole`, rounded down (0 when `whole` is 0).
fn share(total: i64, part: i64, whole: i64) -> i64 {
    if whole == 0 {
        return 0;
    }
    (i128::from(total) * i128::from(part) / i128::from(whole)) as i64
}

/// A team of a tree, on one pair: (team, nominal, used, what it could lend now).
type Member = (TeamId, i64, i64, i64);
/// Per lender, what it lent; per (borrower, lender or `None` for [`CLUSTER`]), the amount.
type Split = (
    BTreeMap<TeamId, i64>,
    BTreeMap<(TeamId, Option<TeamId>), i64>,
);
/// Per team, an amount: what borrowers still need, or what lenders still have.
type Amounts = Vec<(TeamId, i64)>;

/// The root of cohort `c`'s tree.
fn root_of(st: &State, c: CohortId) -> CohortId {
    crate::quota::ancestors(st, c).last().unwrap_or(c)
}

/// Who lent what to whom in the tree rooted at `root`, on `fr`: per lender, what it lent; per
/// (borrower, lender), the amount, `None` the capacity no team owns (cohort quota, idle
/// resource sharing: [`CLUSTER`]). Borrowing is covered where it happens first: at each cohort,
/// bottom-up, what its subtree's borrowers still need is split over what its subtree's
/// lenders still have, in proportion (a lender's part of what it could lend); then a cohort's
/// own quota covers what is left, and the rest goes up with the lenders' remainder (within
/// the cohort's lending limit). What the root leaves uncovered came from capacity no team
/// owns. A flat cohort is one level: each borrower's excess split over the lenders in
/// proportion to what each could lend.
fn split(st: &State, root: CohortId, fr: FrId, members: &[Member]) -> Split {
    // The tree's cohorts, children before parents.
    let mut tree: Vec<(u8, CohortId)> = (0..st.cohorts.len())
        .map(|i| CohortId(i as u32))
        .filter(|c| root_of(st, *c) == root)
        .map(|c| (st.cohorts[c.idx()].tree.depth, c))
        .collect();
    tree.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut up: BTreeMap<CohortId, (Amounts, Amounts)> = BTreeMap::new();
    let mut lent: BTreeMap<TeamId, i64> = BTreeMap::new();
    let mut pairs: BTreeMap<(TeamId, Option<TeamId>), i64> = BTreeMap::new();
    for &(_, c) in &tree {
        let cohort = &st.cohorts[c.idx()];
        let (mut need, mut have) = up.remove(&c).unwrap_or_default();
        for m in members.iter().filter(|m| cohort.members.contains(&m.0)) {
            if m.2 > m.1 {
                need.push((m.0, m.2 - m.1));
            }
            if m.3 > 0 {
                have.push((m.0, m.3));
            }
        }
        let wanted: i64 = need.iter().map(|n| n.1).sum();
        let lendable: i64 = have.iter().map(|h| h.1).sum();
        let from_teams = wanted.min(lendable);
        let parts: Vec<i64> = (have.iter())
            .map(|&(_, can)| share(from_teams, can, lendable))
            .collect();
        for (n, b) in need.iter_mut() {
            let mut covered = 0;
            for (&(lt, _), part) in have.iter().zip(&parts) {
                let amount = share(*b, *part, wanted);
                if amount > 0 {
                    *pairs.entry((*n, Some(lt))).or_default() += amount;
                    covered += amount;
                }
            }
            *b -= covered;
        }
        for ((lt, can), part) in have.iter_mut().zip(&parts) {
            *lent.entry(*lt).or_default() += part;
            *can -= part;
        }
        need.retain(|n| n.1 > 0);
        have.retain(|h| h.1 > 0);
        let Some(parent) = cohort.tree.parent else {
            for (n, b) in need {
                *pairs.entry((n, None)).or_default() += b;
            }
            break;
        };
        // The cohort's own quota covers what its lenders did not; the rest goes up.
        let own = cohort.limit(fr).map_or(0, |q| q.nominal);
        let short: i64 = need.iter().map(|n| n.1).sum();
        let cover = short.min(own);
        for (n, b) in need.iter_mut() {
            let amount = share(*b, cover, short);
            if amount > 0 {
                *pairs.entry((*n, None)).or_default() += amount;
                *b -= amount;
            }
        }
        need.retain(|n| n.1 > 0);
        // What it lends up is at most its pool beyond the part it keeps.
        let cap = cohort.pool.get(fr) - cohort.tree.local.get(fr);
        let left: i64 = have.iter().map(|h| h.1).sum();
        if left > cap {
            for (_, can) in have.iter_mut() {
                *can = share(*can, cap.max(0), left);
            }
        }
        let entry = up.entry(parent).or_default();
        entry.0.extend(need);
        entry.1.extend(have.into_iter().filter(|h| h.1 > 0));
    }
    (lent, pairs)
}

/// Calls `f(hour, milliseconds)` for each hour that `[a, b)` covers.
pub(crate) fn split_hours(a: Time, b: Time, mut f: impl FnMut(i64, i128)) {
    let mut t = a;
    while t < b {
        let h = t.div_euclid(HOUR_MS);
        let end = b.min((h + 1) * HOUR_MS);
        f(h, i128::from(end - t));
        t = end;
    }
}

fn add_quota(a: &mut QuotaAmount, rate: [i64; 4], dt: i128) {
    a.nominal += i128::from(rate[0]) * dt;
    a.own += i128::from(rate[1]) * dt;
    a.borrowed += i128::from(rate[2]) * dt;
    a.lent += i128::from(rate[3]) * dt;
}

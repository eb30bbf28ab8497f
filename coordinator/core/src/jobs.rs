//! What the machine keeps for the command line's job handling: job arrays (elements queued as
//! the array's limit allows), pod start and end times of each workload's last attempt, bulk
//! cancels by selector, and the history of finished workloads.

use std::collections::BTreeSet;
use std::sync::Arc;

use allot_common::api::{
    ApiError, ArrayView, ErrorKind, HistoryFilter, HistoryRow, PodExit, Reply, SubmitInput,
    WorkloadSelector, CANCELLED_NAMES_MAX, FINISHED_STATES,
};
use allot_common::array::{element_name, ArrayIndices};
use allot_common::workload::ArrayMember;
use allot_common::PriorityRef;

use crate::ids::WlId;
use crate::job_records::ArrayRecord;
use crate::machine::Machine;
use crate::state::{Event, StateError, Time, WlState};

/// The variable that carries an array element's index into its pods.
pub const ARRAY_INDEX_ENV: &str = "ALLOT_ARRAY_INDEX";

type ArrayKey = (String, String);

impl Machine {
    // ------------------------------------------------------------------------- pod times

    /// Pods of the current attempt started: records when, and on which node.
    pub(crate) fn record_started(&mut self, id: WlId, attempt: u32, ranks: &[u32], now: Time) {
        let nodes: Vec<String> = ranks.iter().map(|r| self.pod_node(id, *r)).collect();
        let h = self.history.entry(id).or_default().attempt(attempt);
        for (rank, node) in ranks.iter().zip(nodes) {
            let p = h.pods.entry(*rank).or_default();
            p.node = node;
            p.started.get_or_insert(now);
        }
    }

    /// Every pod of the current attempt started (a report that names no ranks).
    pub(crate) fn record_all_started(&mut self, id: WlId, now: Time) {
        let wl = self.state.workload(id);
        let (attempt, n) = (
            wl.attempt,
            wl.admission.as_ref().map_or(0, |a| a.placement.len()) as u32,
        );
        let ranks: Vec<u32> = (0..n).collect();
        self.record_started(id, attempt, &ranks, now);
    }

    pub(crate) fn record_exits(&mut self, id: WlId, attempt: u32, exits: &[PodExit], now: Time) {
        let nodes: Vec<String> = exits.iter().map(|e| self.pod_node(id, e.rank)).collect();
        let h = self.history.entry(id).or_default().attempt(attempt);
        for (e, node) in exits.iter().zip(nodes) {
            let p = h.pods.entry(e.rank).or_default();
            if p.node.is_empty() {
                p.node = node;
            }
            p.ended.get_or_insert(now);
            p.exit_code = e.exit_code;
            let what = if e.lost {
                "Lost"
            } else if e.succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
            p.outcome = Some(if e.detail.is_empty() {
                what.to_string()
            } else {
                format!("{what}: {}", e.detail)
            });
        }
    }

    pub(crate) fn pod_node(&self, id: WlId, rank: u32) -> String {
        let st = &self.state;
        st.workload(id)
            .admission
            .as_ref()
            .and_then(|a| a.placement.get(rank as usize))
            .map(|(_, al)| st.acct.nodes.node(al.node).name.to_string())
            .unwrap_or_default()
    }

    /// After each entry: array elements that ended make room for the next ones.
    pub(crate) fn after_events(&mut self, now: Time, events: &mut Vec<Event>) {
        let ended: Vec<WlId> = events
            .iter()
            .filter_map(|e| match e {
                Event::Finished { wl, .. } | Event::Cancelled { wl } => Some(*wl),
                _ => None,
            })
            .collect();
        let mut arrays: BTreeSet<ArrayKey> = BTreeSet::new();
        for id in ended {
            let Some(w) = self.state.workloads.get(&id) else {
                continue;
            };
            if let Some(a) = &w.spec.array {
                let key = (w.spec.team.clone(), a.name.clone());
                if let Some(rec) = self.arrays.get_mut(&key) {
                    if rec.active.remove(&id) {
                        arrays.insert(key);
                    }
                }
            }
        }
        for key in arrays {
            self.release(&key, now, events);
        }
    }

    // ------------------------------------------------------------------------- arrays

    pub(crate) fn submit_array(
        &mut self,
        input: &SubmitInput,
        text: &str,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        let invalid = |m: String| ApiError::new(ErrorKind::Invalid, m);
        let idx = ArrayIndices::parse(text).map_err(invalid)?;
        let name = &input.spec.name;
        let key = (input.spec.team.clone(), name.clone());
        if let Some(rec) = self.arrays.get(&key) {
            if input.client_token.is_some() && rec.input.client_token == input.client_token {
                return Ok(Reply::ArraySubmitted {
                    name: name.clone(),
                    elements: rec.total(),
                    queued: rec.released,
                    existing: true,
                });
            }
            return Err(ApiError::new(
                ErrorKind::Conflict,
                format!(
                    "team {} already has an active array {name:?} ({} of {} elements not finished); cancel it, wait until it finishes, or choose another name",
                    key.0,
                    rec.active.len() as u32 + rec.held(),
                    rec.total()
                ),
            ));
        }
        // The template must make a valid workload, under a name of the longest index.
        let mut probe = input.spec.clone();
        probe.name = element_name(name, idx.iter().max().unwrap_or(0));
        self.state.prepare(&probe, now)?;
        if input.spec.array.is_some() {
            return Err(invalid(format!(
                "workload {name:?}: `array` is set by the coordinator; submit with --array instead"
            )));
        }
        let total = idx.len();
        let first = idx.max_running.unwrap_or(total).min(total) as usize;
        let team = self.state.team_id(&input.spec.team)?;
        let pending = self.state.teams[team.idx()].pending.len();
        let max = self.limits.max_pending_per_team as usize;
        if pending + first > max {
            return Err(ApiError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "array {name:?} would queue {first} workloads beside the {pending} pending in team {:?}, above its limit (max_pending_per_team {max}); add a limit (--array {text}%N) or ask an admin to raise it",
                    input.spec.team
                ),
            ));
        }
        self.arrays.insert(
            key.clone(),
            ArrayRecord {
                input: Arc::new(input.clone()),
                text: text.to_string(),
                indices: idx,
                released: 0,
                cancelled_held: BTreeSet::new(),
                active: BTreeSet::new(),
                refused: 0,
                last_refusal: String::new(),
                submitted: now,
            },
        );
        self.release(&key, now, events);
        // The record is gone already when no element could be queued (their names taken).
        Ok(Reply::ArraySubmitted {
            name: name.clone(),
            elements: total,
            queued: self.arrays.get(&key).map_or(0, |r| r.active.len() as u32),
            existing: false,
        })
    }

    /// Queues the array's next elements while it has fewer active than its limit; forgets the
    /// array once every element was queued and finished.
    fn release(&mut self, key: &ArrayKey, now: Time, events: &mut Vec<Event>) {
        let Some(rec) = self.arrays.get(key) else {
            return;
        };
        let limit = rec.indices.max_running.map_or(usize::MAX, |n| n as usize);
        let template = rec.input.clone();
        // Each index is found from its position (no walk through those queued before it), and
        // an index cancelled while held takes no room.
        loop {
            let Some(rec) = self.arrays.get_mut(key) else {
                return;
            };
            if rec.active.len() >= limit {
                break;
            }
            let Some(index) = rec.indices.nth(rec.released) else {
                break;
            };
            rec.released += 1;
            if rec.cancelled_held.remove(&index) {
                continue;
            }
            let mut input = SubmitInput::clone(&template);
            input.spec.name = element_name(&key.1, index);
            input.spec.array = Some(ArrayMember {
                name: key.1.clone(),
                index,
            });
            input.client_token = None;
            if let Some(run) = &mut input.run {
                run.env
                    .insert(ARRAY_INDEX_ENV.to_string(), index.to_string());
            }
            match self.state.submit(input.spec.clone(), now) {
                Ok((id, ev)) => {
                    events.extend(ev);
                    if let Some(run) = input.run {
                        self.runs.insert(id, Arc::new(run));
                    }
                    if let Some(rec) = self.arrays.get_mut(key) {
                        rec.active.insert(id);
                    }
                }
                Err(e) => {
                    if let Some(rec) = self.arrays.get_mut(key) {
                        rec.refused += 1;
                        rec.last_refusal = format!("element {index}: {e}");
                    }
                }
            }
        }
        if self
            .arrays
            .get(key)
            .is_some_and(|r| r.active.is_empty() && r.released >= r.total())
        {
            self.arrays.remove(key);
        }
    }

    /// The array `name` (in `team`, or the only team that has one so named).
    fn find_array(&self, name: &str, team: Option<&str>) -> Result<Option<ArrayKey>, ApiError> {
        let keys: Vec<&ArrayKey> = self
            .arrays
            .keys()
            .filter(|(t, n)| n == name && team.is_none_or(|s| s == t))
            .collect();
        match keys.as_slice() {
            [] => Ok(None),
            [k] => Ok(Some((*k).clone())),
            _ => Err(StateError::AmbiguousWorkload {
                name: name.to_string(),
                teams: keys
                    .iter()
                    .map(|(t, _)| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
            .into()),
        }
    }

    /// `cancel NAME` where NAME is not an active workload: a whole array, or an element of one
    /// not queued yet. `Ok(false)`: neither.
    pub(crate) fn cancel_array_part(
        &mut self,
        name: &str,
        team: Option<&str>,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<bool, ApiError> {
        if let Some(key) = self.find_array(name, team)? {
            let rec = self.arrays.get_mut(&key).expect("found above");
            rec.released = rec.total();
            let active: Vec<WlId> = rec.active.iter().copied().collect();
            for id in active {
                events.extend(self.state.cancel(id, now)?);
            }
            self.release(&key, now, events);
            return Ok(true);
        }
        let Some((array, index)) = name
            .rsplit_once('-')
            .and_then(|(a, i)| Some((a, i.parse::<u32>().ok()?)))
        else {
            return Ok(false);
        };
        let Some(key) = self.find_array(array, team)? else {
            return Ok(false);
        };
        let rec = self.arrays.get_mut(&key).expect("found above");
        if !rec.is_held(index) || !rec.cancelled_held.insert(index) {
            return Ok(false);
        }
        Ok(true)
    }

    pub fn array_views(&self, team: Option<&str>) -> Vec<ArrayView> {
        self.arrays
            .iter()
            .filter(|((t, _), _)| team.is_none_or(|s| s == t))
            .map(|((t, n), r)| ArrayView {
                name: n.clone(),
                team: t.clone(),
                indices: r.text.clone(),
                max_running: r.indices.max_running,
                total: r.total(),
                held: r.waiting(),
                cancelled_held: r.cancelled_held.len() as u32,
                submitted_ms: r.submitted,
            })
            .collect()
    }

    // ------------------------------------------------------------------------- bulk cancel

    /// The active workloads `sel` matches, by id.
    pub fn matching(&self, sel: &WorkloadSelector) -> Vec<WlId> {
        let st = &self.state;
        let mut ids: Vec<WlId> = st
            .teams
            .iter()
            .filter(|t| sel.team.as_deref().is_none_or(|n| n == t.name()))
            .flat_map(|t| {
                t.pending
                    .iter()
                    .map(|k| k.id)
                    .chain(t.admitted.iter().copied())
            })
            .filter(|id| {
                st.workloads.get(id).is_some_and(|w| {
                    !w.state.is_finished()
                        && sel.matches(&w.spec.team, &w.spec.labels, w.state.as_str())
                })
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Arrays whose elements not yet queued `sel` matches (they would be pending).
    fn matching_arrays(&self, sel: &WorkloadSelector) -> Vec<ArrayKey> {
        self.arrays
            .iter()
            .filter(|((t, _), r)| {
                r.waiting() > 0 && sel.matches(t, &r.input.spec.labels, WlState::Pending.as_str())
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Which workloads a bulk cancel takes (names, and held array elements counted).
    pub fn cancel_preview(&self, sel: &WorkloadSelector) -> Result<Reply, ApiError> {
        sel.check()
            .map_err(|e| ApiError::new(ErrorKind::Invalid, e))?;
        let ids = self.matching(sel);
        let held: u32 = self
            .matching_arrays(sel)
            .iter()
            .map(|k| self.arrays[k].waiting())
            .sum();
        Ok(Reply::Cancelled {
            count: ids.len() as u64 + u64::from(held),
            names: self.names_of(&ids),
        })
    }

    fn names_of(&self, ids: &[WlId]) -> Vec<String> {
        ids.iter()
            .take(CANCELLED_NAMES_MAX)
            .map(|id| {
                let w = self.state.workload(*id);
                format!("{}/{}", w.spec.team, w.spec.name)
            })
            .collect()
    }

    pub(crate) fn cancel_matching(
        &mut self,
        sel: &WorkloadSelector,
        now: Time,
        events: &mut Vec<Event>,
    ) -> Result<Reply, ApiError> {
        let preview = self.cancel_preview(sel)?;
        // Arrays first, so that cancelling their elements queues no more of them.
        for key in self.matching_arrays(sel) {
            if let Some(r) = self.arrays.get_mut(&key) {
                r.released = r.total();
            }
        }
        for id in self.matching(sel) {
            events.extend(self.state.cancel(id, now)?);
        }
        let keys: Vec<ArrayKey> = self.arrays.keys().cloned().collect();
        for key in keys {
            self.release(&key, now, events);
        }
        Ok(preview)
    }

    // ------------------------------------------------------------------------- history

    /// Finished workloads still kept, newest first, as `f` filters them.
    pub fn history_rows(&self, f: &HistoryFilter) -> Result<Vec<HistoryRow>, ApiError> {
        for s in &f.states {
            if !FINISHED_STATES.iter().any(|a| a.eq_ignore_ascii_case(s)) {
                return Err(ApiError::new(
                    ErrorKind::Invalid,
                    format!(
                        "unknown outcome {s:?}; use one of {}",
                        FINISHED_STATES.join(", ").to_ascii_lowercase()
                    ),
                ));
            }
        }
        let limit = f.limit.map_or(usize::MAX, |l| l as usize);
        let st = &self.state;
        let mut rows = Vec::new();
        for &(at, id) in self.finished.iter().rev() {
            if rows.len() >= limit {
                break;
            }
            if f.since_ms.is_some_and(|s| at < s) || f.until_ms.is_some_and(|u| at >= u) {
                continue;
            }
            let Some(w) = st.workloads.get(&id) else {
                continue;
            };
            let state = w.state.as_str();
            if f.team.as_deref().is_some_and(|t| t != w.spec.team)
                || (!f.states.is_empty() && !f.states.iter().any(|s| s.eq_ignore_ascii_case(state)))
            {
                continue;
            }
            let h = self.history.get(&id);
            let pods = h.map(|h| &h.pods);
            let started = pods.and_then(|p| p.values().filter_map(|t| t.started).min());
            let mut nodes: Vec<String> = pods
                .map(|p| {
                    p.values()
                        .map(|t| t.node.clone())
                        .filter(|n| !n.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            nodes.sort();
            nodes.dedup();
            let exit_code = pods.and_then(|p| {
                let codes: Vec<i32> = p.values().filter_map(|t| t.exit_code).collect();
                codes
                    .iter()
                    .copied()
                    .find(|c| *c != 0)
                    .or(codes.first().copied())
            });
            let reason = if w.state == WlState::Succeeded {
                String::new()
            } else {
                w.conditions
                    .iter()
                    .rev()
                    .find(|c| !c.message.is_empty())
                    .map(|c| c.message.to_string())
                    .unwrap_or_default()
            };
            rows.push(HistoryRow {
                id: id.0,
                name: w.spec.name.clone(),
                team: w.spec.team.clone(),
                priority_class: match &w.spec.priority {
                    PriorityRef::Class(c) => Some(c.clone()),
                    _ => None,
                },
                state: state.to_string(),
                submitted_ms: w.submit_time,
                admitted_ms: w.admitted_at,
                started_ms: started,
                ended_ms: at,
                wait_ms: w.admitted_at.map(|a| a - w.submit_time),
                run_ms: started.map(|s| at - s),
                pods: w.spec.pod_sets.iter().map(|p| p.count).sum(),
                nodes,
                exit_code,
                preemptions: w.preemptions,
                lost_run_ms: w.lost_run_ms,
                reason,
            });
        }
        Ok(rows)
    }
}

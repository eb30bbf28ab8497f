//! What the cluster recorded over a period (`allot what-if`): the workloads submitted in it or
//! carried into it (submitted before, not ended at its start), with
//! their submission, first admission, end and last run's length, beside the policy, teams and
//! nodes as they are now. Read from the machine, so it covers what the machine still keeps:
//! finished workloads for a day (`FINISHED_KEEP_MS`), admissions as far as the usage ledger keeps
//! each workload's windows.

use allot_common::recorded::{Recorded, RecordedWorkload};

use crate::machine::Machine;
use crate::state::Time;

/// What was submitted in `[since, until)`, and what was submitted before and had not ended
/// by `since` (carried in), oldest first.
pub fn recorded(m: &Machine, since: Time, until: Time) -> Recorded {
    let st = &m.state;
    let mut workloads: Vec<RecordedWorkload> = (st.workloads.iter())
        .filter_map(|(id, w)| {
            let ended = m.history.get(&id).and_then(|h| h.finished);
            let carried = w.submit_time < since && ended.is_none_or(|e| e >= since);
            ((since..until).contains(&w.submit_time) || carried).then_some((id, w, ended, carried))
        })
        .map(|(id, w, ended, carried)| {
            let run = m.usage.run(id);
            let first = run.and_then(|r| r.windows.first()).map(|w| w.from);
            let last = run.and_then(|r| r.windows.last());
            // A run under way at the start counts from the start.
            let ran = match (last, ended) {
                (Some(l), Some(_)) => l.to.map(|to| (to - l.from.max(since)).max(0)),
                _ => None,
            };
            RecordedWorkload {
                spec: w.spec.clone(),
                submitted_ms: w.submit_time,
                admitted_ms: first.or(w.admitted_at),
                ended_ms: ended,
                ran_ms: ran,
                state: w.state.as_str().to_string(),
                preemptions: w.preemptions,
                carried,
            }
        })
        .collect();
    workloads.sort_by(|a, b| (a.submitted_ms, &a.spec.name).cmp(&(b.submitted_ms, &b.spec.name)));
    Recorded {
        since_ms: since,
        until_ms: until,
        policy: st.policy.clone(),
        teams: (st.teams.iter())
            .filter(|t| st.team_ids.contains_key(&t.spec.name))
            .map(|t| t.spec.clone())
            .collect(),
        nodes: (crate::views::nodes(m).into_iter())
            .map(|n| (n.name, n.instance_type, n.capacity))
            .collect(),
        workloads,
    }
}

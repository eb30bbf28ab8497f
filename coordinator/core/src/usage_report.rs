//! Reading the usage ledger (`usage.rs`) into a report: the hours of a period summed into rows
//! grouped as asked (team, class, instance type, day), and who lent to whom.

use std::collections::BTreeMap;

use allot_common::usage::{
    LendLine, QuotaAmounts, UsageAmounts, UsageBy, UsageLine, UsageQuery, UsageReport,
};

use crate::state::Time;
use crate::usage::{Ledger, Name, HOUR_MS};

/// The longest period one report covers: the ledger keeps no more.
pub const MAX_PERIOD_MS: i64 = crate::usage::KEEP_HOURS * HOUR_MS;

/// The report `q` asks for, as the ledger stands at `now`. The period is read in whole hours,
/// and in whole days where it reaches past the 31 days the ledger keeps by the hour.
pub fn report(ledger: &Ledger, q: &UsageQuery, now: Time) -> Result<UsageReport, String> {
    if q.until_ms <= q.since_ms {
        return Err(format!(
            "the period ends ({}) before it starts ({}): --until must be later than --since",
            allot_common::timefmt::utc(q.until_ms),
            allot_common::timefmt::utc(q.since_ms)
        ));
    }
    let since = q.since_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let until = (q.until_ms + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS;
    if until - since > MAX_PERIOD_MS {
        return Err(format!(
            "a period of {} days is longer than the {} days the cluster keeps",
            (until - since) / (24 * HOUR_MS),
            MAX_PERIOD_MS / (24 * HOUR_MS)
        ));
    }
    let by = if q.by.is_empty() {
        vec![UsageBy::Team]
    } else {
        q.by.clone()
    };
    let team = q.team.as_deref().map(|t| ledger.names.find(t));
    if team == Some(None) {
        // A team the ledger never saw used nothing.
        return Ok(empty(since, until, now, by));
    }
    let team = team.flatten();
    let names = &ledger.names;
    let group = |t: Name, class: Option<Name>, it: Name, hour: i64, wl: &str| -> Vec<String> {
        by.iter()
            .map(|b| match b {
                UsageBy::Team => names.get(t).to_string(),
                UsageBy::Class => class.map_or("-", |c| names.get(c)).to_string(),
                UsageBy::InstanceType => names.get(it).to_string(),
                UsageBy::Day => allot_common::timefmt::utc(hour * HOUR_MS)[..10].to_string(),
                UsageBy::Workload => wl.to_string(),
            })
            .collect()
    };
    // Quota belongs to teams: rows by class or by workload carry none.
    let no_quota = by.contains(&UsageBy::Class) || by.contains(&UsageBy::Workload);
    let by_workload = by.contains(&UsageBy::Workload);
    let mut lines: BTreeMap<(Vec<String>, String), UsageAmounts> = BTreeMap::new();
    let mut lending: BTreeMap<(String, String, String, String), i128> = BTreeMap::new();
    if by_workload {
        for run in ledger.runs().map(|(_, r)| r) {
            if team.is_some_and(|x| x != run.team) {
                continue;
            }
            for w in &run.windows {
                let to = w.to.unwrap_or(now).min(until);
                let lost = (w.preempted_at)
                    .filter(|p| (since..until).contains(p))
                    .map(|p| (p, i128::from(p - w.from)));
                for &(_, it, res, q) in &w.usage {
                    let mut add = |h: i64, used: i128, lost: i128| {
                        let k = (
                            group(run.team, Some(run.class), it, h, &run.name),
                            names.get(res).to_string(),
                        );
                        let e = lines.entry(k).or_default();
                        e.used += used;
                        e.lost += lost;
                    };
                    crate::usage::split_hours(w.from.max(since), to, |h, dt| {
                        add(h, i128::from(q) * dt, 0)
                    });
                    if let Some((p, ran)) = lost {
                        add(p.div_euclid(HOUR_MS), 0, i128::from(q) * ran);
                    }
                }
            }
        }
    }
    for (h, hour) in ledger.hours_between(since, until, now) {
        for (&(t, class, it, res), a) in hour.used.iter().filter(|_| !by_workload) {
            if team.is_some_and(|x| x != t) {
                continue;
            }
            let e = lines
                .entry((group(t, Some(class), it, h, ""), names.get(res).to_string()))
                .or_default();
            e.used += a.used;
            e.lost += a.lost;
        }
        if !no_quota {
            for (&(t, it, res), a) in &hour.quota {
                if team.is_some_and(|x| x != t) {
                    continue;
                }
                let e = lines
                    .entry((group(t, None, it, h, ""), names.get(res).to_string()))
                    .or_default();
                let qa = e.quota.get_or_insert_with(QuotaAmounts::default);
                qa.nominal += a.nominal;
                qa.own += a.own;
                qa.borrowed += a.borrowed;
                qa.lent += a.lent;
                qa.idle += a.idle();
            }
        }
        for (&(b, l, it, res), &amount) in &hour.lending {
            if team.is_some_and(|x| x != b && x != l) {
                continue;
            }
            let k = (
                names.get(b).to_string(),
                names.get(l).to_string(),
                names.get(it).to_string(),
                names.get(res).to_string(),
            );
            *lending.entry(k).or_default() += amount;
        }
    }
    // Rows grouped by class or workload carry no quota split; others without one had no quota.
    if !no_quota {
        for a in lines.values_mut() {
            a.quota.get_or_insert_with(QuotaAmounts::default);
        }
    }
    Ok(UsageReport {
        since_ms: since,
        until_ms: until,
        generated_ms: now,
        by,
        lines: (lines.into_iter())
            .map(|((group, resource), amounts)| UsageLine {
                group,
                resource,
                amounts,
            })
            .collect(),
        lending: (lending.into_iter())
            .map(
                |((borrower, lender, instance_type, resource), amount)| LendLine {
                    borrower,
                    lender,
                    instance_type,
                    resource,
                    amount,
                },
            )
            .collect(),
    })
}

fn empty(since: Time, until: Time, now: Time, by: Vec<UsageBy>) -> UsageReport {
    UsageReport {
        since_ms: since,
        until_ms: until,
        generated_ms: now,
        by,
        lines: Vec::new(),
        lending: Vec::new(),
    }
}

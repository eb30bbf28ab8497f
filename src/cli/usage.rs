//! `allot usage`'s output: a usage report as a table or CSV in hours of each resource's unit
//! (GPU-hours, vCPU-hours, GiB-hours), or as JSON with the exact amounts.

use allot_common::usage::{UsageAmounts, UsageReport};

use super::render::{csv_field, table, HistoryFormat};

/// The unit a resource's hours are shown in, and how many base units (millicores, bytes,
/// devices) make one.
fn unit(resource: &str) -> (&'static str, f64) {
    match resource {
        allot_common::resource::CPU => ("vCPU-h", 1000.0),
        allot_common::resource::MEMORY => ("GiB-h", (1u64 << 30) as f64),
        allot_common::resource::GPU => ("GPU-h", 1.0),
        allot_common::resource::NEURON => ("Neuron-h", 1.0),
        allot_common::resource::EFA => ("EFA-h", 1.0),
        _ => ("unit-h", 1.0),
    }
}

/// `amount` (base unit times milliseconds) in hours of the resource's unit.
fn hours(resource: &str, amount: i128) -> f64 {
    amount as f64 / unit(resource).1 / 3_600_000.0
}

/// The column names after the group's, and the values of one line in them.
const AMOUNT_HEADER: [&str; 9] = [
    "RESOURCE", "UNIT", "USED", "OWN", "BORROWED", "LENT", "IDLE", "NOMINAL", "LOST",
];

fn amount_cells(resource: &str, a: &UsageAmounts, digits: usize) -> Vec<String> {
    let h = |x: i128| format!("{:.*}", digits, hours(resource, x));
    let q = |f: fn(&allot_common::usage::QuotaAmounts) -> i128| {
        a.quota.as_ref().map_or(String::new(), |qa| h(f(qa)))
    };
    vec![
        resource.to_string(),
        unit(resource).0.to_string(),
        h(a.used),
        q(|x| x.own),
        q(|x| x.borrowed),
        q(|x| x.lent),
        q(|x| x.idle),
        q(|x| x.nominal),
        h(a.lost),
    ]
}

fn group_header(r: &UsageReport) -> Vec<String> {
    r.by.iter().map(|b| b.word().to_uppercase()).collect()
}

pub(crate) fn render(r: &UsageReport, format: HistoryFormat) -> anyhow::Result<String> {
    let period = format!(
        "{} to {}",
        allot_common::timefmt::utc(r.since_ms),
        allot_common::timefmt::utc(r.until_ms.min(r.generated_ms.max(r.since_ms)))
    );
    Ok(match format {
        HistoryFormat::Json => serde_json::to_string_pretty(r)? + "\n",
        HistoryFormat::Csv => {
            let mut out = String::new();
            let mut header: Vec<String> = r.by.iter().map(|b| b.word().replace('-', "_")).collect();
            header.extend(AMOUNT_HEADER.iter().map(|h| h.to_lowercase()));
            out.push_str(&header.join(","));
            out.push('\n');
            for l in &r.lines {
                let mut cells: Vec<String> = l.group.iter().map(|g| csv_field(g)).collect();
                cells.extend(amount_cells(&l.resource, &l.amounts, 6));
                out.push_str(&cells.join(","));
                out.push('\n');
            }
            out
        }
        HistoryFormat::Table => {
            let mut header = group_header(r);
            header.extend(AMOUNT_HEADER.iter().map(|h| h.to_string()));
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            let rows: Vec<Vec<String>> = (r.lines.iter())
                .map(|l| {
                    let mut cells = l.group.clone();
                    cells.extend(amount_cells(&l.resource, &l.amounts, 2));
                    cells
                })
                .collect();
            let mut out = format!("Usage {period} (UTC), in hours\n");
            if rows.is_empty() {
                out.push_str("nothing was used in this period\n");
                return Ok(out);
            }
            out.push_str(&table(&header, &rows));
            if !r.lending.is_empty() {
                out.push_str("\nLent and borrowed\n");
                let rows: Vec<Vec<String>> = (r.lending.iter())
                    .map(|l| {
                        vec![
                            l.borrower.clone(),
                            l.lender.clone(),
                            l.instance_type.clone(),
                            l.resource.clone(),
                            unit(&l.resource).0.to_string(),
                            format!("{:.2}", hours(&l.resource, l.amount)),
                        ]
                    })
                    .collect();
                out.push_str(&table(
                    &[
                        "BORROWER",
                        "LENDER",
                        "INSTANCE-TYPE",
                        "RESOURCE",
                        "UNIT",
                        "HOURS",
                    ],
                    &rows,
                ));
            }
            out
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_common::usage::{LendLine, QuotaAmounts, UsageBy, UsageLine};

    fn report() -> UsageReport {
        let hour = 3_600_000i128;
        UsageReport {
            since_ms: 0,
            until_ms: 2 * 3_600_000,
            generated_ms: 2 * 3_600_000,
            by: vec![UsageBy::Team],
            lines: vec![UsageLine {
                group: vec!["team-a".into()],
                resource: "gpu".into(),
                amounts: UsageAmounts {
                    used: 12 * hour,
                    lost: hour / 2,
                    quota: Some(QuotaAmounts {
                        nominal: 16 * hour,
                        own: 8 * hour,
                        borrowed: 4 * hour,
                        lent: 0,
                        idle: 8 * hour,
                    }),
                },
            }],
            lending: vec![LendLine {
                borrower: "team-a".into(),
                lender: "team-b".into(),
                instance_type: "ml.p5.48xlarge".into(),
                resource: "gpu".into(),
                amount: 4 * hour,
            }],
        }
    }

    #[test]
    fn tables_and_csv_show_hours_of_the_resource_unit() {
        let t = render(&report(), HistoryFormat::Table).expect("renders");
        assert!(
            t.contains("team-a") && t.contains("12.00") && t.contains("GPU-h"),
            "{t}"
        );
        assert!(t.contains("0.50"), "the lost half hour: {t}");
        assert!(t.contains("team-b"), "who lent: {t}");
        let c = render(&report(), HistoryFormat::Csv).expect("renders");
        let mut lines = c.lines();
        assert_eq!(
            lines.next(),
            Some("team,resource,unit,used,own,borrowed,lent,idle,nominal,lost")
        );
        assert_eq!(
            lines.next(),
            Some(
                "team-a,gpu,GPU-h,12.000000,8.000000,4.000000,0.000000,8.000000,16.000000,0.500000"
            )
        );
    }

    #[test]
    fn memory_and_cpu_are_shown_in_gib_and_vcpu_hours() {
        assert_eq!(hours("memory", (1i128 << 30) * 3_600_000), 1.0);
        assert_eq!(hours("cpu", 1000 * 3_600_000), 1.0);
    }
}

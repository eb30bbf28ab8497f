//! How large the usage ledger grows: one hour's buckets for a 1,000-node cluster, encoded as a
//! snapshot encodes them, for the hours kept by the hour and the days kept by the day. `cargo run --release -p allot-core --example
//! usage_size [TEAMS CLASSES TYPES]` (default 20 teams, 4 priority classes, 2 instance types,
//! every team using every class on every type in every hour, with borrowing between all
//! pairs: the worst case for that many names).

use allot_core::usage::{Hour, QuotaAmount, UsedAmount, HOURLY_FOR_HOURS, HOUR_MS, KEEP_HOURS};

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or_else(|_| panic!("{a:?}: give numbers")))
        .collect();
    let (teams, classes, types) = match args[..] {
        [t, c, i] => (t, c, i),
        _ => (20, 4, 2),
    };
    // Resources: gpu, cpu, memory, efa (the names sit in the ledger's table once).
    let resources = 4u32;
    let hour = HOUR_MS as i128;
    let mut h = Hour::default();
    for t in 0..teams {
        for it in 0..types {
            for r in 0..resources {
                // 1,000 nodes of 8 GPUs, 192 vCPU, 2 TiB shared by the teams.
                let q = [400i128, 9_600_000, 1 << 40, 160][r as usize] / i128::from(teams);
                for c in 0..classes {
                    h.used.insert(
                        (t, 100 + c, 200 + it, 300 + r),
                        UsedAmount {
                            used: q * hour / 3,
                            lost: q * hour / 50,
                        },
                    );
                }
                h.quota.insert(
                    (t, 200 + it, 300 + r),
                    QuotaAmount {
                        nominal: q * hour,
                        own: q * hour * 3 / 4,
                        borrowed: q * hour / 7,
                        lent: q * hour / 9,
                    },
                );
                for l in 0..teams {
                    if l != t {
                        h.lending.insert((t, l, 200 + it, 300 + r), q * hour / 11);
                    }
                }
            }
        }
    }
    let one = allot_net::wire::encode_snapshot(&h).expect("encodes").len() as u64;
    // A day folds 24 such hours: the same rows, larger sums.
    let mut day = Hour::default();
    for _ in 0..24 {
        day.add(&h);
    }
    let one_day = allot_net::wire::encode_snapshot(&day)
        .expect("encodes")
        .len() as u64;
    let hourly = HOURLY_FOR_HOURS as u64;
    let year = one * hourly + one_day * (365 - hourly / 24);
    let kept = one * hourly + one_day * ((KEEP_HOURS as u64 - hourly) / 24);
    println!(
        "{teams} teams, {classes} classes, {types} instance types, {resources} resources: \
         {} rows, {one} bytes an hour and {one_day} a folded day; {:.1} MiB a year, {:.1} MiB \
         for the {} days kept",
        h.used.len() + h.quota.len() + h.lending.len(),
        year as f64 / (1 << 20) as f64,
        kept as f64 / (1 << 20) as f64,
        KEEP_HOURS / 24
    );
}

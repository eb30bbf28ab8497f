//! The Grafana dashboard (deploy/grafana/allot.json) queries only metrics that the coordinator
//! and the agent export: each name in its expressions is one of theirs, as their registries
//! describe them (`# TYPE` lines), with the suffixes Prometheus adds (`_total` for counters;
//! `_bucket`, `_sum`, `_count` for histograms).

use std::collections::BTreeSet;

/// A machine where team-a borrows team-b's GPU, so that every labelled family has a series
/// (an empty family is not exported at all).
fn machine() -> allot_core::machine::Machine {
    use allot_common::api::{ActivationState, ComputeQuotaInput, SubmitInput};
    use allot_core::machine::{Command, Entry, Machine};
    const T: &str = "ml.g5.8xlarge"; // one GPU
    let mut m = Machine::new();
    let apply = |m: &mut Machine, cmd| m.apply(&Entry { now: 1, cmd }).0.expect("applies");
    for team in ["team-a", "team-b"] {
        #[allow(clippy::disallowed_methods)]
        let config = allot_common::hyperpod::ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType={T},Count=1}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}}"
        ))
        .expect("a quota config");
        apply(
            &mut m,
            Command::CreateComputeQuota(ComputeQuotaInput {
                name: format!("q-{team}"),
                description: None,
                team: team.into(),
                fair_share_weight: 1,
                config,
                activation: ActivationState::Enabled,
            }),
        );
    }
    let capacity = allot_common::Catalog::builtin()
        .get(T)
        .expect("type")
        .resources();
    for n in ["n1", "n2"] {
        let name = n.into();
        let instance_type = T.into();
        let capacity = capacity.clone();
        apply(
            &mut m,
            Command::RegisterNode {
                name,
                instance_type,
                capacity,
            },
        );
    }
    for w in ["w1", "w2"] {
        let mut gpu = allot_common::Resources::new();
        gpu.add(&allot_common::ResourceName::gpu(), 1);
        let spec = allot_common::WorkloadSpec::single(w, "team-a", 1, gpu);
        let (run, client_token) = (None, None);
        apply(
            &mut m,
            Command::Submit(SubmitInput {
                spec,
                run,
                client_token,
            }),
        );
    }
    let plan = allot_core::schedule(&m.state, 1);
    apply(&mut m, Command::Plan(plan));
    m
}

fn exported() -> BTreeSet<String> {
    let coordinator = allot_coordinator::metrics::Metrics::new(1);
    coordinator.update_machine(&machine());
    let agent = allot_agent::metrics::AgentMetrics::new();
    agent.set_phase_counts([1, 0, 0, 0]);
    agent.set_inventory(&[allot_common::api::DeviceInfo {
        resource: "gpu".into(),
        healthy: true,
        ..Default::default()
    }]);
    let text = coordinator.encode() + &agent.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (w.next(), w.next(), w.next(), w.next())
        {
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            for s in suffixes {
                names.insert(format!("{name}{s}"));
            }
        }
    }
    names
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/allot.json");
    let text = std::fs::read_to_string(path).expect("the dashboard is in the repository");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported();
    assert!(exported.contains("allot_workloads"), "{exported:?}");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(
                t["expr"]
                    .as_str()
                    .expect("every target has an expression")
                    .to_string(),
            );
        }
    }
    assert!(exprs.len() >= 10, "{} queries", exprs.len());
    for e in &exprs {
        let names: Vec<&str> = e
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("allot_"))
            .collect();
        assert!(!names.is_empty(), "{e:?} names no allot metric");
        for n in names {
            assert!(
                exported.contains(n),
                "{e:?} queries {n}, which nothing exports: {exported:?}"
            );
        }
    }
}

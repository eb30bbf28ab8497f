//! `allot simulate` on large and hostile scenario files, through the real binary.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_allot");

/// Runs a scenario that must be refused as invalid (exit status 2); returns what it said.
fn refused(name: &str, text: &str) -> String {
    let out = simulate(name, text);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

fn simulate(name: &str, text: &str) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("allot-simulate-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write scenario");
    let out = Command::new(BIN)
        .args(["simulate", "--output", "json"])
        .arg(&path)
        .output()
        .expect("run allot simulate");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// A YAML scenario of `workloads` one-GPU jobs on `nodes` p5 nodes, all submitted at once.
fn big_yaml(nodes: usize, workloads: usize) -> String {
    let mut s = String::from(
        "version: 1\nnodes:\n  - {name_prefix: p5-, count: NODES, instance_type: ml.p5.48xlarge}\n\
         teams:\n  - {name: a, compute_quota: \"ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=NODES}]\"}\n\
         workloads:\n",
    )
    .replace("NODES", &nodes.to_string());
    for i in 0..workloads {
        s.push_str(&format!(
            "  - {{name: w{i:06}, team: a, submit_at: 0, duration: 60, count: 1, requests: {{gpu: 1, cpu: 4, memory: 16Gi}}}}\n"
        ));
    }
    s.push_str("until: 0\n");
    s
}

#[test]
fn a_yaml_file_beyond_the_parsers_default_budget_is_read() {
    // 12,000 workloads are about 300,000 YAML nodes: over serde-saphyr's default of 250,000,
    // which refused the 100,000-workload benchmark file.
    let out = simulate("big.yaml", &big_yaml(20, 12_000));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    // 20 nodes of 8 GPUs: 160 one-GPU jobs run, the rest wait.
    assert_eq!(v["stats"]["admitted"], 160, "{}", v["stats"]);
    let pending = v["final"]["workloads"]
        .as_object()
        .expect("workloads")
        .values()
        .filter(|w| w["state"] == "Pending")
        .count();
    assert_eq!(pending, 12_000 - 160);
}

#[test]
fn a_tiny_file_asking_for_a_hundred_million_nodes_is_refused_at_once() {
    let text = "version: 1\nteams: [{name: a, compute_quota: \"ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]\"}]\nnodes: [{name_prefix: g5-, count: 100000000, instance_type: ml.g5.8xlarge}]\n";
    let stderr = refused("bomb.yaml", text);
    assert!(
        stderr.contains("nodes[0].count") && stderr.contains("at most 100000"),
        "{stderr}"
    );
}

#[test]
fn a_bad_yaml_key_or_value_is_named_by_its_path_and_line() {
    // YAML is read straight into the scenario's types: the error still names the key path,
    // and the parser adds where in the file it is.
    let unknown = "version: 1\nteams:\n  - name: a\n    quota: {}\n    bogus: 1\n";
    let stderr = refused("unknown.yaml", unknown);
    assert!(
        stderr.contains("teams[0].bogus: line 5 column 5: unknown field `bogus`"),
        "{stderr}"
    );
    let bad_time = "version: 1\nteams:\n  - name: a\nuntil: soon\n";
    let stderr = refused("until.yaml", bad_time);
    assert!(stderr.contains("until: line 4 column 8"), "{stderr}");
    // Text that is no scenario at all says so.
    let stderr = refused("scalar.yaml", "hello\n");
    assert!(stderr.contains("not valid YAML or JSON"), "{stderr}");
    // The stability rules name the bad value and what is accepted.
    let part = "version: 1\npolicy: {minimum_run_time: 1.5}\nteams:\n  - name: a\n";
    let stderr = refused("part.yaml", part);
    assert!(
        stderr
            .contains("policy.minimum_run_time: 1.5 is not a whole number of seconds in 0..=86400"),
        "{stderr}"
    );
    let budget = "version: 1\npolicy: {preemption_budget: 5000}\nteams:\n  - name: a\n";
    let stderr = refused("budget.yaml", budget);
    assert!(
        stderr.contains("preemption budget 5000 is out of range 0..=1000"),
        "{stderr}"
    );
}

#[test]
fn a_waiting_workloads_final_message_says_why_and_the_numbers_at_the_end() {
    // 16 GPUs on two nodes; team a runs 12 of them, then b (8) waits: 4 more needed.
    let text = "version: 1\nnodes:\n  - {name_prefix: p5-, count: 2, instance_type: ml.p5.48xlarge}\n\
        teams:\n  - {name: a, compute_quota: \"ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=2}]\"}\n\
        workloads:\n\
          - {name: r, team: a, submit_at: 0, duration: 600, count: 3, requests: {gpu: 4}}\n\
          - {name: b, team: a, submit_at: 1, duration: 60, count: 1, requests: {gpu: 8}}\n\
        until: 10\n";
    let out = simulate("why.yaml", text);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    let b = &v["final"]["workloads"]["b"];
    assert_eq!(b["state"], "Pending", "{b}");
    let m = b["message"].as_str().unwrap_or_default();
    // Recorded by the cycle: which pair is short, with the request and the nominal.
    assert!(
        m.contains(
            "insufficient unused quota for gpu in flavor ml.p5.48xlarge (requested 8, nominal 16)"
        ),
        "{m}"
    );
    // Derived when read, at the end of the run.
    assert!(
        m.contains("Now: gpu in flavor ml.p5.48xlarge: 4 more needed (available 4; team uses 12 of nominal 16)"),
        "{m}"
    );
}

/// A minimum run time turned on by `set_policy` ends for the work running then: the simulator
/// wakes at that end (a live leader cycles on its timer), not at the next unrelated event.
#[test]
fn a_minimum_run_time_set_mid_run_ends_on_time() {
    let base = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios/stability-minimum-run-time.yaml"),
    )
    .expect("the scenario");
    // Off at first; on from 10 s; b arrives at 20 s instead of 1 s.
    let text = base
        .replace(
            "policy: {fair_share: Enabled, minimum_run_time: 60, preemption_budget: 0}",
            "policy: {fair_share: Enabled}",
        )
        .replace("submit_at: 1,", "submit_at: 20,")
        + "events:\n  - {at: 10, set_policy: {minimum_run_time: 60}}\n";
    let out = simulate("mid-run.yaml", &text);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    let preempted: Vec<(f64, String)> = v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "preempted")
        .map(|e| {
            (
                e["t"].as_f64().expect("time"),
                e["reason"].as_str().expect("reason").to_string(),
            )
        })
        .collect();
    let reclaimed = (20.0, "InCohortReclamation".to_string());
    let fair = (60.0, "InCohortFairSharing".to_string());
    assert_eq!(
        preempted,
        vec![reclaimed.clone(), reclaimed, fair.clone(), fair],
        "{preempted:?}"
    );
}

#[test]
fn a_weight_is_a_number_from_0_to_100_with_at_most_3_places() {
    for (w, ok) in [
        ("0.5", true),
        ("2.25", true),
        ("0.0001", false),
        ("101", false),
        ("-1", false),
    ] {
        let text = format!(
            "version: 1\nteams:\n  - name: t\n    fair_share_weight: {w}\n    quota: {{default: {{cpu: {{nominal: 1}}}}}}\nworkloads: []\n"
        );
        if ok {
            let out = simulate("w.yaml", &text);
            assert!(
                out.status.success(),
                "{w}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            let stderr = refused("w.yaml", &text);
            assert!(
                stderr.contains("teams[0].fair_share_weight")
                    && stderr.contains("at most 3 decimal places"),
                "{w}: {stderr}"
            );
        }
    }
}

#[test]
fn a_cohort_weight_is_read_as_a_teams_and_a_bad_one_is_named() {
    let text = |w: &str| {
        format!(
            "version: 1\npolicy: {{fair_share: Enabled}}\ncohorts:\n  - {{name: org, parent: null}}\n  - {{name: d, parent: org, fair_share_weight: {w}}}\nteams:\n  - {{name: t, cohort: d, quota: {{default: {{cpu: {{nominal: 1}}}}}}}}\nworkloads: []\n"
        )
    };
    for w in ["0", "0.25", "2", "100"] {
        let out = simulate("c.yaml", &text(w));
        assert!(
            out.status.success(),
            "{w}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for w in ["-1", "100.5", "0.0001"] {
        let stderr = refused("c.yaml", &text(w));
        assert!(
            stderr.contains("cohorts[1].fair_share_weight")
                && stderr.contains("at most 3 decimal places"),
            "{w}: {stderr}"
        );
    }
}

#[test]
fn the_output_counts_the_schedulers_work() {
    // A reclaim at t=10: the victims go in one cycle, the preemptor comes in the next (a
    // follow-up cycle at the same instant), and every cycle judges the heads it must.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/hierarchical-reclaim.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the scenario");
    let out = simulate("reclaim.yaml", &text);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    let s = &v["stats"];
    let count = |k: &str| {
        s["work"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("no work.{k} in {s}"))
    };
    let cycles = s["cycles"].as_u64().expect("cycles");
    assert!(count("judged") > 0, "{s}");
    assert!(
        count("follow_up_cycles") >= 1 && count("follow_up_cycles") < cycles,
        "{s}"
    );
    assert!(count("judged_in_follow_ups") <= count("judged"), "{s}");
    assert!(s["work"]["recognised"].is_u64(), "{s}");
}

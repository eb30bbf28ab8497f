//! What a snapshot costs the replica that takes it, at `allot bench`'s scale (100 teams, 1000
//! nodes, thousands of running and finished workloads): copying the state machine, encoding it,
//! and decoding it on restart. `cargo bench -p allot-coordinator --bench snapshot`.

use std::hint::black_box;

use allot_common::api::{ActivationState, ComputeQuotaInput, RunSpec, SubmitInput};
use allot_common::hyperpod::ComputeQuotaConfig;
use allot_common::{Catalog, ResourceName, Resources, WorkloadSpec};
use allot_core::machine::{Command, Entry, Machine};
use criterion::{criterion_group, criterion_main, Criterion};

const TEAMS: usize = 100;
const NODES: usize = 1000;
const INSTANCE: &str = "ml.p4d.24xlarge";

fn apply(m: &mut Machine, now: i64, cmd: Command) {
    let (r, _) = m.apply(&Entry { now, cmd });
    if let Err(e) = r {
        panic!("setting up the bench state: {e}");
    }
}

fn submit(m: &mut Machine, now: i64, name: &str, team: usize) {
    let mut r = Resources::new();
    r.add(&ResourceName::cpu(), 1);
    let input = SubmitInput {
        client_token: Some(name.to_string()),
        spec: WorkloadSpec::single(name, &format!("team-{team}"), 1, r),
        run: Some(RunSpec {
            command: vec!["python".into(), "train.py".into(), "--epochs=3".into()],
            ..RunSpec::default()
        }),
    };
    // The leader's fast path: the submit and the plan that admits it, in one entry.
    let cmd = match m.plan_submit(&input, now) {
        Some((id, plan)) => Command::SubmitPlanned {
            input,
            id: id.0,
            plan,
        },
        None => Command::Submit(input),
    };
    apply(m, now, cmd);
}

/// `finished` workloads submitted, admitted and cancelled, then `running` admitted and left
/// running.
fn state(finished: usize, running: usize) -> Machine {
    let mut m = Machine::new();
    let caps = Catalog::builtin()
        .get(INSTANCE)
        .expect("a catalog instance type")
        .resources();
    for t in 0..TEAMS {
        let config = ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType={INSTANCE},Count={}}}],ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=100}},PreemptTeamTasks=LowerPriority",
            NODES / TEAMS
        ))
        .expect("a valid quota");
        apply(
            &mut m,
            0,
            Command::CreateComputeQuota(ComputeQuotaInput {
                name: format!("quota-{t}"),
                description: None,
                team: format!("team-{t}"),
                fair_share_weight: 10,
                config,
                activation: ActivationState::Enabled,
            }),
        );
    }
    for n in 0..NODES {
        apply(
            &mut m,
            0,
            Command::RegisterNode {
                name: format!("node-{n:05}"),
                instance_type: INSTANCE.into(),
                capacity: caps.clone(),
            },
        );
    }
    let mut now = 1;
    for i in 0..finished {
        let name = format!("done-{i}");
        submit(&mut m, now, &name, i % TEAMS);
        apply(&mut m, now, Command::Cancel { name, team: None });
        now += 1;
    }
    for i in 0..running {
        submit(&mut m, now, &format!("run-{i}"), i % TEAMS);
        now += 1;
    }
    m
}

fn bench(c: &mut Criterion) {
    let m = state(5_000, 5_000);
    let bytes = allot_net::wire::encode_snapshot(&m).expect("encode");
    println!("snapshot of the bench state: {} bytes", bytes.len());
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(20);
    g.bench_function("clone-machine", |b| b.iter(|| black_box(m.clone())));
    g.bench_function("encode", |b| {
        b.iter(|| black_box(allot_net::wire::encode_snapshot(&m).expect("encode")))
    });
    g.bench_function("decode", |b| {
        b.iter(|| {
            let d: Machine = allot_net::wire::decode_snapshot(&bytes).expect("decode");
            black_box(d)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

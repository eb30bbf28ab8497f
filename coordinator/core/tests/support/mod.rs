//! Spec builders and a hand-driven state shared by the core's rule and explain tests.
// Each test crate uses its own part of this module.
#![allow(dead_code)]

use allot_common::quota::ResourceQuota;
use allot_common::{
    ClusterPolicy, FlavorQuota, PodSet, PriorityRef, ResourceName, Resources, TeamSpec,
    WorkloadSpec,
};
use allot_core::state::{Event, State, WlState};
use allot_core::{schedule, verify};

/// The flavor most tests use.
pub const F: &str = "ml.g5.8xlarge";

pub fn rq(nominal: i64, bl: Option<i64>, ll: Option<i64>) -> ResourceQuota {
    ResourceQuota {
        nominal,
        borrowing_limit: bl,
        lending_limit: ll,
    }
}

pub fn team(name: &str, flavors: &[(&str, &[(&str, ResourceQuota)])]) -> TeamSpec {
    let quotas = flavors
        .iter()
        .map(|(f, res)| FlavorQuota {
            flavor: f.to_string(),
            resources: {
                let mut v: Vec<_> = res
                    .iter()
                    .map(|(r, q)| (ResourceName::parse(r).unwrap(), *q))
                    .collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            },
        })
        .collect();
    let mut t = TeamSpec::new(name, quotas);
    t.fair_share_weight = 1;
    t
}

pub fn gpu_team(name: &str, nominal: i64, bl: Option<i64>) -> TeamSpec {
    team(name, &[(F, &[("gpu", rq(nominal, bl, None))])])
}

pub fn wl(
    name: &str,
    team: &str,
    priority: i32,
    count: u32,
    reqs: &[(&str, &str)],
) -> WorkloadSpec {
    let mut r = Resources::new();
    for (k, v) in reqs {
        let n = ResourceName::parse(k).unwrap();
        let q = n.parse_quantity(v).unwrap();
        r.set(n, q);
    }
    WorkloadSpec {
        name: name.into(),
        team: team.into(),
        priority: PriorityRef::Value(priority),
        instance_type: None,
        pod_sets: vec![PodSet {
            name: "main".into(),
            count,
            min_count: None,
            requests: r,
        }],
        labels: Default::default(),
        array: None,
    }
}

/// The default cluster policy without the stability rules: Kueue's rules as the tests state
/// them (the stability rules have tests of their own).
pub fn kueue() -> ClusterPolicy {
    ClusterPolicy {
        stability: allot_common::Stability::OFF,
        ..Default::default()
    }
}

/// A state driven by hand: submit at a chosen time, then schedule until nothing changes. Every
/// event is kept, for the tests that look at what happened in which order.
pub struct Sim {
    pub st: State,
    pub now: i64,
    pub events: Vec<Event>,
}

impl Sim {
    pub fn new(policy: ClusterPolicy, teams: Vec<TeamSpec>) -> Self {
        let mut st = State::new(policy);
        for t in teams {
            st.set_team(t).unwrap();
        }
        Sim {
            st,
            now: 0,
            events: Vec::new(),
        }
    }
    pub fn classical(teams: Vec<TeamSpec>) -> Self {
        Sim::new(
            ClusterPolicy {
                fair_share: false,
                ..kueue()
            },
            teams,
        )
    }
    pub fn fair_share(teams: Vec<TeamSpec>) -> Self {
        Sim::new(
            ClusterPolicy {
                fair_share: true,
                ..kueue()
            },
            teams,
        )
    }
    /// `n` nodes of `flavor` named `prefix0`, `prefix1`, ..., with `gpus` GPUs each.
    pub fn nodes(&mut self, flavor: &str, prefix: &str, n: usize, gpus: i64) {
        for i in 0..n {
            let mut r = Resources::new();
            r.set(ResourceName::gpu(), gpus);
            r.set(ResourceName::cpu(), 32_000);
            r.set(ResourceName::memory(), 128 << 30);
            self.st
                .add_node(&format!("{prefix}{i}"), flavor, &r)
                .unwrap();
        }
    }
    pub fn at(&mut self, t: i64) -> &mut Self {
        self.now = t;
        self
    }
    pub fn submit(&mut self, w: WorkloadSpec) -> &mut Self {
        let (_, ev) = self.st.submit(w, self.now).unwrap();
        self.events.extend(ev);
        self
    }
    /// Cycles until nothing changes, each plan verified, evictions completed at once.
    pub fn settle(&mut self) -> &mut Self {
        for _ in 0..100 {
            let plan = schedule(&self.st, self.now);
            assert!(verify(&self.st, &plan).iter().all(|r| r.is_ok()));
            let ev = self.st.apply_plan(&plan, self.now);
            self.st.check_invariants().unwrap();
            let victims: Vec<_> = ev.iter().filter_map(Event::preempted).collect();
            self.events.extend(ev);
            for v in victims {
                let ev = self.st.complete_eviction(v, self.now);
                self.events.extend(ev);
            }
            self.st.check_invariants().unwrap();
            if !plan.has_decisions() {
                return self;
            }
        }
        panic!("did not settle");
    }
    pub fn state(&self, name: &str) -> WlState {
        self.st.workload(self.st.find_workload(name).unwrap()).state
    }
}

/// A replicated state machine with one team, `team-a`, whose compute quota `qa` has the AWS CLI
/// shorthand configuration `shorthand`.
pub fn machine_with_team_a(shorthand: &str) -> allot_core::machine::Machine {
    let mut m = allot_core::machine::Machine::new();
    let (r, _) = m.apply(&allot_core::machine::Entry {
        now: 0,
        cmd: create_quota("qa", "team-a", shorthand),
    });
    r.expect("the quota is created");
    m
}

/// The command that creates compute quota `name` for `team` (weight 1, enabled) from the AWS
/// CLI shorthand of its configuration (read here, as the coordinator reads a request, before the
/// command exists: the core itself never reads it).
#[allow(clippy::disallowed_methods)]
pub fn create_quota(name: &str, team: &str, shorthand: &str) -> allot_core::machine::Command {
    use allot_common::api::{ActivationState, ComputeQuotaInput};
    let config = allot_common::hyperpod::ComputeQuotaConfig::parse_shorthand(shorthand)
        .unwrap_or_else(|e| panic!("quota config {shorthand:?}: {e}"));
    allot_core::machine::Command::CreateComputeQuota(ComputeQuotaInput {
        name: name.into(),
        description: None,
        team: team.into(),
        fair_share_weight: 1,
        config,
        activation: ActivationState::Enabled,
    })
}

/// Applies `cmd` at `now` to `m`, checks the invariants, and returns the command's refusal as
/// its message.
pub fn apply_cmd(
    m: &mut allot_core::machine::Machine,
    now: i64,
    cmd: allot_core::machine::Command,
) -> Result<(), String> {
    let (r, _) = m.apply(&allot_core::machine::Entry { now, cmd });
    m.state.check_invariants().expect("invariants hold");
    r.map(|_| ()).map_err(|e| e.message)
}

/// Submits team-a's workload `name` of `pods` pods asking `amount` of `resource` each.
pub fn submit_a(
    m: &mut allot_core::machine::Machine,
    name: &str,
    resource: &str,
    amount: i64,
    pods: u32,
    now: i64,
) {
    let mut r = Resources::new();
    r.add(
        &ResourceName::parse(resource).expect("a resource name"),
        amount,
    );
    let input = allot_common::api::SubmitInput {
        spec: WorkloadSpec::single(name, "team-a", pods, r),
        run: None,
        client_token: None,
    };
    apply_cmd(m, now, allot_core::machine::Command::Submit(input)).expect("submitted");
}

/// One scheduling cycle at `now`, its plan applied.
pub fn cycle_at(m: &mut allot_core::machine::Machine, now: i64) {
    let plan = schedule(&m.state, now);
    apply_cmd(m, now, allot_core::machine::Command::Plan(plan)).expect("plan applies");
}

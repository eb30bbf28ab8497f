//! Spec builders shared by the core's rule and explain tests.

use allot_common::quota::ResourceQuota;
use allot_common::{
    FlavorQuota, PodSet, PriorityRef, ResourceName, Resources, TeamSpec, WorkloadSpec,
};

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
    }
}

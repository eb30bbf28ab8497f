//! GPU partitions (MIG) in compute quotas: `AcceleratorPartition={Type=...,Count=...}` read
//! from the AWS CLI's shorthand and JSON, checked against the instance type's profiles, and
//! mapped to a quota per profile with vCPU and memory by HyperPod's ratio rule.

use allot_common::hyperpod::{AcceleratorPartitionConfig, ComputeQuotaConfig};
use allot_common::{Catalog, FlavorQuota, ResourceName};

fn quotas(s: &str) -> Vec<FlavorQuota> {
    ComputeQuotaConfig::parse_shorthand(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .to_quotas(Catalog::builtin())
        .unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn nominal(q: &FlavorQuota, r: &str) -> Option<i64> {
    q.get(&ResourceName::parse(r).unwrap()).map(|q| q.nominal)
}

#[test]
fn a_partition_row_is_a_quota_of_its_profile_with_ratio_cpu_and_memory() {
    let q = quotas(
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=3}}]",
    );
    assert_eq!(q.len(), 1);
    assert_eq!(nominal(&q[0], "mig-1g.10gb"), Some(3));
    // 3 × 1 slice of 8 GPUs × 7 slices: 3/56 of 192 vCPU and of 2,048 GiB (floored).
    assert_eq!(nominal(&q[0], "cpu"), Some(192_000 * 3 / 56));
    assert_eq!(nominal(&q[0], "memory"), Some((2048i64 << 30) * 3 / 56));
    assert_eq!(nominal(&q[0], "gpu"), Some(0));
    // The borrowing limit follows the default BorrowLimit (50 %), as for any resource.
    let mig = q[0]
        .get(&ResourceName::parse("mig-1g.10gb").unwrap())
        .unwrap();
    assert_eq!(mig.borrowing_limit, Some(1));
}

#[test]
fn partitions_add_to_whole_gpus_and_explicit_vcpu_wins() {
    let q = quotas(
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=4,AcceleratorPartition={Type=mig-3g.40gb,Count=2}}]",
    );
    assert_eq!(nominal(&q[0], "gpu"), Some(4));
    assert_eq!(nominal(&q[0], "mig-3g.40gb"), Some(2));
    // 4/8 for the GPUs, 6/56 for the partitions.
    assert_eq!(
        nominal(&q[0], "cpu"),
        Some(192_000 * 4 / 8 + 192_000 * 6 / 56)
    );
    let q = quotas(
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,VCpu=10,AcceleratorPartition={Type=mig-1g.10gb,Count=7}}]",
    );
    assert_eq!(nominal(&q[0], "cpu"), Some(10_000));
    assert_eq!(nominal(&q[0], "mig-1g.10gb"), Some(7));
}

#[test]
fn shorthand_and_json_read_alike_and_render_back() {
    let s = "ComputeQuotaResources=[{InstanceType=ml.p4d.24xlarge,AcceleratorPartition={Type=mig-2g.10gb,Count=5}}],ResourceSharingConfig={Strategy=LendAndBorrow},PreemptTeamTasks=LowerPriority";
    let a = ComputeQuotaConfig::parse_shorthand(s).unwrap();
    assert_eq!(
        a.resources[0].accelerator_partition,
        Some(AcceleratorPartitionConfig {
            profile: "mig-2g.10gb".into(),
            count: 5
        })
    );
    let json = a.to_aws_json();
    assert_eq!(
        json["ComputeQuotaResources"][0]["AcceleratorPartition"],
        serde_json::json!({"Type": "mig-2g.10gb", "Count": 5})
    );
    let b = ComputeQuotaConfig::parse_shorthand(&json.to_string()).unwrap();
    assert_eq!(a, b);
    let c = ComputeQuotaConfig::parse_shorthand(&a.to_shorthand()).unwrap();
    assert_eq!(a, c);
}

#[test]
fn a_profile_the_instance_type_lacks_is_refused_with_the_ones_it_has() {
    let c = ComputeQuotaConfig::parse_shorthand(
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.5gb,Count=1}}]",
    )
    .unwrap();
    let e = c.to_quotas(Catalog::builtin()).unwrap_err().to_string();
    assert!(
        e.contains("ComputeQuotaResources row 1 (ml.p5.48xlarge)"),
        "{e}"
    );
    assert!(
        e.contains("mig-1g.10gb, mig-1g.20gb, mig-2g.20gb, mig-3g.40gb, mig-4g.40gb, mig-7g.80gb"),
        "{e}"
    );
    let c = ComputeQuotaConfig::parse_shorthand(
        "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=1}}]",
    )
    .unwrap();
    let e = c.to_quotas(Catalog::builtin()).unwrap_err().to_string();
    assert!(e.contains("ml.g5.8xlarge has no GPU partitions"), "{e}");
}

#[test]
fn malformed_partitions_are_refused_where_they_are() {
    for (s, want) in [
        (
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb}}]",
            "needs both Type and Count",
        ),
        (
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=big,Count=1}}]",
            "Type \"big\" is not a MIG profile",
        ),
        (
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=-1}}]",
            "out of range 0..=10000000",
        ),
        (
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=1,Size=2}}]",
            "unknown key \"Size\"",
        ),
        (
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition=3}]",
            "must be a structure such as {Type=mig-1g.10gb,Count=3}",
        ),
    ] {
        let e = ComputeQuotaConfig::parse_shorthand(s).unwrap_err();
        assert!(e.message.contains(want), "{s}: {e}");
    }
}

#[test]
fn absolute_borrow_limits_let_a_team_borrow_partitions_it_has_none_of() {
    let q = quotas(
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=1}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,AcceleratorPartition={Type=mig-1g.10gb,Count=14}}]}",
    );
    let mig = q[0]
        .get(&ResourceName::parse("mig-1g.10gb").unwrap())
        .unwrap();
    assert_eq!((mig.nominal, mig.borrowing_limit), (0, Some(14)));
    let names: Vec<&str> = q[0].resources.iter().map(|(n, _)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[test]
fn rows_of_each_layout_encode_as_that_layout_reads_them() {
    use allot_common::hyperpod::ComputeQuotaResource;
    let cfg = bincode::config::standard();
    let plain = ComputeQuotaResource {
        instance_type: "ml.p5.48xlarge".into(),
        count: Some(1),
        ..ComputeQuotaResource::default()
    };
    let with = ComputeQuotaResource {
        accelerator_partition: Some(AcceleratorPartitionConfig {
            profile: "mig-1g.10gb".into(),
            count: 2,
        }),
        ..plain.clone()
    };
    let old =
        allot_common::layout::scoped(0, || bincode::serde::encode_to_vec(&plain, cfg).unwrap());
    let new = bincode::serde::encode_to_vec(&plain, cfg).unwrap();
    assert_eq!(new.len(), old.len() + 1, "one more field: an absent option");
    let back: ComputeQuotaResource = allot_common::layout::scoped(0, || {
        bincode::serde::decode_from_slice(&old, cfg).unwrap().0
    });
    assert_eq!(back, plain);
    let (back, _): (ComputeQuotaResource, usize) =
        bincode::serde::decode_from_slice(&bincode::serde::encode_to_vec(&with, cfg).unwrap(), cfg)
            .unwrap();
    assert_eq!(back, with);
    let refused =
        allot_common::layout::scoped(0, || bincode::serde::encode_to_vec(&with, cfg)).unwrap_err();
    assert!(
        refused.to_string().contains("AcceleratorPartition"),
        "{refused}"
    );
}

//! The HyperPod input forms: the AWS CLI shorthand strings taken by
//! `aws sagemaker create-compute-quota --compute-quota-config` and
//! `aws sagemaker create-cluster-scheduler-config --scheduler-config`, their structured
//! YAML/JSON equivalents, and the mapping to per-flavor quotas (scheduling.md §2).
//!
//! Both input forms produce the same [`ComputeQuotaConfig`]; [`ComputeQuotaConfig::validate`]
//! and [`ComputeQuotaConfig::to_quotas`] apply to it whichever form it came from. The shorthand
//! parser additionally points at the offending byte of the input ([`ShorthandError`]).
//!
//! Decisions beyond the contract (documented here so they are easy to find):
//! - **Ratio source.** A row that does not give `Count` scales the instance by one ratio:
//!   `Accelerators / accelerators per instance` when `Accelerators` is given, else
//!   `VCpu / vCPU per instance`, else `MemoryInGiB / memory per instance`. vCPU and memory that
//!   are not given explicitly follow that ratio; explicit values override it. Accelerators that
//!   are not given are 0 (also on a `VCpu`/`MemoryInGiB` row of a GPU instance).
//! - **EFA** follows the same ratio, rounded down (2 of 8 GPUs of ml.p5.48xlarge = 8 of 32 EFA
//!   interfaces; `Count=n` = n times the instance's).
//! - **Rounding.** Every derived amount is rounded down to the base unit (millicores, bytes,
//!   whole devices) with exact integer arithmetic. Explicit `VCpu`/`MemoryInGiB` are taken as
//!   the exact decimal the number is written as, then rounded down the same way.
//! - **Count with explicit amounts**: `Count` sets every resource of n instances; an explicit
//!   `Accelerators`, `VCpu` or `MemoryInGiB` beside it replaces that one resource's amount.
//! - **Resources listed** per flavor: `cpu` and `memory` always, `gpu`/`neuron`/`efa` when the
//!   instance type has them (possibly with nominal 0), sorted by resource name.
//! - **AbsoluteBorrowLimits** rows set the borrowing limit only for what they name: `Count=n`
//!   names every resource of n instances, `Accelerators` the accelerator resource, `VCpu` cpu,
//!   `MemoryInGiB` memory; no ratio is applied. For an instance type without a
//!   `ComputeQuotaResources` row the team has nominal 0 and may borrow up to the limit. With
//!   `Lend` or `DontLend` they (like `BorrowLimit`) are accepted and limit nothing: those teams
//!   do not borrow.
//! - **The API model's constraints**, exactly: `Count`, `Accelerators`, `VCpu`,
//!   `MemoryInGiB` in 0..=10,000,000; `BorrowLimit` 0..=10000 (the documentation's prose says
//!   1 to 500; the model is what the API enforces); at most 15 rows per list;
//!   `ResourceSharingConfig` needs `Strategy`; `ComputeQuotaResources` may be absent. Derived
//!   amounts must also stay within `resource::MAX_QUANTITY` base units (`i64::MAX / 4`).
//! - **Rules allot keeps beyond the model**, each citing where AWS documents it: a row needs
//!   an amount (AWS's task-governance Terraform module), an instance type once per list (the
//!   API allocates by instance type), NaN is not an amount (allot's own).
//! - **Reading** follows the AWS CLI: a value that starts with `{` is JSON
//!   ([`parse_structure`]); shorthand as awscli's `ShorthandParser` reads it
//!   ([`parse_shorthand_tree`]); integers as Python's `int()` (`+2`, `1_000`), floats as
//!   `float()` (`1e1`, `.5`). `common/tests/awscli_conformance.rs` compares with the AWS CLI.

mod mapping;
mod model;
mod reader;
mod shorthand;

pub use model::*;
pub use reader::*;
pub use shorthand::*;

#[cfg(test)]
mod tests {

    use crate::catalog::Catalog;
    use crate::policy::{ClusterPolicy, PriorityClass};
    use crate::quota::{BorrowWithinCohortPolicy, FlavorQuota, ReclaimWithinCohort, WithinTeam};
    use crate::resource::ResourceName;

    use super::reader::*;
    use super::shorthand::*;
    #[test]
    fn digits_of_any_script_are_numbers_as_python_reads_them() {
        assert_eq!(super::python_int("٣"), Some(3));
        assert_eq!(super::python_int("１_０"), Some(10));
        assert_eq!(super::python_int("\u{2003}-٣\u{85}"), Some(-3));
        assert_eq!(super::python_int("\u{1c}7"), None);
        assert_eq!(super::python_int("𝟗𝟘"), Some(90));
        assert_eq!(super::python_float("१.५"), Some(1.5));
        assert_eq!(super::python_float("۱e۲"), Some(100.0));
        // Not decimal digits: numerals, superscripts, letters.
        for s in ["Ⅻ", "²", "٣a", "٣_"] {
            assert_eq!(super::python_int(s), None, "{s:?}");
        }
        let cfg = super::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=٣}]",
        )
        .unwrap();
        let plain = super::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=3}]",
        )
        .unwrap();
        assert_eq!(cfg, plain);
    }

    #[test]
    fn key_at_equals_reads_the_value_from_a_file() {
        let d = std::env::temp_dir().join(format!("allot-paramfile-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("type"), "ml.g5.8xlarge").unwrap();
        std::fs::write(d.join("count"), "2\n").unwrap();
        super::read_param_files_with(|s| {
            let p = s
                .strip_prefix("file://")
                .or_else(|| s.strip_prefix("fileb://"))
                .unwrap_or(s);
            std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))
        });
        let (t, c) = (
            d.join("type").display().to_string(),
            d.join("count").display().to_string(),
        );
        let cfg = super::ComputeQuotaConfig::parse_shorthand(&format!(
            "ComputeQuotaResources=[{{InstanceType@=file://{t},Count@=file://{c}}}],\
             ResourceSharingConfig={{Strategy=Lend}}"
        ))
        .unwrap();
        let plain = super::ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],\
             ResourceSharingConfig={Strategy=Lend}",
        )
        .unwrap();
        assert_eq!(cfg, plain);
        // `@=` with a value that names no file keeps the value; a missing file is an error at
        // its position; plain `=` never reads.
        let tree = super::parse_shorthand_tree("A@=x,B=file://nowhere").unwrap();
        assert!(matches!(&tree[0].value.value, super::ShorthandValue::Scalar(v) if v == "x"));
        assert!(
            matches!(&tree[1].value.value, super::ShorthandValue::Scalar(v) if v == "file://nowhere")
        );
        let e = super::parse_shorthand_tree("A@=file:///nonexistent/x").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    use super::*;
    use proptest::prelude::*;

    const GIB: i64 = 1 << 30;
    const G5_SCENARIO: &str = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},PreemptTeamTasks=LowerPriority";
    const P5_DONT_LEND: &str = "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2}],ResourceSharingConfig={Strategy=DontLend}";
    const CLASSES: &str =
        "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=70}],FairShare=Enabled";

    fn quotas(s: &str) -> Vec<FlavorQuota> {
        ComputeQuotaConfig::parse_shorthand(s)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_quotas(Catalog::builtin())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// (resource, nominal, borrowing_limit, lending_limit) of one flavor, in order.
    fn rows(fq: &FlavorQuota) -> Vec<(String, i64, Option<i64>, Option<i64>)> {
        fq.resources
            .iter()
            .map(|(r, q)| (r.to_string(), q.nominal, q.borrowing_limit, q.lending_limit))
            .collect()
    }

    fn nominal(fq: &FlavorQuota, r: &str) -> i64 {
        let name = ResourceName::parse(r).unwrap();
        fq.get(&name)
            .unwrap_or_else(|| panic!("{r} missing in {fq:?}"))
            .nominal
    }

    fn parse_err(s: &str) -> ShorthandError {
        match ComputeQuotaConfig::parse_shorthand(s) {
            Ok(c) => panic!("expected an error for {s:?}, got {c:?}"),
            Err(e) => e,
        }
    }

    fn policy_err(s: &str) -> ShorthandError {
        match parse_scheduler_config(s) {
            Ok(p) => panic!("expected an error for {s:?}, got {p:?}"),
            Err(e) => e,
        }
    }

    fn map_err(s: &str) -> HyperPodError {
        let c = ComputeQuotaConfig::parse_shorthand(s).unwrap_or_else(|e| panic!("{e}"));
        match c.to_quotas(Catalog::builtin()) {
            Ok(q) => panic!("expected an error for {s:?}, got {q:?}"),
            Err(e) => e,
        }
    }

    /// The caret line of an error's Display, checked to sit under byte `pos` of a
    /// single-line ASCII input.
    fn assert_caret(e: &ShorthandError, pos: usize) {
        assert_eq!(e.pos, pos, "{e}");
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1], format!("  {}", e.input), "{text}");
        assert_eq!(lines[2], format!("  {}^", " ".repeat(pos)), "{text}");
        assert!(lines[0].contains(&format!("at byte {pos}")), "{text}");
    }

    // ---- the scenario strings ---------------------------------------------------------------

    #[test]
    fn g5_count_lend_and_borrow_scenario() {
        let c = ComputeQuotaConfig::parse_shorthand(G5_SCENARIO).unwrap();
        assert_eq!(
            c,
            ComputeQuotaConfig {
                resources: vec![ComputeQuotaResource {
                    instance_type: "ml.g5.8xlarge".into(),
                    count: Some(2),
                    ..Default::default()
                }],
                sharing: ResourceSharingConfig {
                    strategy: SharingStrategy::LendAndBorrow,
                    borrow_limit: Some(50),
                    absolute_borrow_limits: vec![],
                },
                preempt_team_tasks: PreemptTeamTasks::LowerPriority,
            }
        );
        let q = c.to_quotas(Catalog::builtin()).unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].flavor, "ml.g5.8xlarge");
        // 2 x (32 vCPU, 128 GiB, 1 GPU, 1 EFA); borrow 50 %.
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 64_000, Some(32_000), None),
                ("efa".into(), 2, Some(1), None),
                ("gpu".into(), 2, Some(1), None),
                ("memory".into(), 256 * GIB, Some(128 * GIB), None),
            ]
        );
        assert_eq!(c.to_shorthand(), G5_SCENARIO);
    }

    #[test]
    fn p5_two_of_eight_gpus_dont_lend_scenario() {
        let q = quotas(P5_DONT_LEND);
        // 2 of 8 GPUs: a quarter of 192 vCPU, 2048 GiB and 32 EFA.
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 48_000, Some(0), Some(0)),
                ("efa".into(), 8, Some(0), Some(0)),
                ("gpu".into(), 2, Some(0), Some(0)),
                ("memory".into(), 512 * GIB, Some(0), Some(0)),
            ]
        );
    }

    #[test]
    fn every_scenario_string_parses_and_maps() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/scenarios");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut seen = 0;
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for line in text.lines() {
                for (key, is_quota) in
                    [("compute_quota: \"", true), ("scheduler_config: \"", false)]
                {
                    let Some(start) = line.find(key) else {
                        continue;
                    };
                    let rest = &line[start + key.len()..];
                    let Some(end) = rest.find('"') else { continue };
                    let s = &rest[..end];
                    seen += 1;
                    if is_quota {
                        quotas(s);
                    } else {
                        parse_scheduler_config(s).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn scheduler_config_scenario() {
        let p = parse_scheduler_config(CLASSES).unwrap();
        assert_eq!(
            p.priority_classes,
            vec![
                PriorityClass {
                    name: "inference".into(),
                    weight: 90
                },
                PriorityClass {
                    name: "training".into(),
                    weight: 70
                },
            ]
        );
        assert!(p.fair_share);
        assert!(!p.idle_resource_sharing);
        assert_eq!(
            p.fair_sharing_strategies,
            ClusterPolicy::default().fair_sharing_strategies
        );
        assert_eq!(scheduler_config_to_shorthand(&p), CLASSES);
    }

    // ---- the ratio rules --------------------------------------------------------------------

    #[test]
    fn vcpu_only_scales_memory_and_efa_no_accelerators() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,VCpu=48}]");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 48_000, Some(24_000), None),
                ("efa".into(), 8, Some(4), None),
                ("gpu".into(), 0, Some(0), None),
                ("memory".into(), 512 * GIB, Some(256 * GIB), None),
            ]
        );
    }

    #[test]
    fn memory_only_scales_vcpu() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,MemoryInGiB=256}]");
        assert_eq!(nominal(&q[0], "cpu"), 24_000);
        assert_eq!(nominal(&q[0], "memory"), 256 * GIB);
        assert_eq!(nominal(&q[0], "gpu"), 0);
        assert_eq!(nominal(&q[0], "efa"), 4);
    }

    #[test]
    fn ratios_round_down_to_base_units() {
        // ml.trn2.3xlarge: 12 vCPU, 128 GiB, 1 Neuron device, 1 EFA.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.trn2.3xlarge,VCpu=1}]");
        assert_eq!(nominal(&q[0], "cpu"), 1000);
        assert_eq!(nominal(&q[0], "memory"), 128 * GIB / 12);
        assert_eq!(nominal(&q[0], "neuron"), 0);
        assert_eq!(nominal(&q[0], "efa"), 0);
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.trn2.3xlarge,MemoryInGiB=1}]");
        assert_eq!(nominal(&q[0], "cpu"), 12_000 / 128); // 93.75 -> 93 millicores
                                                         // Fractional explicit values: 0.5 vCPU = 500m; memory by the exact ratio 0.5/32.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=0.5}]");
        assert_eq!(nominal(&q[0], "cpu"), 500);
        assert_eq!(nominal(&q[0], "memory"), 2 * GIB);
        let q = quotas(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=0.0005,MemoryInGiB=1.5}]",
        );
        assert_eq!(nominal(&q[0], "cpu"), 0);
        assert_eq!(nominal(&q[0], "memory"), 3 * GIB / 2);
        // 1.005 is not exact in binary; it is taken as written.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=1.005}]");
        assert_eq!(nominal(&q[0], "cpu"), 1005);
    }

    #[test]
    fn explicit_values_override_the_ratio() {
        let q =
            quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2,VCpu=10}]");
        assert_eq!(nominal(&q[0], "gpu"), 2);
        assert_eq!(nominal(&q[0], "cpu"), 10_000);
        assert_eq!(nominal(&q[0], "memory"), 512 * GIB);
        assert_eq!(nominal(&q[0], "efa"), 8);
        let q = quotas(
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=4,MemoryInGiB=100}]",
        );
        assert_eq!(nominal(&q[0], "cpu"), 96_000);
        assert_eq!(nominal(&q[0], "memory"), 100 * GIB);
        let q =
            quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,VCpu=8,MemoryInGiB=64}]");
        assert_eq!(nominal(&q[0], "cpu"), 8_000);
        assert_eq!(nominal(&q[0], "memory"), 64 * GIB);
        assert_eq!(nominal(&q[0], "gpu"), 0);
    }

    #[test]
    fn accelerators_above_one_instance_and_neuron() {
        // ml.g5.8xlarge has 1 GPU: 2 accelerators = 2 instances' worth.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Accelerators=2}]");
        assert_eq!(nominal(&q[0], "cpu"), 64_000);
        assert_eq!(nominal(&q[0], "memory"), 256 * GIB);
        // Trainium counts Neuron devices: 4 of 16.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.trn1.32xlarge,Accelerators=4}]");
        assert_eq!(
            rows(&q[0])
                .iter()
                .map(|r| (r.0.as_str(), r.1))
                .collect::<Vec<_>>(),
            vec![
                ("cpu", 32_000),
                ("efa", 2),
                ("memory", 128 * GIB),
                ("neuron", 4)
            ]
        );
    }

    #[test]
    fn cpu_instance_lists_only_cpu_and_memory() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.c5.2xlarge,Count=3},{InstanceType=ml.g5.8xlarge,Count=1}]");
        assert_eq!(q[0].flavor, "ml.c5.2xlarge");
        assert_eq!(q[1].flavor, "ml.g5.8xlarge");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 24_000, Some(12_000), None),
                ("memory".into(), 48 * GIB, Some(24 * GIB), None),
            ]
        );
    }

    // ---- sharing ------------------------------------------------------------------------------

    #[test]
    fn sharing_strategies_set_limits() {
        let base = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]";
        let lend = quotas(&format!("{base},ResourceSharingConfig={{Strategy=Lend}}"));
        assert!(lend[0]
            .resources
            .iter()
            .all(|(_, q)| q.borrowing_limit == Some(0) && q.lending_limit.is_none()));
        let dont = quotas(&format!(
            "{base},ResourceSharingConfig={{Strategy=DontLend}}"
        ));
        assert!(dont[0]
            .resources
            .iter()
            .all(|(_, q)| q.borrowing_limit == Some(0) && q.lending_limit == Some(0)));
        // Default: LendAndBorrow with 50 %; efa 1 * 50 % rounds down to 0.
        let default = quotas(base);
        assert_eq!(
            rows(&default[0]),
            vec![
                ("cpu".into(), 32_000, Some(16_000), None),
                ("efa".into(), 1, Some(0), None),
                ("gpu".into(), 1, Some(0), None),
                ("memory".into(), 128 * GIB, Some(64 * GIB), None),
            ]
        );
        let wide = quotas(&format!(
            "{base},ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=500}}"
        ));
        assert_eq!(
            wide[0].get(&ResourceName::gpu()).unwrap().borrowing_limit,
            Some(5)
        );
        let one = quotas(&format!(
            "{base},ResourceSharingConfig={{Strategy=LendAndBorrow,BorrowLimit=1}}"
        ));
        // Strategy is required when ResourceSharingConfig is given (the API model).
        let e = parse_err(&format!("{base},ResourceSharingConfig={{BorrowLimit=1}}"));
        assert!(
            e.message
                .contains("needs Strategy (required by the API model)"),
            "{e}"
        );
        assert_eq!(
            one[0].get(&ResourceName::cpu()).unwrap().borrowing_limit,
            Some(320)
        );
    }

    #[test]
    fn borrow_limit_range_is_enforced() {
        let base = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=";
        // The API model's range, 0..=10000 (its documentation still says 1 to 500).
        for bad in ["10001", "-5", "99999999999"] {
            let s = format!("{base}{bad}}}");
            let e = parse_err(&s);
            assert!(
                e.message
                    .contains(&format!("BorrowLimit {bad} is out of range 0..=10000")),
                "{e}"
            );
            assert_caret(&e, base.len());
        }
        for good in ["0", "501", "10000", "+2"] {
            ComputeQuotaConfig::parse_shorthand(&format!("{base}{good}}}")).unwrap();
        }
        let e = parse_err(&format!("{base}half}}"));
        assert!(
            e.message
                .contains("BorrowLimit \"half\" is not a whole number"),
            "{e}"
        );
    }

    #[test]
    fn borrow_limit_needs_lend_and_borrow() {
        // Accepted, as the API does: a team that does not borrow borrows nothing whatever its
        // limit says.
        for strategy in ["DontLend", "Lend"] {
            let q = quotas(&format!("ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count=1}}],ResourceSharingConfig={{Strategy={strategy},BorrowLimit=50,AbsoluteBorrowLimits=[{{InstanceType=ml.g5.8xlarge,Count=1}}]}}"));
            assert!(
                q[0].resources
                    .iter()
                    .all(|(_, r)| r.borrowing_limit == Some(0)),
                "{q:?}"
            );
        }
    }

    #[test]
    fn absolute_borrow_limits_replace_the_percentage() {
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2},{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,Accelerators=1,VCpu=10},{InstanceType=ml.g5.8xlarge,MemoryInGiB=1.5}]}");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 48_000, Some(10_000), None),
                ("efa".into(), 8, Some(4), None),
                ("gpu".into(), 2, Some(1), None),
                ("memory".into(), 512 * GIB, Some(256 * GIB), None),
            ]
        );
        assert_eq!(
            rows(&q[1]),
            vec![
                ("cpu".into(), 64_000, Some(32_000), None),
                ("efa".into(), 2, Some(1), None),
                ("gpu".into(), 2, Some(1), None),
                ("memory".into(), 256 * GIB, Some(3 * GIB / 2), None),
            ]
        );
        // Count names every resource of n instances.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=4}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.g5.8xlarge,Count=1}]}");
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 128_000, Some(32_000), None),
                ("efa".into(), 4, Some(1), None),
                ("gpu".into(), 4, Some(1), None),
                ("memory".into(), 512 * GIB, Some(128 * GIB), None),
            ]
        );
    }

    #[test]
    fn absolute_borrow_limit_errors() {
        // A type the team has no quota of: it may borrow it, up to the limit, and nothing else
        // of it.
        let q = quotas("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,Accelerators=1}]}");
        assert_eq!(q[1].flavor, "ml.p5.48xlarge");
        assert!(q[1].resources.iter().all(|(_, r)| r.nominal == 0), "{q:?}");
        assert_eq!(
            q[1].get(&ResourceName::gpu()).unwrap().borrowing_limit,
            Some(1)
        );
        assert_eq!(
            q[1].get(&ResourceName::cpu()).unwrap().borrowing_limit,
            Some(0)
        );
        let rows: Vec<String> = (0..16)
            .map(|_| "{InstanceType=ml.g5.8xlarge,Count=1}".to_string())
            .collect();
        let e = parse_err(&format!(
            "ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count=1}}],ResourceSharingConfig={{Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{}]}}",
            rows.join(",")
        ));
        assert!(e.message.contains("at most 15"), "{e}");
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.c5.2xlarge,Count=1}],ResourceSharingConfig={Strategy=LendAndBorrow,AbsoluteBorrowLimits=[{InstanceType=ml.c5.2xlarge,Accelerators=1}]}");
        assert!(
            matches!(
                e,
                HyperPodError::NoAccelerators {
                    list: RowList::AbsoluteBorrowLimits,
                    row: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn preemption_policy_follows_preempt_team_tasks() {
        let c = ComputeQuotaConfig::parse_shorthand(G5_SCENARIO).unwrap();
        let p = c.preemption_policy();
        assert_eq!(p.within_team, WithinTeam::LowerPriority);
        assert_eq!(p.reclaim_within_cohort, ReclaimWithinCohort::Any);
        assert_eq!(
            p.borrow_within_cohort.policy,
            BorrowWithinCohortPolicy::LowerPriority
        );
        assert_eq!(p.borrow_within_cohort.max_priority_threshold, None);
        let never = ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],PreemptTeamTasks=Never",
        )
        .unwrap();
        assert_eq!(never.preemption_policy().within_team, WithinTeam::Never);
        assert_eq!(
            never.preemption_policy().reclaim_within_cohort,
            ReclaimWithinCohort::Any
        );
        // Default: LowerPriority.
        let d = ComputeQuotaConfig::parse_shorthand(P5_DONT_LEND).unwrap();
        assert_eq!(d.preemption_policy().within_team, WithinTeam::LowerPriority);
    }

    // ---- row and mapping errors ---------------------------------------------------------------

    #[test]
    fn row_errors_name_the_field() {
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge}]";
        let e = parse_err(s);
        assert!(
            e.message.contains(
                "at least one of Count, Accelerators, VCpu, MemoryInGiB or AcceleratorPartition"
            ),
            "{e}"
        );
        assert_caret(&e, s.find('{').unwrap());

        // Count with an explicit amount: the explicit one wins, the rest follow Count.
        let q = quotas(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2,VCpu=4,Accelerators=1}]",
        );
        assert_eq!(
            rows(&q[0]),
            vec![
                ("cpu".into(), 4_000, Some(2_000), None),
                ("efa".into(), 2, Some(1), None),
                ("gpu".into(), 1, Some(0), None),
                ("memory".into(), 256 * GIB, Some(128 * GIB), None),
            ]
        );

        let s = "ComputeQuotaResources=[{Count=1}]";
        let e = parse_err(s);
        assert!(e.message.contains("has no InstanceType"), "{e}");
        assert_caret(&e, s.find('{').unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1},{InstanceType=ml.g5.8xlarge,Count=2}]";
        let e = parse_err(s);
        assert!(
            e.message.contains("ml.g5.8xlarge twice (rows 1 and 2)"),
            "{e}"
        );
        assert_caret(&e, s.rfind("ml.g5").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=-1}]";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("VCpu -1 is out of range 0..=10000000 (the API model's VCpuAmount)"),
            "{e}"
        );
        assert_caret(&e, s.find("-1").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=-1}]";
        let e = parse_err(s);
        assert!(
            e.message.contains("Count -1 is out of range 0..=10000000"),
            "{e}"
        );
        assert_caret(&e, s.find("-1").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=}]";
        let e = parse_err(s);
        assert!(e.message.contains("expected ',' or '}'"), "{e}");
        for bad in ["two", "2.5", "1e3"] {
            let s = format!("ComputeQuotaResources=[{{InstanceType=ml.g5.8xlarge,Count={bad}}}]");
            let e = parse_err(&s);
            assert!(
                e.message.contains("is not a whole number") || e.message.contains("missing value"),
                "{e}"
            );
            assert_eq!(e.pos, s.find("Count=").unwrap() + 6, "{e}");
        }
        let e = parse_err("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=10000001}]");
        assert!(
            e.message
                .contains("out of range 0..=10000000 (the API model's InstanceCount)"),
            "{e}"
        );
        let e = parse_err("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=1.2.3}]");
        assert!(e.message.contains("VCpu \"1.2.3\" is not a number"), "{e}");
        let e =
            parse_err("ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,MemoryInGiB=10000001}]");
        assert!(
            e.message
                .contains("MemoryInGiB 10000001 is out of range 0..=10000000"),
            "{e}"
        );
    }

    #[test]
    fn catalog_errors() {
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.x9.huge,Count=1}]");
        let msg = e.to_string();
        assert!(
            msg.contains("ml.x9.huge") && msg.contains("ml.p5, ml.p5e"),
            "{msg}"
        );
        assert!(msg.starts_with("ComputeQuotaResources row 1"), "{msg}");
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.c5.2xlarge,Accelerators=1}]");
        assert!(
            e.to_string().contains("ml.c5.2xlarge has no accelerators"),
            "{e}"
        );
        let e = map_err("ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=10000000}]");
        assert!(matches!(e, HyperPodError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn empty_resources_list_is_allowed() {
        // ComputeQuotaResources is optional in the API model: no rows, no quota of its own.
        for s in ["ComputeQuotaResources=[]", "PreemptTeamTasks=Never"] {
            let c = ComputeQuotaConfig::parse_shorthand(s).unwrap();
            assert!(c.to_quotas(Catalog::builtin()).unwrap().is_empty(), "{s}");
        }
    }

    // ---- syntax errors and positions ----------------------------------------------------------

    #[test]
    fn unknown_keys_list_what_is_accepted() {
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={Strategy=Lend,Foo=1}";
        let e = parse_err(s);
        assert_eq!(
            e.message,
            "unknown key \"Foo\" in ResourceSharingConfig; expected Strategy, BorrowLimit, AbsoluteBorrowLimits"
        );
        assert_caret(&e, s.find("Foo").unwrap());

        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,count=1}]";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("unknown key \"count\" in ComputeQuotaResources row 1"),
            "{e}"
        );
        assert!(e.message.contains("did you mean Count?"), "{e}");
        assert_caret(&e, s.find("count").unwrap());

        let e = parse_err("ComputeQuotaResources=[],Team=x");
        assert!(
            e.message.contains(
                "expected ComputeQuotaResources, ResourceSharingConfig, PreemptTeamTasks"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_enum_values_list_the_accepted_ones() {
        let s = "ComputeQuotaResources=[],ResourceSharingConfig={Strategy=LendandBorrow}";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected Lend, DontLend or LendAndBorrow"),
            "{e}"
        );
        assert!(e.message.contains("did you mean LendAndBorrow?"), "{e}");
        assert_caret(&e, s.find("LendandBorrow").unwrap());
        let e = parse_err("ComputeQuotaResources=[],PreemptTeamTasks=Always");
        assert!(e.message.contains("expected Never or LowerPriority"), "{e}");
        let e = policy_err("FairShare=On");
        assert!(
            e.message
                .contains("FairShare \"On\" is not valid; expected Enabled or Disabled"),
            "{e}"
        );
    }

    #[test]
    fn structural_errors_have_positions() {
        // Unbalanced: the caret is at the end, where the closer is missing.
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected ']' to close the '[' at byte 22"),
            "{e}"
        );
        assert_caret(&e, s.len());
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected '}' to close the '{' at byte 23"),
            "{e}"
        );
        assert_caret(&e, s.len());
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}]}";
        let e = parse_err(s);
        assert!(e.message.contains("found '}'"), "{e}");
        assert_caret(&e, s.len() - 1);
        // Trailing garbage after a structure.
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}x]";
        let e = parse_err(s);
        assert!(e.message.contains("expected ',' or ']'"), "{e}");
        assert_caret(&e, s.find("x]").unwrap());
        // Trailing comma.
        let s = "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],";
        let e = parse_err(s);
        assert!(e.message.contains("trailing comma"), "{e}");
        assert_caret(&e, s.len());
        // Duplicate keys: at the top level an error; inside a structure the last one counts,
        // as the AWS CLI reads it.
        let s = "PreemptTeamTasks=Never,PreemptTeamTasks=LowerPriority";
        let e = parse_err(s);
        assert!(
            e.message.contains("duplicate key \"PreemptTeamTasks\""),
            "{e}"
        );
        assert_caret(&e, s.rfind("Preempt").unwrap());
        let c = ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1,Count=2}]",
        )
        .unwrap();
        assert_eq!(c.resources[0].count, Some(2));
        // Missing '=' (':' belongs to keys in the AWS CLI's shorthand).
        let s = "ComputeQuotaResources [] ";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("expected '=' after key \"ComputeQuotaResources\", found '['"),
            "{e}"
        );
        assert_caret(&e, 22);
        // Wrong shape.
        let s = "ComputeQuotaResources={InstanceType=ml.g5.8xlarge,Count=1}";
        let e = parse_err(s);
        assert!(
            e.message.contains("ComputeQuotaResources must be a list"),
            "{e}"
        );
        assert_caret(&e, 22);
        let s = "ComputeQuotaResources=[ml.g5.8xlarge]";
        let e = parse_err(s);
        assert!(e.message.contains("must be a structure"), "{e}");
        assert_caret(&e, 23);
        // Unterminated quote.
        let s = "ComputeQuotaResources=[{InstanceType=\"ml.g5.8xlarge,Count=1}]";
        let e = parse_err(s);
        assert!(e.message.contains("closing \""), "{e}");
        assert_caret(&e, s.len());
        // JSON errors point into the JSON.
        let s = "{\"ComputeQuotaResources\": [{\"InstanceType\": \"ml.g5.8xlarge\", \"Count\": \"2\"}]}";
        let e = parse_err(s);
        assert!(
            e.message
                .contains("Count takes a whole number, found the string \"2\""),
            "{e}"
        );
        assert_caret(&e, s.find("\"2\"").unwrap());
        let e = parse_err("[1]");
        assert!(e.message.contains("found a list"), "{e}");
        // Deep nesting is refused, not a stack overflow.
        let deep = format!("A={}", "[".repeat(10_000));
        assert!(parse_shorthand_tree(&deep)
            .unwrap_err()
            .message
            .contains("nested"));
    }

    #[test]
    fn display_shows_message_position_and_caret() {
        let e = parse_err("ComputeQuotaResources=[],Bad=1");
        assert_eq!(
            e.to_string(),
            "unknown key \"Bad\" in the compute quota config; expected ComputeQuotaResources, ResourceSharingConfig, PreemptTeamTasks (at byte 25, column 26)\n  ComputeQuotaResources=[],Bad=1\n                           ^"
        );
        // Multi-line input (a YAML block scalar): the line of the error, line and column.
        let s = "ComputeQuotaResources=[\n  {InstanceType=ml.g5.8xlarge,Count=1},\n  {InstanceType=ml.g5.8xlarge,Cnt=2}\n]";
        let e = parse_err(s);
        assert_eq!(e.line_and_column(), (3, 31));
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with("(at byte 94, line 3, column 31)"),
            "{text}"
        );
        assert_eq!(lines[1], "    {InstanceType=ml.g5.8xlarge,Cnt=2}");
        assert_eq!(lines[2], format!("  {}^", " ".repeat(30)));
        // Non-ASCII input: the caret counts characters.
        let e = parse_err("ComputeQuotaResources=[{InstanceType=\"é\",Bad=1}]");
        assert_eq!(e.pos, 42); // bytes: 'é' is two
        assert_eq!(e.line_and_column(), (1, 42));
        let text = e.to_string();
        assert!(
            text.ends_with(&format!("\n  {}^", " ".repeat(41))),
            "{text}"
        );
    }

    #[test]
    fn the_aws_json_form_reads_back() {
        for s in [
            G5_SCENARIO,
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Accelerators=2,VCpu=10.5}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,MemoryInGiB=1.5}]},PreemptTeamTasks=Never",
        ] {
            let c = ComputeQuotaConfig::parse_shorthand(s).unwrap();
            let json = c.to_aws_json().to_string();
            assert_eq!(ComputeQuotaConfig::parse_shorthand(&json).unwrap(), c, "{json}");
        }
    }

    #[test]
    fn blanks_and_quotes_are_accepted() {
        let c = ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources = [ { InstanceType = \"ml.g5.8xlarge\" , Count = 2 } ] ,\n ResourceSharingConfig = { Strategy = 'LendAndBorrow', BorrowLimit = 50 } , PreemptTeamTasks = LowerPriority ",
        )
        .unwrap();
        assert_eq!(c, ComputeQuotaConfig::parse_shorthand(G5_SCENARIO).unwrap());
        let t = parse_shorthand_tree(r#"A="x,\"y\"\\",B='',C=[],D={},E=[a, b ,{F=1}]"#).unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(t[0].value.value, ShorthandValue::Scalar("x,\"y\"\\".into()));
        assert_eq!(t[1].value.value, ShorthandValue::Scalar(String::new()));
        assert_eq!(t[2].value.value, ShorthandValue::List(vec![]));
        assert_eq!(t[3].value.value, ShorthandValue::Struct(vec![]));
        let ShorthandValue::List(items) = &t[4].value.value else {
            panic!("{t:?}")
        };
        assert_eq!(items[0].value, ShorthandValue::Scalar("a".into()));
        assert_eq!(items[1].value, ShorthandValue::Scalar("b".into()));
        assert_eq!(items[2].pos, 38);
        assert_eq!(render_scalar("x,\"y\"\\"), r#""x,\"y\"\\""#);
    }

    // ---- scheduler config -----------------------------------------------------------------

    #[test]
    fn scheduler_config_options() {
        // An empty argument is not shorthand (nor to the AWS CLI): at least one key.
        assert!(parse_scheduler_config("").is_err());
        assert_eq!(
            parse_scheduler_config("FairShare=Enabled").unwrap(),
            ClusterPolicy::default()
        );
        let p = parse_scheduler_config("FairShare=Disabled,IdleResourceSharing=Enabled").unwrap();
        assert!(!p.fair_share && p.idle_resource_sharing && p.priority_classes.is_empty());
        assert_eq!(
            scheduler_config_to_shorthand(&p),
            "PriorityClasses=[],FairShare=Disabled,IdleResourceSharing=Enabled"
        );
        let p = parse_scheduler_config("PriorityClasses=[{Name=a,Weight=0},{Weight=100,Name=b}]")
            .unwrap();
        assert_eq!(p.priority_classes[1].weight, 100);
    }

    #[test]
    fn scheduler_config_limits() {
        let classes: Vec<String> = (0..11)
            .map(|i| format!("{{Name=c{i},Weight={i}}}"))
            .collect();
        let s = format!("PriorityClasses=[{}]", classes.join(","));
        let e = policy_err(&s);
        assert!(
            e.message.contains("11 priority classes given; at most 10"),
            "{e}"
        );
        assert_caret(&e, s.find("{Name=c10").unwrap());
        let ten = format!("PriorityClasses=[{}]", classes[..10].join(","));
        assert_eq!(
            parse_scheduler_config(&ten).unwrap().priority_classes.len(),
            10
        );

        let s = "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=101}]";
        let e = policy_err(s);
        assert!(
            e.message
                .contains("\"training\": weight 101 is out of range 0..=100"),
            "{e}"
        );
        assert_caret(&e, s.find("101").unwrap());
        let e = policy_err("PriorityClasses=[{Name=x,Weight=-1}]");
        assert!(e.message.contains("weight -1 is out of range"), "{e}");
        let e = policy_err("PriorityClasses=[{Name=x,Weight=99999999999}]");
        assert!(e.message.contains("out of range 0..=100"), "{e}");

        let s = "PriorityClasses=[{Name=a,Weight=1},{Name=a,Weight=2}]";
        let e = policy_err(s);
        assert!(e.message.contains("defined twice"), "{e}");
        assert_caret(&e, s.rfind("a,").unwrap());
        let s = "PriorityClasses=[{Name=Big_Name,Weight=1}]";
        let e = policy_err(s);
        assert!(e.message.contains("Big_Name"), "{e}");
        assert_caret(&e, s.find("Big").unwrap());
        let s = "PriorityClasses=[{Name=a}]";
        let e = policy_err(s);
        assert!(e.message.contains("has no Weight"), "{e}");
        assert_caret(&e, 17);
        let s = "PriorityClasses=[{Name=a,Weight=1,Priority=3}]";
        let e = policy_err(s);
        assert_eq!(
            e.message,
            "unknown key \"Priority\" in PriorityClasses item 1; expected Name, Weight"
        );
        let e = policy_err("FairShare=Enabled,Fairshare=Enabled");
        assert!(e.message.contains("did you mean FairShare?"), "{e}");
    }

    // ---- the structured form ------------------------------------------------------------------

    #[test]
    fn structured_form_maps_like_the_shorthand() {
        let json = r#"{"resources": [{"instance_type": "ml.p5.48xlarge", "accelerators": 2}],
                       "sharing": {"strategy": "DontLend"}}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        assert_eq!(
            c,
            ComputeQuotaConfig::parse_shorthand(P5_DONT_LEND).unwrap()
        );
        assert_eq!(
            c.to_quotas(Catalog::builtin()).unwrap(),
            quotas(P5_DONT_LEND)
        );

        let json = r#"{"resources": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
                       "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 10001}}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e, HyperPodError::BorrowLimitRange { value: 10001 });
        assert_eq!(c.to_quotas(Catalog::builtin()).unwrap_err(), e);

        let json = r#"{"resources": [{"instance_type": "", "count": 1}]}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("InstanceType is missing"));

        let json = r#"{"resources": [{"instance_type": "ml.g5.8xlarge", "vcpu": 4, "memory_in_gib": 16}],
                       "sharing": {"absolute_borrow_limits": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]},
                       "preempt_team_tasks": "Never"}"#;
        let c: ComputeQuotaConfig = serde_json::from_str(json).unwrap();
        let q = c.to_quotas(Catalog::builtin()).unwrap();
        assert_eq!(
            q[0].get(&ResourceName::gpu()).unwrap().borrowing_limit,
            Some(1)
        );
        assert_eq!(
            q[0].get(&ResourceName::cpu()).unwrap().borrowing_limit,
            Some(2000)
        );
        assert_eq!(
            ComputeQuotaConfig::parse_shorthand(&c.to_shorthand()).unwrap(),
            c
        );

        let c = ComputeQuotaConfig {
            resources: vec![ComputeQuotaResource {
                instance_type: "ml.g5.8xlarge".into(),
                vcpu: Some(f64::NAN),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(HyperPodError::BadAmount {
                field: RowField::VCpu,
                ..
            })
        ));
    }

    // ---- properties -----------------------------------------------------------------------

    fn arb_amounts() -> impl Strategy<Value = ComputeQuotaResource> {
        prop_oneof![
            (0u32..1000).prop_map(|n| ComputeQuotaResource {
                count: Some(n),
                ..Default::default()
            }),
            (
                proptest::option::of(0u32..64),
                proptest::option::of(0.0f64..10_000.0),
                proptest::option::of(0.0f64..100_000.0),
            )
                .prop_filter("one amount", |(a, v, m)| a.is_some()
                    || v.is_some()
                    || m.is_some())
                .prop_map(|(accelerators, vcpu, memory_in_gib)| ComputeQuotaResource {
                    accelerators,
                    vcpu,
                    memory_in_gib,
                    ..Default::default()
                }),
        ]
    }

    fn arb_rows(types: Vec<String>) -> impl Strategy<Value = Vec<ComputeQuotaResource>> {
        let n = types.len();
        proptest::collection::vec(arb_amounts(), n).prop_map(move |rows| {
            rows.into_iter()
                .zip(types.iter())
                .map(|(r, t)| ComputeQuotaResource {
                    instance_type: t.clone(),
                    ..r
                })
                .collect()
        })
    }

    fn arb_config() -> impl Strategy<Value = ComputeQuotaConfig> {
        // Types a quota may name before a node of the type registers.
        let c = Catalog::builtin();
        let names: Vec<String> = c
            .names()
            .filter(|n| c.get_for_quota(n).is_ok())
            .map(String::from)
            .collect();
        proptest::sample::subsequence(names, 0..5)
            .prop_flat_map(|types| {
                let abs_types = proptest::sample::subsequence(types.clone(), 0..=types.len())
                    .prop_flat_map(arb_rows);
                (
                    arb_rows(types),
                    prop_oneof![
                        Just(SharingStrategy::Lend),
                        Just(SharingStrategy::DontLend),
                        Just(SharingStrategy::LendAndBorrow)
                    ],
                    proptest::option::of(1u32..=500),
                    abs_types,
                    any::<bool>(),
                )
            })
            .prop_map(|(resources, strategy, borrow_limit, abs, never)| {
                let lab = strategy == SharingStrategy::LendAndBorrow;
                ComputeQuotaConfig {
                    resources,
                    sharing: ResourceSharingConfig {
                        strategy,
                        borrow_limit: borrow_limit.filter(|_| lab),
                        absolute_borrow_limits: if lab { abs } else { vec![] },
                    },
                    preempt_team_tasks: if never {
                        PreemptTeamTasks::Never
                    } else {
                        PreemptTeamTasks::LowerPriority
                    },
                }
            })
    }

    fn check_error(s: &str, e: &ShorthandError) {
        assert!(e.pos <= s.len(), "{e:?}");
        assert!(s.is_char_boundary(e.pos), "{e:?}");
        assert!(e.to_string().contains('^'));
        let _ = e.line_and_column();
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_arbitrary_strings(s in any::<String>()) {
            for r in [
                ComputeQuotaConfig::parse_shorthand(&s).map(|_| ()),
                parse_scheduler_config(&s).map(|_| ()),
            ] {
                if let Err(e) = r {
                    check_error(&s, &e);
                }
            }
        }

        #[test]
        fn parsers_never_panic_on_shorthand_like_strings(
            s in "[A-Za-z0-9=,{}\\[\\] .\"'\\\\\\-é\n]{0,80}"
        ) {
            for r in [
                ComputeQuotaConfig::parse_shorthand(&s).map(|_| ()),
                parse_scheduler_config(&s).map(|_| ()),
                parse_shorthand_tree(&s).map(|_| ()),
            ] {
                if let Err(e) = r {
                    check_error(&s, &e);
                }
            }
        }

        #[test]
        fn valid_configs_round_trip_and_map(c in arb_config(), cut in any::<prop::sample::Index>(), junk in any::<char>()) {
            let s = c.to_shorthand();
            let back = ComputeQuotaConfig::parse_shorthand(&s)
                .unwrap_or_else(|e| panic!("{e}"));
            prop_assert_eq!(&back, &c);
            let accel_on_cpu_type = c
                .resources
                .iter()
                .chain(c.sharing.absolute_borrow_limits.iter())
                .any(|r| {
                    r.accelerators.is_some()
                        && Catalog::builtin()
                            .get(&r.instance_type)
                            .map(|t| t.accelerators() == 0)
                            .unwrap_or(false)
                });
            match c.to_quotas(Catalog::builtin()) {
                Ok(q) => {
                    prop_assert!(!accel_on_cpu_type);
                    prop_assert_eq!(q.len(), c.resources.len());
                    for (fq, row) in q.iter().zip(&c.resources) {
                        prop_assert_eq!(&fq.flavor, &row.instance_type);
                        let names: Vec<&ResourceName> = fq.resources.iter().map(|(r, _)| r).collect();
                        let mut sorted = names.clone();
                        sorted.sort();
                        prop_assert_eq!(names, sorted);
                        for (_, rq) in &fq.resources {
                            prop_assert!(rq.nominal >= 0);
                            prop_assert!(rq.borrowing_limit.unwrap_or(0) >= 0);
                        }
                    }
                }
                Err(e) => prop_assert!(
                    accel_on_cpu_type && matches!(e, HyperPodError::NoAccelerators { .. }),
                    "{}", e
                ),
            }
            // Mutations of a valid string never panic.
            let i = cut.index(s.len() + 1);
            let mut mutated = s.clone();
            mutated.insert(i, junk);
            if let Err(e) = ComputeQuotaConfig::parse_shorthand(&mutated) {
                check_error(&mutated, &e);
            }
            if let Err(e) = ComputeQuotaConfig::parse_shorthand(&s[..i]) {
                check_error(&s[..i], &e);
            }
        }

        #[test]
        fn scheduler_configs_round_trip(
            names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}[a-z0-9]", 0..=10),
            weights in proptest::collection::vec(0i32..=100, 10),
            fair in any::<bool>(),
            idle in any::<bool>(),
        ) {
            let p = ClusterPolicy {
                priority_classes: names
                    .into_iter()
                    .zip(weights)
                    .map(|(name, weight)| PriorityClass { name, weight })
                    .collect(),
                fair_share: fair,
                idle_resource_sharing: idle,
                ..ClusterPolicy::default()
            };
            let s = scheduler_config_to_shorthand(&p);
            prop_assert_eq!(parse_scheduler_config(&s).unwrap_or_else(|e| panic!("{e}")), p);
        }
    }
}

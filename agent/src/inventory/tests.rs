//! Unit tests: instance type resolution, capacity rules, NVML health through the fake layer.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use allot_common::api::DeviceInfo;
use allot_common::catalog::Catalog;
use allot_common::resource::{ResourceName, Resources};

use super::nvml::{ALL_GPUS, XID_DOUBLE_BIT_ECC};
use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn type_file(contents: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(contents.as_bytes()).unwrap();
    f
}

// ---- instance type resolution ----

#[test]
fn flag_comes_first() {
    let f = type_file("ml.g5.xlarge\n");
    let env = env_of(&[
        (ENV_INSTANCE_TYPE, "ml.p4d.24xlarge"),
        (ENV_NODE_INSTANCE_TYPE, "ml.trn1.32xlarge"),
    ]);
    let got = resolve_instance_type(Some("ml.p5.48xlarge"), Some(f.path()), &env).unwrap();
    assert_eq!(got, "ml.p5.48xlarge");
}

#[test]
fn then_the_file_then_allot_env_then_the_node_label() {
    let f = type_file("  ml.g5.xlarge\n");
    let env = env_of(&[
        (ENV_INSTANCE_TYPE, "ml.p4d.24xlarge"),
        (ENV_NODE_INSTANCE_TYPE, "ml.trn1.32xlarge"),
    ]);
    assert_eq!(
        resolve_instance_type(None, Some(f.path()), &env).unwrap(),
        "ml.g5.xlarge"
    );
    assert_eq!(
        resolve_instance_type(Some("  "), None, &env).unwrap(),
        "ml.p4d.24xlarge",
        "a blank flag counts as not given"
    );
    let only_label = env_of(&[(ENV_NODE_INSTANCE_TYPE, "ml.trn1.32xlarge")]);
    assert_eq!(
        resolve_instance_type(None, None, &only_label).unwrap(),
        "ml.trn1.32xlarge"
    );
}

#[test]
fn the_ec2_form_of_the_label_gets_the_ml_prefix() {
    let env = env_of(&[(ENV_NODE_INSTANCE_TYPE, "p5.48xlarge")]);
    assert_eq!(
        resolve_instance_type(None, None, &env).unwrap(),
        "ml.p5.48xlarge"
    );
}

#[test]
fn a_name_that_is_not_an_instance_type_names_the_value_its_origin_and_valid_names() {
    let err = resolve_instance_type(Some("p5.96xl"), None, &no_env).unwrap_err();
    assert!(err.contains("\"p5.96xl\""), "{err}");
    assert!(err.contains("--instance-type"), "{err}");
    assert!(
        err.contains("ml.p5.48xlarge") && !err.contains("ml.p5e.48xlarge"),
        "suggests the same family first: {err}"
    );
    let err =
        resolve_instance_type(None, None, &env_of(&[(ENV_INSTANCE_TYPE, "huge-box")])).unwrap_err();
    assert!(
        err.contains("\"huge-box\"") && err.contains(ENV_INSTANCE_TYPE),
        "{err}"
    );
    assert!(
        err.contains("ml.p5.48xlarge") && err.contains("ml.trn1.32xlarge"),
        "falls back to well-known names: {err}"
    );
    // A name of the API's form the catalog does not list is the node's own type.
    assert_eq!(
        resolve_instance_type(Some("ml.x9.48xlarge"), None, &no_env).unwrap(),
        "ml.x9.48xlarge"
    );
}

#[test]
fn a_wrong_earlier_value_is_not_replaced_by_a_later_one() {
    let env = env_of(&[(ENV_NODE_INSTANCE_TYPE, "ml.p5.48xlarge")]);
    let err = resolve_instance_type(Some("ml.nope"), None, &env).unwrap_err();
    assert!(err.contains("ml.nope"), "{err}");
}

#[test]
fn missing_or_empty_file_and_nothing_given_are_errors() {
    let err = resolve_instance_type(
        None,
        Some(Path::new("/nonexistent/allot/instance-type")),
        &no_env,
    )
    .unwrap_err();
    assert!(
        err.contains("/nonexistent/allot/instance-type") && err.contains("--instance-type"),
        "{err}"
    );
    let f = type_file("\n");
    let err = resolve_instance_type(None, Some(f.path()), &no_env).unwrap_err();
    assert!(err.contains("is empty"), "{err}");
    let err = resolve_instance_type(None, None, &no_env).unwrap_err();
    assert!(
        err.contains("--instance-type")
            && err.contains(ENV_INSTANCE_TYPE)
            && err.contains(ENV_NODE_INSTANCE_TYPE),
        "{err}"
    );
}

// ---- capacity ----

fn dev(resource: &str, index: u32, healthy: bool) -> DeviceInfo {
    DeviceInfo {
        resource: resource.to_string(),
        index,
        id: format!("{resource}-{index}"),
        healthy,
        reason: if healthy {
            String::new()
        } else {
            "broken".into()
        },
        ..DeviceInfo::default()
    }
}

fn devs(resource: &str, n: u32) -> Vec<DeviceInfo> {
    (0..n).map(|i| dev(resource, i, true)).collect()
}

fn get(r: &Resources, name: &str) -> i64 {
    r.get(&ResourceName::parse(name).unwrap())
}

#[test]
fn fake_gpus_take_the_catalog_with_gpu_set() {
    let it = Catalog::builtin().get("ml.p5.48xlarge").unwrap();
    let (cap, warnings) = capacity(it, &devs("gpu", 2), None, Some(2));
    let mut want = it.resources();
    want.set(ResourceName::gpu(), 2);
    assert_eq!(cap, want);
    assert_eq!(get(&cap, "efa"), 32);
    assert!(warnings.is_empty(), "{warnings:?}");
    let (cap, _) = capacity(it, &[], None, Some(0));
    assert!(!cap.0.contains_key(&ResourceName::gpu()));
    assert_eq!(get(&cap, "cpu"), 192_000);
}

#[test]
fn a_full_node_matches_the_catalog_without_warnings() {
    let it = Catalog::builtin().get("ml.p4d.24xlarge").unwrap();
    let mut d = devs("gpu", 8);
    d.extend(devs("efa", 4));
    let host = HostFacts {
        vcpus: 96,
        memory_bytes: 1_100 << 30,
    };
    let (cap, warnings) = capacity(it, &d, Some(host), None);
    assert_eq!(cap, it.resources());
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn device_counts_come_from_discovery_healthy_or_not() {
    let it = Catalog::builtin().get("ml.p4d.24xlarge").unwrap();
    let mut d = devs("gpu", 7);
    d[3].healthy = false;
    d.extend(devs("efa", 4));
    let (cap, warnings) = capacity(it, &d, None, None);
    assert_eq!(get(&cap, "gpu"), 7, "unhealthy GPUs still count");
    assert_eq!(get(&cap, "cpu"), 96_000);
    assert_eq!(get(&cap, "memory"), 1152 << 30);
    assert_eq!(
        warnings,
        ["discovered 7 GPUs, the catalog says ml.p4d.24xlarge has 8"]
    );
}

#[test]
fn missing_devices_leave_the_resource_out_with_a_warning() {
    let it = Catalog::builtin().get("ml.trn1.32xlarge").unwrap();
    let mut d = devs("neuron", 16);
    for x in &mut d {
        x.cores = 2;
    }
    let (cap, warnings) = capacity(it, &d, None, None);
    assert_eq!(get(&cap, "neuron"), 16);
    assert!(!cap.0.contains_key(&ResourceName::efa()));
    assert_eq!(
        warnings,
        ["discovered 0 EFA interfaces, the catalog says ml.trn1.32xlarge has 8"]
    );
    d[0].cores = 1;
    d.truncate(1);
    let (_, warnings) = capacity(it, &d, None, None);
    assert!(warnings.contains(
        &"discovered 1 Neuron device, the catalog says ml.trn1.32xlarge has 16".to_string()
    ));
    assert!(warnings.contains(
        &"discovered 1 NeuronCore, the catalog says ml.trn1.32xlarge has 32".to_string()
    ));
}

#[test]
fn unexpected_devices_are_counted_and_warned_about() {
    let it = Catalog::builtin().get("ml.c5.2xlarge").unwrap();
    let (cap, warnings) = capacity(it, &devs("gpu", 1), None, None);
    assert_eq!(get(&cap, "gpu"), 1);
    assert_eq!(
        warnings,
        ["discovered 1 GPU, the catalog says ml.c5.2xlarge has 0"]
    );
}

#[test]
fn a_smaller_host_is_warned_about_but_the_catalog_counts() {
    let it = Catalog::builtin().get("ml.g5.xlarge").unwrap();
    let host = HostFacts {
        vcpus: 2,
        memory_bytes: 8 << 30,
    };
    let (cap, warnings) = capacity(it, &devs("gpu", 1), Some(host), None);
    assert_eq!(get(&cap, "cpu"), 4_000);
    assert_eq!(get(&cap, "memory"), 16 << 30);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("2 vCPUs, fewer than the 4") && warnings[0].contains("ml.g5.xlarge"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("8.0 GiB") && warnings[1].contains("16 GiB"),
        "{warnings:?}"
    );
    // The kernel keeps a few percent: 15.2 GiB of 16 is not worth a warning.
    let host = HostFacts {
        vcpus: 4,
        memory_bytes: (152 << 30) / 10,
    };
    let (_, warnings) = capacity(it, &devs("gpu", 1), Some(host), None);
    assert!(warnings.is_empty(), "{warnings:?}");
}

// ---- NVML through the fake layer ----

fn gpu_facts(i: u32) -> GpuFacts {
    GpuFacts {
        uuid: format!("GPU-{i:08x}-aaaa-bbbb-cccc-000000000000"),
        name: "NVIDIA H100 80GB HBM3".to_string(),
        memory_bytes: 81_559 << 20,
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x53 + i),
        mig_enabled: i == 1,
        ecc_uncorrected_volatile: Some(0),
        retired_pages_pending: if i == 2 { None } else { Some(false) },
        ..GpuFacts::default()
    }
}

fn fake_source(n: u32) -> (NvmlSource, FakeNvmlHandle) {
    let fake = FakeNvml::new((0..n).map(gpu_facts).collect());
    let h = fake.handle();
    (NvmlSource::new(Box::new(fake)), h)
}

fn fake_discovery(n: u32) -> (Discovery, FakeNvmlHandle) {
    let (src, h) = fake_source(n);
    let d = Discovery::with_sources("ml.p5.48xlarge", vec![Box::new(src)], None).unwrap();
    (d, h)
}

fn gpu(inv: &NodeInventory, index: u32) -> &DeviceInfo {
    inv.devices
        .iter()
        .find(|d| d.resource == "gpu" && d.index == index)
        .expect("gpu present")
}

#[test]
fn nvml_gpus_are_discovered_with_all_fields() {
    let (mut src, _h) = fake_source(3);
    let got = src.discover().unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[1],
        DeviceInfo {
            resource: "gpu".into(),
            index: 1,
            id: "GPU-00000001-aaaa-bbbb-cccc-000000000000".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_mib: 81_559,
            pci_bus_id: "00000000:54:00.0".into(),
            mig: true,
            cores: 0,
            healthy: true,
            reason: String::new(),
        }
    );
    assert!(!got[0].mig);
    assert!(got.iter().all(|d| d.healthy));
}

#[test]
fn a_critical_xid_makes_a_gpu_unhealthy_until_restart() {
    let (mut d, h) = fake_discovery(8);
    let first = d.discover();
    assert!(first.devices.iter().all(|g| g.healthy));
    h.xid(3, 79);
    let inv = d.discover();
    let g = gpu(&inv, 3);
    assert!(!g.healthy);
    assert_eq!(g.reason, "XID 79: GPU has fallen off the bus");
    assert!(inv
        .devices
        .iter()
        .filter(|g| g.index != 3)
        .all(|g| g.healthy));
    assert_eq!(get(&inv.capacity, "gpu"), 8, "still counted");
    assert_eq!(
        changes(&first, &inv),
        ["gpu 3 (GPU-00000003-aaaa-bbbb-cccc-000000000000) turned unhealthy: XID 79: GPU has fallen off the bus"]
    );
    // No new event: it stays unhealthy.
    let again = d.discover();
    assert!(!gpu(&again, 3).healthy);
    assert!(changes(&inv, &again).is_empty());
}

#[test]
fn application_xids_leave_the_gpu_healthy() {
    let (mut d, h) = fake_discovery(2);
    d.discover();
    for x in nvml::APPLICATION_XIDS {
        h.xid(0, x);
    }
    let inv = d.discover();
    assert!(gpu(&inv, 0).healthy, "{:?}", gpu(&inv, 0));
    assert_eq!(h.queued_events(), 0, "the events were consumed");
}

#[test]
fn double_bit_ecc_events_ecc_counts_and_retired_pages() {
    let (mut d, h) = fake_discovery(4);
    d.discover();
    h.double_bit_ecc(0);
    h.set_ecc_uncorrected(1, Some(2));
    h.set_retired_pages_pending(2, Some(true));
    let inv = d.discover();
    assert_eq!(gpu(&inv, 0).reason, "XID 48: double-bit ECC error");
    assert_eq!(gpu(&inv, 1).reason, "ECC: 2 uncorrected errors");
    assert_eq!(gpu(&inv, 2).reason, "retired pages pending");
    assert!(gpu(&inv, 3).healthy);
    // The count grows: the reason follows; it never goes back to healthy.
    h.set_ecc_uncorrected(1, Some(5));
    h.set_retired_pages_pending(2, Some(false));
    h.xid(1, 94);
    let inv = d.discover();
    assert_eq!(
        gpu(&inv, 1).reason,
        "XID 94: contained ECC error; ECC: 5 uncorrected errors"
    );
    assert!(!gpu(&inv, 2).healthy, "sticky until restart");
    assert_eq!(XID_DOUBLE_BIT_ECC, 48);
}

#[test]
fn an_event_for_no_particular_gpu_marks_them_all() {
    let (mut d, h) = fake_discovery(2);
    d.discover();
    h.xid(ALL_GPUS, 79);
    let inv = d.discover();
    assert!(inv
        .devices
        .iter()
        .all(|g| !g.healthy && g.reason.contains("XID 79")));
}

#[test]
fn events_before_the_first_discovery_are_kept() {
    let (mut d, h) = fake_discovery(2);
    h.xid(1, 64);
    let inv = d.discover();
    assert!(gpu(&inv, 0).healthy);
    assert_eq!(
        gpu(&inv, 1).reason,
        "XID 64: ECC page retirement or row remapper recording failure"
    );
}

#[test]
fn an_unreadable_gpu_is_unhealthy_while_it_stays_unreadable() {
    let (mut d, h) = fake_discovery(2);
    d.discover();
    h.set_device_error(1, Some("GPU is lost"));
    let inv = d.discover();
    let g = gpu(&inv, 1);
    assert!(!g.healthy);
    assert_eq!(g.reason, "NVML cannot read the GPU: GPU is lost");
    assert_eq!(g.model, "NVIDIA H100 80GB HBM3", "last known facts");
    h.set_device_error(1, None);
    assert!(gpu(&d.discover(), 1).healthy);
}

#[test]
fn a_failing_source_keeps_its_devices_unhealthy_and_warns() {
    let (mut d, h) = fake_discovery(8);
    d.discover();
    h.set_count_error(Some("Driver Not Loaded"));
    let inv = d.discover();
    assert_eq!(inv.devices.len(), 8);
    assert!(inv
        .devices
        .iter()
        .all(|g| !g.healthy && g.reason == "nvml discovery failed: Driver Not Loaded"));
    assert_eq!(get(&inv.capacity, "gpu"), 8);
    assert!(
        inv.warnings
            .iter()
            .any(|w| w.starts_with("nvml discovery failed: Driver Not Loaded")),
        "{:?}",
        inv.warnings
    );
    h.set_count_error(None);
    let inv = d.discover();
    assert!(inv.devices.iter().all(|g| g.healthy));
}

struct Panicky;

impl DeviceSource for Panicky {
    fn name(&self) -> &'static str {
        "panicky"
    }
    fn discover(&mut self) -> Result<Vec<DeviceInfo>, String> {
        panic!("bug in a source")
    }
}

#[test]
fn a_panicking_source_is_a_warning() {
    let (src, _h) = fake_source(1);
    let mut d =
        Discovery::with_sources("ml.g5.xlarge", vec![Box::new(Panicky), Box::new(src)], None)
            .unwrap();
    let inv = d.discover();
    assert_eq!(inv.devices.len(), 1);
    assert!(
        inv.warnings
            .iter()
            .any(|w| w.contains("panicky discovery failed: panicked")),
        "{:?}",
        inv.warnings
    );
}

// ---- watching ----

#[test]
fn watch_returns_early_when_a_gpu_turns_unhealthy() {
    let (mut d, h) = fake_discovery(2);
    d.discover();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        h.xid(0, 13); // application error: no change, keep waiting
        std::thread::sleep(Duration::from_millis(50));
        h.xid(1, 79);
    });
    let start = Instant::now();
    assert!(d.watch(Duration::from_secs(20)));
    assert!(start.elapsed() < Duration::from_secs(10));
    t.join().unwrap();
    let inv = d.discover();
    assert!(gpu(&inv, 0).healthy);
    assert!(!gpu(&inv, 1).healthy);
}

#[test]
fn watch_times_out_without_events() {
    let (mut d, _h) = fake_discovery(1);
    d.discover();
    let start = Instant::now();
    assert!(!d.watch(Duration::from_millis(60)));
    assert!(start.elapsed() >= Duration::from_millis(60));
    let mut none = Discovery::with_sources("ml.c5.2xlarge", vec![], None).unwrap();
    let start = Instant::now();
    assert!(!none.watch(Duration::from_millis(30)));
    assert!(start.elapsed() >= Duration::from_millis(30));
}

// ---- Discovery::new ----

#[test]
fn fake_gpus_from_the_config() {
    let cfg = InventoryConfig {
        instance_type: Some("ml.p5.48xlarge".into()),
        fake_gpus: Some(4),
        ..InventoryConfig::default()
    };
    let mut d = Discovery::new(&cfg).unwrap();
    assert_eq!(d.instance_type(), "ml.p5.48xlarge");
    let inv = d.discover();
    assert_eq!(inv.devices.len(), 4);
    assert_eq!(inv.devices[2].id, "GPU-fake-2");
    assert_eq!(inv.devices[2].model, "NVIDIA H100");
    assert_eq!(inv.devices[2].memory_mib, 80 * 1024);
    assert!(inv.devices.iter().all(|g| g.healthy && g.resource == "gpu"));
    assert_eq!(get(&inv.capacity, "gpu"), 4);
    assert_eq!(get(&inv.capacity, "cpu"), 192_000);
    assert_eq!(get(&inv.capacity, "efa"), 32);
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    // The handle reaches the fake GPUs.
    d.fake_gpus().unwrap().xid(2, 79);
    assert!(!d.discover().devices[2].healthy);
    assert_eq!(
        d.last().unwrap().devices[2].reason,
        "XID 79: GPU has fallen off the bus"
    );
}

#[test]
fn fake_gpus_on_a_type_without_gpus_get_a_generic_model() {
    let cfg = InventoryConfig {
        instance_type: Some("ml.c5.2xlarge".into()),
        fake_gpus: Some(1),
        ..InventoryConfig::default()
    };
    let inv = Discovery::new(&cfg).unwrap().discover();
    assert_eq!(inv.devices[0].model, "Fake GPU");
    assert_eq!(get(&inv.capacity, "gpu"), 1);
}

/// `ml.g7.48xlarge`: vCPUs and memory are in the catalog's sources, its GPU and EFA counts
/// are not: the devices discovered are reported without a warning that they differ.
#[test]
fn a_count_no_source_gives_is_what_was_discovered() {
    let it = Catalog::builtin().get("ml.g7.48xlarge").unwrap();
    assert!(it.catalogued && !it.sourced(&ResourceName::gpu()));
    let host = HostFacts {
        vcpus: 192,
        memory_bytes: 760 << 30,
    };
    let mut devices = devs("gpu", 8);
    devices.extend(devs("efa", 1));
    let (cap, warnings) = capacity(it, &devices, Some(host), None);
    assert_eq!(get(&cap, "cpu"), 192_000);
    assert_eq!(get(&cap, "memory"), 768 << 30);
    assert_eq!(get(&cap, "gpu"), 8);
    assert_eq!(get(&cap, "efa"), 1);
    assert!(warnings.is_empty(), "{warnings:?}");
    // A sourced count that differs still warns.
    let g4dn = Catalog::builtin().get("ml.g4dn.12xlarge").unwrap();
    let (_, warnings) = capacity(g4dn, &devs("gpu", 2), None, None);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("catalog says ml.g4dn.12xlarge has 4")),
        "{warnings:?}"
    );
}

#[test]
fn a_type_the_catalog_does_not_list_takes_cpu_and_memory_from_the_host() {
    let it = allot_common::catalog::InstanceType::learned("ml.x9.huge", &Default::default());
    let host = HostFacts {
        vcpus: 12,
        memory_bytes: 48 << 30,
    };
    let (cap, warnings) = capacity(&it, &devs("gpu", 2), Some(host), None);
    assert_eq!(get(&cap, "cpu"), 12_000);
    assert_eq!(get(&cap, "memory"), 48 << 30);
    assert_eq!(get(&cap, "gpu"), 2);
    assert!(
        warnings.iter().any(|w| w.contains("not in the catalog")),
        "{warnings:?}"
    );
    assert_eq!(sources(&it, None)["cpu"], "host");
    let cfg = InventoryConfig {
        instance_type: Some("ml.x9.huge".into()),
        fake_gpus: Some(1),
        ..InventoryConfig::default()
    };
    let mut d = Discovery::new(&cfg).expect("accepted");
    let inv = d.discover();
    assert!(get(&inv.capacity, "cpu") > 0, "{inv:?}");
    assert_eq!(inv.sources["memory"], "host");
    assert_eq!(inv.sources["gpu"], "fake");
}

#[test]
fn without_nvml_or_sysfs_a_gpu_node_reports_no_devices_and_says_why() {
    let root = tempfile::tempdir().unwrap();
    let cfg = InventoryConfig {
        instance_type: Some("ml.g5.12xlarge".into()),
        sysfs_root: root.path().to_path_buf(),
        nvml: false,
        ..InventoryConfig::default()
    };
    let inv = Discovery::new(&cfg).unwrap().discover();
    assert!(inv.devices.is_empty());
    assert!(!inv.capacity.0.contains_key(&ResourceName::gpu()));
    assert_eq!(get(&inv.capacity, "cpu"), 48_000);
    for want in [
        "discovered 0 GPUs, the catalog says ml.g5.12xlarge has 4",
        "discovered 0 EFA interfaces, the catalog says ml.g5.12xlarge has 1",
        "ml.g5.12xlarge lists GPUs but NVML is unavailable (NVML disabled by configuration): no GPUs can be discovered",
    ] {
        assert!(inv.warnings.iter().any(|w| w == want), "{want}: {:?}", inv.warnings);
    }
}

#[test]
fn changes_list_appearing_and_disappearing_devices() {
    let a = NodeInventory {
        instance_type: "ml.g5.xlarge".into(),
        devices: vec![dev("efa", 0, true)],
        ..NodeInventory::default()
    };
    let mut b = a.clone();
    b.devices = vec![dev("gpu", 0, true)];
    assert_eq!(
        changes(&a, &b),
        ["gpu 0 (gpu-0) appeared", "efa 0 (efa-0) disappeared"]
    );
    let mut c = b.clone();
    c.devices[0] = dev("gpu", 0, false);
    assert_eq!(changes(&c, &b), ["gpu 0 (gpu-0) is healthy again"]);
}

#[test]
fn new_rejects_more_fake_gpus_than_a_node_may_have() {
    for n in [MAX_FAKE_GPUS + 1, u32::MAX] {
        let cfg = InventoryConfig {
            instance_type: Some("ml.c5.2xlarge".into()),
            fake_gpus: Some(n),
            ..InventoryConfig::default()
        };
        let err = Discovery::new(&cfg).unwrap_err();
        assert!(
            err.contains(&format!("--fake-gpus {n}")) && err.contains("use 0 to 64"),
            "{err}"
        );
    }
    let cfg = InventoryConfig {
        instance_type: Some("ml.c5.2xlarge".into()),
        fake_gpus: Some(MAX_FAKE_GPUS),
        ..InventoryConfig::default()
    };
    assert_eq!(Discovery::new(&cfg).unwrap().discover().devices.len(), 64);
}

#[test]
fn neuron_core_totals_saturate_instead_of_overflowing() {
    let it = Catalog::builtin().get("ml.trn1.32xlarge").unwrap();
    let mut d = devs("neuron", 2);
    for x in &mut d {
        x.cores = u32::MAX;
    }
    let (_, warnings) = capacity(it, &d, None, None);
    assert!(
        warnings.contains(&format!(
            "discovered {} NeuronCores, the catalog says ml.trn1.32xlarge has 32",
            u32::MAX
        )),
        "{warnings:?}"
    );
}

#[test]
fn the_nvml_report_has_mig_devices_and_unreadable_gpus() {
    let mut gpus: Vec<GpuFacts> = (0..3).map(gpu_facts).collect();
    gpus[1].mig_pending = true;
    gpus[1].mig_devices = vec![nvml::MigFacts {
        index: 0,
        uuid: "MIG-11111111-2222-3333-4444-555555555555".into(),
        name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".into(),
        memory_bytes: 9_856 << 20,
        gpu_instance: Some(7),
        compute_instance: Some(0),
    }];
    let fake = FakeNvml::new(gpus);
    fake.handle().set_device_error(2, Some("Unknown Error"));
    let r = nvml::report(&fake).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["events_watched"], false, "the fake has no driver: {v}");
    assert_eq!(v["gpus"][0]["index"], 0);
    assert_eq!(v["gpus"][0]["mig_enabled"], false);
    assert_eq!(v["gpus"][1]["mig_enabled"], true);
    assert_eq!(v["gpus"][1]["mig_pending"], true);
    assert_eq!(
        v["gpus"][1]["mig_devices"][0]["uuid"],
        "MIG-11111111-2222-3333-4444-555555555555"
    );
    assert_eq!(v["gpus"][2]["error"], "Unknown Error");
    assert!(v["gpus"][2].get("uuid").is_none(), "{v}");
    fake.handle().set_count_error(Some("Driver Not Loaded"));
    assert_eq!(nvml::report(&fake).unwrap_err(), "Driver Not Loaded");
}

#[test]
fn a_gpu_in_mig_mode_without_mig_devices_says_so() {
    let (mut d, _h) = fake_discovery(2);
    let inv = d.discover();
    assert_eq!(inv.capacity.get(&ResourceName::gpu()), 2);
    let mig: Vec<&String> = inv.warnings.iter().filter(|w| w.contains("MIG")).collect();
    assert_eq!(mig.len(), 1, "{:?}", inv.warnings);
    assert!(
        mig[0].starts_with("GPU 1 (GPU-00000001-aaaa-bbbb-cccc-000000000000) is in MIG mode"),
        "{}",
        mig[0]
    );
}

// ---- GPU partitions ----

#[test]
fn fake_mig_gpus_report_their_partitions_as_devices() {
    let cfg = InventoryConfig {
        instance_type: Some("ml.p5.48xlarge".into()),
        fake_gpus: Some(8),
        fake_mig: vec![
            super::fake::parse_fake_mig("0=1g.10gb*7").unwrap(),
            super::fake::parse_fake_mig("1=3g.40gb*2").unwrap(),
        ],
        ..InventoryConfig::default()
    };
    let mut d = Discovery::new(&cfg).unwrap();
    let inv = d.discover();
    assert_eq!(get(&inv.capacity, "gpu"), 8);
    assert_eq!(get(&inv.capacity, "mig-1g.10gb"), 7);
    assert_eq!(get(&inv.capacity, "mig-3g.40gb"), 2);
    assert_eq!(inv.sources["mig-1g.10gb"], "fake");
    let migs: Vec<&DeviceInfo> = inv.devices.iter().filter(|d| d.mig).collect();
    // GPUs 0 and 1 (in MIG mode) and their nine partitions.
    assert_eq!(migs.len(), 11);
    let p = inv
        .devices
        .iter()
        .find(|d| d.resource == "mig-3g.40gb" && d.index == 1)
        .unwrap();
    assert_eq!(p.id, "MIG-fake-1-1");
    assert_eq!(p.memory_mib, 40 << 10);
    assert_eq!(inv.partitions.len(), 9);
    let part = inv
        .partitions
        .iter()
        .find(|x| x.uuid == "MIG-fake-1-1")
        .unwrap();
    assert_eq!((part.gpu, part.slot, part.gpu_instance), (1, 1, Some(2)));
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    // A partition shares its GPU's health.
    d.fake_gpus().unwrap().xid(1, 79);
    let inv = d.discover();
    assert!(inv
        .devices
        .iter()
        .filter(|d| d.resource == "mig-3g.40gb")
        .all(|d| !d.healthy && d.reason.contains("XID 79")));
    // A partition made later takes the next index; the others keep theirs.
    d.fake_gpus()
        .unwrap()
        .set_mig(3, &["mig-1g.10gb".to_string()]);
    let inv = d.discover();
    assert_eq!(get(&inv.capacity, "mig-1g.10gb"), 8);
    let new = inv.devices.iter().find(|d| d.id == "MIG-fake-3-0").unwrap();
    assert_eq!(new.index, 7);
}

#[test]
fn fake_mig_needs_fake_gpus_and_a_gpu_that_is_there() {
    let mut cfg = InventoryConfig {
        instance_type: Some("ml.p5.48xlarge".into()),
        fake_gpus: Some(2),
        fake_mig: vec![super::fake::parse_fake_mig("2=1g.10gb").unwrap()],
        ..InventoryConfig::default()
    };
    let e = Discovery::new(&cfg).unwrap_err();
    assert!(e.contains("GPU 2") && e.contains("0 to 1"), "{e}");
    cfg.fake_gpus = None;
    let e = Discovery::new(&cfg).unwrap_err();
    assert!(e.contains("needs --fake-gpus"), "{e}");
}

#[test]
fn a_gpu_in_mig_mode_without_partitions_is_a_warning() {
    let devices = vec![DeviceInfo {
        resource: "gpu".into(),
        index: 0,
        id: "GPU-0".into(),
        pci_bus_id: "b0".into(),
        mig: true,
        healthy: true,
        ..Default::default()
    }];
    let it = Catalog::builtin().get("ml.p5.48xlarge").unwrap().clone();
    let (_, w) = capacity(&it, &devices, None, Some(1));
    assert!(
        w.iter()
            .any(|w| w.contains("MIG mode and has no MIG devices")),
        "{w:?}"
    );
}

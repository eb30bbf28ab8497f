//! Inventory discovery on fixture sysfs trees (see `tests/fixtures/sysfs/README.md` for the
//! real layouts they model) and on a fake NVML layer.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use allot_agent::inventory::{
    changes, DeviceSource, Discovery, EfaSysfs, FakeNvml, GpuFacts, HostFacts, InventoryConfig,
    NeuronSysfs, NodeInventory, NvmlSource, StaticHost,
};
use allot_common::api::DeviceInfo;
use allot_common::resource::{ResourceName, Resources};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn get(r: &Resources, name: &str) -> i64 {
    r.get(&ResourceName::parse(name).unwrap())
}

fn find<'a>(inv: &'a NodeInventory, resource: &str, index: u32) -> &'a DeviceInfo {
    inv.devices
        .iter()
        .find(|d| d.resource == resource && d.index == index)
        .unwrap_or_else(|| panic!("{resource} {index} missing: {:?}", inv.devices))
}

// ---- Neuron ----

#[test]
fn trn1_neuron_devices_with_core_counts_and_health() {
    let mut src = NeuronSysfs::new(&fixture("trn1"), "AWS Trainium", 32 * 1024);
    let devs = src.discover().unwrap();
    assert_eq!(devs.len(), 16, "class attributes are not devices");
    assert_eq!(
        devs.iter().map(|d| d.index).collect::<Vec<_>>(),
        (0..16).collect::<Vec<_>>(),
        "numeric order, not name order (neuron10 after neuron9)"
    );
    assert_eq!(
        devs[0],
        DeviceInfo {
            resource: "neuron".into(),
            index: 0,
            id: "neuron0".into(),
            model: "Trainium1".into(),
            memory_mib: 32 * 1024,
            pci_bus_id: String::new(),
            mig: false,
            cores: 2,
            healthy: true,
            reason: String::new(),
        }
    );
    assert!(devs.iter().all(|d| d.cores == 2));
    assert_eq!(devs[5].reason, "ECC: 3 uncorrected HBM errors");
    assert_eq!(devs[11].reason, "device state invalid (a reset failed)");
    assert!(devs[7].healthy, "a repairable error is not a fault");
    let unhealthy: Vec<u32> = devs
        .iter()
        .filter(|d| !d.healthy)
        .map(|d| d.index)
        .collect();
    assert_eq!(unhealthy, [5, 11]);
}

#[test]
fn trn1_node_capacity_and_warnings() {
    let cfg = InventoryConfig {
        instance_type: Some("ml.trn1.32xlarge".into()),
        sysfs_root: fixture("trn1"),
        nvml: false,
        ..InventoryConfig::default()
    };
    let mut d = Discovery::new(&cfg).unwrap();
    let inv = d.discover();
    assert_eq!(inv.instance_type, "ml.trn1.32xlarge");
    assert_eq!(get(&inv.capacity, "neuron"), 16, "unhealthy devices count");
    assert_eq!(get(&inv.capacity, "cpu"), 128_000);
    assert_eq!(get(&inv.capacity, "memory"), 512 << 30);
    assert!(!inv.capacity.0.contains_key(&ResourceName::efa()));
    assert!(!inv.capacity.0.contains_key(&ResourceName::gpu()));
    assert_eq!(inv.devices.len(), 16);
    assert_eq!(find(&inv, "neuron", 3).memory_mib, 32 * 1024);
    assert!(
        inv.warnings.contains(
            &"discovered 0 EFA interfaces, the catalog says ml.trn1.32xlarge has 8".to_string()
        ),
        "{:?}",
        inv.warnings
    );
    // Device counts, cores and GPUs match: no other count warnings (host warnings depend on
    // the machine running the test).
    assert!(
        !inv.warnings
            .iter()
            .any(|w| w.contains("Neuron") || w.contains("GPU")),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn neuron_cores_are_counted_from_directories_when_core_count_is_unreadable() {
    let root = tempfile::tempdir().unwrap();
    let dev = root
        .path()
        .join("sys/devices/virtual/neuron_device/neuron0");
    for c in 0..8 {
        fs::create_dir_all(dev.join(format!("neuron_core{c}/info/architecture"))).unwrap();
    }
    let class = root.path().join("sys/class/neuron_device");
    fs::create_dir_all(&class).unwrap();
    symlink(
        "../../devices/virtual/neuron_device/neuron0",
        class.join("neuron0"),
    )
    .unwrap();
    let devs = NeuronSysfs::new(root.path(), "AWS Trainium2", 96 * 1024)
        .discover()
        .unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].cores, 8);
    assert_eq!(
        devs[0].model, "AWS Trainium2",
        "the catalog's model when sysfs has none"
    );
    assert!(devs[0].healthy);
}

// ---- EFA ----

#[test]
fn efa_interfaces_with_a_port_down() {
    let devs = EfaSysfs::new(&fixture("p4d-efa")).discover().unwrap();
    let names: Vec<&str> = devs.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        names,
        ["efa_0", "efa_1", "efa_2", "efa_3"],
        "mlx5_0 is not EFA"
    );
    assert_eq!(
        devs[1],
        DeviceInfo {
            resource: "efa".into(),
            index: 1,
            id: "efa_1".into(),
            model: "EFA (0xefa0)".into(),
            memory_mib: 0,
            pci_bus_id: "0000:20:1c.0".into(),
            mig: false,
            cores: 0,
            healthy: true,
            reason: String::new(),
        }
    );
    assert!(!devs[2].healthy);
    assert_eq!(devs[2].reason, "port 1 DOWN");
    assert!(devs.iter().filter(|d| d.index != 2).all(|d| d.healthy));
}

fn gpu(i: u32) -> GpuFacts {
    GpuFacts {
        uuid: format!("GPU-p4d-{i}"),
        name: "NVIDIA A100-SXM4-40GB".into(),
        memory_bytes: 40_960 << 20,
        pci_bus_id: format!("00000000:{:02X}:1C.0", 0x10 + i),
        mig_enabled: false,
        ecc_uncorrected_volatile: Some(0),
        retired_pages_pending: None,
        ..GpuFacts::default()
    }
}

#[test]
fn p4d_node_from_fake_nvml_and_efa_sysfs() {
    let fake = FakeNvml::new((0..8).map(gpu).collect());
    let h = fake.handle();
    let host = HostFacts {
        vcpus: 96,
        memory_bytes: 1_120 << 30,
    };
    let mut d = Discovery::with_sources(
        "ml.p4d.24xlarge",
        vec![
            Box::new(NvmlSource::new(Box::new(fake))),
            Box::new(NeuronSysfs::new(&fixture("p4d-efa"), "Neuron device", 0)),
            Box::new(EfaSysfs::new(&fixture("p4d-efa"))),
        ],
        Some(Box::new(StaticHost(host))),
    )
    .unwrap();
    let first = d.discover();
    assert!(first.warnings.is_empty(), "{:?}", first.warnings);
    assert_eq!(first.capacity, {
        let mut r = Resources::new();
        r.set(ResourceName::cpu(), 96_000);
        r.set(ResourceName::memory(), 1152 << 30);
        r.set(ResourceName::gpu(), 8);
        r.set(ResourceName::efa(), 4);
        r
    });
    let order: Vec<(&str, u32)> = first
        .devices
        .iter()
        .map(|d| (d.resource.as_str(), d.index))
        .collect();
    assert_eq!(order.len(), 12);
    assert_eq!(order[0], ("efa", 0));
    assert_eq!(order[4], ("gpu", 0));
    assert_eq!(order[11], ("gpu", 7));
    assert!(!find(&first, "efa", 2).healthy);

    // A GPU turns unhealthy: reported as a change, capacity unchanged.
    h.xid(6, 79);
    assert!(d.watch(std::time::Duration::from_secs(10)));
    let second = d.discover();
    assert_eq!(second.capacity, first.capacity);
    assert_eq!(
        changes(&first, &second),
        ["gpu 6 (GPU-p4d-6) turned unhealthy: XID 79: GPU has fallen off the bus"]
    );
}

/// Writes one EFA interface into a temporary sysfs tree, the way the kernel lays it out.
fn write_efa(root: &Path, name: &str, bdf: &str, driver: Option<&str>, state: &str) {
    let pci = root.join("sys/devices/pci0000:00").join(bdf);
    let dev = pci.join("infiniband").join(name);
    fs::create_dir_all(dev.join("ports/1")).unwrap();
    fs::write(dev.join("ports/1/state"), format!("{state}\n")).unwrap();
    fs::write(pci.join("device"), "0xefa1\n").unwrap();
    if !dev.join("device").exists() {
        symlink(format!("../../../{bdf}"), dev.join("device")).unwrap();
    }
    if let Some(drv) = driver {
        fs::create_dir_all(root.join("sys/bus/pci/drivers").join(drv)).unwrap();
        if !pci.join("driver").exists() {
            symlink(
                format!("../../../bus/pci/drivers/{drv}"),
                pci.join("driver"),
            )
            .unwrap();
        }
    }
    let class = root.join("sys/class/infiniband");
    fs::create_dir_all(&class).unwrap();
    if !class.join(name).exists() {
        symlink(
            format!("../../devices/pci0000:00/{bdf}/infiniband/{name}"),
            class.join(name),
        )
        .unwrap();
    }
}

#[test]
fn renamed_efa_interfaces_are_found_by_their_driver() {
    let root = tempfile::tempdir().unwrap();
    write_efa(
        root.path(),
        "rdmap16s27",
        "0000:10:1b.0",
        Some("efa"),
        "4: ACTIVE",
    );
    write_efa(
        root.path(),
        "rdmap32s27",
        "0000:20:1b.0",
        Some("efa"),
        "4: ACTIVE",
    );
    write_efa(
        root.path(),
        "efa_9",
        "0000:30:1b.0",
        Some("mlx5_core"),
        "4: ACTIVE",
    );
    let devs = EfaSysfs::new(root.path()).discover().unwrap();
    let names: Vec<&str> = devs.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        names,
        ["rdmap16s27", "rdmap32s27"],
        "the driver decides, not the name"
    );
    assert_eq!(devs[1].model, "EFA (0xefa1)");
}

#[test]
fn an_efa_port_coming_up_is_reported_as_a_change() {
    let root = tempfile::tempdir().unwrap();
    for (i, state) in ["4: ACTIVE", "1: DOWN"].iter().enumerate() {
        write_efa(
            root.path(),
            &format!("efa_{i}"),
            &format!("0000:00:1{i}.0"),
            None,
            state,
        );
    }
    let mut d = Discovery::with_sources(
        "ml.g5.8xlarge",
        vec![Box::new(EfaSysfs::new(root.path()))],
        None,
    )
    .unwrap();
    let before = d.discover();
    assert_eq!(get(&before.capacity, "efa"), 2);
    assert_eq!(find(&before, "efa", 1).reason, "port 1 DOWN");
    assert!(before.warnings.contains(
        &"discovered 2 EFA interfaces, the catalog says ml.g5.8xlarge has 1".to_string()
    ));
    write_efa(root.path(), "efa_1", "0000:00:11.0", None, "4: ACTIVE");
    let after = d.discover();
    assert!(after.devices.iter().all(|x| x.healthy));
    assert_eq!(changes(&before, &after), ["efa 1 (efa_1) is healthy again"]);
}

//! GPU partitions (MIG) as the state machine takes them: a node reports its MIG devices, one
//! device resource per profile; a GPU in MIG mode is never handed out whole; quotas per
//! profile admit and place partitions by index; partitions created after a node registered
//! are taken; and before the format of partitions all of it is refused as a release before
//! refuses it.

use allot_common::api::{DeviceInfo, NodeReport};
use allot_common::{Catalog, ResourceName};
use allot_core::machine::{Command, Machine, FORMAT_PARTITIONS};
use allot_core::{views, WlState};

mod support;

const T: &str = "ml.p5.48xlarge"; // 8 GPUs per node

fn apply(m: &mut Machine, now: i64, cmd: Command) -> Result<(), String> {
    support::apply_cmd(m, now, cmd)
}

/// A p5 node whose GPU 0 is in MIG mode with `mig` 1g.10gb partitions.
fn report(mig: u32) -> NodeReport {
    let mut capacity = Catalog::builtin().get(T).unwrap().resources();
    let mut devices: Vec<DeviceInfo> = (0..8)
        .map(|i| DeviceInfo {
            resource: "gpu".into(),
            index: i,
            id: format!("GPU-{i}"),
            pci_bus_id: format!("bus-{i}"),
            mig: i == 0,
            healthy: true,
            ..Default::default()
        })
        .collect();
    for i in 0..mig {
        devices.push(DeviceInfo {
            resource: "mig-1g.10gb".into(),
            index: i,
            id: format!("MIG-{i}"),
            pci_bus_id: "bus-0".into(),
            mig: true,
            healthy: true,
            ..Default::default()
        });
    }
    if mig > 0 {
        capacity.set(ResourceName::parse("mig-1g.10gb").unwrap(), i64::from(mig));
    }
    NodeReport {
        name: "n1".into(),
        instance_type: T.into(),
        capacity,
        devices,
        lease_ms: 10_000,
        ..Default::default()
    }
}

fn machine(format: u32) -> Machine {
    let mut m = support::machine_with_team_a(&format!(
        "ComputeQuotaResources=[{{InstanceType={T},Accelerators=8,AcceleratorPartition={{Type=mig-1g.10gb,Count=7}}}}]"
    ));
    m.format = format;
    m
}

fn submit(m: &mut Machine, name: &str, resource: &str, n: i64) {
    support::submit_a(m, name, resource, n, 1, 1);
}

fn cycle(m: &mut Machine, now: i64) {
    support::cycle_at(m, now);
}

fn state(m: &Machine, name: &str) -> WlState {
    m.state.workload(m.state.find_workload(name).unwrap()).state
}

#[test]
fn partitions_are_placed_by_index_and_their_gpu_is_never_whole() {
    let mut m = machine(FORMAT_PARTITIONS);
    apply(&mut m, 0, Command::ReportNode(report(7))).expect("report");
    submit(&mut m, "small", "mig-1g.10gb", 2);
    submit(&mut m, "more", "mig-1g.10gb", 5);
    submit(&mut m, "whole", "gpu", 8);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "small"), WlState::Admitted);
    assert_eq!(state(&m, "more"), WlState::Admitted);
    // GPU 0 is in MIG mode: seven whole GPUs are left, not eight.
    assert_eq!(state(&m, "whole"), WlState::Pending);
    let pods = views::assignments(&m, "n1").pods;
    let mut given: Vec<u8> = pods
        .iter()
        .flat_map(|p| p.devices.get("mig-1g.10gb").cloned().unwrap_or_default())
        .collect();
    given.sort();
    assert_eq!(given, (0..7).collect::<Vec<u8>>());
    // The node's view says why GPU 0 is held.
    let node = views::nodes(&m)
        .into_iter()
        .find(|n| n.name == "n1")
        .unwrap();
    let mig = ResourceName::parse("mig-1g.10gb").unwrap();
    assert_eq!((node.capacity.get(&mig), node.used.get(&mig)), (7, 7));
    let g0 = node
        .devices
        .iter()
        .find(|d| d.resource == "gpu" && d.index == 0);
    assert!(g0.is_some_and(|d| d.mig), "{:?}", node.devices);
    assert_eq!(node.devices.len(), 15);
}

#[test]
fn partitions_made_after_registration_become_schedulable() {
    let mut m = machine(FORMAT_PARTITIONS);
    apply(&mut m, 0, Command::ReportNode(report(0))).expect("report");
    submit(&mut m, "small", "mig-1g.10gb", 2);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "small"), WlState::Pending);
    apply(&mut m, 3, Command::ReportNode(report(3))).expect("report");
    cycle(&mut m, 4);
    assert_eq!(state(&m, "small"), WlState::Admitted);
}

#[test]
fn partitions_a_report_leaves_out_are_held_out() {
    let mut m = machine(FORMAT_PARTITIONS);
    apply(&mut m, 0, Command::ReportNode(report(7))).expect("report");
    // The agent restarted without its index book after 4 partitions were destroyed: its
    // report names 3, and the registered 4 others are not handed out.
    apply(&mut m, 1, Command::ReportNode(report(3))).expect("report");
    submit(&mut m, "four", "mig-1g.10gb", 4);
    submit(&mut m, "three", "mig-1g.10gb", 3);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "four"), WlState::Pending);
    assert_eq!(state(&m, "three"), WlState::Admitted);
}

#[test]
fn a_report_without_nvml_says_nothing_of_partitions() {
    let mut m = machine(FORMAT_PARTITIONS);
    apply(&mut m, 0, Command::ReportNode(report(7))).expect("report");
    // The agent restarted without NVML: no devices at all, no GPUs in its capacity.
    let mut blind = report(0);
    blind.devices.clear();
    blind.capacity.0.remove(&ResourceName::gpu());
    apply(&mut m, 1, Command::ReportNode(blind)).expect("report");
    submit(&mut m, "seven", "mig-1g.10gb", 7);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "seven"), WlState::Admitted);
}

#[test]
fn before_the_format_of_partitions_they_are_refused_and_mig_gpus_are_whole() {
    let mut m = machine(FORMAT_PARTITIONS - 1);
    let e = apply(&mut m, 0, Command::ReportNode(report(7))).unwrap_err();
    assert!(e.contains("mig-1g.10gb"), "{e}");
    // MIG mode without partitions reports as before: the GPU is handed out whole.
    apply(&mut m, 0, Command::ReportNode(report(0))).expect("report");
    submit(&mut m, "whole", "gpu", 8);
    cycle(&mut m, 2);
    assert_eq!(state(&m, "whole"), WlState::Admitted);
}

//! GPU partitions (NVIDIA MIG devices) as devices the scheduler hands out.
//!
//! Each MIG profile is a device resource of its own (`mig-1g.10gb`); the scheduler names an
//! instance by its index within the profile, and the agent keeps what the index stands for: the
//! MIG device's UUID (what `CUDA_VISIBLE_DEVICES` takes), its parent GPU and slot on it (the
//! CDI name `nvidia.com/gpu=<gpu>:<slot>`) and its GPU and compute instance ids (the
//! `/dev/nvidia-caps` nodes a container needs without CDI).
//!
//! Indices are stable while the agent runs: a MIG device keeps the index it was first given
//! until it is gone, and a new one takes the lowest index nobody present holds. So destroying
//! the partitions of one GPU never renumbers those of another under running pods. The agent
//! never creates, destroys or reconfigures MIG devices, nor changes a GPU's MIG mode.

use std::collections::{BTreeMap, BTreeSet};

use allot_common::api::DeviceInfo;
use serde::{Deserialize, Serialize};

use super::nvml::GpuFacts;

/// One GPU partition, with what a pod given it needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// Its profile, as a resource: `mig-1g.10gb`.
    pub resource: String,
    /// The scheduler's index of it among the node's partitions of that profile.
    pub index: u32,
    /// `MIG-...`.
    pub uuid: String,
    /// The parent GPU's index.
    pub gpu: u32,
    /// Its slot on the parent (NVML's MIG device index).
    pub slot: u32,
    /// NVML's GPU instance id, when it could be read.
    pub gpu_instance: Option<u32>,
    /// NVML's compute instance id, when it could be read.
    pub compute_instance: Option<u32>,
}

/// The index each MIG device was given, per profile.
#[derive(Debug, Default)]
pub struct IndexBook {
    by_profile: BTreeMap<String, BTreeMap<String, u32>>,
}

impl IndexBook {
    /// Indices for the MIG devices present now (`(profile, uuid)`, in discovery order): the
    /// ones seen before keep theirs, new ones take the lowest free; the gone are forgotten.
    fn assign(&mut self, present: &[(String, String)]) -> Vec<u32> {
        let mut keep: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (profile, uuid) in present {
            keep.entry(profile.clone())
                .or_default()
                .insert(uuid.clone());
        }
        self.by_profile.retain(|p, book| {
            book.retain(|uuid, _| keep.get(p).is_some_and(|k| k.contains(uuid)));
            !book.is_empty()
        });
        present
            .iter()
            .map(|(profile, uuid)| {
                let book = self.by_profile.entry(profile.clone()).or_default();
                if let Some(i) = book.get(uuid) {
                    return *i;
                }
                let taken: BTreeSet<u32> = book.values().copied().collect();
                let free = (0..).find(|i| !taken.contains(i)).unwrap_or(0);
                book.insert(uuid.clone(), free);
                free
            })
            .collect()
    }
}

/// The partitions of the GPUs read (`(index, facts, health reason)`): one device each, with
/// the parent's health, and what a pod needs of it. A MIG device whose name carries no profile
/// is left out (named in the returned warnings).
pub fn partitions(
    gpus: &[(u32, &GpuFacts, String)],
    book: &mut IndexBook,
) -> (Vec<DeviceInfo>, Vec<Partition>, Vec<String>) {
    let mut found = Vec::new();
    let mut warnings = Vec::new();
    for (gpu, facts, reason) in gpus.iter().filter(|(_, f, _)| f.mig_enabled) {
        for m in &facts.mig_devices {
            match allot_common::mig::profile_of_device_name(&m.name) {
                Some(profile) => found.push((*gpu, facts, reason, m, profile)),
                None => warnings.push(format!(
                    "MIG device {} on GPU {gpu} ({:?}) names no profile NVML's way \
                     (\"... MIG 1g.10gb\"); it is not scheduled",
                    m.uuid, m.name
                )),
            }
        }
    }
    let keys: Vec<(String, String)> = found
        .iter()
        .map(|(_, _, _, m, p)| (p.clone(), m.uuid.clone()))
        .collect();
    let indices = book.assign(&keys);
    let mut devices = Vec::new();
    let mut parts = Vec::new();
    for ((gpu, facts, reason, m, profile), index) in found.into_iter().zip(indices) {
        devices.push(DeviceInfo {
            resource: profile.clone(),
            index,
            id: m.uuid.clone(),
            model: m.name.clone(),
            memory_mib: m.memory_bytes >> 20,
            pci_bus_id: facts.pci_bus_id.clone(),
            mig: true,
            cores: 0,
            healthy: reason.is_empty(),
            reason: reason.clone(),
        });
        parts.push(Partition {
            resource: profile,
            index,
            uuid: m.uuid.clone(),
            gpu,
            slot: m.index,
            gpu_instance: m.gpu_instance,
            compute_instance: m.compute_instance,
        });
    }
    (devices, parts, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::nvml::MigFacts;

    fn gpu(uuid: &str, migs: &[(u32, &str, &str)]) -> GpuFacts {
        GpuFacts {
            uuid: uuid.into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: format!("bus-{uuid}"),
            mig_enabled: true,
            mig_devices: migs
                .iter()
                .map(|(slot, uuid, profile)| MigFacts {
                    index: *slot,
                    uuid: (*uuid).into(),
                    name: format!("NVIDIA H100 80GB HBM3 MIG {profile}"),
                    memory_bytes: 10 << 30,
                    gpu_instance: Some(slot + 1),
                    compute_instance: Some(0),
                })
                .collect(),
            ..GpuFacts::default()
        }
    }

    #[test]
    fn each_profile_is_numbered_and_indices_stay_put() {
        let mut book = IndexBook::default();
        let g0 = gpu("GPU-0", &[(0, "MIG-a", "1g.10gb"), (1, "MIG-b", "1g.10gb")]);
        let g1 = gpu("GPU-1", &[(0, "MIG-c", "1g.10gb"), (1, "MIG-d", "3g.40gb")]);
        let (devs, parts, w) = partitions(
            &[(0, &g0, String::new()), (1, &g1, "XID 79".into())],
            &mut book,
        );
        assert!(w.is_empty());
        let got: Vec<(&str, u32, &str, bool)> = devs
            .iter()
            .map(|d| (d.resource.as_str(), d.index, d.id.as_str(), d.healthy))
            .collect();
        assert_eq!(
            got,
            vec![
                ("mig-1g.10gb", 0, "MIG-a", true),
                ("mig-1g.10gb", 1, "MIG-b", true),
                ("mig-1g.10gb", 2, "MIG-c", false),
                ("mig-3g.40gb", 0, "MIG-d", false),
            ]
        );
        assert_eq!((parts[2].gpu, parts[2].slot), (1, 0));
        assert_eq!(parts[0].gpu_instance, Some(1));
        // GPU 0's partitions are destroyed: GPU 1's keep their indices; a new one takes 0.
        let g0 = gpu("GPU-0", &[(0, "MIG-e", "1g.10gb")]);
        let (devs, _, _) = partitions(
            &[(0, &g0, String::new()), (1, &g1, String::new())],
            &mut book,
        );
        let got: Vec<(&str, u32)> = devs.iter().map(|d| (d.id.as_str(), d.index)).collect();
        assert_eq!(got, vec![("MIG-e", 0), ("MIG-c", 2), ("MIG-d", 0)]);
    }

    #[test]
    fn a_name_without_a_profile_is_left_out_and_said() {
        let mut g = gpu("GPU-0", &[(0, "MIG-a", "1g.10gb")]);
        g.mig_devices[0].name = "Odd".into();
        let (devs, _, w) = partitions(&[(0, &g, String::new())], &mut IndexBook::default());
        assert!(devs.is_empty());
        assert!(w[0].contains("MIG-a"), "{w:?}");
    }
}

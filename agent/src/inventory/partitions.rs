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

/// One MIG device: a GPU instance with its compute instance, as CUDA sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MigFacts {
    /// Its slot on the parent GPU (NVML's MIG device index).
    pub index: u32,
    /// `MIG-...`, what `CUDA_VISIBLE_DEVICES` takes to select it.
    pub uuid: String,
    /// NVML's name, which includes the profile: `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
    pub name: String,
    pub memory_bytes: u64,
    /// The GPU instance and compute instance ids (their `/dev/nvidia-caps` nodes), when NVML
    /// answers.
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
}

/// A GPU in MIG mode as read: its index and bus id, its MIG devices, and why it is unhealthy
/// (empty when it is not).
pub struct PartitionedGpu<'a> {
    pub index: u32,
    pub pci_bus_id: &'a str,
    pub migs: &'a [MigFacts],
    pub reason: String,
}

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

/// The index each MIG device was given, per profile; kept in a file when given one, so an
/// agent restarted while pods run gives each partition the index it had (a partition made or
/// destroyed while the agent was down must not renumber the others under running pods).
#[derive(Debug, Default)]
pub struct IndexBook {
    by_profile: BTreeMap<String, BTreeMap<String, u32>>,
    file: Option<std::path::PathBuf>,
}

impl IndexBook {
    /// The book kept in `file`, as an earlier agent left it (empty when it is missing or
    /// unreadable: indices are then given afresh, and said).
    pub fn kept_in(file: std::path::PathBuf) -> IndexBook {
        let by_profile = match std::fs::read(&file) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::warn!(
                    "{}: not a MIG index book ({e}); partitions are numbered afresh",
                    file.display()
                );
                BTreeMap::new()
            }),
            Err(_) => BTreeMap::new(),
        };
        IndexBook {
            by_profile,
            file: Some(file),
        }
    }

    fn save(&self) {
        let Some(file) = &self.file else { return };
        let saved = serde_json::to_vec(&self.by_profile)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                let tmp = file.with_extension("tmp");
                std::fs::write(&tmp, b)
                    .and_then(|()| std::fs::rename(&tmp, file))
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = saved {
            tracing::warn!("{}: cannot keep the MIG index book: {e}", file.display());
        }
    }

    /// Indices for the MIG devices present now (`(profile, uuid)`, in discovery order): the
    /// ones seen before keep theirs, new ones take the lowest free; the gone are forgotten.
    fn assign(&mut self, present: &[(String, String)]) -> Vec<u32> {
        let before = self.by_profile.clone();
        let out = self.assign_in_memory(present);
        if self.by_profile != before {
            self.save();
        }
        out
    }

    fn assign_in_memory(&mut self, present: &[(String, String)]) -> Vec<u32> {
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

/// The partitions of the GPUs in MIG mode: one device each, with the parent's health, and
/// what a pod needs of it. A MIG device whose name carries no profile is left out (named in
/// the returned warnings).
pub fn partitions(
    gpus: &[PartitionedGpu<'_>],
    book: &mut IndexBook,
) -> (Vec<DeviceInfo>, Vec<Partition>, Vec<String>) {
    let mut found = Vec::new();
    let mut warnings = Vec::new();
    for g in gpus {
        for m in g.migs {
            match allot_common::mig::profile_of_device_name(&m.name) {
                Some(profile) => found.push((g, m, profile)),
                None => warnings.push(format!(
                    "MIG device {} on GPU {} ({:?}) names no profile NVML's way \
                     (\"... MIG 1g.10gb\"); it is not scheduled",
                    m.uuid, g.index, m.name
                )),
            }
        }
    }
    let keys: Vec<(String, String)> = found
        .iter()
        .map(|(_, m, p)| (p.clone(), m.uuid.clone()))
        .collect();
    let indices = book.assign(&keys);
    let mut devices = Vec::new();
    let mut parts = Vec::new();
    for ((g, m, profile), index) in found.into_iter().zip(indices) {
        devices.push(DeviceInfo {
            resource: profile.clone(),
            index,
            id: m.uuid.clone(),
            model: m.name.clone(),
            memory_mib: m.memory_bytes >> 20,
            pci_bus_id: g.pci_bus_id.to_string(),
            mig: true,
            cores: 0,
            healthy: g.reason.is_empty(),
            reason: g.reason.clone(),
        });
        parts.push(Partition {
            resource: profile,
            index,
            uuid: m.uuid.clone(),
            gpu: g.index,
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

    fn migs(list: &[(u32, &str, &str)]) -> Vec<MigFacts> {
        list.iter()
            .map(|(slot, uuid, profile)| MigFacts {
                index: *slot,
                uuid: (*uuid).into(),
                name: format!("NVIDIA H100 80GB HBM3 MIG {profile}"),
                memory_bytes: 10 << 30,
                gpu_instance: Some(slot + 1),
                compute_instance: Some(0),
            })
            .collect()
    }

    fn gpu<'a>(index: u32, migs: &'a [MigFacts], reason: &str) -> PartitionedGpu<'a> {
        PartitionedGpu {
            index,
            pci_bus_id: "bus",
            migs,
            reason: reason.into(),
        }
    }

    #[test]
    fn each_profile_is_numbered_and_indices_stay_put() {
        let mut book = IndexBook::default();
        let m0 = migs(&[(0, "MIG-a", "1g.10gb"), (1, "MIG-b", "1g.10gb")]);
        let m1 = migs(&[(0, "MIG-c", "1g.10gb"), (1, "MIG-d", "3g.40gb")]);
        let (devs, parts, w) = partitions(&[gpu(0, &m0, ""), gpu(1, &m1, "XID 79")], &mut book);
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
        let m0 = migs(&[(0, "MIG-e", "1g.10gb")]);
        let (devs, _, _) = partitions(&[gpu(0, &m0, ""), gpu(1, &m1, "")], &mut book);
        let got: Vec<(&str, u32)> = devs.iter().map(|d| (d.id.as_str(), d.index)).collect();
        assert_eq!(got, vec![("MIG-e", 0), ("MIG-c", 2), ("MIG-d", 0)]);
    }

    #[test]
    fn the_book_kept_in_a_file_gives_a_restarted_agent_the_same_indices() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mig-indices.json");
        let m = migs(&[
            (0, "MIG-a", "1g.10gb"),
            (1, "MIG-b", "1g.10gb"),
            (2, "MIG-c", "1g.10gb"),
        ]);
        let mut book = IndexBook::kept_in(file.clone());
        partitions(&[gpu(0, &m, "")], &mut book);
        // MIG-a is destroyed while the agent is down: the others keep 1 and 2.
        let later = migs(&[(1, "MIG-b", "1g.10gb"), (2, "MIG-c", "1g.10gb")]);
        let (devs, _, _) = partitions(&[gpu(0, &later, "")], &mut IndexBook::kept_in(file.clone()));
        let got: Vec<(&str, u32)> = devs.iter().map(|d| (d.id.as_str(), d.index)).collect();
        assert_eq!(got, vec![("MIG-b", 1), ("MIG-c", 2)]);
        // A file that is not a book is numbered afresh.
        std::fs::write(&file, "garbage").unwrap();
        let (devs, _, _) = partitions(&[gpu(0, &later, "")], &mut IndexBook::kept_in(file));
        assert_eq!(devs[0].index, 0);
    }

    #[test]
    fn a_name_without_a_profile_is_left_out_and_said() {
        let mut m = migs(&[(0, "MIG-a", "1g.10gb")]);
        m[0].name = "Odd".into();
        let (devs, _, w) = partitions(&[gpu(0, &m, "")], &mut IndexBook::default());
        assert!(devs.is_empty());
        assert!(w[0].contains("MIG-a"), "{w:?}");
    }
}

//! AWS Neuron devices and EFA interfaces, read from sysfs.
//!
//! Both sources take the root of the filesystem (`/` on a node, a fixture tree in tests) and
//! read `<root>/sys/class/...`, following the class symlinks into `<root>/sys/devices/...` as
//! the kernel lays them out. A missing class directory means no driver: no devices, no error.
//!
//! Neuron (the `neuron` driver, class `neuron_device`): one `neuronN` entry per device. Read:
//! `core_count` (NeuronCores per device, written without a newline; `neuron_coreN/` directories
//! are counted when it cannot be read), `info/architecture/device_name` (`Trainium1`,
//! `Trainium2`, `Inferentia2`), `reset` (the device state: 0 resetting, 1 ready, 2 invalid),
//! `stats/hardware/{mem_ecc_uncorrected,sram_ecc_uncorrected}`. Other entries of the class
//! directory (`node_id_2`, `server_id_4`, `ultraserver_mode`) are class attributes, skipped.
//! Neuron devices have no parent device in sysfs, so their PCI address is not there (it is
//! left empty unless a `device` link exists), and no file gives their memory size: it comes
//! from the catalog's `accelerator_memory_gib` when the instance type is a Neuron type.
//! A device is unhealthy while its state is invalid (a reset failed) or when it has counted
//! uncorrected HBM or SRAM ECC errors (counts since the driver loaded; the repairable HBM count
//! is not a fault). Health is read afresh at each discovery.
//!
//! EFA (the `efa` driver, class `infiniband`): an entry is an EFA interface when its
//! `device/driver` link names the `efa` driver, or, without that link, when its name starts
//! with `efa` (`efa_0`; newer AMIs rename them `rdmapNsM`, caught by the driver link). Other
//! RDMA devices (`mlx5_0`) are skipped. Read: the `device` link (PCI address),
//! `device/device` (PCI device id, `0xefa1`), `ports/*/state` (`4: ACTIVE`).
//! An interface with a port not ACTIVE is **reported, unhealthy** (`port 1 DOWN`), not left
//! out: capacity counts every interface the node has, and the coordinator decides what an
//! unhealthy device means. Interfaces are indexed 0.. in natural name order (efa_2 < efa_10).

use std::fs;
use std::path::{Path, PathBuf};

use allot_common::api::DeviceInfo;
use allot_common::resource::{EFA, NEURON};

use super::DeviceSource;

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn read_u64(p: &Path) -> Option<u64> {
    read_trim(p)?.parse().ok()
}

/// The last component of a symlink's target (`../../../0000:10:1c.0` → `0000:10:1c.0`).
fn link_name(p: &Path) -> Option<String> {
    let target = fs::read_link(p).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// `neuron12` → 12 for `prefix` "neuron"; `None` for anything else (`neuron_core0`, `node_id_2`).
fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

fn list_dir(dir: &Path) -> Result<Vec<String>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// The most NeuronCores one Neuron device may report (real devices have 2 to 8). The executor
/// numbers a pod's cores `device index × cores per device ..`, so a larger count, which can only
/// come from a corrupt file, is refused during discovery.
pub const MAX_CORES_PER_DEVICE: u32 = 256;

/// The NeuronCores per device from the text of `path` (a `core_count` file): a whole number
/// from 0 to [`MAX_CORES_PER_DEVICE`]; anything else is an error naming the file and value.
fn parse_core_count(path: &Path, text: &str) -> Result<u32, String> {
    match text.parse::<u64>() {
        Ok(n) if n <= u64::from(MAX_CORES_PER_DEVICE) => Ok(n as u32),
        _ => Err(format!(
            "{}: core count {text:?} is not a whole number from 0 to {MAX_CORES_PER_DEVICE}",
            path.display()
        )),
    }
}

/// Neuron devices under `<root>/sys/class/neuron_device`.
pub struct NeuronSysfs {
    class_dir: PathBuf,
    model_fallback: String,
    memory_mib: u64,
}

impl NeuronSysfs {
    /// `model` and `memory_mib` are used where sysfs does not say (the catalog's values for a
    /// Neuron instance type).
    pub fn new(root: &Path, model: &str, memory_mib: u64) -> NeuronSysfs {
        NeuronSysfs {
            class_dir: root.join("sys/class/neuron_device"),
            model_fallback: model.to_string(),
            memory_mib,
        }
    }

    fn device(&self, name: &str, index: u32) -> DeviceInfo {
        let dir = self.class_dir.join(name);
        let file = dir.join("core_count");
        // A core_count that is not a whole number from 0 to MAX_CORES_PER_DEVICE is treated as
        // unreadable, with a warning: the cores are counted from the `neuron_coreN` directories
        // instead (the driver's own listing, the fallback when the file is missing), and when
        // those are missing or as implausible too, the count is 0, unknown. Trusting a corrupt
        // count would make the executor hand pods core numbers that do not exist (or lists of
        // billions of them); an unknown count only loses the core numbering.
        let cores = read_trim(&file)
            .and_then(|text| {
                parse_core_count(&file, &text)
                    .map_err(|e| {
                        tracing::warn!("{e}; counting its neuron_coreN directories instead")
                    })
                    .ok()
            })
            .unwrap_or_else(|| {
                let n = list_dir(&dir)
                    .unwrap_or_default()
                    .iter()
                    .filter(|n| numbered(n, "neuron_core").is_some())
                    .count();
                u32::try_from(n)
                    .ok()
                    .filter(|n| *n <= MAX_CORES_PER_DEVICE)
                    .unwrap_or(0)
            });
        let model = read_trim(&dir.join("info/architecture/device_name"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.model_fallback.clone());
        let mut problems = Vec::new();
        if read_trim(&dir.join("reset")).as_deref() == Some("2") {
            problems.push("device state invalid (a reset failed)".to_string());
        }
        let hw = dir.join("stats/hardware");
        for (file, what) in [
            ("mem_ecc_uncorrected", "HBM"),
            ("sram_ecc_uncorrected", "SRAM"),
        ] {
            if let Some(n) = read_u64(&hw.join(file)).filter(|n| *n > 0) {
                let s = if n == 1 { "" } else { "s" };
                problems.push(format!("ECC: {n} uncorrected {what} error{s}"));
            }
        }
        let reason = problems.join("; ");
        DeviceInfo {
            resource: NEURON.to_string(),
            index,
            id: name.to_string(),
            model,
            memory_mib: self.memory_mib,
            pci_bus_id: link_name(&dir.join("device")).unwrap_or_default(),
            mig: false,
            cores,
            healthy: reason.is_empty(),
            reason,
        }
    }
}

impl DeviceSource for NeuronSysfs {
    fn name(&self) -> &'static str {
        "neuron-sysfs"
    }

    fn discover(&mut self) -> Result<Vec<DeviceInfo>, String> {
        if !self.class_dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut out: Vec<DeviceInfo> = list_dir(&self.class_dir)?
            .iter()
            .filter_map(|n| numbered(n, "neuron").map(|i| self.device(n, i)))
            .collect();
        out.sort_by_key(|d| d.index);
        Ok(out)
    }
}

/// EFA interfaces under `<root>/sys/class/infiniband`.
pub struct EfaSysfs {
    class_dir: PathBuf,
}

/// Natural order: `efa_2` before `efa_10`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (head.to_string(), tail.parse().unwrap_or(0))
}

impl EfaSysfs {
    pub fn new(root: &Path) -> EfaSysfs {
        EfaSysfs {
            class_dir: root.join("sys/class/infiniband"),
        }
    }

    /// EFA interfaces in the order discovery numbers them, each with its user-space verbs
    /// device (`uverbsN` under `/dev/infiniband`), which is what a container opens: EFA `i` of
    /// a placement is `/dev/infiniband/<verbs[i]>`, whatever order the kernel numbered them in.
    pub fn verbs_devices(&self) -> Vec<(String, Option<String>)> {
        let Ok(all) = list_dir(&self.class_dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = all.into_iter().filter(|n| self.is_efa(n)).collect();
        names.sort_by_key(|n| natural_key(n));
        names
            .into_iter()
            .map(|n| {
                let verbs = list_dir(&self.class_dir.join(&n).join("device/infiniband_verbs"))
                    .ok()
                    .and_then(|v| v.into_iter().find(|x| x.starts_with("uverbs")));
                (n, verbs)
            })
            .collect()
    }

    fn is_efa(&self, name: &str) -> bool {
        match link_name(&self.class_dir.join(name).join("device/driver")) {
            Some(driver) => driver == "efa",
            None => name.starts_with("efa"),
        }
    }

    fn device(&self, name: &str, index: u32) -> DeviceInfo {
        let dir = self.class_dir.join(name);
        let model = match read_trim(&dir.join("device/device")) {
            Some(id) if !id.is_empty() => format!("EFA ({id})"),
            _ => "EFA".to_string(),
        };
        let mut problems = Vec::new();
        match list_dir(&dir.join("ports")) {
            Ok(ports) if !ports.is_empty() => {
                for p in ports {
                    let state = read_trim(&dir.join("ports").join(&p).join("state"));
                    // `4: ACTIVE`; the name after the colon is what people recognise.
                    let label = state
                        .as_deref()
                        .map(|s| s.split_once(':').map_or(s, |(_, n)| n.trim()).to_string());
                    match label.as_deref() {
                        Some("ACTIVE") => {}
                        Some(l) => problems.push(format!("port {p} {l}")),
                        None => problems.push(format!("port {p} state unreadable")),
                    }
                }
            }
            _ => problems.push("no ports".to_string()),
        }
        let reason = problems.join("; ");
        DeviceInfo {
            resource: EFA.to_string(),
            index,
            id: name.to_string(),
            model,
            memory_mib: 0,
            pci_bus_id: link_name(&dir.join("device")).unwrap_or_default(),
            mig: false,
            cores: 0,
            healthy: reason.is_empty(),
            reason,
        }
    }
}

impl DeviceSource for EfaSysfs {
    fn name(&self) -> &'static str {
        "efa-sysfs"
    }

    fn discover(&mut self) -> Result<Vec<DeviceInfo>, String> {
        if !self.class_dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut names: Vec<String> = list_dir(&self.class_dir)?
            .into_iter()
            .filter(|n| self.is_efa(n))
            .collect();
        names.sort_by_key(|n| natural_key(n));
        Ok(names
            .iter()
            .enumerate()
            .map(|(i, n)| self.device(n, i as u32))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_names() {
        assert_eq!(numbered("neuron12", "neuron"), Some(12));
        assert_eq!(numbered("neuron_core0", "neuron"), None);
        assert_eq!(numbered("neuron", "neuron"), None);
        assert_eq!(numbered("node_id_2", "neuron"), None);
        assert_eq!(numbered("neuron_core3", "neuron_core"), Some(3));
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["efa_10", "efa_2", "efa_0", "rdmap16s27"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, ["efa_0", "efa_2", "efa_10", "rdmap16s27"]);
    }

    #[test]
    fn core_counts_above_the_limit_are_refused() {
        let p = Path::new("/sys/class/neuron_device/neuron0/core_count");
        assert_eq!(parse_core_count(p, "8"), Ok(8));
        assert_eq!(parse_core_count(p, "256"), Ok(MAX_CORES_PER_DEVICE));
        for bad in ["257", "4294967295", "99999999999999999999", "-1", "eight"] {
            let e = parse_core_count(p, bad).unwrap_err();
            assert!(
                e.contains(&p.display().to_string())
                    && e.contains(&format!("{bad:?}"))
                    && e.contains("from 0 to 256"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_huge_core_count_falls_back_to_the_core_directories() {
        let root = tempfile::tempdir().unwrap();
        let class = root.path().join("sys/class/neuron_device");
        for (dev, count, dirs) in [("neuron0", "4294967295", 2), ("neuron1", "100000", 0)] {
            let d = class.join(dev);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("core_count"), count).unwrap();
            for i in 0..dirs {
                fs::create_dir_all(d.join(format!("neuron_core{i}"))).unwrap();
            }
        }
        let devs = NeuronSysfs::new(root.path(), "Trainium1", 0)
            .discover()
            .unwrap();
        // The directories' count where there are some; else unknown (0).
        assert_eq!(devs.iter().map(|d| d.cores).collect::<Vec<_>>(), [2, 0]);
    }

    #[test]
    fn each_efa_interface_has_its_own_verbs_device() {
        let root = tempfile::tempdir().unwrap();
        let class = root.path().join("sys/class/infiniband");
        // EFA by driver (rdmap names, as on p5) and a non-EFA device; the kernel's verbs
        // numbers need not follow the interfaces' order, and one has no verbs device.
        for (dev, driver, verbs) in [
            ("rdmap2s0", "efa", Some("uverbs3")),
            ("rdmap10s0", "efa", Some("uverbs0")),
            ("rdmap16s0", "efa", None),
            ("mlx5_0", "mlx5_core", Some("uverbs1")),
        ] {
            let d = class.join(dev).join("device");
            fs::create_dir_all(&d).unwrap();
            std::os::unix::fs::symlink(format!("../../drivers/{driver}"), d.join("driver"))
                .unwrap();
            if let Some(v) = verbs {
                fs::create_dir_all(d.join("infiniband_verbs").join(v)).unwrap();
            }
        }
        let mut efa = EfaSysfs::new(root.path());
        let ids: Vec<String> = efa.discover().unwrap().into_iter().map(|d| d.id).collect();
        let v = efa.verbs_devices();
        let got: Vec<(&str, Option<&str>)> =
            v.iter().map(|(n, x)| (n.as_str(), x.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("rdmap10s0", Some("uverbs0")),
                ("rdmap16s0", None),
                ("rdmap2s0", Some("uverbs3")),
            ]
        );
        // The same order as discovery numbers the interfaces.
        assert_eq!(ids, ["rdmap10s0", "rdmap16s0", "rdmap2s0"]);
    }

    #[test]
    fn missing_class_directories_mean_no_devices() {
        let dir = tempfile::tempdir().unwrap();
        assert!(NeuronSysfs::new(dir.path(), "x", 0)
            .discover()
            .unwrap()
            .is_empty());
        assert!(EfaSysfs::new(dir.path()).discover().unwrap().is_empty());
    }
}

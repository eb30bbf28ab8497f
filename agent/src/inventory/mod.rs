//! Inventory discovery: what a node offers the scheduler, and the health of its devices.
//!
//! Sources of devices implement [`DeviceSource`]: NVIDIA GPUs through NVML ([`nvml`]), AWS
//! Neuron devices and EFA interfaces from sysfs ([`sysfs`]), and fake GPUs ([`fake`], for
//! `--fake-gpus N`). [`Discovery`] combines them with the instance type (resolved and checked
//! against the catalog by [`resolve_instance_type`]) and the host's vCPUs and memory
//! ([`host`]) into a [`NodeInventory`].
//!
//! The agent re-discovers periodically and reports the inventory whenever it differs from the
//! last one reported, not only at registration:
//!
//! ```no_run
//! # use std::time::Duration;
//! # use allot_agent::inventory::{Discovery, InventoryConfig};
//! let mut discovery = Discovery::new(&InventoryConfig::default()).unwrap();
//! let mut reported = None;
//! loop {
//!     let inventory = discovery.discover();
//!     if reported.as_ref() != Some(&inventory) {
//!         // send a NodeReport built from `inventory`
//!         reported = Some(inventory);
//!     }
//!     // Returns early when a GPU turns unhealthy (an NVML event), else after the period.
//!     discovery.watch(Duration::from_secs(30));
//! }
//! ```
//!
//! # Capacity
//!
//! With fake GPUs, capacity is the catalog instance type's resources with `gpu` set to N, and
//! nothing else is probed (sysfs and the host are left alone, so a laptop can pose as any node).
//!
//! Otherwise:
//! - `cpu` and `memory` come from the catalog, since HyperPod task governance counts raw
//!   instance capacity; a warning says when the host has fewer vCPUs than the catalog, or less
//!   than 90% of its memory (the kernel reports a few percent less than the nominal size, so
//!   an exact comparison would always warn).
//! - A type the catalog does not list (but named as SageMaker names types, `ml.x9.48xlarge`)
//!   is accepted: `cpu` and `memory` are the host's, also with fake GPUs, and the coordinator
//!   learns the type's figures from the first such node.
//! - [`sources`] says where each figure came from; `get nodes` shows it.
//! - `gpu`, `neuron` and `efa` are the numbers of devices discovered, healthy or not: health is
//!   reported per device in `devices` and the coordinator decides what to do with it. A warning
//!   says when a count differs from the catalog's (not for a count no source of the catalog
//!   gives: the GPUs of `ml.g7.*`, the EFA interfaces of most CPU types).
//! - A source that fails (NVML stops answering, sysfs unreadable) is a warning; the devices it
//!   found last time are still reported, unhealthy, with the failure as the reason, so a node
//!   does not silently shrink.

pub mod fake;
pub mod host;
pub mod nvml;
pub mod partitions;
pub mod sysfs;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use allot_common::api::DeviceInfo;
use allot_common::catalog::{Catalog, InstanceType};
use allot_common::resource::{ResourceName, Resources, EFA, GPU, NEURON};
use serde::{Deserialize, Serialize};

pub use fake::{FakeNvml, FakeNvmlHandle};
pub use host::{HostFacts, HostProbe, StaticHost, SysinfoHost};
pub use nvml::{open_nvml, GpuFacts, NvmlApi, NvmlSource};
pub use partitions::Partition;
pub use sysfs::{EfaSysfs, NeuronSysfs};

/// Environment variable naming the instance type (what `--instance-type` sets).
pub const ENV_INSTANCE_TYPE: &str = "ALLOT_INSTANCE_TYPE";
/// Environment variable deploy manifests fill from the node's
/// `node.kubernetes.io/instance-type` label.
pub const ENV_NODE_INSTANCE_TYPE: &str = "NODE_INSTANCE_TYPE";

/// The most fake GPUs a node may have: the coordinator tracks at most 64 devices of one kind
/// per node (`allot_core::nodes::MAX_DEVICES`) and refuses a node with more.
pub const MAX_FAKE_GPUS: u32 = 64;

/// Refuses more fake GPUs than a node may have; `flag` is the option that set them.
pub fn check_fake_gpus(flag: &str, n: u32) -> Result<(), String> {
    if n > MAX_FAKE_GPUS {
        return Err(format!(
            "{flag} {n}: use 0 to {MAX_FAKE_GPUS} (the most devices of one kind a node may have)"
        ));
    }
    Ok(())
}

/// How the agent discovers its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryConfig {
    /// `--instance-type` / `ALLOT_INSTANCE_TYPE`.
    pub instance_type: Option<String>,
    /// A file holding the instance type (written by an init container).
    pub instance_type_file: Option<PathBuf>,
    /// The filesystem root sysfs is found under: the sources read `<root>/sys/class/...`.
    /// `/` on a node; a fixture tree in tests.
    pub sysfs_root: PathBuf,
    /// `Some(n)`: `n` fake GPUs instead of NVML, and nothing else probed.
    pub fake_gpus: Option<u32>,
    /// Fake GPUs in MIG mode: each GPU's index and its MIG devices' profiles
    /// (`--fake-mig`, read by [`fake::parse_fake_mig`]).
    pub fake_mig: Vec<(u32, Vec<String>)>,
    /// Try NVML (ignored when `fake_gpus` is set).
    pub nvml: bool,
    /// Where the indices given to GPU partitions are kept across restarts (the agent's data
    /// directory); `None`: in memory only.
    pub partition_indices: Option<PathBuf>,
}

impl Default for InventoryConfig {
    fn default() -> Self {
        InventoryConfig {
            instance_type: None,
            instance_type_file: None,
            sysfs_root: PathBuf::from("/"),
            fake_gpus: None,
            fake_mig: Vec::new(),
            nvml: true,
            partition_indices: None,
        }
    }
}

/// What a node offers and what it has, at one discovery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInventory {
    pub instance_type: String,
    /// What the node offers the scheduler (see the module docs for the rules).
    pub capacity: Resources,
    /// Every device found, healthy or not, sorted by (resource, index).
    pub devices: Vec<DeviceInfo>,
    /// What looks wrong: `discovered 7 GPUs, the catalog says ml.p4d.24xlarge has 8`.
    pub warnings: Vec<String>,
    /// Where each capacity figure came from, by resource (see [`sources`]).
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// What each GPU partition among `devices` stands for (see [`partitions`]).
    #[serde(default)]
    pub partitions: Vec<Partition>,
}

/// A source of devices; NVML, Neuron sysfs, EFA sysfs and fake GPUs implement it.
pub trait DeviceSource: Send {
    fn name(&self) -> &'static str;
    /// The devices present now, with their health.
    fn discover(&mut self) -> Result<Vec<DeviceInfo>, String>;
    /// Whether the source learns of health changes between discoveries (NVML events).
    fn watches_events(&self) -> bool {
        false
    }
    /// Waits up to `timeout_ms` for health events; true when a device's health changed.
    fn wait_for_events(&mut self, _timeout_ms: u32) -> bool {
        false
    }
    /// The GPU partitions among the devices of the last discovery (NVML's MIG devices).
    fn partitions(&self) -> Vec<Partition> {
        Vec::new()
    }
    /// What the last discovery found odd, for the inventory's warnings.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Instance type names the catalog knows, as suggestions when a name is unknown.
const EXAMPLE_TYPES: [&str; 5] = [
    "ml.g5.xlarge",
    "ml.p4d.24xlarge",
    "ml.p5.48xlarge",
    "ml.trn1.32xlarge",
    "ml.trn2.48xlarge",
];

/// The family of an instance type name: `ml.p5.48xlarge` and `p5.4xlarge` → `p5`.
fn family(name: &str) -> &str {
    let n = name.strip_prefix("ml.").unwrap_or(name);
    n.split('.').next().unwrap_or(n)
}

/// Checks `value` against the catalog; `origin` says where it came from, for the error.
/// A name without the `ml.` prefix (the EC2 form of the label, `p5.48xlarge`) is accepted when
/// the catalog has it with the prefix.
pub fn check_instance_type(value: &str, origin: &str) -> Result<String, String> {
    let catalog = Catalog::builtin();
    if catalog.get(value).is_ok() {
        return Ok(value.to_string());
    }
    if !value.starts_with("ml.") {
        let prefixed = format!("ml.{value}");
        if catalog.get(&prefixed).is_ok() {
            return Ok(prefixed);
        }
    }
    // A name of the API's form the catalog does not list (`ml.x9.48xlarge`): accepted; its
    // vCPUs and memory come from the host, and the coordinator learns the type from it.
    if plausible_instance_type(value) {
        return Ok(value.to_string());
    }
    let fam = family(value);
    let mut suggest: Vec<&str> = catalog.names().filter(|n| family(n) == fam).collect();
    if suggest.is_empty() {
        suggest = EXAMPLE_TYPES
            .iter()
            .copied()
            .filter(|n| catalog.get(n).is_ok())
            .collect();
    }
    suggest.truncate(6);
    Err(format!(
        "{value:?} (from {origin}) is not an instance type name (ml.FAMILY.SIZE): use one of the {} \
         types in the catalog, such as {}, or the name of the node's type; set it with \
         --instance-type or {ENV_INSTANCE_TYPE}",
        catalog.names().count(),
        suggest.join(", ")
    ))
}

/// The node's instance type: `flag` (`--instance-type`), else the contents of `file`, else the
/// environment's `ALLOT_INSTANCE_TYPE`, else `NODE_INSTANCE_TYPE` (the
/// `node.kubernetes.io/instance-type` label passed in by deploy manifests). The first one given
/// is used and must be in the catalog; a later one does not stand in for a wrong earlier one.
pub fn resolve_instance_type(
    flag: Option<&str>,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let given = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    if let Some(v) = given(flag.map(str::to_string)) {
        return check_instance_type(&v, "--instance-type");
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read the instance type file {}: {e}; write the type there or pass \
                 --instance-type",
                path.display()
            )
        })?;
        let v = given(Some(text)).ok_or_else(|| {
            format!(
                "the instance type file {} is empty; write the type (such as ml.p5.48xlarge) \
                 there or pass --instance-type",
                path.display()
            )
        })?;
        return check_instance_type(&v, &format!("the file {}", path.display()));
    }
    if let Some(v) = given(env(ENV_INSTANCE_TYPE)) {
        return check_instance_type(&v, ENV_INSTANCE_TYPE);
    }
    if let Some(v) = given(env(ENV_NODE_INSTANCE_TYPE)) {
        return check_instance_type(
            &v,
            &format!("{ENV_NODE_INSTANCE_TYPE}, the node.kubernetes.io/instance-type label"),
        );
    }
    Err(format!(
        "no instance type: pass --instance-type (such as ml.p5.48xlarge), set \
         {ENV_INSTANCE_TYPE}, or pass the node's node.kubernetes.io/instance-type label as \
         {ENV_NODE_INSTANCE_TYPE}"
    ))
}

/// `ml.FAMILY.SIZE`: lowercase letters, digits and `-`, three parts (SageMaker's instance type
/// names).
fn plausible_instance_type(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() == 3
        && parts[0] == "ml"
        && parts[1..].iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// Where each capacity figure of a node of type `it` comes from: `catalog` (cpu and memory
/// of a listed type, and with fake GPUs everything but the GPUs), `host` (cpu and memory of a
/// type the catalog does not list), `nvml` or `fake` (GPUs), `sysfs` (Neuron devices, EFA).
pub fn sources(it: &InstanceType, fake_gpus: Option<u32>) -> BTreeMap<String, String> {
    let base = if it.catalogued { "catalog" } else { "host" };
    let mut out: BTreeMap<String, String> = [
        ("cpu".to_string(), base.to_string()),
        ("memory".to_string(), base.to_string()),
    ]
    .into();
    match fake_gpus {
        Some(_) => {
            out.insert(GPU.into(), "fake".into());
            out.insert(EFA.into(), "catalog".into());
            if it.neuron > 0 {
                out.insert(NEURON.into(), "catalog".into());
            }
        }
        None => {
            out.insert(GPU.into(), "nvml".into());
            out.insert(NEURON.into(), "sysfs".into());
            out.insert(EFA.into(), "sysfs".into());
        }
    }
    out
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// Capacity and warnings for `devices` on a node of type `it` (rules in the module docs).
/// `fake_gpus`: the node runs fake GPUs; `host`: what the host reported, if probed.
pub fn capacity(
    it: &InstanceType,
    devices: &[DeviceInfo],
    host: Option<HostFacts>,
    fake_gpus: Option<u32>,
) -> (Resources, Vec<String>) {
    let mut cap = it.resources();
    let mut warnings = Vec::new();
    if !it.catalogued {
        match &host {
            Some(h) => {
                cap.set(ResourceName::cpu(), i64::from(h.vcpus) * 1000);
                cap.set(
                    ResourceName::memory(),
                    i64::try_from(h.memory_bytes).unwrap_or(i64::MAX),
                );
            }
            None => warnings.push(format!(
                "{} is not in the catalog and the host's vCPUs and memory could not be read: \
                 the node offers no cpu or memory",
                it.name
            )),
        }
        warnings.push(format!(
            "{} is not in the catalog: cpu and memory are the host's, devices as discovered",
            it.name
        ));
    }
    partition_capacity(devices, &mut cap, &mut warnings);
    if let Some(n) = fake_gpus {
        if n > 0 {
            cap.set(ResourceName::gpu(), i64::from(n));
        } else {
            cap.0.remove(&ResourceName::gpu());
        }
        return (cap, warnings);
    }
    for (res, label, listed) in [
        (ResourceName::gpu(), "GPU", it.gpu),
        (ResourceName::neuron(), "Neuron device", it.neuron),
        (ResourceName::efa(), "EFA interface", it.efa),
    ] {
        let found = devices
            .iter()
            .filter(|d| d.resource == res.as_str())
            .count();
        if found != listed as usize && it.catalogued && it.sourced(&res) {
            warnings.push(format!(
                "discovered {}, the catalog says {} has {listed}",
                plural(found, label),
                it.name
            ));
        }
        if found > 0 {
            cap.set(res, found as i64);
        } else {
            cap.0.remove(&res);
        }
    }
    let neurons: Vec<&DeviceInfo> = devices.iter().filter(|d| d.resource == NEURON).collect();
    let cores = neurons
        .iter()
        .fold(0u32, |sum, d| sum.saturating_add(d.cores));
    if !neurons.is_empty() && it.neuron_cores > 0 && cores != it.neuron_cores {
        warnings.push(format!(
            "discovered {}, the catalog says {} has {}",
            plural(cores as usize, "NeuronCore"),
            it.name,
            it.neuron_cores
        ));
    }
    if let (Some(h), true) = (host, it.catalogued) {
        if h.vcpus < it.vcpu {
            warnings.push(format!(
                "the host has {} vCPUs, fewer than the {} the catalog lists for {}; capacity \
                 keeps the catalog's number",
                h.vcpus, it.vcpu, it.name
            ));
        }
        let listed = u64::from(it.memory_gib) << 30;
        if h.memory_bytes < listed / 10 * 9 {
            warnings.push(format!(
                "the host has {:.1} GiB of memory, less than 90% of the {} GiB the catalog lists \
                 for {}; capacity keeps the catalog's number",
                h.memory_bytes as f64 / f64::from(1u32 << 30),
                it.memory_gib,
                it.name
            ));
        }
    }
    (cap, warnings)
}

/// Each MIG profile's capacity: one past the highest index found (indices stay put while
/// partitions come and go, see [`partitions`]); a GPU in MIG mode is handed out as its
/// partitions only, and one without any offers nothing, which is said.
fn partition_capacity(devices: &[DeviceInfo], cap: &mut Resources, warnings: &mut Vec<String>) {
    for d in devices {
        let Ok(r) = ResourceName::parse(&d.resource) else {
            continue;
        };
        if r.is_partition() && cap.get(&r) <= i64::from(d.index) {
            cap.set(r, i64::from(d.index) + 1);
        }
    }
    for g in devices.iter().filter(|d| d.resource == GPU && d.mig) {
        let carved = devices
            .iter()
            .any(|d| d.resource != GPU && d.mig && d.pci_bus_id == g.pci_bus_id);
        if !carved {
            warnings.push(format!(
                "GPU {} ({}) is in MIG mode and has no MIG devices: nothing on it can be \
                 scheduled until an admin creates some (nvidia-smi mig -cgi ... -C)",
                g.index, g.id
            ));
        }
    }
}

/// The partition profiles among `devices`.
fn inv_partitions(devices: &[DeviceInfo]) -> std::collections::BTreeSet<String> {
    devices
        .iter()
        .filter(|d| ResourceName::parse(&d.resource).is_ok_and(|r| r.is_partition()))
        .map(|d| d.resource.clone())
        .collect()
}

/// What changed between two inventories, one line per change, for logs.
pub fn changes(old: &NodeInventory, new: &NodeInventory) -> Vec<String> {
    let mut out = Vec::new();
    if old.instance_type != new.instance_type {
        out.push(format!(
            "instance type {} -> {}",
            old.instance_type, new.instance_type
        ));
    }
    if old.capacity != new.capacity {
        out.push(format!("capacity {} -> {}", old.capacity, new.capacity));
    }
    let key = |d: &DeviceInfo| (d.resource.clone(), d.id.clone());
    let before: BTreeMap<_, &DeviceInfo> = old.devices.iter().map(|d| (key(d), d)).collect();
    let after: BTreeMap<_, &DeviceInfo> = new.devices.iter().map(|d| (key(d), d)).collect();
    let name = |d: &DeviceInfo| format!("{} {} ({})", d.resource, d.index, d.id);
    for (k, d) in &after {
        match before.get(k) {
            None if d.healthy => out.push(format!("{} appeared", name(d))),
            None => out.push(format!("{} appeared, unhealthy: {}", name(d), d.reason)),
            Some(b) if b.healthy && !d.healthy => {
                out.push(format!("{} turned unhealthy: {}", name(d), d.reason))
            }
            Some(b) if !b.healthy && d.healthy => out.push(format!("{} is healthy again", name(d))),
            Some(b) if b.reason != d.reason => {
                out.push(format!("{} unhealthy: {}", name(d), d.reason))
            }
            Some(b) if b != d => out.push(format!("{} changed", name(d))),
            Some(_) => {}
        }
    }
    for (k, d) in &before {
        if !after.contains_key(k) {
            out.push(format!("{} disappeared", name(d)));
        }
    }
    out
}

struct Slot {
    source: Box<dyn DeviceSource>,
    /// What it found at its last successful discovery.
    last: Vec<DeviceInfo>,
}

/// Discovers a node's inventory from its sources; see the module docs.
pub struct Discovery {
    instance: InstanceType,
    sources: Vec<Slot>,
    host: Option<Box<dyn HostProbe>>,
    fake_gpus: Option<u32>,
    fake: Option<FakeNvmlHandle>,
    /// Why NVML is not used, when it was wanted.
    nvml_error: Option<String>,
    last: Option<NodeInventory>,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery")
            .field("instance_type", &self.instance.name)
            .field(
                "sources",
                &self
                    .sources
                    .iter()
                    .map(|s| s.source.name())
                    .collect::<Vec<_>>(),
            )
            .field("fake_gpus", &self.fake_gpus)
            .field("nvml_error", &self.nvml_error)
            .finish()
    }
}

/// The MIG index book of `cfg` (kept in its file, if it names one).
fn book(cfg: &InventoryConfig) -> partitions::IndexBook {
    cfg.partition_indices
        .clone()
        .map(partitions::IndexBook::kept_in)
        .unwrap_or_default()
}

fn lookup(instance_type: &str) -> Result<InstanceType, String> {
    let name = check_instance_type(instance_type, "the configuration")?;
    Ok(Catalog::builtin()
        .get(&name)
        .cloned()
        .unwrap_or_else(|_| InstanceType::learned(&name, &Resources::new())))
}

/// The catalog's accelerator model and memory (MiB) for `it` when its accelerator counts as
/// `resource`; else `fallback` and 0.
fn catalog_accelerator(it: &InstanceType, resource: &str, fallback: &str) -> (String, u64) {
    match it.accelerator_resource() {
        Some(r) if r.as_str() == resource => (
            it.accelerator_model
                .clone()
                .unwrap_or_else(|| fallback.to_string()),
            u64::from(it.accelerator_memory_gib.unwrap_or(0)) * 1024,
        ),
        _ => (fallback.to_string(), 0),
    }
}

impl Discovery {
    /// Resolves and checks the instance type (see [`resolve_instance_type`], reading the process
    /// environment) and sets up the sources: fake GPUs when `fake_gpus` is set; otherwise NVML
    /// (when `nvml` and it loads; if not, no GPUs), Neuron and EFA sysfs under `sysfs_root`, and
    /// the host through `sysinfo`.
    pub fn new(cfg: &InventoryConfig) -> Result<Discovery, String> {
        let env = |k: &str| std::env::var(k).ok();
        let name = resolve_instance_type(
            cfg.instance_type.as_deref(),
            cfg.instance_type_file.as_deref(),
            &env,
        )?;
        let it = lookup(&name)?;
        if let Some(n) = cfg.fake_gpus {
            check_fake_gpus("--fake-gpus", n)?;
            let (model, memory_mib) = catalog_accelerator(&it, GPU, "Fake GPU");
            let fake = FakeNvml::uniform(n, &model, memory_mib);
            let handle = fake.handle();
            for (gpu, profiles) in &cfg.fake_mig {
                if *gpu >= n {
                    return Err(format!(
                        "--fake-mig names GPU {gpu}, and --fake-gpus {n} makes GPUs 0 to {}",
                        n.saturating_sub(1)
                    ));
                }
                handle.set_mig(*gpu, profiles);
            }
            // A type the catalog does not list takes its vCPUs and memory from the host.
            let host: Option<Box<dyn HostProbe>> = if it.catalogued {
                None
            } else {
                Some(Box::new(SysinfoHost::new()))
            };
            let mut d = Discovery::with_sources(
                &it.name,
                vec![Box::new(NvmlSource::with_book(Box::new(fake), book(cfg)))],
                host,
            )?;
            d.fake_gpus = Some(n);
            d.fake = Some(handle);
            return Ok(d);
        }
        if !cfg.fake_mig.is_empty() {
            return Err("--fake-mig needs --fake-gpus: it lays out fake GPUs".into());
        }
        let mut sources: Vec<Box<dyn DeviceSource>> = Vec::new();
        let mut nvml_error = None;
        if cfg.nvml {
            match open_nvml() {
                Ok(api) => sources.push(Box::new(NvmlSource::with_book(api, book(cfg)))),
                Err(e) => nvml_error = Some(e),
            }
        } else {
            nvml_error = Some("NVML disabled by configuration".to_string());
        }
        let (neuron_model, neuron_mib) = catalog_accelerator(&it, NEURON, "Neuron device");
        sources.push(Box::new(NeuronSysfs::new(
            &cfg.sysfs_root,
            &neuron_model,
            neuron_mib,
        )));
        sources.push(Box::new(EfaSysfs::new(&cfg.sysfs_root)));
        let mut d = Discovery::with_sources(&it.name, sources, Some(Box::new(SysinfoHost::new())))?;
        d.nvml_error = nvml_error;
        Ok(d)
    }

    /// Discovery over the given sources (tests, or a custom set); `host` `None` skips the
    /// host check. Capacity follows the non-fake rules.
    pub fn with_sources(
        instance_type: &str,
        sources: Vec<Box<dyn DeviceSource>>,
        host: Option<Box<dyn HostProbe>>,
    ) -> Result<Discovery, String> {
        Ok(Discovery {
            instance: lookup(instance_type)?,
            sources: sources
                .into_iter()
                .map(|source| Slot {
                    source,
                    last: Vec::new(),
                })
                .collect(),
            host,
            fake_gpus: None,
            fake: None,
            nvml_error: None,
            last: None,
        })
    }

    /// The instance type, as in the catalog.
    pub fn instance_type(&self) -> &str {
        &self.instance.name
    }

    /// With fake GPUs: a handle to inject XIDs, ECC errors and failures into them.
    pub fn fake_gpus(&self) -> Option<FakeNvmlHandle> {
        self.fake.clone()
    }

    /// Why NVML is not used, when it was wanted (no driver, no library, disabled).
    pub fn nvml_error(&self) -> Option<&str> {
        self.nvml_error.as_deref()
    }

    /// The last inventory [`discover`](Self::discover) returned.
    pub fn last(&self) -> Option<&NodeInventory> {
        self.last.as_ref()
    }

    /// Discovers the inventory now. Never panics: a failing (or panicking) source is a warning
    /// and its last known devices are reported unhealthy. Changes since the last call are
    /// logged through `tracing`, as are warnings when they change.
    pub fn discover(&mut self) -> NodeInventory {
        let mut devices = Vec::new();
        let mut warnings = Vec::new();
        let mut partitions = Vec::new();
        for slot in &mut self.sources {
            let name = slot.source.name();
            let found = catch_unwind(AssertUnwindSafe(|| slot.source.discover()))
                .unwrap_or_else(|_| Err("panicked".to_string()));
            match found {
                Ok(devs) => {
                    slot.last = devs.clone();
                    devices.extend(devs);
                    partitions.extend(slot.source.partitions());
                    warnings.extend(slot.source.notes());
                }
                Err(e) => {
                    let why = format!("{name} discovery failed: {e}");
                    for mut d in slot.last.clone() {
                        d.healthy = false;
                        d.reason = if d.reason.is_empty() {
                            why.clone()
                        } else {
                            format!("{}; {why}", d.reason)
                        };
                        devices.push(d);
                    }
                    warnings.push(format!(
                        "{why}; its last known devices are reported unhealthy"
                    ));
                }
            }
        }
        devices.sort_by(|a, b| (&a.resource, a.index).cmp(&(&b.resource, b.index)));
        let host = match &mut self.host {
            None => None,
            Some(h) => match catch_unwind(AssertUnwindSafe(|| h.probe()))
                .unwrap_or_else(|_| Err("panicked".to_string()))
            {
                Ok(f) => Some(f),
                Err(e) => {
                    warnings.push(format!("cannot read the host's vCPUs and memory: {e}"));
                    None
                }
            },
        };
        let (capacity, mut more) = capacity(&self.instance, &devices, host, self.fake_gpus);
        let mut sources = sources(&self.instance, self.fake_gpus);
        let gpu_source = sources.get(GPU).cloned().unwrap_or_default();
        for p in &inv_partitions(&devices) {
            sources.insert(p.clone(), gpu_source.clone());
        }
        if let (Some(e), true) = (&self.nvml_error, self.instance.gpu > 0) {
            warnings.push(format!(
                "{} lists GPUs but NVML is unavailable ({e}): no GPUs can be discovered",
                self.instance.name
            ));
        }
        warnings.append(&mut more);
        let inv = NodeInventory {
            instance_type: self.instance.name.clone(),
            capacity,
            devices,
            warnings,
            sources,
            partitions,
        };
        self.log(&inv);
        self.last = Some(inv.clone());
        inv
    }

    fn log(&self, inv: &NodeInventory) {
        match &self.last {
            None => {
                let count = |r: &str| inv.devices.iter().filter(|d| d.resource == r).count();
                tracing::info!(
                    instance_type = %inv.instance_type,
                    capacity = %inv.capacity,
                    gpus = count(GPU),
                    neuron = count(NEURON),
                    efa = count(EFA),
                    "inventory discovered"
                );
                for d in inv.devices.iter().filter(|d| !d.healthy) {
                    tracing::warn!(device = %d.id, resource = %d.resource, index = d.index, reason = %d.reason, "unhealthy device");
                }
            }
            Some(old) => {
                for c in changes(old, inv) {
                    if c.contains("unhealthy") || c.contains("disappeared") {
                        tracing::warn!("inventory: {c}");
                    } else {
                        tracing::info!("inventory: {c}");
                    }
                }
            }
        }
        if self.last.as_ref().map(|o| &o.warnings) != Some(&inv.warnings) {
            for w in &inv.warnings {
                tracing::warn!("inventory: {w}");
            }
        }
    }

    /// Waits up to `timeout` for device health events (NVML XIDs and ECC errors); returns true
    /// as soon as a device's health changed (then [`discover`](Self::discover) reports it),
    /// false after `timeout`. Without an event source it just sleeps `timeout`.
    pub fn watch(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let watchers: Vec<usize> = (0..self.sources.len())
            .filter(|i| self.sources[*i].source.watches_events())
            .collect();
        if watchers.is_empty() {
            std::thread::sleep(timeout);
            return false;
        }
        loop {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let mut slice = deadline - now;
            if watchers.len() > 1 {
                slice = slice.min(Duration::from_millis(200));
            }
            let ms = u32::try_from(slice.as_millis()).unwrap_or(u32::MAX);
            for &i in &watchers {
                let source = &mut self.sources[i].source;
                let changed =
                    catch_unwind(AssertUnwindSafe(|| source.wait_for_events(ms))).unwrap_or(false);
                if changed {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

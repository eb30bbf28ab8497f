//! NVIDIA GPUs through NVML, and their health.
//!
//! [`NvmlApi`] is the narrow slice of NVML the agent uses, so tests (and `--fake-gpus`) can put
//! [`FakeNvml`](super::fake::FakeNvml) in its place; [`open_nvml`] gives the real one, loading
//! `libnvidia-ml.so` at run time through `nvml-wrapper` (nothing links against it, so the agent
//! builds and runs on machines without a GPU or driver).
//!
//! Health, per GPU (keyed by UUID):
//! - **Events**, watched continuously: XID critical errors and double-bit ECC errors from an NVML
//!   event set. Between discoveries they queue in the event set; [`NvmlSource::discover`] drains
//!   them and [`Discovery::watch`](super::Discovery::watch) blocks on them, so a GPU that turns
//!   unhealthy is reported without waiting for the next period. XIDs that signal an application
//!   fault rather than a broken GPU ([`APPLICATION_XIDS`], the list the NVIDIA Kubernetes device
//!   plugin skips) are logged and leave the GPU healthy.
//! - **Counters**, read at each discovery: uncorrected volatile ECC errors (reset when the driver
//!   loads) and retired pages pending (they need a GPU reset).
//!
//! A GPU that turns unhealthy stays unhealthy until the agent restarts: XIDs are one-off events
//! with no "recovered" counterpart, and the remedies (reset, reboot, driver reload) restart the
//! agent anyway. A GPU whose facts NVML cannot read at one discovery is reported unhealthy for
//! that discovery only (with the last facts read), since the query error may be transient.

use std::collections::BTreeMap;

use allot_common::api::DeviceInfo;
use allot_common::resource::GPU;
use serde::Serialize;

use super::DeviceSource;

/// What NVML says about one GPU at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GpuFacts {
    pub uuid: String,
    pub name: String,
    pub memory_bytes: u64,
    /// As NVML writes it: `00000000:10:1C.0`.
    pub pci_bus_id: String,
    /// MIG mode currently enabled.
    pub mig_enabled: bool,
    /// MIG mode after the next GPU reset (differs from `mig_enabled` while a change waits).
    pub mig_pending: bool,
    /// The MIG devices carved out of this GPU, when MIG mode is on (read-only: the agent never
    /// creates or destroys them).
    pub mig_devices: Vec<MigFacts>,
    /// Uncorrected ECC errors since the driver loaded; `None` when ECC is off or unsupported.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Retired pages waiting for a reset; `None` where unsupported (GPUs that remap rows).
    pub retired_pages_pending: Option<bool>,
}

pub use super::partitions::MigFacts;

/// The driver as NVML reports it; a field NVML cannot read is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NvmlSystem {
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    /// The newest CUDA version the driver supports, `12.8`.
    pub cuda_driver_version: Option<String>,
    /// Health events are watched (an NVML event set); otherwise counters are polled only.
    pub events_watched: bool,
}

/// The device index of an event NVML cannot attribute to one GPU: it applies to all of them.
pub const ALL_GPUS: u32 = u32::MAX;
/// How a double-bit ECC event is reported by [`NvmlApi::poll_events`]: as XID 48, which the
/// driver logs for the same error.
pub const XID_DOUBLE_BIT_ECC: u64 = 48;
/// How a GPU lost while waiting for events is reported: XID 79, "fallen off the bus".
pub const XID_GPU_LOST: u64 = 79;
/// A critical XID event whose XID NVML did not say.
pub const XID_UNKNOWN: u64 = u64::MAX;

/// XIDs caused by the application, not the GPU: the GPU stays healthy. The list the NVIDIA
/// Kubernetes device plugin skips by default: 13 graphics engine exception, 31 GPU memory page
/// fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video processor exception,
/// 109 context switch timeout.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// True for an XID that does not make a GPU unhealthy.
pub fn is_application_xid(xid: u64) -> bool {
    APPLICATION_XIDS.contains(&xid)
}

/// `XID 79: GPU has fallen off the bus`; the bare number for XIDs without a description here.
pub fn xid_reason(xid: u64) -> String {
    let what = match xid {
        XID_UNKNOWN => return "XID unknown".to_string(),
        13 => "graphics engine exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "preemptive cleanup, due to previous errors",
        48 => "double-bit ECC error",
        62 => "internal micro-controller halt",
        63 => "ECC page retirement or row remapping recording event",
        64 => "ECC page retirement or row remapper recording failure",
        68 => "video processor exception",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        109 => "context switch timeout",
        119 => "GSP RPC timeout",
        120 => "GSP error",
        _ => return format!("XID {xid}"),
    };
    format!("XID {xid}: {what}")
}

/// The part of NVML the agent uses. Errors are NVML's messages.
pub trait NvmlApi: Send {
    fn device_count(&self) -> Result<u32, String>;
    /// Facts about the GPU at `index` (0-based, the `CUDA_VISIBLE_DEVICES` index).
    fn device(&self, index: u32) -> Result<GpuFacts, String>;
    /// Health events as `(device index, xid)`: waits up to `timeout_ms` for the first, then
    /// returns it with any others already queued (0 = only what is queued). A double-bit ECC
    /// event is reported as [`XID_DOUBLE_BIT_ECC`]; an event for no particular GPU has the index
    /// [`ALL_GPUS`].
    fn poll_events(&mut self, timeout_ms: u32) -> Vec<(u32, u64)>;
    /// The driver's versions, for `allot agent --discover`.
    fn system(&self) -> NvmlSystem {
        NvmlSystem::default()
    }
}

/// Everything NVML says about this node, for `allot agent --discover`: the driver and every
/// GPU's facts (MIG devices included), or why a GPU could not be read.
#[derive(Clone, Debug, Serialize)]
pub struct NvmlReport {
    #[serde(flatten)]
    pub system: NvmlSystem,
    pub gpus: Vec<GpuReport>,
}

/// One GPU in an [`NvmlReport`]: its facts, or why NVML could not read them.
#[derive(Clone, Debug, Serialize)]
pub struct GpuReport {
    pub index: u32,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub facts: Option<GpuFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Reads an [`NvmlReport`] through `api`.
pub fn report(api: &dyn NvmlApi) -> Result<NvmlReport, String> {
    let count = api.device_count()?;
    Ok(NvmlReport {
        system: api.system(),
        gpus: (0..count)
            .map(|index| match api.device(index) {
                Ok(f) => GpuReport {
                    index,
                    facts: Some(f),
                    error: None,
                },
                Err(e) => GpuReport {
                    index,
                    facts: None,
                    error: Some(e),
                },
            })
            .collect(),
    })
}

/// Why a GPU is unhealthy; one entry per kind, so a growing ECC count replaces its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Problem {
    Xid(u64),
    EccCount,
    RetiredPages,
}

/// GPUs from an [`NvmlApi`], with the sticky health described in the module docs.
pub struct NvmlSource {
    api: Box<dyn NvmlApi>,
    /// Sticky problems per GPU UUID.
    problems: BTreeMap<String, BTreeMap<Problem, String>>,
    /// The last facts read per index (UUIDs attribute events; facts stand in on query errors).
    last: BTreeMap<u32, GpuFacts>,
    /// Events for GPUs not seen yet, applied once they are.
    pending: Vec<(u32, u64)>,
    /// The indices given to MIG devices, and the partitions found last.
    book: super::partitions::IndexBook,
    partitions: Vec<super::Partition>,
    notes: Vec<String>,
}

impl NvmlSource {
    /// With the MIG index book kept in `book` (see `partitions::IndexBook`).
    pub fn with_book(api: Box<dyn NvmlApi>, book: super::partitions::IndexBook) -> NvmlSource {
        NvmlSource {
            book,
            ..NvmlSource::new(api)
        }
    }

    pub fn new(api: Box<dyn NvmlApi>) -> NvmlSource {
        NvmlSource {
            api,
            problems: BTreeMap::new(),
            last: BTreeMap::new(),
            pending: Vec::new(),
            book: Default::default(),
            partitions: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Records a problem; true when it is new or its text changed.
    fn record(&mut self, uuid: &str, problem: Problem, reason: String) -> bool {
        let entry = self.problems.entry(uuid.to_string()).or_default();
        if entry.get(&problem) == Some(&reason) {
            return false;
        }
        tracing::warn!(gpu = %uuid, %reason, "GPU unhealthy; it stays so until the agent restarts");
        entry.insert(problem, reason);
        true
    }

    /// Applies one event; true when a GPU's health changed.
    fn apply_event(&mut self, index: u32, xid: u64) -> bool {
        if is_application_xid(xid) {
            tracing::info!(
                index,
                reason = %xid_reason(xid),
                "application error on GPU; the GPU stays healthy"
            );
            return false;
        }
        let targets: Vec<String> = if index == ALL_GPUS {
            self.last.values().map(|f| f.uuid.clone()).collect()
        } else {
            self.last
                .get(&index)
                .map(|f| f.uuid.clone())
                .into_iter()
                .collect()
        };
        if targets.is_empty() {
            self.pending.push((index, xid));
            return false;
        }
        let mut changed = false;
        for uuid in targets {
            changed |= self.record(&uuid, Problem::Xid(xid), xid_reason(xid));
        }
        changed
    }

    fn apply_events(&mut self, events: Vec<(u32, u64)>) -> bool {
        let mut changed = false;
        for (index, xid) in events {
            changed |= self.apply_event(index, xid);
        }
        changed
    }

    fn reason(&self, uuid: &str) -> String {
        self.problems
            .get(uuid)
            .map(|p| p.values().cloned().collect::<Vec<_>>().join("; "))
            .unwrap_or_default()
    }
}

fn device_info(index: u32, f: &GpuFacts, reason: String) -> DeviceInfo {
    DeviceInfo {
        resource: GPU.to_string(),
        index,
        id: f.uuid.clone(),
        model: f.name.clone(),
        memory_mib: f.memory_bytes >> 20,
        pci_bus_id: f.pci_bus_id.clone(),
        mig: f.mig_enabled,
        cores: 0,
        healthy: reason.is_empty(),
        reason,
    }
}

impl DeviceSource for NvmlSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn discover(&mut self) -> Result<Vec<DeviceInfo>, String> {
        let events = self.api.poll_events(0);
        self.apply_events(events);
        let count = self.api.device_count()?;
        let mut read = Vec::new();
        for index in 0..count {
            let facts = self.api.device(index);
            if let Ok(f) = &facts {
                self.last.insert(index, f.clone());
            }
            read.push((index, facts));
        }
        let pending = std::mem::take(&mut self.pending);
        self.apply_events(pending);
        let mut out = Vec::new();
        let mut partitioned = Vec::new();
        for (index, facts) in read {
            match facts {
                Ok(f) => {
                    if let Some(n) = f.ecc_uncorrected_volatile.filter(|n| *n > 0) {
                        let s = if n == 1 { "" } else { "s" };
                        self.record(
                            &f.uuid,
                            Problem::EccCount,
                            format!("ECC: {n} uncorrected error{s}"),
                        );
                    }
                    if f.retired_pages_pending == Some(true) {
                        self.record(
                            &f.uuid,
                            Problem::RetiredPages,
                            "retired pages pending".to_string(),
                        );
                    }
                    let reason = self.reason(&f.uuid);
                    out.push(device_info(index, &f, reason.clone()));
                    if f.mig_enabled {
                        partitioned.push((index, f, reason));
                    }
                }
                Err(e) => {
                    let f = self.last.get(&index).cloned().unwrap_or_else(|| GpuFacts {
                        uuid: format!("GPU-unreadable-{index}"),
                        name: "unknown".to_string(),
                        ..GpuFacts::default()
                    });
                    let sticky = self.reason(&f.uuid);
                    let mut reason = format!("NVML cannot read the GPU: {e}");
                    if !sticky.is_empty() {
                        reason = format!("{sticky}; {reason}");
                    }
                    out.push(device_info(index, &f, reason.clone()));
                    // Its partitions as last read, unhealthy with it: forgetting them would
                    // give them other indices once the GPU reads again.
                    if f.mig_enabled {
                        partitioned.push((index, f, reason));
                    }
                }
            }
        }
        let gpus: Vec<super::partitions::PartitionedGpu<'_>> = partitioned
            .iter()
            .map(|(index, f, reason)| super::partitions::PartitionedGpu {
                index: *index,
                pci_bus_id: &f.pci_bus_id,
                migs: &f.mig_devices,
                reason: reason.clone(),
            })
            .collect();
        let (devices, parts, notes) = super::partitions::partitions(&gpus, &mut self.book);
        out.extend(devices);
        self.partitions = parts;
        self.notes = notes;
        Ok(out)
    }

    fn partitions(&self) -> Vec<super::Partition> {
        self.partitions.clone()
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn watches_events(&self) -> bool {
        true
    }

    fn wait_for_events(&mut self, timeout_ms: u32) -> bool {
        let events = self.api.poll_events(timeout_ms);
        self.apply_events(events)
    }
}

/// The real NVML, loaded once per process. When it cannot be loaded (no driver, no library,
/// no permission) that is logged once at info level and every call returns the same error:
/// installing the driver later needs an agent restart.
pub fn open_nvml() -> Result<Box<dyn NvmlApi>, String> {
    real::open()
}

mod real {
    use std::sync::OnceLock;
    use std::time::Duration;

    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::structs::device::MigMode;
    use nvml_wrapper::{Device, Nvml};

    use super::{GpuFacts, MigFacts, NvmlApi, NvmlSystem};

    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

    pub(super) fn open() -> Result<Box<dyn NvmlApi>, String> {
        let nvml = NVML.get_or_init(|| match Nvml::init() {
            Ok(n) => Ok(n),
            Err(e) => {
                let e = e.to_string();
                tracing::info!(error = %e, "NVML unavailable (no NVIDIA driver or library): no GPUs");
                Err(e)
            }
        });
        let nvml = nvml.as_ref().map_err(Clone::clone)?;
        Ok(Box::new(RealNvml {
            nvml,
            events: events::register(nvml),
            warned: false,
        }))
    }

    struct RealNvml {
        nvml: &'static Nvml,
        events: Option<events::Set>,
        /// A failing event wait was logged (once).
        warned: bool,
    }

    /// Unsupported optional readings become `None`; other errors too, since health events and
    /// the remaining readings still say something.
    fn optional<T>(r: Result<T, NvmlError>) -> Option<T> {
        r.ok()
    }

    /// A MIG device's GPU instance and compute instance ids. `nvml-wrapper` has no call for
    /// them, so they are read through the library's own functions (looked up when it loaded;
    /// `None` where the driver lacks them or answers an error).
    fn instance_ids(m: &Device<'_>) -> (Option<u32>, Option<u32>) {
        let lib = m.nvml().lib();
        // SAFETY: the handle belongs to `m`, a MIG device alive for this call, and each
        // function takes a device handle and a pointer to one unsigned int that outlives the
        // call; a function the library lacks is not called.
        let handle = unsafe { m.handle() };
        macro_rules! read {
            ($f:expr) => {
                match $f.as_ref() {
                    Ok(f) => {
                        let mut id: std::os::raw::c_uint = 0;
                        let rc = unsafe { f(handle, &mut id) };
                        (rc == 0).then_some(id)
                    }
                    Err(_) => None,
                }
            };
        }
        (
            read!(lib.nvmlDeviceGetGpuInstanceId),
            read!(lib.nvmlDeviceGetComputeInstanceId),
        )
    }

    /// The MIG devices present on `d` (empty slots answer NotFound and are skipped; a slot
    /// that cannot be read is skipped too, as the parent's other readings still hold).
    fn mig_devices(d: &Device<'_>) -> Vec<MigFacts> {
        let max = d.mig_device_count().unwrap_or(0);
        (0..max)
            .filter_map(|index| {
                let m = d.mig_device_by_index(index).ok()?;
                let (gpu_instance, compute_instance) = instance_ids(&m);
                Some(MigFacts {
                    index,
                    uuid: m.uuid().ok()?,
                    name: m.name().unwrap_or_default(),
                    memory_bytes: m.memory_info().map(|i| i.total).unwrap_or(0),
                    gpu_instance,
                    compute_instance,
                })
            })
            .collect()
    }

    fn facts(d: &Device<'_>) -> Result<GpuFacts, NvmlError> {
        // GPUs without MIG support answer NotSupported: MIG off.
        let mig = d.mig_mode().unwrap_or(MigMode {
            current: 0,
            pending: 0,
        });
        Ok(GpuFacts {
            uuid: d.uuid()?,
            name: d.name()?,
            memory_bytes: d.memory_info()?.total,
            pci_bus_id: d.pci_info()?.bus_id,
            mig_enabled: mig.current == 1,
            mig_pending: mig.pending == 1,
            mig_devices: if mig.current == 1 {
                mig_devices(d)
            } else {
                Vec::new()
            },
            ecc_uncorrected_volatile: optional(
                d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            ),
            retired_pages_pending: optional(d.are_pages_pending_retired()),
        })
    }

    impl NvmlApi for RealNvml {
        fn device_count(&self) -> Result<u32, String> {
            self.nvml.device_count().map_err(|e| e.to_string())
        }

        fn device(&self, index: u32) -> Result<GpuFacts, String> {
            let d = self
                .nvml
                .device_by_index(index)
                .map_err(|e| e.to_string())?;
            facts(&d).map_err(|e| e.to_string())
        }

        fn system(&self) -> NvmlSystem {
            NvmlSystem {
                driver_version: optional(self.nvml.sys_driver_version()),
                nvml_version: optional(self.nvml.sys_nvml_version()),
                // NVML encodes 12.8 as 12080.
                cuda_driver_version: optional(self.nvml.sys_cuda_driver_version())
                    .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)),
                events_watched: self.events.is_some(),
            }
        }

        fn poll_events(&mut self, timeout_ms: u32) -> Vec<(u32, u64)> {
            let Some(set) = &self.events else {
                std::thread::sleep(Duration::from_millis(u64::from(timeout_ms)));
                return Vec::new();
            };
            match events::poll(set, timeout_ms) {
                (v, None) => v,
                (v, Some(e)) => {
                    if !self.warned {
                        tracing::warn!(error = %e, "waiting for NVML events failed");
                        self.warned = true;
                    }
                    // Do not spin on a wait that fails at once.
                    std::thread::sleep(Duration::from_millis(u64::from(timeout_ms)));
                    v
                }
            }
        }
    }

    #[cfg(target_os = "linux")]
    mod events {
        use nvml_wrapper::bitmasks::event::EventTypes;
        use nvml_wrapper::enums::event::XidError;
        use nvml_wrapper::error::NvmlError;
        use nvml_wrapper::{EventSet, Nvml};

        use super::super::{ALL_GPUS, XID_DOUBLE_BIT_ECC, XID_GPU_LOST, XID_UNKNOWN};

        pub(super) type Set = EventSet<'static>;

        /// At most this many events per poll, so a storm cannot hold the caller.
        const MAX_EVENTS: usize = 256;

        /// An event set with every GPU's XID and double-bit ECC events (those it supports).
        /// `None` (logged) when NVML has no event support here; counters are still polled.
        pub(super) fn register(nvml: &'static Nvml) -> Option<Set> {
            let wanted = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
            let count = nvml.device_count().ok()?;
            let mut set = match nvml.create_event_set() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "no NVML event set: GPU health is polled only");
                    return None;
                }
            };
            let mut registered: Vec<(u32, EventTypes)> = Vec::new();
            for index in 0..count {
                let Ok(dev) = nvml.device_by_index(index) else {
                    continue;
                };
                let types = match dev.supported_event_types() {
                    Ok(s) => s & wanted,
                    Err(e) => {
                        tracing::warn!(index, error = %e, "cannot read the GPU's event types");
                        continue;
                    }
                };
                if types.is_empty() {
                    tracing::warn!(index, "GPU reports no XID or ECC events: health is polled");
                    continue;
                }
                match dev.register_events(types, set) {
                    Ok(s) => {
                        set = s;
                        registered.push((index, types));
                    }
                    Err(e) => {
                        // NVML freed the set: start a new one with the GPUs registered so far.
                        tracing::warn!(index, error = %e, "cannot watch the GPU's XID events");
                        set = nvml.create_event_set().ok()?;
                        for (i, t) in &registered {
                            let d = nvml.device_by_index(*i).ok()?;
                            set = d.register_events(*t, set).ok()?;
                        }
                    }
                }
            }
            Some(set)
        }

        /// Events as `(index, xid)`, and the error if a wait failed (after those events).
        pub(super) fn poll(set: &Set, timeout_ms: u32) -> (Vec<(u32, u64)>, Option<String>) {
            let mut out = Vec::new();
            let mut wait = timeout_ms;
            while out.len() < MAX_EVENTS {
                match set.wait(wait) {
                    Ok(ev) => {
                        wait = 0;
                        let index = ev.device.index().unwrap_or(ALL_GPUS);
                        if ev.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                            let xid = match ev.event_data {
                                Some(XidError::Value(x)) => x,
                                _ => XID_UNKNOWN,
                            };
                            out.push((index, xid));
                        } else if ev.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
                            out.push((index, XID_DOUBLE_BIT_ECC));
                        }
                    }
                    Err(NvmlError::Timeout) => break,
                    Err(NvmlError::GpuLost) => {
                        // As the device plugin does: a lost GPU while waiting marks them all.
                        out.push((ALL_GPUS, XID_GPU_LOST));
                        break;
                    }
                    Err(e) => return (out, Some(e.to_string())),
                }
            }
            (out, None)
        }
    }

    #[cfg(not(target_os = "linux"))]
    mod events {
        use nvml_wrapper::Nvml;

        /// NVML events exist on Linux only.
        pub(super) enum Set {}

        pub(super) fn register(_nvml: &'static Nvml) -> Option<Set> {
            None
        }

        pub(super) fn poll(set: &Set, _timeout_ms: u32) -> (Vec<(u32, u64)>, Option<String>) {
            match *set {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_xids_are_the_device_plugin_list() {
        for x in [13, 31, 43, 45, 68, 109] {
            assert!(is_application_xid(x), "{x}");
        }
        for x in [48, 63, 64, 74, 79, 92, 94, 95, 119] {
            assert!(!is_application_xid(x), "{x}");
        }
    }

    #[test]
    fn xid_reasons_name_the_number() {
        assert_eq!(xid_reason(79), "XID 79: GPU has fallen off the bus");
        assert_eq!(xid_reason(48), "XID 48: double-bit ECC error");
        assert_eq!(xid_reason(1234), "XID 1234");
        assert_eq!(xid_reason(XID_UNKNOWN), "XID unknown");
    }

    #[test]
    fn real_nvml_works_or_is_absent_without_panicking() {
        // Machines that run the tests usually have no NVIDIA driver: opening fails with NVML's
        // message. Where a driver is present, every GPU must come out with its facts, and
        // draining the event set must not block.
        match open_nvml() {
            Err(e) => assert!(!e.is_empty()),
            Ok(api) => {
                let count = api.device_count().expect("device count");
                let mut src = NvmlSource::new(api);
                let start = std::time::Instant::now();
                let gpus = src.discover().expect("discover");
                assert!(start.elapsed() < std::time::Duration::from_secs(30));
                assert_eq!(gpus.len(), count as usize);
                for g in &gpus {
                    assert!(
                        g.id.starts_with("GPU-") || g.id.starts_with("MIG-"),
                        "{g:?}"
                    );
                    assert!(g.memory_mib > 0 && !g.model.is_empty() && !g.pci_bus_id.is_empty());
                }
                assert!(!src.wait_for_events(10) || gpus.iter().any(|g| !g.healthy));
            }
        }
    }
}

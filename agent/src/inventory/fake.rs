//! A fake NVML: what `--fake-gpus N` runs on, and what tests drive.
//!
//! [`FakeNvml`] implements [`NvmlApi`]; its [`FakeNvmlHandle`] (cloneable, shareable across
//! threads) changes what it reports afterwards: XID and ECC events, ECC counters, retired pages,
//! failing queries. Events wake a [`Discovery::watch`](super::Discovery::watch) in progress.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::nvml::{GpuFacts, MigFacts, NvmlApi, XID_DOUBLE_BIT_ECC};

#[derive(Default)]
struct State {
    gpus: Vec<FakeGpu>,
    events: VecDeque<(u32, u64)>,
    count_error: Option<String>,
}

struct FakeGpu {
    facts: GpuFacts,
    error: Option<String>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not make every later call panic too.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// GPUs that exist only in memory.
pub struct FakeNvml {
    shared: Arc<Shared>,
}

/// Changes what a [`FakeNvml`] reports.
#[derive(Clone)]
pub struct FakeNvmlHandle {
    shared: Arc<Shared>,
}

/// The UUID of fake GPU `index`: `GPU-fake-<index>`, the same on every node.
pub fn fake_uuid(index: u32) -> String {
    format!("GPU-fake-{index}")
}

impl FakeNvml {
    /// GPUs with the given facts, indexed in order.
    pub fn new(gpus: Vec<GpuFacts>) -> FakeNvml {
        let state = State {
            gpus: gpus
                .into_iter()
                .map(|facts| FakeGpu { facts, error: None })
                .collect(),
            ..State::default()
        };
        FakeNvml {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                wake: Condvar::new(),
            }),
        }
    }

    /// `n` identical healthy GPUs: UUID `GPU-fake-<index>`, ECC on with no errors.
    pub fn uniform(n: u32, model: &str, memory_mib: u64) -> FakeNvml {
        FakeNvml::new(
            (0..n)
                .map(|i| GpuFacts {
                    uuid: fake_uuid(i),
                    name: model.to_string(),
                    memory_bytes: memory_mib << 20,
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x10 + i),
                    mig_enabled: false,
                    ecc_uncorrected_volatile: Some(0),
                    retired_pages_pending: Some(false),
                    ..GpuFacts::default()
                })
                .collect(),
        )
    }

    pub fn handle(&self) -> FakeNvmlHandle {
        FakeNvmlHandle {
            shared: self.shared.clone(),
        }
    }
}

impl FakeNvmlHandle {
    fn with_gpu(&self, index: u32, f: impl FnOnce(&mut FakeGpu)) {
        let mut st = self.shared.lock();
        if let Some(g) = st.gpus.get_mut(index as usize) {
            f(g);
        }
    }

    /// Queues an XID event for GPU `index` ([`ALL_GPUS`](super::nvml::ALL_GPUS) for all).
    pub fn xid(&self, index: u32, xid: u64) {
        self.shared.lock().events.push_back((index, xid));
        self.shared.wake.notify_all();
    }

    /// Queues a double-bit ECC event (reported as XID 48, as real NVML events are).
    pub fn double_bit_ecc(&self, index: u32) {
        self.xid(index, XID_DOUBLE_BIT_ECC);
    }

    /// Sets the volatile uncorrected ECC count (`None`: ECC unsupported).
    pub fn set_ecc_uncorrected(&self, index: u32, count: Option<u64>) {
        self.with_gpu(index, |g| g.facts.ecc_uncorrected_volatile = count);
    }

    pub fn set_retired_pages_pending(&self, index: u32, pending: Option<bool>) {
        self.with_gpu(index, |g| g.facts.retired_pages_pending = pending);
    }

    /// Makes queries about one GPU fail (`None`: succeed again).
    pub fn set_device_error(&self, index: u32, error: Option<&str>) {
        self.with_gpu(index, |g| g.error = error.map(str::to_string));
    }

    /// Puts GPU `index` in MIG mode with one MIG device per profile given (`mig-1g.10gb`, in
    /// slot order; UUID `MIG-fake-<gpu>-<slot>`), or takes it out of MIG mode when `profiles`
    /// is empty. See [`parse_fake_mig`] for the checks a layout passes.
    pub fn set_mig(&self, index: u32, profiles: &[String]) {
        self.with_gpu(index, |g| {
            g.facts.mig_enabled = !profiles.is_empty();
            g.facts.mig_pending = g.facts.mig_enabled;
            g.facts.mig_devices = fake_mig_devices(index, &g.facts.name, profiles);
        });
    }

    /// Makes the device count fail, as when the driver stops answering.
    pub fn set_count_error(&self, error: Option<&str>) {
        self.shared.lock().count_error = error.map(str::to_string);
    }

    /// Events queued and not yet polled.
    pub fn queued_events(&self) -> usize {
        self.shared.lock().events.len()
    }
}

/// The MIG devices of fake GPU `gpu` (model `model`) with the given profiles, as NVML names
/// them: `<model> MIG 1g.10gb`, GPU instance id `slot + 1`, compute instance 0.
fn fake_mig_devices(gpu: u32, model: &str, profiles: &[String]) -> Vec<MigFacts> {
    profiles
        .iter()
        .enumerate()
        .map(|(slot, p)| {
            let slot = slot as u32;
            let gb = allot_common::mig::profile(p).map_or(0, |x| x.memory_gb);
            MigFacts {
                index: slot,
                uuid: format!("MIG-fake-{gpu}-{slot}"),
                name: format!("{model} MIG {}", p.trim_start_matches("mig-")),
                memory_bytes: u64::from(gb) << 30,
                gpu_instance: Some(slot + 1),
                compute_instance: Some(0),
            }
        })
        .collect()
}

/// Reads a `--fake-mig` layout: `GPU=PROFILE[*N][+PROFILE[*N]...]`, such as
/// `0=1g.10gb*7` or `1=mig-3g.40gb*2+1g.10gb` (the `mig-` is optional). A GPU's profiles may
/// take at most its 7 slices, as on a real one.
pub fn parse_fake_mig(spec: &str) -> Result<(u32, Vec<String>), String> {
    let bad = |why: String| {
        format!("--fake-mig {spec:?}: {why}; write GPU=PROFILE[*N][+PROFILE[*N]...], such as 0=1g.10gb*7 or 1=3g.40gb*2+1g.10gb")
    };
    let (gpu, layout) = spec.split_once('=').ok_or_else(|| bad("no '='".into()))?;
    let gpu: u32 = gpu
        .trim()
        .parse()
        .map_err(|_| bad(format!("GPU {gpu:?} is not an index")))?;
    let mut profiles = Vec::new();
    let mut slices = 0;
    for part in layout.split('+') {
        let (name, n) = match part.split_once('*') {
            Some((name, n)) => (
                name.trim(),
                n.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=7).contains(n))
                    .ok_or_else(|| bad(format!("count {n:?} is not 1 to 7")))?,
            ),
            None => (part.trim(), 1),
        };
        let name = if name.starts_with("mig-") {
            name.to_string()
        } else {
            format!("mig-{name}")
        };
        let shape = allot_common::mig::profile(&name)
            .ok_or_else(|| bad(format!("{name:?} is not a MIG profile such as mig-1g.10gb")))?;
        slices += shape.slices * n;
        profiles.extend(std::iter::repeat_n(name, n as usize));
    }
    if slices > allot_common::mig::SLICES_PER_GPU {
        return Err(bad(format!(
            "the profiles take {slices} slices, and a GPU has {}",
            allot_common::mig::SLICES_PER_GPU
        )));
    }
    Ok((gpu, profiles))
}

impl NvmlApi for FakeNvml {
    fn device_count(&self) -> Result<u32, String> {
        let st = self.shared.lock();
        match &st.count_error {
            Some(e) => Err(e.clone()),
            None => Ok(st.gpus.len() as u32),
        }
    }

    fn device(&self, index: u32) -> Result<GpuFacts, String> {
        let st = self.shared.lock();
        let g = st
            .gpus
            .get(index as usize)
            .ok_or_else(|| format!("Invalid Argument: no GPU {index}"))?;
        match &g.error {
            Some(e) => Err(e.clone()),
            None => Ok(g.facts.clone()),
        }
    }

    fn poll_events(&mut self, timeout_ms: u32) -> Vec<(u32, u64)> {
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let mut st = self.shared.lock();
        while st.events.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = self
                .shared
                .wake
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st.events.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_gpus_have_node_agnostic_ids() {
        let f = FakeNvml::uniform(2, "NVIDIA A10G", 24576);
        assert_eq!(f.device_count().unwrap(), 2);
        let g = f.device(1).unwrap();
        assert_eq!(g.uuid, "GPU-fake-1");
        assert_eq!(g.memory_bytes, 24576 << 20);
        assert!(f.device(2).is_err());
    }

    #[test]
    fn mig_layouts_parse_and_become_mig_devices() {
        assert_eq!(
            parse_fake_mig("1=3g.40gb*2+mig-1g.10gb").unwrap(),
            (
                1,
                vec![
                    "mig-3g.40gb".to_string(),
                    "mig-3g.40gb".into(),
                    "mig-1g.10gb".into()
                ]
            )
        );
        for (bad, why) in [
            ("0", "no '='"),
            ("x=1g.10gb", "not an index"),
            ("0=1g.10gb*8", "not 1 to 7"),
            ("0=2g.20gb*4", "8 slices"),
            ("0=big", "not a MIG profile"),
        ] {
            let e = parse_fake_mig(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let f = FakeNvml::uniform(2, "NVIDIA H100 80GB HBM3", 81559);
        let (gpu, profiles) = parse_fake_mig("1=1g.10gb*2").unwrap();
        f.handle().set_mig(gpu, &profiles);
        let g = f.device(1).unwrap();
        assert!(g.mig_enabled);
        assert_eq!(g.mig_devices[1].uuid, "MIG-fake-1-1");
        assert_eq!(g.mig_devices[1].name, "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
        assert!(!f.device(0).unwrap().mig_enabled);
    }

    #[test]
    fn poll_returns_queued_events_and_times_out_without() {
        let mut f = FakeNvml::uniform(1, "x", 1);
        let h = f.handle();
        let t = Instant::now();
        assert!(f.poll_events(30).is_empty());
        assert!(t.elapsed() >= Duration::from_millis(30));
        h.xid(0, 79);
        h.double_bit_ecc(0);
        assert_eq!(f.poll_events(0), vec![(0, 79), (0, 48)]);
        assert_eq!(h.queued_events(), 0);
    }

    #[test]
    fn an_event_wakes_a_waiting_poll() {
        let mut f = FakeNvml::uniform(1, "x", 1);
        let h = f.handle();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            h.xid(0, 94);
        });
        let start = Instant::now();
        let ev = f.poll_events(10_000);
        t.join().unwrap();
        assert_eq!(ev, vec![(0, 94)]);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}

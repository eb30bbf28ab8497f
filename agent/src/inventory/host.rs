//! The host's vCPUs and memory, to check the catalog's numbers against.

use sysinfo::{CpuRefreshKind, System};

/// What the operating system reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// Logical CPUs (vCPUs on EC2).
    pub vcpus: u32,
    /// Total memory as the kernel reports it (`MemTotal`: a few percent below the instance's
    /// nominal memory, which the kernel and firmware keep).
    pub memory_bytes: u64,
}

/// A source of [`HostFacts`].
pub trait HostProbe: Send {
    fn probe(&mut self) -> Result<HostFacts, String>;
}

/// The real host, through `sysinfo`.
pub struct SysinfoHost {
    sys: Option<System>,
}

impl SysinfoHost {
    pub fn new() -> SysinfoHost {
        SysinfoHost { sys: None }
    }
}

impl Default for SysinfoHost {
    fn default() -> Self {
        SysinfoHost::new()
    }
}

impl HostProbe for SysinfoHost {
    fn probe(&mut self) -> Result<HostFacts, String> {
        if self.sys.is_none() {
            self.sys = Some(System::new().map_err(|e| format!("sysinfo: {e}"))?);
        }
        let sys = self.sys.as_mut().ok_or("sysinfo unavailable")?;
        sys.refresh_memory();
        sys.refresh_cpu_list(CpuRefreshKind::nothing());
        Ok(HostFacts {
            vcpus: sys.cpus().len() as u32,
            memory_bytes: sys.total_memory(),
        })
    }
}

/// Fixed facts (tests, or a host whose numbers are known).
pub struct StaticHost(pub HostFacts);

impl HostProbe for StaticHost {
    fn probe(&mut self) -> Result<HostFacts, String> {
        Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysinfo_sees_this_machine() {
        let h = SysinfoHost::new().probe().expect("sysinfo works here");
        assert!(h.vcpus >= 1);
        assert!(h.memory_bytes > 64 << 20);
    }
}

//! TEMPORARY stand-in until the inventory module lands (fake GPUs only).
use std::path::PathBuf;

use allot_common::api::DeviceInfo;
use allot_common::{Catalog, ResourceName, Resources};

#[derive(Clone, Debug, Default)]
pub struct InventoryConfig {
    pub instance_type: Option<String>,
    pub instance_type_file: Option<PathBuf>,
    pub sysfs_root: PathBuf,
    pub fake_gpus: Option<u32>,
    pub nvml: bool,
}
#[derive(Clone, Debug)]
pub struct NodeInventory {
    pub instance_type: String,
    pub capacity: Resources,
    pub devices: Vec<DeviceInfo>,
    pub warnings: Vec<String>,
}
pub struct Discovery {
    t: String,
    n: u32,
}
impl Discovery {
    pub fn new(cfg: &InventoryConfig) -> Result<Discovery, String> {
        let t = cfg.instance_type.clone().ok_or("no instance type")?;
        Catalog::builtin().get(&t).map_err(|e| e.to_string())?;
        Ok(Discovery { t, n: cfg.fake_gpus.unwrap_or(0) })
    }
    pub fn discover(&mut self) -> NodeInventory {
        let mut capacity = Catalog::builtin().get(&self.t).map(|i| i.resources()).unwrap_or_default();
        capacity.set(ResourceName::gpu(), self.n as i64);
        NodeInventory {
            instance_type: self.t.clone(),
            capacity,
            devices: (0..self.n).map(|i| DeviceInfo { resource: "gpu".into(), index: i, id: format!("GPU-fake-{i}"), healthy: true, ..Default::default() }).collect(),
            warnings: vec![],
        }
    }
}

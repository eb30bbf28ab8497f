//! Small integer ids and interners, so the hot paths index vectors instead of hashing strings.

use std::collections::BTreeMap;

use allot_common::ResourceName;
use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($name:ident) => {
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        pub struct $name(pub u32);
        impl $name {
            pub fn idx(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(FlavorId);
id_type!(ResId);
id_type!(FrId);
id_type!(TeamId);
id_type!(CohortId);
id_type!(NodeId);

/// Workload ids are never reused: they also order workloads by submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WlId(pub u64);

/// Interns flavors, resources and (flavor, resource) pairs. Ids only ever grow.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Interner {
    flavors: Vec<String>,
    flavor_ids: BTreeMap<String, FlavorId>,
    resources: Vec<ResourceName>,
    resource_ids: BTreeMap<ResourceName, ResId>,
    frs: Vec<(FlavorId, ResId)>,
    fr_ids: BTreeMap<(FlavorId, ResId), FrId>,
}

impl Interner {
    /// How many flavors, resources and pairs are interned (ids only ever grow).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.flavors.len(), self.resources.len(), self.frs.len())
    }
    pub fn flavor(&mut self, name: &str) -> FlavorId {
        if let Some(id) = self.flavor_ids.get(name) {
            return *id;
        }
        let id = FlavorId(self.flavors.len() as u32);
        self.flavors.push(name.to_string());
        self.flavor_ids.insert(name.to_string(), id);
        id
    }
    pub fn resource(&mut self, r: &ResourceName) -> ResId {
        if let Some(id) = self.resource_ids.get(r) {
            return *id;
        }
        let id = ResId(self.resources.len() as u32);
        self.resources.push(r.clone());
        self.resource_ids.insert(r.clone(), id);
        id
    }
    pub fn fr(&mut self, f: FlavorId, r: ResId) -> FrId {
        if let Some(id) = self.fr_ids.get(&(f, r)) {
            return *id;
        }
        let id = FrId(self.frs.len() as u32);
        self.frs.push((f, r));
        self.fr_ids.insert((f, r), id);
        id
    }
    pub fn find_flavor(&self, name: &str) -> Option<FlavorId> {
        self.flavor_ids.get(name).copied()
    }
    pub fn find_resource(&self, r: &ResourceName) -> Option<ResId> {
        self.resource_ids.get(r).copied()
    }
    pub fn find_fr(&self, f: FlavorId, r: ResId) -> Option<FrId> {
        self.fr_ids.get(&(f, r)).copied()
    }
    pub fn flavor_name(&self, f: FlavorId) -> &str {
        &self.flavors[f.idx()]
    }
    pub fn resource_name(&self, r: ResId) -> &ResourceName {
        &self.resources[r.idx()]
    }
    pub fn fr_parts(&self, fr: FrId) -> (FlavorId, ResId) {
        self.frs[fr.idx()]
    }
    pub fn fr_count(&self) -> usize {
        self.frs.len()
    }
    /// `memory in flavor ml.g5.8xlarge` style description.
    pub fn describe_fr(&self, fr: FrId) -> String {
        let (f, r) = self.fr_parts(fr);
        format!(
            "{} in flavor {}",
            self.resource_name(r),
            self.flavor_name(f)
        )
    }
    pub fn format_qty(&self, r: ResId, q: i64) -> String {
        self.resource_name(r).format(q)
    }
}

/// A dense vector indexed by `FrId` that reads 0 past its end and grows on write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrVec(pub Vec<i64>);

impl FrVec {
    pub fn get(&self, fr: FrId) -> i64 {
        self.0.get(fr.idx()).copied().unwrap_or(0)
    }
    pub fn add(&mut self, fr: FrId, v: i64) {
        if self.0.len() <= fr.idx() {
            self.0.resize(fr.idx() + 1, 0);
        }
        self.0[fr.idx()] += v;
    }
    pub fn set(&mut self, fr: FrId, v: i64) {
        if self.0.len() <= fr.idx() {
            self.0.resize(fr.idx() + 1, 0);
        }
        self.0[fr.idx()] = v;
    }
}

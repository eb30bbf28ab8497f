//! The instance catalog: raw capacity per instance type, compiled into the binary from
//! `common/data/instance-types.json`: every type of the API's `ClusterInstanceType` enum. The
//! 122 that AWS's HyperPod tooling (sagemaker-hyperpod 3.12.0, `INSTANCE_RESOURCES`) lists come
//! from it (they include every type of `shared/data/instance-types.json`, with the same
//! figures); the other 87 from the registry packages the file names per type. A figure no
//! source gives (`null` in the file: the GPUs of `ml.g7.*`, the EFA interfaces of most CPU
//! types) is taken from the first node of the type that registers. Types outside the enum are
//! learned from their nodes whole.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::resource::{ResourceName, Resources, EFA, GPU, NEURON};

const CATALOG_JSON: &str = include_str!("../data/instance-types.json");

/// Raw capacity of one instance type, as HyperPod task governance counts it for quota.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    pub name: String,
    pub vcpu: u32,
    pub memory_gib: u32,
    pub gpu: u32,
    pub neuron: u32,
    pub neuron_cores: u32,
    pub efa: u32,
    pub accelerator_model: Option<String>,
    pub accelerator_memory_gib: Option<u32>,
    /// Listed in the catalog (else learned from a node that registered with it).
    pub catalogued: bool,
    /// The resources whose figure no source of the catalog gives (`gpu`, `efa`; 0 above until
    /// a node of the type registers and brings it: [`Catalog::with_learned`]).
    pub unsourced: Vec<ResourceName>,
}

/// One row of the catalog file; `null` where no source gives the figure.
#[derive(Deserialize)]
struct Row {
    vcpu: u32,
    memory_gib: u32,
    gpu: Option<u32>,
    neuron: u32,
    #[serde(default)]
    neuron_cores: u32,
    efa: Option<u32>,
    #[serde(default)]
    accelerator_model: Option<String>,
    #[serde(default)]
    accelerator_memory_gib: Option<u32>,
}

impl Row {
    fn into_type(self, name: &str) -> InstanceType {
        let unsourced = [
            (ResourceName::gpu(), self.gpu),
            (ResourceName::efa(), self.efa),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_none())
        .map(|(r, _)| r)
        .collect();
        InstanceType {
            name: name.to_string(),
            vcpu: self.vcpu,
            memory_gib: self.memory_gib,
            gpu: self.gpu.unwrap_or(0),
            neuron: self.neuron,
            neuron_cores: self.neuron_cores,
            efa: self.efa.unwrap_or(0),
            accelerator_model: self.accelerator_model,
            accelerator_memory_gib: self.accelerator_memory_gib,
            catalogued: true,
            unsourced,
        }
    }
}

impl InstanceType {
    /// A type the catalog does not list, with the figures of one instance as a node of it
    /// reported them (cpu in millicores and memory in bytes rounded down to whole vCPUs and
    /// GiB).
    pub fn learned(name: &str, capacity: &Resources) -> InstanceType {
        let whole = |r: ResourceName, unit: i64| {
            u32::try_from(capacity.get(&r).max(0) / unit).unwrap_or(u32::MAX)
        };
        InstanceType {
            name: name.to_string(),
            vcpu: whole(ResourceName::cpu(), 1000),
            memory_gib: whole(ResourceName::memory(), 1 << 30),
            gpu: whole(ResourceName::gpu(), 1),
            neuron: whole(ResourceName::neuron(), 1),
            neuron_cores: 0,
            efa: whole(ResourceName::efa(), 1),
            accelerator_model: None,
            accelerator_memory_gib: None,
            catalogued: false,
            unsourced: Vec::new(),
        }
    }

    /// Whether the catalog's sources give the figure of `res` for this type.
    pub fn sourced(&self, res: &ResourceName) -> bool {
        !self.unsourced.contains(res)
    }

    /// The figure of `res` per instance, as a count of whole units (gpu, neuron, efa; 0 for
    /// anything else).
    fn count(&self, res: &ResourceName) -> u32 {
        match res.as_str() {
            GPU => self.gpu,
            NEURON => self.neuron,
            EFA => self.efa,
            _ => 0,
        }
    }

    fn set_count(&mut self, res: &ResourceName, v: u32) {
        match res.as_str() {
            GPU => self.gpu = v,
            NEURON => self.neuron = v,
            EFA => self.efa = v,
            _ => {}
        }
    }

    /// Accelerators per instance: GPUs, or Neuron devices on Trainium/Inferentia types.
    pub fn accelerators(&self) -> u32 {
        self.gpu.max(self.neuron)
    }

    /// The accelerator resource of this type (`gpu` or `neuron`), if it has one.
    pub fn accelerator_resource(&self) -> Option<ResourceName> {
        if self.gpu > 0 {
            Some(ResourceName::gpu())
        } else if self.neuron > 0 {
            Some(ResourceName::neuron())
        } else {
            None
        }
    }

    /// Full capacity of one instance in base units (cpu in millicores, memory in bytes).
    /// Resources the type does not have are left out.
    pub fn resources(&self) -> Resources {
        let mut r = Resources::new();
        r.set(ResourceName::cpu(), i64::from(self.vcpu) * 1000);
        r.set(ResourceName::memory(), i64::from(self.memory_gib) << 30);
        for (name, v) in [
            (ResourceName::gpu(), self.gpu),
            (ResourceName::neuron(), self.neuron),
            (ResourceName::efa(), self.efa),
        ] {
            if v > 0 {
                r.set(name, i64::from(v));
            }
        }
        r
    }
}

#[derive(Deserialize)]
struct CatalogFile {
    instance_types: BTreeMap<String, Row>,
}

/// The API's `ClusterInstanceType` enum (botocore 1.44.8), one per line.
const API_TYPES: &str = include_str!("../data/cluster-instance-types.txt");

/// Every instance type a HyperPod cluster, and so a compute quota, may name in AWS's API.
pub fn api_instance_types() -> &'static [&'static str] {
    static TYPES: OnceLock<Vec<&'static str>> = OnceLock::new();
    TYPES.get_or_init(|| {
        API_TYPES
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    })
}

/// Whether `name` is one of the API's `ClusterInstanceType` values.
pub fn is_api_instance_type(name: &str) -> bool {
    api_instance_types().contains(&name)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct UnknownInstanceType {
    pub name: String,
    /// What the catalog knows instead: the type's family sizes or the families, or (with
    /// `unsourced`) the figures it has for the type.
    pub known: String,
    /// One of the API's `ClusterInstanceType` values.
    pub in_api: bool,
    /// Listed, but without a figure a quota needs (its accelerator count).
    pub unsourced: bool,
}

impl UnknownInstanceType {
    fn message(&self) -> String {
        let name = &self.name;
        let known = &self.known;
        if self.unsourced {
            return format!(
                "instance type {name:?} is not complete in the catalog: {known}; the first node \
                 of that type registered by its agent brings it"
            );
        }
        if self.in_api {
            format!(
                "unknown instance type {name:?}: the catalog does not list it ({known}); a node \
                 of that type registered by its agent brings its figures"
            )
        } else {
            format!(
                "unknown instance type {name:?}: not one of the API's ClusterInstanceType \
                 values, and the catalog does not list it ({known}); a node of that type \
                 registered by its agent brings its figures (allot's rule, for clusters of its \
                 own types: AWS refuses a type outside its enum)"
            )
        }
    }
}

/// The compiled-in catalog.
pub struct Catalog {
    types: BTreeMap<String, InstanceType>,
}

impl Catalog {
    /// The catalog compiled into the binary.
    pub fn builtin() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            // The file is part of the source tree; a unit test checks it parses.
            let file: CatalogFile = serde_json::from_str(CATALOG_JSON).unwrap_or(CatalogFile {
                instance_types: BTreeMap::new(),
            });
            let types = file
                .instance_types
                .into_iter()
                .map(|(name, row)| {
                    let t = row.into_type(&name);
                    (name, t)
                })
                .collect();
            Catalog { types }
        })
    }

    pub fn get(&self, name: &str) -> Result<&InstanceType, UnknownInstanceType> {
        self.types.get(name).ok_or_else(|| {
            // The same family's sizes when it has some, else the families.
            let family = name.rsplit_once('.').map_or(name, |(f, _)| f);
            let sizes: Vec<&str> = self
                .names()
                .filter(|n| n.rsplit_once('.').is_some_and(|(f, _)| f == family))
                .collect();
            let known = if sizes.is_empty() {
                let mut families: Vec<&str> = self
                    .names()
                    .map(|n| n.rsplit_once('.').map_or(n, |(f, _)| f))
                    .collect();
                families.dedup();
                format!("its families: {}", families.join(", "))
            } else {
                format!("{family} sizes: {}", sizes.join(", "))
            };
            UnknownInstanceType {
                name: name.to_string(),
                known,
                in_api: is_api_instance_type(name),
                unsourced: false,
            }
        })
    }

    /// The type `name` for a quota: refused, like a type the catalog does not list, while its
    /// accelerator count is unsourced (a quota's `Count` and `Accelerators` need it). An
    /// unsourced EFA count is taken as none.
    pub fn get_for_quota(&self, name: &str) -> Result<&InstanceType, UnknownInstanceType> {
        let t = self.get(name)?;
        // The file leaves only GPU and EFA counts unsourced (`Row`).
        if t.sourced(&ResourceName::gpu()) {
            return Ok(t);
        }
        Err(UnknownInstanceType {
            name: name.to_string(),
            known: format!(
                "it lists {} vCPUs and {} GiB but no source gives its gpu count",
                t.vcpu, t.memory_gib
            ),
            in_api: true,
            unsourced: true,
        })
    }

    /// This catalog and `learned` types, as their nodes reported them: a type it does not
    /// list is added whole; a listed one takes the figures its sources lack from its node.
    pub fn with_learned<'a>(&self, learned: impl IntoIterator<Item = &'a InstanceType>) -> Catalog {
        let mut types = self.types.clone();
        for t in learned {
            match types.get_mut(&t.name) {
                Some(listed) => {
                    for res in std::mem::take(&mut listed.unsourced) {
                        listed.set_count(&res, t.count(&res));
                    }
                }
                None => {
                    types.insert(t.name.clone(), t.clone());
                }
            }
        }
        Catalog { types }
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.types.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_holds_every_type_of_the_api() {
        let api = api_instance_types();
        assert_eq!(api.len(), 209);
        let unique: std::collections::BTreeSet<&&str> = api.iter().collect();
        assert_eq!(unique.len(), 209);
        let c = Catalog::builtin();
        for n in c.names() {
            assert!(
                is_api_instance_type(n),
                "{n} is catalogued but not in the API's enum"
            );
        }
        for n in api {
            assert!(
                c.get(n).is_ok(),
                "{n} is in the API's enum, not the catalog"
            );
        }
        // Neither: the error says so, and that accepting it later is allot's rule.
        let e = c.get("ml.p9.96xlarge").unwrap_err();
        assert!(!e.in_api);
        let msg = e.to_string();
        assert!(
            msg.contains("not one of the API's ClusterInstanceType values"),
            "{msg}"
        );
        assert!(msg.contains("allot's rule"), "{msg}");
    }

    /// `ml.g7.*`: listed with vCPUs and memory, no GPU count; a quota needs one, so it waits
    /// for a node of the type; a learned node completes it. An unsourced EFA count does not
    /// hold a quota up.
    #[test]
    fn a_figure_no_source_gives_comes_from_a_node() {
        let c = Catalog::builtin();
        let g7 = c.get("ml.g7.12xlarge").unwrap();
        assert_eq!((g7.vcpu, g7.memory_gib, g7.gpu), (48, 192, 0));
        assert!(!g7.sourced(&ResourceName::gpu()) && !g7.sourced(&ResourceName::efa()));
        let e = c.get_for_quota("ml.g7.12xlarge").unwrap_err();
        assert!(e.in_api && e.unsourced);
        let msg = e.to_string();
        assert!(
            msg.contains("no source gives its gpu count")
                && msg.contains("48 vCPUs and 192 GiB")
                && msg.contains("registered by its agent"),
            "{msg}"
        );
        let c7g = c.get_for_quota("ml.c7g.16xlarge").unwrap();
        assert!(!c7g.sourced(&ResourceName::efa()) && c7g.sourced(&ResourceName::gpu()));
        let mut cap = g7.resources();
        cap.set(ResourceName::gpu(), 4);
        cap.set(ResourceName::efa(), 1);
        let node = InstanceType::learned("ml.g7.12xlarge", &cap);
        let learned = c.with_learned([&node]);
        let g7 = learned.get_for_quota("ml.g7.12xlarge").unwrap();
        assert_eq!((g7.vcpu, g7.gpu, g7.efa), (48, 4, 1));
        assert!(g7.catalogued && g7.unsourced.is_empty());
        // A sourced figure is the catalog's, whatever the node said.
        let mut odd = c.get("ml.p5.48xlarge").unwrap().resources();
        odd.set(ResourceName::gpu(), 2);
        let learned = c.with_learned([&InstanceType::learned("ml.p5.48xlarge", &odd)]);
        assert_eq!(learned.get("ml.p5.48xlarge").unwrap().gpu, 8);
    }

    #[test]
    fn builtin_catalog_parses() {
        let file: CatalogFile = serde_json::from_str(CATALOG_JSON).expect("catalog parses");
        assert!(file.instance_types.len() >= 10);
        assert_eq!(
            Catalog::builtin().names().count(),
            file.instance_types.len()
        );
    }

    #[test]
    fn p5_capacity() {
        let p5 = Catalog::builtin().get("ml.p5.48xlarge").unwrap();
        assert_eq!(p5.gpu, 8);
        assert_eq!(p5.vcpu, 192);
        assert_eq!(p5.memory_gib, 2048);
        let r = p5.resources();
        assert_eq!(r.get(&ResourceName::cpu()), 192_000);
        assert_eq!(r.get(&ResourceName::gpu()), 8);
    }

    #[test]
    fn unknown_type_lists_known_ones() {
        let err = Catalog::builtin()
            .get("ml.x9.huge")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ml.x9.huge") && err.contains("ml.g5, ml.g6"),
            "{err}"
        );
        let err = Catalog::builtin()
            .get("ml.g5.64xlarge")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ml.g5 sizes: ml.g5.12xlarge") && !err.contains("ml.c5"),
            "{err}"
        );
    }

    /// Every type of the project's shared data is in the catalog with the same figures.
    #[test]
    fn shared_data_is_included_when_present() {
        let shared = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/instance-types.json"
        );
        if let Ok(text) = std::fs::read_to_string(shared) {
            let file: CatalogFile = serde_json::from_str(&text).expect("shared data parses");
            for (name, row) in file.instance_types {
                let mine = Catalog::builtin().get(&name).expect("in the catalog");
                assert_eq!(mine, &row.into_type(&name), "{name}");
            }
        }
    }

    /// All 209 types: a few figures of the 122 as sagemaker-hyperpod lists them, and of the
    /// 87 others as their sources do.
    #[test]
    fn every_type_is_there_with_its_sources_figures() {
        let c = Catalog::builtin();
        assert_eq!(c.names().count(), 209);
        for (name, vcpu, mem, gpu, neuron, efa) in [
            ("ml.c5.large", 2, 4, 0, 0, 0),
            ("ml.t3.medium", 2, 4, 0, 0, 0),
            ("ml.g6e.24xlarge", 96, 768, 4, 0, 2),
            ("ml.p5.4xlarge", 16, 256, 1, 0, 1),
            ("ml.trn2.48xlarge", 192, 2048, 0, 16, 16),
            ("ml.i3en.24xlarge", 96, 768, 0, 0, 1),
            ("ml.g4dn.xlarge", 4, 16, 1, 0, 0),
            ("ml.g4dn.12xlarge", 48, 192, 4, 0, 1),
            ("ml.m6g.medium", 1, 4, 0, 0, 0),
            ("ml.c8g.48xlarge", 192, 384, 0, 0, 0),
            ("ml.r5d.16xlarge", 64, 512, 0, 0, 0),
            ("ml.m7g.16xlarge", 64, 256, 0, 0, 0),
        ] {
            let t = c.get(name).expect(name);
            assert_eq!(
                (t.vcpu, t.memory_gib, t.gpu, t.neuron, t.efa),
                (vcpu, mem, gpu, neuron, efa),
                "{name}"
            );
        }
        let g4dn = c.get("ml.g4dn.xlarge").unwrap();
        assert_eq!(g4dn.accelerator_model.as_deref(), Some("NVIDIA T4"));
        assert_eq!(g4dn.accelerator_memory_gib, Some(16));
        // Unsourced: the GPUs of the six g7 sizes, the EFA interfaces of 81 types.
        let no_gpu = c
            .names()
            .filter(|n| !c.get(n).unwrap().sourced(&ResourceName::gpu()))
            .count();
        let no_efa = c
            .names()
            .filter(|n| !c.get(n).unwrap().sourced(&ResourceName::efa()))
            .count();
        assert_eq!((no_gpu, no_efa), (6, 81));
    }
}

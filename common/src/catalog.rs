//! The instance catalog: raw capacity per instance type, compiled into the binary from
//! `common/data/instance-types.json`: every type AWS's HyperPod tooling (sagemaker-hyperpod
//! 3.12.0, `INSTANCE_RESOURCES`) lists, which includes every type of
//! `shared/data/instance-types.json` with the same figures. Types of the API's enum that are
//! not here are learned from the nodes that register with them.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::resource::{ResourceName, Resources};

const CATALOG_JSON: &str = include_str!("../data/instance-types.json");

/// Raw capacity of one instance type, as HyperPod task governance counts it for quota.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct InstanceType {
    #[serde(skip)]
    pub name: String,
    pub vcpu: u32,
    pub memory_gib: u32,
    pub gpu: u32,
    pub neuron: u32,
    #[serde(default)]
    pub neuron_cores: u32,
    pub efa: u32,
    #[serde(default)]
    pub accelerator_model: Option<String>,
    #[serde(default)]
    pub accelerator_memory_gib: Option<u32>,
    /// Listed in the catalog (else learned from a node that registered with it).
    #[serde(skip)]
    pub catalogued: bool,
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
    instance_types: BTreeMap<String, InstanceType>,
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
#[error(
    "unknown instance type {name:?}: {}the catalog does not list it ({known}); a node of that \
     type registered by its agent brings its figures{}",
    if *in_api { "" } else { "not one of the API's ClusterInstanceType values, and " },
    if *in_api { "" } else { " (allot's rule, for clusters of its own types: AWS refuses a type outside its enum)" }
)]
pub struct UnknownInstanceType {
    pub name: String,
    pub known: String,
    /// One of the API's `ClusterInstanceType` values.
    pub in_api: bool,
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
                .map(|(name, mut t)| {
                    t.name = name.clone();
                    t.catalogued = true;
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
            }
        })
    }

    /// This catalog and `learned` types (types it does not list, as their nodes reported them).
    pub fn with_learned<'a>(&self, learned: impl IntoIterator<Item = &'a InstanceType>) -> Catalog {
        let mut types = self.types.clone();
        for t in learned {
            types.entry(t.name.clone()).or_insert_with(|| t.clone());
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
    fn the_apis_instance_types_hold_every_catalogued_one() {
        let api = api_instance_types();
        assert_eq!(api.len(), 209);
        let unique: std::collections::BTreeSet<&&str> = api.iter().collect();
        assert_eq!(unique.len(), 209);
        for n in Catalog::builtin().names() {
            assert!(
                is_api_instance_type(n),
                "{n} is catalogued but not in the API's enum"
            );
        }
        // Listed by the API, not the catalog: learned from its node.
        let e = Catalog::builtin().get("ml.c6g.large").unwrap_err();
        assert!(e.in_api);
        let msg = e.to_string();
        assert!(
            msg.contains("registered by its agent") && !msg.contains("not one of"),
            "{msg}"
        );
        // Neither: the error says so, and that accepting it later is allot's rule.
        let e = Catalog::builtin().get("ml.p9.96xlarge").unwrap_err();
        assert!(!e.in_api);
        let msg = e.to_string();
        assert!(
            msg.contains("not one of the API's ClusterInstanceType values"),
            "{msg}"
        );
        assert!(msg.contains("allot's rule"), "{msg}");
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
            for (name, t) in file.instance_types {
                let mine = Catalog::builtin().get(&name).expect("in the catalog");
                let mut t = t;
                t.name = name.clone();
                t.catalogued = true;
                assert_eq!(mine, &t, "{name}");
            }
        }
    }

    /// All 122 types of the source, a few figures as it lists them.
    #[test]
    fn every_hyperpod_type_is_there() {
        let c = Catalog::builtin();
        assert_eq!(c.names().count(), 122);
        for (name, vcpu, mem, gpu, neuron, efa) in [
            ("ml.c5.large", 2, 4, 0, 0, 0),
            ("ml.t3.medium", 2, 4, 0, 0, 0),
            ("ml.g6e.24xlarge", 96, 768, 4, 0, 2),
            ("ml.p5.4xlarge", 16, 256, 1, 0, 1),
            ("ml.trn2.48xlarge", 192, 2048, 0, 16, 16),
            ("ml.i3en.24xlarge", 96, 768, 0, 0, 1),
        ] {
            let t = c.get(name).expect(name);
            assert_eq!(
                (t.vcpu, t.memory_gib, t.gpu, t.neuron, t.efa),
                (vcpu, mem, gpu, neuron, efa),
                "{name}"
            );
        }
    }
}

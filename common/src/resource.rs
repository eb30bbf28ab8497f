//! Resource names and quantities.
//!
//! Every quantity is an `i64` in the resource's base unit: millicores for `cpu`, bytes for
//! `memory`, whole units for everything else (GPUs, Neuron devices, EFA interfaces, any other
//! counted name). Integers keep quota arithmetic exact and deterministic.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A normalised resource name: `gpu`, `neuron`, `cpu`, `memory`, `efa` or any other counted name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ResourceName(String);

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const GPU: &str = "gpu";
pub const NEURON: &str = "neuron";
pub const EFA: &str = "efa";

/// Kubernetes extended-resource names accepted as aliases.
const ALIASES: [(&str, &str); 3] = [
    ("nvidia.com/gpu", GPU),
    ("aws.amazon.com/neurondevice", NEURON),
    ("vpc.amazonaws.com/efa", EFA),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("invalid resource name {0:?}: use gpu, neuron, cpu, memory, efa, a MIG profile such as mig-1g.10gb, an alias such as nvidia.com/gpu or nvidia.com/mig-1g.10gb, or a name of letters, digits, '.', '-', '_' and '/'")]
    BadName(String),
    #[error("invalid quantity {value:?} for {resource}: {why}")]
    BadQuantity {
        resource: String,
        value: String,
        why: String,
    },
}

impl ResourceName {
    /// Parses a resource name, mapping the Kubernetes aliases onto the short names.
    pub fn parse(s: &str) -> Result<Self, ResourceError> {
        let t = s.trim();
        if let Some((_, short)) = ALIASES.iter().find(|(alias, _)| *alias == t) {
            return Ok(ResourceName((*short).to_string()));
        }
        // `nvidia.com/mig-1g.10gb`, as the device plugin names a MIG profile.
        if let Some(profile) = t
            .strip_prefix("nvidia.com/")
            .filter(|p| crate::mig::profile(p).is_some())
        {
            return Ok(ResourceName(profile.to_string()));
        }
        let ok = !t.is_empty()
            && t.len() <= 253
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
            && t.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(ResourceError::BadName(s.to_string()));
        }
        Ok(ResourceName(t.to_string()))
    }

    pub fn cpu() -> Self {
        ResourceName(CPU.into())
    }
    pub fn memory() -> Self {
        ResourceName(MEMORY.into())
    }
    pub fn gpu() -> Self {
        ResourceName(GPU.into())
    }
    pub fn neuron() -> Self {
        ResourceName(NEURON.into())
    }
    pub fn efa() -> Self {
        ResourceName(EFA.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Devices get specific indices on a node (GPU 0..7, Neuron devices, EFA interfaces, the
    /// GPU partitions of each MIG profile).
    pub fn is_device(&self) -> bool {
        matches!(self.0.as_str(), GPU | NEURON | EFA) || self.is_partition()
    }

    /// The accelerators (GPUs, Neuron devices, GPU partitions): what a node of an accelerated
    /// instance type is for, unlike its EFA interfaces.
    pub fn is_accelerator(&self) -> bool {
        matches!(self.0.as_str(), GPU | NEURON) || self.is_partition()
    }

    /// A GPU partition: a MIG profile such as `mig-1g.10gb` (see `mig.rs`).
    pub fn is_partition(&self) -> bool {
        crate::mig::profile(&self.0).is_some()
    }

    /// Parses a quantity given as text: `4`, `0.5`, `500m` (cpu), `16Gi`, `512Mi`, `1G` (memory).
    pub fn parse_quantity(&self, s: &str) -> Result<i64, ResourceError> {
        parse_quantity(self, s)
    }

    /// A quantity given as a JSON/YAML number (cores for cpu, bytes for memory, counts otherwise).
    pub fn quantity_from_f64(&self, v: f64) -> Result<i64, ResourceError> {
        let bad = |why: &str| ResourceError::BadQuantity {
            resource: self.0.clone(),
            value: v.to_string(),
            why: why.to_string(),
        };
        if !v.is_finite() || v < 0.0 {
            return Err(bad("must be a finite number >= 0"));
        }
        let scaled = if self.0 == CPU { v * 1000.0 } else { v };
        if scaled.fract().abs() > 1e-9 {
            return Err(bad(if self.0 == CPU {
                "cpu has a precision of 1m (0.001 cores)"
            } else {
                "must be a whole number"
            }));
        }
        if scaled > i64::MAX as f64 / 4.0 {
            return Err(bad(&too_large(self)));
        }
        Ok(scaled.round() as i64)
    }

    /// Formats a base-unit quantity the way a user writes it.
    pub fn format(&self, q: i64) -> String {
        format_quantity(self, q)
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl TryFrom<String> for ResourceName {
    type Error = ResourceError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        ResourceName::parse(&s)
    }
}

impl From<ResourceName> for String {
    fn from(r: ResourceName) -> String {
        r.0
    }
}

const BINARY_SUFFIXES: [(&str, i64); 6] = [
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("Pi", 1 << 50),
    ("Ei", 1 << 60),
];
const DECIMAL_SUFFIXES: [(&str, i64); 6] = [
    ("k", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("P", 1_000_000_000_000_000),
    ("E", 1_000_000_000_000_000_000),
];

/// Parses a Kubernetes-style quantity into the resource's base unit.
pub fn parse_quantity(res: &ResourceName, s: &str) -> Result<i64, ResourceError> {
    let bad = |why: String| ResourceError::BadQuantity {
        resource: res.0.clone(),
        value: s.to_string(),
        why,
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(bad("empty; write a number such as 4, 500m or 16Gi".into()));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() || num.chars().filter(|c| *c == '.').count() > 1 || num == "." {
        return Err(bad(
            "expected a number >= 0 optionally followed by a suffix (m, k, M, G, T, Ki, Mi, Gi, Ti)"
                .into(),
        ));
    }
    // Exact decimal arithmetic: value = int_part.frac_part * multiplier / divisor.
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if frac_part.len() > 9 {
        return Err(bad("at most 9 decimal places".into()));
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse::<i128>().map_err(|_| bad(too_large(res)))?
    };
    let frac_scale: i128 = 10i128.pow(frac_part.len() as u32);
    let (mult, div): (i128, i128) = if suffix.is_empty() {
        (1, 1)
    } else if suffix == "m" {
        (1, 1000)
    } else if let Some((_, m)) = BINARY_SUFFIXES.iter().find(|(n, _)| *n == suffix) {
        (*m as i128, 1)
    } else if let Some((_, m)) = DECIMAL_SUFFIXES.iter().find(|(n, _)| *n == suffix) {
        (*m as i128, 1)
    } else {
        return Err(bad(format!(
            "unknown suffix {suffix:?}; accepted: m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei"
        )));
    };
    // Base unit: cpu counts millicores.
    let unit: i128 = if res.0 == CPU { 1000 } else { 1 };
    let numer = mantissa
        .checked_mul(mult)
        .and_then(|v| v.checked_mul(unit))
        .ok_or_else(|| bad(too_large(res)))?;
    let denom = frac_scale * div;
    if numer % denom != 0 {
        return Err(bad(if res.0 == CPU {
            "cpu has a precision of 1m (0.001 cores)".into()
        } else {
            format!("{} is counted in whole units", res.0)
        }));
    }
    let v = numer / denom;
    if v > i128::from(MAX_QUANTITY) {
        return Err(bad(too_large(res)));
    }
    Ok(v as i64)
}

/// The largest quantity accepted, in base units: far enough below `i64::MAX` that sums and small
/// multiples of quantities cannot overflow. Workload requests and quotas are held to it too.
pub const MAX_QUANTITY: i64 = i64::MAX / 4;

/// Why a quantity above [`MAX_QUANTITY`] is refused, with that maximum in the units a user
/// writes.
fn too_large(res: &ResourceName) -> String {
    let max = MAX_QUANTITY;
    let most = match res.as_str() {
        CPU => format!("{}.{:03} cores ({max}m)", max / 1000, max % 1000),
        MEMORY => format!("{max} bytes (just under 2Ei)"),
        _ => max.to_string(),
    };
    format!("too large; the most accepted for {} is {most}", res.0)
}

/// Formats a base-unit quantity: cpu as cores (`4`, `0.5`), memory with a binary suffix when
/// exact (`16Gi`), counts as integers.
pub fn format_quantity(res: &ResourceName, q: i64) -> String {
    match res.as_str() {
        CPU => {
            if q % 1000 == 0 {
                (q / 1000).to_string()
            } else {
                let s = format!("{:.3}", q as f64 / 1000.0);
                s.trim_end_matches('0').to_string()
            }
        }
        MEMORY => {
            for (suffix, m) in BINARY_SUFFIXES.iter().rev() {
                if q != 0 && q % m == 0 {
                    return format!("{}{}", q / m, suffix);
                }
            }
            q.to_string()
        }
        _ => q.to_string(),
    }
}

/// Per-resource amounts, ordered by name so iteration is deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources(pub BTreeMap<ResourceName, i64>);

impl Resources {
    pub fn new() -> Self {
        Resources(BTreeMap::new())
    }
    pub fn get(&self, r: &ResourceName) -> i64 {
        self.0.get(r).copied().unwrap_or(0)
    }
    pub fn set(&mut self, r: ResourceName, v: i64) {
        self.0.insert(r, v);
    }
    pub fn add(&mut self, r: &ResourceName, v: i64) {
        *self.0.entry(r.clone()).or_insert(0) += v;
    }
    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> {
        self.0.iter().map(|(k, v)| (k, *v))
    }
    pub fn is_empty(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }
    /// Multiplies every amount (for `count` identical pods).
    pub fn scaled(&self, n: i64) -> Resources {
        Resources(self.0.iter().map(|(k, v)| (k.clone(), v * n)).collect())
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{k}={}", k.format(*v)))
            .collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(r: &str, s: &str) -> Result<i64, ResourceError> {
        ResourceName::parse(r).unwrap().parse_quantity(s)
    }

    #[test]
    fn aliases_map_to_short_names() {
        assert_eq!(
            ResourceName::parse("nvidia.com/gpu").unwrap().as_str(),
            "gpu"
        );
        assert_eq!(
            ResourceName::parse("aws.amazon.com/neurondevice")
                .unwrap()
                .as_str(),
            "neuron"
        );
        assert_eq!(
            ResourceName::parse("vpc.amazonaws.com/efa")
                .unwrap()
                .as_str(),
            "efa"
        );
        assert_eq!(
            ResourceName::parse("example.com/fpga").unwrap().as_str(),
            "example.com/fpga"
        );
        let mig = ResourceName::parse("nvidia.com/mig-1g.10gb").unwrap();
        assert_eq!(mig.as_str(), "mig-1g.10gb");
        assert!(mig.is_partition() && mig.is_device() && mig.is_accelerator());
        assert_eq!(ResourceName::parse("mig-1g.10gb").unwrap(), mig);
        // Not a profile: an ordinary counted name, as before.
        let other = ResourceName::parse("nvidia.com/mig-9g.10gb").unwrap();
        assert_eq!(other.as_str(), "nvidia.com/mig-9g.10gb");
        assert!(!other.is_device());
        assert!(ResourceName::parse("").is_err());
        assert!(ResourceName::parse("bad name").is_err());
    }

    #[test]
    fn cpu_quantities_are_millicores() {
        assert_eq!(q("cpu", "4").unwrap(), 4000);
        assert_eq!(q("cpu", "500m").unwrap(), 500);
        assert_eq!(q("cpu", "0.5").unwrap(), 500);
        assert_eq!(q("cpu", "1.25").unwrap(), 1250);
        assert!(q("cpu", "0.0005").is_err());
        assert!(q("cpu", "-1").is_err());
    }

    #[test]
    fn memory_suffixes() {
        assert_eq!(q("memory", "16Gi").unwrap(), 16 << 30);
        assert_eq!(q("memory", "512Mi").unwrap(), 512 << 20);
        assert_eq!(q("memory", "1G").unwrap(), 1_000_000_000);
        assert_eq!(q("memory", "1.5Gi").unwrap(), 3 << 29);
        assert_eq!(q("memory", "3221225472").unwrap(), 3221225472);
        let err = q("memory", "16Gb").unwrap_err().to_string();
        assert!(err.contains("\"Gb\"") && err.contains("Gi"), "{err}");
    }

    #[test]
    fn counted_resources_are_whole() {
        assert_eq!(q("gpu", "8").unwrap(), 8);
        assert!(q("gpu", "0.5").is_err());
        assert!(q("gpu", "500m").is_err());
        let gpu = ResourceName::gpu();
        assert_eq!(gpu.quantity_from_f64(2.0).unwrap(), 2);
        assert!(gpu.quantity_from_f64(1.5).is_err());
        assert_eq!(ResourceName::cpu().quantity_from_f64(0.5).unwrap(), 500);
    }

    #[test]
    fn too_large_names_the_value_and_the_maximum() {
        // Overflows i128 while parsing, overflows after the suffix, and over i64::MAX / 4.
        for (r, v, most) in [
            ("gpu", "9".repeat(40), "is 2305843009213693951"),
            (
                "memory",
                "9999999999Ei".to_string(),
                "2305843009213693951 bytes (just under 2Ei)",
            ),
            ("memory", "3Ei".to_string(), "2305843009213693951 bytes"),
            (
                "cpu",
                "2305843009213694".to_string(),
                "2305843009213693.951 cores",
            ),
            (
                "efa",
                "2305843009213693952".to_string(),
                "is 2305843009213693951",
            ),
        ] {
            let e = q(r, &v).unwrap_err().to_string();
            assert!(e.contains(&format!("{v:?}")) && e.contains(most), "{e}");
            assert!(e.contains(&format!("most accepted for {r}")), "{e}");
        }
        // The largest accepted value itself still parses.
        assert_eq!(q("efa", "2305843009213693951").unwrap(), i64::MAX / 4);
        assert_eq!(q("cpu", "2305843009213693.951").unwrap(), i64::MAX / 4);
        let e = ResourceName::memory()
            .quantity_from_f64(1e30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1000000000000000000000000000000") && e.contains("just under 2Ei"),
            "{e}"
        );
    }

    #[test]
    fn formatting_round_trips() {
        assert_eq!(ResourceName::cpu().format(500), "0.5");
        assert_eq!(ResourceName::cpu().format(4000), "4");
        assert_eq!(ResourceName::memory().format(16 << 30), "16Gi");
        assert_eq!(ResourceName::gpu().format(3), "3");
    }
}

//! GPU partitions (NVIDIA MIG): the profiles, which instance types offer which, and the
//! resource each profile is counted as.
//!
//! A MIG profile such as `mig-1g.10gb` is a resource of its own (`ResourceName::is_partition`),
//! as Kubernetes' device plugin names it (`nvidia.com/mig-1g.10gb`, read as `mig-1g.10gb`): a
//! device resource whose instances a node's agent discovers through NVML, each with its own
//! UUID. Its first number is the GPU slices it takes of a GPU's seven (`1g` … `7g`), the
//! second its memory.

/// The slices a whole GPU has in MIG's profiles (`7g` is a whole GPU).
pub const SLICES_PER_GPU: u32 = 7;

/// The MIG profiles of each instance type whose GPUs can be partitioned, as HyperPod's CLI
/// lists them (`hyperpod-api.md` §1.3). The B300 ones are not in the API's enum yet; allot
/// accepts them, as HyperPod's CLI does.
const PROFILES: [(&[&str], [&str; 6]); 6] = [
    (
        &["ml.p4d.24xlarge"],
        [
            "mig-1g.5gb",
            "mig-1g.10gb",
            "mig-2g.10gb",
            "mig-3g.20gb",
            "mig-4g.20gb",
            "mig-7g.40gb",
        ],
    ),
    (
        &["ml.p4de.24xlarge", "ml.p5.48xlarge"],
        [
            "mig-1g.10gb",
            "mig-1g.20gb",
            "mig-2g.20gb",
            "mig-3g.40gb",
            "mig-4g.40gb",
            "mig-7g.80gb",
        ],
    ),
    (
        &["ml.p5e.48xlarge", "ml.p5en.48xlarge"],
        [
            "mig-1g.18gb",
            "mig-1g.35gb",
            "mig-2g.35gb",
            "mig-3g.71gb",
            "mig-4g.71gb",
            "mig-7g.141gb",
        ],
    ),
    (
        &["ml.p6-b200.48xlarge"],
        [
            "mig-1g.23gb",
            "mig-1g.45gb",
            "mig-2g.45gb",
            "mig-3g.90gb",
            "mig-4g.90gb",
            "mig-7g.180gb",
        ],
    ),
    (
        &["ml.p6-b300.48xlarge"],
        [
            "mig-1g.34gb",
            "mig-1g.67gb",
            "mig-2g.67gb",
            "mig-3g.135gb",
            "mig-4g.135gb",
            "mig-7g.269gb",
        ],
    ),
    (
        &["ml.p6e-gb200.36xlarge"],
        [
            "mig-1g.23gb",
            "mig-1g.47gb",
            "mig-2g.47gb",
            "mig-3g.93gb",
            "mig-4g.93gb",
            "mig-7g.186gb",
        ],
    ),
];

/// A MIG profile's shape: `mig-3g.40gb` is 3 slices and 40 GB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub slices: u32,
    pub memory_gb: u32,
}

/// The shape of `name` if it names a MIG profile: `mig-<slices>g.<memory>gb`, optionally
/// followed by a variant (`mig-1g.10gb+me`, `mig-1g.10gb.me`), with 1 to 7 slices.
pub fn profile(name: &str) -> Option<Profile> {
    let rest = name.strip_prefix("mig-")?;
    let (slices, rest) = rest.split_once("g.")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (memory, tail) = rest.split_at(digits);
    let tail = tail.strip_prefix("gb")?;
    let variant_ok = tail.is_empty()
        || (tail.len() > 1
            && tail.starts_with(['+', '-', '.'])
            && tail[1..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.'));
    if !variant_ok || slices.is_empty() || !slices.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let slices: u32 = slices.parse().ok()?;
    let memory_gb: u32 = memory.parse().ok()?;
    ((1..=SLICES_PER_GPU).contains(&slices) && memory_gb > 0)
        .then_some(Profile { slices, memory_gb })
}

/// The profile in NVML's name of a MIG device: `NVIDIA H100 80GB HBM3 MIG 1g.10gb` →
/// `mig-1g.10gb`; `None` when the name carries no profile.
pub fn profile_of_device_name(name: &str) -> Option<String> {
    let (_, tail) = name.rsplit_once("MIG ")?;
    let candidate = format!("mig-{}", tail.trim());
    profile(&candidate).map(|_| candidate)
}

/// The MIG profiles offered by `instance_type` (empty: its GPUs are not partitioned).
pub fn profiles_of(instance_type: &str) -> &'static [&'static str] {
    PROFILES
        .iter()
        .find(|(types, _)| types.contains(&instance_type))
        .map(|(_, p)| &p[..])
        .unwrap_or(&[])
}

/// The instance types that offer MIG profiles, for error messages.
pub fn partitionable_types() -> Vec<&'static str> {
    PROFILES
        .iter()
        .flat_map(|(t, _)| t.iter().copied())
        .collect()
}

/// Checks that `profile_name` is one of `instance_type`'s profiles; the error lists the ones
/// that are.
pub fn check_profile(instance_type: &str, profile_name: &str) -> Result<(), String> {
    let offered = profiles_of(instance_type);
    if offered.is_empty() {
        return Err(format!(
            "{instance_type} has no GPU partitions (MIG profiles); instance types with them: {}",
            partitionable_types().join(", ")
        ));
    }
    if !offered.contains(&profile_name) {
        return Err(format!(
            "{profile_name:?} is not a MIG profile of {instance_type}; its profiles are {}",
            offered.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_by_their_shape() {
        assert_eq!(
            profile("mig-3g.40gb"),
            Some(Profile {
                slices: 3,
                memory_gb: 40
            })
        );
        assert!(profile("mig-1g.10gb+me").is_some());
        assert!(profile("mig-1g.10gb.me").is_some());
        for bad in [
            "mig-8g.10gb",
            "mig-0g.10gb",
            "mig-g.10gb",
            "mig-1g.gb",
            "mig-1g.10",
            "mig-1g.10gb+",
            "mig-1g.10gbx",
            "gpu",
            "mig-1g.0gb",
        ] {
            assert_eq!(profile(bad), None, "{bad}");
        }
    }

    #[test]
    fn nvml_names_carry_the_profile() {
        assert_eq!(
            profile_of_device_name("NVIDIA H100 80GB HBM3 MIG 1g.10gb").as_deref(),
            Some("mig-1g.10gb")
        );
        assert_eq!(
            profile_of_device_name("NVIDIA A100-SXM4-40GB MIG 3g.20gb").as_deref(),
            Some("mig-3g.20gb")
        );
        assert_eq!(profile_of_device_name("NVIDIA H100 80GB HBM3"), None);
    }

    #[test]
    fn every_listed_profile_parses_and_types_are_checked() {
        for (_, ps) in PROFILES {
            for p in ps {
                assert!(profile(p).is_some(), "{p}");
            }
        }
        assert_eq!(check_profile("ml.p5.48xlarge", "mig-1g.10gb"), Ok(()));
        let e = check_profile("ml.p5.48xlarge", "mig-1g.5gb").unwrap_err();
        assert!(e.contains("mig-1g.10gb, mig-1g.20gb, mig-2g.20gb"), "{e}");
        let e = check_profile("ml.g5.8xlarge", "mig-1g.10gb").unwrap_err();
        assert!(e.contains("ml.p5.48xlarge"), "{e}");
    }
}

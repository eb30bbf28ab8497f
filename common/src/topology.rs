//! Network topology: the levels nodes carry (a rack, a network block, an UltraServer) and a
//! workload's ask that its pods share one domain of a level.
//!
//! A node carries its topology as level → domain pairs (`topology.k8s.aws/network-node-layer-3:
//! nn-1a2b`): the agent's `--topology`, or on HyperPod EKS the node's `topology.k8s.aws/*`
//! labels. A workload asks with Kueue's annotations, which allot keeps as the workload's labels
//! (where Kubernetes manifests put them; the job file's `topology` and the CLI's `--topology`
//! write them): all pods of each pod set in one domain of the level, required or preferred,
//! and optionally in slices of a number of pods, each slice in one domain of a lower level.
//! `kubernetes.io/hostname` is a level every node has: each node is its own domain.

use std::collections::BTreeMap;

/// The level all pods of each pod set must share one domain of.
pub const REQUIRED_LABEL: &str = "kueue.x-k8s.io/podset-required-topology";
/// The level all pods of each pod set should share one domain of, where one has room.
pub const PREFERRED_LABEL: &str = "kueue.x-k8s.io/podset-preferred-topology";
/// The level each slice of `SLICE_SIZE_LABEL` pods must share one domain of.
pub const SLICE_LEVEL_LABEL: &str = "kueue.x-k8s.io/podset-slice-required-topology";
/// Pods per slice.
pub const SLICE_SIZE_LABEL: &str = "kueue.x-k8s.io/podset-slice-size";
/// The level whose domains are single nodes: every node has it without saying so.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// HyperPod's topology levels, from the widest to the closest (`topology.k8s.aws/*`).
pub const HYPERPOD_LEVELS: [&str; 4] = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/ultraserver-id",
];
/// The prefix of the node labels an agent takes as its topology by default.
pub const HYPERPOD_PREFIX: &str = "topology.k8s.aws/";
/// The most levels one node carries.
pub const MAX_LEVELS: usize = 8;
/// The longest level name or domain value.
pub const MAX_NAME: usize = 253;

/// A node's topology: level → domain.
pub type NodeTopology = BTreeMap<String, String>;

/// What a workload asks of its pods' topology (every pod set alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ask<'a> {
    /// The level each pod set's pods share one domain of.
    pub level: &'a str,
    /// Whether the pod set waits for a domain with room (`false`: it is placed over several
    /// domains when no one has room).
    pub required: bool,
    /// Slices: each `size` consecutive pods in one domain of `level`.
    pub slice: Option<Slice<'a>>,
}

/// Each `size` pods of a pod set in one domain of `level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slice<'a> {
    pub level: &'a str,
    pub size: u32,
}

/// The ask `labels` make (`None`: no topology asked), or why they are not valid; `counts`, the
/// pod sets' pod counts, must each be a whole number of slices.
pub fn ask<'a>(
    labels: &'a BTreeMap<String, String>,
    counts: &[u32],
) -> Result<Option<Ask<'a>>, String> {
    let required = labels.get(REQUIRED_LABEL).map(|v| v.trim());
    let preferred = labels.get(PREFERRED_LABEL).map(|v| v.trim());
    let slice_level = labels.get(SLICE_LEVEL_LABEL).map(|v| v.trim());
    let slice_size = labels.get(SLICE_SIZE_LABEL).map(|v| v.trim());
    for (key, v) in [
        (REQUIRED_LABEL, required),
        (PREFERRED_LABEL, preferred),
        (SLICE_LEVEL_LABEL, slice_level),
    ] {
        if let Some(v) = v {
            check_name(v).map_err(|e| format!("{key}={v:?}: {e}"))?;
        }
    }
    let (level, required) = match (required, preferred) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{REQUIRED_LABEL} and {PREFERRED_LABEL} are both given: a workload requires a level or prefers one, not both"
            ))
        }
        (Some(l), None) => (l, true),
        (None, Some(l)) => (l, false),
        (None, None) => {
            if slice_level.is_some() || slice_size.is_some() {
                return Err(format!(
                    "{SLICE_LEVEL_LABEL} and {SLICE_SIZE_LABEL} need {REQUIRED_LABEL} or {PREFERRED_LABEL}"
                ));
            }
            return Ok(None);
        }
    };
    let slice = match (slice_level, slice_size) {
        (None, None) => None,
        (Some(l), Some(n)) => {
            let size = n.parse::<u32>().ok().filter(|s| *s >= 1).ok_or_else(|| {
                format!("{SLICE_SIZE_LABEL}={n:?}: expected a whole number of pods, at least 1")
            })?;
            if let Some(c) = counts.iter().find(|c| **c % size != 0) {
                return Err(format!(
                    "{SLICE_SIZE_LABEL}={size}: a pod set of {c} pods is not a whole number of slices; give a size that divides every pod set's count"
                ));
            }
            Some(Slice { level: l, size })
        }
        (Some(_), None) => {
            return Err(format!(
                "{SLICE_LEVEL_LABEL} is given without {SLICE_SIZE_LABEL}: say how many pods a slice has"
            ))
        }
        (None, Some(_)) => {
            return Err(format!(
                "{SLICE_SIZE_LABEL} is given without {SLICE_LEVEL_LABEL}: say which level a slice shares"
            ))
        }
    };
    Ok(Some(Ask {
        level,
        required,
        slice,
    }))
}

/// `ask` as the replicated state reads it: labels that are not valid (refused at submit, but a
/// workload may carry them from a release before) ask nothing.
pub fn ask_or_none<'a>(labels: &'a BTreeMap<String, String>, counts: &[u32]) -> Option<Ask<'a>> {
    ask(labels, counts).ok().flatten()
}

/// Whether `labels` hold any of the topology labels.
pub fn asks(labels: &BTreeMap<String, String>) -> bool {
    [
        REQUIRED_LABEL,
        PREFERRED_LABEL,
        SLICE_LEVEL_LABEL,
        SLICE_SIZE_LABEL,
    ]
    .iter()
    .any(|k| labels.contains_key(*k))
}

/// Whether `key` is one of the topology labels.
pub fn is_label(key: &str) -> bool {
    matches!(
        key,
        REQUIRED_LABEL | PREFERRED_LABEL | SLICE_LEVEL_LABEL | SLICE_SIZE_LABEL
    )
}

/// A level name or domain value: 1 to `MAX_NAME` characters of letters, digits, `-`, `_`,
/// `.` and `/` (label keys and values as Kubernetes spells them).
pub fn check_name(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_NAME {
        return Err(format!("expected 1 to {MAX_NAME} characters"));
    }
    match s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
    {
        Some(c) => Err(format!(
            "{c:?} is not allowed: use letters, digits, '-', '_', '.' and '/'"
        )),
        None => Ok(()),
    }
}

/// A node's topology checked: at most `MAX_LEVELS` levels, valid names, and not the hostname
/// level (every node has it already).
pub fn check_node(t: &NodeTopology) -> Result<(), String> {
    if t.len() > MAX_LEVELS {
        return Err(format!(
            "{} topology levels; at most {MAX_LEVELS} are supported",
            t.len()
        ));
    }
    for (level, domain) in t {
        check_name(level).map_err(|e| format!("topology level {level:?}: {e}"))?;
        check_name(domain).map_err(|e| format!("topology {level}={domain:?}: {e}"))?;
        if level == HOSTNAME {
            return Err(format!(
                "topology level {HOSTNAME} is every node's own name and is not set"
            ));
        }
    }
    Ok(())
}

/// `LEVEL=DOMAIN[,LEVEL=DOMAIN...]` (the agent's `--topology`), checked.
pub fn parse_node(s: &str) -> Result<NodeTopology, String> {
    let mut t = NodeTopology::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (level, domain) = part
            .split_once('=')
            .ok_or_else(|| format!("topology {part:?}: expected LEVEL=DOMAIN, such as rack=r12"))?;
        let (level, domain) = (level.trim(), domain.trim());
        if t.insert(level.to_string(), domain.to_string()).is_some() {
            return Err(format!("topology level {level:?} is given twice"));
        }
    }
    check_node(&t)?;
    Ok(t)
}

/// `LEVEL` or `LEVEL:required|preferred` (the CLI's `--topology`) as the labels that ask it,
/// and the slice labels for `--topology-slice LEVEL:SIZE`.
pub fn labels_of(topology: &str, slice: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let (level, mode) = match topology.rsplit_once(':') {
        Some((l, m)) => (l.trim(), m.trim()),
        None => (topology.trim(), "required"),
    };
    check_name(level).map_err(|e| format!("--topology {topology:?}: {e}"))?;
    let key = match mode {
        "required" => REQUIRED_LABEL,
        "preferred" => PREFERRED_LABEL,
        m => {
            return Err(format!(
                "--topology {topology:?}: {m:?} is not a mode; expected LEVEL, LEVEL:required or LEVEL:preferred"
            ))
        }
    };
    let mut out = vec![(key.to_string(), level.to_string())];
    if let Some(s) = slice {
        let (l, n) = s.rsplit_once(':').ok_or_else(|| {
            format!("--topology-slice {s:?}: expected LEVEL:PODS, such as rack:4")
        })?;
        check_name(l.trim()).map_err(|e| format!("--topology-slice {s:?}: {e}"))?;
        out.push((SLICE_LEVEL_LABEL.to_string(), l.trim().to_string()));
        out.push((SLICE_SIZE_LABEL.to_string(), n.trim().to_string()));
    }
    Ok(out)
}

/// A domain value with `{i}` (the node's index in its group) and `{i/N}` (that index divided
/// by N, rounded down) filled in: how a scenario gives each node of a group its rack.
pub fn expand(template: &str, i: u64) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map(|e| start + e)
            .ok_or_else(|| format!("{template:?}: a '{{' without its '}}'"))?;
        let inner = rest[start + 1..end].trim();
        let v = match inner.split_once('/') {
            None if inner == "i" => i,
            Some((a, n)) if a.trim() == "i" => match n.trim().parse::<u64>() {
                Ok(n) if n >= 1 => i / n,
                _ => {
                    return Err(format!(
                        "{template:?}: {{{inner}}} divides by {n:?}; expected a whole number, at least 1"
                    ))
                }
            },
            _ => {
                return Err(format!(
                    "{template:?}: {{{inner}}} is not known; expected {{i}} or {{i/N}}"
                ))
            }
        };
        out.push_str(&v.to_string());
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn required_preferred_and_slices_are_read_from_labels() {
        assert_eq!(ask(&labels(&[]), &[4]), Ok(None));
        let l = labels(&[(REQUIRED_LABEL, "rack")]);
        assert_eq!(
            ask(&l, &[4]),
            Ok(Some(Ask {
                level: "rack",
                required: true,
                slice: None
            }))
        );
        let l = labels(&[
            (PREFERRED_LABEL, "block"),
            (SLICE_LEVEL_LABEL, "rack"),
            (SLICE_SIZE_LABEL, "2"),
        ]);
        let a = ask(&l, &[4, 2]).unwrap().unwrap();
        assert!(!a.required);
        assert_eq!(
            a.slice,
            Some(Slice {
                level: "rack",
                size: 2
            })
        );
    }

    #[test]
    fn bad_asks_are_named_with_what_is_accepted() {
        let e = ask(
            &labels(&[(REQUIRED_LABEL, "rack"), (PREFERRED_LABEL, "block")]),
            &[1],
        )
        .unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let l = labels(&[
            (REQUIRED_LABEL, "rack"),
            (SLICE_LEVEL_LABEL, "host"),
            (SLICE_SIZE_LABEL, "3"),
        ]);
        let e = ask(&l, &[4]).unwrap_err();
        assert!(e.contains("4 pods") && e.contains("divides"), "{e}");
        let l = labels(&[(REQUIRED_LABEL, "rack"), (SLICE_SIZE_LABEL, "0")]);
        assert!(ask(&l, &[4]).unwrap_err().contains("without"));
        let l = labels(&[(SLICE_SIZE_LABEL, "2")]);
        assert!(ask(&l, &[4]).unwrap_err().contains("need"));
        let e = ask(&labels(&[(REQUIRED_LABEL, "ra ck")]), &[1]).unwrap_err();
        assert!(e.contains("' '"), "{e}");
        assert_eq!(ask_or_none(&labels(&[(REQUIRED_LABEL, "")]), &[1]), None);
    }

    #[test]
    fn node_topology_and_cli_forms_parse() {
        let t = parse_node("rack=r1, block=b0").unwrap();
        assert_eq!(t.get("rack").map(String::as_str), Some("r1"));
        assert!(parse_node("rack").unwrap_err().contains("LEVEL=DOMAIN"));
        assert!(parse_node("rack=a,rack=b").unwrap_err().contains("twice"));
        assert!(parse_node("kubernetes.io/hostname=x")
            .unwrap_err()
            .contains("own name"));
        assert_eq!(
            labels_of("rack", None).unwrap(),
            vec![(REQUIRED_LABEL.to_string(), "rack".to_string())]
        );
        assert_eq!(
            labels_of("rack:preferred", Some("host:2")).unwrap().len(),
            3
        );
        assert!(labels_of("rack:maybe", None)
            .unwrap_err()
            .contains("LEVEL:preferred"));
    }

    #[test]
    fn templates_fill_in_the_index() {
        assert_eq!(expand("r{i/4}", 9).unwrap(), "r2");
        assert_eq!(expand("n{i}-b{i/16}", 17).unwrap(), "n17-b1");
        assert_eq!(expand("plain", 3).unwrap(), "plain");
        assert!(expand("r{i/0}", 1).unwrap_err().contains("at least 1"));
        assert!(expand("r{j}", 1).unwrap_err().contains("{i}"));
        assert!(expand("r{i", 1).unwrap_err().contains("without"));
    }
}

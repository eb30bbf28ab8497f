//! Container Device Interface (CDI) specs: where a node has them (the NVIDIA container toolkit
//! writes `nvidia.com/gpu` specs to `/etc/cdi` or `/var/run/cdi` with `nvidia-ctk cdi
//! generate`), a pod's GPUs come from the spec's devices named by the assigned indices, with
//! the edits the spec gives them: device nodes, the driver's libraries and binaries as mounts,
//! environment variables and OCI hooks (the toolkit's `create-symlinks` and `update-ldcache`).
//! A node without a spec of the kind gets the plain device nodes (`spec::assigned_devices`).
//!
//! Files are read in directory order; a device named in a later directory (`/var/run/cdi`,
//! generated at boot) replaces the same name from an earlier one (`/etc/cdi`), as the CDI
//! specification says. A file that does not parse is skipped with a warning, so one bad file
//! cannot take every GPU pod of the node down; a pod whose device is then missing fails with
//! a message that names the files and what they hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::devices::{device_node, DeviceNode};

/// Where CDI specs live, in increasing priority.
pub const DEFAULT_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];
/// The kind NVIDIA's toolkit gives its GPUs.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// Largest spec file read (the toolkit's are tens of KiB).
const MAX_FILE: u64 = 4 << 20;
/// Most spec files looked at per directory.
const MAX_FILES: usize = 256;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct SpecFile {
    #[serde(default)]
    cdi_version: String,
    kind: String,
    #[serde(default)]
    devices: Vec<Device>,
    #[serde(default)]
    container_edits: Edits,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Device {
    name: String,
    #[serde(default)]
    container_edits: Edits,
}

/// What a spec (or one of its devices) adds to a container.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub device_nodes: Vec<CdiDeviceNode>,
    #[serde(default)]
    pub mounts: Vec<CdiMount>,
    #[serde(default)]
    pub hooks: Vec<CdiHook>,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CdiDeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, when not the same.
    pub host_path: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub major: Option<i64>,
    pub minor: Option<i64>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    pub host_path: String,
    pub container_path: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    /// `createRuntime`, `createContainer`, `startContainer`, `poststart`, `poststop` or
    /// `prestart`.
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    pub timeout: Option<i64>,
}

/// The hook points OCI runtimes run (`prestart` is the deprecated one, still honoured).
const HOOK_NAMES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

impl Edits {
    fn extend(&mut self, o: &Edits) {
        self.env.extend(o.env.iter().cloned());
        self.device_nodes.extend(o.device_nodes.iter().cloned());
        self.mounts.extend(o.mounts.iter().cloned());
        self.hooks.extend(o.hooks.iter().cloned());
        for g in &o.additional_gids {
            if !self.additional_gids.contains(g) {
                self.additional_gids.push(*g);
            }
        }
    }

    /// The device nodes as the OCI spec takes them: numbers from the spec, else from the host's
    /// node, looked up under `dev_dir` (where the agent sees the host's `/dev`: on Kubernetes
    /// a read-only mount, since the agent's own `/dev` holds only what its runtime gave it).
    pub fn oci_devices(&self, dev_dir: &Path) -> Result<Vec<DeviceNode>, String> {
        let mut out: Vec<DeviceNode> = Vec::new();
        for d in &self.device_nodes {
            let named = d.host_path.as_deref().unwrap_or(&d.path);
            let host = match named.strip_prefix("/dev/") {
                Some(rest) => dev_dir.join(rest),
                None => PathBuf::from(named),
            };
            let node = match (d.major, d.minor, d.kind.as_deref()) {
                (Some(major), Some(minor), Some(k @ ("c" | "b" | "u"))) => DeviceNode {
                    path: d.path.clone(),
                    kind: if k == "b" { 'b' } else { 'c' },
                    major,
                    minor,
                },
                _ => device_node(&host, &d.path)
                    .map_err(|e| format!("CDI device node {}: {e}", d.path))?,
            };
            if !out.iter().any(|o| o.path == node.path) {
                out.push(node);
            }
        }
        Ok(out)
    }
}

/// `env` with the spec's variables set (a spec's value replaces one of the same name: CDI
/// edits are applied last, as container runtimes do).
pub fn apply_env(env: &mut Vec<String>, extra: &[String]) {
    for kv in extra {
        let key = kv.split('=').next().unwrap_or("");
        env.retain(|e| e.split('=').next() != Some(key));
        env.push(kv.clone());
    }
}

/// The edits for `names` of `kind`, from the specs in `dirs`; `None` when no spec of that kind
/// is there. `warnings` gets the files skipped.
pub fn resolve(
    dirs: &[PathBuf],
    kind: &str,
    names: &[String],
    warnings: &mut Vec<String>,
) -> Result<Option<Edits>, String> {
    // Device name -> (file, spec-level edits index, device edits); later directories win.
    let mut specs: Vec<(PathBuf, SpecFile)> = Vec::new();
    for dir in dirs {
        for (path, spec) in read_dir(dir, warnings) {
            if spec.kind == kind {
                specs.push((path, spec));
            }
        }
    }
    if specs.is_empty() {
        return Ok(None);
    }
    let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (_, s)) in specs.iter().enumerate() {
        for d in &s.devices {
            by_name.insert(d.name.as_str(), i);
        }
    }
    let mut out = Edits::default();
    let mut used: Vec<usize> = Vec::new();
    for n in names {
        let Some(&i) = by_name.get(n.as_str()) else {
            let files: Vec<String> = specs.iter().map(|(p, _)| p.display().to_string()).collect();
            let have: Vec<&str> = by_name.keys().copied().collect();
            return Err(format!(
                "no CDI device {kind}={n} in {} (it has {}); regenerate the spec with \
                 `nvidia-ctk cdi generate` or remove it to use /dev/nvidiaN",
                files.join(", "),
                if have.is_empty() {
                    "no devices".to_string()
                } else {
                    have.join(", ")
                }
            ));
        };
        if !used.contains(&i) {
            used.push(i);
        }
        if let Some(d) = specs[i].1.devices.iter().rev().find(|d| d.name == *n) {
            out.extend(&d.container_edits);
        }
    }
    // The spec-wide edits (control nodes, libraries, hooks) once per spec used, first.
    let mut all = Edits::default();
    used.sort_unstable();
    for i in used {
        all.extend(&specs[i].1.container_edits);
    }
    all.extend(&out);
    for h in &all.hooks {
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            return Err(format!(
                "CDI hook {:?} ({}) is not an OCI hook: use one of {}",
                h.hook_name,
                h.path,
                HOOK_NAMES.join(", ")
            ));
        }
    }
    Ok(Some(all))
}

/// Spec files of one directory, by name; those that cannot be read or parsed are warned about.
fn read_dir(dir: &Path, warnings: &mut Vec<String>) -> Vec<(PathBuf, SpecFile)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("json" | "yaml" | "yml")
            )
        })
        .collect();
    paths.sort();
    if paths.len() > MAX_FILES {
        warnings.push(format!(
            "{}: {} CDI spec files, only the first {MAX_FILES} read",
            dir.display(),
            paths.len()
        ));
        paths.truncate(MAX_FILES);
    }
    let mut out = Vec::new();
    for p in paths {
        match parse_file(&p) {
            Ok(s) => out.push((p, s)),
            Err(e) => warnings.push(format!("CDI spec {} skipped: {e}", p.display())),
        }
    }
    out
}

fn parse_file(p: &Path) -> Result<SpecFile, String> {
    let len = std::fs::metadata(p).map_err(|e| e.to_string())?.len();
    if len > MAX_FILE {
        return Err(format!("{len} bytes, more than the {MAX_FILE} read"));
    }
    let text = std::fs::read_to_string(p).map_err(|e| e.to_string())?;
    parse(&text)
}

/// One spec, JSON or YAML (JSON is YAML, but its own parser names positions better).
fn parse(text: &str) -> Result<SpecFile, String> {
    let spec: SpecFile = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())?
    };
    let (vendor, class) = spec.kind.split_once('/').unwrap_or(("", ""));
    if vendor.is_empty() || class.is_empty() {
        return Err(format!(
            "kind {:?} is not VENDOR/CLASS (as nvidia.com/gpu)",
            spec.kind
        ));
    }
    if spec.cdi_version.is_empty() {
        return Err("no cdiVersion".into());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLKIT: &str = r#"---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      type: c
      major: 195
      minor: 0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
      type: c
      major: 195
      minor: 1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    type: c
    major: 195
    minor: 255
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    options: [ro, nosuid, nodev, bind]
"#;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn the_assigned_devices_and_the_spec_wide_edits() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "nvidia.yaml", TOOLKIT);
        let mut w = Vec::new();
        let e = resolve(&[d.path().into()], NVIDIA_GPU, &["1".into()], &mut w)
            .unwrap()
            .unwrap();
        assert!(w.is_empty(), "{w:?}");
        let devs = e.oci_devices(Path::new("/dev")).unwrap();
        let paths: Vec<&str> = devs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/dev/nvidiactl", "/dev/nvidia1"]);
        assert_eq!((devs[1].major, devs[1].minor), (195, 1));
        assert_eq!(e.env, ["NVIDIA_VISIBLE_DEVICES=void"]);
        assert_eq!(e.hooks[0].hook_name, "createContainer");
        assert_eq!(e.mounts[0].options, ["ro", "nosuid", "nodev", "bind"]);
        // Another kind, or no spec at all: the plain device nodes are used.
        assert_eq!(
            resolve(
                &[d.path().into()],
                "amazon.com/neuron",
                &["0".into()],
                &mut w
            ),
            Ok(None)
        );
        assert_eq!(
            resolve(&[d.path().join("none")], NVIDIA_GPU, &["0".into()], &mut w),
            Ok(None)
        );
    }

    #[test]
    fn spec_variables_replace_the_pods() {
        let mut env = vec![
            "PATH=/bin".to_string(),
            "NVIDIA_VISIBLE_DEVICES=all".to_string(),
        ];
        apply_env(&mut env, &["NVIDIA_VISIBLE_DEVICES=void".to_string()]);
        assert_eq!(env, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"]);
    }

    #[test]
    fn nodes_without_numbers_are_looked_up_under_the_device_directory() {
        // As nvidia-ctk writes them: a path only, the host's /dev seen at another directory.
        let host_dev = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(host_dev.path().join("dri")).unwrap();
        for n in ["nvidia1", "dri/renderD129"] {
            std::os::unix::fs::symlink("/dev/null", host_dev.path().join(n)).unwrap();
        }
        let e = Edits {
            device_nodes: vec![
                CdiDeviceNode {
                    path: "/dev/nvidia1".into(),
                    ..Default::default()
                },
                CdiDeviceNode {
                    path: "/dev/dri/renderD129".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let devs = e.oci_devices(host_dev.path()).unwrap();
        assert_eq!(devs[0].path, "/dev/nvidia1");
        assert_eq!(devs[1].path, "/dev/dri/renderD129");
        assert_eq!((devs[1].kind, devs[1].major, devs[1].minor), ('c', 1, 3));
        let err = e.oci_devices(&host_dev.path().join("none")).unwrap_err();
        assert!(err.contains("/dev/nvidia1"), "{err}");
    }

    #[test]
    fn a_missing_device_names_what_the_specs_have() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "nvidia.yaml", TOOLKIT);
        let e = resolve(
            &[d.path().into()],
            NVIDIA_GPU,
            &["3".into()],
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.contains("nvidia.com/gpu=3"), "{e}");
        assert!(e.contains("it has 0, 1, all"), "{e}");
    }

    #[test]
    fn later_directories_win_and_bad_files_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let etc = d.path().join("etc");
        let run = d.path().join("run");
        write(&etc, "nvidia.yaml", TOOLKIT);
        write(
            &run,
            "nvidia.json",
            r#"{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"1",
               "containerEdits":{"deviceNodes":[{"path":"/dev/nvidia1","type":"c","major":195,
               "minor":7}]}}]}"#,
        );
        write(&run, "broken.yaml", "kind: [\n");
        write(
            &run,
            "nokind.json",
            r#"{"cdiVersion":"0.6.0","kind":"gpu"}"#,
        );
        write(&run, "notes.txt", "ignored");
        let mut w = Vec::new();
        let e = resolve(&[etc, run], NVIDIA_GPU, &["1".into()], &mut w)
            .unwrap()
            .unwrap();
        let devs = e.oci_devices(Path::new("/dev")).unwrap();
        assert!(devs
            .iter()
            .any(|d| d.path == "/dev/nvidia1" && d.minor == 7));
        // Only the spec that provided the device contributes its spec-wide edits.
        assert!(e.env.is_empty(), "{e:?}");
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w.iter().any(|x| x.contains("broken.yaml")), "{w:?}");
        assert!(w.iter().any(|x| x.contains("not VENDOR/CLASS")), "{w:?}");
    }

    #[test]
    fn an_unknown_hook_point_is_refused() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "x.yaml",
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    \
             hooks:\n    - hookName: beforeBreakfast\n      path: /bin/true\n",
        );
        let e = resolve(
            &[d.path().into()],
            NVIDIA_GPU,
            &["0".into()],
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.contains("beforeBreakfast"), "{e}");
    }
}

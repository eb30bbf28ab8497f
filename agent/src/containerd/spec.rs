//! The OCI runtime spec of a pod's container: only what its placement assigned.
//!
//! The container gets the device nodes of its assigned GPUs (`/dev/nvidiaN` and the control
//! nodes; for a GPU partition its parent's node and the `/dev/nvidia-caps` nodes of its GPU
//! and compute instance), Neuron devices (`/dev/neuronN`) and EFA interfaces (`/dev/infiniband/uverbsN`), and
//! the device cgroup allows exactly those besides the standard ones (null, zero, tty, ...). Its
//! cgroup caps CPU (quota from the cpu request), memory (the memory request, no swap) and
//! process count. It runs in its own pid, ipc, uts and mount namespaces, and its own network
//! namespace unless the workload asked for the host's network (multi-node NCCL and EFA need
//! it). `/dev/shm` has the size asked for; the workload's host paths are bind-mounted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

pub use super::devices::{device_node, DeviceNode};
use super::pull::ImageConfig;

/// Default size of `/dev/shm` (as Docker's and Kubernetes' default).
pub const DEFAULT_SHM_BYTES: u64 = 64 << 20;
/// Process limit of a pod's cgroup.
pub const PIDS_LIMIT: i64 = 32_768;

/// A host path made visible in the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindMount {
    pub host: String,
    pub container: String,
    pub read_only: bool,
}

/// Everything the spec is made from.
#[derive(Clone, Debug, Default)]
pub struct PodContainer {
    pub hostname: String,
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    pub devices: Vec<DeviceNode>,
    pub mounts: Vec<BindMount>,
    pub shm_bytes: u64,
    pub host_network: bool,
    /// Bytes; 0 = no limit.
    pub memory_limit: i64,
    /// Millicores; 0 = no limit.
    pub cpu_millis: i64,
    pub cgroups_path: String,
    /// Unlimited locked memory (EFA's verbs need it).
    pub memlock_unlimited: bool,
    /// Open-file limit (at most what the node allows: see `nofile_limit`).
    pub nofile: u64,
    /// Mounts, hooks and groups from the node's CDI specs (their device nodes and variables
    /// are in `devices` and `env` already).
    pub cdi: super::cdi::Edits,
}

/// The open-file limit a pod gets: 1,048,576, or the node's hard limit when lower (a container
/// cannot be given more than its runtime has).
pub fn nofile_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes into the struct passed.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    let hard = if ok { r.rlim_max } else { 1024 };
    hard.min(1_048_576)
}

/// The program a container runs, as Kubernetes decides it: `command` replaces the image's
/// entrypoint (and drops its cmd), `args` replaces its cmd.
pub fn process_args(
    image: &ImageConfig,
    command: &[String],
    args: &[String],
) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = if command.is_empty() {
        image.entrypoint.clone().unwrap_or_default()
    } else {
        command.to_vec()
    };
    if !args.is_empty() {
        out.extend(args.iter().cloned());
    } else if command.is_empty() {
        out.extend(image.cmd.clone().unwrap_or_default());
    }
    if out.is_empty() {
        return Err(
            "the image has no entrypoint or cmd and the workload gives no command: nothing to run"
                .into(),
        );
    }
    Ok(out)
}

/// The image's environment overlaid with the pod's (the pod's values win).
pub fn merge_env(
    image: &ImageConfig,
    pod: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for kv in image.env.iter().flatten() {
        let key = kv.split('=').next().unwrap_or("");
        if !pod.contains_key(key) {
            out.push(kv.clone());
        }
    }
    if !out.iter().any(|kv| kv.starts_with("PATH=")) && !pod.contains_key("PATH") {
        out.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    }
    out.extend(pod.iter().map(|(k, v)| format!("{k}={v}")));
    out
}

/// The device nodes of an assignment: its GPUs (and the NVIDIA control nodes the node has)
/// unless a CDI spec gives them (`gpus_from_cdi`), its Neuron devices, its EFA interfaces'
/// verbs devices. `dev_dir` is where the host's nodes are; `efa_verbs` the node's EFA
/// interfaces in discovery order with their `uverbsN` (empty where sysfs shows none, as with
/// fake devices: EFA `i` is then `uverbsI`).
pub fn assigned_devices(
    dev_dir: &Path,
    devices: &std::collections::BTreeMap<String, Vec<u8>>,
    gpus_from_cdi: bool,
    efa_verbs: &[(String, Option<String>)],
) -> Result<Vec<DeviceNode>, String> {
    let mut out = Vec::new();
    let mut add = |host: PathBuf, container: String| -> Result<(), String> {
        out.push(device_node(&host, &container)?);
        Ok(())
    };
    if let Some(gpus) = devices
        .get("gpu")
        .filter(|g| !g.is_empty() && !gpus_from_cdi)
    {
        for i in gpus {
            add(
                dev_dir.join(format!("nvidia{i}")),
                format!("/dev/nvidia{i}"),
            )?;
        }
        for ctl in [
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-uvm-tools",
            "nvidia-modeset",
        ] {
            let p = dev_dir.join(ctl);
            if p.exists() {
                add(p, format!("/dev/{ctl}"))?;
            }
        }
    }
    for i in devices.get("neuron").into_iter().flatten() {
        add(
            dev_dir.join(format!("neuron{i}")),
            format!("/dev/neuron{i}"),
        )?;
    }
    for i in devices.get("efa").into_iter().flatten() {
        let verbs = match efa_verbs.get(usize::from(*i)) {
            _ if efa_verbs.is_empty() => format!("uverbs{i}"),
            Some((_, Some(v))) => v.clone(),
            Some((name, None)) => {
                return Err(format!(
                    "EFA interface {i} ({name}) has no verbs device in sysfs \
                     (device/infiniband_verbs is empty)"
                ))
            }
            None => {
                return Err(format!(
                    "EFA interface {i} is not on this node (sysfs shows {})",
                    efa_verbs.len()
                ))
            }
        };
        add(
            dev_dir.join("infiniband").join(&verbs),
            format!("/dev/infiniband/{verbs}"),
        )?;
    }
    Ok(out)
}

/// Where the NVIDIA driver lists the device minors of MIG capabilities.
pub const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

/// The device nodes of GPU partitions without CDI: each parent GPU's `nvidiaN` and the control
/// nodes (unless `already` has them), and the access nodes of the partition's GPU instance and
/// compute instance, `/dev/nvidia-caps/nvidia-capM` with M from the driver's `mig-minors`
/// table (`gpu0/gi1/access 12`, `gpu0/gi1/ci0/access 13`), as the NVIDIA container toolkit
/// gives them.
pub fn partition_devices(
    dev_dir: &Path,
    minors_file: &Path,
    parts: &[crate::inventory::Partition],
    already: &[DeviceNode],
) -> Result<Vec<DeviceNode>, String> {
    let text = std::fs::read_to_string(minors_file).map_err(|e| {
        format!(
            "GPU partitions need the driver's MIG capabilities, and {} cannot be read: {e}",
            minors_file.display()
        )
    })?;
    let minors: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let mut out: Vec<DeviceNode> = Vec::new();
    let mut add = |host: PathBuf, container: String| -> Result<(), String> {
        if !already
            .iter()
            .chain(out.iter())
            .any(|d| d.path == container)
        {
            out.push(device_node(&host, &container)?);
        }
        Ok(())
    };
    for p in parts {
        add(
            dev_dir.join(format!("nvidia{}", p.gpu)),
            format!("/dev/nvidia{}", p.gpu),
        )?;
        for ctl in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
            let host = dev_dir.join(ctl);
            if host.exists() {
                add(host, format!("/dev/{ctl}"))?;
            }
        }
        let (Some(gi), Some(ci)) = (p.gpu_instance, p.compute_instance) else {
            return Err(format!(
                "GPU partition {} ({}): NVML did not give its GPU and compute instance ids, \
                 which its device nodes need; give the node CDI specs (nvidia-ctk cdi generate)",
                p.index, p.uuid
            ));
        };
        for key in [
            format!("gpu{}/gi{gi}/access", p.gpu),
            format!("gpu{}/gi{gi}/ci{ci}/access", p.gpu),
        ] {
            let minor = minors.get(key.as_str()).ok_or_else(|| {
                format!(
                    "GPU partition {} ({}): {} has no {key}",
                    p.index,
                    p.uuid,
                    minors_file.display()
                )
            })?;
            add(
                dev_dir
                    .join("nvidia-caps")
                    .join(format!("nvidia-cap{minor}")),
                format!("/dev/nvidia-caps/nvidia-cap{minor}"),
            )?;
        }
    }
    Ok(out)
}

/// Renders the spec (JSON, as containerd stores it with the container).
/// The standard file systems, the host's name files with the host network, the pod's bind
/// mounts and the CDI spec's.
fn mounts(p: &PodContainer) -> Vec<Value> {
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", format!("size={}", p.shm_bytes.max(4096))]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/run", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
               "options": ["ro", "nosuid", "noexec", "nodev"]}),
    ];
    if p.host_network {
        for f in ["/etc/resolv.conf", "/etc/hosts"] {
            if Path::new(f).exists() {
                mounts.push(json!({"destination": f, "type": "bind", "source": f,
                                   "options": ["rbind", "ro"]}));
            }
        }
    }
    for m in &p.mounts {
        mounts.push(
            json!({"destination": m.container, "type": "bind", "source": m.host,
                           "options": ["rbind", if m.read_only { "ro" } else { "rw" }]}),
        );
    }
    for m in &p.cdi.mounts {
        let kind = m.kind.clone().unwrap_or_else(|| "bind".into());
        let mut options = m.options.clone();
        if kind == "bind" && !options.iter().any(|o| o == "bind" || o == "rbind") {
            options.push("rbind".into());
        }
        mounts.push(json!({"destination": m.container_path, "type": kind,
                           "source": m.host_path, "options": options}));
    }
    mounts
}

/// The CDI spec's hooks, by the OCI hook they run at.
fn hooks(p: &PodContainer) -> serde_json::Map<String, Value> {
    let mut hooks = serde_json::Map::new();
    for h in &p.cdi.hooks {
        let mut hook = json!({"path": h.path});
        if !h.args.is_empty() {
            hook["args"] = json!(h.args);
        }
        if !h.env.is_empty() {
            hook["env"] = json!(h.env);
        }
        if let Some(t) = h.timeout {
            hook["timeout"] = json!(t);
        }
        if let Value::Array(list) = hooks
            .entry(h.hook_name.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            list.push(hook);
        }
    }
    hooks
}

/// The cgroup's device rules and limits, and the device nodes made in the container.
fn resources_and_devices(p: &PodContainer) -> (Value, Vec<Value>) {
    // The standard devices every container may use, then the assigned ones.
    let mut allow = vec![json!({"allow": false, "access": "rwm"})];
    for (maj, min) in [
        (1, 3),
        (1, 5),
        (1, 7),
        (1, 8),
        (1, 9),
        (5, 0),
        (5, 1),
        (5, 2),
    ] {
        allow
            .push(json!({"allow": true, "type": "c", "major": maj, "minor": min, "access": "rwm"}));
    }
    allow.push(json!({"allow": true, "type": "c", "major": 136, "access": "rwm"}));
    for d in &p.devices {
        allow.push(
            json!({"allow": true, "type": d.kind.to_string(), "major": d.major,
                          "minor": d.minor, "access": "rwm"}),
        );
    }
    let devices: Vec<Value> = p
        .devices
        .iter()
        .map(|d| {
            json!({"path": d.path, "type": d.kind.to_string(), "major": d.major, "minor": d.minor,
                   "fileMode": 0o666, "uid": 0, "gid": 0})
        })
        .collect();
    let mut resources = json!({
        "devices": allow,
        "pids": {"limit": PIDS_LIMIT},
    });
    if p.memory_limit > 0 {
        resources["memory"] = json!({"limit": p.memory_limit, "swap": p.memory_limit});
    }
    if p.cpu_millis > 0 {
        resources["cpu"] = json!({
            "quota": p.cpu_millis.saturating_mul(100),
            "period": 100_000u64,
            "shares": (p.cpu_millis.saturating_mul(1024) / 1000).max(2),
        });
    }
    (resources, devices)
}

pub fn render(p: &PodContainer) -> Value {
    let caps: Vec<&str> = vec![
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FSETID",
        "CAP_FOWNER",
        "CAP_MKNOD",
        "CAP_NET_RAW",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETFCAP",
        "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT",
        "CAP_KILL",
        "CAP_AUDIT_WRITE",
    ];
    let nofile = if p.nofile == 0 { 1024 } else { p.nofile };
    let mut rlimits = vec![json!({"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile})];
    if p.memlock_unlimited {
        rlimits.push(json!({"type": "RLIMIT_MEMLOCK", "hard": u64::MAX, "soft": u64::MAX}));
    }
    let mounts = mounts(p);
    let hooks = hooks(p);
    let mut user = json!({"uid": p.uid, "gid": p.gid});
    if !p.cdi.additional_gids.is_empty() {
        user["additionalGids"] = json!(p.cdi.additional_gids);
    }
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    if !p.host_network {
        namespaces.push(json!({"type": "network"}));
    }
    let (resources, devices) = resources_and_devices(p);
    let mut spec = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": user,
            "args": p.args,
            "env": p.env,
            "cwd": if p.cwd.is_empty() { "/" } else { &p.cwd },
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": rlimits,
            "noNewPrivileges": true,
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": p.hostname,
        "mounts": mounts,
        "linux": {
            "resources": resources,
            "cgroupsPath": p.cgroups_path,
            "namespaces": namespaces,
            "devices": devices,
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                            "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                            "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
        },
    });
    if !hooks.is_empty() {
        spec["hooks"] = Value::Object(hooks);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn image(entry: &[&str], cmd: &[&str]) -> ImageConfig {
        let v = |s: &[&str]| (!s.is_empty()).then(|| s.iter().map(|x| x.to_string()).collect());
        ImageConfig {
            entrypoint: v(entry),
            cmd: v(cmd),
            env: Some(vec!["PATH=/img/bin".into(), "A=image".into()]),
            ..Default::default()
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn command_and_args_follow_kubernetes() {
        let img = image(&["/entry"], &["default"]);
        assert_eq!(
            process_args(&img, &[], &[]).unwrap(),
            s(&["/entry", "default"])
        );
        assert_eq!(
            process_args(&img, &[], &s(&["x"])).unwrap(),
            s(&["/entry", "x"])
        );
        assert_eq!(process_args(&img, &s(&["sh"]), &[]).unwrap(), s(&["sh"]));
        assert_eq!(
            process_args(&img, &s(&["sh"]), &s(&["-c", "true"])).unwrap(),
            s(&["sh", "-c", "true"])
        );
        let e = process_args(&ImageConfig::default(), &[], &[]).unwrap_err();
        assert!(e.contains("nothing to run"), "{e}");
    }

    #[test]
    fn pod_environment_wins_over_the_image() {
        let img = image(&[], &["sh"]);
        let pod = BTreeMap::from([("A".to_string(), "pod".to_string())]);
        let env = merge_env(&img, &pod);
        assert_eq!(env, s(&["PATH=/img/bin", "A=pod"]));
        let env = merge_env(&ImageConfig::default(), &BTreeMap::new());
        assert!(env[0].starts_with("PATH=/usr/local/sbin"));
    }

    #[test]
    fn efa_interfaces_get_their_own_verbs_devices() {
        let dev = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dev.path().join("infiniband")).unwrap();
        for v in ["uverbs0", "uverbs5"] {
            std::os::unix::fs::symlink("/dev/null", dev.path().join("infiniband").join(v)).unwrap();
        }
        let efa = |i: u8| BTreeMap::from([("efa".to_string(), vec![i])]);
        let verbs = vec![
            ("efa_0".to_string(), Some("uverbs5".to_string())),
            ("efa_1".to_string(), None),
        ];
        let d = assigned_devices(dev.path(), &efa(0), false, &verbs).unwrap();
        assert_eq!(d[0].path, "/dev/infiniband/uverbs5");
        let e = assigned_devices(dev.path(), &efa(1), false, &verbs).unwrap_err();
        assert!(e.contains("efa_1") && e.contains("no verbs device"), "{e}");
        let e = assigned_devices(dev.path(), &efa(2), false, &verbs).unwrap_err();
        assert!(e.contains("not on this node"), "{e}");
        // No sysfs view (fake devices): EFA i is uverbsI.
        let d = assigned_devices(dev.path(), &efa(0), false, &[]).unwrap();
        assert_eq!(d[0].path, "/dev/infiniband/uverbs0");
    }

    #[test]
    fn the_spec_holds_only_the_assigned_devices_and_the_limits() {
        let p = PodContainer {
            hostname: "w-0".into(),
            args: s(&["sh"]),
            devices: vec![DeviceNode {
                path: "/dev/nvidia2".into(),
                kind: 'c',
                major: 195,
                minor: 2,
            }],
            memory_limit: 1 << 30,
            cpu_millis: 1500,
            shm_bytes: 1 << 30,
            cgroups_path: "/allot/x".into(),
            ..Default::default()
        };
        let v = render(&p);
        let devs = v["linux"]["devices"].as_array().unwrap();
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0]["path"], "/dev/nvidia2");
        let allow = v["linux"]["resources"]["devices"].as_array().unwrap();
        assert_eq!(allow[0]["allow"], false);
        assert!(allow.iter().any(|a| a["major"] == 195 && a["minor"] == 2));
        assert!(!allow.iter().any(|a| a["major"] == 195 && a["minor"] != 2));
        assert_eq!(v["linux"]["resources"]["memory"]["limit"], 1i64 << 30);
        assert_eq!(v["linux"]["resources"]["cpu"]["quota"], 150_000);
        assert!(v["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["type"] == "network"));
        let shm = v["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/dev/shm")
            .unwrap()
            .clone();
        assert!(shm["options"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("size={}", 1u64 << 30))));
        let host = render(&PodContainer {
            host_network: true,
            ..p
        });
        assert!(!host["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["type"] == "network"));
    }

    #[test]
    fn partitions_get_their_gpu_and_their_instances_capability_nodes() {
        let dev = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dev.path().join("nvidia-caps")).unwrap();
        for n in [
            "nvidia0",
            "nvidia1",
            "nvidiactl",
            "nvidia-caps/nvidia-cap21",
            "nvidia-caps/nvidia-cap22",
            "nvidia-caps/nvidia-cap30",
            "nvidia-caps/nvidia-cap31",
        ] {
            std::os::unix::fs::symlink("/dev/null", dev.path().join(n)).unwrap();
        }
        let minors = dev.path().join("mig-minors");
        std::fs::write(
            &minors,
            "config 1\nmonitor 2\ngpu0/gi1/access 21\ngpu0/gi1/ci0/access 22\ngpu1/gi2/access 30\ngpu1/gi2/ci0/access 31\n",
        )
        .unwrap();
        let part = |gpu, gi| crate::inventory::Partition {
            resource: "mig-1g.10gb".into(),
            index: gpu,
            uuid: format!("MIG-{gpu}"),
            gpu,
            slot: 0,
            gpu_instance: Some(gi),
            compute_instance: Some(0),
        };
        let got = partition_devices(dev.path(), &minors, &[part(0, 1), part(1, 2)], &[]).unwrap();
        let paths: Vec<&str> = got.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "/dev/nvidia0",
                "/dev/nvidiactl",
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidia-caps/nvidia-cap22",
                "/dev/nvidia1",
                "/dev/nvidia-caps/nvidia-cap30",
                "/dev/nvidia-caps/nvidia-cap31",
            ]
        );
        assert!(got
            .iter()
            .all(|d| d.kind == 'c' && d.major == 1 && d.minor == 3));
        // A whole GPU already given keeps its one node.
        let whole = device_node(&dev.path().join("nvidia0"), "/dev/nvidia0").unwrap();
        let got = partition_devices(dev.path(), &minors, &[part(0, 1)], &[whole]).unwrap();
        assert!(!got.iter().any(|d| d.path == "/dev/nvidia0"));
        // An instance the table lacks, or no table, is named.
        let e = partition_devices(dev.path(), &minors, &[part(0, 5)], &[]).unwrap_err();
        assert!(e.contains("gpu0/gi5/access"), "{e}");
        let e = partition_devices(dev.path(), &dev.path().join("none"), &[part(0, 1)], &[])
            .unwrap_err();
        assert!(e.contains("MIG capabilities"), "{e}");
    }
}

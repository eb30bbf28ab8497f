//! Job files and job flags: what `allot submit` reads (the scenario format's workload fields
//! plus how to run it, YAML or JSON, or a Kubernetes Job manifest) and the flags that override
//! it, made into the API's submit input.

use std::collections::BTreeMap;

use allot_common::api::{RunSpec, SubmitInput};
use anyhow::{anyhow, bail, Context};
use serde_json::Value;

use crate::scenario;

/// A job given on the command line (`allot submit --gpus 1 -- python train.py`); each flag
/// overrides the same field of a job file given with it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JobFlags {
    /// Workload name [default: from the file, else generated and printed].
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Team [default: from the file, else the team of a user certificate (--as user-TEAM)].
    #[arg(long)]
    pub(crate) team: Option<String>,
    /// Priority class name or number.
    #[arg(long)]
    pub(crate) priority: Option<String>,
    /// Pods in the gang.
    #[arg(long)]
    pub(crate) count: Option<u32>,
    /// GPUs per pod.
    #[arg(long)]
    pub(crate) gpus: Option<String>,
    /// vCPUs per pod (8, 500m).
    #[arg(long)]
    pub(crate) cpus: Option<String>,
    /// Memory per pod (32Gi).
    #[arg(long)]
    pub(crate) memory: Option<String>,
    /// Requests per pod as resource=quantity pairs: gpu=1,cpu=8,memory=32Gi.
    #[arg(long, value_delimiter = ',')]
    pub(crate) request: Vec<String>,
    /// GPU partitions per pod, of this MIG profile (mig-1g.10gb), as HyperPod's CLI takes
    /// them; with --accelerator-partition-count (1 unless given).
    #[arg(long, conflicts_with = "gpus")]
    pub(crate) accelerator_partition_type: Option<String>,
    /// How many partitions of --accelerator-partition-type each pod gets.
    #[arg(long, requires = "accelerator_partition_type")]
    pub(crate) accelerator_partition_count: Option<u32>,
    /// A label (key=value; repeat or comma-separate for several), for `cancel -l`.
    #[arg(short = 'l', long = "label", value_delimiter = ',')]
    pub(crate) label: Vec<String>,
    /// Submit a job array: one workload per index (0-999, 1,3,5, 0-15:4), named NAME-INDEX,
    /// with its index in ALLOT_ARRAY_INDEX; %N at the end runs at most N at once (0-999%8).
    #[arg(long)]
    pub(crate) array: Option<String>,
    /// Run the pods from this OCI image (agents with the containerd driver).
    #[arg(long)]
    pub(crate) image: Option<String>,
    /// Mount a host path into the containers: HOST:PATH[:ro] (repeat for several).
    #[arg(long)]
    pub(crate) mount: Vec<String>,
    /// Size of the containers' /dev/shm (8Gi).
    #[arg(long)]
    pub(crate) shm_size: Option<String>,
    /// Run the containers in the node's network namespace (multi-node NCCL, EFA).
    #[arg(long)]
    pub(crate) host_network: bool,
    /// Numeric uid[:gid] the containers run as.
    #[arg(long)]
    pub(crate) user: Option<String>,
    /// An environment variable NAME=value (repeat for several).
    #[arg(short = 'e', long = "env")]
    pub(crate) env: Vec<String>,
    /// Queue the workload again when it fails, up to --max-retry times (3 unless given), as
    /// HyperPod's `sagemaker.amazonaws.com/enable-job-auto-resume` annotation does.
    #[arg(long)]
    pub(crate) auto_resume: bool,
    /// With --auto-resume: how many times a failed workload is queued again (0 to 100).
    #[arg(long)]
    pub(crate) max_retry: Option<u32>,
    /// Place each pod set's pods in one domain of this topology level: LEVEL (required) or
    /// LEVEL:preferred, such as topology.k8s.aws/network-node-layer-3 (Kueue's
    /// podset-required-topology and podset-preferred-topology annotations).
    #[arg(long)]
    pub(crate) topology: Option<String>,
    /// With --topology: slices of PODS pods, each in one domain of LEVEL (LEVEL:PODS, such as
    /// kubernetes.io/hostname:2).
    #[arg(long, requires = "topology")]
    pub(crate) topology_slice: Option<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true)]
    pub(crate) command: Vec<String>,
}

impl JobFlags {
    /// The workload to submit: the file's fields (if any), the flags over them.
    pub fn submit_input(
        &self,
        file: Option<&std::path::Path>,
        identity: Option<&str>,
    ) -> anyhow::Result<SubmitInput> {
        let (mut v, origin) = read_source(file)?;
        // A Kubernetes Job, PyTorchJob or Pod as HyperPod users submit them to Kueue.
        if let Some(job) =
            allot_common::kubernetes::job_from_manifest(&v, &origin).map_err(anyhow::Error::msg)?
        {
            v = job;
        }
        let obj = v
            .as_object_mut()
            .ok_or_else(|| anyhow!("{origin}: a job file is a mapping of workload fields"))?;
        let mut set = |k: &str, val: Option<Value>| {
            if let Some(val) = val {
                obj.insert(k.to_string(), val);
            }
        };
        set("name", self.name.clone().map(Value::String));
        set("team", self.team.clone().map(Value::String));
        set(
            "priority",
            self.priority.clone().map(|p| match p.parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::String(p),
            }),
        );
        set("count", self.count.map(Value::from));
        if !self.command.is_empty() {
            set("command", Some(Value::from(self.command.clone())));
            obj.remove("args");
        }
        for (k, v) in [
            ("image", &self.image),
            ("shm_size", &self.shm_size),
            ("user", &self.user),
        ] {
            if let Some(v) = v {
                obj.insert(k.into(), Value::String(v.clone()));
            }
        }
        if self.host_network {
            obj.insert("host_network".into(), Value::Bool(true));
        }
        if self.auto_resume {
            obj.insert("auto_resume".into(), Value::Bool(true));
        }
        if let Some(n) = self.max_retry {
            obj.insert("max_retry".into(), Value::from(n));
        }
        if let Some(t) = &self.topology {
            obj.insert(
                "topology".into(),
                topology_value(t, self.topology_slice.as_deref())?,
            );
        }
        self.merge_lists(obj, &origin)?;
        self.merge_requests(obj, &origin)?;
        if !obj.contains_key("team") {
            if let Some(team) = identity.and_then(|s| s.strip_prefix("user-")) {
                obj.insert("team".into(), Value::String(team.to_string()));
            }
        }
        if !obj.contains_key("name") {
            let base = self
                .command
                .first()
                .and_then(|c| std::path::Path::new(c).file_stem())
                .map(|s| s.to_string_lossy().to_lowercase())
                .filter(|s| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                })
                .unwrap_or_else(|| "job".to_string());
            obj.insert(
                "name".into(),
                Value::String(format!("{base}-{}", token_suffix())),
            );
        }
        job_from_value(v, &origin)
    }

    /// `--mount`, `--env` and `--label` added to the file's lists.
    fn merge_lists(
        &self,
        obj: &mut serde_json::Map<String, Value>,
        origin: &str,
    ) -> anyhow::Result<()> {
        if !self.mount.is_empty() {
            let list = obj
                .entry("mounts")
                .or_insert_with(|| Value::Array(Vec::new()));
            let Some(list) = list.as_array_mut() else {
                bail!("{origin}: mounts must be a list");
            };
            list.extend(self.mount.iter().cloned().map(Value::String));
        }
        if !self.env.is_empty() {
            let env = obj
                .entry("env")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(env) = env.as_object_mut() else {
                bail!("{origin}: env must be a mapping of NAME: value");
            };
            for pair in &self.env {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--env {pair:?}: use NAME=value"))?;
                env.insert(k.to_string(), Value::String(v.to_string()));
            }
        }
        if !self.label.is_empty() {
            let labels = obj
                .entry("labels")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(labels) = labels.as_object_mut() else {
                bail!("{origin}: labels must be a mapping of key: value");
            };
            for pair in &self.label {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    anyhow!("--label {pair:?}: use key=value, as experiment=lr-sweep")
                })?;
                labels.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
            }
        }
        Ok(())
    }

    /// `--gpus`, `--cpus`, `--memory` and `--request` over the file's requests.
    fn merge_requests(
        &self,
        obj: &mut serde_json::Map<String, Value>,
        origin: &str,
    ) -> anyhow::Result<()> {
        let mut requests: Vec<(String, String)> = Vec::new();
        for (k, v) in [
            ("gpu", &self.gpus),
            ("cpu", &self.cpus),
            ("memory", &self.memory),
        ] {
            if let Some(v) = v {
                requests.push((k.to_string(), v.clone()));
            }
        }
        if let Some(p) = &self.accelerator_partition_type {
            let name = p.strip_prefix("nvidia.com/").unwrap_or(p);
            if allot_common::mig::profile(name).is_none() {
                bail!(
                    "--accelerator-partition-type {p:?}: not a MIG profile; write one such as \
                     mig-1g.10gb (the node's instance type decides which it has)"
                );
            }
            let n = self.accelerator_partition_count.unwrap_or(1);
            requests.push((name.to_string(), n.to_string()));
        }
        for pair in &self.request {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                anyhow!("--request {pair:?}: use resource=quantity, as gpu=1,cpu=8,memory=32Gi")
            })?;
            requests.push((k.trim().to_string(), v.trim().to_string()));
        }
        if !requests.is_empty() {
            let req = obj
                .entry("requests")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(req) = req.as_object_mut() else {
                bail!("{origin}: requests must be a mapping of resource: quantity");
            };
            for (k, v) in requests {
                req.insert(k, Value::String(v));
            }
        }
        Ok(())
    }
}

/// The job's text as a value, and where it came from: a file, standard input (`-`), or nothing
/// (the command line alone).
fn read_source(file: Option<&std::path::Path>) -> anyhow::Result<(Value, String)> {
    Ok(match file {
        Some(p) if p.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the job from standard input")?;
            (
                parse_job_text(&text, "standard input")?,
                "standard input".to_string(),
            )
        }
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read job file {}", p.display()))?;
            (
                parse_job_text(&text, &p.display().to_string())?,
                p.display().to_string(),
            )
        }
        None => (
            Value::Object(Default::default()),
            "the command line".to_string(),
        ),
    })
}

pub(crate) fn parse_job_text(text: &str, origin: &str) -> anyhow::Result<Value> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(_) => serde_saphyr::from_str(text)
            .map_err(|e| anyhow!("{origin}: not valid YAML or JSON: {e}")),
    }
}

/// `--topology LEVEL[:required|preferred]` and `--topology-slice LEVEL:PODS` as the job file's
/// `topology` (`{required: LEVEL, slice: {level, size}}`).
fn topology_value(topology: &str, slice: Option<&str>) -> anyhow::Result<Value> {
    use allot_common::topology as topo;
    let mut t = serde_json::Map::new();
    for (k, v) in topo::labels_of(topology, slice).map_err(anyhow::Error::msg)? {
        match k.as_str() {
            topo::REQUIRED_LABEL => t.insert("required".into(), Value::String(v)),
            topo::PREFERRED_LABEL => t.insert("preferred".into(), Value::String(v)),
            topo::SLICE_LEVEL_LABEL => {
                let s = t
                    .entry("slice")
                    .or_insert_with(|| Value::Object(Default::default()));
                s["level"] = Value::String(v);
                None
            }
            _ => {
                let n = v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    anyhow!("--topology-slice {slice:?}: {v:?} is not a number of pods, at least 1")
                })?;
                let s = t
                    .entry("slice")
                    .or_insert_with(|| Value::Object(Default::default()));
                s["size"] = Value::from(n);
                None
            }
        };
    }
    Ok(Value::Object(t))
}

/// The job file's `auto_resume` and `max_retry` as the labels HyperPod's annotations are,
/// checked.
fn auto_resume_labels(
    obj: &mut serde_json::Map<String, Value>,
    labels: &mut BTreeMap<String, String>,
) -> anyhow::Result<()> {
    use allot_common::auto_resume::{retries, ENABLE_LABEL, MAX_RETRIES, MAX_RETRY_LABEL};
    match obj.remove("auto_resume") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => {
            labels.insert(ENABLE_LABEL.into(), b.to_string());
        }
        Some(o) => bail!("auto_resume: expected true or false, got {o}"),
    }
    match obj.remove("max_retry") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let n = v
                .as_u64()
                .filter(|n| *n <= u64::from(MAX_RETRIES))
                .ok_or_else(|| {
                    anyhow!("max_retry: expected a whole number from 0 to {MAX_RETRIES}, got {v}")
                })?;
            labels.insert(MAX_RETRY_LABEL.into(), n.to_string());
        }
    }
    retries(labels).map_err(anyhow::Error::msg)?;
    Ok(())
}

#[cfg(test)]
pub fn read_job(path: &std::path::Path) -> anyhow::Result<SubmitInput> {
    JobFlags::default().submit_input(Some(path), None)
}

pub(crate) fn job_from_value(mut v: Value, origin: &str) -> anyhow::Result<SubmitInput> {
    let obj = v
        .as_object_mut()
        .ok_or_else(|| anyhow!("{}: a job file is a mapping of workload fields", origin))?;
    for k in ["submit_at", "duration", "admitted"] {
        if obj.contains_key(k) {
            bail!(
                "{}: {k} belongs to simulation scenarios, not to a job file",
                origin
            );
        }
    }
    let strings = |v: Option<Value>, key: &str| -> anyhow::Result<Vec<String>> {
        match v {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s]),
            Some(Value::Array(a)) => a
                .into_iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s),
                    Value::Number(n) => Ok(n.to_string()),
                    o => Err(anyhow!("{key}: {o} is not a string")),
                })
                .collect(),
            Some(o) => bail!("{key}: expected a string or a list of strings, got {o}"),
        }
    };
    let command = strings(obj.remove("command"), "command")?;
    let args = strings(obj.remove("args"), "args")?;
    let image = match obj.remove("image") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(o) => bail!("image: expected an image reference such as registry/repo:tag, got {o}"),
    };
    let mounts = match obj.remove("mounts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|m| parse_mount(&m))
            .collect::<anyhow::Result<Vec<_>>>()?,
        Some(o) => bail!(
            "mounts: expected a list of HOST:PATH[:ro] or {{host_path, path, read_only}}, got {o}"
        ),
    };
    let shm_size = match obj.remove("shm_size") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_bytes(&v).map_err(|e| anyhow!("shm_size: {e}"))?),
    };
    let host_network = match obj.remove("host_network") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(o) => bail!("host_network: expected true or false, got {o}"),
    };
    let user = match obj.remove("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(o) => bail!("user: expected user[:group] (numbers or names, e.g. 1000:1000), got {o}"),
    };
    // A mapping of names to values; a value that is not a string is taken as written.
    let string_map = |v: Option<Value>, what: &str| -> anyhow::Result<BTreeMap<String, String>> {
        match v {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => Ok(m
                .into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s,
                        o => o.to_string(),
                    };
                    (k, v)
                })
                .collect()),
            Some(o) => bail!("{what}, got {o}"),
        }
    };
    let env = string_map(obj.remove("env"), "env: expected a mapping of NAME: value")?;
    let workdir = match obj.remove("workdir") {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(o) => bail!("workdir: expected a path, got {o}"),
    };
    let grace_seconds = match obj.get("grace") {
        None => None,
        Some(g) => Some(
            g.as_u64()
                .and_then(|g| u32::try_from(g).ok())
                .ok_or_else(|| anyhow!("grace: expected whole seconds, got {g}"))?,
        ),
    };
    obj.remove("grace");
    let mut labels = string_map(
        obj.remove("labels"),
        "labels: expected a mapping of key: value",
    )?;
    auto_resume_labels(obj, &mut labels).map_err(|e| anyhow!("{origin}: {e}"))?;
    let w: scenario::WorkloadIn = serde_path_to_error::deserialize(v)
        .map_err(|e| anyhow!("{}: {}: {}", origin, e.path(), e.inner()))?;
    let mut spec = scenario::workload("", &w).map_err(|e| anyhow!("{}: {e}", origin))?;
    // The file's labels, and those its `topology` wrote.
    let topology = std::mem::replace(&mut spec.labels, labels);
    spec.labels.extend(topology);
    spec.validate().map_err(|e| anyhow!("{origin}: {e}"))?;
    let counts: Vec<u32> = spec.pod_sets.iter().map(|p| p.count).collect();
    allot_common::topology::ask(&spec.labels, &counts).map_err(|e| anyhow!("{origin}: {e}"))?;
    Ok(SubmitInput {
        client_token: Some(format!("{}-{}", spec.name, token_suffix())),
        spec,
        run: Some(RunSpec {
            command,
            env,
            workdir,
            grace_seconds,
            image,
            args,
            mounts,
            shm_size,
            host_network,
            user,
        }),
    })
}

/// A mount as a job file or `--mount` writes it: `HOST:PATH[:ro|:rw]`, or a mapping with
/// `host_path` (or `hostPath`), `path` (or `container_path`, `mountPath`) and `read_only`.
pub(crate) fn parse_mount(v: &Value) -> anyhow::Result<allot_common::api::HostMount> {
    let usage = "a mount is HOST:PATH[:ro] or {host_path: HOST, path: PATH, read_only: true}";
    match v {
        Value::String(s) => {
            let parts: Vec<&str> = s.split(':').collect();
            let (host, path, ro) = match parts.as_slice() {
                [h, p] => (*h, *p, false),
                [h, p, "ro"] => (*h, *p, true),
                [h, p, "rw"] => (*h, *p, false),
                _ => bail!("mount {s:?}: {usage}"),
            };
            Ok(allot_common::api::HostMount {
                host_path: host.into(),
                container_path: path.into(),
                read_only: ro,
            })
        }
        Value::Object(m) => {
            let get = |keys: &[&str]| keys.iter().find_map(|k| m.get(*k)).and_then(|v| v.as_str());
            let host = get(&["host_path", "hostPath"])
                .ok_or_else(|| anyhow!("mount {v}: no host_path; {usage}"))?;
            let path = get(&["path", "container_path", "mountPath"])
                .ok_or_else(|| anyhow!("mount {v}: no path; {usage}"))?;
            let ro = match m.get("read_only").or_else(|| m.get("readOnly")) {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(o) => bail!("mount {v}: read_only is true or false, not {o}"),
            };
            Ok(allot_common::api::HostMount {
                host_path: host.into(),
                container_path: path.into(),
                read_only: ro,
            })
        }
        o => bail!("mount {o}: {usage}"),
    }
}

/// Bytes from a number or a quantity such as `8Gi` or `512Mi`.
pub(crate) fn parse_bytes(v: &Value) -> anyhow::Result<u64> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        o => bail!("expected bytes or a quantity such as 8Gi, got {o}"),
    };
    let n = allot_common::resource::parse_quantity(&allot_common::ResourceName::memory(), &text)
        .map_err(|e| anyhow!("{e}"))?;
    u64::try_from(n).map_err(|_| anyhow!("{text:?} is not a size"))
}

/// A suffix that makes a submit's client token unique to this invocation.
pub(crate) fn token_suffix() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}-{}", t, std::process::id())
}

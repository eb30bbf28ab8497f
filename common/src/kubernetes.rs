//! Kubernetes manifests as allot job files: the batch/v1 Jobs, Kubeflow PyTorchJobs and Pods that
//! HyperPod EKS users submit to Kueue, read unchanged by `allot submit -f`. Beside the AWS
//! input surface (`hyperpod/`): the other way HyperPod's users describe their work. Errors are
//! text that names the field's path and what is accepted.

/// What reading a manifest gives, or why it was refused.
type Result<T> = std::result::Result<T, String>;

use serde_json::{Map, Value};

const ACCEPTED: &str = "batch/v1 Job, kubeflow.org/v1 PyTorchJob, v1 Pod";
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
const PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Kubernetes resource names and the allot names they stand for.
const RESOURCES: [(&str, &str); 5] = [
    ("nvidia.com/gpu", "gpu"),
    ("aws.amazon.com/neurondevice", "neuron"),
    ("vpc.amazonaws.com/efa", "efa"),
    ("cpu", "cpu"),
    ("memory", "memory"),
];

/// If `v` is a Kubernetes manifest (it has `apiVersion` and `kind`), the allot job-file mapping it
/// stands for; `Ok(None)` when it is not a manifest (a plain allot job file).
pub fn job_from_manifest(v: &Value, origin: &str) -> Result<Option<Value>> {
    let Some(top) = v.as_object() else {
        return Ok(None);
    };
    if !top.contains_key("apiVersion") && !top.contains_key("kind") {
        return Ok(None);
    }
    manifest(v).map(Some).map_err(|e| format!("{origin}: {e}"))
}

fn manifest(v: &Value) -> Result<Value> {
    let api = string(v.get("apiVersion"), "apiVersion")?.unwrap_or_default();
    let kind = string(v.get("kind"), "kind")?.unwrap_or_default();
    let mut out = Map::new();
    metadata(v, &mut out)?;
    topology(v, &mut out)?;
    match (api.as_str(), kind.as_str()) {
        ("batch/v1", "Job") | ("v1", "Pod") => {
            let (count, pod) = if kind == "Job" {
                let count = count(v.pointer("/spec/parallelism"), "spec.parallelism")?;
                (
                    count,
                    pod_spec(v.pointer("/spec/template/spec"), "spec.template.spec")?,
                )
            } else {
                (1, pod_spec(v.get("spec"), "spec")?)
            };
            out.insert("count".into(), count.into());
            out.insert("requests".into(), Value::Object(pod.requests));
            out.extend(pod.run);
        }
        ("kubeflow.org/v1", "PyTorchJob") => pytorch(v, &mut out)?,
        _ => {
            return Err(format!(
            "apiVersion {api:?} kind {kind:?} is not accepted; a manifest is one of: {ACCEPTED}"
        ))
        }
    }
    Ok(Value::Object(out))
}

/// name, team, priority and labels from `metadata` (and the auto-resume annotations, kept as
/// labels).
fn metadata(v: &Value, out: &mut Map<String, Value>) -> Result<()> {
    let meta = object(v.get("metadata"), "metadata")?;
    let get = |k: &str| meta.and_then(|m| m.get(k));
    let Some(name) = string(get("name"), "metadata.name")? else {
        if get("generateName").is_some_and(|g| !g.is_null()) {
            return Err(
                "metadata.generateName is not supported: give the workload a metadata.name"
                    .to_string(),
            );
        }
        return Err("metadata.name is required".to_string());
    };
    out.insert("name".into(), name.into());
    let mut team = None;
    let mut labels = Map::new();
    for (k, val) in object(get("labels"), "metadata.labels")?
        .into_iter()
        .flatten()
    {
        let val = match val {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            o => o.to_string(),
        };
        match k.as_str() {
            QUEUE_LABEL => {
                let q = val.strip_prefix("hyperpod-ns-").unwrap_or(&val);
                team = Some(q.strip_suffix("-localqueue").unwrap_or(q).to_string());
            }
            PRIORITY_LABEL => {
                let p = val.strip_suffix("-priority").unwrap_or(&val).to_string();
                out.insert("priority".into(), p.into());
            }
            _ => {
                labels.insert(k.clone(), val.into());
            }
        }
    }
    // HyperPod's resiliency annotations (auto-resume); other annotations say nothing allot uses.
    for (k, val) in object(get("annotations"), "metadata.annotations")?
        .into_iter()
        .flatten()
    {
        if k == crate::auto_resume::ENABLE_LABEL || k == crate::auto_resume::MAX_RETRY_LABEL {
            let val = match val {
                Value::String(s) => s.clone(),
                o => o.to_string(),
            };
            labels.insert(k.clone(), val.into());
        }
    }
    if team.is_none() {
        let ns = string(get("namespace"), "metadata.namespace")?;
        team = ns.and_then(|n| n.strip_prefix("hyperpod-ns-").map(str::to_string));
    }
    if let Some(t) = team.filter(|t| !t.is_empty()) {
        out.insert("team".into(), t.into());
    }
    if !labels.is_empty() {
        out.insert("labels".into(), Value::Object(labels));
    }
    Ok(())
}

/// Kueue's topology annotations (`crate::topology`), kept as labels: from the pod templates,
/// where Kueue reads them, or the object's own metadata. allot asks one topology of every pod
/// set of a workload, so templates that ask differently are refused.
fn topology(v: &Value, out: &mut Map<String, Value>) -> Result<()> {
    let mut places: Vec<(String, Option<&Value>)> = vec![
        (
            "metadata.annotations".into(),
            v.pointer("/metadata/annotations"),
        ),
        (
            "spec.template.metadata.annotations".into(),
            v.pointer("/spec/template/metadata/annotations"),
        ),
    ];
    for role in ["Master", "Worker"] {
        places.push((
            format!("spec.pytorchReplicaSpecs.{role}.template.metadata.annotations"),
            v.pointer(&format!(
                "/spec/pytorchReplicaSpecs/{role}/template/metadata/annotations"
            )),
        ));
    }
    let mut found: Map<String, Value> = Map::new();
    let mut from: Option<String> = None;
    for (path, annotations) in places {
        let mut here = Map::new();
        for (k, val) in object(annotations, &path)?.into_iter().flatten() {
            if crate::topology::is_label(k) {
                let val = match val {
                    Value::String(s) => s.clone(),
                    o => o.to_string(),
                };
                here.insert(k.clone(), val.into());
            }
        }
        if here.is_empty() {
            continue;
        }
        match &from {
            Some(first) if found != here => {
                return Err(format!(
                    "{path}: asks for another topology than {first}; allot places every pod set \
                     of a workload by one topology ask"
                ))
            }
            Some(_) => {}
            None => {
                found = here;
                from = Some(path);
            }
        }
    }
    if !found.is_empty() {
        let labels = out
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(l) = labels {
            l.extend(found);
        }
    }
    Ok(())
}

/// Master and Worker replicas as one gang of two pod sets running one program.
fn pytorch(v: &Value, out: &mut Map<String, Value>) -> Result<()> {
    let path = "spec.pytorchReplicaSpecs";
    let specs = object(v.pointer("/spec/pytorchReplicaSpecs"), path)?
        .ok_or_else(|| format!("{path} is required (Master and/or Worker)"))?;
    if let Some(role) = specs
        .keys()
        .find(|k| !["Master", "Worker"].contains(&k.as_str()))
    {
        return Err(format!(
            "{path}.{role}: only Master and Worker replicas are accepted"
        ));
    }
    let mut podsets = Vec::new();
    let mut first: Option<(String, Map<String, Value>)> = None;
    for role in ["Master", "Worker"] {
        let Some(spec) = specs.get(role).filter(|s| !s.is_null()) else {
            continue;
        };
        let at = format!("{path}.{role}");
        let count = count(spec.get("replicas"), &format!("{at}.replicas"))?;
        let tpl = format!("{at}.template.spec");
        let pod = pod_spec(spec.pointer("/template/spec"), &tpl)?;
        podsets.push(serde_json::json!({
            "name": role.to_lowercase(), "count": count, "requests": pod.requests,
        }));
        match &first {
            None => first = Some((role.to_string(), pod.run)),
            Some((other, run)) => {
                let mut keys = run.keys().chain(pod.run.keys());
                if let Some(k) = keys.find(|k| run.get(*k) != pod.run.get(*k)) {
                    return Err(format!(
                        "{tpl}.{}: differs from {path}.{other}; allot runs one program per \
                         workload, so Master and Worker must agree on it",
                        k8s_field(k)
                    ));
                }
            }
        }
    }
    let Some((_, run)) = first else {
        return Err(format!("{path}: needs a Master or a Worker replica spec"));
    };
    out.insert("podsets".into(), Value::Array(podsets));
    out.extend(run);
    Ok(())
}

/// The pod-spec field an allot run field comes from, for errors.
fn k8s_field(allot: &str) -> &'static str {
    match allot {
        "image" => "containers[0].image",
        "command" => "containers[0].command",
        "args" => "containers[0].args",
        "env" => "containers[0].env",
        "workdir" => "containers[0].workingDir",
        "mounts" => "containers[0].volumeMounts",
        "shm_size" => "volumes (/dev/shm)",
        "host_network" => "hostNetwork",
        "grace" => "terminationGracePeriodSeconds",
        "user" => "securityContext",
        _ => "spec",
    }
}

struct Pod {
    /// allot resource name -> quantity
    requests: Map<String, Value>,
    /// allot job-file fields for how to run it: image, command, env, mounts, ...
    run: Map<String, Value>,
}

fn pod_spec(v: Option<&Value>, path: &str) -> Result<Pod> {
    let spec = object(v, path)?.ok_or_else(|| format!("{path}: a pod spec is required"))?;
    for k in ["initContainers", "ephemeralContainers"] {
        if spec
            .get(k)
            .is_some_and(|c| c.as_array().is_none_or(|a| !a.is_empty()))
        {
            return Err(format!(
                "{path}.{k}: not supported; a pod runs exactly one container"
            ));
        }
    }
    let containers = match spec.get("containers") {
        Some(Value::Array(a)) if a.len() == 1 => a,
        Some(Value::Array(a)) if a.len() > 1 => {
            return Err(format!(
                "{path}.containers: {} containers; allot runs exactly one container per pod \
             (sidecars are not supported)",
                a.len()
            ))
        }
        _ => return Err(format!("{path}.containers: needs exactly one container")),
    };
    let cp = format!("{path}.containers[0]");
    let c = containers[0]
        .as_object()
        .ok_or_else(|| format!("{cp}: expected a mapping"))?;
    let mut run = Map::new();
    if let Some(image) = string(c.get("image"), &format!("{cp}.image"))? {
        run.insert("image".into(), image.into());
    }
    for k in ["command", "args"] {
        if let Some(list) = strings(c.get(k), &format!("{cp}.{k}"))? {
            run.insert(k.into(), list.into());
        }
    }
    let env = env(c.get("env"), &format!("{cp}.env"))?;
    if !env.is_empty() {
        run.insert("env".into(), Value::Object(env));
    }
    if let Some(w) = string(c.get("workingDir"), &format!("{cp}.workingDir"))? {
        run.insert("workdir".into(), w.into());
    }
    let requests = resources(c.get("resources"), &format!("{cp}.resources"))?;
    let (mounts, shm) = mounts(spec, c, path)?;
    if !mounts.is_empty() {
        run.insert("mounts".into(), mounts.into());
    }
    if let Some(shm) = shm {
        run.insert("shm_size".into(), shm);
    }
    match spec.get("hostNetwork") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            run.insert("host_network".into(), true.into());
        }
        Some(o) => {
            return Err(format!(
                "{path}.hostNetwork: expected true or false, got {o}"
            ))
        }
    }
    let gp = format!("{path}.terminationGracePeriodSeconds");
    if let Some(g) = uint(spec.get("terminationGracePeriodSeconds"), &gp)? {
        run.insert("grace".into(), g.into());
    }
    let id = |k: &str| -> Result<Option<u64>> {
        let from_c = uint(
            c.get("securityContext").and_then(|s| s.get(k)),
            &format!("{cp}.securityContext.{k}"),
        )?;
        let from_pod = uint(
            spec.get("securityContext").and_then(|s| s.get(k)),
            &format!("{path}.securityContext.{k}"),
        )?;
        Ok(from_c.or(from_pod))
    };
    match (id("runAsUser")?, id("runAsGroup")?) {
        (None, None) => {}
        (Some(u), None) => {
            run.insert("user".into(), u.to_string().into());
        }
        (Some(u), Some(g)) => {
            run.insert("user".into(), format!("{u}:{g}").into());
        }
        (None, Some(_)) => {
            return Err(format!(
                "{cp}.securityContext: runAsGroup needs runAsUser (allot's user is uid[:gid])"
            ))
        }
    }
    Ok(Pod { requests, run })
}

fn env(v: Option<&Value>, path: &str) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    let list = match v {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Array(a)) => a,
        Some(o) => {
            return Err(format!(
                "{path}: expected a list of {{name, value}}, got {o}"
            ))
        }
    };
    for (i, e) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = string(e.get("name"), &format!("{at}.name"))?
            .ok_or_else(|| format!("{at}: needs a name"))?;
        if e.get("valueFrom").is_some_and(|x| !x.is_null()) {
            return Err(format!(
                "{at} ({name}): valueFrom is not supported; give the variable a literal value"
            ));
        }
        let value = match e.get("value") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(o) => o.to_string(),
        };
        out.insert(name, value.into());
    }
    Ok(out)
}

/// `resources.requests`, with `resources.limits` filling what requests lack, in allot's names.
/// The allot name of Kubernetes resource `name`: one of `RESOURCES`, or a GPU partition as the
/// device plugin names it (`nvidia.com/mig-1g.10gb`).
fn allot_resource(name: &str) -> Option<String> {
    if let Some((_, allot)) = RESOURCES.iter().find(|(n, _)| *n == name) {
        return Some(allot.to_string());
    }
    name.strip_prefix("nvidia.com/")
        .filter(|p| crate::mig::profile(p).is_some())
        .map(str::to_string)
}

fn resources(v: Option<&Value>, path: &str) -> Result<Map<String, Value>> {
    let accepted = format!(
        "{}, nvidia.com/mig-<profile> (such as nvidia.com/mig-1g.10gb)",
        RESOURCES.map(|(k, _)| k).join(", ")
    );
    let read = |k: &str| -> Result<Vec<(String, String, Value)>> {
        let at = format!("{path}.{k}");
        let mut out = Vec::new();
        for (name, q) in object(v.and_then(|r| r.get(k)), &at)?.into_iter().flatten() {
            let Some(allot) = allot_resource(name) else {
                return Err(format!(
                    "{at}: resource {name:?} is not accepted; accepted: {accepted}"
                ));
            };
            match q {
                Value::String(_) | Value::Number(_) => out.push((name.clone(), allot, q.clone())),
                o => {
                    return Err(format!(
                        "{at}.{name}: expected a quantity such as 8 or \"32Gi\", got {o}"
                    ))
                }
            }
        }
        Ok(out)
    };
    let text = |q: &Value| q.as_str().map_or_else(|| q.to_string(), str::to_string);
    let mut out = Map::new();
    for (_, name, q) in read("requests")? {
        out.insert(name, q);
    }
    for (k8s, name, q) in read("limits")? {
        match out.get(&name) {
            None => {
                out.insert(name, q);
            }
            Some(r) if !["cpu", "memory"].contains(&name.as_str()) && text(r) != text(&q) => {
                return Err(format!(
                    "{path}: requests and limits of {k8s} differ; Kubernetes requires them \
                     equal for extended resources"
                ));
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

/// The container's `volumeMounts` joined with the pod's `volumes`: host mounts, and the size of a
/// memory-backed /dev/shm.
fn mounts(
    spec: &Map<String, Value>,
    c: &Map<String, Value>,
    path: &str,
) -> Result<(Vec<Value>, Option<Value>)> {
    let vp = format!("{path}.volumes");
    let volumes = match spec.get("volumes") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(a)) => a.as_slice(),
        Some(o) => return Err(format!("{vp}: expected a list, got {o}")),
    };
    let mp = format!("{path}.containers[0].volumeMounts");
    let list = match c.get("volumeMounts") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(a)) => a.as_slice(),
        Some(o) => return Err(format!("{mp}: expected a list, got {o}")),
    };
    let (mut mounts, mut shm) = (Vec::new(), None);
    for (i, m) in list.iter().enumerate() {
        let at = format!("{mp}[{i}]");
        let name = string(m.get("name"), &format!("{at}.name"))?
            .ok_or_else(|| format!("{at}: needs a name"))?;
        let mount_path = string(m.get("mountPath"), &format!("{at}.mountPath"))?
            .ok_or_else(|| format!("{at}: needs a mountPath"))?;
        let read_only = match m.get("readOnly") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(o) => return Err(format!("{at}.readOnly: expected true or false, got {o}")),
        };
        let sub = string(m.get("subPath"), &format!("{at}.subPath"))?;
        let (j, vol) = volumes
            .iter()
            .enumerate()
            .find(|(_, v)| v.get("name").and_then(Value::as_str) == Some(name.as_str()))
            .ok_or_else(|| format!("{at}: no volume named {name:?} in {vp}"))?;
        let vat = format!("{vp}[{j}]");
        let ty = vol
            .as_object()
            .and_then(|o| o.keys().find(|k| k.as_str() != "name"))
            .map_or("(none)", String::as_str);
        let refuse = |why: &str| {
            format!(
                "{vat}: volume {name:?} of type {ty} is not supported{why}; accepted: hostPath, \
                 and emptyDir with medium: Memory at /dev/shm"
            )
        };
        match ty {
            "hostPath" => {
                let host = string(
                    vol.pointer("/hostPath/path"),
                    &format!("{vat}.hostPath.path"),
                )?
                .ok_or_else(|| format!("{vat}.hostPath.path is required"))?;
                let host = match sub.filter(|s| !s.is_empty()) {
                    Some(s) => format!("{}/{s}", host.trim_end_matches('/')),
                    None => host,
                };
                mounts.push(serde_json::json!({
                    "host_path": host, "path": mount_path, "read_only": read_only,
                }));
            }
            "emptyDir" => {
                let medium = vol.pointer("/emptyDir/medium").and_then(Value::as_str);
                if medium != Some("Memory") || mount_path.trim_end_matches('/') != "/dev/shm" {
                    return Err(refuse(
                        " (only a medium: Memory emptyDir mounted at /dev/shm)",
                    ));
                }
                shm = Some(match vol.pointer("/emptyDir/sizeLimit") {
                    None | Some(Value::Null) => "64Mi".into(),
                    Some(q @ (Value::String(_) | Value::Number(_))) => q.clone(),
                    Some(o) => {
                        return Err(format!(
                            "{vat}.emptyDir.sizeLimit: expected a quantity, got {o}"
                        ))
                    }
                });
            }
            _ => return Err(refuse("")),
        }
    }
    Ok((mounts, shm))
}

fn object<'a>(v: Option<&'a Value>, path: &str) -> Result<Option<&'a Map<String, Value>>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(o) => Err(format!("{path}: expected a mapping, got {o}")),
    }
}

fn string(v: Option<&Value>, path: &str) -> Result<Option<String>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(o) => Err(format!("{path}: expected a string, got {o}")),
    }
}

fn strings(v: Option<&Value>, path: &str) -> Result<Option<Vec<Value>>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| match x {
                Value::String(_) => Ok(x.clone()),
                Value::Number(n) => Ok(n.to_string().into()),
                o => Err(format!("{path}: {o} is not a string")),
            })
            .collect::<Result<_>>()
            .map(Some),
        Some(o) => Err(format!("{path}: expected a list of strings, got {o}")),
    }
}

fn uint(v: Option<&Value>, path: &str) -> Result<Option<u64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{path}: expected a whole number, got {x}")),
    }
}

/// A pod count (default 1), at least 1.
fn count(v: Option<&Value>, path: &str) -> Result<u32> {
    match uint(v, path)? {
        None => Ok(1),
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{path}: expected at least 1 pod, got {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn yaml(text: &str) -> Value {
        serde_saphyr::from_str::<Value>(text).expect("test YAML parses")
    }

    fn convert(text: &str) -> Result<Option<Value>> {
        job_from_manifest(&yaml(text), "job.yaml")
    }

    fn refusal(text: &str) -> String {
        let e = convert(text).expect_err("refused").to_string();
        assert!(e.starts_with("job.yaml: "), "{e}");
        e
    }

    const JOB: &str = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: llama-finetune
  namespace: hyperpod-ns-team-a
  labels:
    kueue.x-k8s.io/queue-name: hyperpod-ns-team-a-localqueue
    kueue.x-k8s.io/priority-class: training-priority
    app: llama
spec:
  parallelism: 4
  completions: 4
  completionMode: Indexed
  backoffLimit: 0
  template:
    metadata:
      labels: {app: llama}
    spec:
      restartPolicy: Never
      hostNetwork: true
      terminationGracePeriodSeconds: 60
      securityContext: {runAsUser: 1000, runAsGroup: 1000}
      nodeSelector: {node.kubernetes.io/instance-type: ml.p5.48xlarge}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
        - name: trainer
          image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/llama:1.2
          command: ["torchrun"]
          args: ["--nproc_per_node=8", "train.py"]
          workingDir: /workspace
          env:
            - {name: NCCL_DEBUG, value: INFO}
            - {name: EPOCHS, value: "3"}
          ports: [{containerPort: 29500}]
          resources:
            requests: {cpu: "500m", memory: 32Gi}
            limits: {nvidia.com/gpu: 8, vpc.amazonaws.com/efa: 32, memory: 64Gi}
          volumeMounts:
            - {name: data, mountPath: /data, readOnly: true}
            - {name: shm, mountPath: /dev/shm}
      volumes:
        - name: data
          hostPath: {path: /fsx/datasets, type: Directory}
        - name: shm
          emptyDir: {medium: Memory, sizeLimit: 8Gi}
"#;

    #[test]
    fn gpu_partitions_are_read_as_their_profile() {
        let j = convert(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: hyperpod-ns-team-a}
spec:
  containers:
    - name: c
      image: busybox
      resources: {limits: {nvidia.com/mig-1g.10gb: 2, cpu: "4"}}
"#,
        )
        .unwrap()
        .expect("a manifest");
        assert_eq!(j["requests"]["mig-1g.10gb"], json!(2));
        let bad = convert(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - {name: c, image: busybox, resources: {limits: {nvidia.com/mig-9g.10gb: 1}}}
"#,
        )
        .expect_err("refused")
        .to_string();
        assert!(bad.contains("nvidia.com/mig-<profile>"), "{bad}");
    }

    #[test]
    fn auto_resume_annotations_are_kept_as_labels_and_others_are_not() {
        let j = convert(
            r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: hyperpod-ns-team-a
  annotations:
    sagemaker.amazonaws.com/enable-job-auto-resume: "true"
    sagemaker.amazonaws.com/job-max-retry-count: 2
    note: not a label
spec:
  containers:
    - name: c
      image: busybox
      command: ["true"]
"#,
        )
        .unwrap()
        .expect("a manifest");
        assert_eq!(
            j["labels"],
            json!({
                "sagemaker.amazonaws.com/enable-job-auto-resume": "true",
                "sagemaker.amazonaws.com/job-max-retry-count": "2"
            })
        );
    }

    #[test]
    fn topology_annotations_of_pod_templates_are_kept_as_labels() {
        let text = r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: llm
  namespace: hyperpod-ns-team-a
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 4
      template:
        metadata:
          annotations:
            kueue.x-k8s.io/podset-required-topology: topology.k8s.aws/network-node-layer-3
            kueue.x-k8s.io/podset-slice-required-topology: kubernetes.io/hostname
            kueue.x-k8s.io/podset-slice-size: 2
        spec:
          containers:
            - name: c
              image: busybox
              command: ["true"]
"#;
        let j = convert(text).unwrap().expect("a manifest");
        assert_eq!(
            j["labels"],
            json!({
                "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3",
                "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                "kueue.x-k8s.io/podset-slice-size": "2"
            })
        );
        let both = text.replace(
            "    Worker:",
            "    Master:\n      replicas: 1\n      template:\n        metadata:\n          annotations:\n            kueue.x-k8s.io/podset-preferred-topology: rack\n        spec:\n          containers:\n            - name: c\n              image: busybox\n              command: [\"true\"]\n    Worker:",
        );
        let e = refusal(&both);
        assert!(
            e.contains("Worker.template.metadata.annotations") && e.contains("one topology"),
            "{e}"
        );
    }

    #[test]
    fn hyperpod_batch_job() {
        let j = convert(JOB).unwrap().expect("a manifest");
        assert_eq!(j["name"], "llama-finetune");
        assert_eq!(j["team"], "team-a");
        assert_eq!(j["priority"], "training");
        assert_eq!(j["labels"], json!({"app": "llama"}));
        assert_eq!(j["count"], 4);
        assert_eq!(
            j["requests"],
            json!({"cpu": "500m", "memory": "32Gi", "gpu": 8, "efa": 32})
        );
        assert_eq!(
            j["image"],
            "123456789012.dkr.ecr.us-west-2.amazonaws.com/llama:1.2"
        );
        assert_eq!(j["command"], json!(["torchrun"]));
        assert_eq!(j["args"], json!(["--nproc_per_node=8", "train.py"]));
        assert_eq!(j["env"], json!({"NCCL_DEBUG": "INFO", "EPOCHS": "3"}));
        assert_eq!(j["workdir"], "/workspace");
        assert_eq!(
            j["mounts"],
            json!([{"host_path": "/fsx/datasets", "path": "/data", "read_only": true}])
        );
        assert_eq!(j["shm_size"], "8Gi");
        assert_eq!(j["host_network"], true);
        assert_eq!(j["grace"], 60);
        assert_eq!(j["user"], "1000:1000");
        assert!(j.get("podsets").is_none());
    }

    #[test]
    fn team_from_namespace_and_defaults() {
        let text = JOB
            .replace(
                "    kueue.x-k8s.io/queue-name: hyperpod-ns-team-a-localqueue\n",
                "",
            )
            .replace(
                "  namespace: hyperpod-ns-team-a",
                "  namespace: hyperpod-ns-vision",
            )
            .replace(
                "emptyDir: {medium: Memory, sizeLimit: 8Gi}",
                "emptyDir: {medium: Memory}",
            )
            .replace("  parallelism: 4\n", "");
        let j = convert(&text).unwrap().unwrap();
        assert_eq!(j["team"], "vision");
        assert_eq!(j["count"], 1);
        assert_eq!(j["shm_size"], "64Mi");
        let j = convert(&text.replace("hyperpod-ns-vision", "default"))
            .unwrap()
            .unwrap();
        assert!(j.get("team").is_none());
    }

    const PYTORCH: &str = r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: bert
  labels: {kueue.x-k8s.io/queue-name: hyperpod-ns-nlp-localqueue}
spec:
  elasticPolicy: {rdzvBackend: c10d}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: repo/bert:1
              command: [python, train.py]
              resources: {limits: {nvidia.com/gpu: 1, cpu: "8"}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: repo/bert:1
              command: [python, train.py]
              resources: {limits: {nvidia.com/gpu: 4, cpu: "32"}}
"#;

    #[test]
    fn pytorchjob_is_one_gang() {
        let j = convert(PYTORCH).unwrap().unwrap();
        assert_eq!(j["name"], "bert");
        assert_eq!(j["team"], "nlp");
        assert_eq!(
            j["podsets"],
            json!([
                {"name": "master", "count": 1, "requests": {"gpu": 1, "cpu": "8"}},
                {"name": "worker", "count": 2, "requests": {"gpu": 4, "cpu": "32"}},
            ])
        );
        assert_eq!(j["image"], "repo/bert:1");
        assert_eq!(j["command"], json!(["python", "train.py"]));
        assert!(j.get("count").is_none() && j.get("requests").is_none());
    }

    #[test]
    fn pod() {
        let j = convert(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: probe, namespace: hyperpod-ns-ops}
spec:
  containers:
    - {name: c, image: busybox, args: [sleep, "30"], resources: {requests: {aws.amazon.com/neurondevice: 1}}}
"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(j["name"], "probe");
        assert_eq!(j["team"], "ops");
        assert_eq!(j["count"], 1);
        assert_eq!(j["requests"], json!({"neuron": 1}));
        assert_eq!(j["args"], json!(["sleep", "30"]));
    }

    #[test]
    fn plain_job_file_is_not_a_manifest() {
        let v = yaml("name: x\nteam: a\ncount: 2\nrequests: {gpu: 1}\n");
        assert!(job_from_manifest(&v, "job.yaml").unwrap().is_none());
    }

    #[test]
    fn refusals() {
        let spec = "      containers:\n";
        let init = JOB.replace(
            spec,
            "      initContainers: [{name: i, image: busybox}]\n      containers:\n",
        );
        assert!(refusal(&init).contains("spec.template.spec.initContainers"));
        let sidecar = JOB.replace(
            spec,
            "      containers:\n        - {name: sidecar, image: envoy}\n",
        );
        let e = refusal(&sidecar);
        assert!(
            e.contains("spec.template.spec.containers") && e.contains("2"),
            "{e}"
        );
        let pvc = JOB.replace(
            "hostPath: {path: /fsx/datasets, type: Directory}",
            "persistentVolumeClaim: {claimName: fsx-claim}",
        );
        let e = refusal(&pvc);
        assert!(e.contains("spec.template.spec.volumes[0]"), "{e}");
        assert!(
            e.contains("\"data\"") && e.contains("persistentVolumeClaim"),
            "{e}"
        );
        let disk = JOB.replace("{medium: Memory, sizeLimit: 8Gi}", "{}");
        assert!(refusal(&disk).contains("emptyDir"));
        let from = JOB.replace(
            "{name: EPOCHS, value: \"3\"}",
            "{name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}",
        );
        let e = refusal(&from);
        assert!(
            e.contains("containers[0].env[1]") && e.contains("TOKEN"),
            "{e}"
        );
        assert!(e.contains("valueFrom"), "{e}");
        let unknown = JOB.replace("memory: 64Gi}", "example.com/fpga: 1}");
        let e = refusal(&unknown);
        assert!(
            e.contains("resources.limits") && e.contains("example.com/fpga"),
            "{e}"
        );
        let image = PYTORCH.replacen("image: repo/bert:1", "image: repo/bert:2", 1);
        let e = refusal(&image);
        assert!(
            e.contains("spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image"),
            "{e}"
        );
        let unequal = JOB.replace(
            "requests: {cpu: \"500m\"",
            "requests: {nvidia.com/gpu: 4, cpu: \"500m\"",
        );
        let e = refusal(&unequal);
        assert!(
            e.contains("resources") && e.contains("nvidia.com/gpu"),
            "{e}"
        );
        let kind = JOB.replace("kind: Job", "kind: CronJob");
        let e = refusal(&kind);
        assert!(e.contains("CronJob") && e.contains(ACCEPTED), "{e}");
        let generated = JOB.replace("  name: llama-finetune", "  generateName: llama-");
        assert!(refusal(&generated).contains("metadata.name"));
    }
}

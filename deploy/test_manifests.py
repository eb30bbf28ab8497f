#!/usr/bin/env python3
"""Render-and-check tests for deploy/: the Kubernetes overlays, the configs and systemd units.

    python3 deploy/test_manifests.py -v        (deploy/check runs it)

Renders every kustomization under deploy/kubernetes with kustomize (KUSTOMIZE="kubectl
kustomize" or "kustomize build"; found on PATH when unset; KUSTOMIZE="" forces the fallback)
or, without one, with deploy/kubernetes/render.py, and checks what matters for running allot:
the Raft StatefulSet and its quorum, what the agents get from the node, privileges, and that
names and references agree across objects. The shell scripts embedded in the manifests are run
with stand-ins for the pod environment; the ones that call `allot` use a real binary when one is
found (ALLOT_BIN, else target/release/allot or target/debug/allot) and are skipped otherwise.
"""

import base64
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import yaml

DEPLOY = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(DEPLOY)
K8S = os.path.join(DEPLOY, "kubernetes")
sys.path.insert(0, K8S)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import render  # noqa: E402

with open(os.path.join(REPO, "common", "data", "instance-types.json"), encoding="utf-8") as _f:
    CATALOG = json.load(_f)["instance_types"]
# A null GPU count (no source gives it: ml.g7.*) is a GPU type whose node brings the count.
GPU_TYPES = {t for t, v in CATALOG.items() if v["gpu"] is None or v["gpu"] > 0}
NEURON_TYPES = {t for t, v in CATALOG.items() if v["neuron"] > 0}

# The one container allowed to be privileged, and why (the README must say it too).
PRIVILEGED_ALLOWED = {("overlays/hyperpod-eks", "allot-agent-neuron", "agent")}
# Root without privilege: the init container that hands the agent's host directory to its user.
ROOT_ALLOWED = {"data-dir"}
# Root without privilege or capabilities, to reach the node's containerd socket (root's): the
# agent where it runs workloads from images (the README says why).
ROOT_FOR_CONTAINERD = {("overlays/hyperpod-eks", "allot-agent", "agent")}
# The fence beside each agent that runs containers: root for containerd's socket too.
FENCES = {("overlays/hyperpod-eks", "allot-agent", "fence"), ("overlays/hyperpod-eks", "allot-agent-neuron", "fence")}
CERT_SECRETS = {"allot-ca", "allot-coordinator-certs", "allot-node-certs", "allot-admin-cert"}
# Keys `allot agent` takes in its config file (its flags in snake_case).
AGENT_CONFIG_KEYS = {
    "node",
    "instance_type",
    "instance_type_file",
    "coordinators",
    "certs",
    "data_dir",
    "http",
    "advertise",
    "sysfs_root",
    "fake_gpus",
    "lease",
    "discover_every",
    "driver",
    "containerd_socket",
    "containerd_namespace",
    "plain_http_registry",
    "device_dir",
    "image_max_age_hours",
    "topology",
    "topology_file",
    "topology_labels",
}


# --- rendering --------------------------------------------------------------------------------


def kustomize_command():
    env = os.environ.get("KUSTOMIZE")
    if env is not None:
        return shlex.split(env) or None
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        ok = subprocess.run(
            ["kubectl", "kustomize", "--help"], capture_output=True, check=False
        ).returncode
        if ok == 0:
            return ["kubectl", "kustomize"]
    return None


def kustomizations():
    found = []
    for root, _dirs, files in os.walk(K8S):
        if "kustomization.yaml" in files:
            found.append(os.path.relpath(root, K8S))
    return sorted(found)


_RENDERED = {}


def rendered(name, tool="primary"):
    key = (name, tool)
    if key not in _RENDERED:
        cmd = kustomize_command()
        if tool == "fallback" or cmd is None:
            objs = render.render(os.path.join(K8S, name))
        else:
            out = subprocess.run(
                cmd + [os.path.join(K8S, name)], capture_output=True, text=True, check=False
            )
            if out.returncode != 0:
                raise AssertionError(f"{' '.join(cmd)} {name} failed:\n{out.stderr}")
            objs = [o for o in yaml.safe_load_all(out.stdout) if o]
        _RENDERED[key] = objs
    return _RENDERED[key]


def overlays():
    return [k for k in kustomizations() if k.startswith("overlays/")]


def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind, name):
    got = find(objs, kind, name)
    if len(got) != 1:
        raise AssertionError(f"expected one {kind}/{name}, found {len(got)}")
    return got[0]


def pod_spec(obj):
    return render.pod_specs(obj)[0]


def all_containers(spec):
    return (spec.get("initContainers") or []) + spec["containers"]


def container(spec, name):
    for c in all_containers(spec):
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name}")


def env_of(c):
    return {e["name"]: e for e in c.get("env") or []}


def env_value(c, name):
    e = env_of(c).get(name)
    if e is None:
        raise AssertionError(f"container {c['name']} has no env {name}")
    return e.get("value")


def mounts_of(c):
    return {m["mountPath"]: m for m in c.get("volumeMounts") or []}


def volumes_of(spec):
    return {v["name"]: v for v in spec.get("volumes") or []}


def config_map_data(objs, spec, volume_name):
    vol = volumes_of(spec)[volume_name]
    cm = one(objs, "ConfigMap", vol["configMap"]["name"])
    (item,) = vol["configMap"]["items"]
    return yaml.safe_load(cm["data"][item["key"]]), item["path"]


def mount_dir_of(c, spec, volume_name):
    for m in c.get("volumeMounts") or []:
        if m["name"] == volume_name:
            return m["mountPath"]
    raise AssertionError(f"{c['name']} does not mount {volume_name}")


def host_port(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


def selector_matches(match_labels, labels):
    return all(labels.get(k) == v for k, v in match_labels.items())


def quantity_bytes(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    for u, m in units.items():
        if q.endswith(u):
            return float(q[: -len(u)]) * m
    return float(q)


def quantity_cpu(q):
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def script_of(c):
    """The shell script of a `sh -c` container."""
    cmd = (c.get("command") or []) + (c.get("args") or [])
    if cmd[:2] != ["/bin/sh", "-c"]:
        raise AssertionError(f"{c['name']} is not a /bin/sh -c script: {cmd[:2]}")
    return cmd[2]


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_yaml(path):
    return yaml.safe_load(read_text(path))


def read_json(path):
    return json.loads(read_text(path))


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def allot_binary():
    for p in [
        os.environ.get("ALLOT_BIN"),
        os.path.join(REPO, "target", "release", "allot"),
        os.path.join(REPO, "target", "debug", "allot"),
    ]:
        if p and os.access(p, os.X_OK):
            return p
    return None


def rust_struct_fields(path, struct):
    src = read_text(path)
    m = re.search(r"struct " + struct + r"\s*\{(.*?)\n\}", src, re.S)
    if not m:
        raise AssertionError(f"no struct {struct} in {path}")
    return set(re.findall(r"^\s*(?:pub\s+)?(\w+)\s*:", m.group(1), re.M))


# --- tests ------------------------------------------------------------------------------------


class Rendering(unittest.TestCase):
    def test_every_kustomization_renders_unique_objects(self):
        self.assertIn("base", kustomizations())
        self.assertIn("overlays/hyperpod-eks", kustomizations())
        self.assertIn("overlays/dev", kustomizations())
        for k in kustomizations():
            with self.subTest(k):
                objs = rendered(k)
                keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
                self.assertEqual(len(keys), len(set(keys)))

    def test_fallback_renderer_matches_kustomize(self):
        if kustomize_command() is None:
            self.skipTest("kustomize not used (none on PATH, or KUSTOMIZE empty): nothing to compare render.py with")
        for k in kustomizations():
            with self.subTest(k):
                key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
                a = {key(o): o for o in rendered(k)}
                b = {key(o): o for o in rendered(k, "fallback")}
                self.assertEqual(sorted(a), sorted(b))
                for name in a:
                    self.assertEqual(a[name], b[name], f"{k}: {name} differs")

    def test_every_manifest_file_is_used(self):
        used = set()
        for k in kustomizations():
            d = os.path.join(K8S, k)
            kust = read_yaml(os.path.join(d, "kustomization.yaml"))
            used.add(os.path.join(d, "kustomization.yaml"))
            refs = list(kust.get("resources") or [])
            refs += [p["path"] for p in kust.get("patches") or [] if "path" in p]
            for g in kust.get("configMapGenerator") or []:
                refs += [f.split("=", 1)[-1] for f in g.get("files") or []]
            used.update(os.path.normpath(os.path.join(d, r)) for r in refs)
        for root, _dirs, files in os.walk(K8S):
            for f in files:
                if f.endswith((".yaml", ".yml")):
                    p = os.path.join(root, f)
                    self.assertIn(p, used, f"{os.path.relpath(p, DEPLOY)} is not part of any kustomization")


class Coordinator(unittest.TestCase):
    def each(self):
        for k in kustomizations():
            with self.subTest(k):
                objs = rendered(k)
                yield k, objs, one(objs, "StatefulSet", "allot-coordinator")

    def test_three_replicas_started_together(self):
        for _k, objs, sts in self.each():
            self.assertEqual(sts["spec"]["replicas"], 3)
            self.assertEqual(sts["spec"].get("podManagementPolicy"), "Parallel")
            c = container(pod_spec(sts), "coordinator")
            self.assertEqual(env_value(c, "ALLOT_REPLICAS"), "3")
            job = one(objs, "Job", "allot-certs")
            self.assertEqual(env_value(container(pod_spec(job), "issue"), "COORDINATORS"), "3")

    def test_pdb_keeps_a_quorum(self):
        for _k, objs, sts in self.each():
            (pdb,) = find(objs, "PodDisruptionBudget")
            replicas = sts["spec"]["replicas"]
            quorum = replicas // 2 + 1
            spec = pdb["spec"]
            if "minAvailable" in spec:
                self.assertEqual(spec["minAvailable"], quorum)
            else:
                self.assertEqual(spec["maxUnavailable"], replicas - quorum)
            self.assertEqual(quorum, 2)
            labels = sts["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(selector_matches(spec["selector"]["matchLabels"], labels))

    def test_headless_service_publishes_peers(self):
        for _k, objs, sts in self.each():
            svc = one(objs, "Service", sts["spec"]["serviceName"])
            self.assertEqual(svc["spec"]["clusterIP"], "None")
            self.assertTrue(svc["spec"].get("publishNotReadyAddresses"))
            labels = sts["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(selector_matches(svc["spec"]["selector"], labels))
            self.assertEqual(
                [(p["port"], p["protocol"]) for p in svc["spec"]["ports"]], [(7400, "UDP")]
            )
            self.assertEqual(
                env_value(container(pod_spec(sts), "coordinator"), "ALLOT_PEER_SERVICE"),
                svc["metadata"]["name"],
            )

    def test_client_service_reaches_ready_replicas(self):
        for _k, objs, sts in self.each():
            svc = one(objs, "Service", "allot-coordinator")
            self.assertNotEqual(svc["spec"].get("clusterIP"), "None")
            self.assertFalse(svc["spec"].get("publishNotReadyAddresses", False))
            labels = sts["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(selector_matches(svc["spec"]["selector"], labels))
            self.assertIn((7400, "UDP"), [(p["port"], p["protocol"]) for p in svc["spec"]["ports"]])

    def test_each_replica_has_its_own_volume(self):
        for _k, _objs, sts in self.each():
            (pvc,) = sts["spec"]["volumeClaimTemplates"]
            self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteOnce"])
            self.assertIn("storage", pvc["spec"]["resources"]["requests"])
            c = container(pod_spec(sts), "coordinator")
            data_mount = mount_dir_of(c, pod_spec(sts), pvc["metadata"]["name"])
            cfg, _ = config_map_data(_objs, pod_spec(sts), "config")
            self.assertTrue(cfg["data_dir"].startswith(data_mount + "/"), cfg["data_dir"])

    def test_anti_affinity_across_nodes(self):
        for k, _objs, sts in self.each():
            anti = pod_spec(sts)["affinity"]["podAntiAffinity"]
            labels = sts["spec"]["template"]["metadata"]["labels"]
            if k == "overlays/dev":
                terms = [t["podAffinityTerm"] for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]]
            else:
                terms = anti["requiredDuringSchedulingIgnoredDuringExecution"]
            self.assertTrue(
                any(
                    t["topologyKey"] == "kubernetes.io/hostname"
                    and selector_matches(t["labelSelector"]["matchLabels"], labels)
                    for t in terms
                )
            )

    def test_readiness_on_readyz_and_ports_match_config(self):
        for _k, objs, sts in self.each():
            spec = pod_spec(sts)
            c = container(spec, "coordinator")
            ports = {p["name"]: p for p in c["ports"]}
            probe = c["readinessProbe"]["httpGet"]
            self.assertEqual(probe["path"], "/readyz")
            self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
            cfg, path = config_map_data(objs, spec, "config")
            self.assertLessEqual(set(cfg), rust_struct_fields(os.path.join(REPO, "src", "coordinator_cmd.rs"), "FileConfig"))
            self.assertNotIn("id", cfg)
            self.assertNotIn("peers", cfg)
            http_host, http_port = host_port(cfg["http"])
            listen_host, listen_port = host_port(cfg["listen"])
            self.assertEqual((http_host, listen_host), ("0.0.0.0", "0.0.0.0"))
            self.assertEqual(ports[probe["port"]]["containerPort"], http_port)
            self.assertEqual(ports["quic"], {"name": "quic", "containerPort": listen_port, "protocol": "UDP"})
            ann = sts["spec"]["template"]["metadata"]["annotations"]
            self.assertEqual(ann["prometheus.io/scrape"], "true")
            self.assertEqual(int(ann["prometheus.io/port"]), http_port)
            self.assertEqual(ann["prometheus.io/path"], "/metrics")
            config_file = os.path.join(mount_dir_of(c, spec, "config"), path)
            self.assertIn(f"--config {config_file}", script_of(c))
            self.assertEqual(cfg["certs"], mount_dir_of(c, spec, "certs"))
            self.assertEqual(volumes_of(spec)["certs"]["secret"]["secretName"], "allot-coordinator-certs")

    def test_id_and_peers_from_the_pod_name(self):
        for _k, _objs, sts in self.each():
            c = container(pod_spec(sts), "coordinator")
            with tempfile.TemporaryDirectory() as tmp:
                stub = os.path.join(tmp, "allot")
                write_exe(stub, '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
                script = script_of(c).replace("/usr/local/bin/allot", stub)
                name = sts["metadata"]["name"]
                for ordinal in range(3):
                    env = {"PATH": os.environ["PATH"], "POD_NAME": f"{name}-{ordinal}", "POD_NAMESPACE": "team-ns"}
                    env.update({k: e["value"] for k, e in env_of(c).items() if "value" in e})
                    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
                    args = out.stdout.splitlines()
                    self.assertEqual(args[0], "coordinator")
                    self.assertEqual(args[args.index("--id") + 1], str(ordinal + 1))
                    peers = args[args.index("--peers") + 1].split(",")
                    svc = sts["spec"]["serviceName"]
                    self.assertEqual(
                        peers, [f"{i + 1}={name}-{i}.{svc}.team-ns.svc:7400" for i in range(3)]
                    )

    def test_runs_unprivileged(self):
        for _k, _objs, sts in self.each():
            spec = pod_spec(sts)
            self.assertTrue(spec["securityContext"]["runAsNonRoot"])
            self.assertFalse(spec.get("automountServiceAccountToken", True))
            sc = container(spec, "coordinator")["securityContext"]
            self.assertFalse(sc["allowPrivilegeEscalation"])
            self.assertTrue(sc["readOnlyRootFilesystem"])
            self.assertEqual(sc["capabilities"]["drop"], ["ALL"])


class Agent(unittest.TestCase):
    def each(self):
        for k in kustomizations():
            objs = rendered(k)
            for ds in find(objs, "DaemonSet"):
                with self.subTest(f"{k} {ds['metadata']['name']}"):
                    yield k, objs, ds

    def test_node_name_from_the_downward_api(self):
        for _k, _objs, ds in self.each():
            c = container(pod_spec(ds), "agent")
            self.assertEqual(env_of(c)["ALLOT_NODE_NAME"]["valueFrom"], {"fieldRef": {"fieldPath": "spec.nodeName"}})
            self.assertEqual(env_of(c)["POD_IP"]["valueFrom"], {"fieldRef": {"fieldPath": "status.podIP"}})
            self.assertEqual(c["args"][c["args"].index("--advertise") + 1], "$(POD_IP)")

    def test_instance_type_from_the_node_label(self):
        for _k, objs, ds in self.each():
            spec = pod_spec(ds)
            agent = container(spec, "agent")
            path = agent["args"][agent["args"].index("--instance-type-file") + 1]
            labels = agent["args"][agent["args"].index("--topology-file") + 1]
            self.assertEqual(os.path.dirname(labels), os.path.dirname(path))
            init = container(spec, "instance-type")
            self.assertIn("node.kubernetes.io/instance-type", script_of(init).replace("\\.", "."))
            self.assertIn(f"> {path}", script_of(init))
            self.assertIn(f"> {labels}", script_of(init))
            d = os.path.dirname(path)
            vol = mounts_of(init)[d]["name"]
            self.assertEqual(mounts_of(agent)[d]["name"], vol)
            self.assertIn("emptyDir", volumes_of(spec)[vol])
            self.assertEqual(env_of(init)["NODE_NAME"]["valueFrom"], {"fieldRef": {"fieldPath": "spec.nodeName"}})
            # Only the init container holds an API token, and it may read nodes.
            self.assertFalse(spec["automountServiceAccountToken"])
            token_mounts = [
                c["name"]
                for c in all_containers(spec)
                if "/var/run/secrets/kubernetes.io/serviceaccount" in mounts_of(c)
            ]
            self.assertEqual(token_mounts, ["instance-type"])
            sa = spec["serviceAccountName"]
            self.assertTrue(
                any(
                    any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == ds["metadata"]["namespace"] for s in b["subjects"])
                    and any(
                        "nodes" in r["resources"] and "get" in r["verbs"]
                        for r in one(objs, "ClusterRole", b["roleRef"]["name"])["rules"]
                    )
                    for b in find(objs, "ClusterRoleBinding")
                )
            )

    def test_instance_type_script(self):
        for _k, _objs, ds in self.each():
            init = container(pod_spec(ds), "instance-type")
            with tempfile.TemporaryDirectory() as tmp:
                kubectl = os.path.join(tmp, "kubectl")
                write_exe(kubectl, '#!/bin/sh\nprintf "%s" "$STUB_LABEL"\n')
                out_file = os.path.join(tmp, "instance-type")
                labels_file = os.path.join(tmp, "labels")
                script = (
                    script_of(init)
                    .replace("/run/allot-node/instance-type", out_file)
                    .replace("/run/allot-node/labels", labels_file)
                )
                base = {"PATH": f"{tmp}:{os.environ['PATH']}", "NODE_NAME": "n1"}
                for label, fallback, want in [
                    ("ml.p5.48xlarge", "", "ml.p5.48xlarge"),
                    ("ml.p5.48xlarge", "ml.g5.12xlarge", "ml.p5.48xlarge"),
                    ("", "ml.g5.12xlarge", "ml.g5.12xlarge"),
                    ("", "", None),
                ]:
                    if os.path.exists(out_file):
                        os.remove(out_file)
                    env = dict(base, STUB_LABEL=label, FALLBACK_INSTANCE_TYPE=fallback)
                    r = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=False)
                    if want is None:
                        self.assertNotEqual(r.returncode, 0)
                        self.assertFalse(os.path.exists(out_file))
                    else:
                        self.assertEqual(r.returncode, 0, r.stderr)
                        self.assertEqual(read_text(out_file), want)
                        # The node's labels, for the agent's topology (the stub prints the
                        # same text for any query).
                        self.assertEqual(read_text(labels_file), label)

    def test_nvml_and_devices(self):
        for k, _objs, ds in self.each():
            spec = pod_spec(ds)
            c = container(spec, "agent")
            accelerator = ds["spec"]["template"]["metadata"]["labels"]["allot/accelerator"]
            if accelerator == "nvidia":
                # The NVIDIA container runtime mounts /dev/nvidia* and libnvidia-ml.so.1.
                self.assertEqual(env_value(c, "NVIDIA_VISIBLE_DEVICES"), "all")
                caps = env_value(c, "NVIDIA_DRIVER_CAPABILITIES").split(",")
                self.assertIn("utility", caps)  # NVML
                self.assertIn("compute", caps)
                if k == "overlays/dev":
                    self.assertNotIn("runtimeClassName", spec)
                    args = c["args"]
                    fake = int(args[args.index("--fake-gpus") + 1])
                    fallback = env_value(container(spec, "instance-type"), "FALLBACK_INSTANCE_TYPE")
                    self.assertEqual(CATALOG[fallback]["gpu"], fake)
                else:
                    self.assertEqual(spec["runtimeClassName"], "nvidia")
                    self.assertNotIn("--fake-gpus", c["args"])
            else:
                self.assertEqual(accelerator, "neuron")
                # Privileged: the host's /dev/neuron* are in the container (see the README).
                self.assertTrue(c["securityContext"]["privileged"])

    def test_sysfs_data_and_certs_mounted_where_the_config_says(self):
        for _k, objs, ds in self.each():
            spec = pod_spec(ds)
            c = container(spec, "agent")
            cfg, path = config_map_data(objs, spec, "config")
            self.assertLessEqual(set(cfg), AGENT_CONFIG_KEYS)
            self.assertIn(os.path.join(mount_dir_of(c, spec, "config"), path), c["args"])
            vols = volumes_of(spec)
            mounts = mounts_of(c)
            sys_mount = mounts[os.path.join(cfg["sysfs_root"], "sys")]
            self.assertEqual(vols[sys_mount["name"]]["hostPath"]["path"], "/sys")
            self.assertTrue(sys_mount["readOnly"])
            data = mounts[cfg["data_dir"]]
            self.assertEqual(vols[data["name"]]["hostPath"]["path"], "/var/lib/allot-agent")
            certs = mounts[cfg["certs"]]
            self.assertEqual(vols[certs["name"]]["secret"]["secretName"], "allot-node-certs")
            self.assertEqual(env_value(c, "ALLOT_COORDINATORS"), "allot-coordinator:7400")
            one(objs, "Service", "allot-coordinator")
            http_port = host_port(cfg["http"])[1]
            self.assertEqual(host_port(cfg["http"])[0], "0.0.0.0")
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(ports[c["livenessProbe"]["httpGet"]["port"]], http_port)
            ann = ds["spec"]["template"]["metadata"]["annotations"]
            self.assertEqual((ann["prometheus.io/scrape"], int(ann["prometheus.io/port"])), ("true", http_port))

    def test_resources_fit_the_footprint(self):
        for _k, _objs, ds in self.each():
            c = container(pod_spec(ds), "agent")
            req = c["resources"]["requests"]
            self.assertLessEqual(quantity_cpu(req["cpu"]), 0.1)
            self.assertGreaterEqual(quantity_bytes(req["memory"]), 20 * 2**20)
            self.assertLessEqual(quantity_bytes(req["memory"]), 128 * 2**20)
            # Workloads share the container's cgroup: a limit would be theirs too.
            self.assertNotIn("cpu", c["resources"].get("limits", {}))
            if "memory" in c["resources"].get("limits", {}):
                self.assertGreaterEqual(quantity_bytes(c["resources"]["limits"]["memory"]), 64 * 2**20)

    def test_no_host_namespaces(self):
        for _k, _objs, ds in self.each():
            spec = pod_spec(ds)
            for f in ("hostNetwork", "hostPID", "hostIPC"):
                self.assertFalse(spec.get(f, False), f)

    def test_daemonsets_do_not_select_each_others_pods(self):
        for k in kustomizations():
            dss = find(rendered(k), "DaemonSet")
            for a in dss:
                for b in dss:
                    if a is not b:
                        self.assertFalse(
                            selector_matches(
                                a["spec"]["selector"]["matchLabels"], b["spec"]["template"]["metadata"]["labels"]
                            ),
                            f"{k}: {a['metadata']['name']} selects {b['metadata']['name']}'s pods",
                        )

    def test_hyperpod_nodes_match_the_catalog(self):
        objs = rendered("overlays/hyperpod-eks")

        def types(ds):
            (term,) = pod_spec(ds)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            exprs = {e["key"]: e for e in term["matchExpressions"]}
            self.assertEqual(exprs["sagemaker.amazonaws.com/compute-type"]["values"], ["hyperpod"])
            self.assertEqual(exprs["node.kubernetes.io/instance-type"]["operator"], "In")
            return set(exprs["node.kubernetes.io/instance-type"]["values"])

        self.assertEqual(types(one(objs, "DaemonSet", "allot-agent")), GPU_TYPES)
        self.assertEqual(types(one(objs, "DaemonSet", "allot-agent-neuron")), NEURON_TYPES)
        job = one(objs, "Job", "allot-certs")
        sel = env_value(container(pod_spec(job), "read"), "NODE_SELECTOR")
        m = re.fullmatch(r"sagemaker\.amazonaws\.com/compute-type=hyperpod,node\.kubernetes\.io/instance-type in \((.*)\)", sel)
        self.assertTrue(m, sel)
        self.assertEqual(set(m.group(1).split(",")), GPU_TYPES | NEURON_TYPES)

    def test_neuron_agent_is_the_nvidia_agent_but_privileged(self):
        objs = rendered("overlays/hyperpod-eks")
        nvidia = json.loads(json.dumps(one(objs, "DaemonSet", "allot-agent")))
        neuron = json.loads(json.dumps(one(objs, "DaemonSet", "allot-agent-neuron")))
        for ds in (nvidia, neuron):
            spec = pod_spec(ds)
            del ds["metadata"]["name"]
            ds["spec"]["selector"]["matchLabels"].pop("allot/accelerator")
            ds["spec"]["template"]["metadata"]["labels"].pop("allot/accelerator")
            spec.pop("affinity")
            agent = container(spec, "agent")
            agent.pop("securityContext")
            # Both run workloads from images through the node's containerd.
            agent["volumeMounts"] = sorted(agent["volumeMounts"], key=lambda m: m["name"])
            spec["volumes"] = sorted(spec["volumes"], key=lambda v: v["name"])
            agent["env"] = [e for e in agent["env"] if not e["name"].startswith("NVIDIA_")]
        nspec = pod_spec(nvidia)
        del nspec["runtimeClassName"]
        # Only GPU nodes read the NVIDIA toolkit's CDI specs, read-only.
        nagent = container(nspec, "agent")
        cdi = [m for m in nagent["volumeMounts"] if m["name"].startswith("cdi-")]
        self.assertEqual(sorted(m["mountPath"] for m in cdi), ["/etc/cdi", "/var/run/cdi"])
        self.assertTrue(all(m.get("readOnly") for m in cdi), cdi)
        nagent["volumeMounts"] = [m for m in nagent["volumeMounts"] if not m["name"].startswith("cdi-")]
        nspec["volumes"] = [v for v in nspec["volumes"] if not v["name"].startswith("cdi-")]
        nspec["initContainers"] = [c for c in nspec["initContainers"] if c["name"] != "data-dir"]
        self.assertEqual(nvidia, neuron)


class Security(unittest.TestCase):
    def test_privileged_only_where_justified(self):
        readme = read_text(os.path.join(DEPLOY, "README.md"))
        for k in kustomizations():
            for o in rendered(k):
                for spec in render.pod_specs(o):
                    for c in all_containers(spec):
                        sc = c.get("securityContext") or {}
                        where = (k, o["metadata"]["name"], c["name"])
                        with self.subTest(where):
                            if sc.get("privileged"):
                                self.assertIn(where, PRIVILEGED_ALLOWED)
                                self.assertIn(o["metadata"]["name"], readme)
                                self.assertNotIn("allowPrivilegeEscalation", sc)
                                continue
                            self.assertFalse(sc.get("allowPrivilegeEscalation", True), "allowPrivilegeEscalation must be false")
                            self.assertEqual(sc.get("capabilities", {}).get("drop"), ["ALL"])
                            uid = sc.get("runAsUser", (spec.get("securityContext") or {}).get("runAsUser"))
                            if c["name"] in ROOT_ALLOWED:
                                self.assertLessEqual(set(sc["capabilities"].get("add", [])), {"CHOWN", "FOWNER"})
                            elif where in FENCES:
                                self.assertNotIn("add", sc.get("capabilities", {}))
                                self.assertEqual(c["args"][0], "agent-fence")
                                self.assertTrue(sc.get("readOnlyRootFilesystem"))
                                data = [m for m in c["volumeMounts"] if m["name"] == "data"]
                                self.assertTrue(data and data[0].get("readOnly"), data)
                            elif where in ROOT_FOR_CONTAINERD:
                                self.assertNotIn("add", sc.get("capabilities", {}))
                                self.assertIn("--driver", c["args"])
                                self.assertEqual(c["args"][c["args"].index("--driver") + 1], "containerd")
                                self.assertRegex(readme, r"(?is)containerd.{0,300}socket.{0,300}root")
                            else:
                                self.assertIsNotNone(uid)
                                self.assertNotEqual(uid, 0)
                                self.assertNotIn("add", sc.get("capabilities", {}))
        self.assertRegex(readme, r"(?is)why.{0,200}privileged|privileged.{0,200}why")

    def test_every_container_requests_resources_and_pins_its_image(self):
        for k in kustomizations():
            for o in rendered(k):
                for spec in render.pod_specs(o):
                    for c in all_containers(spec):
                        with self.subTest((k, o["metadata"]["name"], c["name"])):
                            self.assertIn("cpu", c["resources"]["requests"])
                            self.assertIn("memory", c["resources"]["requests"])
                            image = c["image"]
                            self.assertRegex(image, r":[\w.-]+$|@sha256:")
                            self.assertFalse(image.endswith(":latest"))

    def test_namespace_allows_the_agents_host_paths(self):
        for k in kustomizations():
            objs = rendered(k)
            (ns,) = find(objs, "Namespace")
            for o in objs:
                if o["kind"] not in render.CLUSTER_SCOPED:
                    self.assertEqual(o["metadata"]["namespace"], ns["metadata"]["name"])
            self.assertEqual(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged")


class Scripts(unittest.TestCase):
    def test_embedded_scripts_pass_shellcheck(self):
        shellcheck = os.environ.get("SHELLCHECK") or shutil.which("shellcheck")
        if not shellcheck:
            self.skipTest("no shellcheck (deploy/check installs it)")
        seen = {}
        for k in kustomizations():
            for o in rendered(k):
                for spec in render.pod_specs(o):
                    for c in all_containers(spec):
                        if (c.get("command") or [])[:2] == ["/bin/sh", "-c"]:
                            seen.setdefault(script_of(c), f"{k} {o['metadata']['name']} {c['name']}")
        self.assertGreaterEqual(len(seen), 5)
        with tempfile.TemporaryDirectory() as tmp:
            for i, (script, where) in enumerate(seen.items()):
                path = os.path.join(tmp, f"script-{i}.sh")
                with open(path, "w", encoding="utf-8") as f:
                    f.write("#!/bin/sh\n" + script)
                r = subprocess.run([shellcheck, "-s", "sh", path], capture_output=True, text=True, check=False)
                self.assertEqual(r.returncode, 0, f"{where}:\n{r.stdout}")


class References(unittest.TestCase):
    """What the API server or the kubelet would reject or trip over."""

    def test_pod_templates(self):
        for k in kustomizations():
            objs = rendered(k)
            sas = {o["metadata"]["name"] for o in find(objs, "ServiceAccount")}
            cms = {o["metadata"]["name"]: o for o in find(objs, "ConfigMap")}
            for o in objs:
                for spec in render.pod_specs(o):
                    with self.subTest((k, o["kind"], o["metadata"]["name"])):
                        if "selector" in o["spec"]:
                            self.assertTrue(selector_matches(o["spec"]["selector"]["matchLabels"], o["spec"]["template"]["metadata"]["labels"]))
                        self.assertIn(spec["serviceAccountName"], sas)
                        vols = volumes_of(spec)
                        self.assertEqual(len(vols), len(spec.get("volumes") or []))
                        claims = {t["metadata"]["name"] for t in o["spec"].get("volumeClaimTemplates") or []}
                        for v in vols.values():
                            if "configMap" in v and v["configMap"]["name"] in cms:
                                for item in v["configMap"].get("items") or []:
                                    self.assertIn(item["key"], cms[v["configMap"]["name"]]["data"])
                            elif "configMap" in v:
                                self.fail(f"ConfigMap {v['configMap']['name']} is not rendered")
                            if "secret" in v:
                                self.assertIn(v["secret"]["secretName"], CERT_SECRETS)
                        for c in all_containers(spec):
                            names = [m["name"] for m in c.get("volumeMounts") or []]
                            paths = [m["mountPath"] for m in c.get("volumeMounts") or []]
                            self.assertEqual(len(paths), len(set(paths)))
                            for n in names:
                                self.assertIn(n, set(vols) | claims, f"{c['name']} mounts unknown volume {n}")
                            ports = {p["name"]: p for p in c.get("ports") or []}
                            for p in ports:
                                self.assertLessEqual(len(p), 15)
                            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                                if probe in c:
                                    self.assertIn(c[probe]["httpGet"]["port"], ports)
                            defined = set(env_of(c))
                            for a in (c.get("command") or []) + (c.get("args") or []):
                                for ref in re.findall(r"\$\((\w+)\)", a):
                                    self.assertIn(ref, defined)

    def test_services_and_bindings(self):
        for k in kustomizations():
            objs = rendered(k)
            templates = [o["spec"]["template"] for o in objs if render.pod_specs(o)]
            for svc in find(objs, "Service"):
                with self.subTest((k, svc["metadata"]["name"])):
                    pods = [t for t in templates if selector_matches(svc["spec"]["selector"], t["metadata"]["labels"])]
                    self.assertTrue(pods)
                    for p in svc["spec"]["ports"]:
                        for t in pods:
                            named = {
                                (cp["name"], cp.get("protocol", "TCP"))
                                for c in t["spec"]["containers"]
                                for cp in c.get("ports") or []
                            }
                            self.assertIn((p["targetPort"], p["protocol"]), named)
            for b in find(objs, "RoleBinding") + find(objs, "ClusterRoleBinding"):
                with self.subTest((k, b["metadata"]["name"])):
                    one(objs, b["roleRef"]["kind"], b["roleRef"]["name"])
                    for s in b["subjects"]:
                        sa = one(objs, "ServiceAccount", s["name"])
                        self.assertEqual(s["namespace"], sa["metadata"]["namespace"])


class CertsJob(unittest.TestCase):
    """The certificate Job's three scripts, against a stand-in for kubectl and the API."""

    KUBECTL_STUB = textwrap.dedent(
        r"""
        #!/usr/bin/env python3
        # kubectl stand-in: Secrets are files <store>/<name>.json; nodes come from $STUB_NODES.
        import base64, json, os, sys
        store = os.environ["STUB_STORE"]
        a = sys.argv[1:]
        def secret_path(n): return os.path.join(store, n + ".json")
        if a[:2] == ["get", "secret"]:
            name = a[2]
            if "--ignore-not-found" in a:
                if os.path.exists(secret_path(name)): print("secret/" + name)
                sys.exit(0)
            data = json.load(open(secret_path(name)))["data"]
            for k in sorted(data): print(k, data[k])
        elif a[:2] == ["get", "nodes"]:
            sel = a[a.index("-l") + 1] if "-l" in a else ""
            for n in os.environ["STUB_NODES"].split():
                print("node/" + n)
            with open(os.path.join(store, "selector"), "w") as f: f.write(sel)
        elif a[:3] == ["create", "secret", "generic"]:
            d = [x.split("=", 1)[1] for x in a if x.startswith("--from-file=")][0]
            data = {f: base64.b64encode(open(os.path.join(d, f), "rb").read()).decode() for f in sorted(os.listdir(d))}
            print(json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": a[3]}, "data": data}))
        elif a[:2] == ["label", "--local"]:
            obj = json.load(sys.stdin)
            k, v = a[-1].split("=")
            obj["metadata"].setdefault("labels", {})[k] = v
            print(json.dumps(obj))
        elif a[0] == "apply":
            assert "--server-side" in a, a
            obj = json.load(sys.stdin)
            with open(secret_path(obj["metadata"]["name"]), "w") as f: json.dump(obj, f)
        else:
            sys.exit("kubectl stub: unexpected " + " ".join(a))
        """
    ).lstrip()

    def setUp(self):
        self.bin = allot_binary()
        if self.bin is None:
            self.skipTest("no allot binary (set ALLOT_BIN or build target/release/allot)")
        job = one(rendered("base"), "Job", "allot-certs")
        self.spec = pod_spec(job)
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)
        tools = os.path.join(self.tmp, "bin")
        os.mkdir(tools)
        write_exe(os.path.join(tools, "kubectl"), self.KUBECTL_STUB)
        os.symlink(self.bin, os.path.join(tools, "allot"))
        self.store = os.path.join(self.tmp, "store")
        os.mkdir(self.store)
        self.path = f"{tools}:{os.environ['PATH']}"

    def run_job(self, nodes, **extra):
        work = os.path.join(self.tmp, "work")
        shutil.rmtree(work, ignore_errors=True)
        os.mkdir(work)
        codes = []
        for c in all_containers(self.spec):
            env = {"PATH": self.path, "STUB_STORE": self.store, "STUB_NODES": " ".join(nodes), "POD_NAMESPACE": "allot"}
            env.update({k: e["value"] for k, e in env_of(c).items() if "value" in e})
            env.update(extra)
            script = script_of(c).replace("/work", work)
            r = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=False)
            codes.append(r.returncode)
            if r.returncode != 0:
                self.last_stderr = r.stderr
                break
        return codes

    def secret(self, name):
        data = read_json(os.path.join(self.store, name + ".json"))["data"]
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def test_issues_keeps_and_reissues(self):
        self.assertEqual(self.run_job(["gpu-1", "gpu-2"]), [0, 0, 0], getattr(self, "last_stderr", ""))
        self.assertEqual(read_text(os.path.join(self.store, "selector")), "allot/agent=true")
        ca = self.secret("allot-ca")
        self.assertEqual(set(ca), {"ca.pem", "ca-key.pem", "web-session.key"})
        self.assertRegex(ca["web-session.key"].strip(), r"^[0-9a-f]{64}$")
        coord = self.secret("allot-coordinator-certs")
        self.assertEqual(
            set(coord),
            {"ca.pem", "web-session.key"} | {f"coordinator-{i}{s}.pem" for i in (1, 2, 3) for s in ("", "-key")},
        )
        # Every coordinator signs and reads dashboard sessions with the same key.
        self.assertEqual(coord["web-session.key"], ca["web-session.key"])
        nodes = self.secret("allot-node-certs")
        self.assertEqual(set(nodes), {"ca.pem", "node-gpu-1.pem", "node-gpu-1-key.pem", "node-gpu-2.pem", "node-gpu-2-key.pem"})
        self.assertEqual(set(self.secret("allot-admin-cert")), {"ca.pem", "admin-admin.pem", "admin-admin-key.pem"})
        for s in ("allot-coordinator-certs", "allot-node-certs", "allot-admin-cert"):
            self.assertEqual(self.secret(s)["ca.pem"], ca["ca.pem"])
        labels = read_json(os.path.join(self.store, "allot-ca.json"))["metadata"]["labels"]
        self.assertEqual(labels, {"app.kubernetes.io/part-of": "allot"})

        # Again, with a node gone and one new: same CA, same certificates, gpu-3 added.
        self.assertEqual(self.run_job(["gpu-2", "gpu-3"]), [0, 0, 0], getattr(self, "last_stderr", ""))
        self.assertEqual(self.secret("allot-ca"), ca)
        self.assertEqual(self.secret("allot-coordinator-certs"), coord)
        again = self.secret("allot-node-certs")
        self.assertEqual(again["node-gpu-2.pem"], nodes["node-gpu-2.pem"])
        self.assertIn("node-gpu-3.pem", again)
        self.assertNotIn("node-gpu-1.pem", again)

        # REISSUE: new leaf certificates under the same CA.
        self.assertEqual(self.run_job(["gpu-2"], REISSUE="1"), [0, 0, 0])
        self.assertEqual(self.secret("allot-ca"), ca)
        self.assertNotEqual(self.secret("allot-coordinator-certs")["coordinator-1.pem"], coord["coordinator-1.pem"])

    def test_a_rejected_node_name_fails_after_storing_the_rest(self):
        self.assertEqual(self.run_job(["gpu-1", "Bad_Name"]), [0, 0, 1])
        self.assertIn("Bad_Name", self.last_stderr)
        self.assertIn("node-gpu-1.pem", self.secret("allot-node-certs"))

    def test_half_a_ca_is_not_replaced(self):
        self.assertEqual(self.run_job(["gpu-1"]), [0, 0, 0])
        path = os.path.join(self.store, "allot-ca.json")
        obj = read_json(path)
        del obj["data"]["ca-key.pem"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(obj, f)
        self.assertEqual(self.run_job(["gpu-1"]), [0, 1])
        self.assertIn("not replacing the CA", self.last_stderr)


class BareMetal(unittest.TestCase):
    def load(self, name):
        return read_yaml(os.path.join(DEPLOY, "config", name))

    def unit(self, name):
        sections, cur = {}, None
        for line in read_text(os.path.join(DEPLOY, "systemd", name)).splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                cur = sections.setdefault(line.strip("[]"), {})
            else:
                k, _, v = line.partition("=")
                cur.setdefault(k, []).append(v)
        return sections

    def test_coordinator_config(self):
        cfg = self.load("coordinator.yaml")
        self.assertLessEqual(set(cfg), rust_struct_fields(os.path.join(REPO, "src", "coordinator_cmd.rs"), "FileConfig"))
        self.assertEqual(sorted(cfg["peers"]), [1, 2, 3])
        self.assertIn(cfg["id"], cfg["peers"])
        for addr in cfg["peers"].values():
            self.assertEqual(host_port(addr)[1], host_port(cfg["listen"])[1])
        u = self.unit("allot-coordinator.service")
        self.assertEqual(u["Service"]["ExecStart"], ["/usr/local/bin/allot coordinator --config /etc/allot/coordinator.yaml"])
        self.assertTrue(cfg["data_dir"].startswith("/var/lib/" + u["Service"]["StateDirectory"][0] + "/"))
        self.assertNotEqual(u["Service"]["User"], ["root"])
        # The raft thread's SCHED_FIFO 1 (raft_priority: realtime) is allowed, and no more.
        self.assertEqual(cfg["raft_priority"], "realtime")
        self.assertEqual(u["Service"]["LimitRTPRIO"], ["1"])
        self.assertNotIn("RestrictRealtime", u["Service"])

    def test_agent_config(self):
        cfg = self.load("agent.yaml")
        self.assertLessEqual(set(cfg), AGENT_CONFIG_KEYS)
        self.assertIn(cfg["instance_type"], CATALOG)
        coordinators = self.load("coordinator.yaml")["peers"].values()
        self.assertEqual(sorted(cfg["coordinators"]), sorted(coordinators))
        u = self.unit("allot-agent.service")
        self.assertEqual(u["Service"]["ExecStart"], ["/usr/local/bin/allot agent --config /etc/allot/agent.yaml"])
        self.assertEqual(cfg["data_dir"], "/var/lib/" + u["Service"]["StateDirectory"][0])
        for limit in ("MemoryMax", "MemoryLimit", "CPUQuota"):
            self.assertNotIn(limit, u["Service"])

    def test_coordinator_starts_with_the_configs(self):
        """The example and the Kubernetes configs parse in the real binary and it serves."""
        binary = allot_binary()
        if binary is None:
            self.skipTest("no allot binary (set ALLOT_BIN or build target/release/allot)")
        kube_cfg = os.path.join(K8S, "base", "config", "coordinator.yaml")
        for cfg, extra in [
            (os.path.join(DEPLOY, "config", "coordinator.yaml"), []),
            (kube_cfg, ["--id", "1", "--peers", "1=127.0.0.1:7400"]),
        ]:
            with self.subTest(cfg), tempfile.TemporaryDirectory() as tmp:
                certs = os.path.join(tmp, "certs")
                subprocess.run([binary, "certs", "init", "--dir", certs], check=True, capture_output=True)
                subprocess.run([binary, "certs", "issue", "--dir", certs, "--role", "coordinator", "--id", "1"], check=True, capture_output=True)
                port = free_port()
                p = subprocess.Popen(
                    [binary, "coordinator", "--config", cfg, *extra, "--listen", f"127.0.0.1:{port}", "--http", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"), "--certs", certs],
                    stderr=subprocess.PIPE,
                    text=True,
                )
                try:
                    seen = []
                    for line in p.stderr:
                        seen.append(line)
                        if "serving on" in line or len(seen) > 50:
                            break
                    self.assertIn("serving on", "".join(seen))
                finally:
                    p.terminate()
                    p.wait(timeout=10)
                    p.stderr.close()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    cmd = kustomize_command()
    print(f"rendering with {' '.join(cmd) if cmd else 'deploy/kubernetes/render.py'}", file=sys.stderr)
    print(f"allot binary: {allot_binary() or 'none (tests that run it are skipped)'}", file=sys.stderr)
    unittest.main()

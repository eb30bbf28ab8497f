#!/usr/bin/env python3
"""Render a kustomization without kustomize: the subset of kustomize these manifests use.

    python3 deploy/kubernetes/render.py deploy/kubernetes/overlays/hyperpod-eks > out.yaml

Why it exists: deploy/check must build the overlays on machines where neither `kustomize` nor
`kubectl kustomize` can be installed from a package registry. When either is available,
deploy/check renders with it too and requires the same objects from both, so this file cannot
drift from kustomize unnoticed.

Supported kustomization fields (anything else is an error, not silently ignored):
  resources           files (multi-document YAML) and directories holding a kustomization
  namespace           sets metadata.namespace of namespaced objects, renames the Namespace
                      object, and gives ServiceAccount subjects of (Cluster)RoleBindings the
                      namespace of the ServiceAccount they name (when it is part of the build)
  configMapGenerator  `files` only; the name gets kustomize's content-hash suffix and references
                      from pod templates (volumes, projected volumes, env, envFrom) follow it
  patches             JSON 6902 patches (add, remove, replace, test, move, copy) from `path` or
                      `patch`, with a `target` of `kind` and `name`
  images              `name` with `newName`, `newTag` and/or `digest`
"""

import copy
import hashlib
import json
import os
import sys

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "configMapGenerator",
    "patches",
    "images",
}
CLUSTER_SCOPED = {
    "APIService",
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "CustomResourceDefinition",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "VolumeSnapshotClass",
}


class RenderError(Exception):
    pass


def load_yaml_documents(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def find_kustomization(directory):
    for name in KUSTOMIZATION_FILES:
        p = os.path.join(directory, name)
        if os.path.isfile(p):
            return p
    raise RenderError(f"{directory}: no kustomization.yaml")


class Build:
    """The objects of one kustomization, with the renames (generated names) made so far."""

    def __init__(self):
        self.objects = []
        # (kind, name before the hash suffix) -> name with it
        self.renames = {}


def render(directory):
    """Returns the rendered objects of the kustomization in `directory`."""
    return build(os.path.abspath(directory)).objects


def build(directory):
    kpath = find_kustomization(directory)
    docs = load_yaml_documents(kpath)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise RenderError(f"{kpath}: expected one mapping")
    k = docs[0]
    unknown = set(k) - SUPPORTED_FIELDS
    if unknown:
        raise RenderError(
            f"{kpath}: render.py does not implement {sorted(unknown)}; "
            "use kustomize, or extend render.py (and let deploy/check compare)"
        )
    if k.get("kind", "Kustomization") != "Kustomization":
        raise RenderError(f"{kpath}: kind {k.get('kind')!r} is not supported")

    out = Build()
    for entry in k.get("resources") or []:
        p = os.path.normpath(os.path.join(directory, entry))
        if os.path.isdir(p):
            sub = build(p)
            out.objects.extend(sub.objects)
            out.renames.update(sub.renames)
        elif os.path.isfile(p):
            out.objects.extend(load_yaml_documents(p))
        else:
            raise RenderError(f"{kpath}: resource {entry} does not exist")

    generated = []
    for gen in k.get("configMapGenerator") or []:
        generated.append(config_map(directory, kpath, gen))

    for patch in k.get("patches") or []:
        apply_patch(directory, kpath, out.objects + generated, patch)

    namespace = k.get("namespace")
    if namespace:
        set_namespace(out.objects + generated, namespace)

    for obj in generated:
        original = obj["metadata"]["name"]
        hashed = f"{original}-{config_map_hash(obj)}"
        obj["metadata"]["name"] = hashed
        out.renames[("ConfigMap", original)] = hashed
    out.objects.extend(generated)

    for image in k.get("images") or []:
        set_image(out.objects, image)

    for obj in out.objects:
        for spec in pod_specs(obj):
            follow_config_map_renames(spec, out.renames)
    check_unique(kpath, out.objects)
    return out


def check_unique(kpath, objects):
    seen = set()
    for o in objects:
        key = (o.get("kind"), o.get("metadata", {}).get("namespace"), o["metadata"]["name"])
        if key in seen:
            raise RenderError(f"{kpath}: {key} appears twice")
        seen.add(key)


# --- configMapGenerator ---------------------------------------------------------------------


def config_map(directory, kpath, gen):
    allowed = {"name", "files"}
    if set(gen) - allowed:
        raise RenderError(
            f"{kpath}: configMapGenerator supports {sorted(allowed)} only, not {sorted(set(gen) - allowed)}"
        )
    data = {}
    for f in gen.get("files") or []:
        key, _, rel = f.partition("=") if "=" in f else (None, None, f)
        p = os.path.normpath(os.path.join(directory, rel))
        if not p.startswith(directory + os.sep):
            raise RenderError(f"{kpath}: {f} is outside the kustomization directory")
        with open(p, encoding="utf-8") as fh:
            data[key or os.path.basename(p)] = fh.read()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": gen["name"]},
        "data": data,
    }


def config_map_hash(obj):
    """kustomize's suffix: sha256 of the JSON of kind, name and data (keys sorted, Go's
    escaping), the first 10 hex digits with 0 1 3 a e replaced by g h k m t.

    kustomize 5 looks the name up with a path its lookup does not resolve, so the name it
    hashes is always empty; this does the same (deploy/check compares with kustomize)."""
    m = {"data": obj.get("data") or {}, "kind": "ConfigMap", "name": ""}
    text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Go's encoding/json escapes <, > and & for HTML safety.
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def follow_config_map_renames(spec, renames):
    def renamed(name):
        return renames.get(("ConfigMap", name), name)

    for v in spec.get("volumes") or []:
        if "configMap" in v:
            v["configMap"]["name"] = renamed(v["configMap"]["name"])
        for src in (v.get("projected") or {}).get("sources") or []:
            if "configMap" in src:
                src["configMap"]["name"] = renamed(src["configMap"]["name"])
    for c in containers(spec):
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
            if ref:
                ref["name"] = renamed(ref["name"])
        for e in c.get("envFrom") or []:
            if "configMapRef" in e:
                e["configMapRef"]["name"] = renamed(e["configMapRef"]["name"])


# --- namespace ------------------------------------------------------------------------------


def set_namespace(objects, namespace):
    old_sa_namespace = {
        o["metadata"]["name"]: o["metadata"].get("namespace")
        for o in objects
        if o.get("kind") == "ServiceAccount"
    }
    for o in objects:
        kind = o.get("kind")
        if kind == "Namespace":
            o["metadata"]["name"] = namespace
        elif kind not in CLUSTER_SCOPED:
            o["metadata"]["namespace"] = namespace
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            for s in o.get("subjects") or []:
                if s.get("kind") != "ServiceAccount" or s.get("name") not in old_sa_namespace:
                    continue
                if s.get("namespace") in (None, old_sa_namespace[s["name"]]):
                    s["namespace"] = namespace


# --- images ---------------------------------------------------------------------------------


def split_image(image):
    """name, tag, digest of an image reference (a registry port is not a tag)."""
    digest = None
    if "@" in image:
        image, digest = image.split("@", 1)
    tag = None
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        image, tag = image[:colon], image[colon + 1 :]
    return image, tag, digest


def set_image(objects, entry):
    allowed = {"name", "newName", "newTag", "digest"}
    if set(entry) - allowed:
        raise RenderError(f"images: {sorted(set(entry) - allowed)} not supported")
    for o in objects:
        for spec in pod_specs(o):
            for c in containers(spec):
                name, tag, digest = split_image(c["image"])
                if name != entry["name"]:
                    continue
                name = entry.get("newName", name)
                if "digest" in entry:
                    c["image"] = f"{name}@{entry['digest']}"
                    continue
                tag = entry.get("newTag", tag)
                c["image"] = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


# --- patches --------------------------------------------------------------------------------


def apply_patch(directory, kpath, objects, patch):
    allowed = {"path", "patch", "target"}
    if set(patch) - allowed:
        raise RenderError(f"{kpath}: patch fields {sorted(set(patch) - allowed)} not supported")
    target = patch.get("target") or {}
    if set(target) - {"kind", "name"} or not target.get("kind") or not target.get("name"):
        raise RenderError(f"{kpath}: a patch target needs exactly kind and name")
    if "path" in patch:
        p = os.path.normpath(os.path.join(directory, patch["path"]))
        docs = load_yaml_documents(p)
        if len(docs) != 1:
            raise RenderError(f"{p}: expected one document")
        ops, where = docs[0], p
    else:
        ops, where = yaml.safe_load(patch["patch"]), kpath
    if not isinstance(ops, list):
        raise RenderError(f"{where}: render.py supports JSON 6902 patches (a list of ops) only")
    matched = [
        o
        for o in objects
        if o.get("kind") == target["kind"] and o["metadata"]["name"] == target["name"]
    ]
    if not matched:
        raise RenderError(f"{where}: the target {target} matches nothing")
    for o in matched:
        for op in ops:
            try:
                json_patch_op(o, op)
            except (KeyError, IndexError, ValueError, TypeError) as e:
                raise RenderError(f"{where}: {op.get('op')} {op.get('path')}: {e}") from e


def parse_pointer(pointer):
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"{pointer!r} is not a JSON pointer")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def resolve_parent(doc, tokens):
    node = doc
    for t in tokens[:-1]:
        node = node[int(t)] if isinstance(node, list) else node[t]
    return node, tokens[-1]


def get_at(doc, pointer):
    node = doc
    for t in parse_pointer(pointer):
        node = node[int(t)] if isinstance(node, list) else node[t]
    return node


def add_at(doc, pointer, value):
    parent, last = resolve_parent(doc, parse_pointer(pointer))
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            i = int(last)
            if i < 0 or i > len(parent):
                raise IndexError(f"index {i} out of range")
            parent.insert(i, value)
    else:
        parent[last] = value


def remove_at(doc, pointer):
    parent, last = resolve_parent(doc, parse_pointer(pointer))
    if isinstance(parent, list):
        return parent.pop(int(last))
    return parent.pop(last)


def json_patch_op(doc, op):
    kind = op["op"]
    path = op["path"]
    if kind == "add":
        add_at(doc, path, copy.deepcopy(op["value"]))
    elif kind == "remove":
        remove_at(doc, path)
    elif kind == "replace":
        get_at(doc, path)  # must exist
        parent, last = resolve_parent(doc, parse_pointer(path))
        parent[int(last) if isinstance(parent, list) else last] = copy.deepcopy(op["value"])
    elif kind == "test":
        if get_at(doc, path) != op["value"]:
            raise ValueError(f"test failed: {get_at(doc, path)!r} != {op['value']!r}")
    elif kind == "move":
        add_at(doc, path, remove_at(doc, op["from"]))
    elif kind == "copy":
        add_at(doc, path, copy.deepcopy(get_at(doc, op["from"])))
    else:
        raise ValueError(f"unknown op {kind!r}")


# --- pod specs ------------------------------------------------------------------------------


def pod_specs(obj):
    """The pod specs inside an object (Pod, workload templates, CronJob's job template)."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return [spec]
    if kind == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [spec.get("template", {}).get("spec", {})]
    return []


def containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        objects = render(argv[1])
    except RenderError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False, default_flow_style=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""A small, faithful fake of the Kubernetes API server's node endpoints.

GET /api/v1/nodes (with `labelSelector`: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma = AND),
GET /api/v1/nodes/{name}, PATCH /api/v1/nodes/{name} with a strategic-merge (or merge) patch
(objects merge, null deletes a key); GET/POST/PUT /api/v1/namespaces/{ns}/configmaps[/{name}]
(PUT checks `metadata.resourceVersion`: 409 Conflict on a stale one, as the real server does).
Failures are real `Status` objects. `fail_next(n, code)` injects failures for fault tests.

`operator_step()` plays the NVIDIA GPU Operator's mig-manager: for every node whose
`nvidia.com/mig.config` label changed, it looks the named config up in the mig-parted ConfigMap
(`config.yaml`), sets the node's allocatable `nvidia.com/gpu` and `nvidia.com/mig-*` from it and
`nvidia.com/mig.config.state` to `success`, or to `failed` when the config is missing or names a
profile the GPU does not have.
"""

from __future__ import annotations

import copy
import re
import threading

import yaml

from federation.mig.catalog import CATALOG

MIG_CONFIG, MIG_STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"

REASONS = {400: "BadRequest", 404: "NotFound", 409: "Conflict", 415: "UnsupportedMediaType", 422: "Invalid", 500: "InternalError", 503: "ServiceUnavailable"}
PATCH_TYPES = {"application/strategic-merge-patch+json", "application/merge-patch+json"}


def status(code: int, message: str, name: str | None = None) -> tuple[int, dict]:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": REASONS.get(code, "Unknown"), "code": code}
    if name:
        body["details"] = {"name": name, "kind": "nodes"}
    return code, body


def gpu_node(name: str, product: str, gpus: int, *, rack: str | None = None, mig: dict[str, int] | None = None, ready: bool = True) -> dict:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
    if rack:
        labels["topology.kubernetes.io/rack"] = rack
    alloc = {"cpu": "128", "memory": "1056375372Ki", "nvidia.com/gpu": str(gpus), "pods": "110"}
    alloc.update({f"nvidia.com/mig-{p}": str(n) for p, n in (mig or {}).items()})
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "labels": labels, "resourceVersion": "1"},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                   "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}]}}


def merge(target: dict, patch: dict) -> dict:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


def selected(labels: dict, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if m := re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", term):
            key, op, val = m.groups()
            if (labels.get(key) == val) != (op != "!="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class FakeKubernetes:
    def __init__(self, nodes: list[dict] | None = None):
        self.nodes = {n["metadata"]["name"]: n for n in nodes or []}
        self.patches: list[tuple[str, str, dict]] = []  # (node, content type, patch)
        self._faults: list[int] = []
        self._version = 1
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.mig_pending: set[str] = set()
        self.models: dict[str, str] = {}  # node -> catalog GPU model, for operator_step
        self._lock = threading.Lock()

    def fail_next(self, n: int, code: int = 503) -> None:
        with self._lock:
            self._faults += [code] * n

    def _configmap(self, method, ns, name, body):
        key = (ns, name or "")
        if method == "GET" and name:
            found = self.configmaps.get(key)
            return (200, found) if found else status(404, f'configmaps "{name}" not found', name)
        if method == "POST" and not name:
            name = body["metadata"]["name"]
            if (ns, name) in self.configmaps:
                return status(409, f'configmaps "{name}" already exists', name)
            return self._store_configmap(ns, name, body, 201)
        if method == "PUT" and name:
            found = self.configmaps.get(key)
            if found is None:
                return status(404, f'configmaps "{name}" not found', name)
            if body["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
                return status(409, f'Operation cannot be fulfilled on configmaps "{name}": the object has been modified; please apply your changes to the latest version and try again', name)
            return self._store_configmap(ns, name, body, 200)
        return status(405, f"method {method} not allowed")

    def _store_configmap(self, ns, name, body, code):
        self._version += 1
        obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns, "resourceVersion": str(self._version)},
               "data": dict(body.get("data") or {})}
        self.configmaps[(ns, name)] = obj
        return code, obj

    def operator_step(self, namespace: str = "gpu-operator", configmap: str = "federation-mig-parted-config") -> None:
        with self._lock:
            for name in sorted(self.mig_pending):
                node = self.nodes[name]
                labels = node["metadata"]["labels"]
                doc = yaml.safe_load(self.configmaps.get((namespace, configmap), {}).get("data", {}).get("config.yaml", "")) or {}
                entries = doc.get("mig-configs", {}).get(labels[MIG_CONFIG])
                profiles = CATALOG[self.models[name]].profiles
                if entries is None or any(p not in profiles for e in entries for p in (e.get("mig-devices") or {})):
                    labels[MIG_STATE] = "failed"
                    continue
                alloc = node["status"]["allocatable"]
                for k in [k for k in alloc if k.startswith("nvidia.com/mig-")]:
                    del alloc[k]
                whole = int(labels.get("nvidia.com/gpu.count", "0")) - sum(1 for e in entries if e["mig-enabled"])
                alloc["nvidia.com/gpu"] = str(whole)
                for e in entries:
                    for p, n in (e.get("mig-devices") or {}).items():
                        alloc[f"nvidia.com/mig-{p}"] = str(int(alloc.get(f"nvidia.com/mig-{p}", "0")) + n)
                labels[MIG_STATE] = "success"
            self.mig_pending.clear()

    def handle(self, method, path, query, body, headers):
        with self._lock:
            if self._faults:
                return status(self._faults.pop(0), "injected fault")
            cm = re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?", path)
            if cm:
                return self._configmap(method, cm[1], cm[2], body)
            m = re.fullmatch(r"/api/v1/nodes(?:/([^/]+))?", path)
            if not m:
                return status(404, f"the server could not find the requested resource ({path})")
            name = m[1]
            if name is None and method == "GET":
                items = [n for _, n in sorted(self.nodes.items()) if selected(n["metadata"].get("labels", {}), query.get("labelSelector", ""))]
                return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._version)}, "items": items}
            node = self.nodes.get(name or "")
            if node is None:
                return status(404, f'nodes "{name}" not found', name)
            if method == "GET":
                return 200, node
            if method == "PATCH":
                ctype = (headers.get("Content-Type") or "").split(";")[0]
                if ctype not in PATCH_TYPES:
                    return status(415, f"the body of the request was in an unknown format - accepted media types include: {', '.join(sorted(PATCH_TYPES))}")
                if not isinstance(body, dict):
                    return status(400, "the patch must be a JSON object")
                self.patches.append((name, ctype, copy.deepcopy(body)))
                before = node["metadata"].get("labels", {}).get(MIG_CONFIG)
                merge(node, body)
                if node["metadata"].get("labels", {}).get(MIG_CONFIG) != before:
                    node["metadata"]["labels"][MIG_STATE] = "pending"
                    self.mig_pending.add(name)
                self._version += 1
                node["metadata"]["resourceVersion"] = str(self._version)
                return 200, node
            return status(405, f"method {method} not allowed")

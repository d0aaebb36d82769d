"""A small, faithful fake of the Kubernetes API server's node endpoints.

GET /api/v1/nodes (with `labelSelector`: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma = AND),
GET /api/v1/nodes/{name}, PATCH /api/v1/nodes/{name} with a strategic-merge (or merge) patch
(objects merge, null deletes a key). Failures are real `Status` objects. `fail_next(n, code)`
injects failures for fault tests.
"""

from __future__ import annotations

import copy
import re
import threading

REASONS = {400: "BadRequest", 404: "NotFound", 415: "UnsupportedMediaType", 422: "Invalid", 500: "InternalError", 503: "ServiceUnavailable"}
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
        self._lock = threading.Lock()

    def fail_next(self, n: int, code: int = 503) -> None:
        with self._lock:
            self._faults += [code] * n

    def handle(self, method, path, query, body, headers):
        with self._lock:
            if self._faults:
                return status(self._faults.pop(0), "injected fault")
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
                merge(node, body)
                self._version += 1
                node["metadata"]["resourceVersion"] = str(self._version)
                return 200, node
            return status(405, f"method {method} not allowed")

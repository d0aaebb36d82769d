"""A small, faithful fake of the Compute Engine v1 REST paths the provider uses.

Instances: insert, get, list (with `labels.K = "V" AND ...` filters and paging), delete.
Zone operations: get and wait. Inserts and deletes return a RUNNING operation that is DONE
after `op_delay_s` (or when `wait`ed); capacity exhaustion is reported the way Compute Engine
does, as a DONE operation carrying `ZONE_RESOURCE_POOL_EXHAUSTED`. Errors use Google's JSON
error body. Knobs for fault tests: `exhausted_zones`, `fail_next(n, status)`.
"""

from __future__ import annotations

import itertools
import re
import threading
import time

BASE = "https://www.googleapis.com/compute/v1"
ROUTE = re.compile(r"^/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)/(?P<kind>instances|operations)(?:/(?P<name>[^/]+))?(?P<wait>/wait)?$")
CLAUSE = re.compile(r'^\(?\s*labels\.([a-z0-9_-]+)\s*=\s*"?([^"\s)]*)"?\s*\)?$')
REASONS = {400: "invalid", 404: "notFound", 409: "alreadyExists", 429: "rateLimitExceeded", 503: "backendError"}


def error(status: int, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": status, "message": message, "errors": [{"message": message, "domain": "global", "reason": REASONS.get(status, "error")}]}}


def public(op: dict) -> dict:
    """An operation as the API shows it, without the fake's own bookkeeping."""
    return {k: v for k, v in op.items() if not k.startswith("_")}


class FakeComputeEngine:
    def __init__(self, op_delay_s: float = 0.05):
        self.op_delay_s = op_delay_s
        self.instances: dict[tuple[str, str, str], dict] = {}  # (project, zone, name) -> instance
        self.operations: dict[tuple[str, str, str], dict] = {}
        self.exhausted_zones: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._faults: list[int] = []
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()

    def fail_next(self, n: int, status: int = 503) -> None:
        with self._lock:
            self._faults += [status] * n

    # ---- routing ----

    def handle(self, method, path, query, body, headers):
        with self._lock:
            self.requests.append((method, path))
            if self._faults:
                return error(self._faults.pop(0), "injected fault")
            m = ROUTE.match(path)
            if not m:
                return error(404, f"no such path {path}")
            p, z, kind, name = m["p"], m["z"], m["kind"], m["name"]
            self._advance()
            if kind == "operations":
                if name is None or (p, z, name) not in self.operations:
                    return error(404, f"The resource 'projects/{p}/zones/{z}/operations/{name}' was not found")
                if m["wait"]:
                    self._finish(self.operations[(p, z, name)])
                return 200, public(self.operations[(p, z, name)])
            if method == "POST" and name is None:
                return self._insert(p, z, body or {})
            if method == "GET" and name is None:
                return self._list(p, z, query)
            inst = self.instances.get((p, z, name))
            if inst is None:
                return error(404, f"The resource 'projects/{p}/zones/{z}/instances/{name}' was not found")
            if method == "GET":
                return 200, inst
            if method == "DELETE":
                inst["status"] = "STOPPING"
                return 200, public(self._operation(p, z, "delete", inst))
            return error(400, f"unsupported {method}")

    # ---- behaviour ----

    def _insert(self, p, z, body):
        name = body.get("name", "")
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            return error(400, f"Invalid value for field 'resource.name': '{name}'")
        if (p, z, name) in self.instances:
            return error(409, f"The resource 'projects/{p}/zones/{z}/instances/{name}' already exists")
        if not body.get("machineType") or not body.get("disks") or not body.get("networkInterfaces"):
            return error(400, "Invalid value for field 'resource': machineType, disks and networkInterfaces are required")
        inst = {**body, "kind": "compute#instance", "id": str(next(self._ids)), "status": "PROVISIONING", "zone": f"{BASE}/projects/{p}/zones/{z}",
                "selfLink": f"{BASE}/projects/{p}/zones/{z}/instances/{name}"}
        op = self._operation(p, z, "insert", inst)
        if z in self.exhausted_zones:
            op["error"] = {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                                       "message": f"The zone 'projects/{p}/zones/{z}' does not have enough resources available to fulfill the request."}]}
            op["httpErrorStatusCode"], op["httpErrorMessage"] = 503, "SERVICE UNAVAILABLE"
            op["_fail"] = True
        self.instances[(p, z, name)] = inst
        return 200, public(op)

    def _operation(self, p, z, kind, inst):
        name = f"operation-{next(self._ids)}-{kind}"
        op = {"kind": "compute#operation", "id": str(next(self._ids)), "name": name, "operationType": kind, "status": "RUNNING", "progress": 0,
              "zone": f"{BASE}/projects/{p}/zones/{z}", "targetLink": inst["selfLink"], "selfLink": f"{BASE}/projects/{p}/zones/{z}/operations/{name}",
              "_target": (p, z, inst["name"]), "_due": time.monotonic() + self.op_delay_s}
        self.operations[(p, z, name)] = op
        return op

    def _finish(self, op):
        if op["status"] == "DONE":
            return
        op["status"], op["progress"] = "DONE", 100
        target = op.pop("_target")
        if op.pop("_fail", False) or op["operationType"] == "delete":
            self.instances.pop(target, None)
        elif target in self.instances:
            self.instances[target]["status"] = "RUNNING"

    def _advance(self):
        now = time.monotonic()
        for op in self.operations.values():
            if op["status"] != "DONE" and op["_due"] <= now:
                self._finish(op)

    def _list(self, p, z, query):
        want = {}
        filt = query.get("filter", "").strip()
        for clause in filter(None, (c.strip() for c in re.split(r"\s+AND\s+", filt))) if filt else []:
            m = CLAUSE.match(clause)
            if not m:
                return error(400, f"Invalid value for field 'filter': '{filt}'. Invalid list filter expression.")
            want[m[1]] = m[2]
        items = [i for (pp, zz, _), i in sorted(self.instances.items()) if (pp, zz) == (p, z)
                 and all(i.get("labels", {}).get(k) == v for k, v in want.items())]
        size = int(query.get("maxResults") or 500)
        start = int(query.get("pageToken") or 0)
        page = {"kind": "compute#instanceList", "id": f"projects/{p}/zones/{z}/instances", "items": items[start:start + size]}
        if start + size < len(items):
            page["nextPageToken"] = str(start + size)
        return 200, page

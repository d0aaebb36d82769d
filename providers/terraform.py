"""Burst nodes through Terraform, for sites whose provider names a `terraform_dir`.

The module (`infra/terraform/aws` or `gcp`) takes the desired nodes as a map, node name ->
{group, request}; this provider keeps that map in `federation.auto.tfvars.json` in a working
directory of its own (the module is copied there with `terraform init -from-module`, so the
state never lands in the source tree), and applies it. Adding a request adds its node names;
releasing nodes removes exactly those names, so Terraform destroys exactly those machines.
The apply output (`terraform output -json nodes`) is what the provider lists.

Where the module makes the site's whole cluster (network, security group, instance profile and
Ray head: `provider.cluster`), `up` and `down` apply and destroy it in the same working
directory, so the workers the federation scales and the cluster they join share one state.
Terraform's state is the journal of that lifecycle: both are idempotent, and a second `up` of a
cluster that is up changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from federation.model import NodeGroup
from providers.base import CloudProvider, Instance, ProviderError, machine_name
from providers.errors import AUTH, CAPACITY, INVALID, QUOTA, TRANSIENT, ProviderFailure

TFVARS = "federation.auto.tfvars.json"
#: patterns in Terraform's error output -> the failure kind (the cloud's own error codes pass
#: through). Whole words only, and HTTP statuses only as the SDK prints them: the output also
#: holds endpoints, ports and request ids, whose digits must not read as a status.
MARKERS = [(CAPACITY, r"InsufficientInstanceCapacity|ZONE_RESOURCE_POOL_EXHAUSTED|SpotMaxPriceTooLow|InsufficientCapacity"),
           (QUOTA, r"InstanceLimitExceeded|VcpuLimitExceeded|QUOTA_EXCEEDED|MaxSpotInstanceCountExceeded"),
           (AUTH, r"AuthFailure|UnauthorizedOperation|no valid credential|InvalidClientTokenId|StatusCode: 403"),
           (TRANSIENT, r"RequestLimitExceeded|Throttling|timeout|connection refused|StatusCode: 5\d\d")]


def classify(output: str) -> str:
    return next((kind for kind, pattern in MARKERS if re.search(rf"\b(?:{pattern})\b", output)), INVALID)


def state_outputs(work: Path) -> dict:
    """The outputs in a working directory's local Terraform state, read from the file (version 4
    keeps them under "outputs"): no subprocess, so the Ray site can ask every call."""
    try:
        doc = json.loads((Path(work) / "terraform.tfstate").read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # never applied, or being written this instant
        return {}
    return {k: v.get("value") for k, v in (doc.get("outputs") or {}).items()}


class JobsApiOf:
    """Where a cluster site's Ray Jobs API is now, from its Terraform state (None: it is down).
    A class, not a closure: it travels to the site's actor."""

    def __init__(self, work: str | Path):
        self.work = str(work)

    def __call__(self) -> str | None:
        return state_outputs(Path(self.work)).get("jobs_api_url")


class TerraformProvider(CloudProvider):
    def __init__(self, federation: str, site: str, module_dir: str | Path, work_dir: str | Path, groups: dict[str, NodeGroup],
                 variables: dict, env: dict | None = None, apply_timeout_s: float = 900.0, **kw):
        super().__init__(federation, site, groups, **kw)
        self.module, self.work = Path(module_dir).resolve(), Path(work_dir)
        self.variables, self.env, self.apply_timeout_s = variables, env or dict(os.environ), apply_timeout_s
        self.terraform = shutil.which("terraform")
        self._tf_lock = threading.Lock()
        self._down = None  # the teardown running in the background, if any

    # ---- terraform ----

    def _run(self, *args: str) -> str:
        if self.terraform is None:
            raise ProviderFailure(INVALID, "terraform is not on the PATH (install it, or drop provider.terraform_dir to use the cloud SDK)")
        # A bound on every run: Terraform's AWS provider retries InsufficientInstanceCapacity for up
        # to 50 minutes whatever the resource's timeouts (hashicorp/terraform-provider-aws#43193),
        # and a burst that waits that long is worse than one that fails over.
        try:
            proc = subprocess.run([self.terraform, f"-chdir={self.work}", *args, "-no-color"], capture_output=True, text=True,
                                  env=self.env, timeout=self.apply_timeout_s)
        except subprocess.TimeoutExpired as e:
            out = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise ProviderFailure(CAPACITY, f"terraform {args[0]} did not finish in {self.apply_timeout_s:.0f}s "
                                            f"(a cloud out of capacity looks like this): {out.strip()[-1000:]}") from None
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]  # Terraform's errors are on stderr
            raise ProviderFailure(classify(proc.stderr + proc.stdout), f"terraform {args[0]}: {detail}")
        return proc.stdout

    def _init(self) -> None:
        if (self.work / ".terraform").is_dir():
            return
        if not self.module.is_dir():
            raise ProviderFailure(INVALID, f"sites.{self.site}.provider.terraform_dir: {self.module} is not a directory")
        self.work.mkdir(parents=True, exist_ok=True)
        if not any(self.work.glob("*.tf")):
            self._run("init", f"-from-module={self.module}", "-input=false", "-backend=false")
        self._run("init", "-input=false")

    def desired(self) -> dict[str, dict]:
        path = self.work / TFVARS
        return json.loads(path.read_text()).get("nodes", {}) if path.exists() else {}

    def _write(self, nodes: dict[str, dict]) -> None:
        (self.work / TFVARS).write_text(json.dumps({**self.variables, "nodes": nodes}, indent=2, sort_keys=True))

    def _apply(self, nodes: dict[str, dict]) -> None:
        self._init()
        self._write(nodes)
        self._run("apply", "-auto-approve", "-input=false")

    def outputs(self) -> dict:
        """The module's outputs as applied ({} before the first apply, and after a destroy)."""
        return state_outputs(self.work)

    def head_up(self) -> bool:
        """Whether the module's Ray head exists (its Jobs API is an output)."""
        return bool(self.outputs().get("jobs_api_url"))

    def teardown(self) -> None:
        """Destroy the site's cluster in the background (minutes on a cloud); a second call while
        one runs does nothing. A request made meanwhile waits for it, then applies afresh."""
        with self._lock:
            if self._down is not None and not self._down.done():
                return
            self._down = self._pool.submit(self._teardown)

    def _teardown(self) -> None:
        try:
            self.down()
        except ProviderFailure as f:
            with self._lock:
                self._errors.append(ProviderError("-", f.kind, f"cannot take {self.site}'s cluster down: {f.message}"))

    def up(self) -> dict:
        """Apply the site's cluster (its workers as they are) and return the module's outputs."""
        with self._tf_lock:
            self._apply(self.desired())
            return self.outputs()

    def down(self) -> None:
        """Destroy everything the module made for the site, workers included."""
        with self._tf_lock:
            if not (self.work / "terraform.tfstate").exists():
                return
            self._init()
            self._write({})
            self._run("destroy", "-auto-approve", "-input=false")

    def _read_outputs(self) -> list[Instance]:
        nodes = self.outputs().get("nodes") or {}
        return [Instance(name, n["group"], n["request"], n.get("state") in ("running", "RUNNING")) for name, n in sorted(nodes.items())]

    # ---- CloudProvider ----

    def _instances(self) -> list[Instance]:
        with self._tf_lock:
            return self._read_outputs()

    def _launch(self, request_id: str, group: NodeGroup, count: int, existing: list[str]) -> list[str]:
        with self._tf_lock:
            nodes = self.desired()
            start = len(existing)
            names = [machine_name(f"{group.name}-{request_id}-{start + i}") for i in range(count)]
            try:
                self._apply({**nodes, **{n: {"group": group.name, "request": request_id} for n in names}})
            except ProviderFailure:
                # forget the names, or every later apply would try them again; what did start is
                # listed under the request and released by the caller
                made = {i.id for i in self._read_outputs()}
                self._write({**nodes, **{n: {"group": group.name, "request": request_id} for n in names if n in made}})
                raise
        return names

    def _terminate(self, ids: list[str]) -> None:
        with self._tf_lock:
            nodes = self.desired()
            if not any(i in nodes for i in ids):
                return
            self._apply({k: v for k, v in nodes.items() if k not in ids})

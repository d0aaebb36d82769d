"""Google Compute Engine burst nodes through google-cloud-compute (REST transport).

Instance names are derived from the request id, so a retried insert of the same request finds
`alreadyExists` instead of a second machine. All of a request's instances go to one zone (a gang
wants one network); a capacity error in a zone deletes what was made there and tries the next
zone. Operations are awaited with a `ZoneOperationsClient` built from the same client options:
`ExtendedOperation.result()` polls the public Google host whatever the endpoint.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlparse

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from federation.model import NodeGroup
from federation.runtime.pinning import node_resource
from federation.schema import GcpProvider as GcpSpec
from providers.base import (
    TAG_FEDERATION,
    TAG_GROUP,
    TAG_REQUEST,
    TAG_SITE,
    CloudProvider,
    Instance,
    machine_name,
)
from providers.errors import (
    CAPACITY,
    INVALID,
    QUOTA,
    TRANSIENT,
    ProviderFailure,
    kind_from_status,
)

#: gpu_model -> Compute Engine accelerator type (https://cloud.google.com/compute/docs/gpus)
ACCELERATORS = {"A100-40GB": "nvidia-tesla-a100", "A100-80GB": "nvidia-a100-80gb", "H100-80GB": "nvidia-h100-80gb",
                "H200-141GB": "nvidia-h200-141gb", "L4": "nvidia-l4", "T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100"}
#: a GPU image with CUDA drivers and Python; operators who need another one use `terraform_dir`
IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124"

OPERATION_CODES = {CAPACITY: {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED",
                              "UNSUPPORTED_OPERATION", "STOCKOUT"},
                   QUOTA: {"QUOTA_EXCEEDED", "PREEMPTIBLE_QUOTA_EXCEEDED"},
                   TRANSIENT: {"INTERNAL_ERROR", "RATE_LIMIT_EXCEEDED"}}


def classify(exc: Exception) -> ProviderFailure:
    if isinstance(exc, gexc.GoogleAPICallError):
        reasons = {e.get("reason", "") for e in (exc.errors or []) if isinstance(e, dict)}
        if reasons & {"quotaExceeded", "QUOTA_EXCEEDED"}:
            return ProviderFailure(QUOTA, exc.message)
        return ProviderFailure(kind_from_status(exc.code), f"{exc.code} {exc.message}")
    if isinstance(exc, (ConnectionError, OSError)):
        return ProviderFailure(TRANSIENT, str(exc))
    return ProviderFailure(INVALID, str(exc))


def operation_failure(op: compute_v1.Operation) -> ProviderFailure | None:
    if not op.error or not op.error.errors:
        return None
    errs = list(op.error.errors)
    codes = {e.code for e in errs}
    kind = next((k for k, c in OPERATION_CODES.items() if codes & c), INVALID)
    return ProviderFailure(kind, "; ".join(f"{e.code}: {e.message}" for e in errs))


def label_value(value: str) -> str:
    """Label values allow only lowercase letters, digits, `_` and `-`, at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


def instance_name(federation: str, site: str, request_id: str, i: int) -> str:
    return machine_name(f"{federation}-{site}-{request_id}-{i}")


def startup_script(ray_address: str | None, name: str, group: NodeGroup) -> str:
    """Joins the site's Ray cluster with the node's GPUs and the resource that names it."""
    host = urlparse(ray_address).hostname if ray_address else "RAY_HEAD"
    resources = json.dumps({node_resource(name): 1})
    return (f"#!/bin/bash\nray start --address={host}:6379 --num-gpus={group.gpus_per_node} "
            f"--num-cpus={max(1, group.node_resources.cpu_milli // 1000)} --resources='{resources}'\n")


class GceProvider(CloudProvider):
    def __init__(self, federation: str, site: str, spec: GcpSpec, groups: dict[str, NodeGroup], ray_address: str | None = None,
                 credentials=None, **kw):
        super().__init__(federation, site, groups, **kw)
        self.spec, self.ray_address = spec, ray_address
        opts = ClientOptions(api_endpoint=spec.api_endpoint) if spec.api_endpoint else None
        creds = credentials or (AnonymousCredentials() if spec.api_endpoint else None)
        self.instances = compute_v1.InstancesClient(transport="rest", client_options=opts, credentials=creds)
        self.operations = compute_v1.ZoneOperationsClient(transport="rest", client_options=opts, credentials=creds)
        self.zone_of: dict[str, str] = {}

    def _call(self, fn, **kwargs):
        try:
            return fn(**kwargs, timeout=60)
        except (gexc.GoogleAPICallError, ConnectionError) as e:
            raise classify(e) from None

    def _wait(self, zone: str, op_name: str) -> None:
        """Wait for a zone operation (each `wait` call returns within about two minutes, or when done)."""
        for _ in range(30):
            op = self._call(self.operations.wait, project=self.spec.project, zone=zone, operation=op_name)
            if op.status == compute_v1.Operation.Status.DONE:
                failure = operation_failure(op)
                if failure:
                    raise failure
                return
        raise ProviderFailure(TRANSIENT, f"operation {op_name} in {zone} still not done")

    def _instances(self) -> list[Instance]:
        filt = f'labels.{TAG_FEDERATION} = "{self.federation}" AND labels.{TAG_SITE} = "{self.site}"'
        # labels are lowercased: map each back to the request id the ledger knows
        request_of = {label_value(r.id): r.id for r in self.ledger.requests(self.site)}
        out = []
        for zone in self.spec.zones:
            pager = self._call(self.instances.list, request=compute_v1.ListInstancesRequest(project=self.spec.project, zone=zone, filter=filt))
            try:
                for inst in pager:
                    if inst.status in ("STOPPING", "TERMINATED", "SUSPENDED"):
                        continue
                    self.zone_of[inst.name] = zone
                    labels = dict(inst.labels)
                    request = labels.get(TAG_REQUEST, "")
                    out.append(Instance(inst.name, labels.get(TAG_GROUP, ""), request_of.get(request, request), inst.status == "RUNNING"))
            except gexc.GoogleAPICallError as e:  # later pages are fetched lazily
                raise classify(e) from None
        return out

    def _resource(self, name: str, zone: str, group: NodeGroup, request_id: str) -> compute_v1.Instance:
        if not group.instance_type:
            raise ProviderFailure(INVALID, f"sites.{self.site}.node_groups.{group.name}.machine_type: required to insert instances")
        inst = compute_v1.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/{group.instance_type}",
            labels={k: label_value(v) for k, v in self.tags(group.name, request_id).items()},
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True,
                                           initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=IMAGE, disk_size_gb=200))],
            network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key="startup-script", value=startup_script(self.ray_address, name, group))]),
            scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=not group.spot,
                                             **({"provisioning_model": "SPOT", "instance_termination_action": "DELETE"} if group.spot else {})))
        if group.gpus_per_node:
            accel = ACCELERATORS.get(group.gpu_model or "")
            if accel is None:
                raise ProviderFailure(INVALID, f"sites.{self.site}.node_groups.{group.name}.gpu_model: {group.gpu_model!r} has no Compute "
                                               f"Engine accelerator type (known: {', '.join(sorted(ACCELERATORS))})")
            inst.guest_accelerators = [compute_v1.AcceleratorConfig(accelerator_count=group.gpus_per_node,
                                                                    accelerator_type=f"zones/{zone}/acceleratorTypes/{accel}")]
        return inst

    def _launch(self, request_id: str, group: NodeGroup, count: int, existing: list[str]) -> list[str]:
        start = len(existing)
        names = [instance_name(self.federation, self.site, request_id, start + i) for i in range(count)]
        zones = [self.zone_of[existing[0]]] if existing and existing[0] in self.zone_of else list(self.spec.zones)
        last = None
        for zone in zones:
            made = []
            try:
                for name in names:
                    self._insert(zone, name, group, request_id)
                    made.append(name)
                return names
            except ProviderFailure as f:
                if f.kind != CAPACITY:
                    raise
                last = f
                self._terminate_in(zone, made)  # the gang goes to one zone or none
        raise last

    def _insert(self, zone: str, name: str, group: NodeGroup, request_id: str) -> None:
        try:
            op = self.instances.insert(project=self.spec.project, zone=zone, instance_resource=self._resource(name, zone, group, request_id),
                                       timeout=60)
        except gexc.Conflict:
            return  # made by an earlier attempt of this request: the name is the idempotency key
        except (gexc.GoogleAPICallError, ConnectionError) as e:
            raise classify(e) from None
        self._wait(zone, op.name)
        self.zone_of[name] = zone

    def _terminate(self, ids: list[str]) -> None:
        unknown = [i for i in ids if i not in self.zone_of]
        if unknown:
            self._instances()
        by_zone: dict[str, list[str]] = {}
        for i in ids:
            if i in self.zone_of:
                by_zone.setdefault(self.zone_of[i], []).append(i)
        for zone, names in by_zone.items():
            self._terminate_in(zone, names)

    def _terminate_in(self, zone: str, names: list[str]) -> None:
        for name in names:
            try:
                op = self.instances.delete(project=self.spec.project, zone=zone, instance=name, timeout=60)
            except gexc.NotFound:
                self.zone_of.pop(name, None)
                continue
            except (gexc.GoogleAPICallError, ConnectionError) as e:
                raise classify(e) from None
            self._wait(zone, op.name)
            self.zone_of.pop(name, None)

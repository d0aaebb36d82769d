"""An IDC's GPU inventory from its Kubernetes API, and the node updates the MIG manager needs.

GPU nodes are the ones matching the provider's `node_selector`; each is matched to the node group
whose `gpu_model` its `nvidia.com/gpu.product` label names (GPU feature discovery sets it, for
example `NVIDIA-A100-SXM4-80GB`). A node counts as up when it is Ready; a cordoned one is listed
as unschedulable (its running work stays accounted for, nothing new lands on it). The fleet
is fixed: `request` is refused as data, and `release` does nothing (nodes are not ours to delete).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from federation.model import NodeGroup, Site
from providers.base import ProvidedNode, Provider, ProviderError
from providers.errors import INVALID, ProviderFailure, kind_from_status
from providers.retrying import retried

PRODUCT_LABEL, GPU, MIG_PREFIX = "nvidia.com/gpu.product", "nvidia.com/gpu", "nvidia.com/mig-"


@dataclass(frozen=True)
class GpuNode:
    name: str
    group: str | None  # None: no node group of the site has this GPU model
    product: str
    gpus: int  # allocatable whole GPUs
    mig: dict[str, int] = field(default_factory=dict)  # allocatable MIG devices by profile, e.g. {"1g.10gb": 7}
    rack: str | None = None
    ready: bool = True
    schedulable: bool = True
    labels: dict[str, str] = field(default_factory=dict)


def matches(product: str, gpu_model: str | None) -> bool:
    """`NVIDIA-A100-SXM4-80GB` is an A100-80GB: every part of the model name appears in the product."""
    if not gpu_model:
        return False
    words = set(re.split(r"[-_ ]", product.upper()))
    return all(part in words for part in gpu_model.upper().split("-"))


def classify(exc: Exception) -> ProviderFailure:
    if isinstance(exc, ApiException):
        try:  # the API server's Status object says what went wrong
            message = json.loads(exc.body)["message"]
        except (TypeError, ValueError, KeyError):
            message = exc.body or ""
        return ProviderFailure(kind_from_status(exc.status), f"{exc.status} {exc.reason}: {message}")
    return ProviderFailure(kind_from_status(None), str(exc))


def core_api(host: str | None, kubeconfig: str | None) -> k8s.CoreV1Api:
    if host:
        conf = k8s.Configuration(host=host)
        return k8s.CoreV1Api(k8s.ApiClient(conf))
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=kubeconfig))


class KubernetesInventory(Provider):
    def __init__(self, site: Site, api: k8s.CoreV1Api | None = None):
        self.site = site
        spec = site.provider
        self.selector = spec.node_selector
        self.api = api or core_api(spec.host, spec.kubeconfig)
        self._errors: list[ProviderError] = []

    def _call(self, fn, *args, **kwargs):
        def once():
            try:
                return fn(*args, **kwargs, _request_timeout=30)
            except (ApiException, HTTPError) as e:
                raise classify(e) from None
        return retried(once)

    def gpu_nodes(self) -> list[GpuNode]:
        """Every GPU node the selector picks (raises ProviderFailure)."""
        nodes = self._call(self.api.list_node, **({"label_selector": self.selector} if self.selector else {}))
        return [self._gpu_node(n) for n in nodes.items]

    def _gpu_node(self, n) -> GpuNode:
        labels = dict(n.metadata.labels or {})
        alloc = dict((n.status.allocatable if n.status else None) or {})
        product = labels.get(PRODUCT_LABEL, "")
        group = next((g for g in self.site.node_groups if matches(product, g.gpu_model)), None)
        mig = {k[len(MIG_PREFIX):]: int(v) for k, v in alloc.items() if k.startswith(MIG_PREFIX) and int(v) > 0}
        ready = any(c.type == "Ready" and c.status == "True" for c in ((n.status.conditions if n.status else None) or []))
        rack = labels.get(group.rack_label) if group and group.rack_label else None
        return GpuNode(n.metadata.name, group.name if group else None, product, int(alloc.get(GPU, 0)), mig, rack, ready,
                       not (n.spec and n.spec.unschedulable), labels)

    def list_nodes(self) -> list[ProvidedNode] | None:
        try:
            found = self.gpu_nodes()
        except ProviderFailure as f:
            self._errors.append(ProviderError("-", f.kind, f"cannot list the GPU nodes of {self.site.name}: {f.message}"))
            return None
        for n in found:
            if n.group is None:
                self._errors.append(ProviderError("-", INVALID, f"node {n.name}: GPU product {n.product!r} matches no node group of "
                                                              f"{self.site.name} (set a node group's gpu_model to it)"))
        return [ProvidedNode(n.name, self.site.name, n.group, "", n.schedulable, n.rack) for n in found if n.group and n.ready]

    def request(self, request_id: str, group: NodeGroup, count: int) -> None:
        self._errors.append(ProviderError(request_id, INVALID, f"{self.site.name} is a fixed Kubernetes fleet; it cannot add nodes"))

    def release(self, names: list[str]) -> None:
        """Fixed nodes are never given back."""

    def errors(self) -> list[ProviderError]:
        out, self._errors = self._errors, []
        return out

    # ---- node updates (MIG manager) ----

    def cordon(self, name: str, cordoned: bool = True) -> None:
        self._call(self.api.patch_node, name, {"spec": {"unschedulable": cordoned or None}})

    def set_labels(self, name: str, labels: dict[str, str | None]) -> None:
        """Set labels (a value of None removes the label), as a strategic-merge patch."""
        self._call(self.api.patch_node, name, {"metadata": {"labels": labels}})

    def node(self, name: str) -> GpuNode:
        return self._gpu_node(self._call(self.api.read_node, name))

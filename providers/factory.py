"""The provider for each site, as its config says: the one place that knows every provider kind.

- `aws`: boto3 (`Ec2Provider`), or Terraform when `provider.terraform_dir` is set;
- `gcp`: google-cloud-compute (`GceProvider`), or Terraform likewise;
- `kubernetes` (an IDC): the fixed inventory from its API server (`KubernetesInventory`);
- `local` and `simulated` sites have none here (`fedctl up` starts local ones; the simulator
  models its own).

Cloud providers share the controller's request ledger, so idempotency and reconciliation
survive a restart.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from federation.errors import FederationError
from federation.model import Federation, Site
from federation.store import RequestLedger
from providers.base import Provider

RAY_GCS_PORT = 6379
KINDS = ("aws", "gcp", "kubernetes")  # the provider kinds build_provider makes a provider for


def ray_gcs_address(site: Site) -> str:
    """Where a new node joins the site's Ray cluster: the head's host at Ray's GCS port."""
    host = urlparse(site.ray_address).hostname if site.ray_address else None
    if not host:
        raise FederationError(f"sites.{site.name}.ray_address: required for a burst site (new nodes join that Ray cluster)")
    return f"{host}:{RAY_GCS_PORT}"


def module_dir(fed: Federation, site: Site, terraform_dir: str) -> Path:
    """`terraform_dir` as given, relative to the working directory or else to the config file."""
    for base in (Path.cwd(), Path(fed.source).resolve().parent):
        path = (base / terraform_dir).resolve()
        if path.is_dir():
            return path
    raise FederationError(f"sites.{site.name}.provider.terraform_dir: {terraform_dir!r} is not a directory "
                          "(give a path relative to the working directory or to the config file)")


def terraform_variables(fed: Federation, site: Site) -> dict:
    spec = site.provider
    common = {"federation": fed.name, "site": site.name}
    groups = [g for g in site.node_groups if g.elastic]
    if spec.kind == "aws":
        c = spec.cluster
        cluster = ({"head": {"enabled": True, "instance_type": c.head_instance_type, "public_ip": c.head_public_ip},
                    "zones": list(c.zones), "controller_cidrs": list(c.controller_cidrs), "instance_profile_name": c.instance_profile}
                   if c else {"head": {"enabled": False}, "ray_address": ray_gcs_address(site)})
        return {**common, **cluster, "region": spec.region, "endpoint": spec.endpoint_url, "vpc_id": spec.vpc_id,
                "subnet_ids": list(spec.subnet_ids), "ray_auth_token_parameter": spec.ray_auth_token_parameter,
                **({"launch_template_name": spec.launch_template} if spec.launch_template else {}),
                **({"ami_id": spec.image_id} if spec.image_id else {}),
                "node_groups": {g.name: {"instance_type": g.instance_type, "spot": g.spot, "gpus": g.gpus_per_node,
                                         "cpus": g.node_resources.cpu_milli // 1000} for g in groups}}
    from providers.gcp import ACCELERATORS

    c = spec.cluster
    cluster = ({"head": {"enabled": True, "machine_type": c.head_machine_type, "public_ip": c.head_public_ip},
                "controller_cidrs": list(c.controller_cidrs), "service_account": c.service_account}
               if c else {"head": {"enabled": False}, "ray_address": ray_gcs_address(site)})
    return {**common, **cluster, "project": spec.project, "zones": list(spec.zones), "ray_auth_token_secret": spec.ray_auth_token_secret,
            **({"image": spec.image} if spec.image else {}), **({"network": spec.network} if spec.network else {}),
            "node_groups": {g.name: {"machine_type": g.instance_type, "accelerator_type": ACCELERATORS.get(g.gpu_model or "", ""),
                                     "spot": g.spot, "gpus": g.gpus_per_node, "cpus": g.node_resources.cpu_milli // 1000} for g in groups}}


def terraform_work_dir(state: Path) -> Path:
    """Where the Terraform working copies (and states) of the sites live: beside the controller's
    journal, one directory per site."""
    return state.parent / f"{state.name}.terraform"


def cluster_provider(fed: Federation, site: Site, state: Path):
    """The Terraform provider of a site whose whole Ray cluster the module makes (`fedctl site up`)."""
    spec = site.provider
    if getattr(spec, "kind", None) not in ("aws", "gcp") or spec.cluster is None:
        raise FederationError(f"sites.{site.name}.provider.cluster: not set, so the site's Ray cluster is not the federation's to "
                              "bring up or down (only an aws or gcp site with provider.terraform_dir and provider.cluster is)")
    return build_provider(fed, site, RequestLedger(state), terraform_work_dir(state))


def cluster_jobs_api(state: Path, site: Site):
    """Where a cluster site's Jobs API is now (None while its cluster is down), for its RaySite:
    read from its Terraform state, so a cluster brought up or down later is followed."""
    from providers.terraform import JobsApiOf

    return JobsApiOf(terraform_work_dir(state).resolve() / site.name)


def build_provider(fed: Federation, site: Site, ledger: RequestLedger, work_dir: Path) -> Provider | None:
    """The provider for `site`; `work_dir` holds its Terraform working copy, if it has one."""
    spec = site.provider
    kind = getattr(spec, "kind", None)
    groups = {g.name: g for g in site.node_groups}
    if kind in ("aws", "gcp") and spec.terraform_dir:
        from providers.terraform import TerraformProvider

        return TerraformProvider(fed.name, site.name, module_dir(fed, site, spec.terraform_dir), work_dir / site.name, groups,
                                 terraform_variables(fed, site), ledger=ledger)
    if kind == "aws":
        from providers.aws import Ec2Provider

        return Ec2Provider(fed.name, site.name, spec, groups, ledger=ledger)
    if kind == "gcp":
        from providers.gcp import GceProvider

        return GceProvider(fed.name, site.name, spec, groups, ray_address=site.ray_address, ledger=ledger)
    if kind == "kubernetes":
        from providers.kubernetes import KubernetesInventory

        return KubernetesInventory(site)
    return None

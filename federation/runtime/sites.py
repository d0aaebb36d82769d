"""A site's Ray cluster, reached through Ray's own job client: the only place that talks to it.

Errors are classified once here: a site that cannot be reached raises SiteUnavailable, which the
controller records and retries next cycle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import requests

from federation.errors import FederationError
from federation.runtime.localray import ray_headers
from federation.runtime.packages import PROTOCOL
from federation.runtime.pinning import entrypoint_options, joined_nodes, node_resource

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class SiteUnavailable(FederationError):
    """The site cannot be reached now (or answered 5xx): the next cycle tries again."""


class SiteRejected(FederationError):
    """The site's Ray cluster refused the job for good (a 4xx): trying again would not help."""


class RaySite:
    """`address`, or for a site whose cluster the federation makes and takes down, `locate`: where
    its Jobs API is now (None while it is down), asked on every call."""

    def __init__(self, name: str, address: str | None, locate: Callable[[], str | None] | None = None):
        self.name, self._address, self._locate = name, address, locate
        self._client, self._client_at = None, None

    @property
    def address(self) -> str:
        found = self._address or (self._locate() if self._locate else None)
        if not found:
            raise SiteUnavailable(f"site {self.name}: its Ray cluster is down; its next scale-up brings it up "
                                  f"(or `fedctl site up {self.name}`)")
        return found

    @property
    def client(self):
        address = self.address
        if self._client is None or self._client_at != address:  # a cluster brought up again has a new head
            from ray.job_submission import JobSubmissionClient

            try:
                self._client, self._client_at = JobSubmissionClient(address), address
            except (ConnectionError, RuntimeError) as e:
                raise SiteUnavailable(f"site {self.name}: cannot reach its Ray cluster at {address}: {e}") from None
        return self._client

    def submit(self, dispatch_id: str, entrypoint: str, runtime_env: dict, allocation: dict, metadata: dict | None = None) -> None:
        """Start the job at the site; a dispatch id the site already has is not started again. The
        user's metadata goes along (the site's dashboard shows the job's queue), with the
        federation's job id under `federation-job`."""
        env = dict(runtime_env or {})
        env["env_vars"] = {**env.get("env_vars", {}), "FEDERATION_ALLOCATION": json.dumps(allocation), "FEDERATION_JOB_ID": allocation["job"]}
        meta = {**{str(k): str(v) for k, v in (metadata or {}).items()}, "federation-job": allocation["job"]}
        self._submit(entrypoint=entrypoint, submission_id=dispatch_id, runtime_env=env, metadata=meta, **entrypoint_options(allocation))

    def _submit(self, **kwargs) -> None:
        try:
            self.client.submit_job(**kwargs)
        except RuntimeError as e:
            if "already exists" in str(e):
                return  # dispatched before a restart: idempotent by dispatch id
            if re.search(r"status code 4\d\d", str(e)):
                raise SiteRejected(f"site {self.name} refused the job: {str(e)[-500:]}") from None
            raise SiteUnavailable(f"site {self.name}: submit failed: {e}") from None
        except ConnectionError as e:
            raise SiteUnavailable(f"site {self.name}: {e}") from None

    def run_on_node(self, dispatch_id: str, node: str, entrypoint: str, runtime_env: dict | None = None) -> None:
        """Run a federation job (the MIG agent) on one node, by its `federation-node/<name>` resource."""
        self._submit(entrypoint=entrypoint, submission_id=dispatch_id, runtime_env=runtime_env, entrypoint_num_cpus=0,
                     entrypoint_resources={node_resource(node): 0.001}, metadata={"federation-task": "mig"})

    def has_package(self, name: str) -> bool:
        """Whether the site's cluster holds an uploaded runtime_env package (Ray's own REST path)."""
        try:
            return requests.get(f"{self.address}/api/packages/{PROTOCOL}/{name}", headers=ray_headers(), timeout=30).status_code == 200
        except requests.RequestException as e:
            raise SiteUnavailable(f"site {self.name}: cannot ask it for package {name}: {e}") from None

    def put_package(self, name: str, data: bytes) -> None:
        """Hand an uploaded runtime_env package to the site's cluster, as Ray's job client does.
        Plain bytes in: this call crosses an actor boundary, so it takes nothing unpicklable."""
        try:
            r = requests.put(f"{self.address}/api/packages/{PROTOCOL}/{name}", data=data, headers=ray_headers(), timeout=300)
        except requests.RequestException as e:
            raise SiteUnavailable(f"site {self.name}: cannot hand it package {name}: {e}") from None
        if r.status_code != 200:
            raise SiteUnavailable(f"site {self.name}: package {name} upload failed ({r.status_code}): {r.text[-300:]}")

    def joined(self) -> set[str] | None:
        """The federation nodes that have joined this site's Ray cluster (None: it cannot be asked now)."""
        try:
            address = self.address
        except SiteUnavailable:
            return None
        return joined_nodes(address, ray_headers())

    def answers(self) -> bool:
        """Whether the site's Jobs API answers now (the dashboard's /api/version)."""
        try:
            return requests.get(f"{self.address}/api/version", headers=ray_headers(), timeout=3).status_code == 200
        except (SiteUnavailable, requests.RequestException):
            return False

    def status(self, dispatch_id: str) -> str | None:
        try:
            return str(self.client.get_job_status(dispatch_id).value)
        except RuntimeError as e:
            if "does not exist" in str(e):
                return None
            raise SiteUnavailable(f"site {self.name}: {e}") from None
        except ConnectionError as e:
            raise SiteUnavailable(f"site {self.name}: {e}") from None

    def logs(self, dispatch_id: str) -> str:
        try:
            return self.client.get_job_logs(dispatch_id)
        except (RuntimeError, ConnectionError):
            return ""

    def stop(self, dispatch_id: str) -> None:
        """Stop the job at the site; one the site never got has nothing to stop."""
        try:
            self.client.stop_job(dispatch_id)
        except RuntimeError as e:
            if "does not exist" in str(e):
                return
            raise SiteUnavailable(f"site {self.name}: stop failed: {e}") from None
        except ConnectionError as e:
            raise SiteUnavailable(f"site {self.name}: stop failed: {e}") from None

"""The interface every site kind's provider implements, and the shared logic of cloud providers.

Contract (the shape of Ray autoscaler v2's cloud interface):
- `request(request_id, group, count)` asks for capacity and returns at once; it is idempotent
  per request id (asking twice with one id starts the nodes once).
- `list_nodes()` reports the nodes that are up and can hold work, each with the request that
  made it; capacity that never arrives simply never shows up here (the caller times it out).
  None means the provider could not list now (the error is in `errors()`): not "no nodes".
- `release(names)` gives nodes back; releasing a node that is gone is not an error.
- Problems come back as data (`errors()`), classified once at this edge, never as exceptions
  in the controller's loop.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from federation.model import NodeGroup
from federation.store import CloudRequest, RequestLedger
from providers.errors import ProviderFailure
from providers.retrying import retried

log = logging.getLogger("federation.providers")

#: Tag (AWS) or label (GCP) keys on every instance the federation creates (CONTRACTS.md s.6).
TAG_FEDERATION, TAG_SITE, TAG_GROUP, TAG_REQUEST = "federation", "federation-site", "federation-group", "federation-request"


def machine_name(raw: str) -> str:
    """A valid, deterministic machine name (RFC 1035: lowercase, at most 63 characters), as
    Compute Engine requires; long names keep a hash of the whole so they stay distinct."""
    name = re.sub(r"[^a-z0-9-]", "-", raw.lower())
    if len(name) > 63 or not name[0].isalpha():
        name = f"f{hashlib.sha1(name.encode()).hexdigest()[:12]}-{name[-48:]}"
    return name.strip("-")


@dataclass(frozen=True)
class ProvidedNode:
    name: str
    site: str
    group: str
    request_id: str
    schedulable: bool = True  # False while cordoned: its running work stays, nothing new lands
    rack: str | None = None  # as the inventory labels it (Kubernetes: the group's rack_label); None: the group's own


@dataclass(frozen=True)
class ProviderError:
    request_id: str
    kind: str  # Transient | Capacity | Quota | Auth | InvalidRequest
    message: str


@dataclass(frozen=True)
class Instance:
    """A cloud machine as the provider's own listing shows it."""

    id: str
    group: str
    request_id: str
    ready: bool  # running (not pending, stopping or gone)


class Provider(ABC):
    #: machines outlive the controller and are journaled in the request ledger (cloud providers)
    durable = False

    @abstractmethod
    def request(self, request_id: str, group: NodeGroup, count: int) -> None: ...

    @abstractmethod
    def list_nodes(self) -> list[ProvidedNode] | None: ...

    @abstractmethod
    def release(self, names: list[str]) -> None: ...

    def errors(self) -> list[ProviderError]:
        return []

    def reconcile(self) -> list[str]:
        """Bring the cloud in line with the ledger; returns what was done, one line per action."""
        return []

    def cancel(self, request_id: str) -> None:
        """Give up on a request (timed out, or no longer needed): release what it made."""
        self.release([n.name for n in self.list_nodes() or [] if n.request_id == request_id])

    def head_up(self) -> bool:
        """Whether the site's own Ray cluster, where this provider makes one, is up."""
        return False

    def teardown(self) -> None:  # noqa: B027 - only providers that make a site's whole cluster have one to take down
        """Take the site's cluster down (in the background)."""

    def close(self) -> None:  # noqa: B027 - most providers have no background work
        """Stop background work; cloud machines stay as they are."""


class CloudProvider(Provider):
    """Ledger-backed idempotency, retries and reconciliation for AWS, GCP and Terraform.

    A request is for its node group only: when the cloud has no capacity (or quota) for it, the
    request fails as data, and the decision cycle blocks that option and picks the next one (the
    group's `fallback` first), as the simulator shows it.

    A subclass says how to list its tagged instances, launch some for a request, and terminate
    some; this class decides when. Requests run on one background thread, in order, so that
    `request` returns at once and two launches for one site never race.
    """

    durable = True

    def __init__(self, federation: str, site: str, groups: dict[str, NodeGroup], ledger: RequestLedger | None = None,
                 clock: Callable[[], float] = time.time):
        self.federation, self.site, self.groups, self.clock = federation, site, groups, clock
        self.ledger = ledger or RequestLedger()
        self._errors: list[ProviderError] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"provider-{site}")
        self.pending: dict[str, Future] = {}

    # ---- what a cloud says ----

    @abstractmethod
    def _instances(self) -> list[Instance]:
        """Every live instance tagged for this federation and site (raises ProviderFailure)."""

    @abstractmethod
    def _launch(self, request_id: str, group: NodeGroup, count: int, existing: list[str]) -> list[str]:
        """Start `count` more instances for the request (`existing` are up already); returns their ids."""

    @abstractmethod
    def _terminate(self, ids: list[str]) -> None: ...

    # ---- the interface ----

    def tags(self, group: str, request_id: str) -> dict[str, str]:
        return {TAG_FEDERATION: self.federation, TAG_SITE: self.site, TAG_GROUP: group, TAG_REQUEST: request_id}

    def request(self, request_id: str, group: NodeGroup, count: int) -> None:
        stored = self.ledger.record(CloudRequest(request_id, self.site, group.name, count, self.clock()))
        if stored.state != "REQUESTED" or request_id in self.pending:
            return
        self.pending[request_id] = self._pool.submit(self._fulfil, stored)

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the requests made so far have been sent (tests and smoke checks)."""
        for f in list(self.pending.values()):
            f.result(timeout_s)

    def _fulfil(self, req: CloudRequest) -> None:
        try:
            group = self.groups[req.group]
            ids = retried(lambda: self._attempt(req, group))
            with self._lock:  # against a cancel() at this very moment
                cancelled = self.ledger.get(req.id).state != "REQUESTED"
                if not cancelled:
                    self.ledger.update(req.id, state="DELIVERED", nodes=ids)
            if cancelled:
                self._undo(req.id)
                return
            log.info("%s: request %s delivered %s", self.site, req.id, ids)
        except ProviderFailure as f:
            self.ledger.update(req.id, state="FAILED")
            self._undo(req.id)
            with self._lock:
                self._errors.append(ProviderError(req.id, f.kind, f.message))
            log.warning("%s: request %s failed: %s", self.site, req.id, f)
        finally:
            self.pending.pop(req.id, None)

    def _attempt(self, req: CloudRequest, group: NodeGroup) -> list[str]:
        # Each attempt first adopts what earlier attempts of this request made (found by its tag),
        # so a retry after a lost response, or a restart mid scale-up, never launches twice.
        ids = [i.id for i in self._instances() if i.request_id == req.id]
        missing = req.count - len(ids)
        return ids + (self._launch(req.id, group, missing, ids) if missing > 0 else [])

    def _undo(self, request_id: str) -> None:
        """A failed request keeps nothing: a gang cannot use part of its nodes, and they cost money."""
        try:
            partial = [i.id for i in retried(self._instances) if i.request_id == request_id]
        except ProviderFailure:
            return  # the next reconcile terminates them: their request is no longer live
        self.release(partial)

    def list_nodes(self) -> list[ProvidedNode] | None:
        try:
            found = retried(self._instances)
        except ProviderFailure as f:
            with self._lock:
                self._errors.append(ProviderError("-", f.kind, f"cannot list {self.site}: {f.message}"))
            return None
        return [ProvidedNode(i.id, self.site, i.group, i.request_id) for i in found if i.ready]

    def release(self, names: list[str]) -> None:
        if not names:
            return
        try:
            retried(lambda: self._terminate(list(names)))
            log.info("%s: released %s", self.site, names)
            self._settle(retried(self._instances))
        except ProviderFailure as f:
            with self._lock:
                self._errors.append(ProviderError("-", f.kind, f"cannot release {names}: {f.message}"))

    def cancel(self, request_id: str) -> None:
        """Give up on a request (timed out, or no longer needed): nothing it made or will make is kept."""
        stored = self.ledger.get(request_id)
        if stored is None:
            return
        with self._lock:
            in_flight = stored.state == "REQUESTED" and request_id in self.pending
            self.ledger.update(request_id, state="CANCELLED")
        if not in_flight:  # a launch in flight undoes itself when it returns
            self._undo(request_id)

    def _settle(self, live: list[Instance]) -> None:
        """A delivered request none of whose machines is left (released, or spot-interrupted) is over."""
        left = {i.request_id for i in live}
        for r in self.ledger.requests(self.site, {"DELIVERED"}):
            if r.id not in left:
                self.ledger.update(r.id, state="RELEASED")

    def errors(self) -> list[ProviderError]:
        with self._lock:
            out, self._errors = self._errors, []
        return out

    def machines(self, request_id: str) -> list[str]:
        """Every live machine of a request, booting ones included (raises ProviderFailure)."""
        return [i.id for i in retried(self._instances) if i.request_id == request_id]

    def reconcile(self) -> list[str]:
        """Adopt instances whose request the ledger knows; terminate the others (no leaks)."""
        try:
            found = retried(self._instances)
        except ProviderFailure as f:
            return [f"{self.site}: cannot reconcile: {f}"]
        known = {r.id for r in self.ledger.requests(self.site, {"REQUESTED", "DELIVERED"})}
        orphans = [i.id for i in found if i.request_id not in known]
        actions = [f"{self.site}: adopted {i.id} (request {i.request_id})" for i in found if i.request_id in known]
        if orphans:
            self.release(orphans)
            actions += [f"{self.site}: terminated {i} (tagged for {self.federation}, unknown to the ledger)" for i in orphans]
        self._settle([i for i in found if i.request_id in known])
        for a in actions:
            log.info(a)
        return actions

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)

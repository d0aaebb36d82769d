"""The controller on Ray: thin actor shells around the plain classes, which are tested without Ray.

- a site actor per site hosts its `RaySite` (dispatch, status, logs, stop) and its provider, if it
  has one (inventory, scale-out, scale-in);
- a MIG manager actor per site with MIG groups hosts its `LiveMig`;
- one queue controller actor hosts the `Controller`, its cycle loop and the Ray Jobs API.

Each actor restarts when it dies (`max_restarts=-1`) by building its objects again with the same
factories, which read the durable store: nothing an actor held in memory is needed to go on. The
actors are pinned to the node `fedctl up` runs on, where the store and the config are; they take
no CPU from that node, so jobs' drivers and tasks keep it.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from pathlib import Path

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from federation import logs
from federation.model import Federation
from federation.runtime.api import Serving
from federation.runtime.controller import Controller
from federation.runtime.mig import live_mig
from federation.runtime.sites import RaySite, SiteUnavailable
from federation.store import RequestLedger, Store
from providers.factory import KINDS, build_provider, cluster_jobs_api, terraform_work_dir

CALL_TIMEOUT_S = 300.0  # the longest one call may take: a Terraform apply is the slowest


class Host:
    """Named plain objects built here by their factories, and called by name from elsewhere."""

    def __init__(self, cwd: str, parts: dict[str, tuple[Callable, tuple]]):
        os.chdir(cwd)  # relative paths in the config mean what they mean to `fedctl up`
        self.parts = {name: factory(*args) for name, (factory, args) in parts.items()}

    def describe(self, part: str) -> tuple[list[str], dict]:
        """The part's public methods, and its plain public values (fixed once it is built)."""
        members = inspect.getmembers_static(self.parts[part])
        methods = [n for n, v in members if not n.startswith("_") and inspect.isfunction(v)]
        values = {n: v for n, v in members if not n.startswith("_") and isinstance(v, bool | int | float | str)}
        return methods, values

    def call(self, part: str, method: str, *args, **kwargs):
        return getattr(self.parts[part], method)(*args, **kwargs)


class Remote:
    """A part hosted in an actor, used as if it were here: a method call is a Ray call waited on;
    the part's own errors are raised as they are, an actor that does not answer (dead, or
    restarting) raises SiteUnavailable, which the controller retries next cycle."""

    def __init__(self, handle, part: str, label: str):
        self._handle, self._part, self._label = handle, part, label
        self._methods, self._values = ray.get(handle.describe.remote(part), timeout=CALL_TIMEOUT_S)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        if name not in self._methods:
            raise AttributeError(f"{self._label} has no {name}")

        def call(*args, **kwargs):
            try:
                return ray.get(self._handle.call.remote(self._part, name, *args, **kwargs), timeout=CALL_TIMEOUT_S)
            except RayTaskError as e:
                raise e.cause from None
            except (RayActorError, ActorUnavailableError, GetTimeoutError) as e:
                raise SiteUnavailable(f"{self._label}: its actor did not answer {name} ({type(e).__name__}); the next cycle tries again") from None

        return call


def _provider(fed: Federation, site: str, state: str, terraform_dir: str):
    _log_to_file(state)  # built in the site actor's process: its provider's records go to the same log
    return build_provider(fed, fed.site(site), RequestLedger(state), Path(terraform_dir))


def log_path(state: str | Path) -> Path:
    """Where the actors write their log: beside the store, so it outlives their restarts."""
    return Path(f"{state}.log")


def _log_to_file(state: str) -> None:
    """The actors' log records go to `log_path(state)`, which `fedctl up` follows. (Ray forwards
    actors' prints from each raylet's log monitor, so on one machine with several Ray nodes
    every line would arrive once per node.)"""
    logs.to_file(log_path(state))


def _site(name: str):
    return ray.get_actor(f"site-{name}")


def _mig(fed: Federation, site: str, state: str, inventory: bool):
    label, actor = f"site {site}", _site(site)
    _log_to_file(state)
    return live_mig(fed, site, Store(state), Remote(actor, "ray", label), Remote(actor, "provider", label) if inventory else None)


HostActor = ray.remote(Host)


class QueueController:
    """The federated queue controller: the pure core's cycle every `cycle_s` and on submissions,
    and the API, in this actor's process."""

    def __init__(self, cwd: str, fed: Federation, state: str, sites: list[str], providers: list[str], inventories: list[str],
                 migs: list[str], host: str, port: int, cycle_s: float, tokens: dict | None):
        os.chdir(cwd)

        def remote(names, part):  # the actors by name: after a restart of either, the name still finds it
            return {n: Remote(_site(n), part, f"site {n}") for n in names}

        _log_to_file(state)
        ctl = Controller(fed, Store(state), remote(sites, "ray"), providers=remote(providers, "provider"),
                         inventories=remote(inventories, "provider"), ledger=RequestLedger(state),
                         mig={n: Remote(ray.get_actor(f"mig-{n}"), "mig", f"MIG manager of {n}") for n in migs})
        self.serving = Serving(ctl, host, port, cycle_s, tokens)

    def url(self) -> str:
        return self.serving.url


QueueControllerActor = ray.remote(QueueController)


def _clear(name: str, timeout_s: float = 60.0) -> None:
    """Make way for a named actor: one left by a driver that was killed (in a cluster adopted
    after `fedctl up` died) lives on until Ray notices its owner is gone; end it now."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.kill(ray.get_actor(name), no_restart=True)
        except ValueError:  # no such actor: the name is free
            return
        time.sleep(0.2)
    raise SiteUnavailable(f"the Ray actor {name!r} from an earlier run would not go away in {timeout_s:g} s")


def _options(name: str, concurrency: int) -> dict:
    _clear(name)
    here = ray.get_runtime_context().get_node_id()
    return {"name": name, "max_restarts": -1, "num_cpus": 0, "max_concurrency": concurrency,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(here, soft=False)}


def start_actors(fed: Federation, state: Path, site_parts: dict[str, dict[str, tuple[Callable, tuple]]], host: str, port: int,
                 cycle_s: float, tokens: dict | None) -> tuple[str, dict, list]:
    """The site, MIG manager and queue controller actors, on the Ray cluster this process is
    connected to; `site_parts` are each site's factories (`ray`, and `provider` if it has one).
    Returns the API's URL, the site actors by site, and the other actors."""
    cwd, path = os.getcwd(), str(state.resolve())
    sites = {n: HostActor.options(**_options(f"site-{n}", 8)).remote(cwd, parts) for n, parts in site_parts.items()}
    migs = {}
    for s in fed.sites:
        if s.name in sites and any(g.mig_enabled for g in s.node_groups):
            inventory = "provider" in site_parts[s.name] and not s.is_cloud
            migs[s.name] = HostActor.options(**_options(f"mig-{s.name}", 2)).remote(cwd, {"mig": (_mig, (fed, s.name, path, inventory))})
    providers = [n for n, p in site_parts.items() if "provider" in p and fed.site(n).is_cloud]
    inventories = [n for n, p in site_parts.items() if "provider" in p and not fed.site(n).is_cloud]
    ctl = QueueControllerActor.options(**_options("queue-controller", 4)).remote(
        cwd, fed, path, list(sites), providers, inventories, list(migs), host, port, cycle_s, tokens)
    return ray.get(ctl.url.remote(), timeout=CALL_TIMEOUT_S), sites, [*migs.values(), ctl]


def site_parts(fed: Federation, state: Path, address: dict[str, str | None], local_provider: dict[str, tuple]) -> dict[str, dict]:
    """Each connected site's factories: its Ray cluster at `address[site]` (None: a cluster the
    federation makes, found where its Terraform state says), and its provider: a local one from
    `local_provider[site]` (LocalProvider's arguments), or the config's."""
    from providers.local import LocalProvider

    out = {}
    for name, addr in address.items():
        locate = cluster_jobs_api(state, fed.site(name)) if addr is None else None
        parts: dict[str, tuple[Callable, tuple]] = {"ray": (RaySite, (name, addr, locate))}
        kind = getattr(fed.site(name).provider, "kind", None)
        if name in local_provider:
            parts["provider"] = (LocalProvider, local_provider[name])
        elif kind in KINDS:
            parts["provider"] = (_provider, (fed, name, str(state.resolve()), str(terraform_work_dir(state).resolve())))
        out[name] = parts
    return out

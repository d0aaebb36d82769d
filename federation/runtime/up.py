"""`fedctl up`: a local Ray cluster (with the local sites' nodes, when the config has any), the
controller's actors on it, and the API they serve."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray

from federation.errors import FederationError
from federation.inventory import config_nodes
from federation.model import Federation
from federation.runtime.access import load_tokens, subtrees
from federation.runtime.actors import log_path, site_parts, start_actors
from federation.runtime.localray import LocalCluster, start_local_ray
from providers.factory import cluster_jobs_api

CLUSTER_CHECK_S = 5.0  # how often `fedctl up` checks that its Ray cluster is still there


@dataclass
class Up:
    url: str
    cluster: LocalCluster  # the local Ray cluster the controller runs on
    providers: list = field(repr=False)  # the site actors that host a provider
    actors: list = field(repr=False)
    burst: dict[str, LocalCluster] = field(default_factory=dict)  # a local burst site's own Ray cluster

    @property
    def dashboard(self) -> str:
        return self.cluster.dashboard

    @property
    def env(self) -> dict:  # to run `ray` against the local cluster
        return self.cluster.env

    def close(self) -> None:
        """Stop the actors (providers first: local burst workers go with them) and the local Ray
        cluster: its processes alone, never another Ray cluster on this host."""
        for a in self.providers:
            try:
                ray.get(a.call.remote("provider", "close"), timeout=120)
            except ray.exceptions.RayError:
                pass  # already gone: nothing of it to stop
        for a in self.actors:
            ray.kill(a, no_restart=True)
        ray.shutdown()
        for c in self.burst.values():
            c.stop()
        self.cluster.stop()


def start(fed: Federation, state: Path, cycle_s: float, listen: str, tokens: dict[str, str] | None, log) -> Up:
    """Everything `fedctl up` runs; `tokens` as `load_tokens` reads them (None: no auth)."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise FederationError(f"api.listen: {listen!r} is not HOST:PORT")
    local = [s for s in fed.sites if s.kind == "local" and not s.ray_address]
    # the controller runs on this cluster even when every site is a remote one (then it is a head only)
    fixed = config_nodes(fed, [s.name for s in local])
    # named after the state file: a `fedctl up` that was killed left its cluster (and the jobs on
    # it) running, and the next one with the same state adopts it instead of starting a second
    cluster = start_local_ray(fixed, key=str(state.resolve()), log=log)
    dashboard, gcs = cluster.dashboard, cluster.gcs
    fixed_sites = [s for s in local if not s.is_cloud]
    if fixed_sites:
        log(f"local Ray cluster at {dashboard}: {len(fixed)} node(s), {sum(n.gpus for n in fixed)} logical GPUs, "
            f"for {', '.join(s.name for s in fixed_sites)}")
    burst: dict[str, LocalCluster] = {}
    try:
        # A local burst site is a Ray cluster of its own, as a cloud site's is: a head here, and
        # worker nodes started on demand. It shares the federation's Ray token (its clients hold one).
        for s in local:
            if s.is_cloud:
                burst[s.name] = start_local_ray((), key=f"{state.resolve()}#{s.name}", log=log, token_of=cluster)
                log(f"local Ray cluster at {burst[s.name].dashboard} for burst site {s.name} (its nodes start on demand)")
        cluster.use()
        # the actors' log is a file `run_up` follows (see actors._log), not their forwarded prints
        ray.init(address=gcs, namespace=f"federation-{fed.name}", logging_level="WARNING", log_to_driver=False)
        address = ({s.name: dashboard for s in fixed_sites} | {n: c.dashboard for n, c in burst.items()}
                   | {s.name: None for s in fed.sites if s.cluster is not None} | {s.name: s.ray_address for s in fed.sites if s.ray_address})
        for s in fed.sites:
            if s.cluster is not None and not s.ray_address:
                where = cluster_jobs_api(state, s)()
                log(f"site {s.name}: its cluster is {f'up, Jobs API at {where}' if where else 'down'}; it comes up with its first "
                    f"scale-up and goes down after {fed.policies.burst.scale_in_idle_s:g} s with nothing there")
        # a local burst site's "cloud nodes" are Ray workers started on this machine on demand, in its cluster
        workers = {n: (n, c, getattr(fed.site(n).provider, "start_delay_s", 0.0)) for n, c in burst.items()}
        parts = site_parts(fed, state, address, workers)
        url, sites, others = start_actors(fed, state, parts, host or "127.0.0.1", int(port), cycle_s, tokens)
    except BaseException:
        ray.shutdown()
        for c in burst.values():
            c.stop()
        cluster.stop()
        raise
    return Up(url, cluster, [a for n, a in sites.items() if "provider" in parts[n]], [*sites.values(), *others], burst)


def run_up(fed: Federation, state: Path, cycle_s: float, log) -> None:
    up = start(fed, state, cycle_s, fed.api.listen, load_tokens(fed.api.tokens_file, subtrees(fed)), log)
    log(f"federation {fed.name!r} is serving the Ray Jobs API at {up.url} (its controller runs as Ray actors on {up.dashboard})")
    log(f"  submit: ray job submit --address {up.url} --metadata-json '{{\"queue\": \"{fed.leaf_queues[0]}\"}}' -- python -c \"print('hi')\"")

    def on_term(*_):
        raise KeyboardInterrupt  # stop cleanly on SIGTERM too, so the Ray cluster we started is stopped

    signal.signal(signal.SIGTERM, on_term)
    try:
        with open(log_path(state.resolve()), "a+", encoding="utf-8") as f:
            f.seek(0, 2)  # from now on: what an earlier run logged is in the file
            checked = time.monotonic()
            while True:
                for line in f.readlines():
                    log(line.rstrip("\n"))
                time.sleep(0.5)
                if time.monotonic() - checked >= CLUSTER_CHECK_S:
                    checked = time.monotonic()
                    if not up.cluster.alive():
                        raise FederationError(f"the federation's Ray cluster at {up.dashboard} stopped answering; the controller "
                                              "ran on it. Start fedctl up again (it starts a new cluster; the journal keeps every job)")
    except KeyboardInterrupt:
        log("stopping")
    finally:
        up.close()

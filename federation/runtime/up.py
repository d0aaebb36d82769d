"""`fedctl up`: a local Ray cluster for the local sites (when none is given), the controller and the API."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

from federation.errors import FederationError
from federation.model import Federation
from federation.runtime.api import load_tokens, serve
from federation.runtime.controller import Controller, config_nodes
from federation.runtime.localray import ray_cli, start_local_ray
from federation.runtime.sites import RaySite
from federation.store import RequestLedger, Store
from providers.base import Provider
from providers.factory import build_provider
from providers.local import LocalProvider


def run_up(fed: Federation, state: Path, cycle_s: float, log) -> None:
    host, _, port = fed.api.listen.rpartition(":")
    if not port.isdigit():
        raise FederationError(f"api.listen: {fed.api.listen!r} is not HOST:PORT")
    tokens = load_tokens(fed.api.tokens_file)
    sites: dict[str, RaySite] = {}
    providers: dict[str, Provider] = {}
    local = [s for s in fed.sites if s.kind == "local" and not s.ray_address]
    started_env = None
    if local:
        fixed = config_nodes(fed, [s.name for s in local])
        address, gcs, started_env = start_local_ray(fixed)
        log(f"started a local Ray cluster at {address}: {len(fixed)} node(s), {sum(n.gpus for n in fixed)} logical GPUs, "
            f"for {', '.join(s.name for s in local)}")
        for s in local:
            sites[s.name] = RaySite(s.name, address)
            if s.is_cloud:  # its "cloud nodes" are Ray workers started on this machine on demand
                delay = getattr(s.provider, "start_delay_s", 0.0)
                providers[s.name] = LocalProvider(s.name, gcs, address, delay, started_env)
    ledger = RequestLedger(state)  # cloud requests live in the same journal as the jobs
    inventories: dict[str, Provider] = {}
    for s in fed.sites:
        if s.ray_address and s.name not in sites:
            sites[s.name] = RaySite(s.name, s.ray_address)
            prov = build_provider(fed, s, ledger, state.parent / f"{state.name}.terraform")
            if prov is not None:
                (providers if s.is_cloud else inventories)[s.name] = prov
                log(f"{s.name}: {type(prov).__name__}")
    ctl = Controller(fed, Store(state), sites, providers=providers, inventories=inventories, ledger=ledger, log=log)

    async def main():
        runner = await serve(ctl, host or "127.0.0.1", int(port), cycle_s, tokens)
        log(f"federation {fed.name!r} is serving the Ray Jobs API at http://{host}:{port}")
        log(f"  submit: ray job submit --address http://{host}:{port} --metadata-json '{{\"queue\": \"{fed.leaf_queues[0]}\"}}' -- python -c \"print('hi')\"")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    def on_term(*_):
        raise KeyboardInterrupt  # stop cleanly on SIGTERM too, so the Ray cluster we started is stopped

    signal.signal(signal.SIGTERM, on_term)
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        log("stopping")
    finally:
        for p in [*providers.values(), *inventories.values()]:
            p.close()
        if started_env is not None:
            ray = ray_cli()
            subprocess.run([ray, "stop"], env=started_env, capture_output=True, timeout=120)

"""`fedctl provider check`: request a few nodes of a site, see them listed, give them back.

A smoke test an operator runs against a real account (or a test server) before trusting a site
with bursts: it exercises request, list and release through the same provider the controller
uses, and reports anything it left running.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from federation.model import NodeGroup
from providers.base import CloudProvider, Provider
from providers.errors import ProviderFailure


def check(provider: Provider, site: str, group: NodeGroup, count: int, *, timeout_s: float = 900.0, poll_s: float = 2.0,
          log: Callable[[str], None] = lambda _: None, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> tuple[dict, list[str]]:
    """Returns the report of CONTRACTS.md s.6 and the problems seen (errors as text)."""
    rid = f"check-{uuid.uuid4().hex[:8]}"
    problems: list[str] = []
    provider.request(rid, group, count)
    log(f"requested {count} node(s) of {site}/{group.name} (request {rid})")
    deadline, listed = clock() + timeout_s, []
    while True:
        listed = sorted(n.name for n in provider.list_nodes() or [] if n.request_id == rid)
        errs = provider.errors()
        problems += [f"{e.kind}: {e.message}" for e in errs]
        if len(listed) >= count or any(e.request_id == rid for e in errs) or clock() > deadline:
            break
        sleep(poll_s)
    if len(listed) < count and not problems:
        problems.append(f"only {len(listed)} of {count} node(s) were listed within {timeout_s:g} s")
    log(f"listed {listed}; releasing")
    provider.release(listed)
    provider.cancel(rid)  # anything of the request still booting goes too
    if isinstance(provider, CloudProvider):
        provider.wait(timeout_s)
    problems += [f"{e.kind}: {e.message}" for e in provider.errors()]
    try:
        left = sorted(provider.machines(rid)) if isinstance(provider, CloudProvider) else \
            sorted(n.name for n in provider.list_nodes() or [] if n.request_id == rid)
    except ProviderFailure as f:
        problems.append(f"could not list what is left: {f}")
        left = []
    if left:
        problems.append(f"left running: {left} (terminate them by hand if they stay)")
    return {"site": site, "requested": count, "listed": listed, "released": [n for n in listed if n not in left], "left_running": left}, problems

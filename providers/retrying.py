"""In-place retries for transient provider failures: bounded, exponential, jittered (tenacity).

Only `Transient` failures are retried here; capacity and quota errors go back to the burst
policy at once, so that it fails over instead of hammering an exhausted zone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from providers.errors import TRANSIENT, ProviderFailure

T = TypeVar("T")

ATTEMPTS = 5


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, ProviderFailure) and exc.kind == TRANSIENT


def retried(fn: Callable[[], T], *, attempts: int = ATTEMPTS, max_wait_s: float = 4.0) -> T:
    """Call `fn` (which raises classified `ProviderFailure`s), retrying transient ones."""
    policy = retry(retry=retry_if_exception(_transient), stop=stop_after_attempt(attempts),
                   wait=wait_random_exponential(multiplier=0.1, max=max_wait_s), reraise=True)
    return policy(fn)()

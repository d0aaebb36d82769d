"""Provider failures, classified once at the edge into the kinds the burst policy acts on.

- Transient: throttling, 5xx, connection resets. Retried in place (`providers.retrying`).
- Capacity: the cloud has no such machines now (spot or zone exhausted). Not retried in place:
  the decision cycle (`federation.cycle.BLOCKS`) blocks the group and fails over to its fallback,
  another group or site.
- Quota: an account limit. It will not clear soon: the cycle blocks the whole site for longer.
- Auth: credentials missing or refused. An operator must act.
- InvalidRequest: the request itself is wrong (unknown template, bad machine type).
"""

from __future__ import annotations

TRANSIENT, CAPACITY, QUOTA, AUTH, INVALID = "Transient", "Capacity", "Quota", "Auth", "InvalidRequest"
KINDS = (TRANSIENT, CAPACITY, QUOTA, AUTH, INVALID)


class ProviderFailure(Exception):
    def __init__(self, kind: str, message: str):
        assert kind in KINDS, kind
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


def kind_from_status(status: int | None) -> str:
    """The kind an HTTP status means when the error code alone does not say more."""
    if status is None or status == 429 or status >= 500:
        return TRANSIENT
    if status in (401, 403):
        return AUTH
    return INVALID

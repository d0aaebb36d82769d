"""Whether the controller's cycle is alive: when it last succeeded, how often it failed, and the
back-off between failed cycles. The cycle loop records each outcome here; `/metrics`,
`/api/federation/status` and `fedctl status` read it, so a cycle that keeps failing is seen."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class CycleHealth:
    started_s: float
    #: a cycle that has not succeeded for this long is stalled (about ten cycles, at least 30 s)
    stall_after_s: float = 30.0
    last_ok_s: float | None = None
    consecutive_failures: int = 0
    last_error: str | None = None
    #: errors by where they happened ("cycle", "dispatch"), since this controller started
    errors: Counter = field(default_factory=Counter)

    def ok(self, now: float) -> None:
        self.last_ok_s, self.consecutive_failures = now, 0

    def failed(self, now: float, where: str, error: str) -> None:
        self.errors[where] += 1
        self.last_error = f"{where}: {error}"
        if where == "cycle":
            self.consecutive_failures += 1

    def backoff_s(self, cycle_s: float) -> float:
        """After a failed cycle: doubling from one cycle, at most a minute (a bug that fails every
        cycle must not spin a core, and a passing fault must not stall scheduling for long)."""
        return min(60.0, cycle_s * 2 ** min(self.consecutive_failures, 16))

    def stalled(self, now: float) -> bool:
        return now - (self.last_ok_s if self.last_ok_s is not None else self.started_s) > self.stall_after_s

    def to_dict(self, now: float) -> dict:
        return {"last_cycle_s": self.last_ok_s, "stalled": self.stalled(now), "consecutive_failures": self.consecutive_failures,
                "last_error": self.last_error, "errors": dict(self.errors)}

"""When a failed run is tried again (`max_retries` on a job): one rule for the live controller,
whose site reports the run FAILED, and the simulator, whose trace says which runs fail.

The back-off is Kubernetes' for a Job's failed pods: 10 s after the first failure, doubling with
each, at most six minutes. The job waits it out queued (reason RetryBackoff) and is then
scheduled again whole, like any waiting job."""

from __future__ import annotations

BASE_S, MAX_S = 10.0, 360.0


def retry_after(failures: int, max_retries: int) -> float | None:
    """The back-off before the next run, after `failures` failed runs (the latest included), or
    None when the job has used its `max_retries` and ends failed."""
    if failures > max_retries:
        return None
    return min(MAX_S, BASE_S * 2 ** (failures - 1))

"""Build a JobSpec from what users write (trace lines, API metadata), one way for every front end."""

from __future__ import annotations

from federation.errors import JobRejected
from federation.mig.catalog import profile_gpu_milli
from federation.model import Federation, JobSpec, Resources


def make_job(
    fed: Federation,
    *,
    id: str,
    queue: str,
    submit_s: float,
    tasks: int = 1,
    gpus_per_task: float | None = None,
    gpu_milli_per_task: int | None = None,
    mig_profile: str | None = None,
    cpus_per_task: float = 0.0,
    memory_gib_per_task: float = 0.0,
    priority: str | None = None,
    gpu_model: str | list[str] | None = None,
    preemptible: bool = True,
    kind: str | None = None,
    min_tasks: int | None = None,
) -> JobSpec:
    """A job spec; raises JobRejected naming the field for what cannot be a job here."""
    given = [n for n, v in (("gpus_per_task", gpus_per_task), ("gpu_milli_per_task", gpu_milli_per_task), ("mig_profile", mig_profile)) if v is not None]
    if len(given) > 1:
        raise JobRejected(id, given[1], f"give only one of gpus_per_task, gpu_milli_per_task and mig_profile (got {', '.join(given)})")
    if mig_profile is not None:
        milli = profile_gpu_milli(mig_profile)
        if milli is None:
            raise JobRejected(id, "mig_profile", f"unknown MIG profile {mig_profile!r}")
    elif gpu_milli_per_task is not None:
        if not 1 <= gpu_milli_per_task <= 999:
            raise JobRejected(id, "gpu_milli_per_task", "must be 1-999 (a fraction of one GPU)")
        milli = gpu_milli_per_task
    else:
        g = gpus_per_task or 0.0
        if g < 0:
            raise JobRejected(id, "gpus_per_task", "must not be negative")
        milli = round(g * 1000)
    try:
        pclass = fed.priority_class(priority)
    except KeyError:
        raise JobRejected(id, "priority", f"unknown priority class {priority!r}; classes are {[p.name for p in fed.priority_classes]}") from None
    models = (gpu_model,) if isinstance(gpu_model, str) else tuple(gpu_model or ())
    return JobSpec(
        id=id,
        queue=queue,
        tasks=tasks,
        per_task=Resources(milli, round(cpus_per_task * 1000), round(memory_gib_per_task * 1024)),
        submit_s=submit_s,
        priority=pclass.value,
        priority_class=pclass.name,
        preemptible=preemptible and pclass.preemptible,
        gpu_models=models,
        mig_profile=mig_profile,
        min_tasks=min_tasks,
        kind=kind,
    )

"""Build a JobSpec from what users write (trace lines, API metadata), one way for every front end.

`JobRequest` is what a job may ask for, checked the same way wherever it comes from: numbers are
finite and within bounds no real job comes near (a NaN, an infinity or 1e308 is a mistake, not a
job), whole numbers are whole (2.7 tasks, or `true` tasks, is refused rather than rounded), and
GPU shares come in the scheduler's unit, a thousandth of a GPU.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from federation.errors import JobRejected
from federation.mig.catalog import profile_gpu_milli
from federation.model import Federation, JobSpec, Resources

MAX_TASKS = 100_000
MAX_GPUS_PER_TASK = 1024  # more than any node has
MAX_CPUS_PER_TASK = 100_000
MAX_MEMORY_GIB_PER_TASK = 1_000_000
MAX_SECONDS = 10 * 365 * 86400  # ten years: a trace, a run time or a checkpoint interval beyond it is a typo


def _not_bool(value):
    if isinstance(value, bool):  # JSON true is not a count
        raise ValueError("must be a whole number, not true or false")
    return value


Whole = Annotated[int, BeforeValidator(_not_bool)]


class JobRequest(BaseModel):
    """What one job asks for (the JSONL trace's fields, and the API's metadata keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    queue: Annotated[str, Field(min_length=1, max_length=63)]
    tasks: Annotated[Whole, Field(ge=1, le=MAX_TASKS)] = 1
    gpus_per_task: Annotated[float, Field(ge=0, le=MAX_GPUS_PER_TASK)] | None = None
    gpu_milli_per_task: Annotated[Whole, Field(ge=1, le=999)] | None = None
    mig_profile: Annotated[str, Field(max_length=63)] | None = None
    cpus_per_task: Annotated[float, Field(ge=0, le=MAX_CPUS_PER_TASK)] = 0.0
    memory_gib_per_task: Annotated[float, Field(ge=0, le=MAX_MEMORY_GIB_PER_TASK)] = 0.0
    priority: Annotated[str, Field(max_length=63)] | None = None
    gpu_model: Annotated[str, Field(max_length=63)] | list[Annotated[str, Field(max_length=63)]] | None = None
    preemptible: bool = True
    kind: Literal["training", "inference", "batch"] | None = None
    min_tasks: Annotated[Whole, Field(ge=1, le=MAX_TASKS)] | None = None
    max_runtime_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] | None = None  # each run; then it is stopped and fails
    max_retries: Annotated[Whole, Field(ge=0, le=100)] = 0  # runs that fail at their site are run again this many times


def problems(e: ValidationError) -> list[tuple[str, str]]:
    """(dotted field, message) per problem, worded for people."""
    out = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<line>"
        out.append((where, "unknown field" if err["type"] == "extra_forbidden" else err["msg"]))
    return out


def default_class(fed: Federation, queue: str) -> str:
    """The class of a job that names none: the federation's default, unless its queue may not
    use it; then the lowest class the queue may use."""
    try:
        allowed = fed.queue(queue).priority_classes
    except KeyError:
        allowed = None
    if allowed is None or fed.default_priority.name in allowed:
        return fed.default_priority.name
    return min((p for p in fed.priority_classes if p.name in allowed), key=lambda p: p.value).name


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
    max_runtime_s: float | None = None,
    max_retries: int = 0,
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
        if abs(g * 1000 - milli) > 1e-6:
            raise JobRejected(id, "gpus_per_task", f"{g:g} is not a whole number of thousandths of a GPU (the scheduler's unit); "
                                                   f"ask for {max(milli, 1) / 1000:g}")
    try:
        pclass = fed.priority_class(priority if priority is not None else default_class(fed, queue))
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
        max_runtime_s=max_runtime_s,
        max_retries=max_retries,
    )

"""Job traces: the JSONL format (CONTRACTS.md section 2), the openb CSVs, and a generator.

A malformed line is reported as `TRACE:LINE: field: message`; the run stops before simulating
unless the caller asks to skip bad lines (they are then counted).
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from federation.errors import FederationError, JobRejected
from federation.feasibility import check_job
from federation.jobs import MAX_SECONDS, MAX_TASKS, JobRequest, Whole, make_job
from federation.jobs import problems as field_problems
from federation.model import Federation, JobSpec


@dataclass(frozen=True, slots=True)
class TraceJob:
    spec: JobSpec
    duration_s: float
    checkpoint_interval_s: float | None = None
    failed_runs: int = 0  # its first runs fail (each after fail_after_s), as a site reports a run FAILED live
    fail_after_s: float = 60.0


@dataclass
class Trace:
    jobs: list[TraceJob]
    skipped: list[str] = field(default_factory=list)  # one message per skipped line


class TraceError(FederationError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class TraceLine(JobRequest):
    """One line of a JSONL trace: a job's request, with when it arrives and how long it runs."""

    id: Annotated[str, Field(min_length=1, max_length=253)]
    tasks: Annotated[Whole, Field(ge=1, le=MAX_TASKS)]  # required in a trace (CONTRACTS.md section 2)
    submit_s: Annotated[float, Field(ge=0, le=MAX_SECONDS)]
    duration_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)]
    checkpoint_interval_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] | None = None
    failed_runs: Annotated[Whole, Field(ge=0, le=100)] = 0  # the job's first runs fail, each after fail_after_s
    fail_after_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 60.0


def _job_from_line(fed: Federation, line: TraceLine) -> TraceJob:
    if line.gpus_per_task is None and line.gpu_milli_per_task is None and line.mig_profile is None:
        raise JobRejected(line.id, "gpus_per_task", "required unless gpu_milli_per_task or mig_profile is given")
    spec = make_job(
        fed, id=line.id, queue=line.queue, submit_s=line.submit_s, tasks=line.tasks, gpus_per_task=line.gpus_per_task,
        gpu_milli_per_task=line.gpu_milli_per_task, mig_profile=line.mig_profile, cpus_per_task=line.cpus_per_task,
        memory_gib_per_task=line.memory_gib_per_task, priority=line.priority, gpu_model=line.gpu_model,
        preemptible=line.preemptible, kind=line.kind, min_tasks=line.min_tasks, max_runtime_s=line.max_runtime_s,
        max_retries=line.max_retries,
    )
    check_job(fed, spec)
    return TraceJob(spec, line.duration_s, line.checkpoint_interval_s, line.failed_runs, line.fail_after_s)


def read_jsonl(path: str | Path, fed: Federation, skip_bad_lines: bool = False) -> Trace:
    problems: list[str] = []
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError([f"{path}: cannot read the trace: {e}"]) from None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = TraceLine.model_validate(json.loads(raw))
            if line.id in seen:
                raise JobRejected(line.id, "id", "duplicate job id")
            job = _job_from_line(fed, line)
        except json.JSONDecodeError as e:
            problems.append(f"{path}:{n}: <line>: not JSON ({e.msg} at column {e.colno})")
            continue
        except RecursionError:
            problems.append(f"{path}:{n}: <line>: nested too deeply to be a job")
            continue
        except ValidationError as e:
            problems.extend(f"{path}:{n}: {where}: {msg}" for where, msg in field_problems(e))
            continue
        except JobRejected as e:
            problems.append(f"{path}:{n}: {e.field}: {e}")
            continue
        seen.add(job.spec.id)
        jobs.append(job)
    if problems and not skip_bad_lines:
        raise TraceError(problems + ["(fix these lines, or pass --skip-bad-lines to skip and count them)"])
    return Trace(sorted(jobs, key=lambda j: (j.spec.submit_s, j.spec.id)), problems)


def read_openb(path: str | Path, fed: Federation, qos_queues: dict[str, str] | None = None, skip_bad_lines: bool = False) -> Trace:
    """The openb pod CSV: creation_time is the submit, deletion - scheduled the duration.

    qos maps to queues: LS -> `online`, everything else -> `batch`, unless `qos_queues` says
    otherwise (a key `*` is the default). Pods never scheduled (Pending) have no duration and
    are skipped and counted.
    """
    mapping = {"LS": "online", "*": "batch"} | (qos_queues or {})
    jobs: list[TraceJob] = []
    skipped: list[str] = []
    problems: list[str] = []
    try:
        fh = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as e:
        raise TraceError([f"{path}: cannot read the trace: {e}"]) from None
    with fh:
        for n, row in enumerate(csv.DictReader(fh), 2):
            try:
                if not row.get("scheduled_time"):
                    skipped.append(f"{path}:{n}: scheduled_time: never scheduled in the trace")
                    continue
                start, end = float(row["scheduled_time"]), float(row["deletion_time"])
                num_gpu, milli = int(row["num_gpu"]), int(row["gpu_milli"])
                queue = mapping.get(row.get("qos", ""), mapping["*"])
                spec = make_job(
                    fed, id=row["name"], queue=queue, submit_s=float(row["creation_time"]),
                    gpus_per_task=float(num_gpu) if milli >= 1000 or num_gpu == 0 else None,
                    gpu_milli_per_task=milli if 0 < milli < 1000 else None,
                    cpus_per_task=int(row["cpu_milli"]) / 1000, memory_gib_per_task=int(row["memory_mib"]) / 1024,
                    gpu_model=[m for m in (row.get("gpu_spec") or "").split("|") if m] or None,
                    kind="inference" if row.get("qos") == "LS" else "batch",
                )
                check_job(fed, spec)
                jobs.append(TraceJob(spec, max(1.0, end - start)))
            except (KeyError, ValueError) as e:
                problems.append(f"{path}:{n}: {e}: not a valid openb row")
            except JobRejected as e:
                problems.append(f"{path}:{n}: {e.field}: {e.message}")
    if problems and not skip_bad_lines:
        raise TraceError(problems[:20] + [f"... {len(problems)} problems in all" if len(problems) > 20 else "(pass --skip-bad-lines to skip and count them)"])
    return Trace(sorted(jobs, key=lambda j: (j.spec.submit_s, j.spec.id)), skipped + problems)


# ---- the generator ----------------------------------------------------------------------


def diurnal_rate(hour: float, peak_hour: float = 14.0, low: float = 0.2) -> float:
    """Relative arrival rate at `hour` of the day: a cosine tide between `low` and 1."""
    return low + (1 - low) * (1 + math.cos((hour - peak_hour) / 24 * 2 * math.pi)) / 2


def generate(
    queues: dict[str, str],
    *,
    jobs: int,
    days: float = 1.0,
    seed: int = 0,
    pattern: Literal["tidal", "uniform"] = "tidal",
    gpus_per_node: int = 8,
    inference_mig: str | None = None,
    inference_mig_share: float = 1.0,
    max_gang_nodes: int = 8,
) -> list[dict]:
    """Synthetic JSONL records. `queues` maps a role (inference, training, batch) to a queue name.

    Inference arrives with the working day (tidal), training and batch fill the night; training
    jobs are gangs of whole nodes or parts of one; inference is short single tasks, often shared,
    or, with `inference_mig`, each (or the `inference_mig_share` of them) on one MIG instance of that profile. Training gangs span at
    most `max_gang_nodes` whole nodes (a gang runs on one site, so keep it within the smallest).
    """
    rng = random.Random(seed)
    span = days * 86400
    out = []
    while len(out) < jobs:
        t = rng.uniform(0, span)
        rate = diurnal_rate((t % 86400) / 3600) if pattern == "tidal" else 1.0
        if rng.random() > 0.3 + 0.7 * rate:
            continue  # thinning: more arrivals by day
        p_inference = 0.85 * rate if pattern == "tidal" else 0.5
        role = "inference" if rng.random() < p_inference else rng.choice(["training", "batch"])
        if role not in queues:
            role = next(iter(queues))
        rec: dict = {"id": f"job-{len(out):06d}", "submit_s": round(t, 3), "queue": queues[role], "kind": role}
        if role == "inference":
            rec |= {"tasks": 1, "duration_s": round(rng.uniform(300, 3600), 1)}
            if inference_mig and rng.random() < inference_mig_share:
                rec["mig_profile"] = inference_mig
            elif rng.random() < 0.4:
                rec["gpu_milli_per_task"] = rng.choice([250, 500])
            else:
                rec["gpus_per_task"] = 1
        elif role == "training":
            tasks = min(max_gang_nodes, rng.choice([1, 1, 2, 2, 4, 8]))
            rec |= {"tasks": tasks, "gpus_per_task": gpus_per_node if tasks > 1 else rng.choice([1, 2, 4, 8]),
                    "duration_s": round(rng.uniform(1800, 6 * 3600), 1), "checkpoint_interval_s": 1800}
        else:
            rec |= {"tasks": 1, "gpus_per_task": rng.choice([1, 1, 2]), "duration_s": round(rng.uniform(600, 7200), 1)}
        out.append(rec)
    out.sort(key=lambda r: (r["submit_s"], r["id"]))
    return out

"""A Ray job submission (the body of `POST /api/jobs/`) read into what the federation schedules.

Everything a site's Ray cluster would refuse later is refused here, at submit, with a 400 naming
the field: a job accepted and then stuck at dispatch holds its placement and helps nobody.
Ray's own options are honoured where they mean something here, refused by name where not.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from federation.errors import BadSubmission
from federation.jobs import JobRequest, problems

#: submission ids become Ray submission ids and URL path segments at the site (`<id>-<attempt>`)
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
#: Ray runs the entrypoint as one argument of `sh -c`, and Linux takes at most 128 KiB in one
#: argument (MAX_ARG_STRLEN): a longer entrypoint would fail at the site, after its wait
MAX_ENTRYPOINT_BYTES = 128 * 1024 - 1
MAX_DEPTH = 32  # of metadata and runtime_env: Ray's own runtime_env is a few levels deep
MAX_METADATA_KEYS = 256
GIB = 1024**3


def _depth(value, limit: int) -> int:
    """How deeply a JSON value nests, counting no further than `limit + 1`."""
    if limit < 0 or not isinstance(value, dict | list):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(v, limit - 1) for v in items), default=0)


def read_submission(body) -> tuple[str | None, dict]:
    """The submission id (None: make one) and `make_job`'s arguments from a Ray job submission.
    Ray's metadata values are strings (`"tasks": "2"`); JSON numbers are taken too."""
    if not isinstance(body, dict):
        raise BadSubmission("the request body must be a JSON object (a Ray job submission)")
    entrypoint = body.get("entrypoint")
    if not isinstance(entrypoint, str) or not entrypoint.strip():
        raise BadSubmission("entrypoint: a command to run is required")
    if len(entrypoint.encode()) > MAX_ENTRYPOINT_BYTES:
        raise BadSubmission(f"entrypoint: {len(entrypoint.encode()):,} bytes; a site runs it as one shell argument, which Linux limits "
                            f"to {MAX_ENTRYPOINT_BYTES + 1:,} bytes. Put the long part in a file in --working-dir")
    job_id = body.get("submission_id") if body.get("submission_id") is not None else body.get("job_id")
    if job_id is not None and (not isinstance(job_id, str) or not ID.match(job_id)):
        raise BadSubmission(f"submission_id: {str(job_id)[:80]!r} is not an id: 1-128 letters, digits, '.', '_', ':' or '-', "
                            "starting with a letter or digit")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise BadSubmission("metadata: must be a JSON object of strings (ray job submit --metadata-json '{\"queue\": \"...\"}')")
    env = body.get("runtime_env") or {}
    if not isinstance(env, dict):
        raise BadSubmission("runtime_env: must be a JSON object (as Ray's runtime_env)")
    for name, value in (("metadata", meta), ("runtime_env", env)):
        if _depth(value, MAX_DEPTH) > MAX_DEPTH:
            raise BadSubmission(f"{name}: nested deeper than {MAX_DEPTH} levels")
    if len(meta) > MAX_METADATA_KEYS:
        raise BadSubmission(f"metadata: {len(meta)} keys; at most {MAX_METADATA_KEYS}")
    for key, value in meta.items():
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise BadSubmission(f"metadata.{key}: {type(value).__name__} is not a string (Ray's metadata values are strings)")
    if "queue" not in meta:
        raise BadSubmission("metadata.queue: required (ray job submit --metadata-json '{\"queue\": \"...\"}')")
    ours = {k: v for k, v in meta.items() if k in JobRequest.model_fields}
    _entrypoint_options(body, ours)
    try:
        req = JobRequest.model_validate(ours)
    except ValidationError as e:
        where, msg = problems(e)[0]
        source = "entrypoint options" if where in ours and where not in meta else f"metadata.{where}"
        raise BadSubmission(f"{source}: {msg}") from None
    return job_id, req.model_dump(exclude_unset=True)


def _entrypoint_options(body: dict, ours: dict) -> None:
    """Ray's `--entrypoint-num-gpus`, `--entrypoint-num-cpus` and `--entrypoint-memory` ask for
    one task's resources: they become the job's per-task request (counted by the quota, passed to
    the site). Where the metadata says otherwise, or the job is a gang, they would mean two
    things at once, so they are refused by name; so are custom resources, which the federation
    does not schedule."""
    options = {"entrypoint_num_gpus": "gpus_per_task", "entrypoint_num_cpus": "cpus_per_task", "entrypoint_memory": "memory_gib_per_task"}
    given = {k: body[k] for k in options if body.get(k) is not None}
    if body.get("entrypoint_resources"):
        raise BadSubmission("entrypoint_resources: custom resources are not scheduled by the federation; ask for GPUs, CPUs and memory "
                            "(metadata gpus_per_task, cpus_per_task, memory_gib_per_task) and give gpu_model for a kind of GPU")
    if not given:
        return
    gang = str(ours.get("tasks", "1")).strip() not in ("1", "") or "min_tasks" in ours
    for option, value in given.items():
        key = options[option]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadSubmission(f"{option}: {value!r} is not a number")
        if option == "entrypoint_memory":
            value = value / GIB  # Ray gives bytes
        if gang:
            raise BadSubmission(f"{option}: asks for the entrypoint's resources, but this job is a gang; give {key} in the metadata, "
                                "which is per task")
        if key == "gpus_per_task" and ("gpu_milli_per_task" in ours or "mig_profile" in ours):
            raise BadSubmission(f"{option}: the metadata asks for {'a MIG slice' if 'mig_profile' in ours else 'a GPU share'} already")
        if key in ours and _number(ours[key]) != value:
            raise BadSubmission(f"{option}: {value:g}, but metadata.{key} says {ours[key]}; give one of them")
        ours[key] = value


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None

"""Can a job ever run here? Checked at submit (a clear rejection) and by the core each cycle."""

from __future__ import annotations

from functools import lru_cache

from federation.cluster import GPU, NodeState, tasks_that_fit
from federation.errors import JobRejected
from federation.mig.catalog import CATALOG as MIG_CATALOG
from federation.model import Federation, JobSpec, Node, NodeGroup, Resources
from policies.tidal import widest_capability


def group_fits(g: NodeGroup, per_task: Resources, gpu_models: tuple[str, ...], mig_profile: str | None) -> bool:
    """One task fits on an empty node of the group."""
    if not per_task.fits_in(g.node_resources) and mig_profile is None:
        return False
    if per_task.cpu_milli > g.node_resources.cpu_milli or per_task.memory_mib > g.node_resources.memory_mib:
        return False
    if per_task.gpu_milli == 0 and mig_profile is None:
        return True
    if g.gpus_per_node == 0 or (gpu_models and g.gpu_model not in gpu_models):
        return False
    if mig_profile is not None:
        spec = MIG_CATALOG.get(g.gpu_model or "")
        return g.mig_enabled and spec is not None and mig_profile in spec.profiles
    return per_task.gpu_milli < GPU or per_task.gpu_milli % GPU == 0


@lru_cache(maxsize=4096)
def _feasible(fed: Federation, per_task: Resources, gpu_models: tuple[str, ...], mig_profile: str | None) -> frozenset[str]:
    return frozenset(s.name for s in fed.sites for g in s.node_groups if (g.count or g.max_nodes) and group_fits(g, per_task, gpu_models, mig_profile))


def feasible_sites(fed: Federation, job: JobSpec) -> frozenset[str]:
    """Sites with a node group (fixed or elastic) that can hold one task of `job` when empty."""
    return _feasible(fed, job.per_task, job.gpu_models, job.mig_profile)


def tasks_per_node(g: NodeGroup, job: JobSpec) -> int:
    """Tasks of `job` an empty node of the group holds (MIG GPUs counted as sliced for its profile)."""
    return min(job.tasks, _tasks_per_empty_node(g, job.per_task, job.gpu_models, job.mig_profile))


@lru_cache(maxsize=4096)
def _tasks_per_empty_node(g: NodeGroup, per_task: Resources, gpu_models: tuple[str, ...], mig_profile: str | None) -> int:
    """Cached by shape: checked for every submitted job, and a trace has thousands of alike ones."""
    r = g.node_resources
    layout = ()
    if mig_profile is not None and group_fits(g, per_task, gpu_models, mig_profile):
        prof = MIG_CATALOG[g.gpu_model].profiles[mig_profile]
        layout = tuple((gpu, prof.name, s) for gpu in range(g.gpus_per_node) for s in prof.starts[:prof.max_count])
    empty = NodeState(Node("probe", g.site, g.name, g.gpu_model, g.gpus_per_node, r.cpu_milli, r.memory_mib, mig_layout=layout))
    probe = JobSpec("probe", "", 1 << 30, per_task, 0.0, gpu_models=gpu_models, mig_profile=mig_profile)
    return tasks_that_fit(probe, empty, probe.tasks)


def most_tasks_at_a_site(fed: Federation, job: JobSpec, sites: frozenset[str] | set[str]) -> int:
    """The most tasks of `job` one site could hold at once, every node empty (cloud groups at max_nodes)."""
    return max((sum((g.count + g.max_nodes) * tasks_per_node(g, job) for g in s.node_groups) for s in fed.sites if s.name in sites), default=0)


def check_job(fed: Federation, job: JobSpec) -> None:
    """Raise JobRejected, naming the field, for a job that could never run in this federation."""
    queues = {q.name: q for q in fed.queues}
    q = queues.get(job.queue)
    if q is None:
        raise JobRejected(job.id, "queue", f"unknown queue {job.queue!r}; queues are {sorted(fed.leaf_queues)}")
    if job.queue not in fed.leaf_queues:
        raise JobRejected(job.id, "queue", f"{job.queue!r} is a parent queue; submit to one of its children")
    if q.priority_classes is not None and job.priority_class not in q.priority_classes:
        raise JobRejected(job.id, "priority", f"queue {job.queue!r} may use the priority classes {list(q.priority_classes)}, not {job.priority_class!r}")
    if job.tasks < 1:
        raise JobRejected(job.id, "tasks", "a job needs at least one task")
    if job.min_tasks is not None and not 1 <= job.min_tasks <= job.tasks:
        raise JobRejected(job.id, "min_tasks", f"min_tasks must be between 1 and tasks ({job.tasks})")
    if job.per_task.gpu_milli > GPU and job.per_task.gpu_milli % GPU:
        raise JobRejected(job.id, "gpus_per_task", "more than one GPU per task must be a whole number of GPUs")
    for model in job.gpu_models:
        if model not in fed.gpu_models:
            raise JobRejected(job.id, "gpu_model", f"unknown GPU model {model!r}")
    if job.mig_profile is not None and not any(job.mig_profile in s.profiles for s in MIG_CATALOG.values()):
        raise JobRejected(job.id, "mig_profile", f"unknown MIG profile {job.mig_profile!r}")
    sites = feasible_sites(fed, job)
    if q.sites is not None:
        sites = sites & set(q.sites)
    if not sites:
        what = f"MIG profile {job.mig_profile}" if job.mig_profile else f"one task ({job.per_task})"
        raise JobRejected(job.id, "mig_profile" if job.mig_profile else "gpus_per_task", f"no node at the sites of queue {job.queue!r} can ever hold {what}")
    most = most_tasks_at_a_site(fed, job, sites)
    if most < (job.min_tasks or job.tasks):
        raise JobRejected(job.id, "tasks", f"a gang runs on one site, and no site of queue {job.queue!r} can hold more than {most} of its {job.min_tasks or job.tasks} tasks at once")
    need = job.start_request
    cap = widest_capability(fed, q)  # a window may raise it: such a job waits for the window
    if not need.fits_in(cap):
        raise JobRejected(job.id, "tasks", f"the gang needs {need}, above queue {job.queue!r}'s capability {cap}")

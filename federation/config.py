"""Load a federation config: YAML -> schema (pydantic) -> cross-field checks -> domain types.

Every problem is reported as `FILE:LINE:COLUMN: dotted.path: message`. The YAML node tree is
kept beside the data so that pydantic's error locations map back to lines and columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from federation import schema
from federation.errors import ConfigError, Problem
from federation.gpus import BUILTIN_GPU_MODELS, GpuModel
from federation.model import Federation, NodeGroup, PriorityClass, Queue, Resources, Site
from federation.semantics import check_semantics

Positions = dict[tuple, tuple[int, int]]

# Bounds no real config comes near, so that a hostile or broken file fails fast, not after minutes
# and gigabytes: its size, how deeply it nests, and how many values its aliases expand to (a
# "billion laughs" file is a few lines of aliases of aliases).
MAX_BYTES = 4 * 1024**2
MAX_DEPTH = 64
MAX_VALUES = 200_000


class _TooBig(Exception):
    def __init__(self, node: yaml.Node, message: str):
        self.node, self.message = node, message


def _parse(text: str, file: str) -> tuple[Any, Positions]:
    if len(text) > MAX_BYTES:
        raise ConfigError([Problem(file, None, None, "", f"{len(text):,} characters; a federation config is at most {MAX_BYTES:,}")])
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise ConfigError([Problem(file, None, None, "", f"nested too deeply (at most {MAX_DEPTH} levels)")]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise ConfigError([Problem(file, line, col, "", f"YAML syntax: {e.problem or e}")]) from None
    except yaml.YAMLError as e:  # e.g. a reader error on undecodable bytes
        raise ConfigError([Problem(file, None, None, "", f"YAML: {e}")]) from None
    if node is None:
        raise ConfigError([Problem(file, 1, 1, "", "the file is empty; see configs/idc-aws-gcp.yaml")])
    positions: Positions = {}
    problems: list[Problem] = []
    try:
        _walk(node, (), positions, problems, file, [MAX_VALUES])
    except _TooBig as e:
        raise ConfigError([Problem(file, e.node.start_mark.line + 1, e.node.start_mark.column + 1, "", e.message)]) from None
    if problems:
        raise ConfigError(problems)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:  # tags that compose accepts but safe construction refuses
        mark = getattr(e, "problem_mark", None)
        raise ConfigError([Problem(file, mark.line + 1 if mark else None, mark.column + 1 if mark else None, "", f"YAML: {getattr(e, 'problem', e)}")]) from None
    return data, positions


def _walk(node: yaml.Node, path: tuple, positions: Positions, problems: list[Problem], file: str, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig(node, f"expands to more than {MAX_VALUES:,} values (aliases of aliases?); write the values out")
    if len(path) > MAX_DEPTH:
        raise _TooBig(node, f"nested deeper than {MAX_DEPTH} levels")
    positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                line, col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                problems.append(Problem(file, line, col, _dotted(path), "a key must be a plain name, not a list or mapping"))
                continue
            key = key_node.value
            if key in seen:
                line, col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                problems.append(Problem(file, line, col, _dotted(path + (key,)), "duplicate key; remove one of them"))
            seen.add(key)
            _walk(value_node, path + (key,), positions, problems, file, budget)
            # a key's own position is better than its value's for "unknown key" errors
            positions[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), positions, problems, file, budget)


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def locate(positions: Positions, path: tuple) -> tuple[int | None, int | None]:
    """The position of `path`, or of its nearest ancestor that the file has."""
    for n in range(len(path), -1, -1):
        if path[:n] in positions:
            return positions[path[:n]]
    return None, None


def _data_path(data: Any, loc: tuple) -> tuple:
    """pydantic's error location without union tags and validator names, as a path into `data`."""
    out: list = []
    cur = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(cur, dict):
            if part in cur:
                out.append(part)
                cur = cur[part]
            elif last:
                out.append(part)  # a missing required field
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
    return tuple(out)


def _message(err: dict) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling"
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        return f"{msg}"
    return msg


def parse(text: str, file: str = "<config>") -> Federation:
    """Validate a config given as text. Raises ConfigError listing every problem."""
    data, positions = _parse(text, file)
    if not isinstance(data, dict):
        raise ConfigError([Problem(file, 1, 1, "", "the top level must be a mapping with federation:, sites: and queues:")])
    try:
        spec = schema.FederationSpec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            path = _data_path(data, err["loc"])
            line, col = locate(positions, path)
            problems.append(Problem(file, line, col, _dotted(path), _message(err)))
        raise ConfigError(problems) from None
    semantic = check_semantics(spec)
    if semantic:
        problems = []
        for path, message in semantic:
            line, col = locate(positions, path)
            problems.append(Problem(file, line, col, _dotted(path), message))
        raise ConfigError(problems)
    return to_domain(spec, file)


def load(path: str | Path) -> Federation:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem(str(path), None, None, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([Problem(str(path), None, None, "", f"cannot read the file: {e}")]) from None
    return parse(text, str(path))


def default_config_path() -> Path:
    return Path(__file__).parent / "data" / "local.yaml"


# ---- schema -> domain ---------------------------------------------------------------------


def limit(m: schema.ResourceMap) -> Resources:
    """A limit: a missing key means no limit."""
    u = Resources.unlimited()
    return Resources(
        u.gpu_milli if m.gpu is None else round(m.gpu * 1000),
        u.cpu_milli if m.cpu is None else round(m.cpu * 1000),
        u.memory_mib if m.memory_gib is None else round(m.memory_gib * 1024),
    )


QUOTA_FIELDS = ("guarantee", "deserved", "capability", "borrowing_limit", "lending_limit")
KEYS = ("gpu", "cpu", "memory_gib")


def governed(q: schema.QueueSpec) -> set[str]:
    """The resources a queue's quota governs: GPUs, and whatever its own quota names (Kueue checks
    quota only for the resources a queue declares). A GPU-only quota leaves CPUs and memory to
    the nodes: the queue neither borrows them nor is held back by them."""
    return {"gpu"} | {k for f in QUOTA_FIELDS for k in KEYS if getattr(getattr(q, f), k) is not None}


def quota_amounts(spec: schema.FederationSpec) -> tuple[dict[str, Resources], dict[str, Resources]]:
    """Guarantee and deserved per queue. A key a parent leaves unset is the sum of its children's.
    A key a leaf leaves unset is 0 for its guarantee; for its deserved, 0 if the queue governs
    that resource (it borrows all it uses of it) and no limit if it does not."""
    children: dict[str, list[str]] = {}
    for q in spec.queues:
        if q.parent:
            children.setdefault(q.parent, []).append(q.name)
    by_name = {q.name: q for q in spec.queues}
    unlimited = Resources.unlimited().as_tuple()
    out: dict[str, dict[str, Resources]] = {"guarantee": {}, "deserved": {}}

    def visit(field: str, name: str, stack: tuple = ()) -> Resources:
        done = out[field]
        if name in done:
            return done[name]
        if name in stack:  # a cycle; reported by check_semantics
            return Resources()
        q = by_name[name]
        kids = [visit(field, c, stack + (name,)) for c in children.get(name, [])]
        total = sum(kids, Resources()).as_tuple()
        keys = governed(q)
        values = []
        for i, key in enumerate(KEYS):
            v = getattr(getattr(q, field), key)
            scale = 1024 if key == "memory_gib" else 1000
            if v is not None:
                values.append(round(v * scale))
            elif kids:
                values.append(total[i])
            else:
                values.append(0 if field == "guarantee" or key in keys else unlimited[i])
        done[name] = Resources(*values)
        return done[name]

    for q in spec.queues:
        for field in out:
            visit(field, q.name)
    return out["guarantee"], out["deserved"]


def inherited(spec: schema.FederationSpec, field: str, default):
    """Per queue, its own `field`, else its nearest ancestor's, else `default`."""
    by_name = {q.name: q for q in spec.queues}
    out = {}
    for q in spec.queues:
        cur, seen = q, set()
        while getattr(cur, field) is None and cur.parent in by_name and cur.name not in seen:
            seen.add(cur.name)  # a cycle is reported by check_semantics
            cur = by_name[cur.parent]
        v = getattr(cur, field)
        out[q.name] = default if v is None else v
    return out


def to_domain(spec: schema.FederationSpec, source: str = "<memory>") -> Federation:
    gpu_models: dict[str, GpuModel] = dict(BUILTIN_GPU_MODELS)
    for m in spec.gpu_models:
        gpu_models[m.name] = GpuModel(m.name, round(m.memory_gib), m.mig)
    sites = []
    for s in spec.sites:
        groups = []
        for g in s.node_groups:
            groups.append(
                NodeGroup(
                    name=g.name,
                    site=s.name,
                    gpu_model=g.gpu_model,
                    gpus_per_node=g.gpus_per_node,
                    node_resources=Resources.of(g.gpus_per_node, g.cpus_per_node, g.memory_gib_per_node),
                    count=g.count or 0,
                    min_nodes=g.min_nodes or 0,
                    max_nodes=g.max_nodes or 0,
                    spot=g.spot,
                    price_usd_per_hour=g.price_usd_per_hour,
                    fallback=g.fallback,
                    boot_s=g.boot_s,
                    spot_interruptions_per_hour=g.spot_interruptions_per_hour,
                    racks=g.racks,
                    rack=g.rack,
                    mig_enabled=g.mig.enabled,
                    mig_backend=g.mig.backend,
                    instance_type=g.instance_type or g.machine_type,
                    rack_label=g.rack_label,
                )
            )
        sites.append(Site(s.name, s.kind, s.ray_address, s.provider, tuple(groups)))
    guarantee, deserved = quota_amounts(spec)
    sites_of, burst_of = inherited(spec, "sites", None), inherited(spec, "burst", False)
    classes_of = inherited(spec, "allowed_priority_classes", None)
    queues = tuple(
        Queue(
            name=q.name,
            parent=q.parent,
            guarantee=guarantee[q.name],
            deserved=deserved[q.name],
            capability=limit(q.capability),
            borrowing_limit=limit(q.borrowing_limit),
            lending_limit=limit(q.lending_limit),
            weight=q.weight,
            sites=tuple(sites_of[q.name]) if sites_of[q.name] is not None else None,
            burst=burst_of[q.name] if isinstance(burst_of[q.name], bool) else burst_of[q.name].enabled,
            burst_budget_usd_per_month=None if isinstance(q.burst, bool | None) else q.burst.budget_usd_per_month,
            priority_classes=tuple(classes_of[q.name]) if classes_of[q.name] is not None else None,
            max_running_jobs=q.max_running_jobs,
        )
        for q in spec.queues
    )
    return Federation(
        name=spec.federation.name,
        timezone=spec.federation.timezone,
        api=spec.api,
        gpu_models=gpu_models,
        priority_classes=tuple(PriorityClass(p.name, p.value, p.preemptible, p.default) for p in spec.priority_classes),
        sites=tuple(sites),
        queues=queues,
        policies=spec.policies,
        source=source,
    )

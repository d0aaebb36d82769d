"""Cross-field checks of a schema-valid config. Each problem is (path into the YAML, message).

The file is judged alone: nothing here contacts a site or opens the files a config points to.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from federation import schema
from federation.gpus import BUILTIN_GPU_MODELS
from federation.mig.catalog import CATALOG as MIG_CATALOG
from federation.mig.catalog import pack

Issue = tuple[tuple, str]
KEYS = ("gpu", "cpu", "memory_gib")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$|^24:00$")
# Provider kinds each site kind accepts.
_PROVIDERS = {
    "idc": {"kubernetes", "local", "simulated"},
    "aws": {"aws", "simulated"},
    "gcp": {"gcp", "simulated"},
    "local": {"local"},
    "simulated": {"simulated"},
}


def parse_hhmm(text: str) -> int | None:
    """Minutes since midnight for "HH:MM" ("24:00" allowed as an end), else None."""
    if not _HHMM.match(text):
        return None
    h, m = text.split(":")
    return int(h) * 60 + int(m)


def _check_window(w: schema.Window, at: tuple) -> list[Issue]:
    if w.cron is not None:
        issues: list[Issue] = []
        if w.start is not None or w.end is not None or w.days is not None:
            issues.append((at, "give either cron with duration_s, or days/start/end, not both"))
        if w.duration_s is None:
            issues.append(((*at, "duration_s"), "a cron window needs duration_s: how long each opening lasts"))
        if not croniter.is_valid(w.cron) or len(w.cron.split()) != 5:
            issues.append(((*at, "cron"), f"cron expression {w.cron!r} does not parse; write five fields, e.g. \"0 8 * * 1-5\""))
        return issues
    if w.start is None or w.end is None:
        return [((*at, "start" if w.start is None else "end"), "a window needs start and end (HH:MM), or cron with duration_s")]
    if w.duration_s is not None:
        return [((*at, "duration_s"), "duration_s goes with cron; a start/end window ends at its end")]
    issues = []
    for key in ("start", "end"):
        v = getattr(w, key)
        if parse_hhmm(v) is None or (key == "start" and v == "24:00"):
            issues.append(((*at, key), f"time {v!r} does not parse; write HH:MM (00:00-23:59)"))
    if w.start == w.end:
        issues.append(((*at, "end"), "a window's start and end must differ"))
    return issues


def apply_override(q: schema.QueueSpec, o: schema.QueueOverride) -> schema.QueueSpec:
    """The queue as a tidal window sets it: each field the override gives replaces the queue's."""
    return q.model_copy(update={k: getattr(o, k) for k in type(o).model_fields if getattr(o, k) is not None})


def _dup_names(items: list, path: tuple) -> list[Issue]:
    counts = Counter(i.name for i in items)
    return [((*path, n), f"name {i.name!r} is used more than once") for n, i in enumerate(items) if counts[i.name] > 1]


def _amount(m: schema.ResourceMap | None, key: str) -> float:
    return (getattr(m, key) if m is not None else None) or 0.0


def _limit(m: schema.ResourceMap | None, key: str) -> float:
    v = getattr(m, key) if m is not None else None
    return float("inf") if v is None else v


def _units(v: float, key: str) -> float:
    """`v` in the scheduler's units (milli-GPU, milli-CPU, MiB), rounded as the quota tree holds
    it: sums are compared there, so ten children of 88.888 GPUs fit a parent of 888.88 exactly
    as they do in the tree (in floats they sum to 888.8799999)."""
    return v if v == float("inf") else round(v * (1024 if key == "memory_gib" else 1000))


def check_semantics(spec: schema.FederationSpec) -> list[Issue]:
    issues: list[Issue] = []
    try:
        ZoneInfo(spec.federation.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        issues.append((("federation", "timezone"), f"unknown time zone {spec.federation.timezone!r}; use an IANA name such as Asia/Shanghai"))
    issues += _check_models_and_priorities(spec)
    issues += _check_sites(spec)
    issues += _check_queues(spec, {q.name: q for q in spec.queues}, ("queues",))
    issues += _check_policies(spec)
    return issues


def _models(spec: schema.FederationSpec) -> dict[str, bool]:
    """GPU model name -> supports MIG."""
    known = {name: m.mig for name, m in BUILTIN_GPU_MODELS.items()}
    known.update({m.name: m.mig for m in spec.gpu_models})
    return known


def _check_models_and_priorities(spec: schema.FederationSpec) -> list[Issue]:
    issues = _dup_names(spec.gpu_models, ("gpu_models",))
    for i, m in enumerate(spec.gpu_models):
        if m.mig and m.name not in MIG_CATALOG:
            issues.append((("gpu_models", i, "mig"), f"MIG profiles are known only for {sorted(MIG_CATALOG)}; set mig: false"))
    issues += _dup_names(spec.priority_classes, ("priority_classes",))
    defaults = [i for i, p in enumerate(spec.priority_classes) if p.default]
    if len(defaults) > 1:
        issues.append((("priority_classes", defaults[1], "default"), "only one priority class may be the default"))
    if not spec.priority_classes:
        issues.append((("priority_classes",), "at least one priority class is needed"))
    return issues


def _cluster(site: schema.SiteSpec, at: tuple) -> list[Issue]:
    """What either cloud's Terraform module needs of `cluster`: the module, and a head that is
    not open to the internet; without it, workers join an existing head at ray_address."""
    p, pat = site.provider, (*at, "provider")
    if p.cluster is not None and not p.terraform_dir:
        return [((*pat, "cluster"), "the site's cluster is made by the Terraform module: give terraform_dir too")]
    issues = []
    if p.terraform_dir and p.cluster is None and not site.ray_address:
        issues.append(((*at, "ray_address"), "workers join an existing Ray head: give its address (or provider.cluster to make one)"))
    for ci, cidr in enumerate(p.cluster.controller_cidrs if p.cluster else []):
        if cidr.endswith("/0"):
            issues.append(((*pat, "cluster", "controller_cidrs", ci), "never open Ray to the whole internet: name the controller's addresses"))
    return issues


def _aws_terraform(site: schema.SiteSpec, at: tuple) -> list[Issue]:
    """What the AWS Terraform module needs besides `_cluster`'s: the Ray token's parameter
    always; without `cluster`, the existing VPC its workers' head is in."""
    p, pat = site.provider, (*at, "provider")
    if not p.terraform_dir:
        return []
    issues = []
    if not p.ray_auth_token_parameter:
        issues.append(((*pat, "ray_auth_token_parameter"), "the module's nodes run Ray with token auth: name the SSM SecureString "
                                                           "that holds the controller's Ray token (e.g. /acme/ray-token)"))
    elif not p.ray_auth_token_parameter.startswith("/"):
        issues.append(((*pat, "ray_auth_token_parameter"), "an SSM parameter name starts with /"))
    if p.vpc_id is None and p.subnet_ids:
        issues.append(((*pat, "vpc_id"), "subnet_ids name an existing network: give its vpc_id too"))
    if p.vpc_id is not None and not p.subnet_ids:
        issues.append(((*pat, "subnet_ids"), "vpc_id names an existing network: give the subnets to use in it"))
    if p.cluster is None and p.vpc_id is None:
        issues.append(((*pat, "vpc_id"), "workers join an existing Ray head: give the VPC and subnets it is in "
                                         "(or provider.cluster to make the whole cluster)"))
    return issues


def _check_sites(spec: schema.FederationSpec) -> list[Issue]:
    models = _models(spec)
    issues = _dup_names(spec.sites, ("sites",))
    for si, site in enumerate(spec.sites):
        at = ("sites", si)
        if site.provider is not None and site.provider.kind not in _PROVIDERS[site.kind]:
            issues.append(((*at, "provider", "kind"), f"a {site.kind} site takes a provider of kind {sorted(_PROVIDERS[site.kind])}"))
        kind = getattr(site.provider, "kind", None)
        if kind in ("aws", "gcp"):
            issues += _cluster(site, at)
        if kind == "aws":
            issues += _aws_terraform(site, at)
        issues += _dup_names(site.node_groups, (*at, "node_groups"))
        names = {g.name for g in site.node_groups}
        for field in ("group_failure_rates", "group_lifetimes_s"):
            for group in getattr(site.provider, field, {}):
                if group not in names:
                    issues.append(((*at, "provider", field, group), f"no node group {group!r} in site {site.name!r}"))
        for gi, g in enumerate(site.node_groups):
            gat = (*at, "node_groups", gi)
            if g.gpus_per_node > 0 and g.gpu_model is None:
                issues.append(((*gat, "gpu_model"), "a node group with GPUs needs gpu_model"))
            if g.gpu_model is not None and g.gpu_model not in models:
                issues.append(((*gat, "gpu_model"), f"unknown GPU model {g.gpu_model!r}; use one of {sorted(models)} or declare it under gpu_models:"))
            elif g.mig.enabled and not models.get(g.gpu_model or "", False):
                issues.append(((*gat, "mig", "enabled"), f"{g.gpu_model} does not support MIG"))
            if g.mig.backend == "gpu-operator" and getattr(site.provider, "kind", None) != "kubernetes":
                issues.append(((*gat, "mig", "backend"), "the gpu-operator backend needs the site's provider to be kind: kubernetes"))
            if g.rack is not None and g.racks > 1:
                issues.append(((*gat, "rack"), "give rack (all the group's nodes in one rack) or racks (spread over that many), not both"))
            if g.fallback is not None and (g.fallback not in names or g.fallback == g.name):
                issues.append(((*gat, "fallback"), f"fallback {g.fallback!r} is not another node group of site {site.name!r}"))
            elastic = g.max_nodes is not None
            if g.count is not None and elastic:
                issues.append(((*gat, "count"), "give either count (fixed nodes) or min_nodes/max_nodes (elastic), not both"))
            if g.count is None and not elastic:
                issues.append((gat, "give count (fixed nodes) or max_nodes (elastic cloud capacity)"))
            if elastic and (g.min_nodes or 0) > (g.max_nodes or 0):
                issues.append(((*gat, "min_nodes"), f"min_nodes {g.min_nodes} is above max_nodes {g.max_nodes}"))
            if g.min_nodes is not None and not elastic:
                issues.append(((*gat, "min_nodes"), "min_nodes needs max_nodes"))
    return issues


def _check_quota_rules(q: schema.QueueSpec, at: tuple, g: schema.ResourceMap | None, d: schema.ResourceMap | None, c: schema.ResourceMap | None, has_children: bool) -> list[Issue]:
    issues = []
    for key in KEYS:
        gv, cv = _amount(g, key), _limit(c, key)
        dv = getattr(d, key) if d is not None else None
        gu, du, cu = _units(gv, key), None if dv is None else _units(dv, key), _units(cv, key)
        if du is not None and gu > du:
            issues.append(((*at, "guarantee", key), f"guarantee {gv:g} is above deserved {dv:g}"))
        if du is not None and du > cu:
            issues.append(((*at, "deserved", key), f"deserved {dv:g} is above capability {cv:g}"))
        if gu > cu:
            issues.append(((*at, "guarantee", key), f"guarantee {gv:g} is above capability {cv:g}"))
        if dv is None and gv > 0 and not has_children:
            issues.append(((*at, "deserved", key), f"guarantee {gv:g} needs a deserved of at least as much"))
    return issues


def _check_queues(spec: schema.FederationSpec, effective: dict[str, schema.QueueSpec], at: tuple, window: str = "") -> list[Issue]:
    """Queue rules over `effective` (the configured queues, or the queues as tidal windows set
    them; `window` then names those windows, as in "window 'night'")."""
    suffix = f" during {window}" if window else ""
    issues: list[Issue] = [] if window else _dup_names(spec.queues, at)
    sites = {s.name for s in spec.sites}
    index = {q.name: i for i, q in enumerate(spec.queues)}
    children: dict[str, list[str]] = {}
    for q in spec.queues:
        if q.parent is not None:
            children.setdefault(q.parent, []).append(q.name)
    for qi, q in enumerate(spec.queues):
        e = effective[q.name]
        qat = (*at, qi) if not window else (*at, q.name)
        touched = e is not q or any(effective[c] is not spec.queues[index[c]] for c in children.get(q.name, []))
        if window and not touched:
            continue  # the configured values were checked already
        if not window:
            classes = {c.name for c in spec.priority_classes}
            for ci, c in enumerate(q.allowed_priority_classes or []):
                if c not in classes:
                    issues.append(((*qat, "allowed_priority_classes", ci), f"unknown priority class {c!r}; classes are {sorted(classes)}"))
            if q.parent is not None and q.parent not in index:
                issues.append(((*qat, "parent"), f"unknown parent queue {q.parent!r}"))
            for si, s in enumerate(q.sites or []):
                if s not in sites:
                    issues.append(((*qat, "sites", si), f"unknown site {s!r}; sites are {sorted(sites)}"))
        issues += [(p, m + suffix) for p, m in _check_quota_rules(q, qat, e.guarantee, e.deserved, e.capability, q.name in children)]
        kids = [effective[c] for c in children.get(q.name, [])]
        for key in KEYS:
            if not kids:
                break
            own_g = getattr(e.guarantee, key)  # unset: the children's sum
            total_g = sum(_amount(k.guarantee, key) for k in kids)
            if own_g is not None and sum(_units(_amount(k.guarantee, key), key) for k in kids) > _units(own_g, key):
                issues.append(((*qat, "guarantee", key), f"the children's guarantees sum to {total_g:g}, above this queue's {own_g:g}{suffix}"))
            own_d = getattr(e.deserved, key)
            total_d = sum(_amount(k.deserved, key) for k in kids)
            if own_d is not None and sum(_units(_amount(k.deserved, key), key) for k in kids) > _units(own_d, key):
                issues.append(((*qat, "deserved", key), f"the children's deserved sum to {total_d:g}, above this queue's {own_d:g}{suffix}"))
    if not window:
        issues += _check_cycles(spec, at)
    return issues


def _check_cycles(spec: schema.FederationSpec, at: tuple) -> list[Issue]:
    parent = {q.name: q.parent for q in spec.queues}
    issues = []
    for qi, q in enumerate(spec.queues):
        seen, cur = {q.name}, q.parent
        while cur is not None and cur in parent:
            if cur in seen:
                issues.append(((*at, qi, "parent"), f"queue {q.name!r} is its own ancestor"))
                break
            seen.add(cur)
            cur = parent[cur]
    return issues


def _check_policies(spec: schema.FederationSpec) -> list[Issue]:
    issues: list[Issue] = []
    pol = spec.policies
    sites = {s.name: s for s in spec.sites}
    models = _models(spec)
    layouts = pol.mig.layouts
    issues += _dup_names(pol.tidal, ("policies", "tidal"))
    mergeable: list[tuple[int, schema.TidalPolicy]] = []  # window policies whose queue overrides are valid alone

    def layout_fits(name: str, gpu_model: str | None, path: tuple) -> None:
        spec_ = MIG_CATALOG.get(gpu_model or "")
        if spec_ is None:
            return
        counts = layouts[name]
        missing = [p for p in counts if p not in spec_.profiles]
        if missing:
            issues.append((path, f"layout {name!r} uses {missing}, which {gpu_model} does not have (it has {sorted(spec_.profiles)})"))
        elif pack(spec_, counts) is None:
            issues.append((path, f"layout {name!r} ({counts}) does not fit on one {gpu_model}"))

    for lname, counts in layouts.items():
        known = set().union(*(s.profiles for s in MIG_CATALOG.values()))
        for prof in counts:
            if prof not in known:
                issues.append((("policies", "mig", "layouts", lname, prof), f"unknown MIG profile {prof!r}"))
    for sname, profiles in pol.mig.warm_pool.items():
        at = ("policies", "mig", "warm_pool", sname)
        if sname not in sites:
            issues.append((at, f"unknown site {sname!r}"))
            continue
        offered = set()
        for g in sites[sname].node_groups:
            if g.mig.enabled and g.gpu_model in MIG_CATALOG:
                offered |= set(MIG_CATALOG[g.gpu_model].profiles)
        for prof in profiles:
            if prof not in offered:
                issues.append(((*at, prof), f"no MIG-enabled node group of site {sname!r} offers {prof!r}"))
    for ti, t in enumerate(pol.tidal):
        at = ("policies", "tidal", ti)
        if t.window is None and t.forecast is None:
            issues.append((at, "a tidal policy needs a window or a forecast"))
        window_issues = _check_window(t.window, (*at, "window")) if t.window is not None else []
        issues += window_issues
        if t.forecast is not None and (t.queues or t.mig or t.burst):
            issues.append(((*at, "forecast"), "a forecast policy pre-warms capacity; give quota, MIG and burst overrides in a window policy"))
        unknown = [n for n in t.queues if n not in {q.name for q in spec.queues}]
        for n in unknown:
            issues.append(((*at, "queues", n), f"unknown queue {n!r}"))
        if t.queues and not unknown:
            found = _check_queues(spec, _overridden(spec, [t]), (*at, "queues"), window=f"window {t.name!r}")
            issues += found
            if t.window is not None and not found and not window_issues:
                mergeable.append((ti, t))
        for sname, groups in t.mig.items():
            sat = (*at, "mig", sname)
            if sname not in sites:
                issues.append((sat, f"unknown site {sname!r}"))
                continue
            by_name = {g.name: g for g in sites[sname].node_groups}
            for gname, target in groups.items():
                gat = (*sat, gname)
                g = by_name.get(gname)
                if g is None:
                    issues.append((gat, f"site {sname!r} has no node group {gname!r}"))
                elif not g.mig.enabled or not models.get(g.gpu_model or "", False):
                    issues.append((gat, f"node group {gname!r} does not have MIG enabled"))
                elif target.layout not in layouts:
                    issues.append(((*gat, "layout"), f"unknown layout {target.layout!r}; define it under policies.mig.layouts"))
                else:
                    layout_fits(target.layout, g.gpu_model, (*gat, "layout"))
                    total = (g.count or g.max_nodes or 0) * g.gpus_per_node
                    if target.gpus > total:
                        issues.append(((*gat, "gpus"), f"{target.gpus} GPUs asked, the node group has {total}"))
    return issues + _check_overlaps(spec, mergeable)


def _overridden(spec: schema.FederationSpec, policies: list[schema.TidalPolicy]) -> dict[str, schema.QueueSpec]:
    """Queue name -> the queue as `policies`, open together, set it (the later-listed wins per field)."""
    effective = {q.name: q for q in spec.queues}
    for t in policies:
        for name, o in t.queues.items():
            effective[name] = apply_override(effective[name], o)
    return effective


def _check_overlaps(spec: schema.FederationSpec, mergeable: list[tuple[int, schema.TidalPolicy]]) -> list[Issue]:
    """Windows open at the same moment merge field by field, so each window being valid alone is
    not enough: the queue rules must hold for every merge that happens in a week of the
    federation's time (from a Monday; the window edges are the moments where it can change)."""
    # imported here: policies.tidal reads this module's parse_hhmm
    from policies.tidal import overlaps

    try:
        tz = ZoneInfo(spec.federation.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return []  # reported with the timezone
    issues: list[Issue] = []
    for combo in sorted(overlaps([t.window for _, t in mergeable], datetime(2026, 1, 5, tzinfo=tz))):
        members = [mergeable[i] for i in combo]
        names = " and ".join(repr(t.name) for _, t in members)
        # reported at the later-listed window: its values win where the two disagree
        issues += _check_queues(spec, _overridden(spec, [t for _, t in members]), ("policies", "tidal", members[-1][0], "queues"),
                                window=f"windows {names}, open together (the later-listed wins per field)")
    return issues

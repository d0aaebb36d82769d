"""`fedctl frag`: the FGD fill experiment (Weng et al., USENIX ATC'23) on the openb CSVs.

The protocol of ../shared/data/openb/PROTOCOL.md: nodes named in a seeded random order (as the
published simulator renames them), pods in a seeded shuffle, topped up (or cut) to `tune` x the
cluster's GPU capacity by resampling, each placed once or failed, nothing departs. After every pod
the arrived GPU request, the allocated GPU and the cluster's fragmentation (against the target
workload T) are recorded; they are binned by arrived percentage rounded to a whole number.

`fragmentation-aware` is the product: each pod is a one-task job placed by the scheduler's own
`place_gang` with the strategy the scheduler runs, weighted by the mix of the pods seen so far
(`MixTally`, as the decision cycle does). The paper's algorithms are reproduced here as published,
to compare against; their node scoring is vectorised with numpy, FGD's per-node score cached per
pod shape and recomputed only for nodes that changed since.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from federation.cluster import ClusterState
from federation.errors import FederationError
from federation.model import JobSpec, Node, Resources
from federation.placement import place_gang
from policies.placement import MixTally, make_strategy

PRODUCT = "fragmentation-aware"
POLICIES = ("random", "dotprod", "bestfit", "packing", "clustering", "fgd", PRODUCT)
MAX_GPUS = 8
CPU_SPEC, GPU_SPEC = 128_000.0, 8_000.0  # the simulator's normalisation of CPU and GPU (milli)


@dataclass
class Cluster:
    names: list[str]
    cpu: np.ndarray  # free milli-CPU per node
    mem: np.ndarray  # free MiB
    gpu: np.ndarray  # (nodes, 8) free milli-GPU, -1 where the node has no such GPU
    model: np.ndarray  # model index per node
    models: list[str]

    @property
    def capacity_milli(self) -> int:
        return int((self.gpu >= 0).sum() * 1000)


@dataclass(frozen=True)
class Pod:
    cpu: int
    mem: int
    num: int
    milli: int  # per GPU
    spec: tuple[str, ...]

    @property
    def gpu_milli(self) -> int:
        return self.num * self.milli


# Each whole-number column's largest value: a node has at most MAX_GPUS GPUs, a pod asks at most
# 1000 milli of each GPU; the bounds keep sums of a whole trace inside int64.
LIMITS = {"cpu_milli": 10**12, "memory_mib": 10**12, "gpu": MAX_GPUS, "num_gpu": 10**6, "gpu_milli": 1000}


def read_nodes(path: Path) -> Cluster:
    rows = _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    seen: dict[str, int] = {}
    for line, r in rows:
        if r["sn"] in seen:
            raise FederationError(f"{path}:{line}: sn: node {r['sn']!r} is already on line {seen[r['sn']]}")
        seen[r["sn"]] = line
    rows.sort(key=lambda lr: lr[1]["sn"])
    if not any(r["gpu"] for _, r in rows):
        raise FederationError(f"{path}: no node has a GPU: the experiment measures GPU allocation")
    models = sorted({r["model"] for _, r in rows if r["model"]})
    gpu = np.full((len(rows), MAX_GPUS), -1, dtype=np.int64)
    for i, (_, r) in enumerate(rows):
        gpu[i, : r["gpu"]] = 1000
    return Cluster([r["sn"] for _, r in rows], np.array([r["cpu_milli"] for _, r in rows], dtype=np.int64),
                   np.array([r["memory_mib"] for _, r in rows], dtype=np.int64), gpu,
                   np.array([models.index(r["model"]) if r["model"] else -1 for _, r in rows]), models)


def read_pods(path: Path) -> list[Pod]:
    rows = _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    if not rows:
        raise FederationError(f"{path}: no pods")
    for line, r in rows:
        if r["num_gpu"] and not r["gpu_milli"]:
            raise FederationError(f"{path}:{line}: gpu_milli: a pod with num_gpu {r['num_gpu']} asks 1-1000 milli-GPU of each, not 0")
        if r["num_gpu"] > 1 and r["gpu_milli"] < 1000:
            raise FederationError(f"{path}:{line}: gpu_milli: {r['gpu_milli']} of {r['num_gpu']} GPUs: a pod shares at most one GPU")
    rows.sort(key=lambda lr: lr[1]["name"])
    return [Pod(r["cpu_milli"], r["memory_mib"], r["num_gpu"], r["gpu_milli"] if r["num_gpu"] else 0,
                tuple(m for m in (r.get("gpu_spec") or "").split("|") if m)) for _, r in rows]


def _rows(path: Path, need: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line, row) for each row, its whole-number columns read and checked against LIMITS."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in need if c not in (reader.fieldnames or [])]
            if missing:
                raise FederationError(f"{path}: missing column(s) {missing}")
            rows = list(enumerate(reader, 2))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise FederationError(f"{path}: cannot read: {e}") from None
    for line, r in rows:
        for c in need:
            if c not in LIMITS:
                continue
            if r[c] is None:
                raise FederationError(f"{path}:{line}: {c}: missing (the row is short)")
            try:
                r[c] = v = int(r[c])
            except ValueError:
                raise FederationError(f"{path}:{line}: {c}: {r[c]!r} is not a whole number") from None
            if not 0 <= v <= LIMITS[c]:
                raise FederationError(f"{path}:{line}: {c}: {v} is outside 0..{LIMITS[c]:,}")
    return rows


def target_workload(pods: list[Pod]) -> list[tuple[Pod, float]]:
    """The most popular (cpu, per-GPU milli, GPUs, model constraint) classes covering 95% of pods."""
    counts = Counter(Pod(p.cpu, 0, p.num, p.milli, p.spec) for p in pods)
    out, covered = [], 0
    for pod, n in counts.most_common():
        out.append((pod, n))
        covered += n
        if covered >= 0.95 * len(pods):
            break
    total = sum(n for _, n in out)
    return [(p, n / total) for p, n in out]


class Frag:
    """Vectorised node fragmentation against the target workload T (FGD, section 3.2)."""

    def __init__(self, cluster: Cluster, target: list[tuple[Pod, float]]):
        self.milli = np.array([p.milli if p.num else 0 for p, _ in target])[:, None, None]
        self.num = np.array([p.num for p, _ in target])[:, None]
        self.cpu = np.array([p.cpu for p, _ in target])[:, None]
        self.p = np.array([w for _, w in target])[:, None]
        self.model_ok = np.array([[not p.spec or m in p.spec for m in cluster.models] for p, _ in target])

    def of(self, gpu: np.ndarray, cpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        valid = gpu >= 0
        free = np.where(valid, gpu, 0)
        total = free.sum(axis=1)
        fits = (free[None] >= self.milli) & valid[None]
        can = (cpu[None] >= self.cpu) & self.model_ok[:, model] & (self.num > 0) & (fits.sum(axis=2) >= self.num)
        part = (free[None] * (free[None] < self.milli)).sum(axis=2)
        return (self.p * np.where(can, part, total[None])).sum(axis=0)


def _feasible(c: Cluster, pod: Pod, model_ok: np.ndarray) -> np.ndarray:
    ok = (c.cpu >= pod.cpu) & (c.mem >= pod.mem)
    if pod.num:
        need = 1000 if pod.milli >= 1000 else pod.milli
        ok &= model_ok & ((c.gpu >= need).sum(axis=1) >= pod.num)
    return ok


def in_simulator_order(c: Cluster, rng: np.random.Generator) -> Cluster:
    """The cluster as the published simulator creates it: nodes sorted by name, then each renamed
    with a random permutation's index in front (`%04d-`), so that "the first node by name wins a
    tie" breaks ties in a random order fixed for the run, not in the trace's naming order (openb
    names its nodes by model, and ties in that order cost FGD 0.16 points on the default trace)."""
    perm = rng.permutation(len(c.names))
    order = np.argsort(perm)  # the node renamed 0000- first
    return Cluster([f"{perm[i]:04d}-{c.names[i]}" for i in order], c.cpu[order], c.mem[order], c.gpu[order], c.model[order], c.models)


class Experiment:
    """One fill run. `simulator_order` names the nodes as the published simulator does (see
    `in_simulator_order`); off, the nodes keep the given order (tests that check one choice)."""

    def __init__(self, cluster: Cluster, pods: list[Pod], target: list[tuple[Pod, float]], policy: str, seed: int,
                 simulator_order: bool = True):
        if policy not in POLICIES:
            raise FederationError(f"--policy: {policy!r} is not one of {', '.join(POLICIES)}")
        self.rng = np.random.default_rng(seed)
        if simulator_order:  # drawn first, as the simulator permutes its nodes before it shuffles the pods
            cluster = in_simulator_order(cluster, self.rng)
        self.c, self.pods, self.policy = cluster, pods, policy
        self.frag = Frag(cluster, target)
        self.node_frag = self.frag.of(cluster.gpu, cluster.cpu, cluster.model)
        self.version = np.zeros(len(cluster.names), dtype=np.int64)
        self.cache: dict[Pod, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # pod -> (score, gpu, version)
        self.classes = [Counter() for _ in cluster.names]  # request classes per node (clustering)
        self.product = Scheduler(cluster) if policy == PRODUCT else None

    # ---- scores: higher is better; ties go to the first node by name ----

    def _fgd(self, pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self.c
        g, cpu, model = c.gpu[nodes], c.cpu[nodes] - pod.cpu, c.model[nodes]
        before = self.node_frag[nodes]
        if pod.num == 1 and pod.milli < 1000:
            trial = np.repeat(g[:, None, :], MAX_GPUS, axis=1)  # (n, choice, gpus)
            idx = np.arange(MAX_GPUS)
            trial[:, idx, idx] -= pod.milli
            ok = g >= pod.milli
            after = self.frag.of(trial.reshape(-1, MAX_GPUS), np.repeat(cpu, MAX_GPUS), np.repeat(model, MAX_GPUS)).reshape(-1, MAX_GPUS)
            score = np.where(ok, np.floor(_sigmoid((before[:, None] - after) / 1000) * 100), -1.0)
            choice = score.argmax(axis=1)  # the first GPU among the best
            return score[np.arange(len(nodes)), choice], choice
        after_g = g.copy()
        if pod.num:
            order = np.cumsum(after_g == 1000, axis=1)
            after_g[(after_g == 1000) & (order <= pod.num)] = 0
        return np.floor(_sigmoid((before - self.frag.of(after_g, cpu, model)) / 1000) * 100), np.full(len(nodes), -1)

    def _scores(self, pod: Pod, feasible: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        c = self.c
        if self.policy == "fgd":
            score, gpu, ver = self.cache.get(pod) or (np.zeros(len(c.names)), np.full(len(c.names), -1), np.full(len(c.names), -1))
            stale = np.flatnonzero(ver != self.version)
            if len(stale):
                s, g = self._fgd(pod, stale)
                score[stale], gpu[stale], ver[stale] = s, g, self.version[stale]
                self.cache[pod] = (score, gpu, ver)
            return np.where(feasible, score, -np.inf), gpu
        free_gpu = np.where(c.gpu >= 0, c.gpu, 0).sum(axis=1)
        if self.policy == "bestfit":
            left = 0.5 * (c.cpu - pod.cpu) / CPU_SPEC + 0.5 * (free_gpu - pod.gpu_milli) / GPU_SPEC
            return np.where(feasible, np.floor((1 - left) * 100), -np.inf), None
        if self.policy == "dotprod":
            dot = (pod.cpu / CPU_SPEC) * (c.cpu / CPU_SPEC) + (pod.gpu_milli / GPU_SPEC) * (free_gpu / GPU_SPEC)
            return np.where(feasible, -dot, -np.inf), None
        if self.policy == "packing":
            return np.where(feasible, self._packing(pod, feasible), -np.inf), None
        if self.policy == "clustering":
            return np.where(feasible, self._clustering(pod, free_gpu), -np.inf), None
        return np.where(feasible, self.rng.random(len(c.names)), -np.inf), None  # random

    def _packing(self, pod: Pod, feasible: np.ndarray) -> np.ndarray:
        """GpuPacking: shared GPUs first (100 - free share of the GPUs used / 10, at least 50), then
        free GPUs of a used node (50 - fully free GPUs taken, at least 33), then an idle node
        (33 - its GPUs); CPU-only pods score 0 everywhere."""
        score = np.zeros(len(self.c.names))
        if pod.num == 0:
            return score
        for n in np.flatnonzero(feasible):
            g = self.c.gpu[n]
            gpus = g[g >= 0]
            full = int((gpus == 1000).sum())
            if full == len(gpus):
                score[n] = max(33 - full, full)
                continue
            need, full_used, share = pod.num, 0, 0
            for i in np.argsort(gpus, kind="stable"):  # the least free first
                if need and gpus[i] >= (pod.milli if pod.milli < 1000 else 1000):
                    need -= 1
                    full_used += gpus[i] == 1000
                    share += int(gpus[i]) * 100 // 1000
            score[n] = max(50 - full_used, 33) if full_used else max(100 - share // 10, 50)
        return score

    def _clustering(self, pod: Pod, free_gpu: np.ndarray) -> np.ndarray:
        """GpuClustering: a node holding only the pod's request class (75-100), several classes
        including it (50-75), an idle node (25-50), other classes (0-25); fuller nodes higher
        within each band. CPU-only pods score 0."""
        if pod.num == 0:
            return np.zeros(len(self.c.names))
        cls = _class(pod)
        fill = 25 * (GPU_SPEC - free_gpu) // GPU_SPEC
        band = np.array([(75 if len(k) == 1 else 50) if k.get(cls) else (25 if not k else 0) for k in self.classes])
        return fill + band

    def _choose_gpus(self, node: int, pod: Pod, fgd_gpu: int) -> list[int]:
        g = self.c.gpu[node]
        if pod.num == 0:
            return []
        if pod.milli < 1000:
            fits = np.flatnonzero(g >= pod.milli)
            if self.policy == "random":
                return [int(self.rng.choice(fits))]
            if fgd_gpu >= 0:
                return [fgd_gpu]
            return [int(fits[np.argmin(g[fits])])]  # "best": the fitting GPU with the least free
        full = np.flatnonzero(g == 1000)
        if self.policy == "random":
            return sorted(int(x) for x in self.rng.choice(full, pod.num, replace=False))
        return [int(x) for x in full[: pod.num]]

    def run(self, tune: float, progress: Callable[[int, int], None] | None = None) -> list[tuple[float, float, float]]:
        c = self.c
        capacity = c.capacity_milli
        pods = self._arrivals(tune, capacity)
        model_ok = {}
        arrived = used = 0
        out = []
        for i, pod in enumerate(pods):
            arrived += pod.gpu_milli
            if self.product is not None:
                chosen = self.product.place(pod)
            else:
                if pod.spec not in model_ok:
                    allowed = [i for i, m in enumerate(c.models) if not pod.spec or m in pod.spec]
                    model_ok[pod.spec] = np.isin(c.model, allowed)
                chosen = self._baseline(pod, model_ok[pod.spec])
            if chosen is not None:
                node, gpus = chosen
                c.gpu[node, gpus] -= pod.milli if pod.milli < 1000 else 1000
                c.cpu[node] -= pod.cpu
                c.mem[node] -= pod.mem
                used += pod.gpu_milli
                self.version[node] += 1
                if pod.num:
                    self.classes[node][_class(pod)] += 1
                self.node_frag[node] = self.frag.of(c.gpu[node : node + 1], c.cpu[node : node + 1], c.model[node : node + 1])[0]
            out.append((arrived / capacity * 100, used / capacity * 100, float(self.node_frag.sum()) / capacity * 100))
            if progress is not None and (i % 200 == 0 or i == len(pods) - 1):
                progress(i + 1, len(pods))
        return out

    def _baseline(self, pod: Pod, model_ok: np.ndarray) -> tuple[int, list[int]] | None:
        feasible = _feasible(self.c, pod, model_ok)
        if not feasible.any():
            return None
        score, gpus = self._scores(pod, feasible)
        node = int(np.argmax(score))  # the first node by name among the best
        return node, self._choose_gpus(node, pod, int(gpus[node]) if gpus is not None else -1)

    def _arrivals(self, tune: float, capacity: int) -> list[Pod]:
        pods = list(self.pods)
        order = self.rng.permutation(len(pods))
        shuffled = [pods[i] for i in order]
        target = tune * capacity
        total = sum(p.gpu_milli for p in shuffled)
        if total < target:
            while True:
                p = pods[int(self.rng.integers(len(pods)))]
                if total + p.gpu_milli > target:
                    break
                shuffled.append(p)
                total += p.gpu_milli
        while total > target and shuffled:
            p = shuffled.pop(int(self.rng.integers(len(shuffled))))
            total -= p.gpu_milli
        return shuffled


class Scheduler:
    """The product's placement: each pod a one-task job, placed as `schedule()` places a gang."""

    SITE = "openb"

    def __init__(self, c: Cluster):
        nodes = [Node(name, self.SITE, "openb", c.models[c.model[i]] if c.model[i] >= 0 else None, int((c.gpu[i] >= 0).sum()),
                      int(c.cpu[i]), int(c.mem[i])) for i, name in enumerate(c.names)]
        self.cluster = ClusterState(nodes)
        self.index = {name: i for i, name in enumerate(c.names)}
        self.tally = MixTally()
        self.strategy = make_strategy(PRODUCT)
        self.n = 0

    def place(self, pod: Pod) -> tuple[int, list[int]] | None:
        self.n += 1
        job = JobSpec(f"pod-{self.n}", "openb", 1, Resources(pod.gpu_milli, pod.cpu, pod.mem), 0.0, gpu_models=pod.spec)
        if self.tally.add([job]):
            self.strategy = make_strategy(PRODUCT, self.tally.mix)
        placed = place_gang(self.cluster, job, self.SITE, self.strategy, "any")
        if placed is None:
            return None
        return self.index[placed[0].node], list(placed[0].gpus)


def _class(pod: Pod) -> str:
    return "cpu" if pod.num == 0 else ("shared" if pod.milli < 1000 else f"{pod.num}gpu")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60, 60)))


def binned(events: list[tuple[float, float, float]], top: int = 130) -> list[tuple[int, float, float]]:
    """Average the events in each integer arrived-% bin; an empty bin takes its neighbours'.
    An event's bin is its arrived % rounded (half to even), as the published analysis rounds
    (`round(x, 0)` in merge_alloc_discrete.py): bin 100 is 99.5-100.5."""
    sums: dict[int, list[float]] = {}
    for arrived, alloc, frag in events:
        b = round(arrived)
        if 0 <= b <= top:
            s = sums.setdefault(b, [0.0, 0.0, 0])
            s[0] += alloc
            s[1] += frag
            s[2] += 1
    rows = []
    for b in range(top + 1):
        near = [sums[k] for k in (b,) if k in sums] or [sums[k] for k in (b - 1, b + 1) if k in sums]
        if near:
            n = sum(s[2] for s in near)
            rows.append((b, sum(s[0] for s in near) / n, sum(s[1] for s in near) / n))
        else:
            rows.append((b, rows[-1][1] if rows else 0.0, rows[-1][2] if rows else 0.0))
    return rows


def run_frag(nodes: Path, pods_csv: Path, policy: str, seed: int, tune: float = 1.3,
             progress: Callable[[int, int], None] | None = None) -> list[tuple[int, float, float]]:
    cluster = read_nodes(nodes)
    pods = read_pods(pods_csv)
    return binned(Experiment(cluster, pods, target_workload(pods), policy, seed).run(tune, progress))


def write_csv(rows: list[tuple[int, float, float]], out: Path) -> None:
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["arrived_pct", "allocated_pct", "frag_pct"])
        for b, alloc, frag in rows:
            w.writerow([b, f"{alloc:.4f}", f"{frag:.4f}"])

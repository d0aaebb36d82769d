"""The FGD fill experiment: the fragmentation measure, each policy's choice, and the CLI."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from federation.errors import FederationError
from federation.fragsim import Cluster, Experiment, Frag, Pod, binned, read_nodes, read_pods

from .conftest import SHARED


def cluster(gpus_free: list[list[int]], cpu: int = 64_000, models: list[str] | None = None) -> Cluster:
    n = len(gpus_free)
    gpu = np.full((n, 8), -1, dtype=np.int64)
    for i, g in enumerate(gpus_free):
        gpu[i, : len(g)] = g
    return Cluster([f"n{i}" for i in range(n)], np.full(n, cpu, dtype=np.int64), np.full(n, 256 * 1024, dtype=np.int64), gpu,
                   np.zeros(n, dtype=np.int64), models or ["A100"])


SHARED_300 = Pod(1000, 0, 1, 300, ())
WHOLE_1 = Pod(1000, 0, 1, 1000, ())
CPU_ONLY = Pod(1000, 0, 0, 0, ())


def test_node_fragmentation_matches_a_hand_computation():
    c = cluster([[1000, 500, 200, 0]])
    f = Frag(c, [(SHARED_300, 0.5), (WHOLE_1, 0.25), (CPU_ONLY, 0.25)])
    # shared 300: the 200 and 0 GPUs are fragments (200); whole GPU: the partial ones (700);
    # CPU-only: all free GPU (1700). 0.5 x 200 + 0.25 x 700 + 0.25 x 1700 = 700
    assert f.of(c.gpu, c.cpu, c.model)[0] == pytest.approx(700)


def test_a_type_that_cannot_run_counts_all_free_gpu():
    c = cluster([[400, 400]], cpu=500)  # too little CPU for the 1000-milli-CPU types
    f = Frag(c, [(SHARED_300, 1.0)])
    assert f.of(c.gpu, c.cpu, c.model)[0] == pytest.approx(800)


def run_one(c: Cluster, pod: Pod, policy: str, target) -> tuple[int, list[int]]:
    exp = Experiment(c, [pod], target, policy, seed=0, simulator_order=False)
    before = c.gpu.copy()
    exp.pods = [pod]
    exp._arrivals = lambda tune, cap: [pod]
    exp.run(1.0)
    changed = np.argwhere(c.gpu != before)
    return int(changed[0][0]), sorted(int(g) for g in changed[:, 1])


def test_bestfit_takes_the_fullest_node_that_fits():
    node, _ = run_one(cluster([[1000] * 8, [0] * 6 + [1000] * 2, [0] * 4 + [1000] * 4]), WHOLE_1, "bestfit", [(WHOLE_1, 1.0)])
    assert node == 1


def test_best_gpu_choice_takes_the_fitting_gpu_with_least_free():
    _, gpus = run_one(cluster([[1000, 600, 350, 100]]), SHARED_300, "bestfit", [(SHARED_300, 1.0)])
    assert gpus == [2]


def test_fgd_keeps_whole_gpus_free_when_whole_gpu_pods_are_common():
    # a shared pod on a node with one full and one half GPU: FGD puts it on the half GPU
    _, gpus = run_one(cluster([[1000, 500]]), SHARED_300, "fgd", [(WHOLE_1, 0.9), (SHARED_300, 0.1)])
    assert gpus == [1]


def test_a_pod_that_fits_nowhere_fails_and_still_counts_as_arrived():
    c = cluster([[0, 0]])
    exp = Experiment(c, [WHOLE_1], [(WHOLE_1, 1.0)], "bestfit", seed=0, simulator_order=False)
    exp._arrivals = lambda tune, cap: [WHOLE_1]
    [(arrived, allocated, _)] = exp.run(1.0)
    assert arrived == pytest.approx(50.0) and allocated == 0.0


def test_binning_fills_an_empty_bin_from_its_neighbours():
    rows = binned([(0.5, 1.0, 2.0), (2.5, 3.0, 4.0)], top=3)
    assert rows[1] == (1, 2.0, 3.0)  # the mean of bins 0 and 2
    assert rows[0] == (0, 1.0, 2.0)


def test_an_event_falls_in_its_rounded_bin_as_the_published_analysis_bins():
    # 99.7% arrived is bin 100 (the published bin 100 is 99.5-100.5), 100.7% is bin 101
    rows = binned([(99.4, 10.0, 0.0), (99.7, 20.0, 0.0), (100.4, 30.0, 0.0), (100.7, 40.0, 0.0)], top=101)
    assert rows[99][1] == 10.0 and rows[100][1] == 25.0 and rows[101][1] == 40.0


def test_nodes_are_named_in_a_random_order_fixed_by_the_seed_as_the_simulator_names_them():
    gpus = [[1000] * (i % 3 + 1) for i in range(30)]
    c = cluster(gpus)
    runs = [Experiment(cluster(gpus), [WHOLE_1], [(WHOLE_1, 1.0)], "fgd", seed) for seed in (1, 1, 2)]
    names = [e.c.names for e in runs]
    assert names[0] == names[1] != names[2]  # the seed fixes the order; another seed, another order
    for e in runs:
        assert e.c.names == sorted(e.c.names)  # in name order, as ties are broken
        prefixes = sorted(int(n.split("-")[0]) for n in e.c.names)
        assert prefixes == list(range(30))
        for i, n in enumerate(e.c.names):  # each node keeps its own GPUs under its new name
            original = int(n.split("-n")[1])
            assert (e.c.gpu[i] >= 0).sum() == (c.gpu[original] >= 0).sum()
    assert [n.split("-")[1] for n in names[0]] != sorted(c.names, key=lambda n: int(n[1:]))  # not the given order


def test_fgd_ties_go_to_the_first_node_in_the_simulators_order():
    # four empty alike nodes: FGD scores them alike, so its first pod goes to the node named 0000-
    exp = Experiment(cluster([[1000, 1000]] * 4), [WHOLE_1], [(WHOLE_1, 1.0)], "fgd", seed=5)
    exp._arrivals = lambda tune, cap: [WHOLE_1]
    exp.run(1.0)
    used = [i for i in range(4) if (exp.c.gpu[i] == 0).any()]
    assert used == [0] and exp.c.names[0].startswith("0000-")


def test_fragmentation_aware_in_the_fill_is_the_schedulers_placement_weighted_by_the_pods_seen():
    # n0 holds H100s, n1 A100s. The first pod must run on an H100; the second may run anywhere.
    # The scheduler's strategy weighs by the pods seen so far (not by the experiment's target,
    # which here names only the second kind), so it keeps the H100 node's last GPU for the
    # pinned kind, where a fullest-node rule would take it.
    c = cluster([[1000, 1000], [1000, 1000]], models=["A100-80GB", "H100-80GB"])
    c.model = np.array([1, 0])
    pinned, anywhere = Pod(0, 0, 1, 1000, ("H100-80GB",)), Pod(0, 0, 1, 1000, ())
    exp = Experiment(c, [pinned, anywhere], [(anywhere, 1.0)], "fragmentation-aware", seed=0, simulator_order=False)
    exp._arrivals = lambda tune, cap: [pinned, anywhere]
    exp.run(1.0)
    assert c.gpu[0].tolist()[:2] == [0, 1000] and c.gpu[1].tolist()[:2] == [0, 1000]


@pytest.mark.parametrize("policy", ["fgd", "fragmentation-aware"])
def test_fedctl_frag_on_a_slice_of_the_trace(tmp_path, policy):
    openb = SHARED / "data" / "openb"
    if not (openb / "openb_pod_list_default.csv").exists():
        pytest.skip(f"{openb} is not beside this checkout")
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    for src, dst, n in ((openb / "openb_node_list_gpu_node.csv", nodes, 60), (openb / "openb_pod_list_default.csv", pods, 400)):
        with open(src) as fh:
            dst.write_text("".join(line for i, line in enumerate(fh) if i <= n))
    out = tmp_path / "frag.csv"
    r = subprocess.run([sys.executable, "-m", "federation.cli", "frag", "--nodes", str(nodes), "--pods", str(pods), "--policy", policy, "--seed", "42", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["arrived_pct", "allocated_pct", "frag_pct"]
    assert [int(r[0]) for r in rows[1:]] == list(range(131))
    allocated = [float(r[1]) for r in rows[1:]]
    assert 0 < allocated[100] <= 100


def test_fedctl_frag_rejects_an_unknown_policy(tmp_path):
    r = subprocess.run([sys.executable, "-m", "federation.cli", "frag", "--nodes", "x.csv", "--pods", "y.csv", "--policy", "worstfit", "--out", str(tmp_path / "o.csv")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--policy" in r.stderr


def test_fedctl_frag_refuses_a_negative_seed_naming_the_option(tmp_path):
    # numpy's generator refuses seeds below 0: this was an internal error after reading the CSVs
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,1024,1,500,\n")
    r = subprocess.run([sys.executable, "-m", "federation.cli", "frag", "--nodes", str(nodes), "--pods", str(pods), "--policy", "bestfit", "--seed", "-1",
                        "--out", str(tmp_path / "o.csv")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--seed" in r.stderr and "internal error" not in r.stderr


NODES_HEAD, PODS_HEAD = "sn,cpu_milli,memory_mib,gpu,model\n", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
ONE_NODE, ONE_POD = "n0,64000,262144,2,V100\n", "p0,1000,1024,1,500,\n"


@pytest.mark.parametrize("nodes, pods, error", [
    ("n0,64000,262144,9,V100\n", ONE_POD, "nodes.csv:2: gpu: 9 is outside 0..8"),  # was cut to 8 GPUs
    ("n0,64000,262144,-1,V100\n", ONE_POD, "nodes.csv:2: gpu: -1 is outside"),  # was 7 GPUs
    ("n0,64000,262144,2,V100\nn0,64000,262144,2,V100\n", ONE_POD, "nodes.csv:3: sn: node 'n0' is already on line 2"),
    ("", ONE_POD, "nodes.csv: no node has a GPU"),  # was an internal error
    ("n0,64000,262144,0,\n", ONE_POD, "nodes.csv: no node has a GPU"),
    (ONE_NODE, "", "pods.csv: no pods"),
    (ONE_NODE, "p0,1000,1024,1,2000,\n", "pods.csv:2: gpu_milli: 2000 is outside 0..1,000"),  # counted twice its GPU
    (ONE_NODE, "p0,-5,1024,1,500,\n", "pods.csv:2: cpu_milli: -5 is outside"),
    (ONE_NODE, "p0,1000,1024,2,500,\n", "pods.csv:2: gpu_milli: 500 of 2 GPUs: a pod shares at most one GPU"),
    (ONE_NODE, "p0,1000,1024,2,0,\n", "pods.csv:2: gpu_milli: a pod with num_gpu 2 asks 1-1000 milli-GPU of each, not 0"),
    (ONE_NODE, "p0,99999999999999999999999,1024,1,500,\n", "pods.csv:2: cpu_milli: 99999999999999999999999 is outside"),
    (ONE_NODE, "p0,nan,1024,1,500,\n", "pods.csv:2: cpu_milli: 'nan' is not a whole number"),
    (ONE_NODE, "p0,1000\n", "pods.csv:2: memory_mib: missing (the row is short)"),
])
def test_hostile_openb_csvs_are_refused_naming_the_file_line_and_column(tmp_path, nodes, pods, error):
    (tmp_path / "nodes.csv").write_text(NODES_HEAD + nodes)
    (tmp_path / "pods.csv").write_text(PODS_HEAD + pods)
    with pytest.raises(FederationError) as e:
        read_nodes(tmp_path / "nodes.csv")
        read_pods(tmp_path / "pods.csv")
    assert error in str(e.value)


def test_fedctl_frag_refuses_a_negative_gpu_request_instead_of_running_for_ever(tmp_path):
    # the top-up to 1.3x capacity never reached its target with a pod that gives GPUs back
    (tmp_path / "nodes.csv").write_text(NODES_HEAD + ONE_NODE)
    (tmp_path / "pods.csv").write_text(PODS_HEAD + "p0,1000,1024,1,-5,\n")
    r = subprocess.run([sys.executable, "-m", "federation.cli", "frag", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                        "--policy", "fragmentation-aware", "--out", str(tmp_path / "o.csv")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "pods.csv:2: gpu_milli: -5 is outside 0..1,000" in r.stderr

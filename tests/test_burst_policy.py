"""The pure burst policy: when, where and how much to ask for, what to give back or cancel."""

from __future__ import annotations

from dataclasses import replace

from federation.config import parse
from federation.model import CapacityRequest, Resources
from policies.burst import BurstInputs, CloudNode, InFlight, decide, prewarm_gpus

FED_TEXT = """
federation: {name: t, timezone: UTC}
sites:
  - name: idc
    kind: idc
    node_groups: [{name: a, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 1}]
  - name: cloud
    kind: simulated
    provider: {kind: simulated}
    node_groups:
      - {name: spot, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, max_nodes: 3,
         spot: true, price_usd_per_hour: 10, fallback: od}
      - {name: od, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, max_nodes: 2, price_usd_per_hour: 30}
queues:
  - {name: research, deserved: {gpu: 8}, burst: true}
  - {name: online, deserved: {gpu: 8}}
policies:
  burst: {enabled: true, pending_wait_s: 600, budget_usd_per_hour: 60, budget_usd_per_month: 1000, scale_in_idle_s: 300}
"""
FED = parse(FED_TEXT, "t.yaml")


def gang(job, tasks, queue="research", since=0.0):
    return CapacityRequest(job, queue, tasks, Resources.of(8, 8, 64), (), since)


def inputs(requests=(), nodes=(), in_flight=(), blocked=frozenset(), month=0.0, budget=60.0):
    return BurstInputs(tuple(requests), tuple(nodes), tuple(in_flight), blocked, True, budget, month)


def test_nothing_before_pending_wait_and_then_the_fewest_cheapest_nodes():
    early = decide(FED, 599, inputs([gang("j", 2)]))
    assert early.scale_up == [] and early.next_check_s == 600
    d = decide(FED, 600, inputs([gang("j", 2)]))
    [up] = d.scale_up
    assert (up.site, up.group, up.count, up.jobs) == ("cloud", "spot", 2, ("j",))


def test_queues_without_burst_never_burst():
    assert decide(FED, 10_000, inputs([gang("j", 1, queue="online")])).scale_up == []


def test_max_nodes_then_fallback_group_and_the_hourly_budget():
    d = decide(FED, 600, inputs([gang("a", 3), gang("b", 1)]))
    assert [(u.group, u.count) for u in d.scale_up] == [("spot", 3), ("od", 1)]  # 30 + 30 = 60 USD/h, at the budget
    d = decide(FED, 600, inputs([gang("a", 3), gang("b", 2)]))
    assert [(u.group, u.count) for u in d.scale_up] == [("spot", 3)]
    assert d.reasons["b"][0] == "BurstBudgetExhausted"


def test_a_blocked_group_fails_over_to_the_next():
    d = decide(FED, 600, inputs([gang("a", 1)], blocked=frozenset({("cloud", "spot")})))
    assert [(u.group, u.count) for u in d.scale_up] == [("od", 1)]


def test_the_monthly_budget_stops_scale_ups_with_its_reason():
    d = decide(FED, 600, inputs([gang("a", 1)], month=1000.0))
    assert d.scale_up == [] and d.reasons["a"][0] == "BurstBudgetExhausted"


def test_jobs_covered_by_a_request_in_flight_are_not_asked_for_twice():
    f = InFlight("r1", "cloud", "spot", 2, 600, ("a",))
    assert decide(FED, 700, inputs([gang("a", 2)], in_flight=[f])).scale_up == []


def test_idle_nodes_go_after_scale_in_idle_and_busy_ones_never():
    nodes = [CloudNode("n1", "cloud", "spot", False, 0.0), CloudNode("n2", "cloud", "spot", True, None), CloudNode("n3", "cloud", "spot", False, 200.0)]
    assert decide(FED, 400, inputs(nodes=nodes)).release == ["n1"]


def test_a_delivered_node_waiting_for_the_rest_of_its_request_is_kept():
    """A gang's first node is idle until its last one boots: releasing it would start the gang's
    wait over (the provisioning timeout bounds how long it is kept)."""
    nodes = [CloudNode("n1", "cloud", "spot", False, 0.0)]
    delivering = InFlight("r1", "cloud", "spot", 2, 0.0, ("a",))
    assert decide(FED, 400, inputs(nodes=nodes, in_flight=(delivering,))).release == []
    other_group = InFlight("r2", "cloud", "od", 2, 0.0, ("b",))
    assert decide(FED, 400, inputs(nodes=nodes, in_flight=(other_group,))).release == ["n1"]


def test_a_predicted_peak_boots_the_cheapest_gpus_ahead_within_the_budget():
    # 20 GPUs predicted beyond the fleet: 3 spot nodes (max_nodes) then the fallback, $60/h at most
    d = decide(FED, 0, replace(inputs(), prewarm_gpus=20.0))
    assert [(u.group, u.count, u.jobs) for u in d.scale_up] == [("spot", 3, ())]
    d = decide(FED, 0, replace(inputs(), prewarm_gpus=40.0))
    assert [(u.group, u.count) for u in d.scale_up] == [("spot", 3), ("od", 1)]  # 3 x 10 + 1 x 30 = the $60/h budget
    up = [CloudNode(f"n{i}", "cloud", "spot", False, 0.0) for i in range(2)]
    assert decide(FED, 0, replace(inputs(nodes=up), prewarm_gpus=16.0)).scale_up == []  # already there
    assert decide(FED, 0, replace(inputs(), prewarm_gpus=20.0, enabled=False)).scale_up == []


def test_idle_nodes_are_kept_while_the_forecast_wants_them():
    idle = [CloudNode(f"n{i}", "cloud", "spot", False, 0.0) for i in range(3)]
    assert sorted(decide(FED, 400, replace(inputs(nodes=idle), prewarm_gpus=8.0)).release) == ["n0", "n1"]
    assert decide(FED, 400, replace(inputs(nodes=idle), prewarm_gpus=24.0)).release == []


def test_the_prewarm_covers_only_what_burst_queues_are_predicted_to_want_beyond_the_fleet():
    assert prewarm_gpus(FED, {"research": 16.0, "online": 4.0}, fixed_gpus=8.0) == 12.0
    assert prewarm_gpus(FED, {"research": 4.0, "online": 16.0}, fixed_gpus=8.0) == 4.0  # online never bursts
    assert prewarm_gpus(FED, {"research": 2.0, "online": 2.0}, fixed_gpus=8.0) == 0.0


def test_a_backlog_beyond_the_queues_quota_is_not_pre_warmed():
    capped = parse(FED_TEXT.replace("{name: research, deserved: {gpu: 8}, burst: true}",
                                    "{name: research, deserved: {gpu: 8}, borrowing_limit: {gpu: 8}, burst: true}"), "t.yaml")
    # research may hold 16 GPUs at most: a predicted 40 is 16 it could use, 8 beyond the fleet
    assert prewarm_gpus(capped, {"research": 40.0, "online": 0.0}, fixed_gpus=8.0) == 8.0


BUDGETED = parse(FED_TEXT.replace("""  - {name: research, deserved: {gpu: 8}, burst: true}
""", """  - {name: labs}
  - {name: research, parent: labs, deserved: {gpu: 4}, burst: {budget_usd_per_month: 100}}
  - {name: vision, parent: labs, deserved: {gpu: 4}}
  - {name: labs-b, deserved: {gpu: 8}, burst: true}
""").replace("  - {name: labs}\n", "  - {name: labs, burst: {budget_usd_per_month: 150}}\n"), "t.yaml")


def test_a_queue_at_its_own_monthly_budget_stops_bursting_and_others_go_on():
    fed = BUDGETED
    assert fed.queue("vision").burst and fed.queue("vision").burst_budget_usd_per_month is None  # bursting is inherited, the budget not
    asks = [gang("r", 1, "research"), gang("v", 1, "vision"), gang("b", 1, "labs-b")]
    fresh = decide(fed, 600, replace(inputs(asks), queue_spend_usd={"research": 99.0}))
    assert sorted(j for u in fresh.scale_up for j in u.jobs) == ["b", "r", "v"]
    spent = decide(fed, 600, replace(inputs(asks), queue_spend_usd={"research": 100.0}))
    assert sorted(j for u in spent.scale_up for j in u.jobs) == ["b", "v"]
    assert spent.reasons["r"][0] == "BurstBudgetExhausted" and "queue research" in spent.reasons["r"][1]


def test_a_parent_budget_bounds_the_spend_of_the_queues_under_it():
    asks = [gang("r", 1, "research"), gang("v", 1, "vision"), gang("b", 1, "labs-b")]
    d = decide(BUDGETED, 600, replace(inputs(asks), queue_spend_usd={"research": 60.0, "vision": 90.0, "-": 500.0}))
    assert [j for u in d.scale_up for j in u.jobs] == ["b"]
    assert all("queue labs'" in d.reasons[j][1] for j in ("r", "v"))

"""The config loader: valid files load, each class of invalid file is named precisely."""

from __future__ import annotations

import subprocess
import sys

import pytest

from federation.config import load, parse
from federation.errors import ConfigError
from federation.model import UNLIMITED, Resources

from .conftest import CONFIGS, SHARED


@pytest.mark.parametrize("name", ["idc-aws-gcp.yaml", "local.yaml", "openb.yaml"])
def test_shipped_configs_are_valid(name):
    fed = load(CONFIGS / name)
    assert fed.sites and fed.queues


def test_the_canonical_example_is_shipped_unchanged():
    spec = SHARED / "spec" / "federation.example.yaml"
    if not spec.exists():
        pytest.skip(f"{spec} is not beside this checkout")
    assert (CONFIGS / "idc-aws-gcp.yaml").read_text() == spec.read_text()


def test_the_example_means_what_its_comments_say():
    fed = load(CONFIGS / "idc-aws-gcp.yaml")
    online = fed.queue("online")
    assert online.guarantee == Resources.of(gpu=16)
    assert online.capability.gpu_milli == 48_000 and online.capability.cpu_milli == UNLIMITED
    assert online.sites == ("idc-beijing",) and not online.burst
    vision = fed.queue("research-vision")
    assert vision.lending_limit.gpu_milli == 16_000 and vision.parent == "research"
    nlp = fed.queue("research-nlp")
    assert nlp.borrowing_limit.gpu_milli == 64_000 and nlp.lending_limit.gpu_milli == UNLIMITED
    # `burst: true` on research is what its children (where jobs go) do; they set no `sites`, nor does it
    assert nlp.burst and vision.burst and nlp.sites is None and not fed.queue("batch").sites
    aws = fed.site("aws-us-east-1")
    spot = aws.node_group("p4d-spot")
    assert spot.spot and spot.fallback == "p4d-on-demand" and spot.max_nodes == 4 and spot.boot_s == 420
    idc = fed.site("idc-beijing")
    assert idc.node_group("a100-80g").count == 8 and idc.node_group("a100-80g").mig_enabled
    assert fed.default_priority.name == "normal"
    assert not fed.priority_class("online").preemptible
    assert fed.policies.burst.budget_usd_per_hour == 150
    assert fed.policies.tidal[0].window.days == ["mon", "tue", "wed", "thu", "fri"]
    assert fed.leaf_queues == ("online", "research-nlp", "research-vision", "batch")


def test_a_parent_without_deserved_gets_the_sum_of_its_children(example_text):
    text = example_text.replace("    deserved: {gpu: 56}\n", "")
    assert parse(text).queue("research").deserved.gpu_milli == 56_000


def test_children_that_sum_to_their_parent_in_gpus_are_accepted_whatever_floats_make_of_the_sum(tmp_path):
    # ten children of 88.888 GPUs under 888.88: 888.8799999 in floats, exactly the parent in the
    # milli-GPUs the quota tree holds; `fedctl validate` refused it as "888.88, above 888.88"
    kids = "".join(f"  - {{name: k{i}, parent: p, deserved: {{gpu: 88.888}}, guarantee: {{gpu: 0.1}}}}\n" for i in range(10))
    text = ("federation: {name: f, timezone: UTC}\nsites:\n  - {name: idc, kind: idc, node_groups: "
            "[{name: g, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 512, count: 120}]}\n"
            "queues:\n  - {name: p, deserved: {gpu: 888.88}, guarantee: {gpu: 1}}\n" + kids)
    (tmp_path / "f.yaml").write_text(text)
    r = subprocess.run([sys.executable, "-m", "federation.cli", "validate", str(tmp_path / "f.yaml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert parse(text).queue("p").deserved.gpu_milli == 888_880
    over = text.replace("{name: k9, parent: p, deserved: {gpu: 88.888}", "{name: k9, parent: p, deserved: {gpu: 88.889}")
    with pytest.raises(ConfigError, match="the children's deserved sum to 888.881, above this queue's 888.88"):
        parse(over)


# (what to change in the example, the dotted path the error must name, words the message must carry)
INVALID = [
    ("an unknown key", ("  timezone: Asia/Shanghai", "  timezone: Asia/Shanghai\n  colour: blue"), "federation.colour", "unknown key"),
    ("a wrong type", ("gpus_per_node: 8\n        cpus_per_node: 128", "gpus_per_node: eight\n        cpus_per_node: 128"), "sites.0.node_groups.0.gpus_per_node", "integer"),
    ("a negative number", ("count: 4", "count: -4"), "sites.0.node_groups.1.count", "greater than or equal"),
    ("a deleted required field", ("      project: acme-ml\n", ""), "sites.2.provider.project", "missing"),
    ("broken syntax", ("  name: acme-gpu", "  name: [acme-gpu"), "", "YAML syntax"),
    ("an unknown site named by a queue", ("sites: [idc-beijing]", "sites: [idc-shanghai]"), "queues.0.sites.0", "unknown site"),
    ("children's guarantees above the parent's", ("    parent: research\n    guarantee: {gpu: 8}", "    parent: research\n    guarantee: {gpu: 12}"), "queues.1.guarantee.gpu", "children's guarantees"),
    ("guarantee above deserved", ("guarantee: {gpu: 16}\n    deserved: {gpu: 24}", "guarantee: {gpu: 30}\n    deserved: {gpu: 24}"), "queues.0.guarantee.gpu", "above deserved"),
    ("deserved above capability", ("deserved: {gpu: 24}\n    capability: {gpu: 48}", "deserved: {gpu: 50}\n    capability: {gpu: 48}"), "queues.0.deserved.gpu", "above capability"),
    ("a MIG profile the GPU model does not have", ("inference-small: {1g.10gb: 7}", "inference-small: {1g.5gb: 7}"), "policies.tidal.0.mig.idc-beijing.a100-80g.layout", "does not have"),
    ("an unknown GPU model", ("gpu_model: H100-80GB", "gpu_model: H100-81GB"), "sites.0.node_groups.1.gpu_model", "unknown GPU model"),
    ("a time window that does not parse", ('start: "22:00", end: "08:00"', 'start: "25:00", end: "08:00"'), "policies.tidal.1.window.start", "does not parse"),
    ("a cron window that does not parse", ('window: {start: "22:00", end: "08:00"}', 'window: {cron: "0 25 * * *", duration_s: 3600}'), "policies.tidal.1.window.cron", "does not parse"),
    ("a cron window without its duration", ('window: {start: "22:00", end: "08:00"}', 'window: {cron: "0 22 * * *"}'), "policies.tidal.1.window.duration_s", "needs duration_s"),
    ("a window with both forms", ('window: {start: "22:00", end: "08:00"}', 'window: {start: "22:00", end: "08:00", cron: "0 22 * * *", duration_s: 60}'), "policies.tidal.1.window", "not both"),
    ("a window that breaks the queue rules", ("online: {guarantee: {gpu: 8}, deserved: {gpu: 8}}", "online: {guarantee: {gpu: 9}, deserved: {gpu: 8}}"), "policies.tidal.1.queues.online.guarantee.gpu", "during window"),
    ("an unknown parent", ("parent: research\n    deserved: {gpu: 24}", "parent: reserch\n    deserved: {gpu: 24}"), "queues.3.parent", "unknown parent"),
    ("a duplicate key", ("  name: acme-gpu", "  name: acme-gpu\n  name: other"), "federation.name", "duplicate key"),
    ("a fallback that is not a node group", ("fallback: p4d-on-demand", "fallback: p5-on-demand"), "sites.1.node_groups.0.fallback", "not another node group"),
    ("MIG on a GPU without it", ("mig: {enabled: true}", "mig: {enabled: true}\n      - name: t4\n        gpu_model: T4\n        gpus_per_node: 4\n        cpus_per_node: 8\n        memory_gib_per_node: 64\n        count: 1\n        mig: {enabled: true}"), "sites.0.node_groups.1.mig.enabled", "does not support MIG"),
    ("an unknown time zone", ("timezone: Asia/Shanghai", "timezone: Mars/Olympus"), "federation.timezone", "unknown time zone"),
    ("a provider kind the site kind cannot take", ("    provider:\n      kind: aws", "    provider:\n      kind: gcp\n      project: x\n      zones: [a]\n      kind2: aws"), "sites.1.provider.kind2", "unknown key"),
]


@pytest.mark.parametrize("what,change,path,words", INVALID, ids=[c[0] for c in INVALID])
def test_each_invalid_config_class_is_rejected_naming_the_field(example_text, what, change, path, words):
    old, new = change
    assert old in example_text, f"the test's anchor for {what} is not in the example"
    with pytest.raises(ConfigError) as e:
        parse(example_text.replace(old, new, 1), "f.yaml")
    problems = e.value.problems
    assert any(p.path == path and words in p.message for p in problems), [str(p) for p in problems]
    for p in problems:
        assert str(p).startswith("f.yaml:") and p.line is not None


def test_an_error_line_points_at_the_offending_line(example_text):
    text = example_text.replace("count: 4", "count: -4")
    lineno = next(i for i, line in enumerate(text.splitlines(), 1) if "count: -4" in line)
    with pytest.raises(ConfigError) as e:
        parse(text, "f.yaml")
    assert e.value.problems[0].line == lineno


def run_fedctl(*args):
    return subprocess.run([sys.executable, "-m", "federation.cli", *args], capture_output=True, text=True, timeout=120)


def test_fedctl_validate_exits_0_on_the_shipped_configs():
    r = run_fedctl("validate", *(str(p) for p in sorted(CONFIGS.glob("*.yaml"))))
    assert r.returncode == 0, r.stdout + r.stderr


def test_fedctl_validate_prints_one_line_per_problem_and_exits_2(tmp_path, example_text):
    bad = tmp_path / "bad.yaml"
    bad.write_text(example_text.replace("  timezone: Asia/Shanghai", "  timezone: Asia/Shanghai\n  colour: blue").replace("count: 4", "count: -1"))
    r = run_fedctl("validate", str(bad))
    assert r.returncode == 2
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"{bad}:") for line in lines)
    assert "Traceback" not in r.stdout + r.stderr


def test_a_child_queue_takes_sites_and_burst_from_its_nearest_ancestor_unless_it_sets_them():
    text = (CONFIGS / "idc-aws-gcp.yaml").read_text().replace(
        "    weight: 1\n    burst: true\n  - name: research-nlp", "    weight: 1\n    burst: true\n    sites: [idc-beijing, gcp-us-central1]\n  - name: research-nlp"
    ).replace("    parent: research\n    deserved: {gpu: 24}", "    parent: research\n    deserved: {gpu: 24}\n    burst: false\n    sites: [idc-beijing]")
    fed = parse(text)
    assert fed.queue("research-nlp").sites == ("idc-beijing", "gcp-us-central1") and fed.queue("research-nlp").burst
    assert fed.queue("research-vision").sites == ("idc-beijing",) and not fed.queue("research-vision").burst


@pytest.mark.parametrize("rates,path,words", [
    ("{nope: 1.0}", "sites.0.provider.group_failure_rates.nope", "no node group 'nope'"),
    ("{od: 1.5}", "sites.0.provider.group_failure_rates.od", "less than or equal"),
    ("{od: .nan}", "sites.0.provider.group_failure_rates.od", ""),
])
def test_a_simulated_clouds_failure_rate_per_group_names_a_group_and_is_a_probability(rates, path, words):
    check_simulated_provider(f"group_failure_rates: {rates}", path, words)


@pytest.mark.parametrize("lifetimes,path,words", [
    ("{nope: 60}", "sites.0.provider.group_lifetimes_s.nope", "no node group 'nope'"),
    ("{od: 0}", "sites.0.provider.group_lifetimes_s.od", "greater than 0"),
    ("{od: .inf}", "sites.0.provider.group_lifetimes_s.od", ""),
])
def test_a_simulated_clouds_node_lifetimes_name_a_group_and_are_positive(lifetimes, path, words):
    check_simulated_provider(f"group_lifetimes_s: {lifetimes}", path, words)


def check_simulated_provider(setting: str, path: str, words: str) -> None:
    text = f"""
federation: {{name: t, timezone: UTC}}
sites:
  - name: cloud
    kind: simulated
    provider: {{kind: simulated, {setting}}}
    node_groups:
      - {{name: od, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, max_nodes: 2}}
queues: [{{name: q}}]
"""
    with pytest.raises(ConfigError) as e:
        parse(text, "f.yaml")
    assert any(p.path == path and words in p.message for p in e.value.problems), [str(p) for p in e.value.problems]


def test_a_node_group_names_its_rack_or_spreads_over_racks_not_both():
    text = """
federation: {name: t, timezone: UTC}
sites:
  - name: idc
    kind: idc
    node_groups: [{name: g, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 2, rack: r1, racks: 2}]
queues: [{name: q}]
"""
    with pytest.raises(ConfigError) as e:
        parse(text, "f.yaml")
    assert any(p.path == "sites.0.node_groups.0.rack" and "not both" in p.message for p in e.value.problems)

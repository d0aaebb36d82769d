"""fedctl as people and scripts use it: --version, exit codes that tell bad input (2) from an
unreachable controller (3), --json on the read commands, defaults that mean what the help says,
and messages that read the same piped."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from federation.config import parse
from federation.runtime.api import Serving
from federation.runtime.controller import Controller
from federation.runtime.localray import free_port
from federation.store import Store

from .conftest import CONFIGS
from .test_controller_faults import CONFIG, FakeSite


def fedctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "federation.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_version_names_the_package_and_ray():
    r = fedctl("--version")
    assert r.returncode == 0 and r.stdout.startswith("gpu-federation ") and "Ray 2." in r.stdout


def test_an_unreachable_controller_exits_3_and_bad_input_exits_2_in_one_unwrapped_line(tmp_path):
    r = fedctl("status", "--address", "http://127.0.0.1:9")
    assert r.returncode == 3 and "no federation answers at http://127.0.0.1:9" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1  # piped: not wrapped at 80 columns
    (tmp_path / "bad.yaml").write_text("federation: {name: x}\n")
    assert fedctl("validate", str(tmp_path / "bad.yaml")).returncode == 2


def test_tidal_preview_names_its_own_option_when_the_start_is_not_a_time():
    r = fedctl("tidal", "preview", "--config", str(CONFIGS / "idc-aws-gcp.yaml"), "--from", "2026-02-30T00:00")
    assert r.returncode == 2 and "--from: '2026-02-30T00:00' is not an ISO 8601 time" in r.stderr, r.stderr  # it said --start


def test_tidal_preview_starts_on_the_next_monday_by_default():
    fed = parse((CONFIGS / "idc-aws-gcp.yaml").read_text())
    r = fedctl("tidal", "preview", "--config", str(CONFIGS / "idc-aws-gcp.yaml"), "--hours", "1", "--json")
    assert r.returncode == 0, r.stderr
    first = datetime.fromisoformat(json.loads(r.stdout)[0]["time"])
    today = datetime.now(ZoneInfo(fed.timezone)).date()
    assert first.weekday() == 0 and today < first.date() <= today + timedelta(days=7) and (first.hour, first.minute) == (0, 0)


@pytest.fixture
def served(tmp_path):
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": FakeSite()})
    c.submit({"entrypoint": "x", "submission_id": "a", "metadata": {"queue": "research", "gpus_per_task": "4"}})
    s = Serving(c, "127.0.0.1", free_port(), cycle_s=0.2)
    yield s.url
    s.close()


def test_status_and_explain_print_json_for_scripts(served):
    import time

    time.sleep(0.5)  # a cycle admits the job
    r = fedctl("status", "--address", served, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"sites", "queues", "jobs"} <= set(doc) and [j["job"] for j in doc["jobs"]["running"]] == ["a"]
    r = fedctl("explain", "a", "--address", served, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "RUNNING"


def test_compare_prints_json_figure_by_figure(tmp_path):
    for name, waited in (("a", 10.0), ("b", 25.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"wait_s": {"p50": waited}, "jobs": {"submitted": 3}}))
    r = fedctl("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["wait_s.p50"] == {"a": 10.0, "b": 25.0, "change": 15.0}


DEEP_REPORT = '{"jobs": {"submitted": 1}, "x": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}"


@pytest.mark.parametrize("text, words", [
    ("[1, 2]", "not a simulation report"),  # was an internal error
    ("{}", "not a simulation report"),  # was an empty table
    ("[" * 100_000 + "]" * 100_000, "not a readable report (nested too deeply)"),  # was an internal error
    ('{"jobs": 3}', "not a simulation report"),
])
def test_compare_refuses_what_is_not_a_report_naming_the_file(tmp_path, text, words):
    (tmp_path / "a.json").write_text(text)
    r = fedctl("compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"))
    assert r.returncode == 2 and f"{tmp_path / 'a.json'}: {words}" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_compare_reads_a_report_as_deep_as_json_allows(tmp_path):
    (tmp_path / "a.json").write_text(DEEP_REPORT)
    r = fedctl("compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs.submitted"] == {"a": 1, "b": 1, "change": 0}


def test_status_for_a_person_shows_sites_running_jobs_and_spend(served):
    import time

    time.sleep(0.5)
    r = fedctl("status", "--address", served)
    assert r.returncode == 0, r.stderr
    for words in ("sites", "idc", "running jobs", "research", "this month's spend 0.00 USD"):
        assert words in r.stdout, r.stdout
    site_row = next(line for line in r.stdout.splitlines() if line.strip("│ ").startswith("idc"))
    assert "16" in site_row and "4" in site_row  # 2 nodes x 8 GPUs; the job holds 4


def test_fedctl_schema_is_a_json_schema_the_canonical_config_meets_and_a_typo_breaks():
    import jsonschema
    import yaml

    r = fedctl("schema")
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    doc = yaml.safe_load((CONFIGS / "idc-aws-gcp.yaml").read_text())
    jsonschema.validate(doc, schema)
    doc["queues"][0]["deserverd"] = {"gpu": 1}
    with pytest.raises(jsonschema.ValidationError, match="deserverd"):
        jsonschema.validate(doc, schema)


def test_simulate_takes_site_outages_and_refuses_bad_ones_by_name(tmp_path):
    """`--outage SITE@AT_S+FOR_S`: the site is silent; past site_lost_timeout_s (900 s by default)
    what ran there is queued again (SiteLost) and the events say when it went silent and came back."""
    config = tmp_path / "f.yaml"
    config.write_text(CONFIG)
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"id": "a", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 8, "duration_s": 3000}) + "\n")
    r = fedctl("simulate", "-c", str(config), "--trace", str(trace), "--out", str(tmp_path / "out"), "--no-html", "--outage", "idc@100+1000")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    seen = [(e["t"], e["type"], e.get("reason")) for e in events if e["type"] in ("site_unreachable", "requeue", "site_answers", "admit")]
    assert seen == [(0, "admit", None), (100, "site_unreachable", None), (1000, "requeue", "SiteLost"), (1100, "site_answers", None),
                    (1100, "admit", None)]
    assert not any(json.loads(r.stdout)["invariants"].values())
    for bad, says in [("idc", "expected SITE@AT_S+FOR_S"), ("mars@1+2", "no site 'mars'"), ("idc@nan+5", "finite"),
                      ("idc@5+-1", "finite number > 0"), ("idc@x+1", "are seconds")]:
        r = fedctl("simulate", "-c", str(config), "--trace", str(trace), "--out", str(tmp_path / "bad"), "--outage", bad)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)


def test_bench_scale_runs_as_a_user_runs_it_and_admits_into_a_full_federation():
    r = fedctl("bench", "scale", "--nodes", "300", "--jobs", "3000", "--rounds", "3", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert 0 < out["admitted"] < 3000 and out["running"] >= out["admitted"]
    assert out["waiting"] + out["running"] == 3000 + 3 * 100  # every job is either waiting or running
    assert "full cycle:" in r.stderr and "incremental cycle" in r.stderr and "full cycle again over all" in r.stderr
    assert out["full_again_s"] > 0
    for bad in (("--rounds", "0"), ("--nodes", "-5"), ("--jobs", "0")):  # a usage error naming the option, not a traceback
        r = fedctl("bench", "scale", *bad)
        assert r.returncode == 2 and bad[0] in r.stderr and "internal error" not in r.stderr, r.stderr


@pytest.mark.parametrize("args, option", [
    (("trace", "generate", "--jobs", "-3"), "--jobs"),
    (("trace", "generate", "--days", "-1"), "--days"),  # it wrote submit times below 0, which simulate then refused
    (("trace", "generate", "--days", "nan"), "--days"),
    (("mig", "plan", "--gpu", "A100-80GB", "--gpus", "100000000", "--demand", "1g.10gb=1", "--json"), "--gpus"),  # ran for ever
])
def test_numbers_out_of_range_are_usage_errors_naming_the_option(args, option, tmp_path):
    if args[0] == "trace":
        args = (*args, "--out", str(tmp_path / "t.jsonl"))
    r = fedctl(*args, timeout=60)
    assert r.returncode == 2 and option in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_an_output_path_that_cannot_be_written_is_an_error_naming_it_not_an_internal_error(tmp_path):
    (tmp_path / "adir").mkdir()
    r = fedctl("trace", "generate", "--jobs", "5", "--out", str(tmp_path / "adir"))
    assert r.returncode == 2 and r.stderr.strip() == f"error: {tmp_path / 'adir'}: Is a directory", r.stderr
    trace = tmp_path / "t.jsonl"
    assert fedctl("trace", "generate", "--jobs", "5", "--out", str(trace)).returncode == 0
    r = fedctl("simulate", "--config", str(CONFIGS / "idc-aws-gcp.yaml"), "--trace", str(trace), "--out", "/proc/no-such-dir", "--no-html")
    assert r.returncode == 2 and "error: /proc/no-such-dir" in r.stderr and "internal error" not in r.stderr, r.stderr

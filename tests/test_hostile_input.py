"""Hostile and broken input, each a named 4xx or a `FILE:LINE` error, never a 500, a hang or a
silent change: API payloads, configs, traces. (Each case was a 500, a hang, a job stuck after
being accepted, or a silently changed request before.)"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from federation.config import parse
from federation.runtime.api import make_app
from federation.runtime.controller import Controller
from federation.store import Store

from .test_controller_faults import CONFIG, FakeSite


@pytest.fixture
def post(tmp_path):
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": FakeSite()})

    def call(body, raw: bytes | None = None):
        async def go():
            async with TestClient(TestServer(make_app(c, None))) as client:
                data = raw if raw is not None else json.dumps(body).encode()
                r = await client.post("/api/jobs/", data=data, headers={"Content-Type": "application/json"})
                return r.status, await r.text()
        return asyncio.run(go())

    call.store = c.store
    return call


def job(**meta):
    return {"entrypoint": "python x.py", "metadata": {"queue": "research", **meta}}


HOSTILE = [
    # numbers that are not numbers, or not these numbers
    (job(gpus_per_task="nan"), "metadata.gpus_per_task: Input should be a finite number"),
    (job(gpus_per_task="inf"), "metadata.gpus_per_task: Input should be a finite number"),
    (job(gpus_per_task="1e308"), "metadata.gpus_per_task: Input should be less than or equal to 1024"),
    (job(gpus_per_task="0.0001"), "gpus_per_task: 0.0001 is not a whole number of thousandths"),
    (job(tasks="2.7"), "metadata.tasks: Input should be a valid integer"),
    (job(tasks="true"), "metadata.tasks: Input should be a valid integer"),
    (job(tasks=True), "metadata.tasks: bool is not a string"),
    (job(tasks="0"), "metadata.tasks: Input should be greater than or equal to 1"),
    (job(preemptible="maybe"), "metadata.preemptible: Input should be a valid boolean"),
    # wrong shapes
    ({"entrypoint": "x", "metadata": "research"}, "metadata: must be a JSON object"),
    ({"entrypoint": "x", "metadata": {"queue": ["research"]}}, "metadata.queue: list is not a string"),
    ({**job(), "submission_id": ["a"]}, "submission_id: \"['a']\" is not an id"),
    ({**job(), "submission_id": {"a": 1}}, "is not an id"),
    ([1, 2], "the request body must be a JSON object"),
    ({**job(), "runtime_env": {"env_vars": {"A": {"b": {"c": {}}}}, "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}},
     "runtime_env: nested deeper than 32 levels"),
    # ids a site would choke on
    ({**job(), "submission_id": "a/b"}, "submission_id: 'a/b' is not an id"),
    ({**job(), "submission_id": "../x"}, "submission_id: '../x' is not an id"),
    ({**job(), "submission_id": "x" * 10_000}, "is not an id"),
    # what a site would refuse at dispatch, after the job's wait
    ({**job(), "entrypoint": "echo " + "x" * 5_000_000}, "entrypoint: 5,000,005 bytes"),
    # Ray's options: honoured or refused by name, never dropped
    ({**job(tasks="2"), "entrypoint_num_cpus": 2}, "entrypoint_num_cpus: asks for the entrypoint's resources, but this job is a gang"),
    ({**job(), "entrypoint_resources": {"TPU": 1}}, "entrypoint_resources: custom resources are not scheduled"),
    ({**job(gpus_per_task="2"), "entrypoint_num_gpus": 1}, "entrypoint_num_gpus: 1, but metadata.gpus_per_task says 2"),
    ({**job(), "entrypoint_num_gpus": "lots"}, "entrypoint_num_gpus: 'lots' is not a number"),
]


@pytest.mark.parametrize("body,words", HOSTILE, ids=[w[:40] for _, w in HOSTILE])
def test_a_hostile_submission_is_a_400_naming_the_field_and_nothing_is_stored(post, body, words):
    status, text = post(body)
    assert status in (400, 413) and words in text, (status, text)
    assert post.store.jobs() == []


@pytest.mark.parametrize("raw,words", [
    (b'{"entrypoint": "x", "metadata": {"queue": "research", "gpus_per_task": NaN}}', "NaN, which is not JSON"),
    (b'{"entrypoint": "x", "metadata": {"queue": "research", "gpus_per_task": Infinity}}', "Infinity, which is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"\xff\xfe not utf-8", "not JSON"),
    (b"{", "not JSON"),
])
def test_a_body_that_is_not_json_is_a_400_not_a_500(post, raw, words):
    status, text = post(None, raw)
    assert status == 400 and words in text, (status, text)


def test_a_huge_body_is_refused_before_it_is_read_whole(post):
    status, text = post(None, b'{"entrypoint": "' + b"x" * (17 * 1024**2) + b'"}')
    assert status == 413 and "at most" in text


def test_a_duplicate_submission_id_is_a_400_as_ray_answers_and_the_first_job_is_kept(post):
    first = {**job(gpus_per_task="1"), "submission_id": "same-1"}
    assert post(first)[0] == 200
    status, text = post({**job(gpus_per_task="2"), "submission_id": "same-1"})
    assert status == 400 and "a job 'same-1' exists already" in text
    assert [r.request.get("gpus_per_task") for r in post.store.jobs()] == [1.0]


def test_ray_entrypoint_resources_of_a_one_task_job_become_its_request(post):
    body = {**job(), "submission_id": "opts", "entrypoint_num_gpus": 2, "entrypoint_num_cpus": 4, "entrypoint_memory": 8 * 1024**3}
    assert post(body)[0] == 200
    [row] = post.store.jobs()
    assert row.request == {"queue": "research", "gpus_per_task": 2, "cpus_per_task": 4, "memory_gib_per_task": 8.0}


@pytest.fixture
def log_handlers():
    """The `federation` logger's handlers as they were before the test: what it added is closed."""
    import logging

    root = logging.getLogger("federation")
    kept = list(root.handlers)
    yield
    for h in set(root.handlers) - set(kept):
        root.removeHandler(h)
        h.close()


def test_the_journal_and_the_log_are_readable_by_their_owner_alone(tmp_path, log_handlers):
    import logging

    from federation.runtime.actors import _log_to_file, log_path

    old = tmp_path / "old.sqlite"
    old.write_bytes(b"")
    old.chmod(0o644)  # as an earlier release made it
    Store(old)
    _log_to_file(str(old))
    logging.getLogger("federation.test").warning("a line")
    assert 'level=warning logger=federation.test msg="a line"' in log_path(old).read_text()
    for path in (old, log_path(old), tmp_path / "new.sqlite"):
        if not path.exists():
            Store(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_a_site_actors_provider_logs_to_the_federations_log(tmp_path, log_handlers):
    """The provider is built in the site actor's process (actors._provider): its records, as the
    controller's, go to <state>.log, which `fedctl up` follows (they went nowhere before)."""
    import logging

    from federation.config import load
    from federation.runtime.actors import _provider, log_path

    state = tmp_path / "s.sqlite"
    fed = load(Path(__file__).parent / "data" / "small.yaml")
    _provider(fed, "cloud", str(state), str(tmp_path / "tf"))
    logging.getLogger("federation.providers").info("cloud: request r1 delivered")
    assert 'level=info logger=federation.providers msg="cloud: request r1 delivered"' in log_path(state).read_text()


def test_a_journal_from_a_newer_release_is_refused_not_misread(tmp_path):
    import sqlite3

    from federation.errors import FederationError

    db = sqlite3.connect(tmp_path / "future.sqlite")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(FederationError, match="written by a newer gpu-federation"):
        Store(tmp_path / "future.sqlite")


def fedctl(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "federation.cli", *args], capture_output=True, text=True, timeout=timeout)


BOMB = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                 + [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)])


@pytest.mark.parametrize("text,words", [
    (BOMB, "expands to more than 200,000 values"),
    ("a: " + "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("a: " + "[" * 100 + "]" * 100, "nested deeper than 64 levels"),
    ("queues:\n" + "  - {name: q, deserved: {gpu: 1}}\n" * 200_000, "a federation config is at most"),
])
def test_fedctl_validate_refuses_a_hostile_config_at_once_naming_the_problem(tmp_path, text, words):
    (tmp_path / "bad.yaml").write_text(text)
    r = fedctl("validate", str(tmp_path / "bad.yaml"), timeout=30)  # it hung for minutes, or took gigabytes, before
    assert r.returncode == 2 and words in r.stdout + r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


SIM_CONFIG = CONFIG


@pytest.mark.parametrize("line,words", [
    ('"duration_s": Infinity', "duration_s: Input should be a finite number"),
    ('"duration_s": NaN', "duration_s: Input should be a finite number"),
    ('"duration_s": 1e300', "duration_s: Input should be less than or equal to"),
    ('"duration_s": 10, "submit_s": 1e300', "submit_s: Input should be less than or equal to"),
    ('"duration_s": 10, "tasks": true', "tasks: Value error, must be a whole number"),
    ('"duration_s": 10, "tasks": 2.7', "tasks: Input should be a valid integer"),
])
def test_fedctl_simulate_refuses_a_hostile_trace_line_by_its_line(tmp_path, line, words):
    (tmp_path / "fed.yaml").write_text(SIM_CONFIG)
    base = '{"id": "a", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 1, ' + line + "}"
    base = base.replace('"submit_s": 0, ', "", 1) if '"submit_s": 1e300' in line else base
    base = base.replace('"tasks": 1, ', "", 1) if '"tasks"' in line else base
    (tmp_path / "t.jsonl").write_text('{"id": "ok", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 1, "duration_s": 5}\n' + base + "\n")
    r = fedctl("simulate", "--config", str(tmp_path / "fed.yaml"), "--trace", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "out"), "--no-html")
    assert r.returncode == 2 and f"t.jsonl:2: {words}" in r.stderr, r.stderr[-2000:]


OPENB_POD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np0,1000,1024,1,1000,,LS,Running,0,100,0\n"


@pytest.mark.parametrize("mapping, words", [
    (["=research"], "--qos-queue: '=research' is not QOS=QUEUE"),  # ran, mapping nothing
    (["LS=nope"], "--qos-queue: 'LS=nope': 'nope' is not a leaf queue"),  # every line refused, one by one
    (["LS=research,BE=research"], "'research,BE=research' is not a leaf queue"),
    (["LS=research", "LS=research"], "--qos-queue: LS is mapped twice"),
])
def test_fedctl_simulate_refuses_a_qos_mapping_that_names_no_queue(tmp_path, mapping, words):
    (tmp_path / "fed.yaml").write_text(SIM_CONFIG)
    (tmp_path / "pods.csv").write_text(OPENB_POD)
    args = [a for m in mapping for a in ("--qos-queue", m)]
    r = fedctl("simulate", "--config", str(tmp_path / "fed.yaml"), "--trace", str(tmp_path / "pods.csv"), "--trace-format", "openb",
               "--out", str(tmp_path / "out"), "--no-html", *args)
    assert r.returncode == 2 and words in r.stderr and "problems in all" not in r.stderr, r.stderr[-2000:]

"""Authorization on every route of the API: per-queue tokens (read and write, or read only), an
admin token, nothing anonymous when tokens are configured. Before, a token guarded submit and
package upload only: anyone could stop, delete or read any job, its env_vars included."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from federation.config import parse
from federation.errors import FederationError
from federation.runtime.access import load_tokens, subtrees
from federation.runtime.api import make_app
from federation.runtime.controller import Controller
from federation.store import Store

from .test_controller_faults import SITES, FakeSite

CONFIG = "federation: {name: access, timezone: UTC}" + SITES + """queues:
  - {name: research, deserved: {gpu: 8}}
  - {name: train, parent: research, deserved: {gpu: 8}}
  - {name: batch, deserved: {gpu: 8}}
"""

TOKENS = """
research: tok-research          # a parent queue's token holds for its children (train)
batch:
  - tok-batch
  - {token: tok-batch-read, scope: read}
"*": tok-admin
"""

SECRET = {"env_vars": {"DB_PASSWORD": "hunter2"}}


@pytest.fixture
def api(tmp_path):
    fed = parse(CONFIG)
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    tokens = load_tokens(str(tmp_path / "tokens.yaml"), subtrees(fed))
    c = Controller(fed, Store(tmp_path / "s.db"), {"idc": FakeSite()})
    for job_id, queue in (("t1", "train"), ("b1", "batch")):
        c.submit({"entrypoint": "sleep 9", "submission_id": job_id, "metadata": {"queue": queue}, "runtime_env": SECRET})
    c.tick()

    def call(method: str, path: str, token: str | None = None, json=None):
        async def go():
            async with TestClient(TestServer(make_app(c, tokens))) as client:
                r = await client.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {}, json=json)
                return r.status, await r.text()
        return asyncio.run(go())

    return call


READS = [("GET", "/api/jobs/t1"), ("GET", "/api/jobs/t1/logs"), ("GET", "/api/federation/jobs/t1/explain")]
WRITES = [("POST", "/api/jobs/t1/stop"), ("DELETE", "/api/jobs/t1")]


@pytest.mark.parametrize("method,path", READS + WRITES + [("GET", "/api/jobs/"), ("GET", "/api/federation/status"), ("GET", "/metrics"),
                                                          ("PUT", "/api/packages/gcs/_ray_pkg_x.zip"), ("GET", "/api/packages/gcs/_ray_pkg_x.zip")])
def test_no_route_but_the_version_answers_without_a_token_or_with_an_unknown_one(api, method, path):
    assert api(method, path)[0] == 401
    assert api(method, path, "not-a-token")[0] == 401


def test_the_version_answers_anyone_as_the_stock_cli_asks_it_first(api):
    assert api("GET", "/api/version")[0] == 200


def test_the_status_page_answers_anyone_and_holds_no_data(api):
    status, text = api("GET", "/")
    assert status == 200 and "api/federation/status" in text and "t1" not in text and "research" not in text


@pytest.mark.parametrize("method,path", READS + WRITES)
def test_another_queues_token_gets_403_on_a_job(api, method, path):
    status, text = api(method, path, "tok-batch")
    assert status == 403 and "'train'" in text


@pytest.mark.parametrize("method,path", READS)
def test_a_parent_queues_token_reads_its_childrens_jobs_and_the_admin_reads_all(api, method, path):
    assert api(method, path, "tok-research")[0] == 200
    assert api(method, path, "tok-admin")[0] == 200


def test_a_read_only_token_reads_but_cannot_stop_delete_or_submit(api):
    assert api("GET", "/api/jobs/b1", "tok-batch-read")[0] == 200
    assert api("POST", "/api/jobs/b1/stop", "tok-batch-read")[0] == 403
    assert api("DELETE", "/api/jobs/b1", "tok-batch-read")[0] == 403
    assert api("POST", "/api/jobs/", "tok-batch-read", {"entrypoint": "true", "metadata": {"queue": "batch"}})[0] == 403


def test_a_token_submits_and_stops_on_its_own_queue_only(api):
    body = {"entrypoint": "true", "metadata": {"queue": "train"}}
    assert api("POST", "/api/jobs/", "tok-batch", body)[0] == 403
    assert api("POST", "/api/jobs/", "tok-research", body)[0] == 200
    assert api("POST", "/api/jobs/b1/stop", "tok-batch")[0] == 200


def test_a_list_shows_only_the_jobs_of_the_tokens_queues_and_their_secrets_only_to_them(api):
    import json

    status, text = api("GET", "/api/jobs/", "tok-batch")
    assert status == 200 and [j["submission_id"] for j in json.loads(text)] == ["b1"]
    assert {j["submission_id"] for j in json.loads(api("GET", "/api/jobs/", "tok-admin")[1])} == {"t1", "b1"}
    assert "hunter2" not in api("GET", "/api/jobs/t1", "tok-batch")[1]


def test_status_shows_every_queues_totals_but_only_the_tokens_jobs(api):
    import json

    doc = json.loads(api("GET", "/api/federation/status", "tok-batch")[1])
    assert {q["name"] for q in doc["queues"]} == {"research", "train", "batch"}
    assert {r["job"] for r in doc["running"]} == {"b1"}


@pytest.mark.parametrize("text,words", [
    ("nope: tok", "nope: no such queue"),
    ("batch: [{token: x, scope: admin}]", "scope 'admin' is not read or write"),
    ("batch: [{scope: read}]", "batch[0]: a token is a string"),
    ("- a\n- b", "must map queue names"),
])
def test_a_bad_tokens_file_is_refused_naming_the_entry(tmp_path, text, words):
    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(FederationError, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_tokens(str(tmp_path / "t.yaml"), subtrees(parse(CONFIG)))


def test_a_queue_is_paused_or_resumed_by_whoever_may_write_its_jobs(api):
    assert api("POST", "/api/federation/queues/train/pause")[0] == 401
    assert api("POST", "/api/federation/queues/train/pause", "tok-batch")[0] == 403
    assert api("POST", "/api/federation/queues/batch/drain", "tok-batch-read")[0] == 403
    assert api("POST", "/api/federation/queues/train/pause", "tok-research") == (200, '{"queue": "train", "stopped": "pause"}')
    assert api("POST", "/api/federation/queues/train/resume", "tok-admin") == (200, '{"queue": "train", "stopped": null}')
    assert api("POST", "/api/federation/queues/nope/pause", "tok-admin")[0] == 404
    assert api("POST", "/api/federation/queues/train/explode", "tok-admin")[0] in (404, 405)

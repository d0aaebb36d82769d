"""The status page at `/`, as a person sees it: a real headless Chromium (Debian's package) loads
it from a served controller and runs its script; the test reads the page it drew."""

from __future__ import annotations

import shutil
import subprocess
import tempfile

import pytest

from federation.config import parse
from federation.runtime.access import load_tokens, subtrees
from federation.runtime.api import Serving
from federation.runtime.controller import Controller
from federation.store import Store

from .test_controller_faults import CONFIG, FakeSite
from .test_live import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian's chromium package has it)")


def rendered(url: str) -> str:
    """The page's DOM once its script has run (Chromium's virtual time lets the fetch finish)."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                            "--virtual-time-budget=4000", "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.fixture
def served(tmp_path):
    def serve(tokens=None):
        fed = parse(CONFIG)
        c = Controller(fed, Store(tmp_path / "s.db"), {"idc": FakeSite()})
        for i, gpus in enumerate((8, 4, 8)):
            c.submit({"entrypoint": "x", "submission_id": f"job-{i}", "metadata": {"queue": "research", "gpus_per_task": str(gpus)}})
        c.tick()
        if tokens is not None:
            (tmp_path / "tokens.yaml").write_text(tokens)
            tokens = load_tokens(str(tmp_path / "tokens.yaml"), subtrees(fed))
        made.append(s := Serving(c, "127.0.0.1", free_port(), cycle_s=0.5, tokens=tokens))
        return s.url

    made: list[Serving] = []
    yield serve
    for s in made:
        s.close()


def test_the_page_draws_queues_sites_and_jobs_with_their_reasons(served):
    dom = rendered(served() + "/")
    assert "gpu-federation: faults" in dom
    assert "12 / 16" in dom  # research uses 12 of its 16 deserved GPUs, and the site 12 of 16
    for job in ("job-0", "job-1", "job-2"):
        assert f"<td>{job}</td>" in dom
    assert "<td>WaitingForCapacity</td>" in dom and 'class="bad">cannot read' not in dom


def test_with_tokens_the_page_holds_no_data_and_asks_for_one(served):
    dom = rendered(served(tokens="research: tok-research\n") + "/")
    assert 'id="login" style="display: block;"' in dom and "job-0" not in dom

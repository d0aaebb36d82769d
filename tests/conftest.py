from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
# the canonical example and the public data sit beside the checkout (../shared)
SHARED = Path(os.environ.get("FEDERATION_SHARED", ROOT.parent / "shared"))


@pytest.fixture
def example_text() -> str:
    return (CONFIGS / "idc-aws-gcp.yaml").read_text()


# CI runs the property tests on a fixed sequence of examples, so a submission lands or not on
# its own merits; locally they explore new examples each run.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

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

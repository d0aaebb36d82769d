"""The config reference is generated from the schema, so it says what `fedctl validate` accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from federation.schema import FederationSpec

DOC = Path(__file__).parent.parent / "docs" / "config.md"


def test_every_key_of_the_config_has_a_description():
    defs = FederationSpec.model_json_schema()["$defs"]
    missing = [f"{model}.{key}" for model, d in defs.items() for key, p in d.get("properties", {}).items() if not p.get("description")]
    assert not missing


def test_docs_config_md_is_what_fedctl_schema_markdown_prints_now():
    r = subprocess.run([sys.executable, "-m", "federation.cli", "schema", "--markdown"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == DOC.read_text(), "docs/config.md is stale: run `fedctl schema --markdown > docs/config.md`"
    # every key the schema has is in it, under the path a user writes it at
    for key in ("borrow_within_cohort_max_priority", "stale_gang_grace_s", "budget_usd_per_month", "head_boot_s", "prepare_s"):
        assert f"| `{key}` |" in r.stdout
    assert "## `sites[].provider (kind: aws).cluster`" in r.stdout and "## `policies.tidal[].window`" in r.stdout

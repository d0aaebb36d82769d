"""The README's set-up commands are the ones CI runs."""

from __future__ import annotations

from .conftest import ROOT

COMMANDS = ("python -m pip install -e '.[dev]' && fedctl demo", "python -m pip install -e '.[dev]' && python -m pytest")


def test_ci_runs_the_readme_commands_verbatim():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    for command in COMMANDS:
        assert command in readme and command in ci

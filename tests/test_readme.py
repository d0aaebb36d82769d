"""The README's set-up commands are the ones CI runs."""

from __future__ import annotations

from .conftest import ROOT

COMMANDS = ("python -m pip install -e '.[dev]' && fedctl demo", "python -m pip install -e '.[dev]' && python -m pytest")


def test_ci_runs_the_readme_commands_verbatim():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    for command in COMMANDS:
        assert command in readme and command in ci


def test_every_command_the_readme_lists_exists():
    import re
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    commands = sorted(set(re.findall(r"^\| `fedctl ((?:mig |trace |tidal |bench )?[a-z]+)", readme, flags=re.M)))
    assert len(commands) >= 12
    for cmd in commands:
        r = subprocess.run([sys.executable, "-m", "federation.cli", *cmd.split(), "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"fedctl {cmd}: {r.stdout}{r.stderr}"

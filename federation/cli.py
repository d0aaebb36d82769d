"""`fedctl`: the command line. Each command is a thin shell over a library call.

Users never see a traceback: project errors print their message (exit 2 for bad input), and an
unexpected error prints one line (set FEDCTL_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from federation import config as config_mod
from federation.errors import ConfigError, FederationError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Federate GPU capacity across an IDC and public clouds.")
mig_app = typer.Typer(no_args_is_help=True, help="MIG profiles and partition planning.")
app.add_typer(mig_app, name="mig")
err = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Federation config (default: the embedded configs/local.yaml).")]


def load_config(path: Path | None):
    """Load a config or exit 2 with one line per problem."""
    return config_mod.load(path or config_mod.default_config_path())


def print_json(doc: object) -> None:
    """--json output: only the document on standard output."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="Config files to check.")]) -> None:
    """Check config files: exit 0 when all are valid, 2 with `FILE:LINE:COLUMN: path: message` lines."""
    bad = False
    for f in files:
        try:
            fed = config_mod.load(f)
        except ConfigError as e:
            bad = True
            for p in e.problems:
                typer.echo(str(p))
            continue
        err.print(f"{f}: valid ({len(fed.sites)} sites, {len(fed.queues)} queues)")
    raise typer.Exit(2 if bad else 0)


@mig_app.command("profiles")
def mig_profiles(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model, e.g. A100-80GB.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The MIG profiles of a GPU model with their allowed placements (as `nvidia-smi mig -lgipp`)."""
    from federation.mig.catalog import CATALOG

    spec = CATALOG.get(gpu)
    if spec is None:
        raise FederationError(f"--gpu: {gpu!r} has no MIG profiles; MIG models are {sorted(CATALOG)}")
    doc = {
        "gpu": spec.gpu,
        "memory_slices": spec.memory_slices,
        "compute_slices": spec.compute_slices,
        "profiles": {p.name: {"compute": p.compute, "memory": p.memory, "max": p.max_count, "placements": p.placements} for p in spec.profiles.values()},
    }
    if as_json:
        print_json(doc)
        return
    from rich.table import Table

    table = Table(title=f"{spec.gpu}: {spec.compute_slices} compute / {spec.memory_slices} memory slices")
    for col in ("profile", "compute", "memory", "max", "placements"):
        table.add_column(col)
    for name, p in doc["profiles"].items():
        table.add_row(name, str(p["compute"]), str(p["memory"]), str(p["max"]), " ".join(f"{s}:{n}" for s, n in p["placements"]))
    Console().print(table)


def main() -> None:
    try:
        code = app(standalone_mode=False)  # click returns the exit code instead of exiting
    except ConfigError as e:
        for p in e.problems:
            err.print(str(p), markup=False, highlight=False)
        sys.exit(2)
    except FederationError as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        sys.exit(130)
    except typer.exceptions.TyperException as e:  # usage errors: typer prints them as click does
        if hasattr(e, "show"):
            e.show()
        sys.exit(getattr(e, "exit_code", 2))
    except Exception as e:  # the last line of defence: no traceback reaches a user
        if os.environ.get("FEDCTL_DEBUG"):
            raise
        err.print(f"internal error: {type(e).__name__}: {e} (set FEDCTL_DEBUG=1 for the traceback)", markup=False, highlight=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

"""What the CLI shows people: stderr and stdout consoles that read the same piped as on a
terminal (no 80-column wrapping, no silent minutes), progress, and live redraws."""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager

from rich.console import Console

err = Console(stderr=True)
if not err.is_terminal:  # piped: messages (a `ray job submit` hint among them) are not wrapped at 80 columns
    err.width = 10_000


def out() -> Console:
    """Standard output for people; tables are not squeezed to 80 columns when piped."""
    c = Console()
    if not c.is_terminal:
        c.width = max(c.width, 160)
    return c


def print_json(doc: object) -> None:
    """--json output: only the document on standard output."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


@contextmanager
def progress(label: str, unit: str, total: int | None):
    """A progress bar on a terminal; piped (CI, `| tee`), a plain line at each tenth of the way,
    so a long run is never silent. Yields `update(done, total=None)`."""
    if err.is_terminal:
        from rich.progress import BarColumn, Progress, TextColumn

        with Progress(TextColumn(label), BarColumn(), TextColumn(f"{{task.completed}}/{{task.total}} {unit}"), console=err, transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda done, of=None: bar.update(task, completed=done, total=of or total)
        return
    began, shown = time.monotonic(), [-1]

    def update(done: int, of: int | None = None) -> None:
        whole = of or total
        if whole and (tenth := 10 * done // whole) > shown[0]:
            shown[0] = tenth
            err.print(f"{label}: {done:,}/{whole:,} {unit} ({10 * tenth}%) after {time.monotonic() - began:.0f} s", soft_wrap=True)

    yield update


def redraw(con, render, every_s: float) -> None:
    """Redraw in place on a terminal; piped, print each state once, with its time."""
    from rich.console import Group
    from rich.live import Live

    if not con.is_terminal:
        while True:
            con.print(f"--- {time.strftime('%H:%M:%S')}")
            for item in render():
                con.print(item)
            time.sleep(every_s)
    with Live(Group(*render()), console=con, refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(every_s)
            live.update(Group(*render()))

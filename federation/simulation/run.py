"""`fedctl simulate` as a function: trace in, report.json, events.jsonl and report.html out."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from federation.errors import FederationError
from federation.model import Federation
from federation.simulation.engine import SimOptions, SimResult, Simulator
from federation.simulation.invariants import Checker, check, tidal_queues
from federation.simulation.report import build_report, write_html
from federation.simulation.traces import Trace


def simulate(fed: Federation, trace: Trace, out: Path | None, options: SimOptions | None = None, html: bool = True) -> tuple[dict, SimResult]:
    """Run, check and report. With `out`, each event is written to events.jsonl and checked as it
    happens, none kept in memory (the result's `events` is then empty); without, they are kept."""
    opts = options or SimOptions()
    began = time.perf_counter()
    if out is None:
        sim = Simulator(fed, trace, opts)
        res = sim.run()
        invariants = check(res.events, fed, tidal_queues(fed, sim.start))
    else:
        out.mkdir(parents=True, exist_ok=True)
        with (out / "events.jsonl").open("w", encoding="utf-8") as fh:
            def on_event(e: dict) -> None:
                fh.write(json.dumps(e, separators=(",", ":")) + "\n")
                checker.feed(e)

            sim = Simulator(fed, trace, replace(opts, on_event=on_event))
            checker = Checker(fed, tidal_queues(fed, sim.start))
            res = sim.run()
        invariants = checker.result()
    report = build_report(res, invariants, time.perf_counter() - began)
    if out is not None:
        report["wall_s"] = round(time.perf_counter() - began, 3)
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if html:
            write_html(report, res, out / "report.html", f"Simulation of {fed.name} ({fed.source})")
    return report, res


def parse_start(text: str | None, option: str = "--start") -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise FederationError(f"{option}: {text!r} is not an ISO 8601 time such as 2026-01-05T00:00") from None

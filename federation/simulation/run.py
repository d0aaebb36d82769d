"""`fedctl simulate` as a function: trace in, report.json, events.jsonl and report.html out."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from federation.errors import FederationError
from federation.model import Federation
from federation.simulation.engine import SimOptions, SimResult, Simulator
from federation.simulation.invariants import check, tidal_queues
from federation.simulation.report import build_report, write_events, write_html
from federation.simulation.traces import Trace


def simulate(fed: Federation, trace: Trace, out: Path | None, options: SimOptions | None = None, html: bool = True) -> tuple[dict, SimResult]:
    opts = options or SimOptions()
    began = time.perf_counter()
    sim = Simulator(fed, trace, opts)
    res = sim.run()
    invariants = check(res.events, fed, tidal_queues(fed, sim.start))
    report = build_report(res, invariants, time.perf_counter() - began)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_events(res.events, out / "events.jsonl")
        report["wall_s"] = round(time.perf_counter() - began, 3)
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if html:
            write_html(report, res, out / "report.html", f"Simulation of {fed.name} ({fed.source})")
    return report, res


def parse_start(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise FederationError(f"--start: {text!r} is not an ISO 8601 time such as 2026-01-05T00:00") from None

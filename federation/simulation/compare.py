"""`fedctl compare`: two simulation reports side by side."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from federation.errors import FederationError


def load_report(d: Path) -> dict:
    path = d / "report.json" if d.is_dir() else d
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FederationError(f"{path}: no report.json here; run fedctl simulate --out {d} first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise FederationError(f"{path}: not a readable report ({'nested too deeply' if isinstance(e, RecursionError) else e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), dict):
        raise FederationError(f"{path}: not a simulation report (it has no \"jobs\" figures); fedctl simulate --out DIR writes one")
    return doc


def flatten(doc: dict) -> dict[str, float]:
    """Every number of a nested report by its dotted path (walked without recursion: a report is
    read from a file, and any depth JSON allows must not overflow the stack)."""
    out: dict[str, float] = {}
    stack = [("", doc)]
    while stack:
        prefix, d = stack.pop()
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                stack.append((key + ".", v))
            elif isinstance(v, int | float) and not isinstance(v, bool):
                out[key] = v
    return out


def compare_figures(a: Path, b: Path) -> dict[str, dict]:
    """Every figure of two reports: {figure: {"a", "b", "change"}} (None where a report lacks it)."""
    fa, fb = flatten(load_report(a)), flatten(load_report(b))
    return {k: {"a": fa.get(k), "b": fb.get(k), "change": fb[k] - fa[k] if k in fa and k in fb else None}
            for k in sorted(set(fa) | set(fb), key=lambda k: (k.split(".")[0], k))}


def compare_reports(a: Path, b: Path) -> Table:
    fa, fb = flatten(load_report(a)), flatten(load_report(b))
    table = Table(title=f"{a}  vs  {b}")
    for col in ("figure", str(a), str(b), "change"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for key in sorted(set(fa) | set(fb), key=lambda k: (k.split(".")[0], k)):
        va, vb = fa.get(key), fb.get(key)
        change = ""
        if va is not None and vb is not None:
            change = f"{vb - va:+.4g}" + (f" ({(vb - va) / va:+.0%})" if va else "")
        table.add_row(key, "-" if va is None else f"{va:.6g}", "-" if vb is None else f"{vb:.6g}", change)
    return table

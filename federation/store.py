"""The SQLite journal of the live controller: every job and every decision, written before acting.

One row per job. The controller writes a decision (admitted, with its placements and the
dispatch id it will use) before it acts on it, so that after a restart it can replay and
reconcile: a job whose dispatch id the site already knows is not dispatched again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("id", "entrypoint", "metadata", "runtime_env", "request", "status", "reason", "message", "site", "placements",
           "dispatch_id", "submitted_s", "started_s", "ended_s", "attempt", "stop_at_s")
JSON_COLUMNS = {"metadata", "runtime_env", "request", "placements"}
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


@dataclass
class JobRow:
    id: str
    entrypoint: str
    metadata: dict
    runtime_env: dict
    request: dict  # the arguments of federation.jobs.make_job
    status: str = "PENDING"  # PENDING | ADMITTED | RUNNING | SUCCEEDED | FAILED | STOPPED
    reason: str | None = None
    message: str | None = None
    site: str | None = None
    placements: list | None = None
    dispatch_id: str | None = None
    submitted_s: float = 0.0
    started_s: float | None = None
    ended_s: float | None = None
    attempt: int = 0
    stop_at_s: float | None = None  # set while a preempted job is within its grace period


class Store:
    def __init__(self, path: str | Path = ":memory:"):
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "id" else c for c in COLUMNS)
        self._db.execute(f"CREATE TABLE IF NOT EXISTS jobs ({cols})")

    def _row(self, values: tuple) -> JobRow:
        d = dict(zip(COLUMNS, values, strict=True))
        for c in JSON_COLUMNS:
            d[c] = json.loads(d[c]) if d[c] is not None else None
        return JobRow(**d)

    def insert(self, row: JobRow) -> tuple[JobRow, bool]:
        """Add a job; an id already present returns the stored row (submissions are idempotent)."""
        with self._lock:
            cur = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id = ?", (row.id,)).fetchone()
            if cur is not None:
                return self._row(cur), False
            values = [json.dumps(getattr(row, c)) if c in JSON_COLUMNS and getattr(row, c) is not None else getattr(row, c) for c in COLUMNS]
            self._db.execute(f"INSERT INTO jobs VALUES ({', '.join('?' for _ in COLUMNS)})", values)
            return row, True

    def update(self, job_id: str, **fields) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        values = [json.dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in fields.items()]
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*values, job_id])

    def get(self, job_id: str) -> JobRow | None:
        with self._lock:
            cur = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._row(cur) if cur else None

    def jobs(self, statuses: set[str] | None = None) -> list[JobRow]:
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs ORDER BY submitted_s, id").fetchall()
        out = [self._row(r) for r in rows]
        return [r for r in out if statuses is None or r.status in statuses]

    def delete(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

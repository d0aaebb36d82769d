"""The SQLite journal of the live controller: every job and every decision, written before acting.

One row per job. The controller writes a decision (admitted, with its placements and the
dispatch id it will use) before it acts on it, so that after a restart it can replay and
reconcile: a job whose dispatch id the site already knows is not dispatched again.

The live jobs (not yet ended) are also kept in memory, written through: every cycle reads them
all, and decoding thousands of rows each time held up submissions. So the jobs table has one
writer, the process that owns this Store (the queue controller); other processes may read it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from federation.errors import FederationError

COLUMNS = ("id", "entrypoint", "metadata", "runtime_env", "request", "status", "reason", "message", "site", "placements",
           "dispatch_id", "submitted_s", "started_s", "ended_s", "attempt", "stop_at_s", "retries", "not_before_s",
           "preempted_for")
JSON_COLUMNS = {"metadata", "runtime_env", "request", "placements"}
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
LIVE = {"PENDING", "ADMITTED", "RUNNING"}

#: the journal's layout version (SQLite's user_version). A file from an older version is brought
#: up to date by MIGRATIONS[v] (the statements from v to v + 1) when opened; one from a newer
#: version is refused rather than misread. Version 1 is the layout every release so far wrote.
SCHEMA_VERSION = 3
MIGRATIONS: dict[int, list[str]] = {
    1: ["ALTER TABLE jobs ADD COLUMN retries", "ALTER TABLE jobs ADD COLUMN not_before_s"],  # retries of failed runs
    2: ["ALTER TABLE jobs ADD COLUMN preempted_for"],  # what a preempted job's capacity goes to
}


def connect(path: str | Path) -> sqlite3.Connection:
    """The journal's SQLite connection. The file holds entrypoints and env vars (secrets, often):
    it is made readable by its owner alone, and so are SQLite's -wal and -shm files beside it,
    which take the main file's permissions."""
    if str(path) != ":memory:":
        Path(path).touch(mode=0o600, exist_ok=True)
        os.chmod(path, 0o600)  # a file made by an earlier release was 0644
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    found = db.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise FederationError(f"{path}: this journal was written by a newer gpu-federation (layout {found}; this one reads up to "
                              f"{SCHEMA_VERSION}); upgrade, or give --state a new file")
    # 0 is a new file (no tables yet: they are made in the newest layout), or one from before
    # versions were written, which has layout 1
    has_jobs = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").fetchone() is not None
    for v in range(max(found, 1), SCHEMA_VERSION if has_jobs else 1):
        for statement in MIGRATIONS[v]:
            db.execute(statement)
    if found < SCHEMA_VERSION:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return db


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
    retries: int = 0  # failed runs run again so far
    not_before_s: float | None = None  # a retry's back-off: it waits until then
    preempted_for: str | None = None  # while stopping: the job it was preempted for


class Store:
    def __init__(self, path: str | Path = ":memory:"):
        self._lock = threading.Lock()
        self._db = connect(path)
        cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "id" else c for c in COLUMNS)
        self._db.execute(f"CREATE TABLE IF NOT EXISTS jobs ({cols})")
        self._db.execute("CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status)")  # each cycle reads the live jobs only
        # runtime_env packages (working_dir, py_modules) uploaded by clients, kept until dispatched jobs are done with them
        self._db.execute("CREATE TABLE IF NOT EXISTS packages (name TEXT PRIMARY KEY, data BLOB, uploaded_s REAL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS queue_stops (queue TEXT PRIMARY KEY, policy TEXT, since_s REAL)")
        # each MIG GPU's layout, journaled before a backend applies it: state APPLYING (with the
        # layout it had before, kept on a failure) or READY
        self._db.execute("CREATE TABLE IF NOT EXISTS mig_layouts (node TEXT, gpu INTEGER, layout TEXT, previous TEXT, state TEXT, "
                         "since_s REAL, PRIMARY KEY (node, gpu))")
        # runs left at a site that did not answer when their jobs were queued again elsewhere: stopped once it answers
        self._db.execute("CREATE TABLE IF NOT EXISTS orphans (site TEXT, dispatch_id TEXT, since_s REAL, PRIMARY KEY (site, dispatch_id))")
        self._live: dict[str, JobRow] | None = None  # id -> row of the live jobs, read at first use, by submission
        self._unsorted = False  # a row joined `_live` out of submission order: sort it before it is read

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
            if self._live is not None and row.status in LIVE:
                self._add_live(replace(row))  # rows handed out are never changed in place
            return row, True

    def update(self, job_id: str, **fields) -> None:
        with self._lock:
            self._update(job_id, fields)

    #: updates per transaction in `update_many`: short enough that submissions (and the cloud
    #: ledger, a writer on another connection) wait milliseconds for the store, not seconds
    BATCH = 2_000

    def update_many(self, updates: list[tuple[str, dict]]) -> None:
        """Updates in transactions of up to BATCH: one commit (one sync of the journal) each, where
        one each held the store, and with it every submission, for a third of a millisecond
        apiece (a cycle writes the reasons of thousands of newly waiting jobs at once). A
        transaction that fails is undone whole; those before it stay."""
        for start in range(0, len(updates), self.BATCH):
            with self._lock:
                self._db.execute("BEGIN")
                try:
                    for job_id, fields in updates[start:start + self.BATCH]:
                        self._update(job_id, fields)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    self._live = None  # the mirror may hold what was rolled back: read it afresh
                    raise
                self._db.execute("COMMIT")

    def _update(self, job_id: str, fields: dict) -> None:
        """The caller holds the lock."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        values = [json.dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in fields.items()]
        self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*values, job_id])
        if self._live is not None:
            row = self._live.get(job_id)
            if row is None and fields.get("status") in LIVE:  # an ended job back in play
                cur = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id = ?", (job_id,)).fetchone()
                row = self._row(cur) if cur else None
            elif row is not None:
                row = replace(row, **fields)
                self._unsorted |= "submitted_s" in fields
            if row is None or row.status not in LIVE:
                self._live.pop(job_id, None)
            elif job_id in self._live:
                self._live[job_id] = row  # keeps its place
            else:
                self._add_live(row)

    def _add_live(self, row: JobRow) -> None:
        """The caller holds the lock. Rows come almost always in submission order, so the mirror
        is kept in it and read without sorting tens of thousands of rows each cycle."""
        if self._live:
            last = self._live[next(reversed(self._live))]
            self._unsorted |= (row.submitted_s, row.id) < (last.submitted_s, last.id)
        self._live[row.id] = row

    def get(self, job_id: str) -> JobRow | None:
        with self._lock:
            if self._live is not None and job_id in self._live:
                return self._live[job_id]
            cur = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._row(cur) if cur else None

    def jobs(self, statuses: set[str] | None = None, ended_after: float | None = None) -> list[JobRow]:
        """Jobs with these statuses (all when None), by submission; with `ended_after`, only
        those still going or ended since (the journal keeps every job it ever had)."""
        if ended_after is not None:
            with self._lock:
                found = self._fetch(statuses, ended_after)
            return [self._row(r) for r in found]
        if statuses is not None and statuses <= LIVE:
            with self._lock:
                if self._live is None:
                    self._live, self._unsorted = {r.id: r for r in map(self._row, self._fetch(LIVE))}, False  # fetched in order
                if self._unsorted:
                    self._live = {r.id: r for r in sorted(self._live.values(), key=lambda r: (r.submitted_s, r.id))}
                    self._unsorted = False
                if statuses == LIVE:
                    return list(self._live.values())
                return [r for r in self._live.values() if r.status in statuses]
        with self._lock:
            found = self._fetch(statuses)
        return [self._row(r) for r in found]

    def _fetch(self, statuses: set[str] | None, ended_after: float | None = None) -> list[tuple]:
        """The raw rows with these statuses (all when None); the caller holds the lock."""
        conds, args = [], []
        if statuses is not None:
            conds.append(f"status IN ({', '.join('?' for _ in statuses)})")
            args += sorted(statuses)
        if ended_after is not None:
            conds.append("(ended_s IS NULL OR ended_s >= ?)")
            args.append(ended_after)
        where = f"WHERE {' AND '.join(conds)} " if conds else ""
        return self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs {where}ORDER BY submitted_s, id", args).fetchall()

    def delete(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            if self._live is not None:
                self._live.pop(job_id, None)

    def set_mig(self, node: str, gpu: int, layout: list, state: str, at: float, previous: list | None = None) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO mig_layouts VALUES (?, ?, ?, ?, ?, ?)",
                             (node, gpu, json.dumps(layout), json.dumps(previous or []), state, at))

    def mig_layouts(self) -> list[tuple[str, int, list, list, str, float]]:
        """(node, gpu, layout as [[profile, start]...], previous layout, state, since) per GPU."""
        with self._lock:
            rows = self._db.execute("SELECT node, gpu, layout, previous, state, since_s FROM mig_layouts ORDER BY node, gpu").fetchall()
        return [(n, g, json.loads(lay), json.loads(prev), st, since) for n, g, lay, prev, st, since in rows]

    def stop_queue(self, queue: str, policy: str | None, at: float) -> None:
        """An operator's pause or drain of a queue (None: resumed)."""
        with self._lock:
            if policy is None:
                self._db.execute("DELETE FROM queue_stops WHERE queue = ?", (queue,))
            else:
                self._db.execute("INSERT OR REPLACE INTO queue_stops VALUES (?, ?, ?)", (queue, policy, at))

    def stopped_queues(self) -> dict[str, str]:
        with self._lock:
            return dict(self._db.execute("SELECT queue, policy FROM queue_stops").fetchall())

    def add_orphan(self, site: str, dispatch_id: str, at: float) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO orphans VALUES (?, ?, ?)", (site, dispatch_id, at))

    def orphans(self) -> list[tuple[str, str]]:
        with self._lock:
            return self._db.execute("SELECT site, dispatch_id FROM orphans ORDER BY since_s").fetchall()

    def drop_orphan(self, site: str, dispatch_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM orphans WHERE site = ? AND dispatch_id = ?", (site, dispatch_id))

    def put_package(self, name: str, data: bytes, at: float) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO packages VALUES (?, ?, ?)", (name, data, at))

    def package(self, name: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM packages WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def has_package(self, name: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM packages WHERE name = ?", (name,)).fetchone() is not None

    def drop_packages(self, keep: set[str], uploaded_before: float) -> list[str]:
        """Forget packages no job in `keep` refers to, uploaded before the cut-off (a package is
        uploaded just before its job is submitted, so a recent one may not be referred to yet)."""
        with self._lock:
            names = [n for (n,) in self._db.execute("SELECT name FROM packages WHERE uploaded_s < ?", (uploaded_before,)) if n not in keep]
            self._db.executemany("DELETE FROM packages WHERE name = ?", [(n,) for n in names])
        return names


@dataclass
class CloudRequest:
    """One capacity request to a cloud site, journaled before the provider is called.

    The ledger is the project's own idempotency: a provider asked again with a known request id
    adopts what that request already made (found by its tag) instead of launching twice, and a
    reconcile terminates tagged instances whose request the ledger does not know.
    """

    id: str
    site: str
    group: str
    count: int
    requested_s: float
    state: str = "REQUESTED"  # REQUESTED | DELIVERED | FAILED | CANCELLED | RELEASED
    nodes: list | None = None  # provider node ids made for it
    jobs: list | None = None  # the pending jobs it is for (so a restart does not ask twice for them)


REQUEST_COLUMNS = ("id", "site", "grp", "count", "requested_s", "state", "nodes", "jobs")


class RequestLedger:
    """Cloud requests in the controller's SQLite file (or in memory for tests and smoke checks)."""

    def __init__(self, path: str | Path = ":memory:"):
        self._lock = threading.Lock()
        self._db = connect(path)
        self._db.execute("CREATE TABLE IF NOT EXISTS cloud_requests (id TEXT PRIMARY KEY, site, grp, count, requested_s, state, nodes, jobs)")
        self._db.execute("CREATE TABLE IF NOT EXISTS spend (month TEXT PRIMARY KEY, usd REAL, metered_s REAL)")
        # the month's spend split by queue and by site (showback), for per-queue budgets and /metrics
        self._db.execute("CREATE TABLE IF NOT EXISTS spend_by (month TEXT, kind TEXT, name TEXT, usd REAL, PRIMARY KEY (month, kind, name))")

    def record(self, req: CloudRequest) -> CloudRequest:
        """Journal a request; a known id returns the stored one unchanged."""
        with self._lock:
            row = self._db.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM cloud_requests WHERE id = ?", (req.id,)).fetchone()
            if row is not None:
                return self._request(row)
            self._db.execute("INSERT INTO cloud_requests VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (req.id, req.site, req.group, req.count, req.requested_s, req.state, json.dumps(req.nodes), json.dumps(req.jobs)))
            return req

    def update(self, request_id: str, *, state: str | None = None, nodes: list | None = None) -> None:
        with self._lock:
            if state is not None:
                self._db.execute("UPDATE cloud_requests SET state = ? WHERE id = ?", (state, request_id))
            if nodes is not None:
                self._db.execute("UPDATE cloud_requests SET nodes = ? WHERE id = ?", (json.dumps(nodes), request_id))

    def get(self, request_id: str) -> CloudRequest | None:
        with self._lock:
            row = self._db.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM cloud_requests WHERE id = ?", (request_id,)).fetchone()
        return self._request(row) if row else None

    def requests(self, site: str | None = None, states: set[str] | None = None) -> list[CloudRequest]:
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM cloud_requests ORDER BY requested_s, id").fetchall()
        out = [self._request(r) for r in rows]
        return [r for r in out if (site is None or r.site == site) and (states is None or r.state in states)]

    @staticmethod
    def _request(row: tuple) -> CloudRequest:
        rid, site, group, count, at, state, nodes, jobs = row
        return CloudRequest(rid, site, group, count, at, state, json.loads(nodes) if nodes else None, json.loads(jobs) if jobs else None)

    # ---- the cloud bill, metered by the controller ----

    def charge(self, month: str, usd: float, at_s: float) -> None:
        """Add `usd` to the month's spend and remember when the meter last ran."""
        with self._lock:
            self._db.execute("INSERT INTO spend VALUES (?, ?, ?) ON CONFLICT(month) DO UPDATE SET usd = usd + excluded.usd, "
                             "metered_s = excluded.metered_s", (month, usd, at_s))

    def charge_by(self, month: str, kind: str, usd: dict[str, float]) -> None:
        """Add each name's `usd` to its spend of the month (`kind`: "queue" or "site")."""
        rows = [(month, kind, name, v) for name, v in usd.items() if v]
        if not rows:
            return
        with self._lock:
            self._db.executemany("INSERT INTO spend_by VALUES (?, ?, ?, ?) ON CONFLICT(month, kind, name) DO UPDATE SET usd = usd + excluded.usd", rows)

    def spend_by(self, month: str, kind: str) -> dict[str, float]:
        with self._lock:
            return dict(self._db.execute("SELECT name, usd FROM spend_by WHERE month = ? AND kind = ?", (month, kind)).fetchall())

    def spend(self, month: str) -> float:
        with self._lock:
            row = self._db.execute("SELECT usd FROM spend WHERE month = ?", (month,)).fetchone()
        return row[0] if row else 0.0

    def metered_s(self) -> float | None:
        """When the meter last ran (any month), or None if it never did."""
        with self._lock:
            row = self._db.execute("SELECT MAX(metered_s) FROM spend").fetchone()
        return row[0] if row else None

"""The federation's log: records of the standard `logging` module under the `federation` logger,
written as logfmt lines (`time=... level=info logger=... site=idc job=j1 msg="..."`) that
people read in `fedctl up` and log shippers (Loki, Vector, Datadog) parse without a pattern.
Context goes in `extra` (site, job, queue, request, node), so a line can be filtered by it."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

FIELDS = ("site", "job", "queue", "request", "node")


def _value(v: object) -> str:
    s = str(v)
    return s if s and not any(c in s for c in ' "=\n\t\\') else json.dumps(s)


class Logfmt(logging.Formatter):
    converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        out = [f"time={self.formatTime(record, '%Y-%m-%dT%H:%M:%SZ')}", f"level={record.levelname.lower()}", f"logger={record.name}"]
        out += [f"{k}={_value(getattr(record, k))}" for k in FIELDS if getattr(record, k, None) is not None]
        out.append(f"msg={_value(record.getMessage())}")
        if record.exc_info:
            out.append(f"error={_value(self.formatException(record.exc_info))}")
        return " ".join(out)


def to_file(path: str | Path) -> None:
    """Send the `federation` logger's records (info and up) to `path`, once per process. The
    file is made readable by its owner alone, as the journal: it names jobs and their errors.
    Several actors' processes append to it; each line is one O_APPEND write."""
    path = os.path.abspath(path)
    root = logging.getLogger("federation")
    if any(getattr(h, "baseFilename", None) == path for h in root.handlers):
        return
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(Logfmt())
    root.addHandler(handler)
    root.setLevel(logging.INFO)

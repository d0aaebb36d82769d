"""Errors a user can act on. Each names the input that caused it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One problem in an input file: where it is, which field, and what is wrong."""

    file: str
    line: int | None
    column: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.path or '<document>'}: {self.message}"


class FederationError(Exception):
    """Base of the errors that reach users as a message, never a traceback."""


class ConfigError(FederationError):
    """The federation config is invalid; `problems` lists every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class JobRejected(FederationError):
    """A job that can never run (unknown queue, larger than any node, ...)."""

    def __init__(self, job_id: str, field: str, message: str):
        self.job_id, self.field, self.message = job_id, field, message
        super().__init__(f"job {job_id}: {field}: {message}")


class SnapshotError(FederationError):
    """A snapshot handed to the scheduling core is inconsistent."""


class BadSubmission(FederationError):
    """A request the API answers with 4xx; `status` is the HTTP status."""

    def __init__(self, message: str, status: int = 400):
        self.status = status
        super().__init__(message)


class Unreachable(FederationError):
    """A service the command needs (the federation's API) does not answer: `fedctl` exits 3 for
    it, apart from bad input (2), so scripts can tell "try again" from "fix the command"."""

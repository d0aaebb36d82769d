"""Who may do what through the API: bearer tokens from `api.tokens_file`, each granting read or
read-and-write on some queues, or on all of them.

The file maps a queue name to its token(s) (a parent queue's hold for the queues under it);
`"*"` stands for every queue (an admin token). A
token is a string (read and write) or `{token: ..., scope: read}` (read only), alone or in a list:

    training: s3cret-training                 # submit, stop, delete, read training's jobs
    batch:
      - s3cret-batch
      - {token: batch-dashboard, scope: read}  # read batch's jobs and logs, change nothing
    "*": s3cret-admin                        # everything, every queue

Reading a job means its details (the runtime_env, where people put secrets), its logs and its
explanation; a list shows only the jobs of queues the token may read. With a tokens file, no
route but `/api/version` (which the stock CLI calls before anything else) answers without a
token: a missing or unknown token is a 401, a known token on another queue's job a 403.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from federation.errors import BadSubmission, FederationError

ALL = "*"
SCOPES = ("read", "write")


@dataclass
class Grant:
    """What one token may do: per queue (or ALL), the scopes it holds there."""

    scopes: dict[str, set[str]] = field(default_factory=dict)

    def allows(self, queue: str | None, scope: str) -> bool:
        """On a queue; with queue None, on some queue (a route that names none, such as an upload)."""
        if queue is None:
            return any(scope in s for s in self.scopes.values())
        return scope in self.scopes.get(queue, set()) | self.scopes.get(ALL, set())

    @property
    def admin(self) -> bool:
        return "write" in self.scopes.get(ALL, set())


def subtrees(fed) -> dict[str, set[str]]:
    """Each queue with the queues under it: a token for a parent queue holds for its children."""
    out = {q.name: {q.name} for q in fed.queues}
    for q in fed.queues:
        up = q.parent
        while up is not None:
            out[up].add(q.name)
            up = fed.queue(up).parent
    return out


def load_tokens(path: str | None, queues: dict[str, set[str]] | None = None) -> dict[str, Grant] | None:
    """token -> Grant, from the tokens file (None: no file, no auth); `queues` as `subtrees`
    gives them. Any problem names the file and the entry; a queue the config does not have is
    one (a typo would lock its users out)."""
    if path is None:
        return None
    p = Path(path).expanduser()
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise FederationError(f"api.tokens_file: cannot read {p}: {e}") from None
    if not isinstance(doc, dict):
        raise FederationError(f"api.tokens_file: {p} must map queue names (or \"*\") to tokens")
    grants: dict[str, Grant] = {}
    for queue, entries in doc.items():
        queue = str(queue)
        if queues is not None and queue != ALL and queue not in queues:
            raise FederationError(f"api.tokens_file: {p}: {queue}: no such queue (queues: {', '.join(queues)}; \"*\" is every queue)")
        for i, entry in enumerate(entries if isinstance(entries, list) else [entries]):
            where = f"{p}: {queue}" + (f"[{i}]" if isinstance(entries, list) else "")
            token, scope = (entry, "write") if isinstance(entry, str | int) else (
                (entry.get("token"), entry.get("scope", "write")) if isinstance(entry, dict) else (None, None))
            if not isinstance(token, str | int) or not str(token).strip():
                raise FederationError(f"api.tokens_file: {where}: a token is a string, or {{token: ..., scope: read|write}}")
            if scope not in SCOPES:
                raise FederationError(f"api.tokens_file: {where}: scope {scope!r} is not read or write")
            grant = grants.setdefault(str(token).strip(), Grant())
            for q in (queues or {}).get(queue, {queue}):
                grant.scopes.setdefault(q, set()).update(("read", "write") if scope == "write" else ("read",))
    return grants


class Access:
    """The API's checks, one per route: `who` finds the caller's grant, `require` enforces it."""

    def __init__(self, tokens: dict[str, Grant] | None):
        self.tokens = tokens

    @property
    def on(self) -> bool:
        return self.tokens is not None

    def who(self, authorization: str | None) -> Grant | None:
        """The caller's grant; None when auth is off. A 401 for a missing or unknown token."""
        if self.tokens is None:
            return None
        auth = authorization or ""
        if not auth.startswith("Bearer "):
            raise BadSubmission("Authorization: Bearer <token> is required "
                                "(ray job submit --headers '{\"Authorization\": \"Bearer <token>\"}')", status=401)
        grant = self.tokens.get(auth.removeprefix("Bearer ").strip())
        if grant is None:
            raise BadSubmission("this token is not known to the federation", status=401)
        return grant

    def require(self, authorization: str | None, queue: str | None, scope: str) -> Grant | None:
        grant = self.who(authorization)
        if grant is not None and not grant.allows(queue, scope):
            what = "submit to, stop or delete jobs of" if scope == "write" else "read jobs of"
            raise BadSubmission(f"this token may not {what} " + (f"queue {queue!r}" if queue else "any queue"), status=403)
        return grant

    def readable(self, grant: Grant | None, queue: str) -> bool:
        return grant is None or grant.allows(queue, "read")

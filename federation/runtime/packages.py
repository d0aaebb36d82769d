"""runtime_env packages (`ray job submit --working-dir`, `py_modules`): the federation keeps what
clients upload, since a job's site is not known until it is admitted, and hands each package
to the site's Ray cluster just before dispatch, through the same REST paths Ray's client uses."""

from __future__ import annotations

import re

from federation.errors import BadSubmission

PROTOCOL = "gcs"  # what Ray's client uses for uploaded local directories and files
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
#: Ray's own limit for an uploaded package (ray._private.ray_constants.GCS_STORAGE_MAX_SIZE)
MAX_BYTES = 512 * 1024 * 1024


def package_name(protocol: str, name: str) -> str:
    """The stored name of an uploaded package; a 400 for what Ray's client would never send."""
    if protocol != PROTOCOL:
        raise BadSubmission(f"package protocol {protocol!r}: only {PROTOCOL!r} packages are uploaded; other URIs are fetched by the site itself")
    if not NAME.match(name):
        raise BadSubmission(f"package name {name!r}: letters, digits, '_', '.' and '-' only")
    return name


def referenced(runtime_env: dict | None) -> list[str]:
    """Names of the uploaded packages a runtime_env refers to (working_dir and py_modules)."""
    env = runtime_env if isinstance(runtime_env, dict) else {}
    modules = env.get("py_modules")
    uris = [env.get("working_dir"), *(modules if isinstance(modules, list) else [])]
    prefix = f"{PROTOCOL}://"
    return [u.removeprefix(prefix) for u in uris if isinstance(u, str) and u.startswith(prefix)]

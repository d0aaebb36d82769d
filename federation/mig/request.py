"""What `fedctl mig plan` is asked, checked as an operator writes it: the demand (NAME=COUNT,...)
and the current layouts (a JSON file). A NaN start, a list where a number goes, a profile named
twice: each is refused naming the option and the place, never handed to the planner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from federation.errors import FederationError
from federation.jobs import problems
from federation.mig.catalog import MAX_PLAN_GPUS

MAX_COUNT = 10_000_000  # instances of one profile: 7 per GPU on 100,000 GPUs is 700,000


class Instance(BaseModel):
    """One MIG instance a GPU holds now."""

    model_config = ConfigDict(extra="forbid")

    profile: Annotated[StrictStr, Field(min_length=1, max_length=63)]
    start: Annotated[StrictInt, Field(ge=0, le=7)]  # the first memory slice: 0-7 on every MIG GPU
    busy: StrictBool = False


class Current(BaseModel):
    """The file: `fedctl mig plan --json`'s own output reads back (its other keys are ignored)."""

    layouts: Annotated[list[Annotated[list[Instance], Field(max_length=8)]], Field(max_length=MAX_PLAN_GPUS)]


_BARE = TypeAdapter(Current.model_fields["layouts"].annotation)


def parse_demand(text: str) -> dict[str, int]:
    wanted: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        name, sep, count = item.partition("=")
        name, count = name.strip(), count.strip()
        if not sep or not name or not count.isdigit():
            raise FederationError(f"--demand: {item!r} is not NAME=COUNT (e.g. 1g.10gb=7)")
        if name in wanted:
            raise FederationError(f"--demand: {name} is named twice; give each profile once")
        if int(count) > MAX_COUNT:
            raise FederationError(f"--demand: {name}={count}: at most {MAX_COUNT:,} instances of a profile")
        wanted[name] = int(count)
    return wanted


def read_current(path: Path) -> list[list[dict]]:
    """One list of {"profile", "start", "busy"} per GPU, from {"layouts": [...]} or the bare list."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FederationError(f"--current: {path}: {e if not isinstance(e, RecursionError) else 'nested too deeply'}") from None
    try:
        layouts = Current.model_validate(doc).layouts if isinstance(doc, dict) else _BARE.validate_python(doc)
    except ValidationError as e:
        where, msg = problems(e)[0]
        raise FederationError(f"--current: {path}: {where}: {msg}") from None
    return [[i.model_dump() for i in gpu] for gpu in layouts]

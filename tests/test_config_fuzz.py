"""Bad input never escapes as anything but the project's ConfigError."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federation.config import parse
from federation.errors import ConfigError
from federation.model import Federation

from .conftest import CONFIGS

EXAMPLE = (CONFIGS / "idc-aws-gcp.yaml").read_text()
EXAMPLE_DATA = yaml.safe_load(EXAMPLE)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.text(max_size=12))
documents = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)


def loads_or_config_error(text: str) -> None:
    try:
        assert isinstance(parse(text, "fuzz.yaml"), Federation)
    except ConfigError as e:
        assert e.problems and all(str(p).startswith("fuzz.yaml") for p in e.problems)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_random_yaml_documents_load_or_raise_config_error(doc):
    loads_or_config_error(yaml.safe_dump(doc))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text_loads_or_raises_config_error(text):
    loads_or_config_error(text)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(EXAMPLE_DATA) if p]


def _mutate(data, path, how, value):
    import copy

    data = copy.deepcopy(data)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if how == "delete":
        del parent[last]
    elif how == "replace":
        parent[last] = value
    elif how == "negate" and isinstance(parent[last], int | float) and not isinstance(parent[last], bool):
        parent[last] = -parent[last] - 1
    elif how == "unknown_key" and isinstance(parent[last], dict):
        parent[last]["surprise"] = value
    return data


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATHS), st.sampled_from(["delete", "replace", "negate", "unknown_key"]), scalars)
def test_mutations_of_the_example_load_or_raise_config_error(path, how, value):
    loads_or_config_error(yaml.safe_dump(_mutate(EXAMPLE_DATA, path, how, value)))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(EXAMPLE) - 1), st.sampled_from(["[", "]", "{", ":", "\t", "- ", "'", "&a", "*b", "!!python/object:os.system"]))
def test_broken_syntax_in_the_example_loads_or_raises_config_error(pos, junk):
    loads_or_config_error(EXAMPLE[:pos] + junk + EXAMPLE[pos:])


def test_a_non_finite_number_written_as_a_string_is_refused_naming_the_field():
    """YAML reads "INF" and "nan" as strings, which pydantic took for floats: a capability of
    "INF" GPUs was an internal error (found by the fuzz test above, 2026-12-07)."""
    import copy

    import pytest

    for value in ("INF", "nan", "-Infinity"):
        data = copy.deepcopy(EXAMPLE_DATA)
        data["queues"][0].setdefault("capability", {})["gpu"] = value
        with pytest.raises(ConfigError, match=r"queues\.0\.capability\.gpu: Input should be a finite number"):
            parse(yaml.safe_dump(data), "fuzz.yaml")

"""The config reference (`docs/config.md`), generated from the schema's JSON Schema, whose
descriptions are the field docstrings in `federation.schema`: one source, so the reference
cannot drift from what `fedctl validate` accepts (a test regenerates and compares it)."""

from __future__ import annotations

import json

from federation.schema import FederationSpec

HEADER = """# Configuration reference

Generated from the schema by `fedctl schema --markdown`; do not edit by hand. Every key of the
federation YAML file, by where it sits (`[]` is an item of a list, `{name}` a key you choose).
The README explains how quotas, burst and tidal windows behave; `fedctl validate --explain FILE`
shows what each queue effectively gets. `fedctl schema` prints the JSON Schema itself, for
editors (yaml-language-server's `$schema`).
"""


def _refs(prop: dict, defs: dict) -> list[tuple[str, str]]:
    """The models a property holds, with the path suffix that reaches them ("" / "[]" / ".{name}",
    and a discriminated union's `kind`)."""
    if "$ref" in prop:
        return [("", prop["$ref"].rsplit("/", 1)[1])]
    out = []
    for alt in prop.get("anyOf", []) + prop.get("oneOf", []):
        out += [(s or _kind(defs, r), r) for s, r in _refs(alt, defs)]
    if "items" in prop:
        out += [("[]" + s, r) for s, r in _refs(prop["items"], defs)]
    if isinstance(prop.get("additionalProperties"), dict):
        out += [(".{name}" + s, r) for s, r in _refs(prop["additionalProperties"], defs)]
    return out


def _kind(defs: dict, ref: str) -> str:
    kind = defs[ref].get("properties", {}).get("kind", {}).get("const")
    return f" (kind: {kind})" if kind else ""


def _type(prop: dict, defs: dict) -> str:
    if "$ref" in prop:
        return "mapping"
    if "enum" in prop:
        return " | ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    alts = prop.get("anyOf") or prop.get("oneOf")
    if alts:
        return " or ".join(dict.fromkeys(_type(a, defs) for a in alts if a.get("type") != "null"))
    t = prop.get("type", "any")
    if t == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    if t == "object":
        inner = prop.get("additionalProperties")
        return f"map of {_type(inner, defs)}" if isinstance(inner, dict) else "mapping"
    bounds = [f"{op} {prop[k]}" for k, op in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤")) if k in prop]
    return {"number": "number", "integer": "integer", "boolean": "bool", "string": "string"}.get(t, t) + (f" ({', '.join(bounds)})" if bounds else "")


def _default(prop: dict, required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop or prop["default"] is None:
        return "unset"
    d = prop["default"]
    if isinstance(d, dict):
        return "each key's default" if d else "`{}`"
    return f"`{json.dumps(d)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    schema = FederationSpec.model_json_schema()
    defs = schema["$defs"]
    sections: list[str] = [HEADER]
    todo: list[tuple[str, str, dict]] = [("(top level)", "FederationSpec", schema)]
    where: dict[str, str] = {}  # model -> the one path it is described under
    while todo:
        path, name, model = todo.pop(0)
        doc = model.get("description", "")
        rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        required = set(model.get("required", []))
        for key, prop in model.get("properties", {}).items():
            text = prop.get("description", "")
            for suffix, ref in _refs(prop, defs):
                sub = f"{key}{suffix}" if path == "(top level)" else f"{path}.{key}{suffix}"
                if ref not in where:
                    where[ref] = sub
                    todo.append((sub, ref, defs[ref]))
                elif where[ref] != sub:
                    text += f" Keys as under `{where[ref]}`."
            rows.append(f"| `{key}` | {_cell(_type(prop, defs))} | {_cell(_default(prop, key in required))} | {_cell(text)} |")
        title = f"## `{path}`" if path != "(top level)" else "## Top level"
        sections.append("\n".join([title, "", *([_cell(doc), ""] if doc and name != "FederationSpec" else []), *rows, ""]))
    return "\n".join(sections)

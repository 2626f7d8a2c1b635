"""A small JSON Schema checker for the files hpgo reads (standard library only).

It implements the keywords hpgo's schemas use (``hpgo/cluster.schema.json``):
``type``, ``const``, ``enum``, ``required``, ``properties``,
``additionalProperties`` (a bool), ``items``, ``prefixItems``,
``minItems``, ``maxItems``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum`` and local ``$ref`` (``#/$defs/NAME``); annotations
(``description``, ``title``, ``examples``, ...) are ignored.  A schema with
another keyword is refused, so a schema never says more than is checked.

:func:`check` raises ``ValueError("FILE: FIELD: problem")`` for the first
problem, the field written as ``gpu.memory_bytes`` or ``levels[1].size``.
JSON booleans are not numbers here (``true`` is refused where a number is
expected), and numbers must be finite.
"""
from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any, Mapping

__all__ = ["check", "load_schema"]

_ANNOTATIONS = {"$schema", "$id", "title", "description", "examples", "default", "$defs",
                "$comment"}
_CHECKED = {"type", "const", "enum", "required", "properties", "additionalProperties", "items",
            "prefixItems", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "$ref"}
_TYPES = {"object": "an object", "array": "an array", "string": "a string",
          "number": "a number", "integer": "an integer", "boolean": "true or false",
          "null": "null"}


def load_schema(name: str) -> dict:
    """A schema shipped in the package (``"cluster"``: cluster.schema.json)."""
    text = resources.files("hpgo").joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def _is(v: Any, t: str) -> bool:
    if t == "object":
        return isinstance(v, Mapping)
    if t == "array":
        return isinstance(v, (list, tuple))
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if not math.isfinite(v):
        return False
    return t == "number" or float(v).is_integer()


def _show(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, float) or math.isfinite(v) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _where(path: str) -> str:
    return path or "(top level)"


def _resolve(root: Mapping, ref: str) -> Mapping:
    if not ref.startswith("#/$defs/"):
        raise ValueError(f"schema: only local '#/$defs/...' references are supported, not {ref!r}")
    return root["$defs"][ref[len("#/$defs/"):]]


def _check(v: Any, s: Mapping, root: Mapping, path: str) -> None:
    unknown = set(s) - _CHECKED - _ANNOTATIONS
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} are not supported")
    if "$ref" in s:
        _check(v, _resolve(root, s["$ref"]), root, path)
    where = _where(path)
    if "const" in s and v != s["const"]:
        raise ValueError(f"{where}: must be {_show(s['const'])}, got {_show(v)}")
    if "enum" in s and v not in s["enum"]:
        raise ValueError(f"{where}: must be one of {', '.join(map(_show, s['enum']))}, "
                         f"got {_show(v)}")
    if "type" in s:
        types = [s["type"]] if isinstance(s["type"], str) else list(s["type"])
        if not any(_is(v, t) for t in types):
            want = " or ".join(_TYPES[t] for t in types)
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{where}: must be a finite number, got {_show(v)}")
            raise ValueError(f"{where}: must be {want}, got {_show(v)}")
    if _is(v, "number"):
        for key, ok, word in (("minimum", lambda a, b: a >= b, ">="),
                              ("exclusiveMinimum", lambda a, b: a > b, ">"),
                              ("maximum", lambda a, b: a <= b, "<="),
                              ("exclusiveMaximum", lambda a, b: a < b, "<")):
            if key in s and not ok(v, s[key]):
                raise ValueError(f"{where}: must be {word} {s[key]:g}, got {_show(v)}")
    if isinstance(v, Mapping):
        for k in s.get("required", ()):
            if k not in v:
                raise ValueError(f"{where}: missing field {k!r}")
        props = s.get("properties", {})
        if s.get("additionalProperties", True) is False:
            extra = [k for k in v if k not in props]
            if extra:
                raise ValueError(f"{where}: unknown field {extra[0]!r} (known: "
                                 f"{', '.join(props)})")
        for k, sub in props.items():
            if k in v:
                _check(v[k], sub, root, f"{path}.{k}" if path else str(k))
    if isinstance(v, (list, tuple)):
        n = len(v)
        if "minItems" in s and n < s["minItems"]:
            raise ValueError(f"{where}: needs at least {s['minItems']} item(s), got {n}")
        if "maxItems" in s and n > s["maxItems"]:
            raise ValueError(f"{where}: takes at most {s['maxItems']} items, got {n}")
        prefix = s.get("prefixItems", [])
        for i, x in enumerate(v):
            sub = prefix[i] if i < len(prefix) else s.get("items")
            if sub is not None:
                _check(x, sub, root, f"{path}[{i}]")


def check(value: Any, schema: Mapping, where: str = "") -> None:
    """Raise ValueError naming ``where`` (a file) and the field for the first
    way ``value`` breaks ``schema``."""
    try:
        _check(value, schema, schema, "")
    except RecursionError:
        raise ValueError(f"{where or 'value'}: nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"{where}: {e}" if where else str(e)) from None

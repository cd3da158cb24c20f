"""Declarative checks for the hand-edited YAML inputs.

Each input kind (manifest, env spec, site profile) declares its fields once; :func:`check_mapping`
rejects unknown keys (suggesting the closest known one, since most are typos), missing required
keys, wrong types and values outside a fixed set, always naming file, line and key.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

from containers.errors import ConfigError, UsageError
from containers.inputs.yamlsource import LocatedDict, LocatedList

T = TypeVar("T")


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, (str, int, float, bool)) for x in v.values())


def _is_list(v: Any) -> bool:
    return isinstance(v, list)


def _is_map(v: Any) -> bool:
    return isinstance(v, dict)


KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (_is_str, "a string"),
    "int": (_is_int, "an integer"),
    "float": (_is_number, "a number"),
    "bool": (_is_bool, "true or false"),
    "str_list": (_is_str_list, "a list of strings"),
    "str_map": (_is_str_map, "a mapping of names to scalar values"),
    "list": (_is_list, "a list"),
    "map": (_is_map, "a mapping"),
}


@dataclass(frozen=True)
class Field:
    """One allowed key of a mapping: its kind (a key of :data:`KINDS`), default and choices."""

    name: str
    kind: str = "str"
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] | None = None


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def suggest(word: str, candidates: Sequence[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix for a likely typo, or an empty string."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def pick(items: Mapping[str, T], name: str, *, what: str, flag: str) -> T:
    """``items[name]``, or a :class:`UsageError` naming the flag, the likely name and all names."""
    try:
        return items[name]
    except KeyError as exc:
        raise UsageError(f"unknown {what} '{name}'{suggest(name, list(items))}; known: "
                         f"{', '.join(sorted(items))}", flag=flag) from exc


def line_of(data: Any, key: str | int | None = None) -> int | None:
    """Best known line of a key or item in located YAML data."""
    if isinstance(data, LocatedDict):
        return data.line_of(str(key)) if key is not None else data.line
    if isinstance(data, LocatedList):
        return data.line_of(int(key)) if key is not None else data.line
    return None


def check_mapping(data: Any, fields: Sequence[Field], *, what: str, path: Any = None,
                  prefix: str = "") -> dict[str, Any]:
    """Validate one mapping against ``fields``; return a plain dict with defaults filled in.

    ``prefix`` is prepended to key names in messages (``build_args.``) for nested mappings.
    """
    path = getattr(data, "path", None) or path
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must be a mapping", path=path, line=line_of(data),
                          key=prefix.rstrip(".") or None)
    known = {f.name: f for f in fields}
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown key in {what}{suggest(key, list(known))}", path=path,
                              line=line_of(data, key), key=prefix + key)
    result: dict[str, Any] = {}
    for field in fields:
        if field.name not in data or data[field.name] is None:
            if field.required:
                raise ConfigError(f"required key missing from {what}", path=path,
                                  line=line_of(data), key=prefix + field.name)
            result[field.name] = field.default
            continue
        value = data[field.name]
        check, expected = KINDS[field.kind]
        if not check(value):
            raise ConfigError(f"must be {expected}, got {_type_name(value)}", path=path,
                              line=line_of(data, field.name), key=prefix + field.name)
        if field.choices is not None and value not in field.choices:
            options = ", ".join(str(c) for c in field.choices)
            raise ConfigError(f"'{value}' is not one of: {options}"
                              f"{suggest(str(value), [str(c) for c in field.choices])}",
                              path=path, line=line_of(data, field.name), key=prefix + field.name)
        result[field.name] = value
    return result

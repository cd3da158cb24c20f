"""Declarative checks for the hand-edited YAML inputs.

Each input kind (manifest, env spec, site profile) declares its fields once; :func:`check_mapping`
rejects unknown keys (suggesting the closest known one, since most are typos), missing required
keys, wrong types and values outside a fixed set, always naming file, line and key.

Names (targets, versions, sites, partitions) become file names, module names and words in
generated scripts, so they follow one strict rule, :func:`name_problem`, wherever they enter.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from containers.errors import ConfigError, UsageError, raise_all
from containers.files import resolves_outside
from containers.inputs.yamlsource import LocatedDict, LocatedList

T = TypeVar("T")
_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,63}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Names the publish layout gives its own files and folders (``DEST/modules``, ``DEST/keys``,
#: ``DEST/<t>/bin``, ``latest``, ``default``, the catalogue): no target or version may take one.
RESERVED_NAMES = ("bin", "catalogue.json", "default", "keys", "latest", "modules")
#: Endings of temp files (``.partial``, ``.tmp``), which publish and build sweep away.
TEMP_ENDINGS = (".partial", ".tmp")
NAME_RULE = ("1-64 letters, digits and . _ + -, not starting with - or ., not ending in "
             + " or ".join(TEMP_ENDINGS) + ", and not " + ", ".join(RESERVED_NAMES))


def is_env_name(name: str) -> bool:
    """Whether ``name`` is a shell (environment) variable name: letters, digits and ``_``, not
    starting with a digit."""
    return bool(_ENV_NAME.match(name))


def name_problem(kind: str, name: object) -> str | None:
    """Why ``name`` cannot be a ``kind`` name (target, version, site, partition), else None.

    The one rule for every name that becomes a path or a word in a generated file: a newline, a
    slash or ``..`` in one would run code from a module file or write outside the publish
    folder. The message quotes the name with ``repr``, so it stays one line."""
    if not isinstance(name, str):
        return f"{kind} name must be a string, got {_type_name(name)}"
    if (not _NAME.match(name) or name.lower() in RESERVED_NAMES
            or name.endswith(TEMP_ENDINGS)):
        return f"{name!r} is not a usable {kind} name: {NAME_RULE}"
    return None


def check_name(kind: str, name: object, *, path: Any = None, line: int | None = None,
               key: str | None = None) -> str:
    """``name`` if it passes :func:`name_problem`, else a :class:`ConfigError` at ``path``,
    ``line`` and ``key`` (the input that gave the name)."""
    problem = name_problem(kind, name)
    if problem:
        raise ConfigError(problem, path=path, line=line, key=key)
    return str(name)


def check_file_name(kind: str, path: Path) -> str:
    """The ``kind`` name a file gives by its stem (``recipes/<target>.yaml``); a
    :class:`ConfigError` naming the file when the stem breaks the rule. A name that cannot be
    printed on one line is shown quoted, beside its folder."""
    problem = name_problem(kind, path.stem)
    if problem is None:
        return path.stem
    if path.name.isprintable():
        raise ConfigError(f"file name: {problem}", path=path)
    raise ConfigError(f"file {path.name!r}: {problem}", path=path.parent)


def candidate_files(folder: Path) -> list[Path]:
    """The ``*.yaml`` files of ``folder`` sorted by name, hidden ones skipped (an editor's
    ``.#cpu.yaml`` lock is not an input)."""
    return [p for p in sorted(folder.glob("*.yaml")) if not p.name.startswith(".")]


def check_input_file(path: Path, *, kind: str, root: Path) -> Path:
    """``path`` if it may be a ``kind`` input: its stem passes :func:`name_problem` and it is
    not a link out of the project ``root`` (inputs are the project's own files)."""
    check_file_name(kind, path)
    outside = resolves_outside(path, root)
    if outside is not None:
        raise ConfigError(f"a link to {outside}, outside the project {root}: inputs must be "
                          "the project's own files", path=path)
    return path


def input_files(folder: Path, *, kind: str, root: Path) -> list[Path]:
    """The ``*.yaml`` files of ``folder``, one per ``kind`` (target, site), sorted by name,
    each checked by :func:`check_input_file` (the first bad one raises)."""
    return [check_input_file(p, kind=kind, root=root) for p in candidate_files(folder)]


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
        raise UsageError(f"unknown {what} {name!r}{suggest(name, list(items))}; known: "
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

    Every problem is collected before anything is raised: one bad key is raised as itself, two or
    more as :class:`~containers.errors.Problems` (each with its line and key), so a user sees them
    all in one run.

    ``prefix`` is prepended to key names in messages (``build_args.``) for nested mappings.
    """
    path = getattr(data, "path", None) or path
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must be a mapping", path=path, line=line_of(data),
                          key=prefix.rstrip(".") or None)
    known = {f.name: f for f in fields}
    problems: list[ConfigError] = []
    for key in data:
        if key not in known:
            problems.append(ConfigError(f"unknown key in {what}{suggest(key, list(known))}",
                                        path=path, line=line_of(data, key), key=prefix + key))
    result: dict[str, Any] = {}
    for field in fields:
        if field.name not in data or data[field.name] is None:
            if field.required:
                problems.append(ConfigError(f"required key missing from {what}", path=path,
                                            line=line_of(data), key=prefix + field.name))
            result[field.name] = field.default
            continue
        value = data[field.name]
        check, expected = KINDS[field.kind]
        line = line_of(data, field.name)
        if not check(value):
            problems.append(ConfigError(f"must be {expected}, got {_type_name(value)}",
                                        path=path, line=line, key=prefix + field.name))
        elif field.choices is not None and value not in field.choices:
            options = ", ".join(str(c) for c in field.choices)
            problems.append(ConfigError(
                f"'{value}' is not one of: {options}"
                f"{suggest(str(value), [str(c) for c in field.choices])}", path=path, line=line,
                key=prefix + field.name))
        result[field.name] = value
    raise_all(sorted(problems, key=lambda p: p.line or 0))  # every bad key, in file order
    return result

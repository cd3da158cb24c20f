"""Declarative checks for the hand-edited YAML inputs. One pydantic model per kind, whose problems
:func:`validate_model` names at file, line and key, and whose JSON Schemas editors read."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Sequence, TypeVar

from pydantic import (AfterValidator, BaseModel, ConfigDict, Strict, ValidationError,
                      WrapValidator, model_validator)
from pydantic_core import PydanticCustomError

from containers.errors import ConfigError, UsageError, raise_all
from containers.files import resolves_outside
# the name rule and suggest live with the names (no pydantic there); offered here as before
from containers.inputs.names import (NAME_RULE, TEMP_ENDINGS, Gpu, is_env_name, name_problem,
                                     suggest, type_name)
from containers.inputs.yamlsource import Located

T = TypeVar("T")


def check_name(kind: str, name: object, *, path: Any = None, line: int | None = None,
               key: str | None = None) -> str:
    """``name`` if it passes :func:`name_problem`, else a :class:`ConfigError` at its key."""
    problem = name_problem(kind, name)
    if problem:
        raise ConfigError(problem, path=path, line=line, key=key)
    return str(name)


def check_file_name(kind: str, path: Path) -> str:
    """The ``kind`` name a file's stem gives; a :class:`ConfigError` when it breaks the rule."""
    problem = name_problem(kind, path.stem)
    if problem is None:
        return path.stem
    if path.name.isprintable():
        raise ConfigError(f"file name: {problem}", path=path)
    raise ConfigError(f"file {path.name!r}: {problem}", path=path.parent)


def candidate_files(folder: Path) -> list[Path]:
    """The ``*.yaml`` files of ``folder`` by name, hidden ones (an editor's lock) skipped."""
    return [p for p in sorted(folder.glob("*.yaml")) if not p.name.startswith(".")]


def check_input_file(path: Path, *, kind: str, root: Path) -> Path:
    """``path`` if it may be a ``kind`` input: a good name, not a link out of ``root``."""
    check_file_name(kind, path)
    outside = resolves_outside(path, root)
    if outside is not None:
        raise ConfigError(f"a link to {outside}, outside the project {root}: inputs must be "
                          "the project's own files", path=path)
    return path


def input_files(folder: Path, *, kind: str, root: Path) -> list[Path]:
    """The ``kind`` files of ``folder`` by name, each checked (the first bad one raises)."""
    return [check_input_file(p, kind=kind, root=root) for p in candidate_files(folder)]


def pick(items: Mapping[str, T], name: str, *, what: str, flag: str) -> T:
    try:
        return items[name]
    except KeyError as exc:
        raise UsageError(f"unknown {what} {name!r}{suggest(name, list(items))}; known: "
                         f"{', '.join(sorted(items))}", flag=flag) from exc


def line_of(data: Any, key: str | int | None = None) -> int | None:
    if not isinstance(data, Located):
        return None
    return data.line if key is None else data.line_of(key)


# ----------------------------------------------------- typed models (pydantic) at file:line:key
#: pydantic's error types for a value of the wrong type, and what the message says it must be.
_EXPECTED = {"string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
             "float_type": "a number", "dict_type": "a mapping", "model_type": "a mapping",
             "list_type": "a list", "tuple_type": "a list", "int_from_float": "an integer"}


class Part(BaseModel):
    """A part of a hand-edited input: unknown keys are refused (most are typos), values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Declared(Part):
    """An input mapping where ``key: null`` means the key left out (its default, or missing)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


def refuse(problem: Callable[[Any], str | None]) -> AfterValidator:
    """A check that refuses a value for the reason ``problem`` gives (None: it is fine)."""
    def check(value: Any) -> Any:
        reason = problem(value)
        if reason:
            raise ValueError(reason)
        return value
    return AfterValidator(check)


def _words(expected: str) -> WrapValidator:
    """A wrong container, or one with a wrong item, named as a whole (a list of strings)."""
    def check(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            if any(e["type"] not in _EXPECTED for e in exc.errors()):
                raise
            raise problem_at(f"must be {expected}, got {type_name(value)}") from None
    return WrapValidator(check)


Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
#: A GPU kind as inputs spell it (none, cuda, rocm); the model holds the member.
GpuKind = Literal[tuple(Gpu)]  # type: ignore[valid-type]
Int = Annotated[int, Strict()]
Scalar = Str | Bool | Int | Annotated[float, Strict()]
StrList = Annotated[list[Str], _words("a list of strings")]
MAP_OF_SCALARS = _words("a mapping of names to scalar values")
StrMap = Annotated[dict[str, Scalar], MAP_OF_SCALARS]


def located(data: Any, loc: Sequence[str | int]) -> int | None:
    """The line of the item at ``loc`` in located YAML, else of the nearest one above it."""
    node, line = data, line_of(data)
    for part in loc:
        if not isinstance(node, (dict, list)):
            break
        try:
            child = node[part] if isinstance(node, list) or part in node else None
        except (IndexError, TypeError):
            break
        line = line_of(node, part) or line
        if child is None:
            break
        node = child
    return line


def key_of(loc: Sequence[str | int]) -> str:
    """``('partitions', 'p', 'max_time')`` -> ``partitions.p.max_time``; indexes as ``[0]``."""
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else ("." if key else "") + str(part)
    return key


def _unwrap(annotation: Any) -> Any:
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        elif origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        else:
            return annotation


def _model_at(model: Any, loc: Sequence[str | int]) -> Any:
    """The model class holding the key at the end of ``loc`` (for 'unknown key')."""
    current = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if fields is not None and isinstance(part, str) and part in fields:
            current = _unwrap(fields[part].annotation)
            continue
        args = typing.get_args(current)
        if not args:
            return None
        current = _unwrap(args[-1] if typing.get_origin(current) is dict else args[0])
    return current if hasattr(current, "model_fields") else None


def _message(error: Mapping[str, Any], model: Any, loc: Sequence[str | int],
             what: str) -> str:
    """One pydantic error in this project's words (the hand-written checks' wording)."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if not loc and kind in ("model_type", "dict_type"):
        return f"{what} must be a mapping"
    if kind == "extra_forbidden":
        holder = _model_at(model, loc[:-1])
        known = list(holder.model_fields) if holder is not None else []
        return f"unknown key in {_what_at(model, loc[:-1], what)}{suggest(str(loc[-1]), known)}"
    if kind == "missing":
        return f"required key missing from {_what_at(model, loc[:-1], what)}"
    if kind in _EXPECTED or (kind == "literal_error" and not isinstance(value, str)):
        return f"must be {_EXPECTED.get(kind, 'a string')}, got {type_name(value)}"
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"'{value}' is not one of: {', '.join(options)}{suggest(str(value), options)}"
    if kind == "greater_than_equal":
        least = ctx.get("ge")
        return (f"must not be negative (got {value})" if least == 0
                else f"must be at least {least} (got {value})")
    return str(ctx.get("reason") or error["msg"]).removeprefix("Value error, ")


def _what_at(model: Any, loc: Sequence[str | int], what: str) -> str:
    """What the mapping at ``loc`` is called in a message (``partition gpu``)."""
    if not loc:
        return what
    holder = _model_at(model, loc)
    parent = _model_at(model, loc[:-1])
    if holder is not None and (parent is None or loc[-1] not in parent.model_fields):
        return f"{holder.__name__.lower()} {loc[-1]}"
    return key_of(loc)


def validate_model(model: type[T], data: Any, *, path: Any, what: str, prefix: str = "") -> T:
    """``data`` (located YAML) validated by ``model``; every problem at file, line and key
    (after ``prefix``), all raised together in file order."""
    try:
        return model.model_validate(data, context={"raw": data})
    except ValidationError as exc:
        problems = []
        for error in sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden"):
            loc = [*error["loc"], *((error.get("ctx") or {}).get("at") or ())]
            loc = [part for part in loc if part != "[key]"]
            key = prefix + key_of(loc) if loc else prefix.rstrip(".")
            problems.append(ConfigError(_message(error, model, loc, what), path=path,
                                        line=located(data, loc), key=key or None))
        raise_all(sorted(problems, key=lambda p: p.line or 0))
        raise  # pragma: no cover - raise_all raised


def problem_at(reason: str, *at: str | int) -> Exception:
    """A validation problem at a key below the checked field, for :func:`validate_model`."""
    return PydanticCustomError("site", "{reason}", {"reason": reason, "at": at})

"""YAML loading that remembers where every key and item came from. Inputs are edited by hand, so
an error must point at the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from containers.errors import ConfigError
from containers.files import FileRefused, TooDeep, check_depth, read_regular

#: The most an input file (manifest, env spec, definition, site profile, script) may hold.
INPUT_LIMIT = 1 << 20


class Located:
    """Knows its file, its own line and the line of each key (a mapping) or item (a list)."""

    path: Path | None = None
    line: int | None = None
    key_lines: dict[str | int, int]

    def line_of(self, key: str | int) -> int | None:
        return self.key_lines.get(key, self.line)


class LocatedDict(Located, dict):
    pass


class LocatedList(Located, list):
    pass


def _loader_for(path: Path | None) -> type[yaml.SafeLoader]:
    class _Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LocatedDict:
        loader.flatten_mapping(node)
        result = LocatedDict()
        result.path, result.line, result.key_lines = path, node.start_mark.line + 1, {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise ConfigError("mapping keys must be plain scalars", path=path,
                                  line=key_node.start_mark.line + 1)
            key = str(key)
            if key in result:
                raise ConfigError("duplicate key", path=path, line=key_node.start_mark.line + 1,
                                  key=key)
            result[key] = loader.construct_object(value_node, deep=True)
            result.key_lines[key] = key_node.start_mark.line + 1
        return result

    def construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LocatedList:
        result = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
        result.path, result.line = path, node.start_mark.line + 1
        result.key_lines = {i: child.start_mark.line + 1 for i, child in enumerate(node.value)}
        return result

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, construct_sequence)
    return _Loader


def load_yaml_text(text: str, *, path: Path | None = None) -> Any:
    """``text`` read as YAML, the tool's one reader; any failure one ConfigError."""
    try:
        return check_depth(yaml.load(text, Loader=_loader_for(path)))  # noqa: S506 - safe
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(f"invalid YAML: {exc.problem or exc.context}", path=path,
                          line=line) from exc
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(f"invalid YAML: character #x{exc.character:04x}: {exc.reason}",
                          path=path, line=line) from exc
    except yaml.YAMLError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"invalid YAML: {first}", path=path) from exc
    except (TooDeep, RecursionError) as exc:
        raise ConfigError(f"invalid YAML: {TooDeep()}", path=path) from exc


def decode_input(data: bytes, *, path: Path) -> str:
    """``data`` as UTF-8 text; a non-UTF-8 byte is a :class:`ConfigError` at its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                          path=path, line=line) from exc


def read_input_text(path: Path, *, limit: int = INPUT_LIMIT) -> str:
    """The text of one input file, a regular UTF-8 file of at most ``limit`` bytes."""
    try:
        data = read_regular(path, limit=limit)
    except FileNotFoundError as exc:
        raise ConfigError("file not found", path=path) from exc
    except FileRefused as exc:
        raise ConfigError(f"{exc}: inputs are regular files of at most {limit} bytes",
                          path=path) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from exc
    return decode_input(data, path=path)


def load_yaml_file(path: Path) -> Any:
    return load_yaml_text(read_input_text(path), path=path)

"""Shell script text: the one place where this tool writes shell instead of argv.

Every value becomes a shell word with :func:`word` (``shlex.quote``), except a :func:`ref`
marker (a name between NULs, which no real argument holds), which becomes ``${NAME}``: it
expands on the compute node while a ``$`` in a user's path stays literal."""

from __future__ import annotations

import os
import re
import shlex
from typing import Iterator, Mapping, Sequence

from containers.errors import UsageError
from containers.inputs.schema import is_env_name

_MARK = "\x00"
#: Literal text that means the same inside double quotes as outside any quotes: no ``$``, `` ` ``,
#: ``\``, ``"`` or ``!`` (the characters double quotes still interpret), no control characters.
_DQ_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./^~ -]*\Z")
#: Lines longer than this are wrapped with backslash continuations, one option per line.
WIDTH = 100


def ref(name: str) -> str:
    """A reference to shell variable ``name``, expanded by the script's shell at run time."""
    if not is_env_name(name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return f"{_MARK}{name}{_MARK}"


class ShellVars(Mapping[str, str]):
    """An environment where every variable is a reference to itself, for the job's shell."""

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str) or not is_env_name(name):
            raise KeyError(name)
        return ref(name)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


SHELL_VARS = ShellVars()


def word(text: str) -> str:
    """``text`` as exactly one shell word: literal quoted, :func:`ref` markers expanding."""
    text = str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("ascii", "backslashreplace")
        raise UsageError(f"'{shown}' holds bytes that are not UTF-8, and a job script is UTF-8 "
                         "text: pass such a value through a file or an environment "
                         "variable") from None
    if _MARK not in text:
        return shlex.quote(text)
    parts = text.split(_MARK)  # literal, name, literal, ... literal: the odd ones are names
    if len(parts) % 2 == 0 or not all(is_env_name(name) for name in parts[1::2]):
        raise ValueError(f"malformed variable reference in {text!r}")
    if all(_DQ_SAFE.match(literal) for literal in parts[0::2]):
        return '"' + "".join(f"${{{p}}}" if i % 2 else p for i, p in enumerate(parts)) + '"'
    return "".join(f'"${{{p}}}"' if i % 2 else shlex.quote(p) for i, p in enumerate(parts) if p)


def command(argv: Sequence[str]) -> str:
    """One shell command line from ``argv``, a long one wrapped (:func:`breaks`)."""
    rendered = [word(arg) for arg in argv]
    line = " ".join(rendered)
    if len(line) <= WIDTH:
        return line
    cuts = breaks(argv)
    parts: list[list[str]] = [[]]
    for i, token in enumerate(rendered):
        if i in cuts and parts[-1]:
            parts.append([])
        parts[-1].append(token)
    return " \\\n    ".join(" ".join(part) for part in parts)


#: ``<runtime> exec`` options that take the next word as their value.
_EXEC_VALUE_OPTIONS = ("--bind", "--env")


def breaks(argv: Sequence[str]) -> set[int]:
    """Where a long command is wrapped, read from the argv itself."""
    cuts = {i for i, arg in enumerate(argv) if arg in _EXEC_VALUE_OPTIONS and i > 0}
    runtime = next((i for i in range(len(argv) - 1) if argv[i + 1] == "exec"), None)
    if runtime is None:
        return cuts
    cuts.add(runtime)
    image = _positional(argv, runtime + 2, _EXEC_VALUE_OPTIONS)
    if image is None or image + 1 >= len(argv):
        return cuts
    cuts.update((image, image + 1))
    script = _positional(argv, image + 2, ())
    if script is not None:
        cuts.add(script)
    return cuts


def _positional(argv: Sequence[str], start: int, value_options: Sequence[str]) -> int | None:
    """The index of the first word from ``start`` that is neither an option nor its value."""
    i = start
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            return i
        takes_value = arg in value_options or (len(arg) == 2 and arg[1].isalpha())
        i += 2 if takes_value else 1
    return None


def stop_if(condition: str, message: str) -> list[str]:
    """Lines that end the job (exit 2) where ``condition`` holds, ``message`` (words) on stderr."""
    return [f"if {condition}; then", f"    echo {message} >&2", "    exit 2", "fi"]


def render(directives: Sequence[str], comments: Sequence[str], body: Sequence[str]) -> str:
    """A batch script: directives, a strict header (an ``ERR`` trap naming the line), body."""
    lines = ["#!/bin/bash", *directives, "", *(f"# {c}" if c else "#" for c in comments),
             "set -euo pipefail",
             "trap 'echo \"job script: line $LINENO: $BASH_COMMAND (exit $?)\" >&2' ERR",
             "", *body]
    text = "\n".join(lines).rstrip("\n") + "\n"
    if _MARK in text:
        raise ValueError("a variable reference escaped rendering")  # a bug, not user input
    return text

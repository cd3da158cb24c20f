"""Shell script text: the one place where this tool writes shell instead of argv.

Batch jobs are scripts, so here every value becomes a shell word with :func:`word`, which is
``shlex.quote`` except for one thing: references to variables that must expand when the JOB runs
(``$SLURM_JOB_ID``, the rendezvous address, a site value such as
``/tmp/$USER-miopen-cache-$SLURM_JOB_ID``). Those travel through the ordinary argv-building code
(:mod:`containers.run.workload`, :meth:`Runtime.exec_argv`) as :func:`ref` markers: a variable name
between NUL characters, which can never occur in a real argument, path or environment value. Only
:func:`word` turns a marker into ``${NAME}``, inside double quotes and next to nothing but
characters that double quotes leave alone; any other literal text is single-quoted. So a ``$`` in
a user's path or flag stays a literal ``$``, and a site's ``$SLURM_JOB_ID`` stays unexpanded in
the script and expands on the compute node.

:class:`Script` assembles shebang, scheduler directives, the strict-mode header with an ``ERR``
trap that names the failing command, and the body lines (ReFrame's single script builder).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

_MARK = "\x00"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Literal text that means the same inside double quotes as outside any quotes: no ``$``, `` ` ``,
#: ``\``, ``"`` or ``!`` (the characters double quotes still interpret), no control characters.
_DQ_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./^~ -]*\Z")
INDENT = "    "
#: Lines longer than this are wrapped with backslash continuations, one option per line.
WIDTH = 100


def ref(name: str) -> str:
    """A reference to shell variable ``name``, expanded by the script's shell at run time."""
    if not _NAME.match(name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return f"{_MARK}{name}{_MARK}"


def has_refs(text: str) -> bool:
    return _MARK in text


class ShellVars(Mapping[str, str]):
    """An environment where every variable is set to a reference to itself.

    Site values expanded from it (:func:`containers.inputs.sites.expand`) keep their ``$VAR`` references
    as markers, so the job's shell expands them on the compute node, not this tool at render time.
    """

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str) or not _NAME.match(name):
            raise KeyError(name)
        return ref(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(_NAME.match(name))

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


SHELL_VARS = ShellVars()


def word(text: str) -> str:
    """``text`` as exactly one shell word: literal text quoted, :func:`ref` markers expanding."""
    text = str(text)
    if _MARK not in text:
        return shlex.quote(text)
    parts = text.split(_MARK)
    if len(parts) % 2 == 0 or not all(_NAME.match(name) for name in parts[1::2]):
        raise ValueError(f"malformed variable reference in {text!r}")
    literals, names = parts[0::2], parts[1::2]
    if all(_DQ_SAFE.match(literal) for literal in literals):
        inner = literals[0] + "".join(f"${{{name}}}{literal}"
                                      for name, literal in zip(names, literals[1:]))
        return f'"{inner}"'
    pieces = [shlex.quote(literals[0])] if literals[0] else []
    for name, literal in zip(names, literals[1:]):
        pieces.append(f'"${{{name}}}"')
        if literal:
            pieces.append(shlex.quote(literal))
    return "".join(pieces)


def words(argv: Iterable[str]) -> list[str]:
    return [word(a) for a in argv]


def command(argv: Sequence[str], *, groups: Sequence[int] = ()) -> str:
    """One shell command line from ``argv``; long ones are wrapped before the indices in
    ``groups`` and before every ``--bind``/``--env`` option, so each reads on its own line."""
    rendered = words(argv)
    line = " ".join(rendered)
    if len(line) <= WIDTH:
        return line
    breaks = set(groups)
    breaks.update(i for i, arg in enumerate(argv) if arg in ("--bind", "--env") and i > 0)
    out: list[str] = []
    current: list[str] = []
    for i, token in enumerate(rendered):
        if i in breaks and current:
            out.append(" ".join(current))
            current = []
        current.append(token)
    out.append(" ".join(current))
    return (" \\\n" + INDENT).join(out)


def assign(name: str, value: str) -> str:
    """``NAME=value`` with the value as one word (markers expanding)."""
    if not _NAME.match(name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return f"{name}={word(value)}"


@dataclass
class Script:
    """A batch script: directives first (schedulers stop reading them at the first command),
    then a strict header whose ``ERR`` trap names the failing line and command, then the body."""

    directives: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    shell: str = "/bin/bash"

    def render(self) -> str:
        lines = [f"#!{self.shell}", *self.directives, ""]
        lines += [f"# {c}" if c else "#" for c in self.comments]
        lines += [
            "set -euo pipefail",
            "trap 'echo \"job script: line $LINENO: $BASH_COMMAND (exit $?)\" >&2' ERR",
            "",
            *self.body,
        ]
        text = "\n".join(lines).rstrip("\n") + "\n"
        if _MARK in text:
            raise ValueError("a variable reference escaped rendering")  # a bug, not user input
        return text

"""The one error family of the tool, and the one place that turns an error into what a user sees.

Every user-facing failure is a :class:`ContainersError`, caught once by the command line and
printed as one line with no traceback; a builtin exception escaping means a bug."""

from __future__ import annotations

import errno
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence


class ContainersError(Exception):
    """A failure the user can act on; ``str()`` is the whole message."""

    exit_code = 1


class UsageError(ContainersError):
    """A bad command-line value: ``flag`` names it (``--gpus``)."""

    def __init__(self, message: str, *, flag: str | None = None) -> None:
        self.flag = flag
        super().__init__(f"{flag}: {message}" if flag and not message.startswith(flag)
                         else message)


class ConfigError(ContainersError):
    """Bad input file: names the file, the line and the key so an editor can jump there."""

    def __init__(self, message: str, *, path: Path | str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.line = line
        self.key = key
        self.detail = message
        where = ""
        if self.path is not None:
            where = str(self.path) + (f":{line}" if line else "") + ": "
        keypart = f"{key}: " if key else ""
        super().__init__(f"{where}{keypart}{message}")


class Problems(ConfigError):
    """Two or more problems one pass found (``invoke check``), a line each: one run shows all."""

    def __init__(self, problems: Sequence[ContainersError]) -> None:
        self.problems: list[ContainersError] = list(flatten(problems))
        lines = [str(p) for p in self.problems]
        count = f"{len(lines)} problem{'s' if len(lines) != 1 else ''} found"
        super().__init__("\n".join([*lines, count]))
        self.detail = count


def flatten(problems: Sequence[ContainersError]) -> list[ContainersError]:
    """``problems`` with every :class:`Problems` replaced by the problems it holds."""
    flat: list[ContainersError] = []
    for problem in problems:
        flat.extend(flatten(problem.problems) if isinstance(problem, Problems) else [problem])
    return flat


def raise_all(problems: Sequence[ContainersError]) -> None:
    """Nothing when ``problems`` is empty, the one problem itself, or :class:`Problems`."""
    flat = flatten(problems)
    if len(flat) == 1:
        raise flat[0]
    if flat:
        raise Problems(flat)


class ImageMissing(ContainersError):
    """The image a command needs has not been built (or was removed)."""

    def __init__(self, image: Path | str, target: str, *, hint: str | None = None) -> None:
        super().__init__(f"image {image} is not built; "
                         + (hint or f"run: invoke build --target {target}"))


class StateError(ContainersError):
    """What is on disk is not in the state the command needs (and the message says why)."""


class WriteRefused(StateError):
    """A file the tool was to write is there as something it must not replace, refused before
    anything is written: a link (``ln -s /etc/passwd job.sh`` would be written through), a
    device (``/dev/null`` would become a file), a folder or another user's file."""


class RuntimeNotFound(ContainersError):
    """Neither apptainer nor singularity could be found or run."""


#: A terminal escape sequence (CSI and OSC), which cotainr writes even into a pipe.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def plain(line: str) -> str:
    """``line`` without terminal escape sequences: what is left to read in a log or a pipe."""
    return _ESCAPE.sub("", line)


#: A FATAL line that says only which exit status ended a build step.
_EXIT_ONLY = re.compile(r"exit status \d+\s*\Z")


class CommandFailed(ContainersError):
    """An external command failed: its argv, exit code and last output lines are kept."""

    def __init__(self, what: str, *, argv: Sequence[str] = (), returncode: int | None = None,
                 output: Sequence[str] = (), lines: int = 6) -> None:
        self.what = what
        self.argv = [str(a) for a in argv]
        self.returncode = returncode
        self.output = list(output)
        super().__init__(self.summary(lines))

    def summary(self, lines: int = 6) -> str:
        """``what (exit N): the lines worth reading``: error lines first, else the tail."""
        text = self.what
        if self.returncode is not None:
            text += f" failed (exit {self.returncode})"
        worth = [plain(ln).strip() for ln in self.output if plain(ln).strip()]
        # a FATAL line says what went wrong; an error line (ending a traceback) that something did
        fatal = [ln for ln in worth if "FATAL" in ln]
        errors = [ln for ln in worth if ("ERROR" in ln or "rror:" in ln) and "FATAL" not in ln]
        flagged = fatal or errors
        if fatal and errors and all(_EXIT_ONLY.search(ln) for ln in fatal):
            # the engine's FATAL says only that %post exited non-zero: the tool's error says why
            flagged = errors[-(lines - 1):] + fatal[-1:]
        shown = (flagged or worth)[-lines:]
        return text + (": " + " | ".join(shown) if shown else "")


class VerdictFailed(ContainersError):
    """A check ran and its verdict is negative (wrong values, lost ranks, a bad signature)."""

    exit_code = 2


class PerformanceFailed(ContainersError):
    """The run was correct (sanity passed) but slower than the site's reference allows."""

    exit_code = 3


def os_failure(exc: OSError) -> str:
    """``the disk is full (/x)``, ``Read-only file system (/x)``."""
    what = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return what + (f" ({exc.filename})" if exc.filename else "")


@contextmanager
def on_disk(doing: str, path: Path | str | None = None) -> Iterator[None]:
    """An OSError of a write on the user's disk as one :class:`StateError` line saying what the
    tool was doing; wrap only file operations, never a subprocess."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and path is not None:
            exc.filename = str(path)
        raise StateError(f"cannot {doing}: {os_failure(exc)}") from exc


#: The most characters of one word (a name, a path, a value) and of one line an error shows:
#: what the user gave is echoed, and a 120 KB name must not fill the terminal.
WORD_LIMIT, LINE_LIMIT = 300, 2000
_LONG_WORD = re.compile(r"\S{%d,}" % (WORD_LIMIT + 1))


def _middle_cut(text: str, limit: int) -> str:
    """``text`` of at most ``limit`` characters and the size of what was cut from its middle."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}…[{len(text) - 2 * keep} characters cut]…{text[-keep:]}"


def readable(text: str) -> str:
    """Long words, then long lines, cut in their middle: both ends of what was echoed stay."""
    return "\n".join(_middle_cut(_LONG_WORD.sub(lambda m: _middle_cut(m[0], WORD_LIMIT), line),
                                 LINE_LIMIT) for line in text.split("\n"))


def describe(exc: ContainersError) -> tuple[str, int]:
    """The line a user sees for ``exc`` and the exit code: the single place errors print."""
    if isinstance(exc, Problems):
        # each problem is one line already; a newline inside one is folded
        lines = [*("error: " + str(p).replace("\n", " ") for p in exc.problems),
                 f"error: {exc.detail}"]
        return readable("\n".join(lines)), exc.exit_code
    return readable(f"error: {exc}"), exc.exit_code

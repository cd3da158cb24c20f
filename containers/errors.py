"""The one error family of the tool.

Every user-facing failure is a :class:`ContainersError`; the command line catches it once and prints
its one-line message (no traceback) with a non-zero exit. Builtin exceptions escaping means a bug.
"""

from __future__ import annotations

from pathlib import Path


class ContainersError(Exception):
    """A failure the user can act on; ``str()`` is the whole message."""

    exit_code = 1


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


class RuntimeNotFound(ContainersError):
    """Neither apptainer nor singularity could be found or run."""


class CommandFailed(ContainersError):
    """An external command exited non-zero; the message keeps only the lines worth reading."""

    def __init__(self, message: str, *, returncode: int | None = None) -> None:
        self.returncode = returncode
        super().__init__(message)


class CheckFailed(ContainersError):
    """A smoke test or verification ran but its verdict is negative (wrong values, lost ranks)."""

    exit_code = 2


class PerformanceFailed(ContainersError):
    """The run was correct (sanity passed) but slower than the site's reference allows."""

    exit_code = 3

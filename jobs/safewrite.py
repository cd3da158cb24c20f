"""The one way the in-image scripts write a file: a temp file beside it, renamed into place.

``jobs/`` runs inside the images and cannot import ``containers``, so this is its own small copy
of the rule ``containers.files`` keeps for the tool: the destination, when it exists, must be a
regular file of the user running the job. A link there is never written through, and a device,
FIFO or another user's file is never replaced (a job run as root in a results folder another user
can write must not overwrite ``/etc/passwd`` through ``rank-0.json``). Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class WriteRefused(OSError):
    """The destination is something a job must not replace; the message names it and why."""


def why_not_ours(path: Path) -> str | None:
    """Why ``path`` may not be replaced (a link, not a regular file, another user's), else None
    (also when it is missing). ``lstat``: a link is judged as itself."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link; refusing to write through it"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file; refusing to replace it"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to uid {os.geteuid()}; refusing to replace it"
    return None


def _refuse(path: Path) -> None:
    why = why_not_ours(path)
    if why:
        raise WriteRefused(f"{path} {why}")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a new ``O_EXCL`` temp beside it, fsynced, renamed),
    so a reader never sees half a file; refused (:class:`WriteRefused`) as :func:`why_not_ours`
    says, before anything is written and again at the rename."""
    _refuse(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a stale temp, or a link planted under its name
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        _refuse(path)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

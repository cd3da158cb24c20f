"""Advisory file locks, so two builds (or publishes) of the same thing never interleave.

A ``flock`` belongs to the open file, so the kernel drops it when its holder dies, however it
dies (SIGKILL included): a lock that nobody holds is how a sweep knows that what it protects
(a build's work folder, a partial image) has no live owner. The holder also writes its PID into
the lock file, so a report can say whose a leftover was.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from containers.files import read_regular


def acquire(path: Path, *, on_wait: Callable[[], None] | None = None,
            blocking: bool = True) -> int | None:
    """An open descriptor holding an exclusive ``flock`` on ``path`` (created when missing),
    with our PID written into it; ``on_wait`` is called once if we must wait. Not blocking:
    None when another process holds it. Give it back with :func:`release`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not blocking:
                os.close(fd)
                return None
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def file_lock(path: Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; ``on_wait`` is called once if we must wait."""
    fd = acquire(path, on_wait=on_wait)
    assert fd is not None
    try:
        yield
    finally:
        release(fd)


@contextmanager
def folder_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder ``path`` itself: a lock that leaves no file
    behind (for a folder whose contents others check, such as the builds' ``tmp_dir``)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor drops the lock


def held(path: Path) -> bool:
    """Whether a live process (this one included, through another descriptor) holds the lock
    at ``path``; False when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def holder(path: Path) -> int | None:
    """The PID the last holder wrote into the lock at ``path`` (None when unreadable)."""
    try:  # a regular file only: a FIFO planted as a lock must not block whoever asks
        text = read_regular(path, limit=64).decode("ascii", errors="replace").strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None

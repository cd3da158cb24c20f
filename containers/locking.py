"""Advisory file locks, so two builds (or publishes) of the same thing never interleave.

The kernel drops a ``flock`` when its holder dies, however it dies, so a lock nobody holds tells
a sweep that what it protects has no live owner; the holder's PID says whose a leftover was."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from containers.errors import WriteRefused
from containers.files import file_type, read_regular, refuse_replacing


def acquire(path: Path, *, on_wait: Callable[[], None] | None = None,
            shared: bool = False) -> int:
    """An open descriptor holding an exclusive (or ``shared``) ``flock`` on ``path``."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(path)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # a FIFO opens without blocking when read-write
            refuse_replacing(path, doing="lock")
            raise WriteRefused(f"{path} is {file_type(info.st_mode)}, not a regular file; "
                               "refusing to lock it (move it away, or name another file)")
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, mode)
        # the PID goes only into a file of ours with one name (never a planted hard link)
        if not shared and info.st_uid == os.geteuid() and info.st_nlink == 1:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_lock(path: Path) -> int:
    """The lock file at ``path`` opened (created when missing), never through a link."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR):
            refuse_replacing(path, doing="lock")  # says what it is, in the one wording
        raise


def release(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _is_current(fd: int, path: Path) -> bool:
    """Whether the locked ``fd`` is still the file at ``path`` (a holder may remove it)."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held_file = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held_file.st_dev, held_file.st_ino)


@contextmanager
def file_lock(path: Path, *, on_wait: Callable[[], None] | None = None,
              remove: bool = False) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (``remove``: the file goes with the lock)."""
    while True:
        fd = acquire(path, on_wait=on_wait)
        if not remove or _is_current(fd, path):
            break
        release(fd)
        on_wait = None  # said once
    try:
        yield
    finally:
        if remove and _is_current(fd, path):
            path.unlink(missing_ok=True)  # before the lock goes: a waiter then retries
        release(fd)


@contextmanager
def folder_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder ``path`` itself: it leaves no file."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor drops the lock


def held(path: Path) -> bool:
    """Whether a live process (this one too) holds the lock at ``path``; False if no file."""
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

"""Permissions of published files: who may read them, and a check that nobody else may write."""

from __future__ import annotations

import errno
import grp
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from containers.errors import ConfigError, ContainersError, StateError, UsageError
from containers.files import first_link, file_type, unsafe_way, walk_nofollow
from containers.publish.catalogue import CATALOGUE_NAME, LOCK_NAME, PAGE_NAME, layout_link
from containers.publish.modulefile import exec_name


@dataclass(frozen=True)
class Modes:
    """Permissions of published files: world-readable (0644/0755) or group-only (0640/0750)."""

    file: int
    dir: int
    gid: int | None

    @classmethod
    def of(cls, *, world_readable: bool, gid: int | None) -> "Modes":
        return cls(0o644, 0o755, gid) if world_readable else cls(0o640, 0o750, gid)

    @property
    def umask(self) -> int:
        return 0o777 & ~self.dir


def resolve_group(name: str, *, named_by: str) -> int | None:
    """The group id for ``name`` (empty: groups alone), checked before any work."""
    if not name:
        return None

    def refuse(message: str) -> ContainersError:
        if named_by.startswith("--"):
            return UsageError(message, flag=named_by)
        return ConfigError(message, key=named_by)

    try:
        gid = grp.getgrnam(name).gr_gid
    except KeyError as exc:
        raise refuse(f"group '{name}' does not exist on this machine") from exc
    if os.geteuid() != 0 and gid not in os.getgroups():
        raise refuse(f"you are not a member of group '{name}', so files cannot be given to it")
    return gid


def expected_mode(path: Path, modes: Modes) -> int:
    """Folders and the exec wrappers are executable; everything else is not."""
    if stat.S_ISDIR(path.lstat().st_mode):
        return modes.dir
    is_wrapper = path.parent.name == "bin" and path.name.endswith(exec_name(""))
    return modes.dir if is_wrapper else modes.file


def _publish_paths(dest: Path, target: str) -> list[Path]:
    """What one publish of ``target`` writes, chmods or removes."""
    paths = [dest / CATALOGUE_NAME, dest / PAGE_NAME, dest / LOCK_NAME, dest / "modules"]
    for root in (dest / target, dest / "modules" / target, dest / "keys"):
        paths += walk_nofollow(root)
    return paths


def _folders(dest: Path, target: str | None) -> list[Path]:
    """The folders of the layout (the shared ones, and ``target``'s when named)."""
    shared = [dest / "modules", dest / "keys"]
    return shared if target is None else [
        dest / target, dest / target / "bin", *shared, dest / "modules" / target]


def unsafe_layout(dest: Path, target: str | None = None) -> str | None:
    """The first thing in ``dest`` publish (of ``target``) or verify (None) must not go
    through (a link, a misplaced file, a folder anyone may write), else None."""
    paths = list(walk_nofollow(dest))[1:] if target is None else _publish_paths(dest, target)
    for path in paths:
        link = first_link(dest, path)
        if link is not None and not layout_link(dest, link):
            return (f"{link} is a symbolic link; nothing inside {dest} is reached through a "
                    "link: remove it (and check what it pointed to), or publish elsewhere")
    modes = {folder: os.lstat(folder).st_mode for folder in _folders(dest, target)
             if os.path.lexists(folder)}
    for folder, mode in modes.items():
        if not stat.S_ISDIR(mode):
            return f"{folder} is {file_type(mode)}, where publish keeps a folder"
    for folder, mode in modes.items():
        if target is not None and mode & 0o002:
            return (f"{folder} is world-writable (mode {stat.S_IMODE(mode):04o}): anyone could "
                    "have put files there; check what it holds, chmod o-w it, then publish")
    return None


def open_parent(dest: Path) -> str | None:
    """Why someone else could swap ``dest`` for a folder of their own, else None."""
    why = unsafe_way(dest)
    return f"{why}; publish under a folder only admins can write" if why else None


def managed_paths(dest: Path, target: str) -> list[Path]:
    """What one publish owns, never a link nor anything reached through one."""
    return [p for p in _publish_paths(dest, target) if os.path.lexists(p) and not p.is_symlink()
            and first_link(dest, p) is None]


def _set_mode(path: Path, mode: int, gid: int | None) -> None:
    """chmod (and chgrp) ``path`` through an ``O_NOFOLLOW`` descriptor: never a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(f"{path} became a symbolic link while publishing; nothing "
                             "reached through a link is changed") from exc
        raise
    try:
        info = os.fstat(fd)
        keep = stat.S_IMODE(info.st_mode) & stat.S_ISGID if stat.S_ISDIR(info.st_mode) else 0
        os.fchmod(fd, mode | keep)
        if gid is not None:
            os.fchown(fd, -1, gid)
    finally:
        os.close(fd)


def apply_modes(paths: list[Path], modes: Modes) -> None:
    for path in paths:
        _set_mode(path, expected_mode(path, modes), modes.gid)


def mode_problems(paths: list[Path], modes: Modes | None) -> list[str]:
    """Files that are world-writable, or (with ``modes``) not as configured."""
    problems = []
    for path in paths:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o002:
            problems.append(f"{path}: world-writable (mode {mode:04o})")
        elif modes is not None and mode & 0o777 != expected_mode(path, modes):
            problems.append(f"{path}: mode {mode:04o}, expected {expected_mode(path, modes):04o}")
        if modes is not None and modes.gid is not None and info.st_gid != modes.gid:
            problems.append(f"{path}: group {info.st_gid}, expected {modes.gid}")
    return problems


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """Files are born with their final modes, so none is ever briefly too open."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)

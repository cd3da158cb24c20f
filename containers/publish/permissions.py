"""Permissions of published files: who may read them, and a check that nobody else may write.

Published images are shared by a whole site, so a file anyone can write is a file anyone can
replace: publish gives every file it owns its configured mode and group (world-readable
0644/0755, or group-only 0640/0750), creates them under a matching umask so none is ever briefly
too open, and re-checks afterwards; ``verify`` flags anything world-writable.
"""

from __future__ import annotations

import grp
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from containers.errors import ConfigError, ContainersError, UsageError
from containers.publish.catalogue import CATALOGUE_NAME, LOCK_NAME
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
    """The group id for ``name`` (empty: leave groups alone), checked before any work.

    ``named_by`` says where the name came from, so the error points there: a flag (``--group``,
    a :class:`UsageError`) or a setting (``containers.publish_group``, a :class:`ConfigError`).
    """
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
    if path.is_dir():
        return modes.dir
    is_wrapper = path.parent.name == "bin" and path.name.endswith(exec_name(""))
    return modes.dir if is_wrapper else modes.file


def managed_paths(dest: Path, target: str) -> list[Path]:
    """What one publish owns: the target's folders and files, modules, keys and catalogue."""
    roots = [dest / target, dest / "modules" / target, dest / "keys"]
    paths = [dest / CATALOGUE_NAME, dest / LOCK_NAME, dest / "modules"]
    for root in roots:
        if root.is_dir():
            paths += [root, *root.rglob("*")]
    return [p for p in paths if (p.exists() and not p.is_symlink())]


def apply_modes(paths: list[Path], modes: Modes) -> None:
    """Give each path its expected mode (keeping a folder's setgid bit) and group."""
    for path in paths:
        keep = stat.S_IMODE(path.stat().st_mode) & stat.S_ISGID if path.is_dir() else 0
        os.chmod(path, expected_mode(path, modes) | keep)
        if modes.gid is not None:
            os.chown(path, -1, modes.gid, follow_symlinks=False)


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

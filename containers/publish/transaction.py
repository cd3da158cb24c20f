"""How a publish commits its files all or nothing: temp names, then renames that can be undone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from containers.files import refuse_replacing, temp_name


class Transaction:
    """Everything one publish makes, so a failure anywhere undoes exactly that (what a final
    name held is kept as a hard link until :meth:`done`)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._temps: list[Path] = []
        self._backups: list[Path] = []
        self.created: set[Path] = set()
        self.committed = False

    def folder(self, path: Path) -> None:
        """Make ``path`` (and its missing parents) unless it is there; undone when empty."""
        if path.is_dir():
            return
        self.folder(path.parent)
        path.mkdir()
        self.created.add(path)
        self._undo.append(lambda: path.rmdir() if not any(path.iterdir()) else None)

    def temp(self, path: Path) -> Path:
        self._temps.append(path)
        return path

    def install(self, temp: Path, final: Path, step: str) -> None:
        """Rename ``temp`` over ``final``, keeping the old one to undo."""
        before_commit(step)
        if not temp.is_symlink():
            refuse_replacing(final)
        backup = None
        if os.path.lexists(final):
            backup = temp_name(final, "old.tmp")
            self._backups.append(backup)
            backup.unlink(missing_ok=True)
            os.link(final, backup, follow_symlinks=False)
        os.replace(temp, final)
        self._undo.append(lambda: os.replace(backup, final) if backup
                          else final.unlink(missing_ok=True))

    def rollback(self) -> list[str]:
        """Undo every step, newest first; the problems met while undoing (none: all undone)."""
        for path in self._temps:  # first: a folder is removed only when empty
            path.unlink(missing_ok=True)
        problems = []
        for undo in reversed(self._undo):
            try:
                undo()
            except OSError as exc:
                problems.append(str(exc))
        self.done()
        return problems

    def commit(self) -> None:
        """Every final name is in place: nothing is undone from now on."""
        self.committed = True
        self.done()

    def done(self) -> None:
        self._undo.clear()
        for path in self._temps + self._backups:
            path.unlink(missing_ok=True)


def before_commit(step: str) -> None:
    """Called before each commit step (a rename); a fault-injection point for tests."""

"""Names no other run can have: a results folder or a script file claimed exclusively.

Runs are named by the second they start, so the name is claimed with an exclusive create
(atomic on NFS and Lustre too): the first run gets ``<stem>``, the next ``<stem>-2``, ..."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from containers.errors import on_disk
from containers.files import refuse_unsafe_way

#: More runs than this in one second under one name means something else is wrong.
MAX_TRIES = 1000


def _claim(parent: Path, stem: str, suffix: str, create: Callable[[Path], object], *,
           doing: str, what: str) -> str:
    """``create`` the first free ``<stem>[-N]<suffix>``; the name claimed, less ``suffix``."""
    refuse_unsafe_way(parent / f"{stem}{suffix}")
    with on_disk(doing, parent / f"{stem}{suffix}"):
        parent.mkdir(parents=True, exist_ok=True)
        for name in (stem, *(f"{stem}-{n}" for n in range(2, MAX_TRIES + 1))):
            try:
                create(parent / f"{name}{suffix}")
            except FileExistsError:
                continue
            return name
    raise FileExistsError(f"{MAX_TRIES} {what} named {parent / stem}{suffix} already")


def claim_folder(parent: Path, stem: str) -> str:
    return _claim(parent, stem, "", os.mkdir, doing="create the results folder", what="runs")


def claim_file(parent: Path, stem: str, suffix: str) -> Path:
    def create(path: Path) -> None:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    name = _claim(parent, stem, suffix, create, doing="create the file", what="files")
    return parent / f"{name}{suffix}"

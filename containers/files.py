"""File primitives every stage shares: atomic writes, fsync, hashing, symlink swaps.

A reader of any file this tool writes (an image's provenance, a verdict, a catalogue, a published
image) sees the old content or the new, never half of it: everything is written to a temp name in
the same folder, fsynced and renamed. Symlinks are swapped the same way: a new link under a temp
name renamed over the old one, so the name always points somewhere.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

COPY_CHUNK = 8 << 20


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a folder's entries (so a rename in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, rename: readers
    see the old file or the new one, never a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def copy_hashing(source: Path, dest: Path, *, mode: int = 0o644, chunk: int = COPY_CHUNK,
                 after_chunk: Callable[[], None] | None = None) -> str:
    """Copy ``source`` to a new file ``dest`` (never an existing one: ``O_EXCL``) born with
    ``mode``, fsync it, and return the sha256 of the bytes read: a copy checked against a
    recorded hash in the same pass that makes it. ``after_chunk`` runs after each chunk (a
    progress or fault-injection hook)."""
    digest = hashlib.sha256()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with open(source, "rb") as reader, os.fdopen(fd, "wb") as writer:
        while block := reader.read(chunk):
            digest.update(block)
            writer.write(block)
            if after_chunk is not None:
                after_chunk()
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest()


def replace_symlink(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically: a temp symlink renamed over the old one, so
    ``link`` never stops existing (``ln -sfn`` removes it first)."""
    temp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    os.symlink(target, temp)
    os.replace(temp, link)

"""Unit tests of the shared file primitives: atomic writes, fsync, hashing copy, symlink swaps."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from containers.files import (atomic_write_bytes, atomic_write_text, copy_hashing, fsync_path,
                              replace_symlink, sha256_file)


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "record.json"
    atomic_write_text(path, "old\n")
    atomic_write_bytes(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["record.json"]


def test_sha256_file(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"a" * 3_000_000)
    assert sha256_file(path) == hashlib.sha256(b"a" * 3_000_000).hexdigest()


def test_fsync_path_takes_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    fsync_path(tmp_path / "f")
    fsync_path(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_path(tmp_path / "missing")


def test_copy_hashing_copies_hashes_and_sets_mode(tmp_path: Path) -> None:
    data = os.urandom(100_000)
    source, dest = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(data)
    chunks: list[int] = []
    old = os.umask(0)
    try:
        digest = copy_hashing(source, dest, mode=0o640, chunk=30_000,
                              after_chunk=lambda: chunks.append(1))
    finally:
        os.umask(old)
    assert digest == hashlib.sha256(data).hexdigest()
    assert dest.read_bytes() == data
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert len(chunks) == 4, "the hook runs after every chunk"


def test_copy_hashing_never_overwrites(tmp_path: Path) -> None:
    source, dest = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(b"new")
    dest.write_bytes(b"existing")
    with pytest.raises(FileExistsError):
        copy_hashing(source, dest)
    assert dest.read_bytes() == b"existing"


def test_replace_symlink_swaps_atomically(tmp_path: Path) -> None:
    link = tmp_path / "latest"
    replace_symlink(link, "1.sif")
    assert os.readlink(link) == "1.sif"
    replace_symlink(link, "2.sif")
    assert os.readlink(link) == "2.sif"
    stale = tmp_path / f".latest.{os.getpid()}.tmp"  # left by an earlier crash of this pid
    os.symlink("0.sif", stale)
    replace_symlink(link, "3.sif")
    assert os.readlink(link) == "3.sif"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]

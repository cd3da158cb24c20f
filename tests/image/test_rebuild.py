"""The kept root's check (containers/image/rebuild.py): a rebuild's hard-linked copy that
replaces files (unlink, then write) leaves the kept root as it was; one that rewrites a file in
place changes the kept root too, which is then thrown away (a full build follows)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from containers.image.rebuild import KEPT, ROOT, Kept

MADE_FROM = "a" * 64


def kept_one(folder: Path, said: list[str]) -> Kept:
    """A kept root of two files, kept as a build keeps its own."""
    work = folder / "work-1"
    (work / "opt" / "venv").mkdir(parents=True)
    (work / "opt" / "venv" / "a.py").write_text("a = 1\n")
    (work / "etc").mkdir()
    (work / "etc" / "conf").write_text("x\n")
    kept = Kept(folder, said.append, work=work)
    kept.keep(None, None, MADE_FROM)  # type: ignore[arg-type]  # neither read: work is given
    return kept


def linked_copy(folder: Path) -> Path:
    copy = folder / "work-2"
    subprocess.run(["cp", "-al", str(folder / ROOT), str(copy)], check=True)
    return copy


def test_a_copy_that_replaces_files_leaves_the_kept_root_as_it_was(tmp_path: Path) -> None:
    said: list[str] = []
    kept = kept_one(tmp_path, said)
    assert kept._made_from() == MADE_FROM and (tmp_path / KEPT).is_file()
    copy = linked_copy(tmp_path)
    (copy / "opt" / "venv" / "a.py").unlink()  # what pip does: a new inode
    (copy / "opt" / "venv" / "a.py").write_text("a = 2\n")
    (copy / "opt" / "venv" / "b.py").write_text("b = 1\n")
    assert kept._made_from() == MADE_FROM
    assert (tmp_path / ROOT / "opt" / "venv" / "a.py").read_text() == "a = 1\n"


def test_a_kept_root_changed_through_a_link_is_thrown_away(tmp_path: Path) -> None:
    said: list[str] = []
    kept = kept_one(tmp_path, said)
    copy = linked_copy(tmp_path)
    with open(copy / "etc" / "conf", "r+") as handle:  # in place: the kept file too
        handle.write("y")
    assert kept._made_from() is None
    assert said[-1] == "==> kept root: does not match its manifest: removed, full build"
    assert not (tmp_path / ROOT).exists() and not (tmp_path / KEPT).exists()


def test_nothing_kept_is_no_rebuild(tmp_path: Path) -> None:
    assert Kept(tmp_path, print)._made_from() is None

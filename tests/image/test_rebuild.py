"""The kept root's check (containers/image/rebuild.py): a rebuild changes the kept root in
place; one that failed having changed nothing but its own build context keeps it, one that
changed more (or whose image was not kept) throws it away: a full build follows."""

from __future__ import annotations

import os
from pathlib import Path

from containers.image.rebuild import CONTEXT_MOUNT, KEPT, ROOT, Kept, manifest

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


def test_the_manifest_sees_files_and_entries_but_not_folder_times(tmp_path: Path) -> None:
    kept = kept_one(tmp_path, [])
    first = manifest(kept.root)
    (kept.root / "opt" / "new").mkdir()
    (kept.root / "opt" / "new").rmdir()  # /opt's mtime changed, nothing else
    assert manifest(kept.root) == first
    (kept.root / "etc" / "conf").write_text("y\n")
    os.utime(kept.root / "etc" / "conf", (1, 1))
    assert manifest(kept.root) != first


def test_a_failed_rebuild_that_changed_nothing_keeps_the_root(tmp_path: Path) -> None:
    said: list[str] = []
    kept = kept_one(tmp_path, said)
    context = kept.root / CONTEXT_MOUNT.lstrip("/")
    context.mkdir(parents=True)  # what the rebuild stages before %post, which then fails
    (context / "requirements.txt").write_text("nosuchpackage\n")
    kept.changing = True
    kept.restore()
    assert not context.exists() and not kept.changing
    assert kept._made_from() == MADE_FROM and said[-1].startswith("==> kept root: this build")


def test_a_failed_rebuild_that_changed_the_root_throws_it_away(tmp_path: Path) -> None:
    said: list[str] = []
    kept = kept_one(tmp_path, said)
    kept.changing = True
    (kept.root / "opt" / "venv" / "half.py").write_text("")  # an install cut short
    kept.restore()
    assert said[-1] == "==> kept root: does not match its manifest: removed, full build"
    assert not (tmp_path / ROOT).exists() and not (tmp_path / KEPT).exists()


def test_a_root_changed_by_hand_is_thrown_away(tmp_path: Path) -> None:
    said: list[str] = []
    kept = kept_one(tmp_path, said)
    with open(kept.root / "etc" / "conf", "r+") as handle:
        handle.write("y")
    assert kept._made_from() is None
    assert not (tmp_path / ROOT).exists() and not (tmp_path / KEPT).exists()


def test_nothing_kept_is_no_rebuild(tmp_path: Path) -> None:
    assert Kept(tmp_path, print)._made_from() is None


def test_a_rebuilt_root_whose_image_was_not_kept_is_forgotten(tmp_path: Path) -> None:
    """A rebuild changed the root, then the image failed (its test, say): the lock's holder
    forgets the root, so the next build is full and no manifest names a changed root."""
    from types import SimpleNamespace

    import pytest

    from containers.image.cache import PackageCache
    from containers.image.rebuild import held

    step = SimpleNamespace(kept_root=SimpleNamespace(digest=lambda: "key"),
                           package_cache=PackageCache(root=tmp_path / "packages"))
    said: list[str] = []
    with held(step, said.append) as kept:  # type: ignore[arg-type]
        kept_one(kept.folder, said)
    with pytest.raises(RuntimeError), held(step, said.append) as kept:  # type: ignore[arg-type]
        assert kept._made_from() == MADE_FROM
        kept.changing = True  # %post ran in the root
        raise RuntimeError("the image's %test failed")
    assert not (kept.folder / ROOT).exists() and not (kept.folder / KEPT).exists()

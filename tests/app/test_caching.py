"""``invoke cache``: the package cache's folder, each part's size, environment snapshots counted
apart from a fresh venv, and ``--prune`` emptying it."""

from __future__ import annotations

from containers.app.caching import package_cache
from containers.image.cache import package_cache_dir


def test_each_part_and_the_snapshots_are_counted(data_project) -> None:
    root = package_cache_dir(data_project.settings.cache_dir)
    (root / "pip").mkdir(parents=True)
    (root / "pip" / "wheel.whl").write_bytes(b"x" * 2048)
    snapshot = root / "pip" / "envs" / "k1" / "s1"
    snapshot.mkdir(parents=True)
    (snapshot / "wheels.txt").write_text("a==1\n")
    (root / "pip" / "envs" / "k1" / "fresh").mkdir()  # a fresh venv: not a snapshot
    lines: list[str] = []
    package_cache(data_project, say=lines.append)
    assert lines[0].startswith(f"package cache: {root} ")
    assert lines[1].split()[:1] == ["pip"] and lines[1].endswith("in 2 files")
    assert lines[2].split()[:1] == ["apt"] and lines[2].endswith("in 0 files")
    assert lines[3].startswith("  of pip, environment snapshots: 1 (")


def test_prune_empties_it(data_project) -> None:
    root = package_cache_dir(data_project.settings.cache_dir)
    (root / "apt").mkdir(parents=True)
    (root / "apt" / "p.deb").write_bytes(b"y" * 100)
    lines: list[str] = []
    package_cache(data_project, prune=True, say=lines.append)
    assert lines[-1].startswith("pruned: ") and lines[-1].endswith("in 1 files removed")
    assert not (root / "apt" / "p.deb").exists()

"""``invoke cache``: the package cache's folder, each part's size, the kept root file systems
counted, and ``--prune`` emptying it."""

from __future__ import annotations

from containers.app.caching import package_cache
from containers.image.cache import package_cache_dir


def test_each_part_and_the_kept_roots_are_counted(data_project) -> None:
    root = package_cache_dir(data_project.settings.cache_dir)
    (root / "pip").mkdir(parents=True)
    (root / "pip" / "wheel.whl").write_bytes(b"x" * 2048)
    (root / "roots" / "k1" / "root" / "etc").mkdir(parents=True)
    (root / "roots" / "k2" / "work-x").mkdir(parents=True)  # a build's work: not a kept root
    lines: list[str] = []
    package_cache(data_project, say=lines.append)
    assert lines[0].startswith(f"package cache: {root} ")
    assert lines[1].split()[:1] == ["pip"] and lines[1].endswith("in 1 files")
    assert lines[2].split()[:1] == ["apt"] and lines[2].endswith("in 0 files")
    assert lines[3].split()[:1] == ["roots"]
    assert lines[4].startswith("  of roots, kept root file systems: 1 (")


def test_prune_empties_it(data_project) -> None:
    root = package_cache_dir(data_project.settings.cache_dir)
    (root / "apt").mkdir(parents=True)
    (root / "apt" / "p.deb").write_bytes(b"y" * 100)
    lines: list[str] = []
    package_cache(data_project, prune=True, say=lines.append)
    assert lines[-1].startswith("pruned: ") and lines[-1].endswith("in 1 files removed")
    assert not (root / "apt" / "p.deb").exists()

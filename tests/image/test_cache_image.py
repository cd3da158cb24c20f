"""The package cache with the real Apptainer: a cached download that went bad is checked against
the index's hash, refused and fetched again, and the image is what it would have been; a rebuild
from a kept root file system holds exactly what a clean build holds.

The ``cpu`` recipe with a one-package env spec (no torch: seconds, not minutes) on the session's
debian-base, linked into a folder of the test's own, with a cache of the test's own.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from containers import app
from tests.fixtures import ROOT

pytestmark = pytest.mark.apptainer


def cpu_pip_list(root: Path, packages: list[str]) -> None:
    """The project copy's ``cpu`` env spec with only ``packages`` in its pip list."""
    spec = {"name": "cpu", "channels": ["conda-forge"],
            "dependencies": ["python=3.11", "pip", {"pip": packages}]}
    (root / "envs" / "cpu.yml").write_text(yaml.safe_dump(spec, sort_keys=False))


def tiny_cpu_project(root: Path, packages: list[str]) -> Path:
    """The project copy's ``cpu`` target with only ``packages`` in its pip list and no %test
    (cpu.def's imports torch)."""
    cpu_pip_list(root, packages)
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text() + "test: false\n")
    return root


def load_benchmark():
    """benchmarks/build_cache.py, whose reading of an image's content this test shares."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("build_cache")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory, debian_base_image: Path,
            real_runtime) -> dict:
    """One chain of builds for the module: ``idna`` built in full; its cached wheel cut short
    and the build forced again (from the kept root); ``idna`` + ``six`` rebuilt from the root
    that build kept; the same inputs built clean (--no-cache)."""
    tmp = tmp_path_factory.mktemp("rebuilt")
    root = tmp / "project"
    for folder in ("recipes", "envs", "sites", "jobs"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    tiny_cpu_project(root, ["idna"])
    images = tmp / "images"
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    config = {"images_dir": str(images), "cache_dir": str(tmp / "cache"),
              "tmp_dir": str(tmp / "work")}
    bench = load_benchmark()
    found: dict = {"roots": tmp / "cache" / "packages" / "roots"}
    for name, packages, options in (("full", ["idna"], {}), ("mended", ["idna"], {"force": True}),
                                    ("rebuilt", ["idna", "six"], {}),
                                    ("clean", ["idna", "six"], {"force": True,
                                                                "no_cache": True})):
        if name == "mended":  # a download cut short, or a disk that lost it
            (wheel,) = (tmp / "cache" / "packages" / "pip" / "downloads").glob("idna-*.whl")
            found["wheel"], found["good"] = wheel, wheel.read_bytes()
            wheel.write_bytes(found["good"][: len(found["good"]) // 2])
        cpu_pip_list(root, packages)
        log: list[str] = []
        app.build(app.Project.load(root, config), target="cpu", say=log.append, **options)
        found[name] = {"log": "\n".join(log),
                       "record": json.loads((images / "cpu.sif.json").read_text()),
                       "content": bench.content(images / "cpu.sif", real_runtime)}
    found["compared"] = bench.compared
    return found


def test_a_corrupt_cached_download_is_fetched_again(rebuilt: dict) -> None:
    mended = rebuilt["mended"]
    assert "has bad hash" in mended["log"], mended["log"][-3000:]
    assert rebuilt["wheel"].read_bytes() == rebuilt["good"]  # fetched again, the cache mended
    [freeze] = mended["content"]["pip_freeze"]
    assert freeze.startswith("idna==")


def test_a_full_build_keeps_its_root(rebuilt: dict) -> None:
    full = rebuilt["full"]
    assert "kept root: none for these inputs yet: full build" in full["log"], full["log"][-3000:]
    assert full["record"]["made_from"] == "full"
    [kept] = rebuilt["roots"].glob("*/root")
    assert (kept / "opt" / "venv" / "bin" / "python").exists()
    assert not list(rebuilt["roots"].glob("*/work-*"))  # nothing left of the builds' work


def test_a_rebuild_is_made_from_the_kept_root_and_equals_a_clean_build(rebuilt: dict) -> None:
    """The env spec gains a package: the image is rebuilt from the kept root (pip installs
    only ``six``), its record names the image it came from, and it holds exactly what a clean
    build of the same inputs holds: every entry of the root file system, ``pip freeze``,
    labels but dates, the definition but its work folder."""
    again, clean = rebuilt["rebuilt"], rebuilt["clean"]
    assert again["record"]["made_from"] == rebuilt["mended"]["record"]["sha256"], \
        again["log"][-3000:]
    assert "Installing collected packages: six\n" in again["log"] + "\n"
    assert clean["record"]["made_from"] == "full"
    assert any(line.startswith("six==") for line in again["content"]["pip_freeze"])
    assert len(clean["content"]["files"]) > 1000
    assert rebuilt["compared"](again["content"], clean["content"]) == []
    assert again["record"]["labels"]["containers.pip-freeze"].split() == \
        clean["record"]["pip_freeze"]

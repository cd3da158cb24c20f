"""The package cache with the real Apptainer: a cached download that went bad is checked against
the index's hash, refused and fetched again, and the image is what it would have been.

The ``cpu`` recipe with a one-package env spec (no torch: seconds, not minutes) on the session's
debian-base, linked into a folder of the test's own, with a cache of the test's own.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from containers import app

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


def test_a_corrupt_cached_download_is_fetched_again(tmp_path: Path, factory_project,
                                                    debian_base_image: Path,
                                                    real_runtime) -> None:
    root = tiny_cpu_project(factory_project(), ["idna"])
    images = tmp_path / "images"
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    project = app.Project.load(root, {"images_dir": str(images),
                                      "cache_dir": str(tmp_path / "cache"),
                                      "tmp_dir": str(tmp_path / "work")})
    first: list[str] = []
    app.build(project, target="cpu", say=first.append)
    downloads = tmp_path / "cache" / "packages" / "pip" / "downloads"
    (wheel,) = downloads.glob("idna-*.whl")
    good = wheel.read_bytes()
    wheel.write_bytes(good[: len(good) // 2])  # a download cut short, or a disk that lost it

    again: list[str] = []
    app.build(project, target="cpu", force=True, say=again.append)
    log = "\n".join(again)
    assert "has bad hash" in log, log[-3000:]
    assert wheel.read_bytes() == good  # fetched again, the cache mended
    freeze = subprocess.run(real_runtime.exec_argv(image=images / "cpu.sif", command=[
        "python", "-m", "pip", "freeze"]), capture_output=True, text=True, timeout=120,
        check=True).stdout
    assert freeze.startswith("idna==") and len(freeze.splitlines()) == 1


#: Run by the image's python3: every entry under /opt/venv, with the sha256 of each file.
VENV_DIGEST = r"""
import hashlib, os
for parent, dirs, names in sorted(os.walk("/opt/venv")):
    for name in sorted(dirs + names):
        path = os.path.join(parent, name)
        if os.path.islink(path):
            print("l", os.readlink(path), path)
        elif os.path.isfile(path):
            print("f", hashlib.sha256(open(path, "rb").read()).hexdigest(),
                  oct(os.stat(path).st_mode), path)
        else:
            print("d", path)
"""


def test_a_rebuild_restores_the_snapshot_and_pip_adds_only_the_new_package(
        tmp_path: Path, factory_project, debian_base_image: Path, real_runtime) -> None:
    """The env spec gains a package: the rebuild restores the venv the first build installed
    (its one file a subset of this resolution's two), pip installs only the new package, and
    the venv is, file for file, the one a --no-cache build installs. A snapshot whose files no
    longer match its manifest is thrown away and everything is installed again."""
    root = tiny_cpu_project(factory_project(), ["idna"])
    images = tmp_path / "images"
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    config = {"images_dir": str(images), "cache_dir": str(tmp_path / "cache"),
              "tmp_dir": str(tmp_path / "work")}
    first: list[str] = []
    app.build(app.Project.load(root, config), target="cpu", say=first.append)
    assert any("environment snapshot: none yet" in line for line in first)
    assert any("environment snapshot: " in line and " kept (1 files" in line for line in first)
    assert any("environment snapshot: the fresh venv kept for later builds" in line
               for line in first)

    cpu_pip_list(root, ["idna", "six"])
    project = app.Project.load(root, config)
    warm: list[str] = []
    app.build(project, target="cpu", say=warm.append)
    log = "\n".join(warm)
    # the cache and the build's root share tmp_path's filesystem: linked, not copied
    assert ("restored (linked ahead of %post and checked): installed from 1 of this "
            "build's 2 files") in log, log[-3000:]
    assert "Installing collected packages: six\n" in log + "\n"
    assert "not kept again: one kept covers all but 1 of these 2 files" in log
    # pip started from the venv the first build made (linked, checked), not a new one
    assert "the venv pip starts from is the kept fresh one (linked, checked)" in log

    def venv_of(image: Path) -> str:
        return subprocess.run(real_runtime.exec_argv(image=image, command=[
            "python3", "-c", VENV_DIGEST]), capture_output=True, text=True, timeout=300,
            check=True).stdout
    restored = venv_of(images / "cpu.sif")
    app.build(project, target="cpu", force=True, no_cache=True, say=lambda line: None)
    fresh = venv_of(images / "cpu.sif")
    assert " /opt/venv/lib/python3.11/site-packages/six.py" in fresh
    assert restored == fresh

    [kept] = [wheels.parent / "venv" for wheels in
              (tmp_path / "cache" / "packages" / "pip" / "envs").glob("*/*/wheels.txt")]
    (idna,) = kept.glob("lib/python3.11/site-packages/idna/core.py")
    idna.write_text(idna.read_text().replace("def ", "def  ", 1))  # a file that changed
    [fresh_cfg] = (tmp_path / "cache" / "packages" / "pip" / "envs").glob(
        "*/fresh/venv/pyvenv.cfg")
    fresh_cfg.write_text(fresh_cfg.read_text() + "# changed\n")  # and one of the fresh venv
    again: list[str] = []
    app.build(project, target="cpu", force=True, say=again.append)
    log = "\n".join(again)
    assert "does not match its manifest" in log and "thrown away, installing all" in log, \
        log[-3000:]
    assert "the kept fresh venv does not match its manifest (2 entries differ, first: " \
           "pyvenv.cfg): replaced" in log, log[-3000:]
    assert "# changed" not in fresh_cfg.read_text()  # kept again, as python3 -m venv made it
    assert not kept.exists()
    assert venv_of(images / "cpu.sif") == fresh

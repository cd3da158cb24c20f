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


def tiny_cpu_project(root: Path, packages: list[str]) -> Path:
    """The project copy's ``cpu`` target with only ``packages`` in its pip list and no %test
    (cpu.def's imports torch)."""
    spec = {"name": "cpu", "channels": ["conda-forge"],
            "dependencies": ["python=3.11", "pip", {"pip": packages}]}
    (root / "envs" / "cpu.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
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

"""Integration: a multi-stage definition built by the real Apptainer through the tool.

The first stage writes a file; the final stage, on the debian-base image the session builds
(``Bootstrap: localimage``), copies it out with ``%files from build``. No package installs: the
build takes seconds once debian-base exists.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from containers.app.build import build
from containers.app.project import Project
from tests.image.test_plan import multistage_project

pytestmark = pytest.mark.apptainer


def test_multi_stage_build_copies_a_file_between_stages(factory_project, tmp_path: Path,
                                                        debian_base_image: Path,
                                                        real_runtime) -> None:
    root = multistage_project(factory_project())
    definition = root / "recipes" / "multistage.def"
    original = definition.read_bytes()
    project = Project.load(root, {"images_dir": str(tmp_path / "images"),
                                      "tmp_dir": str(tmp_path / "work")})
    lines: list[str] = []
    plan = build(project, target="multistage", say=lines.append,
                     build_args={"BASE_IMAGE": str(debian_base_image)})
    image = project.settings.image_path("multistage")
    assert image.is_file(), "\n".join(lines[-40:])
    assert [s.action for s in plan.steps] == ["build"]
    assert definition.read_bytes() == original  # passed to Apptainer as it is
    # the final stage has the file the build stage wrote; the build stage's own path does not
    out = subprocess.run(real_runtime.exec_argv(image=image, command=[
        "sh", "-c", "cat /opt/stage-file.txt; test ! -e /stage-file.txt && echo only-copied"]),
        capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split("\n")[:2] == ["written in stage build", "only-copied"]
    # and its %test (the final stage's) ran during the build and passes on the image itself,
    # whose root file system the default settings wrote as zstd (Apptainer here reads it)
    subprocess.run(real_runtime.test_argv(image), capture_output=True, text=True, timeout=120,
                   check=True)
    assert_squashfs(project, tmp_path, "zstd", "-comp zstd -Xcompression-level 1")


def _squashfs_superblock(image: Path, tmp_path: Path) -> str:
    """``unsquashfs -s`` of the image's root file system partition (from ``apptainer sif``)."""
    listing = subprocess.run(["apptainer", "sif", "list", str(image)], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    (fs_id,) = [line.split("|")[0].strip() for line in listing.splitlines()
                if "FS (Squashfs" in line]
    part = tmp_path / "root.squashfs"
    with part.open("wb") as out:
        subprocess.run(["apptainer", "sif", "dump", fs_id, str(image)], stdout=out, timeout=60,
                       check=True)
    return subprocess.run(["unsquashfs", "-s", str(part)], capture_output=True, text=True,
                          timeout=60, check=True).stdout


def assert_squashfs(project: Project, tmp_path: Path, compression: str,
                    args: str | None) -> None:
    """The image was written with ``compression`` at the level ``args`` told mksquashfs (none:
    Apptainer's own), and its record keeps both what mksquashfs was told and the compression
    read back from the image's superblock."""
    superblock = _squashfs_superblock(project.settings.image_path("multistage"), tmp_path)
    assert f"Compression {compression}" in superblock
    if args:  # the level mksquashfs was told is in the superblock's compression options
        assert f"compression-level {args.split()[-1]}" in superblock, superblock
    else:
        assert "compression-level 1" not in superblock, superblock
    record = json.loads(project.settings.provenance_path("multistage").read_text())
    assert (record["mksquashfs_args"], record["squashfs"]) == (args, compression)


@pytest.mark.parametrize("config,compression,args", [
    ({"squashfs_level": 1}, "gzip", "-comp gzip -Xcompression-level 1"),
    ({"squashfs": "gzip"}, "gzip", None),
])
def test_the_squashfs_settings_reach_mksquashfs(factory_project, tmp_path: Path,
                                                debian_base_image: Path, config: dict,
                                                compression: str, args: str | None) -> None:
    """A gzip level set alone writes gzip at that level; containers.squashfs gzip passes
    nothing and Apptainer writes its own gzip -9 (the default, zstd, is the multi-stage
    test's)."""
    root = multistage_project(factory_project())
    project = Project.load(root, {"images_dir": str(tmp_path / "images"),
                                      "tmp_dir": str(tmp_path / "work"), **config})
    lines: list[str] = []
    build(project, target="multistage", say=lines.append,
              build_args={"BASE_IMAGE": str(debian_base_image)})
    assert project.settings.image_path("multistage").is_file(), "\n".join(lines[-40:])
    assert_squashfs(project, tmp_path, compression, args)

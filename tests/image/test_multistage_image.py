"""Integration: a multi-stage definition built by the real Apptainer through the tool.

The first stage writes a file; the final stage, on the debian-base image the session builds
(``Bootstrap: localimage``), copies it out with ``%files from build``. No package installs: the
build takes seconds once debian-base exists.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from containers import app
from tests.image.test_plan import multistage_project

pytestmark = pytest.mark.apptainer


def test_multi_stage_build_copies_a_file_between_stages(factory_project, tmp_path: Path,
                                                        debian_base_image: Path,
                                                        real_runtime) -> None:
    root = multistage_project(factory_project())
    definition = root / "recipes" / "multistage.def"
    original = definition.read_bytes()
    project = app.Project.load(root, {"images_dir": str(tmp_path / "images"),
                                      "tmp_dir": str(tmp_path / "work")})
    lines: list[str] = []
    plan = app.build(project, target="multistage", say=lines.append,
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
    # and its %test (the final stage's) ran during the build and passes on the image itself
    subprocess.run(real_runtime.test_argv(image), capture_output=True, text=True, timeout=120,
                   check=True)

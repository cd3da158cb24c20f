"""Integration: images without Python 3, an HPCCM-style definition and SCIF apps without %post,
built for real by the tool on the session's debian-base (``Bootstrap: localimage``; no package
installs, seconds each).

The architecture is read from an ELF program in each image's files, whether it has a shell and
python or neither; an image without python3 (none at all, or Python 2 only) is kept, with one
line saying it was not probed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from containers.app.build import build
from containers.app.inspecting import inspect
from containers.app.project import Project
from containers.app.running import run_command
from containers.app.workloads import prove, train
from containers.host.runtime import Runtime
from containers.image.arch import image_arch, image_python
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from containers.run.needs import ImageLacks

pytestmark = pytest.mark.apptainer

DEFINITIONS = Path(__file__).resolve().parents[1] / "fixtures" / "definitions"


def _build(root: Path, tmp_path: Path, name: str, base: Path) -> tuple[Path, dict, list[str]]:
    shutil.copy(DEFINITIONS / f"{name}.def", root / "recipes" / f"{name}.def")
    (root / "recipes" / f"{name}.yaml").write_text(
        f"description: {name} (test only)\ndefinition: recipes/{name}.def\n")
    project = Project.load(root, {"images_dir": str(tmp_path / "images"),
                                  "tmp_dir": str(tmp_path / "work")})
    lines: list[str] = []
    build(project, target=name, say=lines.append, build_args={"BASE_IMAGE": str(base)})
    image = project.settings.image_path(name)
    assert image.is_file(), "\n".join(lines[-40:])
    return image, json.loads(project.settings.provenance_path(name).read_text()), lines


#: A command each image without Python runs by itself (scratch-static's only program).
OWN_COMMAND = {"scratch-static": ["/bin/ldconfig", "--version"],
               "no-python": ["/bin/sh", "-c", "echo own-command-ran"],
               "python2-only": ["/bin/sh", "-c", "python --version; echo own-command-ran"]}


@pytest.mark.parametrize("name", ["scratch-static", "no-python", "python2-only"])
def test_an_image_without_python_builds_and_is_kept(name: str, factory_project, tmp_path: Path,
                                                    debian_base_image: Path,
                                                    real_runtime: Runtime) -> None:
    image, record, lines = _build(factory_project(), tmp_path, name, debian_base_image)
    assert record["arch"] == "x86_64" and record["python"] is None
    assert f"==> {name}: the image has no Python 3 (python3): not probed (no SBOM, no site " \
           "fit); smoke and examples cannot run in it" in lines
    assert image_arch(real_runtime, image) == "x86_64" and image_python(real_runtime, image) is None
    _steps_that_need_python_refuse(tmp_path, name, image)


def _steps_that_need_python_refuse(tmp_path: Path, name: str, image: Path) -> None:
    """On the image just built: smoke, an example, torchrun and inspect are each refused in one
    line naming the image, before anything starts (no results folder); its own command with
    --no-launcher runs, as it needs no Python."""
    project = Project.load(tmp_path / "project", {"images_dir": str(tmp_path / "images"),
                                                  "tmp_dir": str(tmp_path / "work")})
    said = f"{os.path.relpath(image)} has no Python 3 (its build record says so): "
    refusals = {
        "smoke needs torch": lambda say: prove(
            project, target=name, options=SmokeOptions(gpus=1, sizes="1K"), say=say),
        "train ddp needs torch": lambda say: train(
            project, target=name, options=TrainOptions(example="ddp", gpus=1), say=say),
        "invoke run's launcher (torchrun) needs torch; --no-launcher runs the command as one "
        "process without it": lambda say: run_command(
            project, target=name, command=OWN_COMMAND[name], say=say),
        "invoke inspect needs python": lambda say: inspect(project, target=name, say=say),
    }
    for reason, step in refusals.items():
        lines: list[str] = []
        with pytest.raises(ImageLacks) as info:
            step(lines.append)
        assert (str(info.value), lines) == (said + reason, []), reason
    assert not project.settings.results_dir.exists()
    lines = []
    assert run_command(project, target=name, command=OWN_COMMAND[name], launcher=False,
                       say=lines.append) == 0
    assert lines[0].startswith(f"run: {name} on site local, 1 rank (no launcher)")
    assert lines[-1].startswith("run: exit 0"), lines
    assert any("own-command-ran" in line or "ldconfig" in line for line in lines), lines
    assert name != "python2-only" or any("Python 2.7.18" in line for line in lines), lines


def test_the_arch_of_a_scratch_image_is_read_without_a_shell(factory_project, tmp_path: Path,
                                                             debian_base_image: Path,
                                                             real_runtime: Runtime,
                                                             monkeypatch) -> None:
    """Its only program is a static binary: no shell to exec, so only reading its files from
    outside can tell (the exec fallback must not be reached)."""
    image, _, _ = _build(factory_project(), tmp_path, "scratch-static", debian_base_image)
    monkeypatch.setattr(Runtime, "exec_argv", lambda *a, **k: pytest.fail("exec used"))
    assert image_arch(real_runtime, image) == "x86_64"


def test_hpccm_style_repeated_sections_build_as_apptainer_appends_them(
        factory_project, tmp_path: Path, debian_base_image: Path, real_runtime: Runtime) -> None:
    image, record, _ = _build(factory_project(), tmp_path, "hpccm-style", debian_base_image)
    assert record["arch"] == "x86_64" and record["python"]  # its %test ran and passed
    env = subprocess.run(real_runtime.exec_argv(image=image, command=[
        "sh", "-c", 'echo "$TOOL_A $TOOL_B"; cat /opt/blocks']), capture_output=True, text=True,
        timeout=120, check=True).stdout.split("\n")
    assert env[:3] == ["/opt/tool-a /opt/tool-b", "first-block", "second-block"]


def test_apps_without_post_build_with_fakeroot_and_run(factory_project, tmp_path: Path,
                                                       debian_base_image: Path,
                                                       real_runtime: Runtime) -> None:
    """As Apptainer's examples/instances definition: %startscript and app sections, no %post.
    Apptainer runs the apps' install step in the image, which as plain root fails here (root
    lacks a capability: FACTS.md section 8); built with --fakeroot it is kept, and the app's
    install step and runscript are in it."""
    image, record, lines = _build(factory_project(), tmp_path, "apps-no-post", debian_base_image)
    assert record["arch"] == "x86_64" and record["python"], lines[-20:]
    ran = subprocess.run(real_runtime.exec_argv(image=image, command=[
        "sh", "-c", "cat /scif/apps/greeter/installed.txt"]), capture_output=True, text=True,
        timeout=120, check=True)
    assert ran.stdout.strip().split("\n")[-1] == "installed"
    app_run = subprocess.run([real_runtime.binary, "run", "--app", "greeter", str(image)],
                             capture_output=True, text=True, timeout=120, check=True)
    assert app_run.stdout.strip().split("\n")[-1] == "hello from greeter"

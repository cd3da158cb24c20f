"""What a run needs from its image, judged from its build record and env spec before it starts:
an image without Python runs no smoke, example or torchrun; an env without torch runs no smoke;
a record that says nothing refuses nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from containers.host.runtime import assumed_runtime
from tests.fixtures.data import load_targets
from containers.run.command import plan_command
from containers.run.launchers import LAUNCHERS
from containers.run.needs import (PYTHON, TORCH, ImageLacks, check_image, command_need,
                                  lacking, refuse_lacking)
from containers.run.rendezvous import Rendezvous
from containers.run.workload import Placement

ENVS = Path(__file__).resolve().parents[1] / "fixtures" / "envs"
NO_PYTHON = "has no Python 3 (its build record says so)"


def test_a_record_without_python_lacks_python_and_torch() -> None:
    record = {"python": None, "pip_freeze": ["torch==2.7.1"]}
    assert lacking(record, PYTHON) == lacking(record, TORCH) == NO_PYTHON
    assert lacking({"python": "/usr/bin/python3"}, PYTHON) is None
    assert lacking({}, TORCH) is None  # a record from before says nothing: no refusal


def test_the_pip_freeze_of_the_record_tells_torch() -> None:
    assert lacking({"pip_freeze": ["numpy==2.4", "mpi4py==4.0.3"]}, TORCH) == \
        "has no torch (its build record's pip freeze lists none)"
    assert lacking({"pip_freeze": ["numpy==2.4"]}, PYTHON) is None
    for word in ("torch==2.13.0+cpu", "torch", "Torch==2.5.1"):
        assert lacking({"pip_freeze": ["numpy==2.4", word]}, TORCH) is None, word
    assert lacking({"pip_freeze": ["torch", "@", "file:///w/torch.whl"]}, TORCH) is None
    assert lacking({"pip_freeze": ["torchvision==0.20"]}, TORCH)  # not torch itself


def _project(factory_project, data_settings, env: str):
    root = factory_project()
    shutil.copy(ENVS / env, root / "envs" / env)
    (root / "recipes" / "mine.yaml").write_text(
        f"description: mine\nsite: local\nbuilder: cotainr\nbase_image: docker://x\n"
        f"env: envs/{env}\n")
    target = load_targets(root)["mine"]
    image = data_settings.image_path("mine")
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(b"sif")
    return target


def test_an_env_spec_without_torch_refuses_smoke_in_one_line(factory_project,
                                                             data_settings) -> None:
    target = _project(factory_project, data_settings, "r-env.yml")
    with pytest.raises(ImageLacks) as info:
        check_image(target, data_settings, need=TORCH, doing="smoke")
    image = data_settings.image_path("mine")
    assert str(info.value) == (f"{os.path.relpath(image)} has no torch "
                               f"({os.path.relpath(target.env)} does not install it): smoke "
                               "needs torch")
    check_image(target, data_settings, need=PYTHON, doing="invoke inspect")  # it has python
    image.unlink()  # not built: nothing to judge (the run says the image is missing)
    check_image(target, data_settings, need=TORCH, doing="smoke")


def test_a_python_less_record_refuses_by_path() -> None:
    with pytest.raises(ImageLacks, match=r"^images/x.sif has no Python 3 \(its build record says "
                                         r"so\): invoke inspect needs python$"):
        refuse_lacking({"python": None}, image="images/x.sif", need=PYTHON,
                       doing="invoke inspect")
    refuse_lacking({"arch": "x86_64"}, image="images/x.sif", need=PYTHON, doing="invoke inspect")


def test_what_a_command_launcher_needs(data_world, data_settings) -> None:
    """torchrun is torch's; srun per GPU starts the command itself; a rank pinning its cores
    runs jobs/pinned.py with Python first."""
    targets, sites = data_world

    def need(site: str, target: str, placement=None) -> str | None:
        planned = plan_command(targets[target], sites[site], settings=data_settings,
                               runtime=assumed_runtime("apptainer"), command=["/bin/sh", "-c",
                                                                              "true"],
                               ranks=sites[site].gpus.per_node or 1, run_id="r", timeout=0,
                               placement=placement, environ={}, strict=False)
        return command_need(planned.workload)

    assert need("local", "cpu") == TORCH
    step = Placement(nodes=1, rendezvous=Rendezvous(host="h", port="1", id="1"),
                     launcher=LAUNCHERS["srun-per-gpu"])
    assert need("lumi", "lumi-rocm", step) is None


def test_invoke_run_on_a_gpu_site_image_without_python(factory_project, tmp_path) -> None:
    """Planned (a dry run for Olivia): torchrun is refused in one line; --no-launcher runs the
    command without the device gate, which is a Python program, and says so."""
    import json

    from containers.app.project import Project
    from containers.app.running import run_command

    project = Project.load(factory_project(), {"images_dir": str(tmp_path / "images")})
    image = project.settings.image_path("olivia-cuda")
    image.parent.mkdir(parents=True)
    image.write_bytes(b"sif")
    project.settings.provenance_path("olivia-cuda").write_text(json.dumps({"python": None}))
    with pytest.raises(ImageLacks, match=r"olivia-cuda.sif has no Python 3 \(its build record "
                                         r"says so\): invoke run's launcher \(torchrun\) needs "
                                         r"torch; --no-launcher runs"):
        run_command(project, target="olivia-cuda", command=["/bin/true"], dry_run=True,
                    say=lambda line: pytest.fail(line))
    lines: list[str] = []
    run_command(project, target="olivia-cuda", command=["/bin/true"], launcher=False,
                dry_run=True, say=lines.append)
    assert lines[0] == (f"# no device gate: {os.path.relpath(image)} has no Python 3 (its build "
                        "record says so) (the gate is a Python program); the command starts "
                        "without it")  # a dry run's prose is shell comments
    assert "# gate" not in lines
    assert lines[-2] == "# run" and lines[-1].endswith(" /bin/true")

"""Integration: the real CPU image, built by the real Apptainer through the tool (once per run)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from containers import app
from containers.files import sha256_file
from containers.build.plan import chain_hashes

pytestmark = pytest.mark.apptainer


def test_exec_torch_and_deepspeed_in_image(cpu_image: Path, real_runtime) -> None:
    argv = real_runtime.exec_argv(image=cpu_image, command=[
        "python", "-c", "import torch, deepspeed, numpy; print(torch.__version__, "
        "deepspeed.__version__, torch.distributed.is_gloo_available())"])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.split()[-3:] == ["2.13.0+cpu", "0.19.8", "True"]


def test_provenance_beside_and_inside_image(cpu_image: Path, real_project, real_runtime) -> None:
    record = json.loads(cpu_image.with_name("cpu.sif.json").read_text())
    assert record["inputs_hash"] == chain_hashes(real_project.targets, "cpu")["cpu"]
    assert record["sha256"] == sha256_file(cpu_image)
    assert record["size_bytes"] == cpu_image.stat().st_size
    assert record["runtime"] == {"flavour": real_runtime.flavour, "version": real_runtime.version}
    assert "torch==2.13.0+cpu" in record["pip_freeze"]
    assert record["inputs"]["base"] == chain_hashes(real_project.targets, "cpu")["debian-base"]
    labels = json.loads(subprocess.run(real_runtime.inspect_argv(cpu_image), capture_output=True,
                                       text=True, check=True).stdout)["data"]["attributes"]["labels"]
    # The image's own labels, not the ones inherited from debian-base.
    assert labels["containers.target"] == "cpu"
    assert labels["containers.inputs-hash"] == record["inputs_hash"]
    assert labels["containers.git-revision"] == record["git_revision"] != ""


def test_unchanged_inputs_rebuild_nothing(cpu_image: Path, real_project) -> None:
    before = cpu_image.stat().st_mtime_ns
    lines: list[str] = []
    started = time.monotonic()
    plan = app.build(real_project, target="cpu", say=lines.append)
    assert plan.pending == ()
    assert [s.action for s in plan.steps] == ["not-needed", "up-to-date"]
    assert "cpu is up to date: nothing to build" in lines
    assert cpu_image.stat().st_mtime_ns == before
    assert time.monotonic() - started < 30


def test_apptainer_test_passes_on_image(cpu_image: Path, real_runtime) -> None:
    result = subprocess.run(real_runtime.test_argv(cpu_image), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "gloo all_reduce in one process: ok" in result.stdout

"""Integration: the aarch64 image (cpu-arm64), built on this x86_64 machine and run under qemu
emulation, proves itself with a real 2-rank gloo all_reduce and one DDP epoch; its build record,
device reports and verdicts name aarch64, read from its files and its ranks, not its name."""

from __future__ import annotations

import json

import pytest

from containers.app.project import Project
from containers.app.workloads import prove, train
from containers.errors import ConfigError
from containers.host.facts import host_arch
from containers.image.arch import image_arch
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from tests.fixtures.images import results_project

pytestmark = [pytest.mark.apptainer, pytest.mark.distributed]


@pytest.fixture
def arm_project(real_project, tmp_path) -> Project:
    return results_project(real_project.root, tmp_path)


def test_the_image_is_aarch64_by_its_files(cpu_arm64_image, real_runtime) -> None:
    record = json.loads(cpu_arm64_image.with_name("cpu-arm64.sif.json").read_text())
    assert record["arch"] == "aarch64" == image_arch(real_runtime, cpu_arm64_image)
    assert any(p.startswith("torch==2.5.1") for p in record["pip_freeze"])


def test_smoke_under_emulation(cpu_arm64_image, arm_project) -> None:
    lines: list[str] = []
    result = prove(arm_project, target="cpu-arm64", say=lines.append,
                   options=SmokeOptions(gpus=2, sizes="64K", iters=1, warmup=0,
                                            timeout=600))
    assert result.ok, "\n".join(lines[-30:])
    (verdict,) = (arm_project.settings.results_dir / "smoke").glob("*/verdict.json")
    record = json.loads(verdict.read_text())
    assert record["passed"] and record["image_arch"] == "aarch64"
    assert record["arch"] == ["aarch64"] != [host_arch()]
    # Emulated bandwidth is never judged against the site's (native) references.
    assert record["performance"]["state"] == "no-reference"
    assert "under emulation" in record["performance"]["message"]
    devices = sorted(result.plan.out_dir.glob("device-*.json"))
    assert [json.loads(d.read_text())["arch"] for d in devices] == ["aarch64", "aarch64"]
    # emulated ranks end with os._exit, not by joining gloo's threads (qemu deadlocked there)
    ranks = sorted(result.plan.out_dir.glob("rank-*.json"))
    assert [json.loads(r.read_text())["teardown"] for r in ranks] == ["skipped", "skipped"]


def test_one_ddp_epoch_under_emulation(cpu_arm64_image, arm_project) -> None:
    lines: list[str] = []
    options = TrainOptions(gpus=2, example="ddp", model_size="tiny", epochs=1, samples=64,
                           batch_size=64, timeout=600)
    (result,) = train(arm_project, target="cpu-arm64", options=options, say=lines.append)
    assert lines[-2:] == ["sanity:      PASS", "verdict: PASS"], "\n".join(lines[-30:])
    (verdict,) = (arm_project.settings.results_dir / "train-ddp").glob("*/verdict.json")
    assert json.loads(verdict.read_text())["arch"] == ["aarch64"]


@pytest.mark.parametrize("example", ["fsdp", "deepspeed"])
def test_examples_the_image_cannot_run_are_refused(arm_project, example) -> None:
    with pytest.raises(ConfigError, match="torch 2.6|deepspeed"):
        train(arm_project, target="cpu-arm64", say=lambda line: None,
              options=TrainOptions(gpus=2, example=example, model_size="tiny"))

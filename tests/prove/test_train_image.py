"""Integration: the DDP, DeepSpeed (ZeRO-1, ZeRO-3) and FSDP examples train for real inside the
CPU image through ``apptainer exec`` + torchrun (``invoke train``), 2 ranks, gloo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.app.project import Project
from containers.app.workloads import train
from containers.errors import VerdictFailed
from containers.prove.train import TrainOptions
from tests.fixtures.images import results_project

pytestmark = [pytest.mark.apptainer, pytest.mark.distributed]

# LUMI's published ds_config style: trailing commas, which DeepSpeed (hjson) reads and json
# does not.
LUMI_DS_CONFIG = """{
  "train_batch_size": 32,
  "steps_per_print": 100,
  "zero_optimization": {"stage": 1,},
  "optimizer": {"type": "Adam", "params": {"lr": 0.001,},},
  "fp16": {"enabled": false,},
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "wall_clock_breakdown": false,
}
"""


@pytest.fixture
def train_project(real_project, tmp_path) -> Project:
    return results_project(real_project.root, tmp_path)


def _train(project: Project, lines: list[str], **kw) -> dict:
    options = TrainOptions(**{"gpus": 2, "model_size": "tiny", "epochs": 2, "samples": 1024,
                              "batch_size": 64, "timeout": 600, **kw})
    (result,) = train(project, target="cpu", options=options, say=lines.append)
    assert sorted(p.name for p in result.plan.out_dir.glob("rank-*.json")) == [
        "rank-0.json", "rank-1.json"]
    return result.outcome.report


@pytest.mark.parametrize("example, extra, method", [
    ("ddp", {}, "module parameters on each rank"),
    ("deepspeed", {"zero_stage": 1}, None),
    ("deepspeed", {"zero_stage": 3}, "deepspeed.zero.GatheredParameters per parameter"),
    ("fsdp", {}, None),
])
def test_examples_train_in_image(cpu_image, train_project, example, extra, method) -> None:
    lines: list[str] = []
    report = _train(train_project, lines, example=example, **extra)
    assert lines[-2:] == ["sanity:      PASS", "verdict: PASS"], "\n".join(lines[-30:])
    # The same verdict record as smoke's: this image's provenance, the kind, the gate.
    (path,) = (train_project.settings.results_dir / f"train-{example}").glob("*/verdict.json")
    record = json.loads(path.read_text())
    provenance = json.loads(cpu_image.with_name("cpu.sif.json").read_text())
    assert (record["kind"], record["passed"], record["reasons"]) == ("train", True, [])
    assert (record["sha256"], record["inputs_hash"]) == (provenance["sha256"],
                                                         provenance["inputs_hash"])
    assert record["performance"] is None and record["example"] == example
    assert report["example"] == example and report["world_size"] == 2
    assert report["backend"] == "gloo" and report["ok"] is True
    assert report["loss_last"] < report["loss_first"]
    assert report["params_consistent"] is True
    assert report["throughput"] > 0 and len(report["epochs"]) == 2
    if method:
        assert report["consistency"]["method"] == method
    if example == "deepspeed":
        assert report["zero_stage"] == extra["zero_stage"]


def test_lumi_style_ds_config_loads_and_bad_one_is_refused(cpu_image, train_project,
                                                           tmp_path: Path) -> None:
    good = tmp_path / "ds_config.json"
    good.write_text(LUMI_DS_CONFIG)
    lines: list[str] = []
    report = _train(train_project, lines, example="deepspeed", ds_config=good)
    assert report["zero_stage"] == 1 and report["loss_last"] < report["loss_first"]
    assert report["ds_config_overrides"]  # batch sizes fitted to 2 ranks and the global batch
    bad = tmp_path / "bad.json"
    bad.write_text('{"train_batch_size": 32 "zero_optimization": {}}')
    with pytest.raises(VerdictFailed) as info:
        _train(train_project, [], example="deepspeed", ds_config=bad)
    assert info.value.exit_code == 2
    message = str(info.value)
    assert "train.py: error: /opt/containers/ds_config.json: line 1" in message
    assert "not valid JSON" in message


def test_scaling_report(cpu_image, train_project) -> None:
    lines: list[str] = []
    options = TrainOptions(example="ddp", gpus=1, model_size="tiny", epochs=2, samples=1024,
                           batch_size=64, timeout=600)
    results = train(train_project, target="cpu", options=options, scaling=[1, 2],
                    say=lines.append)
    assert [r.plan.ranks for r in results] == [1, 2]
    (folder,) = (train_project.settings.results_dir / "train-ddp").glob("cpu-*-scaling")
    data = json.loads((folder / "scaling.json").read_text())
    assert [row["ranks"] for row in data["rows"]] == [1, 2]
    assert data["rows"][0]["speedup"] == 1.0 and data["rows"][1]["speedup"] > 0
    assert (folder / "scaling.png").stat().st_size > 10_000

"""``invoke train`` planning (exact argv, binds), validation, verdicts and scaling arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError, VerdictFailed
from containers.inputs.recipes import load_targets
from containers.inputs.sites import load_site
from containers.prove.train import (TrainOptions, TrainResult, check, parse_scaling, plan_train,
                                    scaling_rows, verdict)
from containers.run.workload import Outcome


@pytest.fixture
def data_cpu(data_root):
    return load_targets(data_root)["cpu"], load_site(data_root / "sites" / "local.yaml")


def test_deepspeed_plan_binds_config_and_data(data_cpu, data_settings, data_runtime,
                                              tmp_path) -> None:
    target, site = data_cpu
    config = tmp_path / "ds.json"
    config.write_text("{}")
    data = tmp_path / "cifar"
    data.mkdir()
    plan = plan_train(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                      options=TrainOptions(example="deepspeed", gpus=2, zero_stage=3,
                                           ds_config=config, data=data, model="vit",
                                           epochs=2, batch_size=32))
    out = data_settings.results_dir / "train-deepspeed" / "cpu-r"
    assert plan.out_dir == out and plan.report_name == "train.json"
    assert plan.argv == [
        "apptainer", "exec",
        "--bind", f"{data_settings.root / 'jobs'}:/opt/containers/jobs:ro",
        "--bind", f"{out}:/opt/containers/results",
        "--bind", f"{config}:/opt/containers/ds_config.json:ro",
        "--bind", f"{data}:/opt/containers/data:ro",
        str(data_settings.images_dir / "cpu.sif"),
        "torchrun", "--standalone", "--nproc-per-node=2", "/opt/containers/jobs/train.py",
        "--example", "deepspeed", "--epochs", "2", "--batch-size", "32",
        "--out", "/opt/containers/results", "--model", "vit", "--zero-stage", "3",
        "--ds-config", "/opt/containers/ds_config.json", "--data", "/opt/containers/data"]


@pytest.mark.parametrize("options, message", [
    (TrainOptions(example="ddpp", gpus=2), "--example must be one of ddp, deepspeed, fsdp"),
    (TrainOptions(example="ddp", gpus=2, model="vgg"), "--model must be one of"),
    (TrainOptions(example="deepspeed", gpus=2, zero_stage=4), "--zero-stage must be 1, 2 or 3"),
    (TrainOptions(example="ddp", gpus=3, batch_size=64), "must divide evenly over 3 ranks"),
    (TrainOptions(example="ddp", gpus=2, data=Path("/nonexistent/x")), "--data /nonexistent/x"),
    (TrainOptions(example="ddp", gpus=0), "--gpus must be at least 1"),
])
def test_bad_options_are_refused(data_cpu, data_settings, data_runtime, options, message):
    target, site = data_cpu
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        plan_train(target, site, settings=data_settings, runtime=data_runtime, options=options,
                   run_id="r")


def _result(plan, report, **outcome) -> TrainResult:
    base = dict(returncode=0, timed_out=False, missing_ranks=[], seconds=1.0, report=report)
    return TrainResult(plan=plan, outcome=Outcome(**{**base, **outcome}))


def test_verdicts_and_scaling(data_cpu, data_settings, data_runtime) -> None:
    target, site = data_cpu
    plans = [plan_train(target, site, settings=data_settings, runtime=data_runtime,
                        options=TrainOptions(example="ddp", gpus=n), run_id=f"r{n}")
             for n in (1, 2, 4)]
    good = {"loss_first": 2.3, "loss_last": 0.4, "params_consistent": True, "throughput": 100.0,
            "epochs": [{}, {}], "ok": True}
    assert verdict(_result(plans[1], good)) == []
    flat = {**good, "loss_last": 2.5}
    assert verdict(_result(plans[1], flat)) == [
        "the loss did not fall (first epoch 2.3, last epoch 2.5)"]
    one_epoch = {**good, "loss_last": 2.3, "epochs": [{}]}
    assert verdict(_result(plans[1], one_epoch)) == []  # no trend to judge in one epoch
    split = {**good, "params_consistent": False}
    assert verdict(_result(plans[1], split)) == [
        "model parameters differ across ranks after training"]
    with pytest.raises(VerdictFailed, match="train FAILED for cpu \\(2 ranks\\): no train.json"):
        check(_result(plans[1], None, returncode=0))
    results = [_result(plans[0], {**good, "throughput": 100.0}),
               _result(plans[1], {**good, "throughput": 180.0}),
               _result(plans[2], {**good, "throughput": 300.0})]
    rows = scaling_rows(results)
    assert [r["ranks"] for r in rows] == [1, 2, 4]
    assert [round(r["speedup"], 2) for r in rows] == [1.0, 1.8, 3.0]
    assert [round(r["efficiency"], 2) for r in rows] == [1.0, 0.9, 0.75]
    assert parse_scaling("4,1,2,2") == [1, 2, 4]
    with pytest.raises(ConfigError, match="not a comma list"):
        parse_scaling("1,two")

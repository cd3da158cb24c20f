"""``invoke train`` planning (exact argv, binds), validation, verdicts and scaling arithmetic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from containers.errors import UsageError, VerdictFailed
from containers.inputs.flags import RANK_LIST
from tests.fixtures.data import load_targets
from containers.inputs.sites import load_site
from containers.prove.kind import plan as plan_run
from containers.prove.train import TRAINS, TrainOptions, scaling_rows
from containers.prove.verdict import Result, check
from containers.run import allocation
from containers.run.workload import Outcome
from tests.fixtures.reports import train_report


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
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
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
        "torchrun", "--standalone", "--nproc-per-node=2",
        "--log-dir=/opt/containers/results/torchelastic",
        "/opt/containers/jobs/train.py",
        "--example", "deepspeed", "--epochs", "2", "--batch-size", "32",
        "--out", "/opt/containers/results", "--model", "vit", "--zero-stage", "3",
        "--ds-config", "/opt/containers/ds_config.json", "--data", "/opt/containers/data",
        "--expect-gpu", "none", "--backend", "gloo"]


@pytest.mark.parametrize("values, message", [
    ({"example": "ddpp"}, "--example must be one of ddp, deepspeed, fsdp (got 'ddpp')"),
    ({"model": "vgg"}, "--model must be one of vit, wideresnet, cnn, resnet (got 'vgg')"),
    ({"model": "cnn", "model_size": "40-2"},
     "--model-size: unknown size '40-2' for model cnn: use one of tiny, small, base"),
    ({"zero_stage": 4}, "--zero-stage must be one of 1, 2, 3 (got 4)"),
    ({"gpus": 3, "batch_size": 64},
     "--batch-size 64 is the global batch; it must divide evenly over 3 ranks"),
    ({"data": Path("/nonexistent/x")}, "--data takes an existing folder (got '/nonexistent/x')"),
    ({"ds_config": Path("/nonexistent/ds.json")},
     "--ds-config takes an existing file (got '/nonexistent/ds.json')"),
    ({"gpus": 0}, "--gpus must be at least 1 (got 0)"),
    ({"epochs": 0}, "--epochs must be at least 1 (got 0)"),
    ({"samples": 0}, "--samples must be at least 1 (got 0)"),
    ({"lr": 0.0}, "--lr must be more than 0 (got 0)"),
    ({"timeout": -1.0}, "--timeout must be more than 0 (got -1)"),
    ({"target_accuracy": 1.5}, "--target-accuracy must be a fraction in (0, 1] (got 1.5)"),
])
def test_bad_options_are_refused_when_made(values, message) -> None:
    with pytest.raises(UsageError) as info:
        TrainOptions(**{"example": "ddp", "gpus": 2, **values})
    assert str(info.value) == message
    assert info.value.flag == message.split()[0].rstrip(":")
    assert TrainOptions(example="ddp", gpus=2, model="wideresnet", model_size="40-2").kind \
        is TRAINS["ddp"]
    with pytest.raises(UsageError, match="divide evenly over 3 ranks"):
        replace(TrainOptions(example="ddp", gpus=2), gpus=3)  # a changed copy checks itself


def test_global_batch_divides_over_every_node(data_cpu, data_settings, data_runtime) -> None:
    target, site = data_cpu
    across = allocation.across_nodes(3, dry_run=True, environ={})  # as a dry run plans it
    options = TrainOptions(example="ddp", gpus=2, batch_size=64)
    with pytest.raises(UsageError, match="--batch-size 64 is the global batch; it must divide "
                                         "evenly over 6 ranks"):
        plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                   options=options, placement=across, strict=False)
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                      options=TrainOptions(example="ddp", gpus=2, batch_size=60),
                      placement=across, strict=False)
    assert (plan.ranks, plan.launch.nodes) == (6, 3)


def _result(plan, report, **outcome) -> Result:
    base = dict(returncode=0, timed_out=False, missing_ranks=[], seconds=1.0, report=report)
    return Result(kind=TRAINS["ddp"], plan=plan, outcome=Outcome(**{**base, **outcome}))


def verdict(result: Result) -> list[str]:
    return result.reasons


def test_verdicts_and_scaling(data_cpu, data_settings, data_runtime) -> None:
    target, site = data_cpu
    plans = [plan_run(target, site, settings=data_settings, runtime=data_runtime,
                        options=TrainOptions(example="ddp", gpus=n), run_id=f"r{n}")
             for n in (1, 2, 4)]
    good = train_report(loss_first=2.3, loss_last=0.4, throughput=100.0)
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
    assert RANK_LIST("--scaling", "4,1,2,2") == [1, 2, 4]  # invoke train --scaling
    for bad in ("1,two", "0,2", ","):
        with pytest.raises(UsageError, match=r"^--scaling takes a comma list of rank counts "
                                             r">= 1, e.g. 1,2,4 \(got '"):
            RANK_LIST("--scaling", bad)


@pytest.mark.parametrize("change, reason", [
    (dict(throughput="fast"), "train.json: throughput is str, not float or null"),
    (dict(final={"loss": 1.0}), "train.json: final lacks accuracy, val_loss, val_accuracy"),
    (dict(loss_first=None, epochs=None), "train.json: epochs is null"),
])
def test_a_report_not_of_the_typed_shape_fails_saying_why(data_cpu, data_settings,
                                                         data_runtime, change, reason) -> None:
    """The judge reads the shape jobs/train.py writes: anything else fails closed, naming the
    key, instead of being read by guess."""
    target, site = data_cpu
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                    options=TrainOptions(example="ddp", gpus=2))
    (found,) = verdict(_result(plan, train_report(**change)))
    assert found == f"{reason} (not the report jobs/train.py writes)"
    assert TRAINS["ddp"].details(_result(plan, train_report(**change)))["throughput"] is None


def test_a_missing_key_fails_naming_it(data_cpu, data_settings, data_runtime) -> None:
    target, site = data_cpu
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                    options=TrainOptions(example="ddp", gpus=2))
    report = train_report()
    del report["params_consistent"]
    assert verdict(_result(plan, report)) == [
        "train.json lacks params_consistent (not the report jobs/train.py writes)"]


def test_compile_passes_through(data_cpu, data_settings, data_runtime) -> None:
    target, site = data_cpu
    plain = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                     options=TrainOptions(example="ddp", gpus=2))
    compiled = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                        options=TrainOptions(example="ddp", gpus=2, compile=True))
    assert "--compile" not in plain.argv
    assert compiled.argv[compiled.argv.index("--out") + 2] == "--compile"


def test_a_seed_preset_brings_its_batch(data_cpu, data_settings, data_runtime) -> None:
    target, site = data_cpu

    def batch(**options) -> str:
        plan = plan_run(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                        options=TrainOptions(example="ddp", gpus=2, **options))
        return plan.argv[plan.argv.index("--batch-size") + 1]

    assert batch(model="wideresnet", model_size="olivia") == "256"  # Sigma2's guide
    assert batch(model="wideresnet", model_size="olivia", batch_size=32) == "32"
    assert batch(model="cnn") == "64"
    with pytest.raises(UsageError, match="--batch-size 256 is the global batch; it must divide "
                                         "evenly over 3 ranks"):
        TrainOptions(example="ddp", gpus=3, model="wideresnet", model_size="olivia")

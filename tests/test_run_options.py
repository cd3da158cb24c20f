"""One table of run options: invoke job takes every option of invoke smoke / invoke train, into
job.json and the workload's argv, and an option that does not apply is refused in one line."""

from __future__ import annotations

import json
import re

import pytest
from invoke import Config, Context, Exit

import tasks
from tests.fixtures import ROOT


@pytest.fixture
def ctx(tmp_path) -> Context:
    return Context(Config(overrides={"containers": {"results_dir": str(tmp_path / "results")}}))


@pytest.mark.parametrize("task, args, message", [
    (tasks.train, dict(example="ddp", zero_stage="3"),
     "error: --zero-stage applies to --example deepspeed, not --example ddp; leave it out"),
    (tasks.train, dict(example="fsdp", ds_config=str(ROOT / "jobs/ds_config/zero2.json")),
     "error: --ds-config applies to --example deepspeed, not --example fsdp; leave it out"),
    (tasks.job, dict(workload="ddp", site="local-slurm", zero_stage="2"),
     "error: --zero-stage applies to --workload deepspeed, not --workload ddp; leave it out"),
    (tasks.job, dict(workload="fsdp", site="local-slurm",
                     ds_config=str(ROOT / "jobs/ds_config/zero2.json")),
     "error: --ds-config applies to --workload deepspeed, not --workload fsdp; leave it out"),
    (tasks.job, dict(workload="smoke", site="local-slurm", lr="0.1"),
     "error: --lr: applies to train jobs, not --workload smoke; leave it out"),
    (tasks.job, dict(workload="build", site="local-slurm", timeout="60"),
     "error: --timeout: applies to smoke and train jobs, not --workload build; leave it out"),
])
def test_options_that_do_not_apply_are_refused(ctx, task, args, message) -> None:
    with pytest.raises(Exit) as refused:
        task(ctx, **args)
    assert refused.value.message == message and refused.value.code == 1


def test_a_deepspeed_job_carries_every_training_option(ctx, tmp_path, capsys) -> None:
    config = ROOT / "jobs/ds_config/zero2.json"
    tasks.job(ctx, workload="deepspeed", site="local-slurm", zero_stage="2", lr="0.01",
              ds_config=str(config), data=str(tmp_path), timeout="900",
              target_accuracy="0.5", compile=True, out=str(tmp_path / "job.sh"))
    text = (tmp_path / "job.sh").read_text()
    (record,) = [json.loads(line) for line in text.splitlines() if line.startswith('{"target"')]
    assert record["options"] == {"epochs": 3, "lr": 0.01, "zero_stage": 2,
                                 "ds_config": str(config), "data": str(tmp_path),
                                 "target_accuracy": 0.5, "compile": True, "timeout": 900.0}
    run = next(line for line in text.splitlines() if "train.py --example deepspeed" in line)
    assert re.search(r"--lr 0\.01 .*--compile --zero-stage 2 --ds-config \S+ --data ", run)


def test_a_smoke_job_takes_smoke_options(ctx, tmp_path) -> None:
    tasks.job(ctx, workload="smoke", site="local-slurm", warmup="2", dtype="bfloat16",
              timeout="120", out=str(tmp_path / "job.sh"))
    text = (tmp_path / "job.sh").read_text()
    (record,) = [json.loads(line) for line in text.splitlines() if line.startswith('{"target"')]
    assert record["options"]["warmup"] == 2 and record["options"]["dtype"] == "bfloat16"
    assert record["options"]["timeout"] == 120.0


def test_qos_reservation_and_directives_reach_the_preamble(ctx, tmp_path) -> None:
    tasks.job(ctx, site="local-slurm", qos="devel", reservation="r1",
              directive=["--constraint=hbm", "-x n2"], out=str(tmp_path / "job.sh"))
    lines = (tmp_path / "job.sh").read_text().splitlines()
    assert {"#SBATCH --qos=devel", "#SBATCH --reservation=r1", "#SBATCH --constraint=hbm",
            "#SBATCH -x n2"} <= set(lines)


@pytest.mark.parametrize("args, message", [
    (dict(directive=["--x=$(id)"]), "error: --directive takes one scheduler option such as "
     "--constraint=gpu, -C gpu or -l place=scatter, on one line"),
    (dict(directive=["--a=1\n#SBATCH --b"]), "error: --directive takes one scheduler option "
     "such as --constraint=gpu, -C gpu or -l place=scatter, on one line"),
    (dict(directive=["--time=9-00:00:00"]), "error: --directive names --time, which the tool "
     "sets: use --time (got '--time=9-00:00:00')"),
    (dict(directive=["--export=ALL,LD_PRELOAD=/tmp/x.so"]), "error: --directive refuses "
     "--export: it would change who the job runs as"),
    (dict(qos="de vel"), "error: --qos takes a name: 1-64 letters, digits and _ . + - (not "
     "starting with . or -) (got 'de vel')"),
    (dict(qos="--x"), "error: --qos takes a name"),
    (dict(account="proj@x"), "error: --account takes an account name"),
    (dict(account="-proj"), "error: --account takes an account name"),
    (dict(target="derecho-cuda", account="a1", qos="devel"),
     "error: --qos: PBS has no qos directive"),
])
def test_bad_scheduler_lines_are_refused(ctx, tmp_path, args, message) -> None:
    args = {"site": "local-slurm", **args} if "target" not in args else args
    with pytest.raises(Exit) as refused:
        tasks.job(ctx, out=str(tmp_path / "job.sh"), **args)
    assert refused.value.message.startswith(message)
    assert "\n" not in refused.value.message
    assert not (tmp_path / "job.sh").exists()

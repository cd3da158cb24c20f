"""The host and the workload scripts agree on the names: both read ``jobs/choices.py``."""

from __future__ import annotations

import pytest

from containers.inputs import names
from containers.prove.smoke import SmokeOptions
from containers.prove.train import EXAMPLES, TrainOptions
from tests.fixtures import ROOT


def _flag_choices(parser, flag: str) -> tuple:
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return tuple(action.choices)


def test_host_reads_the_checkouts_jobs_choices() -> None:
    assert names.choices.__file__ == str(ROOT / "jobs" / "choices.py")
    assert EXAMPLES == names.EXAMPLES == ("ddp", "deepspeed", "fsdp")
    assert names.DTYPES == ("float32", "float16", "bfloat16")
    for example in names.EXAMPLES:
        TrainOptions(example=example, gpus=1)
    for model in names.MODELS:
        for size in names.MODEL_SIZES:
            TrainOptions(example="ddp", gpus=1, model=model, model_size=size)
    for dtype in names.DTYPES:
        SmokeOptions(gpus=1, dtype=dtype)


def test_scripts_offer_exactly_the_hosts_names() -> None:
    pytest.importorskip("torch")
    from tests.jobs.scripts import script

    allreduce = script("allreduce.py", "allreduce_names").build_parser()
    train = script("train.py", "train_names").build_parser()
    assert set(_flag_choices(allreduce, "--dtype")) == set(names.DTYPES)
    assert _flag_choices(train, "--example") == names.EXAMPLES
    assert _flag_choices(train, "--model") == names.MODELS
    assert _flag_choices(train, "--zero-stage") == names.ZERO_STAGES

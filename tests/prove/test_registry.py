"""The workload registry: every name a job takes maps to the kind that owns its options, run
options, estimate and judge; commands ask it instead of comparing names."""

from __future__ import annotations

from dataclasses import fields

import pytest

from containers.errors import UsageError
from containers.prove import registry
from containers.prove.smoke import SMOKE, SmokeOptions
from containers.prove.train import EXAMPLES, TRAIN, TrainOptions


def test_every_workload_name_has_its_kind() -> None:
    assert list(registry.WORKLOADS) == ["smoke", *EXAMPLES, "run", "build"]
    assert {registry.kind_of(name).name for name in EXAMPLES} == {"train"}
    assert registry.kind_of("run") is registry.RUN and registry.kind_of("build") is registry.BUILD


def test_an_unknown_workload_is_refused_with_a_suggestion() -> None:
    with pytest.raises(UsageError, match=r"--workload must be one of smoke, ddp, deepspeed, "
                                         r"fsdp, run, build \(got 'smok'\).*smoke"):
        registry.kind_of("smok")


def test_a_kinds_run_options_are_fields_of_its_options_type() -> None:
    """The run options a kind takes are exactly ones its options type has a field for."""
    for kind in {id(k): k for k in registry.WORKLOADS.values()}.values():
        if kind.options_type is None:
            assert kind.run_options == ()
            continue
        assert set(kind.run_options) <= {f.name for f in fields(kind.options_type)}, kind.name


@pytest.mark.parametrize("option, kinds", [("lr", ["train"]), ("op", ["smoke"]),
                                           ("timeout", ["smoke", "train"]), ("nodes", [])])
def test_applies_to_names_the_kinds_that_take_an_option(option, kinds) -> None:
    assert registry.applies_to(option) == kinds


def test_estimates_and_judges_are_the_kinds() -> None:
    assert [registry.kind_of(n).estimate for n in ("smoke", "ddp", "run", "build")] == \
        [1800, 3600, 3600, 7200]
    assert [registry.kind_of(n).judge for n in ("smoke", "fsdp", "run", "build")] == \
        ["checkout", "checkout", "image", None]
    assert registry.BUILD.builds_image and not registry.BUILD.multinode
    assert registry.RUN.takes_command and not SMOKE.takes_command


def test_job_options_are_made_by_the_kind() -> None:
    smoke = registry.job_options("smoke", gpus=4, given={"iters": "7"})
    assert smoke == SmokeOptions(gpus=4, iters=7)
    train = registry.job_options("deepspeed", gpus=2, given={"zero_stage": "2"})
    assert train == TrainOptions(example="deepspeed", gpus=2, zero_stage=2)
    assert registry.job_options("run", gpus=1, given={}) is None
    assert registry.job_options("build", gpus=1, given={}) is None


@pytest.mark.parametrize("workload, given, message", [
    ("smoke", {"lr": 0.1}, "applies to train jobs, not --workload smoke; leave it out"),
    ("build", {"timeout": 9}, "applies to smoke and train jobs, not --workload build"),
    ("ddp", {"zero_stage": 2}, "--zero-stage applies to --workload deepspeed, not --workload "
                               "ddp"),
])
def test_job_options_refuse_what_the_kind_does_not_take(workload, given, message) -> None:
    with pytest.raises(UsageError, match=message):
        registry.job_options(workload, gpus=1, given=given)


def test_resized_keeps_given_options_of_the_kind_else_defaults() -> None:
    given = TrainOptions(example="ddp", gpus=1, epochs=5)
    assert TRAIN.resized("fsdp", given, gpus=4) == TrainOptions(example="fsdp", gpus=4,
                                                                epochs=5)
    assert TRAIN.resized("ddp", SmokeOptions(gpus=1), gpus=2) == \
        TrainOptions(example="ddp", gpus=2)
    assert SMOKE.resized("smoke", SmokeOptions(gpus=1, iters=3), gpus=8) == \
        SmokeOptions(gpus=8, iters=3)
    assert registry.RUN.resized("run", None, gpus=2) is None


def test_a_kind_without_options_refuses_given_values() -> None:
    with pytest.raises(UsageError, match="--workload run takes no run options"):
        registry.RUN.make_options("run", gpus=1, given={"iters": 3})

"""The host and the workload scripts agree on the names: both read ``jobs/choices.py``."""

from __future__ import annotations

import ast

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


# ------------------------------------------------------------------------ the GPU kinds
def test_a_gpu_kind_carries_what_depends_on_it() -> None:
    assert [str(gpu) for gpu in names.Gpu] == ["none", "cuda", "rocm"]
    assert names.Gpu("rocm") is names.Gpu.ROCM and names.Gpu.CUDA == "cuda"
    assert [gpu.flag for gpu in names.Gpu] == [None, "--nv", "--rocm"]
    assert names.Gpu.ROCM.visible_devices == "ROCR_VISIBLE_DEVICES"
    assert names.Gpu.CUDA.arch.match("sm_90") and not names.Gpu.ROCM.arch.match("sm_90")
    assert repr(names.Gpu.NONE) == "'none'"  # a refusal lists the kinds as inputs spell them


#: Files the GPU kind's owner does not edit this turn (batch/ is another change's): their
#: compares still hold, a Gpu being the str it names.
NOT_YET = {"containers/batch/siterules.py", "containers/batch/job.py"}


def gpu_string_compares(source: str) -> list[int]:
    """The lines of ``source`` that compare a GPU kind or a torch build (an expression naming
    ``gpu`` or ``build``) with a string literal spelling a kind, not a :class:`names.Gpu`."""
    spellings = {str(gpu) for gpu in names.Gpu}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literal = any(isinstance(n, ast.Constant) and n.value in spellings
                      for side in sides for n in ast.walk(side))
        named = any("gpu" in ast.unparse(side).lower() or "build" in ast.unparse(side)
                    for side in sides)
        if literal and named:
            found.append(node.lineno)
    return found


def test_the_counter_finds_a_gpu_kind_compared_as_a_string() -> None:
    source = ("a = site.gpus.kind == 'none'\n"
              "b = gpu in ('cuda', 'rocm')\n"
              "c = stack.get('build') != 'cuda'\n"
              "d = site.gpus.kind == Gpu.NONE\n"
              "e = report.get('device') == 'cuda'\n")  # torch's device type, not a kind
    assert gpu_string_compares(source) == [1, 2, 3]


def test_no_gpu_kind_is_compared_as_a_string() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in [ROOT / "tasks.py", *sorted((ROOT / "containers").rglob("*.py"))]
             if path.relative_to(ROOT).as_posix() not in NOT_YET
             for line in gpu_string_compares(path.read_text(encoding="utf-8"))]
    assert not found, f"GPU kinds compared as strings: {found}"

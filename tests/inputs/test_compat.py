"""Whether each training example can run on a target's image: its torch against the example's."""

from __future__ import annotations

import re

import pytest

from containers.errors import ConfigError
from containers.inputs import compat
from containers.inputs.envspec import load_env_spec
from containers.inputs.names import EXAMPLES
from tests.fixtures.data import load_targets
from tests.fixtures.data import pin_torch


def test_every_example_has_its_needs() -> None:
    assert set(compat.NEEDS) == set(EXAMPLES)
    assert compat.NEEDS["fsdp"].torch == (2, 6)


def test_shipped_targets_fit_every_example(data_root) -> None:
    targets = load_targets(data_root)
    for name in ("cpu", "lumi-rocm", "lumi-rocm-def"):
        for example in EXAMPLES:
            assert compat.check_example(targets[name], example) is None, (name, example)


def test_fsdp_on_torch_2_5_names_the_env_spec_and_the_example(factory_project) -> None:
    root = factory_project()
    spec = root / "envs" / "lumi-rocm.yml"
    line = pin_torch(root, "2.5.1+rocm6.2")
    target = load_targets(root)["lumi-rocm"]
    with pytest.raises(ConfigError) as info:
        compat.check_example(target, "fsdp")
    assert str(info.value) == (
        f"{spec}:{line}: torch: target lumi-rocm gets torch 2.5, but example 'fsdp' needs "
        "torch >= 2.6 (FSDP2 (fully_shard, MixedPrecisionPolicy) is public in "
        "torch.distributed.fsdp from torch 2.6)")
    assert compat.check_example(target, "ddp") is None  # DDP runs on 2.5


def test_base_image_torch_declared_or_unknown(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "puhti-cuda.yaml"
    # NGC: torch is the base image's, not pinned; the manifest says which its tag ships
    assert compat.check_example(load_targets(root)["puhti-cuda"], "fsdp") is None
    manifest.write_text(re.sub(r"(?m)^torch: .*\n", "", manifest.read_text()))
    target = load_targets(root)["puhti-cuda"]
    note = compat.check_example(target, "fsdp")
    assert note is not None and "torch version unknown" in note  # said, never a failure
    errors, notes = compat.example_problems(target, EXAMPLES, load_env_spec(target.env))
    assert errors == [] and len(notes) == 1 and "fsdp >= 2.6" in notes[0]
    manifest.write_text(manifest.read_text() + 'torch: "2.5.0a0"\n')
    with pytest.raises(ConfigError, match=rf"^{manifest}:\d+: torch: target puhti-cuda gets "
                                          r"torch 2.5, but example 'fsdp' needs torch >= 2.6"):
        compat.check_example(load_targets(root)["puhti-cuda"], "fsdp")


def test_deepspeed_example_needs_the_package(factory_project) -> None:
    root = factory_project()
    spec = root / "envs" / "cpu.yml"
    spec.write_text(spec.read_text().replace("      - deepspeed==0.19.8\n", ""))
    with pytest.raises(ConfigError, match=r"example 'deepspeed' needs the deepspeed package, "
                                          rf"which {spec} does not install"):
        compat.check_example(load_targets(root)["cpu"], "deepspeed")


ENVS = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "envs"


def _cotainr_target(root, env: str, extra: str = ""):
    """A cotainr target on ``tests/fixtures/envs/<env>`` (copied into ``root``)."""
    import shutil
    shutil.copy(ENVS / env, root / "envs" / env)
    (root / "recipes" / "mine.yaml").write_text(
        f"description: mine\nsite: local\nbuilder: cotainr\nbase_image: docker://x\n"
        f"env: envs/{env}\n{extra}")
    return load_targets(root)["mine"]


def test_an_env_without_torch_gets_no_examples(factory_project) -> None:
    """An R / mpi4py environment, as cotainr builds it: no example is planned (none can run),
    which one line says; naming one is refused as cotainr's env could never run it."""
    root = factory_project()
    plan = compat.example_plan(_cotainr_target(root, "r-env.yml"))
    assert (plan.examples, plan.errors, plan.notes) == ((), [], [])
    assert plan.info == "target mine: no examples (its environment has no torch)"
    plan = compat.example_plan(_cotainr_target(root, "r-env.yml", "examples: []\n"))
    assert (plan.examples, plan.errors, plan.info) == ((), [], None)
    plan = compat.example_plan(_cotainr_target(root, "r-env.yml", "examples: [ddp]\n"))
    assert [e.detail for e in plan.errors] == [  # named: judged, never dropped
        f"example 'ddp' needs torch, which {root / 'envs' / 'r-env.yml'} does not install "
        "(target mine)"]


def test_torch_2_3_leaves_fsdp_and_deepspeed_out_unless_named(factory_project) -> None:
    root = factory_project()
    plan = compat.example_plan(_cotainr_target(root, "torch23.yml"))
    assert plan.examples == ("ddp",) and plan.errors == []
    assert plan.info.startswith("target mine: examples ddp (left out: fsdp: target mine gets "
                                "torch 2.3, but example 'fsdp' needs torch >= 2.6")
    assert "; deepspeed: example 'deepspeed' needs the deepspeed package" in plan.info
    named = compat.example_plan(_cotainr_target(root, "torch23.yml", "examples: [fsdp]\n"))
    assert [e.detail for e in named.errors] == [
        "target mine gets torch 2.3, but example 'fsdp' needs torch >= 2.6 (FSDP2 (fully_shard, "
        "MixedPrecisionPolicy) is public in torch.distributed.fsdp from torch 2.6)"]


def test_a_build_arg_that_changes_the_base_makes_the_declared_torch_unknown(data_root) -> None:
    """NGC_TAG picks the NGC release whose torch the manifest declares: another tag builds on a
    base nobody declared, so its torch is unknown (a warning naming the flag), not kept."""
    target = load_targets(data_root)["olivia-cuda"]
    assert compat.as_built(target, {}) is target
    assert compat.as_built(target, {"NGC_TAG": target.build_args["NGC_TAG"]}) is target
    assert compat.as_built(target, {"MIRROR": "http://m"}, context=("MIRROR",)) is target
    built = compat.as_built(target, {"NGC_TAG": "24.10-py3"}, context=("MIRROR",))
    assert built.torch_unknown == ("--build-arg NGC_TAG=24.10-py3 builds on another base than "
                                   "the one whose torch olivia-cuda.yaml declares "
                                   "('torch: 2.8.0a0')")
    assert compat.has_torch(built, None)  # still the base image's torch, version unknown
    plan = compat.example_plan(built)
    assert plan.examples == ("ddp", "fsdp", "deepspeed") and plan.errors == []
    assert plan.notes == [f"torch version unknown ({built.torch_unknown}): cannot check the "
                          "examples' needs (ddp >= 2.0, fsdp >= 2.6, deepspeed >= 2.0)"]
    assert compat.example_plan(target).notes == []  # its own tag: 2.8 is known, no note

"""containers/image/identity.py: what an image is (its inputs, read and checked) and their hash,
computed without planning a build, as ``invoke targets`` and ``invoke check`` compute it."""

from __future__ import annotations

import pytest

from containers.errors import ConfigError, UsageError
from containers.image.identity import chain_hashes, parse_build_args
from tests.fixtures.data import load_targets


def test_env_spec_change_changes_hash(factory_project, data_settings, data_runtime) -> None:
    root = factory_project()
    before = chain_hashes(load_targets(root), "cpu")
    env = root / "envs" / "cpu.yml"
    env.write_text(env.read_text().replace("- numpy", "- numpy<3"))
    after = chain_hashes(load_targets(root), "cpu")
    assert before["debian-base"] == after["debian-base"]
    assert before["cpu"] != after["cpu"]


def test_a_helper_script_the_definition_runs_is_part_of_its_hash(factory_project) -> None:
    root = factory_project()
    before = chain_hashes(load_targets(root), "cpu")
    script = root / "recipes" / "scripts" / "install-python-packages.sh"
    script.write_text(script.read_text() + "# changed\n")
    after = chain_hashes(load_targets(root), "cpu")
    assert before["cpu"] != after["cpu"]


def test_the_tools_own_build_args_are_refused_without_planning(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text() + "build_args:\n  GIT_REVISION: fake\n")
    line = manifest.read_text().splitlines().index("build_args:") + 1
    with pytest.raises(ConfigError, match=rf"^{manifest}:{line}: build_args.GIT_REVISION: "
                                          "build argument GIT_REVISION is the tool's own"):
        chain_hashes(load_targets(root), "cpu")


def test_build_args_are_key_value_pairs() -> None:
    assert parse_build_args(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(UsageError, match="--build-arg: 'A' is not KEY=VALUE") as caught:
        parse_build_args(["A"])
    assert caught.value.flag == "--build-arg"

"""Loading and validating manifests, env specs and site profiles: errors name file, line, key."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.envspec import load_env_spec
from containers.inputs.recipes import base_chain, load_targets
from containers.inputs.sites import detect_site, load_sites


def test_shipped_targets_and_sites_load(data_root: Path) -> None:
    targets = load_targets(data_root)
    assert {"debian-base", "cpu"} <= set(targets)
    assert [t.name for t in base_chain(targets, "cpu")] == ["debian-base", "cpu"]
    assert targets["cpu"].env == data_root / "envs" / "cpu.yml"
    assert "local" in load_sites(data_root)


def test_typo_key_names_file_line_and_suggestion(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    text = manifest.read_text().replace("builder:", "buidler:")
    manifest.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.startswith("buidler"))
    with pytest.raises(ConfigError) as info:
        load_targets(root)
    message = str(info.value)
    assert message.startswith(f"{manifest}:{line}: buidler: unknown key")
    assert "did you mean 'builder'?" in message
    assert "\n" not in message


def test_bad_choice_and_wrong_type(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("arch: x86_64", "arch: x86-64"))
    with pytest.raises(ConfigError, match=r"cpu.yaml:3: arch: 'x86-64' is not one of.*x86_64"):
        load_targets(root)
    manifest.write_text(manifest.read_text().replace("arch: x86-64", "arch: [x86_64]"))
    with pytest.raises(ConfigError, match=r"arch: must be a string, got a list"):
        load_targets(root)


def test_unknown_base_and_cycle(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("base: debian-base", "base: debian-bse"))
    with pytest.raises(ConfigError, match="base target 'debian-bse' does not exist.*debian-base"):
        load_targets(root)
    manifest.write_text(manifest.read_text().replace("base: debian-bse", "base: cpu"))
    with pytest.raises(ConfigError, match="base chain loops: cpu -> cpu"):
        load_targets(root)


def test_yaml_syntax_error_has_line(factory_project) -> None:
    root = factory_project()
    (root / "sites" / "local.yaml").write_text("description: x\nbinds: [a, b\nenv: {}\n")
    with pytest.raises(ConfigError, match=r"local.yaml:\d+: invalid YAML"):
        load_sites(root)


def test_env_spec_with_extra_index_url_lines(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_text(
        "name: pytorch\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.11\n  - pip\n"
        "  - pip:\n    - --extra-index-url https://wheels.example.org/rocm6.2\n"
        "    - torch==2.5.1+rocm6.2\n    - deepspeed\n")
    env = load_env_spec(spec)
    assert env.requirements_txt() == ("--extra-index-url https://wheels.example.org/rocm6.2\n"
                                      "torch==2.5.1+rocm6.2\ndeepspeed\n")
    env.check_venv_compatible()  # python and pip only: fine for the venv builder


def test_conda_package_refused_on_venv_path(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_text("dependencies:\n  - python=3.11\n  - conda-forge::mpi4py>=3\n  - pip\n")
    env = load_env_spec(spec)
    with pytest.raises(ConfigError, match=r"env.yml:3: dependencies: 'conda-forge::mpi4py>=3' is a "
                                          r"Conda package.*builder: cotainr"):
        env.check_venv_compatible()


def test_site_detection_rules(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "local.yaml").write_text("description: here\n")
    (tmp_path / "sites" / "big.yaml").write_text(
        "description: a cluster\ngpu: rocm\ngpus_per_node: 8\ndefault_target: big-rocm\n"
        "detect:\n  env: [CLUSTER_NAME=big]\n  hostname: ['uan*']\n")
    sites = load_sites(tmp_path)
    assert sites["big"].gpu_flag == "--rocm"
    assert detect_site(sites, {"CLUSTER_NAME": "big"}, "laptop").name == "big"
    assert detect_site(sites, {}, "uan01").name == "big"
    assert detect_site(sites, {"CLUSTER_NAME": "other"}, "laptop") is None
    assert sites["local"].matches({"CLUSTER_NAME": "big"}, "uan01") is False  # no rules


def test_gpu_site_needs_gpus_per_node(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "x.yaml").write_text("description: x\ngpu: cuda\n")
    with pytest.raises(ConfigError, match="x.yaml:1: gpus_per_node: a GPU site needs"):
        load_sites(tmp_path)

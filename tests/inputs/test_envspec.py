"""Conda environment specs: the pip list a venv build installs, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.envspec import load_env_spec


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


def test_env_spec_that_is_not_utf8_names_file_and_line(tmp_path: Path) -> None:
    spec = tmp_path / "env.yml"
    spec.write_bytes(b"dependencies:\n  - pip:\n    - torch\xff\n")
    with pytest.raises(ConfigError, match=rf"^{spec}:3: not UTF-8 text"):
        load_env_spec(spec)

"""Shared fixtures. Integration fixtures (the real CPU image) live in ``images.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from containers.runtime import Runtime
from containers.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.images", "tests.slurm"]


@pytest.fixture
def data_root() -> Path:
    return ROOT


@pytest.fixture
def factory_project(tmp_path: Path):
    """A copy of the project's inputs (recipes, envs, sites, jobs) that a test may break."""
    def make() -> Path:
        root = tmp_path / "project"
        for folder in ("recipes", "envs", "sites", "jobs"):
            shutil.copytree(ROOT / folder, root / folder,
                            ignore=shutil.ignore_patterns("__pycache__"))
        return root
    return make


@pytest.fixture
def data_settings(tmp_path: Path):
    return load_settings(tmp_path, {"tmp_dir": str(tmp_path / "tmp")})


@pytest.fixture
def data_runtime() -> Runtime:
    return Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")

"""Importing the workload scripts of ``jobs/`` into the test process.

``jobs/`` is a folder of scripts, not a package: each imports its siblings plainly (``import
distenv``), as Python allows when the running script's folder is first on ``sys.path``. The tests
import them the same way, with that folder on the path while they load.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

from tests.fixtures import ROOT

JOBS = ROOT / "jobs"
# Launcher variables that must not leak in from the shell running pytest (e.g. inside a job).
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
               "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables, one thread per rank, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def sibling(name: str) -> ModuleType:
    """A module of ``jobs/`` (``distenv``, ``choices``…), imported as the scripts import it."""
    sys.path.insert(0, str(JOBS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(JOBS))


def script(filename: str, name: str) -> ModuleType:
    """A script of ``jobs/`` (``train.py``) as a module named ``name``, its siblings importable."""
    sys.path.insert(0, str(JOBS))
    try:
        spec = importlib.util.spec_from_file_location(name, JOBS / filename)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(JOBS))

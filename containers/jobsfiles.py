"""The one place the engine loads files of ``jobs/``, by path: it is not a package (in an image
its scripts import each other as siblings), and the host must read the very files a run binds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: This checkout's ``jobs/``: the folder every run binds into the container.
JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs"


def load(name: str) -> ModuleType:
    """``jobs/<name>.py`` as a module of its own, ``containers_jobs_<name>``."""
    path = JOBS_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"containers_jobs_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    # registered before it runs: dataclasses resolve the module's own names through it
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: The names, size and cpulist syntax host and scripts agree on (``containers.inputs.names``).
choices = load("choices")
#: Which NVIDIA driver runs which CUDA runtime (the device gate; ``invoke inspect``).
cudadriver = load("cudadriver")
#: The training report's shape, written by ``jobs/train.py``, read by ``containers.prove.train``.
trainreport = load("trainreport")

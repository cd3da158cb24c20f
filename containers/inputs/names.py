"""The names the host and the workload scripts agree on, read from ``jobs/choices.py``.

The scripts run inside the images and cannot import this package, so the shared list lives
with them (standard library only, no torch) and the host loads that very file: a new example,
model or dtype is added in one place. The file is ``jobs/choices.py`` of the checkout this
package runs from: the folder every run binds into the container (``settings.jobs_dir``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

JOBS_DIR = Path(__file__).resolve().parents[2] / "jobs"


def jobs_module(name: str) -> ModuleType:
    """``jobs/<name>.py`` as a module of its own (standard library only: it is loaded here and
    runs in the images), e.g. the names both sides agree on, the training report's shape."""
    path = JOBS_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"containers_jobs_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    # registered before it runs: dataclasses resolve the module's own names through it
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


choices = jobs_module("choices")

EXAMPLES: tuple[str, ...] = choices.EXAMPLES
MODELS: tuple[str, ...] = choices.MODELS
MODEL_SIZES: tuple[str, ...] = choices.MODEL_SIZES
ZERO_STAGES: tuple[int, ...] = choices.ZERO_STAGES
DTYPES: tuple[str, ...] = tuple(choices.DTYPES)
check_sizes = choices.check_sizes
COLLECTIVES: tuple[str, ...] = choices.COLLECTIVES
parse_ops = choices.parse_ops
suggest = choices.suggest
check_model_size = choices.check_model_size
parse_cpulist = choices.parse_cpulist
format_cpulist = choices.format_cpulist
preset_defaults = choices.preset_defaults

#: Which NVIDIA driver runs which CUDA runtime (``jobs/cudadriver.py``): the device gate judges
#: the node's driver with it, ``invoke inspect`` and the catalogue say what an image needs.
cuda_driver = jobs_module("cudadriver")
driver_needed = cuda_driver.driver_needed

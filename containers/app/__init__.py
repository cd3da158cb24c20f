"""The application layer: what each command does, as plain functions ``tasks.py`` calls.

The impure edge (functions take ``say`` for output), which no engine module imports. A lazy
facade: ``app.build`` imports :mod:`containers.app.build` on first use, so ``invoke --list``
pays for no command's modules."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

#: Each name the package exports -> its module under ``containers.app``.
HOMES = {"Project": "project", "config_sources": "project", "build": "build",
         "package_cache": "caching", "check_inputs": "inputs", "list_targets": "inputs",
         "job": "jobs", "JobSubmission": "jobs", "judge_results": "judging",
         "prove": "workloads", "smoke_history": "workloads", "train": "workloads",
         "publish": "publishing", "verify": "publishing", "inspect": "inspecting",
         "diff": "inspecting", "run_command": "running", "shell": "running",
         "jobs_report": "following", "local_slurm": "localslurm"}

__all__ = list(HOMES)

if TYPE_CHECKING:  # the names as readers and type checkers see them; at run time, on first use
    from containers.app.build import build
    from containers.app.caching import package_cache
    from containers.app.following import jobs_report
    from containers.app.inputs import check_inputs, list_targets
    from containers.app.inspecting import diff, inspect
    from containers.app.jobs import JobSubmission, job
    from containers.app.judging import judge_results
    from containers.app.localslurm import local_slurm
    from containers.app.project import Project, config_sources
    from containers.app.publishing import publish, verify
    from containers.app.running import run_command, shell
    from containers.app.workloads import prove, smoke_history, train


def __getattr__(name: str) -> Any:
    """An exported name, its module imported the first time it is asked for (PEP 562)."""
    if name not in HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(HOMES))


class _Facade(types.ModuleType):
    """The package module, whose exported names stay the functions: importing a submodule
    would bind its name (``build``) to the module."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in HOMES and isinstance(value, types.ModuleType):
            return  # the module stays in sys.modules; the name is the function's
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade

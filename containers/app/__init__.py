"""The application layer: what each command does, as plain functions ``tasks.py`` calls.

This is the impure edge: it gathers host facts, calls the pure planners of the engine, prints and
executes. No engine module imports it. Functions take ``say`` for output so tests can capture it.

Each module's first line names the commands it serves (the layout page lists them).
"""

from containers.app.build import build
from containers.app.caching import package_cache
from containers.app.following import jobs_report
from containers.app.inputs import check_inputs, targets_report
from containers.app.inspecting import diff, inspect
from containers.app.jobs import JobSubmission, job
from containers.app.judging import judge_results
from containers.app.localslurm import local_slurm
from containers.app.project import Project
from containers.app.publishing import publish, verify
from containers.app.running import run_command, shell
from containers.app.workloads import prove, smoke_history, train

__all__ = ["Project", "build", "package_cache", "check_inputs", "targets_report", "job",
           "JobSubmission", "judge_results", "prove", "smoke_history", "train", "publish",
           "verify", "inspect", "diff", "run_command", "shell", "jobs_report", "local_slurm"]

"""A user's own command through the site's launch path (``invoke run``/``invoke shell``). Planned as
a workload (so ``init_process_group()`` just works), after a device gate on GPU sites."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from containers.errors import UsageError
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.inputs.sites import Gpu, Site
from containers.run.workload import Placement, Workload, plan_workload

KIND = "run"
GATE_SCRIPT = "gate.py"


@dataclass(frozen=True)
class CommandRun:
    """The planned run of a user's command: the device gate (None on CPU sites) and the run."""

    workload: Workload
    gate: list[str] | None
    command: tuple[str, ...]


def check_command(command: Sequence[str], *, flag: str = "--") -> tuple[str, ...]:
    words = tuple(command)
    if not words or not words[0].strip():
        raise UsageError("name the command to run after -- (e.g. -- python train.py)",
                         flag=flag)
    if any("\x00" in word for word in words):
        raise UsageError("a word of the command holds a NUL byte", flag=flag)
    return words


def plan_command(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
                 command: Sequence[str], ranks: int, run_id: str, timeout: float,
                 launcher: bool = True, placement: Placement | None = None,
                 environ: Mapping[str, str] | None = None, strict: bool = True,
                 gate: bool = True) -> CommandRun:
    """``ranks`` per node; without ``launcher`` one process; ``gate`` False: no gate."""
    words = check_command(command)
    if not launcher and placement is not None:
        raise UsageError("--no-launcher runs one process on this node; leave out --nodes",
                         flag="--no-launcher")
    workload = plan_workload(target, site, settings=settings, runtime=runtime, kind=KIND,
                             ranks=ranks if launcher else 1, timeout=timeout, run_id=run_id,
                             environ=environ, strict=strict, placement=placement, command=words)
    if not launcher:
        workload = replace(workload, argv=workload.launch.exec_argv(list(words)))
    return CommandRun(workload=workload, gate=gate_argv(workload, settings) if gate else None,
                      command=words)


def gate_argv(workload: Workload, settings: Settings) -> list[str] | None:
    """The device gate's argv (one process per node), or None where there are no GPUs."""
    site, launch = workload.site, workload.launch
    if site.gpus.kind == Gpu.NONE:
        return None
    probe = ["python3", f"{settings.jobs_mount}/{GATE_SCRIPT}", "--expect-gpu", site.gpus.kind,
             "--ranks", str(launch.ranks_per_node)]
    prefix = workload.launcher.node_step(launch) if launch.step else []
    return [*prefix, *launch.exec_argv(probe)]


#: ``invoke shell``'s bash without ``~/.bashrc`` (as ``apptainer shell``): a conda or pyenv
#: set-up there would put the host's Python first on PATH.
INTERACTIVE = ("/bin/bash", "--norc", "-i")


def shell_argv(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
               command: Sequence[str], run_id: str,
               environ: Mapping[str, str] | None = None) -> list[str]:
    """``invoke shell``: ``command`` (else a shell) in the image, with the site's flags."""
    words = tuple(command) or INTERACTIVE
    planned = plan_workload(target, site, settings=settings, runtime=runtime, kind=KIND,
                            ranks=1, timeout=0, run_id=run_id, environ=environ,
                            command=check_command(words))
    binds = tuple(b for b in planned.launch.binds if not b.startswith(f"{planned.out_dir}:"))
    return replace(planned.launch, binds=binds).exec_argv(list(words))

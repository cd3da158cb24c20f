"""The launchers: how the ranks of a planned workload start, as argv. One registry for one node,
an allocation or a batch script alike (docs/launchers.md has them side by side)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from containers.errors import ConfigError, UsageError
from containers.inputs.names import suggest
from containers.run.rendezvous import ADDR_VAR, PORT_VAR, Rendezvous

if TYPE_CHECKING:  # LAUNCHERS is a flag's choices when the command line starts (invoke --list)
    from containers.host.runtime import Runtime
    from containers.inputs.sites import Site


@dataclass(frozen=True)
class Launch:
    """What a launcher needs of a planned run (``step``: as a job step of the scheduler)."""

    runtime: Runtime
    image: Path
    script: str  # its path inside the image
    args: tuple[str, ...] = ()
    gpu_flag: str | None = None
    binds: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    ranks_per_node: int = 1
    nodes: int = 1
    rendezvous: Rendezvous | None = None
    step: bool = False
    cpus_per_task: int | None = None
    torchrun: str = "torchrun"
    cpu_masks: tuple[str, ...] = ()  # one per GPU of a node (srun-per-gpu)
    visible_devices: str | None = None  # CUDA_/ROCR_VISIBLE_DEVICES, None on CPU sites
    no_python: bool = False  # ``script`` is a program (``invoke run -- CMD``)
    step_options: tuple[str, ...] = ()  # the site's ``job.step_options`` (PALS' binding)
    #: torchrun's ``--log-dir``: its default is a new folder in TMPDIR, which Apptainer shares
    #: with the host, left there
    log_dir: str | None = None

    def exec_argv(self, command: Sequence[str], *,
                  env: Mapping[str, str] | None = None) -> list[str]:
        return self.runtime.exec_argv(image=self.image, command=command, gpu_flag=self.gpu_flag,
                                      binds=self.binds, env=self.env if env is None else env)


@dataclass(frozen=True)
class Shape:
    """What a launcher asks the scheduler for on each node."""

    tasks_per_node: int
    cpus_per_task: int | None
    exclusive: bool = False


def cores_for(site: Site, gpus: int) -> int | None:
    """The CPUs (hardware threads) that go with ``gpus`` of a node's GPUs."""
    if not site.cpus_per_node:
        return None
    if not site.gpus.per_node:
        return site.cpus_per_node
    return max(1, site.cpus_per_node * gpus // site.gpus.per_node)


def torchrun_argv(launch: Launch) -> list[str]:
    """torchrun in the container: ``--standalone`` without a rendezvous, else c10d."""
    if launch.rendezvous is None:
        if launch.nodes > 1:
            raise ValueError("a run across nodes needs a rendezvous")  # a bug, not user input
        options = ["--standalone", f"--nproc-per-node={launch.ranks_per_node}"]
    else:
        rdzv = launch.rendezvous
        options = [f"--nnodes={launch.nodes}", f"--nproc-per-node={launch.ranks_per_node}",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv.endpoint}",
                   f"--rdzv-id={rdzv.id}"]
    options += [f"--log-dir={launch.log_dir}"] if launch.log_dir else []
    program = ["--no-python"] if launch.no_python else []
    return [launch.torchrun, *options, *program, launch.script, *launch.args]


def srun(nodes: int, tasks_per_node: int, cpus_per_task: int | None, *more: str) -> list[str]:
    """A job step; ``--cpus-per-task`` because srun no longer inherits it (Slurm 22.05+) and
    torchrun's ranks would otherwise share one core; a failed node ends the step."""
    cpus = [f"--cpus-per-task={cpus_per_task}"] if cpus_per_task else []
    return ["srun", f"--nodes={nodes}", f"--ntasks-per-node={tasks_per_node}", *cpus, *more,
            "--kill-on-bad-exit=1"]


class Launcher:
    """Starts a run's ranks, and writes every other job step's prefix (:meth:`node_step`)."""

    name = ""
    schedulers: tuple[str, ...] = ()
    #: Needs the rendezvous variables even on one node (ranks started without torchrun).
    needs_rendezvous = False
    #: Binds each rank to its cores itself (srun's --cpu-bind), so the workloads need no map.
    binds_cores = False
    #: The launcher whose ranks this one starts on its schedulers, where that one cannot.
    stands_for = ""

    def on(self, scheduler: str) -> Launcher:
        """This launcher on ``scheduler``: one that stands for it there, else itself."""
        return next((other for other in LAUNCHERS.values()
                     if other.stands_for == self.name and scheduler in other.schedulers), self)

    def shape(self, site: Site, gpus: int) -> Shape:
        return Shape(tasks_per_node=1, cpus_per_task=cores_for(site, gpus))

    def argv(self, launch: Launch) -> list[str]:
        raise NotImplementedError

    def node_step(self, launch: Launch) -> list[str]:
        """One process per node of the job (Slurm: srun one task per node)."""
        return [*srun(launch.nodes, 1, launch.cpus_per_task), *launch.step_options]


class Torchrun(Launcher):
    """One torchrun per node; in a job step, one process per node (:meth:`node_step`)."""

    name = "torchrun"
    schedulers = ("none", "slurm")

    def argv(self, launch: Launch) -> list[str]:
        if launch.nodes > 1 and not launch.step:
            raise ValueError("ranks on several nodes start as a job step")  # a bug
        prefix = self.node_step(launch) if launch.step else []
        return [*prefix, *launch.exec_argv(torchrun_argv(launch))]


class MpiexecTorchrun(Torchrun):
    """PBS Pro with Cray PALS: mpiexec one torchrun per node, the site's step options."""

    name = "mpiexec-torchrun"
    schedulers = ("pbs",)
    stands_for = "torchrun"

    def node_step(self, launch: Launch) -> list[str]:
        return ["mpiexec", "-n", str(launch.nodes), "--ppn", "1", *launch.step_options]


class SrunPerGpu(Launcher):
    """LUMI's other pattern: one task per GCD, bound to its cores, seeing only its device."""

    name = "srun-per-gpu"
    schedulers = ("slurm",)
    needs_rendezvous = True
    binds_cores = True

    def shape(self, site: Site, gpus: int) -> Shape:
        cpus = cores_for(site, 1) if site.gpus.per_node else None
        return Shape(tasks_per_node=gpus, cpus_per_task=cpus,
                     exclusive=bool(site.cpu_bind))  # CPU masks hold only on whole nodes

    def argv(self, launch: Launch) -> list[str]:
        if launch.rendezvous is None:
            raise ValueError("srun-per-gpu needs a rendezvous")  # a bug, not user input
        masks = ",".join(launch.cpu_masks[:launch.ranks_per_node])
        prefix = [*srun(launch.nodes, launch.ranks_per_node, launch.cpus_per_task,
                        *([f"--cpu-bind=mask_cpu:{masks}"] if masks else [])),
                  *launch.step_options]
        # Evaluated per task, inside the container: Slurm numbers the tasks.
        script = [launch.script, *launch.args]
        if any("\x00" in arg for arg in script):
            raise ValueError("a job-time variable in a per-task command")  # a bug
        assigns = [f"{launch.visible_devices}=$SLURM_LOCALID"] if launch.visible_devices else []
        assigns += ["RANK=$SLURM_PROCID", "LOCAL_RANK=$SLURM_LOCALID", "WORLD_SIZE=$SLURM_NTASKS"]
        inner = (" ".join(assigns) + (" exec " if launch.no_python else " exec python3 ")
                 + shlex.join(script))
        env = {**launch.env, ADDR_VAR: launch.rendezvous.host,
               PORT_VAR: launch.rendezvous.port}
        return [*prefix, *launch.exec_argv(["bash", "-c", inner], env=env)]


LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in
                                  (Torchrun(), SrunPerGpu(), MpiexecTorchrun())}


def named(name: str, *, flag: str = "--launcher") -> Launcher:
    try:
        return LAUNCHERS[name]
    except KeyError as exc:
        raise UsageError(f"{flag} must be one of {', '.join(LAUNCHERS)} (got '{name}')"
                         f"{suggest(name, list(LAUNCHERS))}", flag=flag) from exc


def for_site(site: Site, override: str | None = None) -> Launcher:
    """The site's launcher, or ``--launcher``'s, checked against the site's scheduler."""
    if override is not None:
        launcher = named(override)
    elif site.launcher in LAUNCHERS:
        launcher = LAUNCHERS[site.launcher]
    else:
        raise ConfigError(f"'{site.launcher}' is not a launcher"
                          f"{suggest(site.launcher, list(LAUNCHERS))}; known: "
                          f"{', '.join(LAUNCHERS)}", path=site.path,
                          line=site.lines.get("launcher"), key="launcher")
    launcher = launcher.on(site.scheduler)
    if site.scheduler not in launcher.schedulers:
        message = (f"launcher {launcher.name} needs a {' or '.join(launcher.schedulers)} site; "
                   f"{site.name} schedules with {site.scheduler}")
        if override is not None:
            raise UsageError(message, flag="--launcher")
        raise ConfigError(message, path=site.path, line=site.lines.get("launcher"),
                          key="launcher")
    return launcher


def ingredients(site: Site, torchrun: str | None = None) -> dict:
    """The site's part of a :class:`Launch` (``torchrun``: the image's own, over the site's)."""
    return dict(gpu_flag=site.gpus.kind.flag, torchrun=torchrun or site.torchrun,
                cpu_masks=site.cpu_bind,
                visible_devices=site.gpus.kind.visible_devices,
                step_options=site.job.step_options)

"""Running a torch.distributed workload inside an image, here or across a job's nodes. The launch
path ``invoke smoke``, ``train`` and batch scripts share."""

from __future__ import annotations

import io
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from containers.errors import ImageMissing, on_disk
from containers.files import create_replacing, read_json_object
from containers.host.facts import host_arch
from containers.host.process import Completed, run
from containers.host.runtime import Runtime
from containers.image.emulated import emulated_binds
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.inputs.sites import Gpu, Site, expand
from containers.run import affinity
from containers.run.launchers import LAUNCHERS, Launch, Launcher, ingredients
from containers.run.layout import check_ranks
from containers.run.rendezvous import Rendezvous

Say = Callable[[str], None]
#: What a workload job leaves for ``invoke verdict``: the job, the image's provenance at launch.
JOB_RECORD = "job.json"
IMAGE_RECORD = "image.json"
#: torchrun's logs (a failed rank's ``error.json``) in the results folder, never in /tmp.
LOGS = "torchelastic"

#: What makes NCCL/RCCL name its network transport (and its versions) in the output.
TRANSPORT_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass(frozen=True)
class Placement:
    """Where and how the ranks start when not just here with torchrun."""

    nodes: int
    rendezvous: Rendezvous | None
    launcher: Launcher = LAUNCHERS["torchrun"]
    cpus_per_task: int | None = None
    ranks_flag: str = "--gpus"


@dataclass(frozen=True)
class Workload:
    """A planned run; ``ranks`` counts every node's, ``launch`` is what made ``argv``."""

    target: Target
    site: Site
    image: Path
    out_dir: Path
    ranks: int
    argv: list[str]
    timeout: float
    report_name: str
    launch: Launch
    launcher: Launcher = LAUNCHERS["torchrun"]

    @property
    def cores(self) -> list[frozenset[int]]:
        """The cores each local rank pins itself to ([] when the workload does not pin)."""
        return pinned_cores(self.site, ranks=self.launch.ranks_per_node, launcher=self.launcher)

    @property
    def cores_note(self) -> str | None:
        """The pinning as a plan, a dry run and a job script's header show it."""
        if not self.cores:
            return None
        return (f"cores: {affinity.describe(self.cores)} (each rank pins itself before it "
                "touches its GPU: the site's cpu_bind map)")

    def with_env(self, extra: Mapping[str, str]) -> Workload:
        """The same run with more container environment (``invoke job --nccl-debug``)."""
        launch = replace(self.launch, env={**self.launch.env, **extra})
        return replace(self, launch=launch, argv=self.launcher.argv(launch))


@dataclass(frozen=True)
class Outcome:
    """What the run left: exit status, lost ranks, torchrun's first failure, the report."""

    returncode: int
    timed_out: bool
    missing_ranks: list[int]
    report: dict | None
    seconds: float
    first_failure: tuple[int, int] | None = None
    lines: tuple[str, ...] = ()
    #: Each rank's ``device-<RANK>.json`` (what it ran on), in rank order.
    devices: tuple[dict, ...] = ()


def container_env(site: Site, *, ranks: int, environ: Mapping[str, str], strict: bool,
                  extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The site's environment for the container, host variables expanded."""
    env = {key: expand(value, environ, strict=strict) for key, value in site.env.items()}
    visible = site.gpus.kind.visible_devices
    if visible and visible not in environ and visible not in env:
        env[visible] = ",".join(str(i) for i in range(ranks))
    return {**env, **(extra or {})}


def transport_env(site: Site, nodes: int) -> dict[str, str]:
    """``NCCL_NET`` where a transport is declared, and the debug lines that prove it."""
    if not site.transport.applies(nodes):
        return {}
    return {**TRANSPORT_DEBUG_ENV, **({"NCCL_NET": site.transport.net} if site.transport.net
                                      else {})}


def device_args(site: Site, *, ranks: int, launcher: Launcher) -> list[str]:
    """The GPU kind and backend, explicitly, and where mapped the cores each rank pins."""
    args = ["--expect-gpu", site.gpus.kind,
            "--backend", "nccl" if site.gpus.kind != Gpu.NONE else "gloo"]
    cores = pinned_cores(site, ranks=ranks, launcher=launcher)
    if cores:
        args += ["--rank-cores", affinity.rank_cores_arg(cores)]
    return args


def teardown_args(target: Target, *, placement: Placement | None, host: str) -> list[str]:
    """``--no-teardown`` where the ranks run here under qemu-user: a rank joining gloo's threads
    in ``destroy_process_group`` deadlocked there one run in ten (qemu 7.2, Debian 12)."""
    return ["--no-teardown"] if placement is None and target.arch != host else []


def pinned_cores(site: Site, *, ranks: int, launcher: Launcher) -> list[frozenset[int]]:
    """The cores of each local rank, where a run fills the node a site's masks describe."""
    if launcher.binds_cores or not site.cpu_bind or ranks != len(site.cpu_bind):
        return []
    return affinity.rank_cores(site.cpu_bind, ranks)


def plan_workload(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
                  kind: str, ranks: int, timeout: float, run_id: str, script: str = "",
                  args: Sequence[str] = (), report_name: str = "", extra_binds: Sequence[str] = (),
                  extra_env: Mapping[str, str] | None = None,
                  environ: Mapping[str, str] | None = None, strict: bool = True,
                  placement: Placement | None = None,
                  command: Sequence[str] | None = None, host: str | None = None) -> Workload:
    """``ranks`` is per node; ``command`` (``invoke run``) replaces ``script`` and ``args``;
    ``strict`` (a real run) refuses an unset host variable; no ``placement``: torchrun here."""
    place = placement or Placement(nodes=1, rendezvous=None)  # torchrun, on this node
    nodes = place.nodes
    check_ranks(site, ranks, nodes=nodes, flag=place.ranks_flag)
    out_dir = settings.results_dir / kind / f"{target.name}-{run_id}"
    environ = os.environ if environ is None else environ
    multinode = nodes > 1
    binds = [f"{settings.jobs_dir}:{settings.jobs_mount}:ro",
             f"{out_dir}:{settings.results_mount}", *extra_binds,
             *(emulated_binds(target.arch, here=host, write=False) if placement is None else ()),
             *(expand(b, environ, strict=strict) for b in site.binds),
             *(expand(b, environ, strict=strict) for b in site.transport.binds if multinode)]
    image = settings.image_path(target.name)
    across = {k: expand(v, environ, strict=strict) for k, v in site.transport.env.items()
              if multinode or site.transport.applies(nodes)}
    env = container_env(site, ranks=ranks, environ=environ, strict=strict,
                        extra={**across, **transport_env(site, nodes), **(extra_env or {})})
    launcher = place.launcher
    if command is None:
        script = f"{settings.jobs_mount}/{script}"
        args = [*args, *device_args(site, ranks=ranks, launcher=launcher),
                *teardown_args(target, placement=placement, host=host or host_arch())]
    elif cores := pinned_cores(site, ranks=ranks, launcher=launcher):
        # the site maps ranks to cores: each rank pins itself, then becomes the command
        script, args = "python3", [f"{settings.jobs_mount}/pinned.py",
                                   affinity.rank_cores_arg(cores), "--", *command]
    else:
        script, args = command[0], list(command[1:])
    launch = Launch(runtime=runtime, image=image, script=script, no_python=command is not None,
                    args=tuple(args), binds=tuple(binds), env=env, ranks_per_node=ranks,
                    nodes=nodes, rendezvous=place.rendezvous, step=placement is not None,
                    cpus_per_task=place.cpus_per_task, log_dir=f"{settings.results_mount}/{LOGS}",
                    **ingredients(site, target.torchrun))
    return Workload(target=target, site=site, image=image, out_dir=out_dir, ranks=ranks * nodes,
                    argv=launcher.argv(launch), timeout=timeout, report_name=report_name,
                    launch=launch, launcher=launcher)


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_FAILED_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def first_failure(lines: Sequence[str]) -> tuple[int, int] | None:
    """``(rank, exit code)`` from torchrun's failure summary ("Root Cause" block), if any."""
    rank = None
    in_root_cause = False
    for line in lines:
        if _ROOT_CAUSE.search(line):
            in_root_cause = True
        elif in_root_cause and rank is None and (match := _FAILED_RANK.match(line)):
            rank = int(match.group(1))
        elif in_root_cause and rank is not None and (match := _FAILED_EXIT.match(line)):
            return rank, int(match.group(1))
    return None


def unfinished_ranks(out_dir: Path, ranks: int) -> list[int]:
    """The ranks whose own ``rank-<N>.json`` does not say they finished."""
    found = {rank: read_json_object(out_dir / f"rank-{rank}.json") or {} for rank in range(ranks)}
    return [rank for rank, record in found.items() if not (
        type(record.get("rank")) is int and record["rank"] == rank
        and record.get("finished") not in (None, False, ""))]


def read_device_reports(out_dir: Path) -> tuple[dict, ...]:
    """The ranks' ``device-<RANK>.json``, in rank order (an unreadable one counts as missing)."""
    found = (read_json_object(path) or {} for path in out_dir.glob("device-*.json"))
    return tuple(sorted((r for r in found if isinstance(r.get("rank"), int)),
                        key=lambda r: r["rank"]))


@dataclass(frozen=True)
class Logged:
    """The steps that ran (the last one failed, or all passed), their output and seconds."""

    steps: tuple[Completed, ...]
    lines: tuple[str, ...]
    seconds: float

    @property
    def last(self) -> Completed:
        return self.steps[-1]


def run_logged(steps: Sequence[tuple[Sequence[str], float | None]], *, out_dir: Path,
               say: Say) -> Logged:
    """Run each ``(argv, timeout)`` until one fails, the output to ``say`` and run.log."""
    with on_disk("create the results folder", out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        log = io.TextIOWrapper(create_replacing(out_dir / "run.log"), encoding="utf-8")
    lines: list[str] = []
    done: list[Completed] = []
    started = time.monotonic()
    with log:
        def on_line(line: str) -> None:
            log.write(line + "\n")
            log.flush()
            lines.append(line)
            say(line)

        for argv, timeout in steps:
            done.append(run(argv, timeout=timeout, on_line=on_line))
            if not done[-1].ok:
                break
    return Logged(steps=tuple(done), lines=tuple(lines), seconds=time.monotonic() - started)


def run_workload(workload: Workload, *, say: Say) -> Outcome:
    """Run it, streaming and logging its output; never leaves a rank running."""
    if not workload.image.is_file():
        raise ImageMissing(workload.image, workload.target.name)
    emulated_binds(workload.target.arch)  # writes the CPU folder an emulated run's plan names
    logged = run_logged([(workload.argv, workload.timeout)], out_dir=workload.out_dir, say=say)
    return collect(workload, returncode=logged.last.returncode, timed_out=logged.last.timed_out,
                   lines=logged.lines, seconds=logged.seconds)


def collect(workload: Workload, *, returncode: int, timed_out: bool, lines: Sequence[str],
            seconds: float) -> Outcome:
    """What a finished run left in its results folder; judging a batch run starts here too."""
    report = read_json_object(workload.out_dir / workload.report_name)
    missing = unfinished_ranks(workload.out_dir, workload.ranks)
    return Outcome(returncode=returncode, timed_out=timed_out, missing_ranks=missing,
                   report=report, seconds=seconds,
                   first_failure=first_failure(lines), lines=tuple(lines),
                   devices=read_device_reports(workload.out_dir))


def failure_reasons(workload: Workload, outcome: Outcome) -> list[str]:
    """Why the run as a whole failed (timeout, lost ranks, first failure); workload-agnostic."""
    reasons = []
    if outcome.timed_out:
        reasons.append(f"timed out after {workload.timeout:.0f} s; every process of the run "
                       "was stopped")
    if outcome.missing_ranks:
        ranks = ", ".join(map(str, outcome.missing_ranks))
        reasons.append(f"ranks that did not finish: {ranks} (of {workload.ranks})")
    if outcome.first_failure:
        rank, code = outcome.first_failure
        reasons.append(f"first failure: rank {rank} (exit code {code})")
    return reasons

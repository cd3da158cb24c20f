"""A workload kind: what is particular to ``invoke smoke`` (the all_reduce benchmark) or to
``invoke train`` (the DDP / DeepSpeed / FSDP examples), and the one plan and run path they share.

Both start the same way (:mod:`containers.run.workload`: the exec argv, torchrun, the rank files,
the timeout) and are judged by the same gates (:mod:`containers.prove.verdict`). A kind says only
what is its own: the script in ``jobs/`` and the report it writes, the arguments, binds and
environment its options become, the sanity rules that read that report, and whether its
performance is judged. Its options object names it (``options.kind``), so one application function
runs either.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from containers.errors import UsageError, VerdictFailed

if TYPE_CHECKING:  # the kinds are declared when the command line starts (invoke --list): light
    from containers.host.runtime import Runtime
    from containers.inputs.recipes import Target
    from containers.inputs.settings import Settings
    from containers.inputs.sites import Site
    from containers.prove.performance import Judgement
    from containers.prove.verdict import Result
    from containers.run.command import CommandRun
    from containers.run.workload import Placement, Workload


@dataclass(frozen=True)
class Invocation:
    """What a kind's options become on the workload's command line and in its container."""

    args: list[str]
    binds: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class Options(Protocol):
    """What every kind's options carry (they check their own values when made)."""

    gpus: int
    timeout: float

    @property
    def kind(self) -> "WorkloadKind": ...


class JobBodies(Protocol):
    """What a batch job's planner (:mod:`containers.batch.job`) offers a kind, which picks the
    job it is: the planner never asks a kind what it is."""

    def build(self) -> Any: ...

    def command(self) -> Any: ...

    def workload(self) -> Any: ...


# ---------------------------------------------------------------------------------- kinds
class WorkloadKind:
    """The part of a workload that is its own: a kind with code of its own (smoke, train) is a
    subclass; one that differs only in these attributes (run, build) is an instance given them."""

    #: The command and the verdict's ``kind``.
    name: str = ""
    #: The script in ``jobs/``, and the report it writes in its results folder.
    script: str = ""
    report_name: str = ""
    #: Its reader: a model of :mod:`containers.records` (named: pydantic is not for start-up).
    report_type: str = "RunReport"
    #: How a reason names the script ("the benchmark exited with code 3").
    program: str = ""
    #: Whether each run's verdict record is appended to the performance log.
    logs_performance: bool = False
    #: The type of its options (None: the kind takes no run options), and the names of the run
    #: options (``tasks.RUN_OPTIONS``) that type takes: ``invoke job`` refuses the others.
    options_type: type | None = None
    run_options: tuple[str, ...] = ()
    #: The wall time a batch job of this kind is expected to need (seconds), before any
    #: partition's limit caps it.
    estimate: int = 3600
    #: Who judges a batch job of this kind: ``checkout`` (``invoke verdict`` in this
    #: checkout's environment, on the image's architecture), ``image`` (the job judges itself
    #: with the image's Python: ``jobs/runverdict.py``) or None (no verdict: a build).
    judge: str | None = "checkout"
    #: Whether the job makes the image (a build) rather than runs it, takes the user's command
    #: after ``--``, and may span several nodes.
    builds_image: bool = False
    takes_command: bool = False
    multinode: bool = True

    def __init__(self, **attributes: object) -> None:
        unknown = sorted(set(attributes) - set(dir(WorkloadKind)))
        if unknown:  # a misspelt one would leave its default (who judges) silently in place
            raise TypeError(f"not a WorkloadKind attribute: {', '.join(unknown)}")
        vars(self).update(attributes)

    def make_options(self, workload: str, *, gpus: int, given: Mapping[str, object],
                     flag: str = "--workload") -> Options | None:
        """The options of a run of ``workload`` (a name of this kind) on ``gpus`` ranks per
        node from the plain values ``given`` (flags, a job's ``job.json``); None: no options."""
        if self.options_type is not None:
            return self.options_type(gpus=gpus, **given)
        if given:
            raise UsageError(f"--workload {workload} takes no run options (got "
                             f"{', '.join(sorted(given))})", flag=flag)
        return None

    def resized(self, workload: str, options: Options | None, *, gpus: int) -> Options | None:
        """``options`` (the given ones when of this kind's type, else its defaults) for a run of
        ``workload`` on ``gpus`` ranks per node."""
        if self.options_type is None:
            return None
        if isinstance(options, self.options_type):
            return self._resize(workload, options, gpus)
        return self.make_options(workload, gpus=gpus, given={})

    def _resize(self, workload: str, options: Options, gpus: int) -> Options:
        return replace(options, gpus=gpus)  # type: ignore[type-var]

    # ------------------------------------------------------- what a job of this kind needs
    @property
    def needs_image(self) -> bool:
        """Whether a job of this kind runs the built image (a build makes it instead)."""
        return not self.builds_image

    def before_submit(self, check_image: Callable[[], None]) -> None:
        """What a submission of a job of this kind checks first: the image it runs
        (``check_image``), where it runs one."""
        if self.needs_image:
            check_image()

    def checked_command(self, workload: str, command: Sequence[str]) -> tuple[str, ...]:
        """The user's command after ``--`` as this kind takes it: none (refused when given)."""
        if command:
            raise UsageError(f"a command after -- goes with --workload run, not --workload "
                             f"{workload}", flag="--")
        return ()

    def check_nodes(self, workload: str, nodes: int) -> None:
        """A kind that runs on one node refuses more."""
        if not self.multinode and nodes != 1:
            raise UsageError(f"a {workload} job runs on one node (got --nodes {nodes})",
                             flag="--nodes")

    def workdir(self, cwd: Callable[[], str]) -> str | None:
        """The folder a job runs its command in (the submitting one, ``cwd()``, asked only
        then); None: no command."""
        return cwd() if self.takes_command else None

    def arch_hint(self, target: Target) -> str:
        """What an image of another architecture than the site's nodes can do about it."""
        return (f"; build it on an {target.arch} machine (invoke build --target "
                f"{target.name} there)" if self.builds_image else "")

    def partition_of(self, site: Site) -> str | None:
        """The partition a job of this kind goes to when none is named (None: the site's)."""
        return site.build_partition if self.builds_image else None

    def needs_node_tool(self, target_arch: str, host_arch: str) -> bool:
        """Whether a job on ``target_arch`` nodes needs this tool's packages prepared for the
        node's Python (a build on nodes this checkout's environment cannot run on)."""
        return self.builds_image and target_arch != host_arch

    def judged_off_host(self, target_arch: str, host_arch: str) -> bool:
        """Whether this checkout judges a job of this kind on ``target_arch`` nodes, where its
        own environment cannot run (the verdict then runs with the image's Python)."""
        return self.judge == "checkout" and target_arch != host_arch

    def check_judged_here(self, folder: Path, workload: str) -> None:
        """Refuse, in one line, to judge results (``folder``) this checkout does not judge."""
        if self.judge == "image":
            raise VerdictFailed(f"verdict FAILED: {folder} is a {workload} job's; the job "
                                "judges itself (jobs/runverdict.py writes its verdict.json)")
        if self.judge != "checkout":
            raise VerdictFailed(f"verdict FAILED: {folder} is a {workload} job's, which has "
                                "no verdict")

    def job_body(self, jobs: JobBodies) -> Any:
        """The batch job of this kind, by what the planner offers: a run of its script."""
        return jobs.workload()

    def plan_in_job(self, target: Target, site: Site, *, workload: str,
                    options: Options | None, command: Sequence[str], ranks: int,
                    **common: Any) -> tuple[Workload, Options | None, CommandRun | None]:
        """The run inside a batch job (``common``: :func:`plan`'s placement and the rest):
        the workload, its options and, for a command, the planned command."""
        sized = self.resized(workload, options, gpus=ranks)
        assert sized is not None  # a kind without options plans its own (run) or none (build)
        return plan(target, site, options=sized, **common), sized, None

    def folder(self, options: Options) -> str:
        """The results folder under ``results/``: ``smoke``, ``train-ddp``."""
        return self.name

    def title(self, options: Options) -> str:
        """How the run is announced: ``smoke``, ``train ddp``."""
        return self.name

    def launch(self, options: Options, *, site: Site, settings: Settings,
               nodes: int) -> Invocation:
        raise NotImplementedError

    def failures(self, result: "Result") -> list[str]:
        """What the workload itself reports as wrong (read whatever the report holds so far)."""
        return []

    def report_reasons(self, result: "Result", *, settled: bool) -> list[str]:
        """Sanity rules on a written report; ``settled``: an earlier reason already explains
        the failure, so rules that only restate it stay quiet."""
        return []

    def performance(self, result: "Result") -> Judgement | None:
        """The performance gate; None: this kind's performance is not judged."""
        return None

    def details(self, result: "Result") -> dict:
        """The kind's own fields of ``verdict.json``."""
        return {}

    def write_reports(self, result: "Result") -> list[Path]:
        """Files made from the report besides the verdict (plots)."""
        return []

    def report_files(self, result: "Result") -> list[tuple[str, Path]]:
        """The reports the workload wrote, each with the word the run lists it by (``json``)."""
        return [("json", result.plan.out_dir / self.report_name)]

    def perflog_records(self, record: dict) -> list[dict]:
        """The perflog lines of a run's verdict record (smoke: one per collective)."""
        return [record]


def plan(target: Target, site: Site, *, settings: Settings, runtime: Runtime, options: Options,
         run_id: str, environ: Mapping[str, str] | None = None, strict: bool = True,
         placement: Placement | None = None) -> Workload:
    """The exact run of ``options`` (its kind's script) on ``site``; nothing is executed."""
    # here, not at the top: declaring a kind (invoke --list, -h) loads no models and no planner
    from containers.inputs import compat
    from containers.run.workload import plan_workload

    kind = options.kind
    example = getattr(options, "example", None)
    if example:
        compat.check_example(target, example)  # the image's torch is new enough for it
    launch = kind.launch(options, site=site, settings=settings,
                         nodes=placement.nodes if placement else 1)
    return plan_workload(target, site, settings=settings, runtime=runtime,
                         kind=kind.folder(options), script=kind.script, args=launch.args,
                         ranks=options.gpus, timeout=options.timeout, run_id=run_id,
                         report_name=kind.report_name, extra_binds=launch.binds,
                         extra_env=launch.env, environ=environ, strict=strict,
                         placement=placement)

"""A workload kind: what is particular to one workload name (``smoke``, each training example,
a user's command, an image build). Its options name it (``options.kind``), so one path runs any."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from containers.errors import UsageError
from containers.inputs import flags

if TYPE_CHECKING:  # the kinds are declared when the command line starts (invoke --list): light
    from containers.host.runtime import Runtime
    from containers.inputs.recipes import Target
    from containers.inputs.settings import Settings
    from containers.inputs.sites import Site
    from containers.prove.performance import Judgement
    from containers.prove.verdict import Result
    from containers.run.command import CommandRun
    from containers.run.workload import Placement, Workload


#: The options every kind's options type declares (with its own default).
GPUS = flags.Option("ranks on this node: one per GPU, or CPU processes (gloo) where there is no "
                    "GPU", flags.POSITIVE_INT, in_job=False)
TIMEOUT = flags.Option("seconds before every rank is stopped and the run fails", flags.SECONDS)


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
    """What a batch job's planner offers a kind, which picks the job it is."""

    def build(self) -> Any: ...

    def command(self) -> Any: ...

    def workload(self) -> Any: ...


class WorkloadKind:
    """By default a run of a script in the image; a kind that differs overrides it."""

    #: The command and the verdict's ``kind``.
    name: str = ""
    #: The script in ``jobs/``, and the report it writes in its results folder.
    script: str = ""
    report_name: str = ""
    #: Its reader: a model of :mod:`containers.records` (named: pydantic is not for start-up).
    report_type: str = "RunReport"
    #: How a reason names the script ("the benchmark exited with code 3").
    program: str = ""
    #: The type of its options (None: the kind takes no run options), which declares them.
    options_type: type | None = None
    #: The seconds a batch job of this kind asks for when ``--time`` is not given.
    estimate: int = 3600

    @property
    def workload(self) -> str:
        """The name ``--workload`` takes for this kind (and ``job.json`` records)."""
        return self.name

    @property
    def run_options(self) -> dict[str, tuple[flags.Option, Any]]:
        """The options ``invoke job`` takes for this kind (but those set by its own flags)."""
        declared = flags.declared(self.options_type) if self.options_type else {}
        return {name: entry for name, entry in declared.items() if entry[0].in_job}

    def make_options(self, *, gpus: int, given: Mapping[str, object]) -> Options | None:
        """The options of a run on ``gpus`` ranks per node from flags or a ``job.json``."""
        return self.options_type(gpus=gpus, **given)

    def resized(self, options: Options | None, *, gpus: int) -> Options | None:
        """``options`` if of this kind's type, else its defaults, on ``gpus`` ranks per node."""
        if isinstance(options, self.options_type):  # type: ignore[arg-type]
            return replace(options, gpus=gpus)  # type: ignore[type-var]
        return self.make_options(gpus=gpus, given={})

    def before_submit(self, check_image: Callable[[], None]) -> None:
        """What a submission of a job of this kind checks first: the image it runs."""
        check_image()

    def checked_command(self, command: Sequence[str]) -> tuple[str, ...]:
        """The user's command after ``--`` as this kind takes it: none (refused when given)."""
        if command:
            raise UsageError(f"a command after -- goes with --workload run, not --workload "
                             f"{self.workload}", flag="--")
        return ()

    def check_nodes(self, nodes: int) -> None:
        """A kind that runs on one node refuses more."""

    def workdir(self, cwd: Callable[[], str]) -> str | None:
        """The folder a job runs its command in (``cwd()``, asked only then); None: none."""
        return None

    def arch_hint(self, target: Target) -> str:
        """What an image of another architecture than the site's nodes can do about it."""
        return ""

    def partition_of(self, site: Site) -> str | None:
        """The partition a job of this kind goes to when none is named (None: the site's)."""
        return None

    def needs_node_tool(self, target_arch: str, host_arch: str) -> bool:
        """Whether a job on ``target_arch`` nodes needs this tool's packages for their Python."""
        return False

    def judged_off_host(self, target_arch: str, host_arch: str) -> bool:
        """Whether this checkout judges it on nodes its own environment cannot run on."""
        return target_arch != host_arch

    def check_judged_here(self, folder: Path) -> None:
        """Refuse, in one line, to judge results (``folder``) this checkout does not judge."""

    def job_body(self, jobs: JobBodies) -> Any:
        """The batch job of this kind, by what the planner offers: a run of its script."""
        return jobs.workload()

    def plan_in_job(self, target: Target, site: Site, *, options: Options | None,
                    command: Sequence[str], ranks: int,
                    **common: Any) -> tuple[Workload, Options | None, CommandRun | None]:
        """The run inside a batch job: the workload, its options, for a command the plan."""
        sized = self.resized(options, gpus=ranks)
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
        """Sanity rules on a written report, quiet where ``settled`` (explained already)."""
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
        """The perflog lines of a run's verdict record (none: its performance is not logged)."""
        return []


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

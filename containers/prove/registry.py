"""The workloads a command or a batch job can name, each one kind object. A name is resolved
here once (callers ask the kind); a new kind is a subclass and one entry in WORKLOADS."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from containers.errors import UsageError, VerdictFailed
from containers.inputs import flags
from containers.inputs.names import suggest
from containers.prove.kind import JobBodies, Options, WorkloadKind
from containers.prove.smoke import SMOKE
from containers.prove.train import TRAINS

if TYPE_CHECKING:
    from containers.inputs.recipes import Target
    from containers.inputs.sites import Site
    from containers.run.command import CommandRun
    from containers.run.workload import Workload


class PlainKind(WorkloadKind):
    """A kind with no run options (any given are refused) that this checkout does not judge."""

    def make_options(self, *, gpus: int, given: Mapping[str, object]) -> None:
        if given:
            raise UsageError(f"--workload {self.workload} takes no run options (got "
                             f"{', '.join(sorted(given))})", flag="--workload")

    def resized(self, options: Options | None, *, gpus: int) -> None:
        return None

    def judged_off_host(self, target_arch: str, host_arch: str) -> bool:
        return False


class RunKind(PlainKind):
    """The user's own command, as ``invoke run`` plans it; a job of it judges itself."""

    name = "run"

    def checked_command(self, command: Sequence[str]) -> tuple[str, ...]:
        from containers.run.command import check_command  # here: declaring a kind stays light
        return check_command(command)

    def workdir(self, cwd: Callable[[], str]) -> str | None:
        return cwd()

    def check_judged_here(self, folder: Path) -> None:
        raise VerdictFailed(f"verdict FAILED: {folder} is a run job's; the job judges itself "
                            "(jobs/runverdict.py writes its verdict.json)")

    def job_body(self, jobs: JobBodies) -> Any:
        return jobs.command()

    def plan_in_job(self, target: Target, site: Site, *, options: Options | None,
                    command: Sequence[str], ranks: int,
                    **common: Any) -> tuple[Workload, Options | None, CommandRun | None]:
        from containers.run.command import plan_command
        planned = plan_command(target, site, command=command, ranks=ranks, timeout=0, **common)
        return planned.workload, None, planned


class BuildKind(PlainKind):
    """An image build as a batch job: it needs no image and has no verdict."""

    name = "build"
    estimate = 2 * 3600

    def before_submit(self, check_image: Callable[[], None]) -> None:
        pass  # a build makes the image it would check

    def check_nodes(self, nodes: int) -> None:
        if nodes != 1:
            raise UsageError(f"a build job runs on one node (got --nodes {nodes})",
                             flag="--nodes")

    def arch_hint(self, target: Target) -> str:
        return (f"; build it on an {target.arch} machine (invoke build --target "
                f"{target.name} there)")

    def partition_of(self, site: Site) -> str | None:
        return site.build_partition

    def needs_node_tool(self, target_arch: str, host_arch: str) -> bool:
        return target_arch != host_arch

    def check_judged_here(self, folder: Path) -> None:
        raise VerdictFailed(f"verdict FAILED: {folder} is a build job's, which has no verdict")

    def job_body(self, jobs: JobBodies) -> Any:
        return jobs.build()


RUN, BUILD = RunKind(), BuildKind()

#: Every workload name's kind, in the order help and errors list them.
WORKLOADS: dict[str, WorkloadKind] = {kind.workload: kind
                                      for kind in (SMOKE, *TRAINS.values(), RUN, BUILD)}


def kind_of(name: str, *, flag: str = "--workload") -> WorkloadKind:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UsageError(f"{flag} must be one of {', '.join(WORKLOADS)} (got '{name}')"
                         f"{suggest(name, WORKLOADS)}", flag=flag) from None


#: Every kind's run options (those ``invoke job`` takes), by name.
RUN_OPTIONS: dict[str, flags.Option] = {name: option for kind in WORKLOADS.values()
                                        for name, (option, _) in kind.run_options.items()}


def applies_to(option: str) -> list[str]:
    return list(dict.fromkeys(kind.name for kind in WORKLOADS.values()
                              if option in kind.run_options))


def job_options(kind: WorkloadKind, *, gpus: int, given: Mapping[str, Any]) -> Options | None:
    """The options of a job of ``kind`` from the run options ``given`` by name."""
    for name in given:
        if name not in kind.run_options:
            raise UsageError(f"applies to {' and '.join(applies_to(name))} jobs, not "
                             f"--workload {kind.workload}; leave it out",
                             flag=flags.flag_of(name))
    return kind.make_options(gpus=gpus, given=given)

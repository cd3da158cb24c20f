"""The workloads a command or a batch job can name, each mapped to the kind that owns it.

``invoke job --workload NAME`` and ``invoke verdict`` ask this registry, never the name: its
options type and the run options it takes (:attr:`WorkloadKind.run_options`), its time
estimate, who judges it, whether it makes the image or takes a command. The smoke benchmark
and the training examples (one kind, three names: ``ddp``, ``deepspeed``, ``fsdp``) run through
:func:`containers.prove.kind.plan`; a user's command (``run``) and an image build (``build``)
are kinds with no run options of their own. A new kind is a :class:`WorkloadKind` (a subclass
where it has code of its own) and one entry in :data:`WORKLOADS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from containers.errors import UsageError
from containers.inputs.names import suggest
from containers.prove.kind import JobBodies, Options, WorkloadKind
from containers.prove.smoke import SMOKE
from containers.prove.train import EXAMPLES, TRAIN

if TYPE_CHECKING:
    from containers.inputs.recipes import Target
    from containers.inputs.sites import Site
    from containers.run.command import CommandRun
    from containers.run.workload import Workload


class RunKind(WorkloadKind):
    """The user's own command: the words after ``--``, planned as ``invoke run`` plans them."""

    def checked_command(self, workload: str, command: Sequence[str]) -> tuple[str, ...]:
        from containers.run.command import check_command  # here: declaring a kind stays light
        return check_command(command)

    def job_body(self, jobs: JobBodies) -> Any:
        return jobs.command()

    def plan_in_job(self, target: Target, site: Site, *, workload: str,
                    options: Options | None, command: Sequence[str], ranks: int,
                    **common: Any) -> tuple[Workload, Options | None, CommandRun | None]:
        from containers.run.command import plan_command
        planned = plan_command(target, site, command=command, ranks=ranks, timeout=0, **common)
        return planned.workload, None, planned


class BuildKind(WorkloadKind):
    """An image build as a batch job: ``invoke build`` on a node of the image's architecture."""

    def job_body(self, jobs: JobBodies) -> Any:
        return jobs.build()


#: The user's own command (``invoke run``, ``--workload run``): no run options; a batch job
#: judges itself in the image (``jobs/runverdict.py``).
RUN = RunKind(name="run", judge="image", takes_command=True)
#: An image build as a batch job: one node, no image needed, no verdict.
BUILD = BuildKind(name="build", estimate=2 * 3600, judge=None, builds_image=True,
                  multinode=False)

#: Every workload name, in the order help and errors list them.
WORKLOADS: dict[str, WorkloadKind] = {"smoke": SMOKE, **{name: TRAIN for name in EXAMPLES},
                                      "run": RUN, "build": BUILD}


def kind_of(workload: str, *, flag: str = "--workload") -> WorkloadKind:
    try:
        return WORKLOADS[workload]
    except KeyError:
        raise UsageError(f"{flag} must be one of {', '.join(WORKLOADS)} (got '{workload}')"
                         f"{suggest(workload, WORKLOADS)}", flag=flag) from None


def applies_to(option: str) -> list[str]:
    return list(dict.fromkeys(kind.name for kind in WORKLOADS.values()
                              if option in kind.run_options))


def job_options(workload: str, *, gpus: int, given: Mapping[str, Any],
                kind: WorkloadKind | None = None) -> Options | None:
    """The options of ``invoke job --workload WORKLOAD`` (of ``kind``, where the caller resolved
    it) from the run options ``given`` (by their names in ``tasks.RUN_OPTIONS``); one its kind
    does not take is refused in one line."""
    kind = kind or kind_of(workload)
    for name in given:
        if name not in kind.run_options:
            raise UsageError(f"applies to {' and '.join(applies_to(name))} jobs, not "
                             f"--workload {workload}; leave it out",
                             flag="--" + name.replace("_", "-"))
    return kind.make_options(workload, gpus=gpus, given=given)

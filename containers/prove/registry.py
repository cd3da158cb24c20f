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

from typing import Any, Mapping

from containers.errors import UsageError
from containers.inputs.names import suggest
from containers.prove.kind import Options, WorkloadKind
from containers.prove.smoke import SMOKE
from containers.prove.train import EXAMPLES, TRAIN

#: The user's own command (``invoke run``, ``--workload run``): no run options; a batch job
#: judges itself in the image (``jobs/runverdict.py``).
RUN = WorkloadKind(name="run", judge="image", takes_command=True)
#: An image build as a batch job: one node, no image needed, no verdict.
BUILD = WorkloadKind(name="build", estimate=2 * 3600, judge=None, builds_image=True,
                     multinode=False)

#: Every workload name, in the order help and errors list them.
WORKLOADS: dict[str, WorkloadKind] = {"smoke": SMOKE, **{name: TRAIN for name in EXAMPLES},
                                      "run": RUN, "build": BUILD}


def kind_of(workload: str, *, flag: str = "--workload") -> WorkloadKind:
    """The kind of a workload name; an unknown name is refused in one line."""
    try:
        return WORKLOADS[workload]
    except KeyError:
        raise UsageError(f"{flag} must be one of {', '.join(WORKLOADS)} (got '{workload}')"
                         f"{suggest(workload, WORKLOADS)}", flag=flag) from None


def applies_to(option: str) -> list[str]:
    """The kinds (by name, each once) whose options take the run option ``option``."""
    return list(dict.fromkeys(kind.name for kind in WORKLOADS.values()
                              if option in kind.run_options))


def job_options(workload: str, *, gpus: int, given: Mapping[str, Any]) -> Options | None:
    """The options of ``invoke job --workload WORKLOAD`` from the run options ``given`` (by
    their names in ``tasks.RUN_OPTIONS``); one its kind does not take is refused in one line."""
    kind = kind_of(workload)
    for name in given:
        if name not in kind.run_options:
            raise UsageError(f"applies to {' and '.join(applies_to(name))} jobs, not "
                             f"--workload {workload}; leave it out",
                             flag="--" + name.replace("_", "-"))
    return kind.make_options(workload, gpus=gpus, given=given)

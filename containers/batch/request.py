"""What ``invoke job`` is asked for (:class:`JobRequest`, which declares and checks its flags),
and the request a job's ``job.json`` describes, so a job's verdict re-plans the run it ran."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from containers.errors import UsageError
from containers.inputs import flags
from containers.prove import registry
from containers.prove.kind import WorkloadKind
from containers.prove.smoke import SmokeOptions
from containers.prove.transport import CHOICES as TRANSPORTS
from containers.prove.train import TrainOptions
from containers.run import launchers


@dataclass(frozen=True)
class JobRequest:
    """What ``invoke job`` was asked for, its flags declared here; None: the site's default."""

    #: Resolved once where its name comes in (the task, a ``job.json``): jobs ask it, not a name.
    kind: WorkloadKind
    nodes: int = flags.option("nodes (one for build)", flags.POSITIVE_INT, 1)
    gpus_per_node: int | None = flags.option("GPUs per node (default: all), or CPU ranks per "
                                             "node on CPU sites (default: 2)", flags.POSITIVE_INT)
    #: Seconds (given as seconds, or as a time ``--time`` takes).
    time: int | None = flags.option("wall time; default: the workload's estimate (smoke 30 min, "
                                    "training 1 h, build 2 h) capped by the partition's limit",
                                    flags.TIME)
    account: str | None = flags.option("account (project) to charge", flags.ACCOUNT)
    partition: str | None = flags.option("partition or queue; default: the site's",
                                         flags.PARTITION)
    launcher: str | None = flags.option("override the site's launch pattern",
                                        flags.choice(launchers.LAUNCHERS))
    nccl_debug: bool = flags.option("NCCL_DEBUG=INFO in the container (which transport "
                                    "NCCL/RCCL picked)", default=False)
    #: The kind's options, or the run options given by name (made into them here, by the kind).
    options: SmokeOptions | TrainOptions | Mapping[str, object] | None = None
    qos: str | None = flags.option("quality of service (Slurm; Olivia's devel for short tests)",
                                   flags.SCHEDULER_NAME)
    reservation: str | None = flags.option("run in this reservation (Slurm)",
                                           flags.SCHEDULER_NAME)
    #: ``--directive``: checked for the site's scheduler where the preamble is written.
    directives: tuple[str, ...] = ()
    #: ``--workload run``: the user's command, as its words (after ``--``), and the folder it
    #: runs in (where it was submitted from: its relative paths mean what they meant there).
    command: tuple[str, ...] = ()
    workdir: str | None = None
    transport: str | None = flags.option(
        "across nodes, NCCL's TCP sockets instead of the site's network transport (where no "
        "plugin for containers exists, as on Derecho): degraded, recorded in job.json and "
        "named by the verdict", flags.choice(TRANSPORTS))

    def __post_init__(self) -> None:
        flags.check(self)
        object.__setattr__(self, "command", self.kind.checked_command(self.command))
        self.kind.check_nodes(self.nodes)
        if isinstance(self.options, Mapping):
            object.__setattr__(self, "options", registry.job_options(
                self.kind, gpus=self.gpus_per_node or 1, given=self.options))


def job_options(options: SmokeOptions | TrainOptions) -> dict:
    """The options a job's verdict re-plans its run with: the set run options."""
    values = {name: getattr(options, name) for name in options.kind.run_options}
    return {key: str(value.resolve()) if isinstance(value, Path) else value
            for key, value in values.items() if isinstance(value, (str, int, float, bool, Path))}


class RecordOptionsError(ValueError):
    """The options of a ``job.json`` are not options its workload takes."""


def request_from_record(given: Mapping, kind: WorkloadKind) -> JobRequest:
    """The request a job's ``job.json`` describes (:class:`RecordOptionsError` if bad)."""
    from containers.records import JobRecord
    from containers.run.workload import JOB_RECORD

    record = JobRecord.of(given, source=JOB_RECORD)
    nodes, gpus = int(record.nodes), int(record.gpus_per_node)
    try:
        options = None if record.options is None else kind.make_options(gpus=gpus,
                                                                        given=record.options)
    except (TypeError, UsageError) as exc:
        raise RecordOptionsError(f"options are not the job's: {exc}") from exc
    return JobRequest(kind=kind, nodes=nodes, gpus_per_node=gpus, launcher=record.launcher,
                      partition=record.partition, options=options, transport=record.transport)

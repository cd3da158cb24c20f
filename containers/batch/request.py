"""What ``invoke job`` is asked for (:class:`JobRequest`, checking its own values) and the
request a job's ``job.json`` describes (:func:`request_from_record`), so a job's verdict re-plans
the run the job ran."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from containers import walltime
from containers.errors import UsageError
from containers.inputs import flags
from containers.prove.kind import Options, WorkloadKind
from containers.prove.smoke import SmokeOptions
from containers.prove.transport import CHOICES as TRANSPORTS
from containers.prove.train import TrainOptions
from containers.records import JobRecord
from containers.run import launchers
from containers.run.workload import JOB_RECORD


@dataclass(frozen=True)
class JobRequest:
    """What ``invoke job`` was asked for; None means the site's default. Checks its own values
    (the site's limits are checked where the site is known: :func:`plan_job`)."""

    #: What the workload is (:mod:`containers.prove.registry`), resolved once where its name
    #: comes in (the task, a job's ``job.json``): the job asks it, never the name.
    kind: WorkloadKind
    nodes: int = 1
    gpus_per_node: int | None = None
    #: Seconds, or a time as ``--time`` takes it (:func:`walltime.parse`), made seconds here.
    time: int | str | None = None
    account: str | None = None
    partition: str | None = None
    launcher: str | None = None
    nccl_debug: bool = False
    options: SmokeOptions | TrainOptions | None = None
    qos: str | None = None
    reservation: str | None = None
    #: ``--directive``: checked for the site's scheduler where the preamble is written.
    directives: tuple[str, ...] = ()
    #: ``--workload run``: the user's command, as its words (after ``--``), and the folder it
    #: runs in (where it was submitted from: its relative paths mean what they meant there).
    command: tuple[str, ...] = ()
    workdir: str | None = None
    #: ``--transport socket``: NCCL's TCP sockets instead of the site's transport, chosen
    #: explicitly (recorded in job.json; verdicts name it as degraded). None: the site's.
    transport: str | None = None

    @property
    def workload(self) -> str:
        return self.kind.workload

    def __post_init__(self) -> None:
        flags.POSITIVE_INT("--nodes", self.nodes)
        object.__setattr__(self, "command", self.kind.checked_command(self.command))
        self.kind.check_nodes(self.nodes)
        flags.POSITIVE_INT("--gpus-per-node", self.gpus_per_node)  # None: the site's default
        if isinstance(self.time, str):
            try:
                object.__setattr__(self, "time", walltime.parse(self.time))
            except ValueError as exc:
                raise UsageError(f"--time {exc} (e.g. 01:30:00)", flag="--time") from exc
        elif self.time is not None and (isinstance(self.time, bool) or self.time <= 0):
            raise UsageError(f"--time must be more than zero (got {self.time!r})",
                             flag="--time")
        # the flag types' rules, whoever builds the request (one validation layer)
        flags.ACCOUNT("--account", self.account)
        if self.launcher is not None:
            launchers.named(self.launcher)
        if self.transport is not None and self.transport not in TRANSPORTS:
            raise UsageError(f"--transport must be one of {', '.join(TRANSPORTS)} (got "
                             f"{self.transport!r})", flag="--transport")
        flags.SCHEDULER_NAME("--qos", self.qos)
        flags.SCHEDULER_NAME("--reservation", self.reservation)


def job_options(options: SmokeOptions | TrainOptions) -> dict:
    """The options a job's verdict re-plans its run with (``job.json``): the plain values only
    (ranks, nodes and the example are the job's own keys)."""
    return {key: str(value.resolve()) if isinstance(value, Path) else value
            for key, value in asdict(options).items()
            if key not in ("gpus", "example") and isinstance(value, (str, int, float, bool, Path))}


class RecordOptionsError(ValueError):
    """The options of a ``job.json`` are not options its workload takes."""


def request_from_record(given: Mapping, kind: WorkloadKind) -> JobRequest:
    """The request a job's ``job.json`` (of ``kind``) describes, options included, so its
    verdict re-plans the run the job ran (:func:`job_run`); bad options raise
    :class:`RecordOptionsError`."""
    record = JobRecord.of(given, source=JOB_RECORD)
    return JobRequest(kind=kind, nodes=int(record.nodes),
                      gpus_per_node=int(record.gpus_per_node),
                      launcher=record.launcher, partition=record.partition,
                      options=_record_options(record, kind), transport=record.transport)


def _record_options(record: JobRecord, kind: WorkloadKind) -> Options | None:
    given = record.options
    if given is None:
        return None
    try:
        return kind.make_options(gpus=int(record.gpus_per_node), given=given)
    except (TypeError, UsageError) as exc:
        raise RecordOptionsError(f"options are not the job's: {exc}") from exc

"""Running across the nodes of the Slurm allocation we are in (``invoke smoke --nodes M``). One
torchrun per node, meeting at the rendezvous found on the host (no Slurm tools in containers)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from containers.errors import StateError, UsageError
from containers.host.process import capture
from containers.inputs import flags
from containers.report import deferred
from containers.run.launchers import LAUNCHERS
from containers.run.rendezvous import RENDEZVOUS, Query
from containers.run.workload import Placement

SLURM = RENDEZVOUS["slurm"]


@dataclass(frozen=True)
class Allocation:
    """The Slurm allocation this process runs in, as its environment names it."""

    job_id: str
    nodes: int
    nodelist: str
    cpus_on_node: int | None = None


def current_allocation(environ: Mapping[str, str]) -> Allocation | None:
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    cpus = environ.get("SLURM_CPUS_ON_NODE")
    try:
        count = int(nodes)
    except ValueError as exc:
        raise StateError(f"SLURM_JOB_NUM_NODES={nodes!r} is not a node count") from exc
    return Allocation(job_id=job_id, nodes=count,
                      nodelist=environ.get("SLURM_JOB_NODELIST")
                      or environ.get("SLURM_NODELIST", ""),
                      cpus_on_node=int(cpus) if cpus and cpus.isdigit() else None)


def check_nodes(nodes: int, allocation: Allocation | None) -> None:
    flags.POSITIVE_INT("--nodes", nodes)
    if nodes == 1:
        return
    if allocation is None:
        raise UsageError(f"--nodes {nodes} runs across the nodes of a Slurm allocation, and "
                         "this is not inside one (SLURM_JOB_ID is unset): use salloc/sbatch "
                         "--nodes, or write a batch job with invoke job", flag="--nodes")
    if nodes > allocation.nodes:
        raise UsageError(f"--nodes {nodes} is more than this allocation has: job "
                         f"{allocation.job_id} holds {allocation.nodes} node"
                         f"{'s' if allocation.nodes != 1 else ''} ({allocation.nodelist})",
                         flag="--nodes")


def placement(allocation: Allocation, nodes: int, *, query: Query = capture) -> Placement:
    """One torchrun per node of the allocation, started by srun, meeting at the first node."""
    rendezvous = SLURM.resolve(allocation.job_id, allocation.nodelist, query=query)
    return Placement(nodes=nodes, rendezvous=rendezvous, cpus_per_task=allocation.cpus_on_node)


def across_nodes(nodes: int, *, dry_run: bool = False,
                 environ: Mapping[str, str] | None = None,
                 scheduler: str = "slurm") -> Placement | None:
    """``--nodes M``: one torchrun per node of the allocation we are in (None: here)."""
    environ = os.environ if environ is None else environ
    found = current_allocation(environ)
    if dry_run and found is None and nodes > 1:
        rendezvous = RENDEZVOUS.get(scheduler, SLURM)
        return Placement(nodes=nodes, rendezvous=rendezvous.at_job_time(deferred),
                         launcher=LAUNCHERS["torchrun"].on(rendezvous.scheduler))
    check_nodes(nodes, found)
    if nodes == 1 or found is None:
        return None
    return placement(found, nodes)


def shown_lines(placement: Placement | None) -> list[str]:
    """The rendezvous lines a dry run across nodes outside an allocation prints first."""
    for rendezvous in RENDEZVOUS.values():
        if placement is not None and placement.rendezvous == rendezvous.at_job_time(deferred):
            return rendezvous.shell()
    return []

"""Running across the nodes of the Slurm allocation we are in (``invoke smoke --nodes M``).

Inside ``sbatch`` or ``salloc`` the allocation is in the environment (``SLURM_JOB_ID``,
``SLURM_JOB_NUM_NODES``, ``SLURM_JOB_NODELIST``). A run across M of its nodes is one ``srun`` task
per node, each running ``<runtime> exec … torchrun`` with a c10d rendezvous at the first node's
address (its Slurm ``NodeAddr``, looked up here on the host: there are no Slurm tools inside the
containers) and a port derived from the job id, so two jobs sharing a node do not collide.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from containers.errors import ConfigError
from containers.host.process import capture
from containers.run.workload import Placement

#: Rendezvous ports: 20000 + job id mod 10000 (batch scripts compute the same in the shell).
PORT_BASE = 20000
PORT_SPAN = 10000


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: int
    nodelist: str
    cpus_on_node: int | None = None


def current_allocation(environ: Mapping[str, str]) -> Allocation | None:
    """The Slurm allocation this process runs in, or None outside one."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    cpus = environ.get("SLURM_CPUS_ON_NODE")
    try:
        return Allocation(job_id=job_id, nodes=int(nodes),
                          nodelist=environ.get("SLURM_JOB_NODELIST")
                          or environ.get("SLURM_NODELIST", ""),
                          cpus_on_node=int(cpus) if cpus and cpus.isdigit() else None)
    except ValueError:
        raise ConfigError(f"SLURM_JOB_NUM_NODES={nodes!r} is not a node count") from None


def rendezvous_port(job_id: str) -> int:
    digits = re.match(r"\d+", job_id)
    return PORT_BASE + (int(digits.group(0)) if digits else 0) % PORT_SPAN


def check_nodes(nodes: int, allocation: Allocation | None) -> None:
    """Refuse a node count the allocation cannot give, in one line."""
    if nodes < 1:
        raise ConfigError(f"--nodes must be at least 1 (got {nodes})")
    if nodes == 1:
        return
    if allocation is None:
        raise ConfigError(f"--nodes {nodes} runs across the nodes of a Slurm allocation, and "
                          "this is not inside one (SLURM_JOB_ID is unset): use salloc/sbatch "
                          "--nodes, or write a batch job with invoke job")
    if nodes > allocation.nodes:
        raise ConfigError(f"--nodes {nodes} is more than this allocation has: job "
                          f"{allocation.job_id} holds {allocation.nodes} node"
                          f"{'s' if allocation.nodes != 1 else ''} ({allocation.nodelist})")


def head_address(nodelist: str, *, query: Callable[[list[str]], str] = capture) -> str:
    """The first node's address: its ``NodeAddr`` in Slurm (what slurmctld itself reaches it
    by), else its name."""
    names = query(["scontrol", "show", "hostnames", nodelist]).split()
    if not names:
        raise ConfigError(f"scontrol lists no hosts for SLURM_JOB_NODELIST={nodelist!r}")
    info = query(["scontrol", "show", "node", "-o", names[0]])
    match = re.search(r"(?:^|\s)NodeAddr=(\S+)", info)
    return match.group(1) if match else names[0]


def srun_argv(nodes: int, *, cpus_per_task: int | None = None) -> list[str]:
    """One task per node; ``--cpus-per-task`` because srun no longer inherits it (Slurm 22.05+)
    and torchrun's ranks would otherwise share one core; a failed node ends the step."""
    argv = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1"]
    if cpus_per_task:
        argv.append(f"--cpus-per-task={cpus_per_task}")
    return argv + ["--kill-on-bad-exit=1"]


def placement(allocation: Allocation, nodes: int, *, head: str) -> Placement:
    return Placement(nodes=nodes, endpoint=f"{head}:{rendezvous_port(allocation.job_id)}",
                     rdzv_id=allocation.job_id,
                     launcher=tuple(srun_argv(nodes, cpus_per_task=allocation.cpus_on_node)))


def across_nodes(nodes: int, *, dry_run: bool = False,
                 environ: Mapping[str, str] | None = None) -> Placement | None:
    """``--nodes M``: one torchrun per node of the Slurm allocation we are in, through srun
    (None: this node only). A dry run outside an allocation shows the variables it would use."""
    environ = os.environ if environ is None else environ
    found = current_allocation(environ)
    if dry_run and found is None and nodes > 1:
        return Placement(nodes=nodes, endpoint="$FIRST_NODE_ADDR:$MASTER_PORT",
                         rdzv_id="$SLURM_JOB_ID", launcher=tuple(srun_argv(nodes)))
    check_nodes(nodes, found)
    if nodes == 1 or found is None:
        return None
    return placement(found, nodes, head=head_address(found.nodelist))

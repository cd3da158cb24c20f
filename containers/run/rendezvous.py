"""Where the ranks of a multi-node run meet: the first node of the job and a port from the job id.
Found in Python (:meth:`resolve`) and as a batch script's lines (:meth:`shell`) alike."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from containers.errors import StateError
from containers.files import read_regular_text
from containers.host.process import capture

PORT_BASE = 20000
PORT_SPAN = 10000
#: The variables a batch script sets for the launchers (``MASTER_ADDR`` is torch's own name).
ADDR_VAR = "MASTER_ADDR"
PORT_VAR = "MASTER_PORT"

Query = Callable[[list[str]], str]


@dataclass(frozen=True)
class Rendezvous:
    """``host:port`` on the first node and the run's id (in a script: shell references)."""

    host: str
    port: str
    id: str

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


def port_of(job_id: str) -> int:
    """The port for a job: its leading number (``4242``, PBS's ``0081234.desched1``)."""
    digits = re.match(r"\d+", job_id)
    return PORT_BASE + (int(digits.group(0)) if digits else 0) % PORT_SPAN


class SchedulerRendezvous:
    """The rendezvous of one scheduler: in Python inside a job, or as a batch script's lines."""

    scheduler = ""
    #: The variable holding the job id and the one naming the job's nodes.
    job_id_var = ""
    nodes_var = ""

    def resolve(self, job_id: str, nodes: str, *, query: Query = capture) -> Rendezvous:
        return Rendezvous(host=self.head(nodes, query=query), port=str(port_of(job_id)),
                          id=job_id)

    def at_job_time(self, ref: Callable[[str], str]) -> Rendezvous:
        """The rendezvous as references (``ref(NAME)``) to what :meth:`shell` sets."""
        return Rendezvous(host=ref(ADDR_VAR), port=ref(PORT_VAR), id=ref(self.job_id_var))

    def head(self, nodes: str, *, query: Query = capture) -> str:
        raise NotImplementedError

    def shell(self) -> list[str]:
        raise NotImplementedError


class SlurmRendezvous(SchedulerRendezvous):
    """The first node's ``NodeAddr`` (what slurmctld itself reaches it by), else its name."""

    scheduler = "slurm"
    job_id_var = "SLURM_JOB_ID"
    nodes_var = "SLURM_JOB_NODELIST"
    HOSTNAMES = ("scontrol", "show", "hostnames")
    NODE = ("scontrol", "show", "node", "-o")
    ADDR_KEY = "NodeAddr"

    def head(self, nodes: str, *, query: Query = capture) -> str:
        names = query([*self.HOSTNAMES, nodes]).split()
        if not names:
            raise StateError(f"{shlex.join(self.HOSTNAMES)} lists no hosts for "
                             f"{self.nodes_var}={nodes!r}")
        info = query([*self.NODE, names[0]])
        match = re.search(rf"(?:^|\s){self.ADDR_KEY}=(\S+)", info)
        return match.group(1) if match else names[0]

    def shell(self) -> list[str]:
        return [
            "# Rendezvous at the first node, found here on the host (there are no Slurm tools",
            "# inside the containers); the port follows from the job id, so that jobs sharing",
            "# a node do not collide. (sed -n 1p rather than head: no SIGPIPE under pipefail.)",
            f'head_node=$({shlex.join(self.HOSTNAMES)} "${self.nodes_var}" | sed -n 1p)',
            f'{ADDR_VAR}=$({shlex.join(self.NODE)} "$head_node" '
            f"| sed -n 's/.* {self.ADDR_KEY}=\\([^ ]*\\).*/\\1/p')",
            f"{ADDR_VAR}=${{{ADDR_VAR}:-$head_node}}",
            f"{PORT_VAR}=$(({PORT_BASE} + {self.job_id_var} % {PORT_SPAN}))",
            f"export {ADDR_VAR} {PORT_VAR}",
            f'echo "rendezvous: ${ADDR_VAR}:${PORT_VAR} (first node $head_node)"',
        ]


class PbsRendezvous(SchedulerRendezvous):
    """PBS Pro: the node file's first line; the port from the job number, read as decimal."""

    scheduler = "pbs"
    job_id_var = "PBS_JOBID"
    nodes_var = "PBS_NODEFILE"

    def head(self, nodes: str, *, query: Query = capture) -> str:
        try:
            lines = read_regular_text(Path(nodes)).split()
        except (OSError, ValueError) as exc:  # a FIFO or device: refused, never read
            raise StateError(f"cannot read the job's node file {self.nodes_var}={nodes}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from exc
        if not lines:
            raise StateError(f"the job's node file {nodes} lists no nodes")
        return lines[0]

    def shell(self) -> list[str]:
        return [
            "# Rendezvous at the first node of the job (the first line of the node file); the",
            "# port follows from the job number, so that jobs sharing a node do not collide.",
            f'{ADDR_VAR}=$(sed -n 1p "${self.nodes_var}")',
            f"{PORT_VAR}=$(({PORT_BASE} + 10#${{{self.job_id_var}%%.*}} % {PORT_SPAN}))",
            f"export {ADDR_VAR} {PORT_VAR}",
            f'echo "rendezvous: ${ADDR_VAR}:${PORT_VAR}"',
        ]


RENDEZVOUS: dict[str, SchedulerRendezvous] = {r.scheduler: r for r in
                                              (SlurmRendezvous(), PbsRendezvous())}

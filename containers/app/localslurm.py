"""``invoke local-slurm``: a real Slurm cluster on this machine, to try batch jobs without one."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from containers.app.project import Project
from containers.errors import CommandFailed, StateError
from containers.host import slurmcluster, slurmconf
from containers.inputs.sites import get_site
from containers.report import Say, say_line as _print

#: Where the command's cluster lives: one per machine (the daemons run as root). Not under the
#: checkout: munged, running as user munge, must reach its socket and key folders.
DEFAULT_ROOT = Path("/var/tmp/containers-local-slurm")


def _found(root: Path) -> tuple[slurmcluster.SlurmCluster | None, dict[str, list[int]]]:
    """The cluster in ``root`` (leftovers too) and what of it still runs, by name."""
    cluster = slurmcluster.load(root)
    if cluster is None and os.path.lexists(root):
        cluster = slurmcluster.SlurmCluster(root=root, conf=root / "slurm.conf")
    if cluster is None:
        return None, {}
    running = {name: [proc.pid] for name, proc in slurmcluster.daemons(cluster).items()}
    steps = [proc.pid for proc in slurmcluster.steps(cluster)]
    return cluster, {**running, **({"job steps": steps} if steps else {})}


def _listing(running: dict[str, list[int]]) -> str:
    return ", ".join(f"{name} (PID{'s' * (len(pids) > 1)} {', '.join(map(str, pids))})"
                     for name, pids in running.items())


def _half_stopped(cluster: slurmcluster.SlurmCluster, running: dict[str, list[int]]) -> str | None:
    """Why ``cluster`` is neither running whole nor stopped (a stop cut off half way), else None."""
    gone = [name for name in cluster.pids if name not in running]
    if not running or (cluster.pids and not gone):
        return None
    return (f"the local Slurm cluster in {cluster.root} is half-stopped: "
            + (f"{', '.join(gone)} exited, " if gone else "")
            + f"still running: {_listing(running)}; finish stopping it: invoke local-slurm --stop")


def _describe(cluster: slurmcluster.SlurmCluster, say: Say) -> None:
    try:
        partitions = ", ".join(cluster.partitions(timeout=slurmcluster.CLIENT_TIMEOUT))
    except CommandFailed as exc:  # a controller that does not answer: say so, do not wait
        partitions = f"unknown ({exc})"
    say(f"nodes: {', '.join(cluster.nodes)}; partitions: {partitions}")
    say("daemons (PIDs): " + ", ".join(f"{k} {v}" for k, v in cluster.pids.items()))
    say(f"folder: {cluster.root} (logs in {cluster.root / 'log'})")
    say("jobs reach it through SLURM_CONF:")
    say(f"export SLURM_CONF={shlex.quote(str(cluster.conf))}")


def local_slurm(project: Project, *, action: str, site: str | None = None,
                say: Say = _print) -> None:
    """``action``: start, stop or status."""
    root = Path(os.environ.get("CONTAINERS_LOCAL_SLURM_DIR", DEFAULT_ROOT))
    cluster, running = _found(root)
    half = _half_stopped(cluster, running) if cluster else None
    if action == "stop":
        if cluster is None:
            say(f"no local Slurm cluster is running (in {root}); nothing to stop")
            return
        slurmcluster.stop(cluster)
        say(f"stopped the local Slurm cluster in {root}: "
            + (_listing(running) or "nothing ran; removed its folder"))
    elif half:
        raise StateError(half)
    elif action == "status":
        if not running:
            raise StateError(f"no local Slurm cluster is running (in {root}); "
                             "start one: invoke local-slurm --start")
        _describe(cluster, say)
    else:
        if running:
            raise StateError(f"a local Slurm cluster is already running (in {root}); "
                             "stop it first: invoke local-slurm --stop")
        if cluster:  # a stopped or crashed cluster's leftovers
            slurmcluster.stop(cluster)
        _start(project, root, site, say)


def _start(project: Project, root: Path, site: str | None, say: Say) -> None:
    if site:
        profile = get_site(project.sites, site)
        if profile.scheduler != "slurm":
            raise StateError(f"site {site} has scheduler {profile.scheduler}, not slurm: the "
                             "local cluster takes the shape of a Slurm site")
        write, nodes = slurmconf.site_conf_writer(profile), slurmconf.site_node_names(profile)
    else:
        write, nodes = slurmconf.two_node_conf, ("n1", "n2")
    say(f"starting munged, slurmctld and {len(nodes)} slurmd in {root} …")
    cluster = slurmcluster.start(root, write, nodes=nodes, ports=len(nodes) + 2)  # + slurmdbd
    slurmcluster.save(cluster)
    say("local Slurm cluster started" + (f", shaped like {site}" if site else ""))
    _describe(cluster, say)

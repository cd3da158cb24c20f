"""The site's rules for a batch job, checked before anything is written: scheduler, GPUs,
architecture, partition, time, size, account and transport."""

from __future__ import annotations

from typing import Mapping

from containers import walltime
from containers.batch.request import JobRequest
from containers.batch.schedulers import scheduler_of
from containers.errors import ConfigError, UsageError
from containers.inputs.recipes import Target
from containers.inputs.schema import suggest
from containers.inputs.settings import Settings
from containers.inputs.sites import Partition, Qos, Site
from containers.prove.transport import sockets

_KINDS = {"none": "CPUs (no GPU)", "cuda": "NVIDIA (CUDA) GPUs", "rocm": "AMD (ROCm) GPUs"}


def check_site(request: JobRequest, target: Target, site: Site, site_arch: str | None) -> None:
    """What the request, the image and the site must agree on."""
    scheduler_of(site, "; name a site that has one with --site" + (
        " (for a Slurm cluster of CPU nodes: --site local-slurm)"
        if site.gpus.kind == "none" else ""))
    if target.gpu != site.gpus.kind:
        raise UsageError(f"target {target.name} is an image for {_KINDS[target.gpu]} but "
                         f"site {site.name} has {_KINDS[site.gpus.kind]}")
    if site_arch and target.arch != site_arch:
        where = request.kind.arch_hint(target)
        raise UsageError(f"target {target.name} is {target.arch} but site {site.name}'s "
                         f"nodes are {site_arch}{where}")
    if (request.partition is not None and site.partitions
            and request.partition not in site.partitions):
        raise UsageError(f"unknown partition '{request.partition}' for site {site.name}"
                         f"{suggest(request.partition, site.partitions)}; known: "
                         f"{', '.join(site.partitions)}", flag="--partition")


def fit_time(request: JobRequest, site: Site, partition: Partition,
             qos: Qos | None = None) -> int:
    """The job's wall time: ``--time`` within the limits, else the estimate capped by them."""
    limits = [(f"partition {partition.name}", partition.max_time, "")]
    if qos is not None:
        default = "" if request.qos else " (its default_qos: --qos names another)"
        limits.append((f"QoS {qos.name}{default}", qos.max_time, f"; {qos.source}"))
    if isinstance(request.time, int):
        for what, limit, source in limits:
            if limit is not None and request.time > limit:
                raise UsageError(f"--time {walltime.format(request.time)} is more than {what} "
                                 f"of site {site.name} allows ({walltime.format(limit)}"
                                 f"{source})", flag="--time")
        return request.time
    return min([request.kind.estimate,
                *(limit for _, limit, _ in limits if limit is not None)])


def _over(site: Site, limits: Partition | Qos, *, nodes: int,
          gpus_per_node: int) -> tuple[str, str | None] | None:
    """The refusal (and flag) of the first limit the request is over; None within them all."""
    what, source, per_node = (("QoS", f"; {limits.source}", None) if isinstance(limits, Qos)
                              else ("partition", "", limits.gpus_per_node))
    where = f"{what} {limits.name} of site {site.name} allows"
    total = nodes * gpus_per_node
    if limits.max_nodes is not None and nodes > limits.max_nodes:
        return f"--nodes {nodes} is more than {where} ({limits.max_nodes}{source})", "--nodes"
    if per_node is not None and gpus_per_node > per_node:
        return (f"--gpus-per-node {gpus_per_node} is more than the nodes of partition "
                f"{limits.name} have ({per_node})", "--gpus-per-node")
    if limits.max_gpus is not None and total > limits.max_gpus:
        return (f"{nodes} node(s) x {gpus_per_node} GPUs = {total} is more than {where} per "
                f"job ({limits.max_gpus}{source})", "--qos" if what == "QoS" else None)
    return None


def check_size(site: Site, partition: Partition, qos: Qos | None, *, nodes: int,
               gpus_per_node: int) -> None:
    """Nodes and GPUs within the partition's and the QoS's limits."""
    size = dict(nodes=nodes, gpus_per_node=gpus_per_node)
    if (over := _over(site, partition, **size)) is not None:
        fits = [p for p in site.partitions.values()
                if p.name != partition.name and _over(site, p, **size) is None]
        hint = f"; partition {fits[0].name} allows it (--partition {fits[0].name})" if fits else ""
        raise UsageError(over[0] + hint, flag=over[1])
    if qos is not None and (over := _over(site, qos, **size)) is not None:
        raise UsageError(over[0], flag=over[1])


def resolve_account(request: JobRequest, site: Site, settings: Settings,
                    environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The account and where it came from: the flag, the settings, else the scheduler's own
    variables (``SBATCH_ACCOUNT`` is left to sbatch: None); refused where required and none."""
    if request.account:
        return request.account, "--account"
    configured = settings.account_for(site.name)
    if configured:
        return configured, (f"containers.accounts.{site.name}"
                            if settings.accounts.get(site.name) else "containers.account")
    variables = scheduler_of(site).account_vars
    for var in variables:
        if environ.get(var):
            return (None if var == "SBATCH_ACCOUNT" else environ[var]), var
    if not site.account_required:
        return None, ""
    env = (f", or export {' or '.join(variables)}" if variables
           else f" ({site.scheduler} reads no account variable)")
    raise UsageError(f"site {site.name} requires an account (project) for its jobs: pass "
                     f"--account NAME, set containers.accounts.{site.name} (or "
                     f"containers.account) in invoke.yaml{env}")


def check_transport(site: Site, nodes: int) -> None:
    """Refuse a job across nodes whose transport cannot load here, naming the way out."""
    transport = site.transport
    if not (transport.host_stack and transport.applies(nodes)):
        return
    why = (transport.unavailable if transport.unavailable else None if transport.binds else
           "the profile binds none (transport.binds)")
    if why:
        raise ConfigError(f"a {nodes}-node job on site {site.name} needs the host's network "
                          f"plugin and libfabric bound into the container for its transport "
                          f"({transport.name}), and {why}: run on one node (--nodes 1), add "
                          "them to the profile, or pass --transport socket for NCCL's TCP "
                          "sockets (degraded; recorded in job.json, named by the verdict)",
                          path=site.path, line=site.lines.get("transport"), key="transport")


def chosen_site(site: Site, request: JobRequest) -> Site:
    """``site`` with the transport the request chose, refused where it does not apply."""
    if request.transport is None:
        return site
    if not site.transport.applies(request.nodes):
        where = (f"from {site.transport.from_nodes} nodes" if site.transport.expect
                 else "and site " + site.name + " declares none (no transport: in its profile)")
        raise UsageError(f"--transport {request.transport} replaces the site's network "
                         f"transport, which applies to jobs across nodes {where}; this job has "
                         f"{request.nodes} node(s): leave --transport out", flag="--transport")
    return site.model_copy(update={"transport": sockets(site.transport)})

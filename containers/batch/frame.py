"""What every batch job of a request has, whatever it runs (:class:`Frame`): its name, output,
partition, time and account, and the header comments that say where each came from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from containers import __version__, walltime
from containers.batch.request import JobRequest
from containers.batch.schedulers import SCHEDULERS, Resources, directive, scheduler_of
from containers.batch.siterules import fit_time, resolve_account
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.inputs.sites import Partition, Qos, Site
from containers.run.launchers import Shape


@dataclass(frozen=True)
class Frame:
    """What every job of a request has but its size, with where each part came from."""

    resources: Resources
    partition: Partition
    qos: Qos | None
    comments: list[str]
    #: GB per node asked with all its ``node_gpus`` (shared nodes' ``allocatable_gb``; 0: none).
    node_memory_gb: int = 0
    node_gpus: int = 0
    #: The extra lines of a job that asks for GPUs (the site's ``job.gpu_directives`` too).
    gpu_directives: tuple[str, ...] = ()

    def sized(self, *, nodes: int, shape: Shape, gpus: int) -> Resources:
        """The resources of a job of this size (shared nodes: its GPUs' share of memory)."""
        memory = (self.node_memory_gb * min(gpus, self.node_gpus) // self.node_gpus
                  if self.node_gpus and gpus else self.node_memory_gb)
        return replace(self.resources, nodes=nodes, tasks_per_node=shape.tasks_per_node,
                       cpus_per_task=shape.cpus_per_task, gpus_per_node=gpus,
                       exclusive=shape.exclusive, mem_per_node_gb=memory,
                       directives=self.gpu_directives if gpus else self.resources.directives)


def example_preamble(site: Site, name: str) -> list[str] | None:
    """A 30-minute whole-node job's directives for the catalogue page; None without scheduler."""
    if (scheduler := SCHEDULERS.get(site.scheduler)) is None:
        return None
    partition = site.partition(site.default_partition)
    return scheduler.preamble(Resources(
        name=name, time="00:30:00", partition=partition.name or None,
        account="YOUR_PROJECT" if site.account_required else None,
        output=scheduler.output_dir(Path("."), f"{name}-job"),
        gpus_per_node=site.gpus_in(partition),
        mem_per_gpu_gb=site.mem_per_gpu_gb(partition),
        mem_per_node_gb=partition.allocatable_gb or 0 if partition.shared_nodes else 0,
        gpu_request=partition.gpu_request or site.gpus.request,
        gres_type=partition.gres_type or site.gpus.gres_type))


def job_frame(target: Target, site: Site, *, settings: Settings, request: JobRequest,
              environ: Mapping[str, str], stamp: str) -> Frame:
    """The job's name, output, partition, time and account, and where each came from."""
    scheduler = scheduler_of(site)
    full_name = f"{request.kind.workload}-{target.name}"
    directive(full_name, "job name")
    name = scheduler.job_name(full_name, site.job.short_names)
    output = scheduler.output_dir(settings.results_dir / "jobs", f"{name}-{stamp}")
    partition = site.partition(request.partition or request.kind.partition_of(site)
                               or site.default_partition)
    qos_name = request.qos or site.default_qos  # the QoS the job really gets
    qos = site.qos.get(qos_name or "")
    time = fit_time(request, site, partition, qos)
    account, account_from = resolve_account(request, site, settings, environ)
    limit = f" (partition limit {walltime.format(partition.max_time)})" \
        if partition.max_time else ""
    source = (f", account from {account_from}" if account_from else "") + \
        (" (sbatch reads it at submission)" if account_from == "SBATCH_ACCOUNT" else "")
    comments = [f"invoke job: {request.kind.workload} of image {target.name} on site {site.name} "
                f"(hpc-containers {__version__})"
                + (f", job name {name} ({full_name})" if name != full_name else ""),
                f"submit: {scheduler.submit_command} FILE; output: {output} (invoke job made "
                f"its folder)",
                f"partition {partition.name or '(the scheduler default)'}, time "
                f"{walltime.format(time)}{limit}{source}"]
    resources = Resources(name=name, time=walltime.format(time),
                          partition=partition.name or None, account=account, output=output,
                          mem_per_gpu_gb=site.mem_per_gpu_gb(partition),
                          gpu_request=partition.gpu_request or site.gpus.request,
                          gres_type=partition.gres_type or site.gpus.gres_type, qos=qos_name,
                          reservation=request.reservation,
                          directives=(*site.job.directives, *request.directives))
    memory = partition.allocatable_gb or 0 if partition.shared_nodes else 0
    if memory:
        comments.append(f"partition {partition.name}: shared nodes, memory asked per node "
                        f"(allocatable_gb: {memory} GB with all a node's GPUs, else their "
                        "share)")
    if qos_name and not request.qos:
        comments.append(f"QoS {qos_name}: the site's default (default_qos; --qos for another)")
    return Frame(resources=resources, partition=partition, qos=qos, comments=comments,
                 gpu_directives=(*site.job.directives, *site.job.gpu_directives,
                                 *request.directives), node_memory_gb=memory,
                 node_gpus=partition.gpus_per_node
                 if partition.gpus_per_node is not None else site.gpus.per_node)

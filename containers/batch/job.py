"""Batch jobs (``invoke job``): a complete Slurm or PBS script for a site, a workload and a size.
It is planned as an interactive run, with shell variables for what only the node knows."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from containers.batch.bodies import (build_body, loaded_modules, module_lines,
                                     module_variable_lines, run_lines, run_record,
                                     workload_lines)
from containers.batch.frame import Frame, job_frame
from containers.batch.judgeenv import JudgeEnv
from containers.batch.request import JobRequest, job_options
from containers.batch.schedulers import Resources, Scheduler, scheduler_of
from containers.batch.script import SHELL_VARS, ref, render, word
from containers.batch.siterules import check_site, check_size, check_transport, chosen_site
from containers.host.facts import run_stamp
from containers.host.runtime import Runtime
from containers.image.plan import fakeroot_refusal
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.inputs.sites import Site
from containers.prove.kind import WorkloadKind
from containers.run import launchers
from containers.run.command import CommandRun
from containers.run.launchers import Launcher, Shape, cores_for
from containers.run.workload import Placement, Workload


@dataclass(frozen=True)
class JobNeeds:
    """What a job is planned from, resolved once; ``judge`` and ``tool``: the package folders a
    node of another architecture needs (``judge`` None: this checkout judges, or not ``ready``)."""

    target: Target
    site: Site
    settings: Settings
    host_arch: str
    site_arch: str | None = None
    venv: Path | None = None
    judge: JudgeEnv | None = None
    tool: tuple[JudgeEnv, ...] = ()
    ready: bool = True

    @property
    def packages(self) -> tuple[JudgeEnv, ...]:
        return tuple(env for env in (self.judge, *self.tool) if env is not None)


@dataclass(frozen=True)
class Job:
    """A rendered batch job: the script text and where its output and results go."""

    request: JobRequest
    target: Target
    site: Site
    scheduler: Scheduler
    resources: Resources
    text: str
    results: str | None  # the results folder, with the job id as ``{job_id}``
    #: When it was rendered, in its files' names: a job id that repeats names new files.
    stamp: str = ""

    @property
    def output_folder(self) -> Path:
        """The folder the job's output goes into, made by ``invoke job`` (schedulers do not)."""
        return self.scheduler.output_folder(self.resources)

    def output_of(self, job_id: str) -> str:
        return self.scheduler.output_of(self.resources, job_id)

    def results_of(self, job_id: str) -> str | None:
        return None if self.results is None else self.results.replace("{job_id}", job_id)


def plan_job(needs: JobNeeds, request: JobRequest, *, environ: Mapping[str, str] | None = None,
             stamp: str | None = None) -> Job:
    """The whole batch job, rendered: pure but for ``environ`` (the account rules)."""
    check_site(request, needs.target, needs.site, needs.site_arch)
    planner = JobPlanner(needs=replace(needs, site=chosen_site(needs.site, request)),
                         request=request, environ=environ or {}, stamp=stamp or run_stamp())
    return request.kind.job_body(planner)


@dataclass(frozen=True)
class JobPlanner:
    """What :func:`plan_job` was given, and the jobs a kind picks from."""

    needs: JobNeeds
    request: JobRequest
    environ: Mapping[str, str]
    stamp: str

    def frame(self) -> Frame:
        return job_frame(self.needs.target, self.needs.site, settings=self.needs.settings,
                         request=self.request, environ=self.environ, stamp=self.stamp)

    def build(self) -> Job:
        """A build job: one task on one node, one GPU where the partition has them."""
        target, site, settings = self.needs.target, self.needs.site, self.needs.settings
        if (refusal := fakeroot_refusal(target, site)) is not None:
            raise refusal
        frame = self.frame()
        gpus = 1 if site.gpus.per_node and frame.partition.gpus_per_node != 0 else 0
        check_size(site, frame.partition, frame.qos, nodes=1, gpus_per_node=gpus)
        res = frame.sized(nodes=1, gpus=gpus,
                          shape=Shape(tasks_per_node=1, cpus_per_task=cores_for(site, 1)))
        body = [f"cd {word(str(settings.root))}", "", *module_lines(site.job_modules),
                *build_body(target, site, root=settings.root, host_arch=self.needs.host_arch,
                            venv=self.needs.venv, tool=self.needs.tool)]
        return self._render(frame, res, body)

    def command(self) -> Job:
        """``--workload run``: the user's command, judged in the image."""
        return self._run_job(lambda run, record: run_lines(
            run.command, site=self.needs.site, settings=self.needs.settings,
            nodes=self.request.nodes,
            record=run_record(record, self.request.command, self.request.workdir)))

    def workload(self) -> Job:
        """A smoke or training job: its run, then its verdict."""
        return self._run_job(lambda run, record: workload_lines(
            self.needs.target, run.workload, settings=self.needs.settings, record=record,
            judge=self.needs.judge, host_arch=self.needs.host_arch, venv=self.needs.venv))

    def _run_job(self, lines: Callable[[JobRun, dict], list[str]]) -> Job:
        """A job that runs the image on its nodes: size rules, plan, the body's head, ``lines``."""
        target, site, request = self.needs.target, self.needs.site, self.request
        frame = self.frame()
        gpus = _ranks_per_node(request, site)
        asked = gpus if site.gpus.kind != "none" else 0  # the scheduler's: none on CPU sites
        check_size(site, frame.partition, frame.qos, nodes=request.nodes, gpus_per_node=asked)
        check_transport(site, request.nodes)
        run = job_run(target, site, settings=self.needs.settings, request=request,
                      stamp=self.stamp)
        record = {"target": target.name, "site": site.name, "workload": request.kind.workload,
                  "nodes": request.nodes, "gpus_per_node": gpus, "launcher": run.launcher.name,
                  "partition": frame.partition.name or None,
                  "options": job_options(run.options) if run.options else {},
                  **({"transport": request.transport} if request.transport else {})}
        body = [*self._head(run), *lines(run, record)]
        size = (f"{request.nodes} node{'s' if request.nodes > 1 else ''} x {gpus} "
                f"{'GPUs' if site.gpus.kind != 'none' else 'CPU ranks'}, launcher "
                f"{run.launcher.name}")
        comments = [size, *([run.workload.cores_note] if run.workload.cores_note else []),
                    *([f"transport: {site.transport.degraded}"] if site.transport.degraded else [])]
        job_id = ref(scheduler_of(site).rendezvous.job_id_var)
        return self._render(frame, frame.sized(nodes=request.nodes, shape=run.shape, gpus=asked),
                            body, comments=comments,
                            results=str(run.workload.out_dir).replace(job_id, "{job_id}"))

    def _head(self, run: JobRun) -> list[str]:
        site, multinode = self.needs.site, self.request.nodes > 1
        modules = loaded_modules(site, multinode=multinode)
        return [f"cd {word(str(self.needs.settings.root))}", "",
                *module_lines(modules, multinode=multinode and bool(site.transport.modules)),
                *module_variable_lines(site, modules, multinode=multinode),
                *([*scheduler_of(site).rendezvous.shell(), ""] if run.meets else [])]

    def _render(self, frame: Frame, res: Resources, body: list[str], *,
                comments: Sequence[str] = (), results: str | None = None) -> Job:
        site = self.needs.site
        scheduler = scheduler_of(site)
        text = render(scheduler.preamble(res), [*frame.comments, *comments], body)
        return Job(request=self.request, target=self.needs.target, site=site,
                   scheduler=scheduler, resources=res, text=text,
                   results=results, stamp=self.stamp)


def _ranks_per_node(request: JobRequest, site: Site) -> int:
    """CPU sites get 2 ranks, as smoke."""
    return request.gpus_per_node or site.gpus.per_node or 2


@dataclass(frozen=True)
class JobRun:
    """The run inside a workload job, as :func:`job_run` plans it."""

    kind: WorkloadKind | None
    launcher: Launcher
    shape: Shape
    workload: Workload
    options: SmokeOptions | TrainOptions | None
    #: Whether the ranks meet at a rendezvous the job's shell finds (the scheduler's lines).
    meets: bool
    #: ``--workload run``: the planned command and its device gate (kind and options None).
    command: CommandRun | None = None


def job_run(target: Target, site: Site, *, settings: Settings, request: JobRequest,
            stamp: str = "") -> JobRun:
    """The workload of a job as its script runs it and ``invoke verdict`` judges it (pure)."""
    scheduler = scheduler_of(site)
    site = chosen_site(site, request)
    launcher = launchers.for_site(site, request.launcher)
    gpus = _ranks_per_node(request, site)
    shape = launcher.shape(site, gpus)
    meets = request.nodes > 1 or launcher.needs_rendezvous
    placement = Placement(nodes=request.nodes, launcher=launcher,
                          rendezvous=scheduler.rendezvous.at_job_time(ref) if meets else None,
                          cpus_per_task=shape.cpus_per_task, ranks_flag="--gpus-per-node")
    # job ids restart with a cluster: with the stamp, two clusters' job 1 never share a folder
    run_id = "-".join([*([stamp] if stamp else []), scheduler.name,
                       f"job{ref(scheduler.rendezvous.job_id_var)}"])
    common = dict(settings=settings, strict=False, placement=placement, environ=SHELL_VARS,
                  runtime=Runtime(binary=site.runtime, flavour=site.runtime, version="site"),
                  run_id=run_id)
    workload, options, planned = request.kind.plan_in_job(
        target, site, options=request.options, command=request.command, ranks=gpus, **common)
    if request.nccl_debug:
        workload = workload.with_env({"NCCL_DEBUG": "INFO"})
    return JobRun(kind=options.kind if options else None, launcher=launcher, shape=shape,
                  workload=workload, options=options, meets=meets,
                  command=planned and replace(planned, workload=workload))

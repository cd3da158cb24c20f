"""Batch jobs (``invoke job``): a complete Slurm or PBS script for a site, a workload and a size.

Three parts, as ReFrame splits them, put together here by one builder (:func:`plan_job`):

* the **scheduler** (:mod:`containers.batch.schedulers`) gives the preamble (``#SBATCH`` /
  ``#PBS`` lines), the shell lines that find the rendezvous and how to submit;
* the **launcher** is the site's entry of the one registry (:mod:`containers.run.launchers`) that
  interactive runs use too; it sizes the job (tasks and CPUs per node) and starts the ranks;
* the **workload** is planned by the same code as ``invoke smoke`` and ``invoke train``
  (:func:`containers.prove.kind.plan`, for a smoke or a training kind), with a
  placement whose rendezvous, job id and site values are shell variable references
  (:mod:`containers.batch.script`), so the script expands them on the compute node; or, for
  ``build``, ``invoke build`` on a node of the image's architecture.

Only site profile values and explicit flags reach a script (never the caller's environment); every
value is quoted; the tests run ``bash -n`` on the script of every site and workload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from containers import __version__
from containers.batch.schedulers import DIRECTIVE_SAFE, SCHEDULERS, Resources, Scheduler, directive
from containers.batch.script import SHELL_VARS, Script, assign, command, ref, word
from containers.errors import ConfigError, UsageError
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.schema import suggest
from containers.inputs.settings import Settings
from containers.inputs.sites import Site
from containers.prove.kind import plan as plan_run
from containers.prove.smoke import SmokeOptions
from containers.prove.train import EXAMPLES, TrainOptions
from containers.run import launchers
from containers.run.launchers import Launcher, cores_for
from containers.run.layout import at_least_one
from containers.run.workload import Placement, Workload

WORKLOADS = ("smoke", *EXAMPLES, "build")
DEFAULT_TIME = {"smoke": "00:30:00", "build": "02:00:00"}  # training workloads: 01:00:00
_TIME = re.compile(r"(\d{1,3}):([0-5]\d):([0-5]\d)\Z")
_KINDS = {"none": "CPUs (no GPU)", "cuda": "NVIDIA (CUDA) GPUs", "rocm": "AMD (ROCm) GPUs"}


@dataclass(frozen=True)
class JobRequest:
    """What ``invoke job`` was asked for; None means the site's default. Checks its own values
    (the site's limits are checked where the site is known: :func:`plan_job`)."""

    workload: str
    nodes: int = 1
    gpus_per_node: int | None = None
    time: str | None = None
    account: str | None = None
    partition: str | None = None
    launcher: str | None = None
    nccl_debug: bool = False
    options: SmokeOptions | TrainOptions | None = None

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise UsageError(f"--workload must be one of {', '.join(WORKLOADS)} (got "
                             f"'{self.workload}'){suggest(self.workload, WORKLOADS)}",
                             flag="--workload")
        at_least_one(self.nodes, "--nodes")
        if self.workload == "build" and self.nodes != 1:
            raise UsageError(f"a build job runs on one node (got --nodes {self.nodes})",
                             flag="--nodes")
        if self.gpus_per_node is not None:
            at_least_one(self.gpus_per_node, "--gpus-per-node")
        if self.time is not None:
            match = _TIME.match(self.time)
            if not match or not any(int(part) for part in match.groups()):
                raise UsageError(f"--time must be HH:MM:SS (e.g. 01:30:00; got "
                                 f"'{self.time}')", flag="--time")
        if self.account is not None and not DIRECTIVE_SAFE.match(self.account):
            raise UsageError(f"--account '{self.account}' is not an account name",
                             flag="--account")
        if self.launcher is not None:
            launchers.named(self.launcher)


# ------------------------------------------------------------------------------------- the job
@dataclass(frozen=True)
class Job:
    """A rendered batch job: the script text and where its output and results go."""

    request: JobRequest
    target: Target
    site: Site
    scheduler: Scheduler
    launcher: Launcher | None
    resources: Resources
    text: str
    results: str | None  # the results folder, with the job id as ``{job_id}``

    @property
    def name(self) -> str:
        return self.resources.name

    def output_of(self, job_id: str) -> str:
        return self.scheduler.output_of(self.resources, job_id)

    def results_of(self, job_id: str) -> str | None:
        return None if self.results is None else self.results.replace("{job_id}", job_id)


def _check_site(request: JobRequest, target: Target, site: Site, site_arch: str | None) -> None:
    """What the request, the image and the site must agree on."""
    if site.scheduler not in SCHEDULERS:
        hint = " (for a Slurm cluster of CPU nodes: --site local-slurm)" if site.gpu == "none" \
            else ""
        raise ConfigError(f"site {site.name} has no batch scheduler (scheduler: "
                          f"{site.scheduler}); name a site that has one with --site{hint}",
                          path=site.path, line=site.lines.get("scheduler"), key="scheduler")
    if target.gpu != site.gpu:
        raise UsageError(f"target {target.name} is an image for {_KINDS[target.gpu]} but "
                         f"site {site.name} has {_KINDS[site.gpu]}")
    if site_arch and target.arch != site_arch:
        raise UsageError(f"target {target.name} is {target.arch} but site {site.name}'s "
                         f"nodes are {site_arch}")
    if request.partition is not None and site.partitions and \
            request.partition not in site.partitions:
        raise UsageError(f"unknown partition '{request.partition}' for site {site.name}"
                         f"{suggest(request.partition, site.partitions)}; known: "
                         f"{', '.join(site.partitions)}", flag="--partition")


def plan_job(target: Target, site: Site, *, settings: Settings, request: JobRequest,
             host_arch: str, site_arch: str | None = None, venv: Path | None = None) -> Job:
    """The whole batch job, rendered: pure (nothing is read from the environment or run).

    ``host_arch`` and ``venv`` (this tool's Python environment) decide how a build job finds
    ``invoke`` on the build node; ``site_arch`` is the architecture of the site's nodes.
    """
    _check_site(request, target, site, site_arch)
    scheduler = SCHEDULERS[site.scheduler]
    name = f"{request.workload}-{target.name}"
    directive(name, "job name")
    output = scheduler.output_dir(settings.results_dir / "jobs", name)
    time = request.time or DEFAULT_TIME.get(request.workload, "01:00:00")
    root = settings.root
    comments = [f"invoke job: {request.workload} of image {target.name} on site {site.name} "
                f"(hpc-containers {__version__})",
                f"submit: {scheduler.submit_command} FILE; output: {output}"]
    body = [f"cd {word(str(root))}", ""]
    if request.workload == "build":
        gpus = 1 if site.gpus_per_node else 0
        res = Resources(name=name, nodes=1, tasks_per_node=1, cpus_per_task=cores_for(site, 1),
                        gpus_per_node=gpus, time=time,
                        partition=request.partition or site.build_partition
                        or site.default_partition, account=request.account, output=output,
                        mem_per_gpu_gb=site.mem_per_gpu_gb)
        body += _build_body(target, root=root, host_arch=host_arch, venv=venv)
        script = Script(directives=scheduler.preamble(res), comments=comments, body=body)
        return Job(request=request, target=target, site=site, scheduler=scheduler,
                   launcher=None, resources=res, text=script.render(), results=None)

    launcher = launchers.for_site(site, request.launcher)
    gpus = request.gpus_per_node or site.gpus_per_node or 2  # CPU sites: 2 ranks, as smoke
    shape = launcher.shape(site, gpus)
    res = Resources(name=name, nodes=request.nodes, tasks_per_node=shape.tasks_per_node,
                    cpus_per_task=shape.cpus_per_task,
                    gpus_per_node=gpus if site.gpu != "none" else 0, time=time,
                    partition=request.partition or site.default_partition,
                    account=request.account, output=output, exclusive=shape.exclusive,
                    mem_per_gpu_gb=site.mem_per_gpu_gb)
    job_id = ref(scheduler.job_id_var)
    multinode = request.nodes > 1
    meets = multinode or launcher.needs_rendezvous
    placement = Placement(nodes=request.nodes, launcher=launcher,
                          rendezvous=scheduler.job_time_rendezvous() if meets else None,
                          cpus_per_task=shape.cpus_per_task, ranks_flag="--gpus-per-node")
    workload = _plan_workload(target, site, settings=settings, request=request, gpus=gpus,
                              run_id=f"job{job_id}", placement=placement)
    if request.nccl_debug:
        workload = workload.with_env({"NCCL_DEBUG": "INFO"})
    if multinode and site.multinode_modules:
        body += ["# Host modules whose paths the multi-node binds name (Lmod reads unset "
                 "variables: not under set -u)",
                 "set +u", "module load " + " ".join(word(m) for m in site.multinode_modules),
                 "set -u", ""]
    if meets:
        body += [*scheduler.rendezvous_lines(), ""]
    out_dir = str(workload.out_dir)
    body += [f"mkdir -p {word(out_dir)}", f"echo {word('results: ' + out_dir)}", "",
             command(workload.argv)]
    script = Script(directives=scheduler.preamble(res), comments=[
        *comments, f"{request.nodes} node{'s' if multinode else ''} x {gpus} "
        f"{'GPUs' if site.gpu != 'none' else 'CPU ranks'}, launcher {launcher.name}",
        *([workload.cores_note] if workload.cores_note else [])], body=body)
    results = out_dir.replace(job_id, "{job_id}")
    return Job(request=request, target=target, site=site, scheduler=scheduler,
               launcher=launcher, resources=res, text=script.render(), results=results)


def _plan_workload(target: Target, site: Site, *, settings: Settings, request: JobRequest,
                   gpus: int, run_id: str, placement: Placement | None) -> Workload:
    """The workload as ``invoke smoke``/``invoke train`` plan it, with every host variable left
    for the job's shell (:data:`SHELL_VARS`): site values stay as written in the profile."""
    runtime = Runtime(binary=site.runtime, flavour=site.runtime, version="site")
    options: SmokeOptions | TrainOptions
    if request.workload == "smoke":
        given = request.options if isinstance(request.options, SmokeOptions) else None
        options = replace(given, gpus=gpus) if given else SmokeOptions(gpus=gpus)
    else:
        given = request.options if isinstance(request.options, TrainOptions) else None
        options = replace(given, example=request.workload, gpus=gpus) if given \
            else TrainOptions(example=request.workload, gpus=gpus)
    return plan_run(target, site, settings=settings, runtime=runtime, options=options,
                    run_id=run_id, environ=SHELL_VARS, strict=False, placement=placement)


def _build_body(target: Target, *, root: Path, host_arch: str, venv: Path | None) -> list[str]:
    lines = [
        "# Binds set in the submitting shell (LUMI's singularity-AI-bindings module, for one)",
        "# name mount points that the image being built lacks: the build would fail on them.",
        "unset APPTAINER_BIND SINGULARITY_BIND",
        f'echo "building {target.name} on $(hostname) ($(uname -m))"',
    ]
    if target.arch != host_arch:
        own = root / f".venv-{target.arch}"
        lines += [
            f"# This checkout's .venv is for {host_arch}; the build node is {target.arch}, so it "
            "gets a Python environment of its own.",
            assign("venv", str(own)),
            'if [[ ! -x $venv/bin/invoke ]]; then',
            '    python3 -m venv "$venv"',
            f'    "$venv/bin/python" -m pip install -q -e {word(str(root))}',
            "fi",
            f'"$venv/bin/invoke" build --target {word(target.name)}',
        ]
    elif venv is not None:
        lines.append(command([str(venv / "bin" / "invoke"), "build", "--target", target.name]))
    else:
        lines.append(command(["invoke", "build", "--target", target.name]))
    return lines

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

The partition's documented limits (:class:`containers.inputs.sites.Partition`) decide the wall
time (:func:`fit_time`: the workload's estimate capped by the limit; a ``--time`` beyond it is
refused) and bound nodes and GPUs (:func:`check_size`); the account comes from the flag, the
settings or the scheduler's own variables (:func:`resolve_account`); a build job that the site
cannot run is refused before anything is written
(:func:`containers.image.plan.fakeroot_refusal`). A smoke or training job keeps its launcher's exit status and output and ends with ``invoke verdict`` on its results
(:mod:`containers.app.judging`), so a job writes the verdict an interactive run writes.

Only site profile values, explicit flags and settings reach a script (of the caller's
environment, only ``SLURM_ACCOUNT`` where nothing else names an account); every value is quoted;
the tests run ``bash -n`` on the script of every site and workload and ``sbatch --test-only``
against Slurm partitions shaped like each site's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from containers import __version__, walltime
from containers.batch.schedulers import SCHEDULERS, Resources, Scheduler, directive
from containers.batch.judgeenv import COMPLETE, JudgeEnv
from containers.batch.runjob import folder_lines, run_lines, run_record
from containers.batch.script import SHELL_VARS, command, ref, render, word
from containers.errors import ConfigError, UsageError
from containers.host.facts import run_stamp
from containers.host.runtime import Runtime
from containers.image.plan import fakeroot_refusal
from containers.inputs import flags
from containers.inputs.recipes import Target
from containers.inputs.schema import suggest
from containers.inputs.settings import Settings
from containers.inputs.sites import Partition, Qos, Site
from containers.prove import registry
from containers.prove.kind import Options, WorkloadKind, plan as plan_run
from containers.prove.smoke import SmokeOptions
from containers.prove.transport import CHOICES as TRANSPORTS, sockets
from containers.prove.train import TrainOptions
from containers.run import launchers
from containers.run.launchers import Launcher, Shape, cores_for
from containers.run.command import CommandRun, check_command, plan_command
from containers.run.workload import IMAGE_RECORD, JOB_RECORD, Placement, Workload
from containers.records import JobRecord

#: The variables the scheduler's submit command reads an account from, when no flag or setting
#: names one (sbatch reads SBATCH_ACCOUNT itself; SLURM_ACCOUNT is the current allocation's).
#: PBS Pro's qsub reads none: ``-A`` in the script is the only way.
ACCOUNT_VARS = {"slurm": ("SBATCH_ACCOUNT", "SLURM_ACCOUNT"), "pbs": ()}
_KINDS = {"none": "CPUs (no GPU)", "cuda": "NVIDIA (CUDA) GPUs", "rocm": "AMD (ROCm) GPUs"}


@dataclass(frozen=True)
class JobRequest:
    """What ``invoke job`` was asked for; None means the site's default. Checks its own values
    (the site's limits are checked where the site is known: :func:`plan_job`)."""

    workload: str
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
    directives: tuple[str, ...] = ()
    #: ``--workload run``: the user's command, as its words (after ``--``), and the folder it
    #: runs in (where it was submitted from: its relative paths mean what they meant there).
    command: tuple[str, ...] = ()
    workdir: str | None = None
    #: ``--transport socket``: NCCL's TCP sockets instead of the site's transport, chosen
    #: explicitly (recorded in job.json; verdicts name it as degraded). None: the site's.
    transport: str | None = None

    @property
    def kind(self) -> WorkloadKind:
        """What the workload is (:mod:`containers.prove.registry`): the request asks it, never
        the name."""
        return registry.kind_of(self.workload)

    def __post_init__(self) -> None:
        flags.POSITIVE_INT("--nodes", self.nodes)
        if self.kind.takes_command:
            object.__setattr__(self, "command", check_command(self.command))
        elif self.command:
            raise UsageError(f"a command after -- goes with --workload run, not --workload "
                             f"{self.workload}", flag="--")
        if not self.kind.multinode and self.nodes != 1:
            raise UsageError(f"a {self.workload} job runs on one node (got --nodes {self.nodes})",
                             flag="--nodes")
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
        object.__setattr__(self, "directives", tuple(
            flags.DIRECTIVE("--directive", text) for text in self.directives))


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
    #: When it was rendered (``YYYYmmdd-HHMMSS``): part of its output's, results' and script's
    #: names, so a job id that repeats (another cluster, a restarted one) names new files.
    stamp: str = ""

    @property
    def name(self) -> str:
        return self.resources.name

    @property
    def output_folder(self) -> Path:
        """The folder the scheduler writes the job's output into: it must exist before the job
        starts (neither Slurm nor PBS creates it), so ``invoke job`` makes it."""
        return self.scheduler.output_folder(self.resources)

    def output_of(self, job_id: str) -> str:
        return self.scheduler.output_of(self.resources, job_id)

    def results_of(self, job_id: str) -> str | None:
        return None if self.results is None else self.results.replace("{job_id}", job_id)


def _check_site(request: JobRequest, target: Target, site: Site, site_arch: str | None) -> None:
    """What the request, the image and the site must agree on."""
    if site.scheduler not in SCHEDULERS:
        hint = (" (for a Slurm cluster of CPU nodes: --site local-slurm)"
                if site.gpus.kind == "none" else "")
        raise ConfigError(f"site {site.name} has no batch scheduler (scheduler: "
                          f"{site.scheduler}); name a site that has one with --site{hint}",
                          path=site.path, line=site.lines.get("scheduler"), key="scheduler")
    if target.gpu != site.gpus.kind:
        raise UsageError(f"target {target.name} is an image for {_KINDS[target.gpu]} but "
                         f"site {site.name} has {_KINDS[site.gpus.kind]}")
    if site_arch and target.arch != site_arch:
        where = (f"; build it on an {target.arch} machine (invoke build --target "
                 f"{target.name} there)" if request.kind.builds_image else "")
        raise UsageError(f"target {target.name} is {target.arch} but site {site.name}'s "
                         f"nodes are {site_arch}{where}")
    if request.partition is not None and site.partitions and \
            request.partition not in site.partitions:
        raise UsageError(f"unknown partition '{request.partition}' for site {site.name}"
                         f"{suggest(request.partition, site.partitions)}; known: "
                         f"{', '.join(site.partitions)}", flag="--partition")


def fit_time(request: JobRequest, site: Site, partition: Partition,
             qos: Qos | None = None) -> int:
    """The job's wall time: ``--time`` if it is within the partition's (and the QoS's) limit
    (else refused, naming the limit), otherwise the workload's estimate capped by them."""
    limits = [(f"partition {partition.name}", partition.max_time, "")]
    if qos is not None:
        limits.append((f"QoS {qos.name}", qos.max_time, f"; {qos.source}"))
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
    """The refusal (and its flag) of the first of a partition's or a QoS's limits the request
    is over; None when it is within them all."""
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
    """Nodes and GPUs within the partition's documented limits, then the ``--qos``'s (a QoS
    the profile does not describe is the scheduler's to judge); a partition's refusal names,
    where one of the site's other partitions allows the request, that partition."""
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
    """The account the job charges and where it came from: ``--account``, else
    ``containers.accounts.<site>``, else ``containers.account``, else the scheduler's own
    variables (:data:`ACCOUNT_VARS`). ``SBATCH_ACCOUNT`` is left to sbatch, which reads it at
    submission (None is returned with it). A site that requires an account and gets none is
    refused in one line that says the ways to set it."""
    if request.account:
        return request.account, "--account"
    configured = settings.account_for(site.name)
    if configured:
        return configured, (f"containers.accounts.{site.name}"
                            if settings.accounts.get(site.name) else "containers.account")
    variables = ACCOUNT_VARS.get(site.scheduler, ())
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


@dataclass(frozen=True)
class Frame:
    """What every job of a request has, whatever it runs: its resources but their size (name,
    output, partition, time, account, the site's GPU request), and the header comments that
    say where each came from."""

    resources: Resources
    partition: Partition
    qos: Qos | None
    comments: list[str]
    #: GB per node a job on this partition must ask for with all of a node's ``node_gpus``
    #: (the profile's ``job.ask_memory_gb``; 0: none asked).
    node_memory_gb: int = 0
    node_gpus: int = 0

    def sized(self, *, nodes: int, shape: Shape, gpus: int) -> Resources:
        """The resources of a job of this size; on a partition of shared nodes, the memory of
        the node's GPUs it takes (all of them: the whole figure)."""
        memory = (self.node_memory_gb * min(gpus, self.node_gpus) // self.node_gpus
                  if self.node_gpus and gpus else self.node_memory_gb)
        return replace(self.resources, nodes=nodes, tasks_per_node=shape.tasks_per_node,
                       cpus_per_task=shape.cpus_per_task, gpus_per_node=gpus,
                       exclusive=shape.exclusive, mem_per_node_gb=memory)


def plan_job(target: Target, site: Site, *, settings: Settings, request: JobRequest,
             host_arch: str, site_arch: str | None = None, venv: Path | None = None,
             environ: Mapping[str, str] | None = None, judge: JudgeEnv | None = None,
             tool: Sequence[JudgeEnv] = (), stamp: str | None = None) -> Job:
    """The whole batch job, rendered: pure (nothing is run; only ``environ``, the submitting
    shell's variables, is read, for the account rules).

    ``stamp`` (default: now, :func:`run_stamp`) goes into the names of the job's output and
    results folder beside the scheduler and the job id: a job id is unique only within one
    cluster's life, so the id alone would name another cluster's (or a restarted one's) files.

    ``host_arch`` and ``venv`` (this tool's Python environment) decide how a build job finds
    ``invoke`` on the build node; ``site_arch`` is the architecture of the site's nodes.
    ``judge`` (the verdict's packages for the image's Python, :mod:`containers.batch.judgeenv`)
    makes a smoke or training job judge with the image's own Python; it is needed where the
    target's architecture is not ``host_arch`` (this checkout's environment cannot run there);
    ``tool`` (the tool's packages, one folder per Python, :func:`judgeenv.build_plans`) is how
    a build job on such a node runs ``invoke build`` with the node's own ``python3``.
    """
    _check_site(request, target, site, site_arch)
    site = chosen_site(site, request)
    if request.kind.builds_image and (refusal := fakeroot_refusal(target, site)) is not None:
        raise refusal
    stamp = stamp or run_stamp()
    frame = job_frame(target, site, settings=settings, request=request, environ=environ or {},
                      stamp=stamp)
    if request.kind.builds_image:
        return _build_job(target, site, settings=settings, request=request, frame=frame,
                          host_arch=host_arch, venv=venv, tool=tool, stamp=stamp)
    gpus = _ranks_per_node(request, site)
    asked = gpus if site.gpus.kind != "none" else 0  # the scheduler's GPUs: none on CPU sites
    check_size(site, frame.partition, frame.qos, nodes=request.nodes, gpus_per_node=asked)
    check_transport(site, request.nodes)
    run = job_run(target, site, settings=settings, request=request, stamp=stamp)
    res = frame.sized(nodes=request.nodes, shape=run.shape, gpus=asked)
    scheduler = SCHEDULERS[site.scheduler]
    modules = _loaded(site, multinode=request.nodes > 1)
    body = [f"cd {word(str(settings.root))}", "",
            *_module_lines(modules, multinode=request.nodes > 1 and bool(site.transport.modules)),
            *_module_variable_lines(site, modules, multinode=request.nodes > 1),
            *([*scheduler.rendezvous.shell(), ""] if run.meets else [])]
    record = {"target": target.name, "site": site.name, "workload": request.workload,
              "nodes": request.nodes, "gpus_per_node": gpus, "launcher": run.launcher.name,
              "partition": frame.partition.name or None,
              "options": job_options(run.options) if run.options else {},
              **({"transport": request.transport} if request.transport else {})}
    if run.command is not None:  # --workload run: the user's command, judged in the image
        body += run_lines(run.command, site=site, settings=settings, nodes=request.nodes,
                          record=run_record(record, request.command, request.workdir))
    else:
        body += _workload_lines(target, run.workload, settings=settings, record=record,
                                judge=judge, host_arch=host_arch, venv=venv)
    size = (f"{request.nodes} node{'s' if request.nodes > 1 else ''} x {gpus} "
            f"{'GPUs' if site.gpus.kind != 'none' else 'CPU ranks'}, launcher {run.launcher.name}")
    return _render(request, target, site, frame, res, body, stamp=stamp, launcher=run.launcher,
                   comments=[size, *([run.workload.cores_note] if run.workload.cores_note
                                     else []),
                             *([f"transport: {site.transport.degraded}"]
                               if site.transport.degraded else [])],
                   results=str(run.workload.out_dir).replace(ref(scheduler.rendezvous.job_id_var),
                                                             "{job_id}"))


def check_transport(site: Site, nodes: int) -> None:
    """A job across nodes whose transport needs the host's network plugin and libfabric bound
    into the container, on a site whose profile binds none or says no plugin is published for
    containers (``transport.unavailable``): it would stop at start-up (NCCL_NET names a network
    that cannot load), so it is refused before anything is written, naming the way out."""
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
    """``site`` with the transport the request chose (``--transport socket``: NCCL's TCP
    sockets, :func:`containers.prove.transport.sockets`), refused in one line where it does not
    apply (one node, or a site that declares no transport across nodes); else ``site``."""
    if request.transport is None:
        return site
    if not site.transport.applies(request.nodes):
        where = (f"from {site.transport.from_nodes} nodes" if site.transport.expect
                 else "and site " + site.name + " declares none (no transport: in its profile)")
        raise UsageError(f"--transport {request.transport} replaces the site's network "
                         f"transport, which applies to jobs across nodes {where}; this job has "
                         f"{request.nodes} node(s): leave --transport out", flag="--transport")
    return site.model_copy(update={"transport": sockets(site.transport)})


def job_frame(target: Target, site: Site, *, settings: Settings, request: JobRequest,
              environ: Mapping[str, str], stamp: str) -> Frame:
    """The job's name (shortened with the site's words where its scheduler limits names),
    output (named with ``stamp`` too: job ids repeat across clusters), partition, time and
    account, and the header comments that say so."""
    scheduler = SCHEDULERS[site.scheduler]
    full_name = f"{request.workload}-{target.name}"
    directive(full_name, "job name")
    name = scheduler.job_name(full_name, site.job.short_names)
    output = scheduler.output_dir(settings.results_dir / "jobs", f"{name}-{stamp}")
    partition = site.partition(request.partition or (site.build_partition
                                                     if request.kind.builds_image else None)
                               or site.default_partition)
    qos = site.qos.get(request.qos or "")
    time = fit_time(request, site, partition, qos)
    account, account_from = resolve_account(request, site, settings, environ)
    limit = f" (partition limit {walltime.format(partition.max_time)})" \
        if partition.max_time else ""
    source = (f", account from {account_from}" if account_from else "") + \
        (" (sbatch reads it at submission)" if account_from == "SBATCH_ACCOUNT" else "")
    comments = [f"invoke job: {request.workload} of image {target.name} on site {site.name} "
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
                          gres_type=partition.gres_type or site.gpus.gres_type, qos=request.qos,
                          reservation=request.reservation, directives=request.directives)
    memory = site.job.ask_memory_gb.get(partition.name, 0)
    if memory:
        comments.append(f"partition {partition.name}: shared nodes, memory asked per node "
                        f"(job.ask_memory_gb: {memory} GB with all a node's GPUs, else their "
                        "share)")
    return Frame(resources=resources, partition=partition, qos=qos, comments=comments,
                 node_memory_gb=memory, node_gpus=partition.gpus_per_node
                 if partition.gpus_per_node is not None else site.gpus.per_node)


def _build_job(target: Target, site: Site, *, settings: Settings, request: JobRequest,
               frame: Frame, host_arch: str, venv: Path | None,
               tool: Sequence[JudgeEnv], stamp: str) -> Job:
    """A build job: one task on one node; no GPU on a partition without them (LUMI-C's small),
    else one (a build needs none, the partition may require one)."""
    gpus = 1 if site.gpus.per_node and frame.partition.gpus_per_node != 0 else 0
    check_size(site, frame.partition, frame.qos, nodes=1, gpus_per_node=gpus)
    res = frame.sized(nodes=1, gpus=gpus,
                      shape=Shape(tasks_per_node=1, cpus_per_task=cores_for(site, 1)))
    body = [f"cd {word(str(settings.root))}", "", *_module_lines(site.modules),
            *_build_body(target, site, root=settings.root, host_arch=host_arch, venv=venv,
                         tool=tool)]
    return _render(request, target, site, frame, res, body, stamp=stamp)


def _workload_lines(target: Target, workload: Workload, *, settings: Settings, record: dict,
                    judge: JudgeEnv | None, host_arch: str, venv: Path | None) -> list[str]:
    """A smoke or training job's body after its rendezvous: the job record and the image's,
    the launcher's step (its status kept), then the verdict."""
    out_dir = str(workload.out_dir)
    image_record = settings.provenance_path(target.name)
    verdict = _verdict_in_image(target, workload, settings, judge, out_dir, host_arch=host_arch) \
        if judge is not None or target.arch != host_arch else \
        _invoke(["verdict", "--results", out_dir, "--exit-status", ref("status")],
                venv=venv, exec_=True)
    return [*folder_lines(workload.out_dir), "",
            "# What the verdict reads besides the ranks' files: the job, the image it ran",
            f"cat > {word(out_dir + '/' + JOB_RECORD)} <<'JOB'", JobRecord.of(record).as_json(),
            "JOB",
            f"if [[ -f {word(str(image_record))} ]]; then",
            f"    cp {word(str(image_record))} {word(out_dir + '/' + IMAGE_RECORD)}", "fi", "",
            "# The launcher's exit status is kept (not fatal here): the verdict judges it",
            "status=0",
            command(workload.argv) + f" 2>&1 | tee {word(out_dir + '/run.log')} || status=$?",
            "",
            "# The job's exit status is the verdict's (0 PASS, 2 sanity FAIL, 3 performance);",
            "# it reads and writes the folders this script was written for.",
            *(f"export {name}={word(value)}" for name, value in _folders(settings).items()),
            *verdict]


def _folders(settings: Settings) -> dict[str, str]:
    """The settings' folders as the variables ``invoke verdict`` reads them from."""
    return {"INVOKE_CONTAINERS_IMAGES_DIR": str(settings.images_dir),
            "INVOKE_CONTAINERS_RESULTS_DIR": str(settings.results_dir),
            "INVOKE_CONTAINERS_PERFLOG_DIR": str(settings.perflog_dir)}


def _render(request: JobRequest, target: Target, site: Site, frame: Frame, res: Resources,
            body: list[str], *, stamp: str, launcher: Launcher | None = None,
            comments: Sequence[str] = (), results: str | None = None) -> Job:
    scheduler = SCHEDULERS[site.scheduler]
    text = render(scheduler.preamble(res), [*frame.comments, *comments], body)
    return Job(request=request, target=target, site=site, scheduler=scheduler,
               launcher=launcher, resources=res, text=text, results=results, stamp=stamp)


def _ranks_per_node(request: JobRequest, site: Site) -> int:
    """Ranks per node of a smoke or training job: ``--gpus-per-node``, else the site's GPUs per
    node, else 2 (CPU sites: 2 ranks, as smoke)."""
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
    """The workload of a smoke or training job exactly as its script runs it: the plan the job
    renders and the plan ``invoke verdict`` judges the job's results by (pure). Its results
    folder is ``<target>-<stamp>-<scheduler>-job<id>`` (:func:`job_run_id`)."""
    scheduler = SCHEDULERS[site.scheduler]
    site = chosen_site(site, request)
    launcher = launchers.for_site(site, request.launcher)
    gpus = _ranks_per_node(request, site)
    shape = launcher.shape(site, gpus)
    meets = request.nodes > 1 or launcher.needs_rendezvous
    placement = Placement(nodes=request.nodes, launcher=launcher,
                          rendezvous=scheduler.rendezvous.at_job_time(ref) if meets else None,
                          cpus_per_task=shape.cpus_per_task, ranks_flag="--gpus-per-node")
    common = dict(settings=settings, strict=False, placement=placement, environ=SHELL_VARS,
                  runtime=Runtime(binary=site.runtime, flavour=site.runtime, version="site"),
                  run_id=job_run_id(scheduler, stamp))
    planned, options = None, None
    if request.kind.takes_command:
        planned = plan_command(target, site, command=request.command, ranks=gpus, timeout=0,
                               **common)
        workload = planned.workload
    else:
        # every host variable is left for the job's shell (SHELL_VARS)
        options = request.kind.resized(request.workload, request.options, gpus=gpus)
        assert options is not None  # a kind without options (run, build) plans no run here
        workload = plan_run(target, site, options=options, **common)
    if request.nccl_debug:
        workload = workload.with_env({"NCCL_DEBUG": "INFO"})
    return JobRun(kind=options.kind if options else None, launcher=launcher, shape=shape,
                  workload=workload, options=options, meets=meets,
                  command=planned and replace(planned, workload=workload))


def job_run_id(scheduler: Scheduler, stamp: str) -> str:
    """What names a job's results folder after its target: when it was rendered, the scheduler
    and the job id (expanded by the job's shell). A job id is unique only within one cluster's
    life (a restarted cluster starts again at 1): with the stamp, two clusters' job 1 never
    share a folder, and a script submitted again after a restart finds its folder taken
    (:func:`containers.batch.runjob.folder_lines` refuses it)."""
    return "-".join([*([stamp] if stamp else []), scheduler.name,
                     f"job{ref(scheduler.rendezvous.job_id_var)}"])


def _loaded(site: Site, *, multinode: bool) -> list[str]:
    """The modules a job loads: the site's (every job) and, across nodes, those its multi-node
    binds name."""
    across = site.transport.modules if multinode else ()
    return [*site.modules, *(m for m in across if m not in site.modules)]


def _module_lines(names: Sequence[str], *, multinode: bool = False) -> list[str]:
    """``module load`` of ``names`` (:func:`_loaded`); Lmod reads unset variables, so not under
    ``set -u``."""
    if not names:
        return []
    why = ("the site's modules and those its multi-node binds name" if multinode
           else "the modules the site's documentation requires")
    return [f"# Host modules: {why} (Lmod reads unset variables: not under set -u)",
            "set +u", "module load " + " ".join(word(m) for m in names), "set -u", ""]


def _module_variable_lines(site: Site, modules: Sequence[str], *,
                           multinode: bool) -> list[str]:
    """After ``module load``: each host variable the job's binds and environment use must be
    set (not empty), else the job stops in one line naming the modules, the variable and the
    profile's keys that use it, instead of "unbound variable" at the launch line."""
    used = site.job_variables(multinode=multinode)
    if not modules or not used:
        return []
    loaded = "module load " + " ".join(modules)
    lines = ["# What the binds and environment below take from the host (its modules): each "
             "must be set"]
    for name, keys in used.items():
        lines += [f"if [[ -z ${{{name}:-}} ]]; then",
                  "    echo " + word(f"job script: {loaded} did not set {name}, which "
                                    f"{' and '.join(keys)} of sites/{site.name}.yaml "
                                    f"use{'s' if len(keys) == 1 else ''}: load the module "
                                    "that sets it, or fix the profile") + " >&2",
                  "    exit 2", "fi"]
    return [*lines, ""]


def job_options(options: SmokeOptions | TrainOptions) -> dict:
    """The options a job's verdict re-plans its run with (``job.json``): the plain values only
    (ranks, nodes and the example are the job's own keys)."""
    return {key: str(value.resolve()) if isinstance(value, Path) else value
            for key, value in asdict(options).items()
            if key not in ("gpus", "example") and isinstance(value, (str, int, float, bool, Path))}


#: The keys every ``job.json`` has (``launcher``, ``partition`` and ``options`` may be missing).
RECORD_KEYS = JobRecord.REQUIRED


class RecordOptionsError(ValueError):
    """The options of a ``job.json`` are not an object, or not options its workload takes."""


def request_from_record(given: Mapping) -> JobRequest:
    """The request a job's ``job.json`` (as :func:`plan_job` writes it) describes, options
    included, so its verdict re-plans the run the job ran (:func:`job_run`). A missing key of
    :data:`RECORD_KEYS` raises KeyError; bad options raise :class:`RecordOptionsError`."""
    record = JobRecord.view(given, source=JOB_RECORD)
    if record.missing():
        raise KeyError(record.missing()[0])
    return JobRequest(workload=record.workload, nodes=int(record.nodes),
                      gpus_per_node=int(record.gpus_per_node),
                      launcher=record.launcher, partition=record.partition,
                      options=_record_options(record), transport=record.transport)


def _record_options(record: JobRecord) -> Options | None:
    given = record.options
    if given is None:
        return None
    if not isinstance(given, dict):
        raise RecordOptionsError("options are not an object")
    try:
        return registry.kind_of(record.workload).make_options(
            record.workload, gpus=int(record.gpus_per_node), given=given)
    except (TypeError, UsageError) as exc:
        raise RecordOptionsError(f"options are not the job's: {exc}") from exc


def _build_body(target: Target, site: Site, *, root: Path, host_arch: str,
                venv: Path | None, tool: Sequence[JudgeEnv]) -> list[str]:
    unset = (["# Binds the site's modules set in the submitting shell name mount points that",
              "# the image being built lacks: the build would fail on them (job.build_unset).",
              "unset " + " ".join(site.job.build_unset)] if site.job.build_unset else [])
    return [
        *unset,
        f'echo "building {target.name} on $(hostname) ($(uname -m))"',
        *(_invoke(["build", "--target", target.name], venv=venv) if target.arch == host_arch
          else _build_by_node_python(target, root=root, host_arch=host_arch, tool=tool)),
    ]


#: The node's ``python3`` as ``X.Y`` (what the folder of :func:`_build_by_node_python` is for).
NODE_PYTHON = "python3 -c 'import sys; print(f\"{sys.version_info[0]}.{sys.version_info[1]}\")'"


def _build_by_node_python(target: Target, *, root: Path, host_arch: str,
                          tool: Sequence[JudgeEnv]) -> list[str]:
    """``invoke build`` by the node's own ``python3`` (the site's modules loaded) with this
    checkout and the tool's packages prepared on the login node for that Python's version,
    picked at run time (which Python a node has is not a site fact): no venv, pip or package
    index on the node, and jobs that start together only read. One line says why when the
    node's Python is none of those prepared."""
    versions = ", ".join(env.python for env in tool) or "none"
    found = "python3 on this node (after the site's modules) is "
    fix = (f"; invoke job prepared {target.arch} packages for Python {versions} (load a "
           "module of one of them in this script, before the build)")
    return [
        f"# This checkout's .venv is for {host_arch}; the node is {target.arch}: its own python3 "
        "builds, with the packages",
        "# invoke job prepared on the login node for its version (no venv, pip or package "
        "index on this node).",
        f"node_python=$({NODE_PYTHON} 2>/dev/null) || node_python='not there or does not run'",
        'case $node_python in',
        *(f"    {env.python}) packages={word(str(env.folder))} ;;" for env in tool),
        "    *) echo " + word("build: FAIL: " + found) + '"$node_python"' + word(fix) + " >&2",
        "       exit 2 ;;",
        "esac",
        'if [[ ! -f $packages/' + COMPLETE + ' ]]; then',
        "    echo " + word("build: FAIL: ") + '"$packages"' + word(
            " is not prepared (invoke job --out or --submit prepares it on the login node)")
        + " >&2",
        "    exit 2",
        "fi",
        f'export PATH="$packages/bin:$PATH" PYTHONPATH="$packages":{word(str(root))}',
        "exec " + command(["python3", "-m", "invoke", "--search-root", str(root), "build",
                           "--target", target.name])]


def _verdict_in_image(target: Target, workload: Workload, settings: Settings,
                      judge: JudgeEnv | None, out_dir: str, *, host_arch: str) -> list[str]:
    """``invoke verdict`` by the image's own Python: this checkout bound read-only at its own
    path, the verdict's packages prepared for the image's Python on the login node (no venv,
    pip or package index on the node; jobs that start together only read them), the folders
    the verdict writes bound read-write. Judging runs no container runtime and reads only the
    results, the image's build record and this checkout."""
    if judge is None:  # which Python the image has was not known when this was rendered
        return ["# The verdict needs packages prepared for the image's Python, which was "
                "unknown when this was rendered.",
                "echo " + word(f"verdict: FAIL: the Python of {target.name}'s image was unknown "
                               "when this script was rendered (no stack.python in its build "
                               "record, no python= in its env spec)") + " >&2",
                "exit 2"]
    root, folder = str(settings.root), str(judge.folder)
    writable = [str(settings.results_dir), str(settings.perflog_dir)]
    judge_argv = workload.launch.runtime.exec_argv(
        image=workload.image,
        command=["python3", "-m", "invoke", "--search-root", root, "verdict", "--results",
                 out_dir, "--exit-status", ref("status")],
        binds=[f"{root}:{root}:ro", f"{folder}:{folder}:ro",
               f"{settings.images_dir}:{settings.images_dir}:ro", *writable],
        env={"PYTHONPATH": f"{folder}:{root}", **_folders(settings)})
    return [
        f"# The image's own Python judges ({judge.arch}, Python {judge.python}; this checkout's "
        f"environment is {host_arch}),",
        "# with this checkout read-only and the packages invoke verdict imports, made by "
        "invoke job",
        "# on the login node: no venv, pip or package index on this node.",
        f"if [[ ! -f {word(folder + '/' + COMPLETE)} ]]; then",
        "    echo " + word(f"verdict: FAIL: {folder} is not prepared (invoke job --out or "
                              "--submit prepares it on the login node)") + " >&2",
        "    exit 2",
        "fi",
        command(["mkdir", "-p", *writable]),
        "exec " + command(judge_argv)]


def _invoke(args: list[str], *, venv: Path | None, exec_: bool = False) -> list[str]:
    """The line that runs ``invoke ARGS`` with this checkout's venv, on a node of this
    machine's architecture (other nodes: :func:`_verdict_in_image`, :func:`_build_by_node_python`)."""
    binary = str(venv / "bin" / "invoke") if venv is not None else "invoke"
    return [("exec " if exec_ else "") + command([binary, *args])]

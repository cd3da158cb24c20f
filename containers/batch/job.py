"""Batch jobs (``invoke job``): a complete Slurm or PBS script for a site, a workload and a size.

Three small parts, as ReFrame splits them, put together by one builder (:func:`plan_job`):

* a **scheduler** returns the preamble (``#SBATCH`` / ``#PBS`` lines), the shell lines that find
  the rendezvous (the first node's address and a port from the job id, computed on the host,
  since there are no Slurm tools inside containers), and how to submit;
* a **launcher** returns the argv that starts the ranks, per the site's launch pattern:
  ``torchrun`` (srun one task per node, torchrun with a c10d rendezvous on each), ``srun-per-gpu``
  (one task per GPU with the site's CPU masks; rank and visible device from SLURM_PROCID /
  SLURM_LOCALID inside the container), ``mpiexec-torchrun`` (PBS: mpiexec one process per node
  running torchrun);
* the **workload** is planned by the same code as ``invoke smoke`` and ``invoke train``
  (:func:`containers.prove.smoke.plan_smoke`, :func:`containers.prove.train.plan_train`), with the job id,
  rendezvous and site values kept as shell variable references (:mod:`containers.batch.script`), so
  the script expands them on the compute node; or, for ``build``, ``invoke build`` on a node of
  the image's architecture.

Only site profile values and explicit flags reach a script (never the caller's environment); every
value is quoted; the tests run ``bash -n`` on the script of every site and workload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from containers import __version__
from containers.batch.script import SHELL_VARS, Script, assign, command, has_refs, ref, word
from containers.errors import ConfigError
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.schema import suggest
from containers.inputs.sites import VISIBLE_DEVICES, Site
from containers.prove.smoke import SmokeOptions, plan_smoke
from containers.prove.train import EXAMPLES, TrainOptions, plan_train
from containers.run.allocation import PORT_BASE, PORT_SPAN, srun_argv
from containers.run.workload import Placement, Workload
from containers.settings import Settings

WORKLOADS = ("smoke", *EXAMPLES, "build")
DEFAULT_TIME = {"smoke": "00:30:00", "build": "02:00:00"}  # training workloads: 01:00:00
_TIME = re.compile(r"(\d{1,3}):([0-5]\d):([0-5]\d)\Z")
#: What a directive value may contain: schedulers read directives with their own parsers, which do
#: not all understand shell quoting, so such values are refused rather than quoted.
_DIRECTIVE_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
_KINDS = {"none": "CPUs (no GPU)", "cuda": "NVIDIA (CUDA) GPUs", "rocm": "AMD (ROCm) GPUs"}


@dataclass(frozen=True)
class JobRequest:
    """What ``invoke job`` was asked for; None means the site's default."""

    workload: str
    nodes: int = 1
    gpus_per_node: int | None = None
    time: str | None = None
    account: str | None = None
    partition: str | None = None
    launcher: str | None = None
    nccl_debug: bool = False
    options: SmokeOptions | TrainOptions | None = None


@dataclass(frozen=True)
class Resources:
    """What the job asks the scheduler for."""

    name: str
    nodes: int
    tasks_per_node: int
    cpus_per_task: int | None
    gpus_per_node: int
    time: str
    partition: str | None
    account: str | None
    output: str
    exclusive: bool = False
    mem_per_gpu_gb: int = 0


# ----------------------------------------------------------------------------------- schedulers
class Scheduler:
    name = ""
    submit_command = ""
    job_id_var = ""

    def preamble(self, res: Resources) -> list[str]:
        raise NotImplementedError

    def rendezvous(self) -> list[str]:
        raise NotImplementedError

    def output_dir(self, folder: Path, name: str) -> str:
        raise NotImplementedError

    def output_of(self, res: Resources, job_id: str) -> str:
        raise NotImplementedError

    def submit_argv(self, script: Path) -> list[str]:
        return [self.submit_command, str(script)]

    def parse_job_id(self, stdout: str) -> str:
        text = stdout.strip().splitlines()[-1].strip() if stdout.strip() else ""
        if not text:
            raise ConfigError(f"{self.submit_command} printed no job id")
        return text


def _directive(value: object, what: str) -> str:
    text = str(value)
    if not _DIRECTIVE_SAFE.match(text):
        raise ConfigError(f"{what} '{text}' has characters a batch directive cannot carry "
                          "(letters, digits and _ @ % + = : , . / - only)")
    return word(text)  # shlex.quote, which leaves such a value as it is


class Slurm(Scheduler):
    name = "slurm"
    submit_command = "sbatch"
    job_id_var = "SLURM_JOB_ID"

    def preamble(self, res: Resources) -> list[str]:
        options = [("job-name", res.name), ("nodes", res.nodes),
                   ("ntasks-per-node", res.tasks_per_node), ("cpus-per-task", res.cpus_per_task),
                   ("gpus-per-node", res.gpus_per_node or None),
                   ("mem-per-gpu", f"{res.mem_per_gpu_gb}G" if res.mem_per_gpu_gb
                    and res.gpus_per_node else None), ("time", res.time),
                   ("partition", res.partition), ("account", res.account),
                   ("output", res.output)]
        lines = [f"#SBATCH --{key}={_directive(value, '--' + key)}" for key, value in options
                 if value is not None]
        if res.exclusive:
            lines.append("#SBATCH --exclusive")
        return lines

    def rendezvous(self) -> list[str]:
        return [
            "# Rendezvous at the first node, found here on the host (there are no Slurm tools",
            "# inside the containers); the port follows from the job id, so that jobs sharing",
            "# a node do not collide. (sed -n 1p rather than head: no SIGPIPE under pipefail.)",
            'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
            'MASTER_ADDR=$(scontrol show node -o "$head_node" '
            "| sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')",
            "MASTER_ADDR=${MASTER_ADDR:-$head_node}",
            f"MASTER_PORT=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))",
            "export MASTER_ADDR MASTER_PORT",
            'echo "rendezvous: $MASTER_ADDR:$MASTER_PORT (first node $head_node)"',
        ]

    def output_dir(self, folder: Path, name: str) -> str:
        return f"{folder}/{name}-%j.out"

    def output_of(self, res: Resources, job_id: str) -> str:
        return res.output.replace("%j", job_id)

    def submit_argv(self, script: Path) -> list[str]:
        return ["sbatch", "--parsable", str(script)]

    def parse_job_id(self, stdout: str) -> str:
        return super().parse_job_id(stdout).split(";")[0]  # --parsable: ID[;CLUSTER]


class Pbs(Scheduler):
    """PBS Pro (Derecho): ``select`` chunks, one per node; output into a folder (PBS names the
    file ``<job name>.o<job number>``); PBS starts jobs in the home folder, hence the ``cd``."""

    name = "pbs"
    submit_command = "qsub"
    job_id_var = "PBS_JOBID"
    NAME_LENGTH = 15  # older PBS servers refuse longer job names

    def preamble(self, res: Resources) -> list[str]:
        chunk = f"select={res.nodes}"
        cpus = res.tasks_per_node * res.cpus_per_task if res.cpus_per_task else None
        if cpus:
            chunk += f":ncpus={cpus}"
        if res.gpus_per_node:
            chunk += f":ngpus={res.gpus_per_node}"
            if res.mem_per_gpu_gb:
                chunk += f":mem={res.mem_per_gpu_gb * res.gpus_per_node}GB"
        lines = [f"#PBS -N {_directive(res.name[:self.NAME_LENGTH], 'job name')}"]
        if res.account:
            lines.append(f"#PBS -A {_directive(res.account, '--account')}")
        if res.partition:
            lines.append(f"#PBS -q {_directive(res.partition, '--partition')}")
        return lines + [f"#PBS -l {_directive(chunk, 'select')}",
                        f"#PBS -l walltime={_directive(res.time, '--time')}",
                        "#PBS -j oe",
                        f"#PBS -o {_directive(res.output, 'output folder')}"]

    def rendezvous(self) -> list[str]:
        return [
            "# Rendezvous at the first node of the job (the first line of the node file); the",
            "# port follows from the job number, so that jobs sharing a node do not collide.",
            'MASTER_ADDR=$(sed -n 1p "$PBS_NODEFILE")',
            f"MASTER_PORT=$(({PORT_BASE} + 10#${{PBS_JOBID%%.*}} % {PORT_SPAN}))",
            "export MASTER_ADDR MASTER_PORT",
            'echo "rendezvous: $MASTER_ADDR:$MASTER_PORT"',
        ]

    def output_dir(self, folder: Path, name: str) -> str:
        return f"{folder}/"

    def output_of(self, res: Resources, job_id: str) -> str:
        return f"{res.output}{res.name[:self.NAME_LENGTH]}.o{job_id.split('.')[0]}"


SCHEDULERS: dict[str, Scheduler] = {"slurm": Slurm(), "pbs": Pbs()}


# ------------------------------------------------------------------------------------ launchers
class Launcher:
    """Starts the ranks: ``shape`` sizes the job, ``argv`` wraps the container command."""

    name = ""
    schedulers: tuple[str, ...] = ()
    needs_rendezvous_vars = False  # MASTER_ADDR/PORT even on one node

    def shape(self, site: Site, nodes: int, gpus: int) -> tuple[int, int | None, bool]:
        """(tasks per node, CPUs per task, exclusive nodes)."""
        raise NotImplementedError

    def argv(self, workload: Workload, site: Site, runtime: Runtime, *, gpus: int,
             cpus_per_task: int | None, env: dict[str, str]) -> tuple[list[str], list[int]]:
        """The launch argv and where to wrap it (indices of the runtime, image and command)."""
        raise NotImplementedError


def _share(site: Site, gpus: int) -> int | None:
    """The cores that go with ``gpus`` of a node's GPUs (all of them on CPU sites)."""
    if not site.cores_per_node:
        return None
    if not site.gpus_per_node:
        return site.cores_per_node
    return max(1, site.cores_per_node * gpus // site.gpus_per_node)


def _exec(prefix: list[str], workload: Workload, site: Site, runtime: Runtime,
          container_command: Sequence[str], env: dict[str, str]) -> tuple[list[str], list[int]]:
    exec_argv = runtime.exec_argv(image=workload.image, command=container_command,
                                  gpu_flag=site.gpu_flag, binds=workload.binds, env=env)
    image_at = len(prefix) + exec_argv.index(str(workload.image))
    groups = [len(prefix), image_at, image_at + 1]
    if workload.script in container_command:  # the script and its arguments on a line of their own
        groups.append(image_at + 1 + list(container_command).index(workload.script))
    return [*prefix, *exec_argv], groups


class TorchrunPerNode(Launcher):
    name = "torchrun"
    schedulers = ("slurm",)

    def shape(self, site: Site, nodes: int, gpus: int) -> tuple[int, int | None, bool]:
        return 1, _share(site, gpus), False

    def argv(self, workload, site, runtime, *, gpus, cpus_per_task, env):
        return _exec(srun_argv(workload.nodes, cpus_per_task=cpus_per_task), workload, site,
                     runtime, workload.command, env)


class SrunPerGpu(Launcher):
    """LUMI's other pattern: one task per GCD, bound to its cores, seeing only its device."""

    name = "srun-per-gpu"
    schedulers = ("slurm",)
    needs_rendezvous_vars = True

    def shape(self, site: Site, nodes: int, gpus: int) -> tuple[int, int | None, bool]:
        cpus = site.cores_per_node // site.gpus_per_node if site.gpus_per_node else None
        return gpus, cpus or None, bool(site.cpu_bind)

    def argv(self, workload, site, runtime, *, gpus, cpus_per_task, env):
        prefix = ["srun", f"--nodes={workload.nodes}", f"--ntasks-per-node={gpus}"]
        if cpus_per_task:
            prefix.append(f"--cpus-per-task={cpus_per_task}")
        if site.cpu_bind:
            prefix.append("--cpu-bind=mask_cpu:" + ",".join(site.cpu_bind[:gpus]))
        prefix.append("--kill-on-bad-exit=1")
        # Evaluated per task, inside the container: Slurm numbers the tasks.
        visible = VISIBLE_DEVICES.get(site.gpu)
        assigns = [f"{visible}=$SLURM_LOCALID"] if visible else []
        assigns += ["RANK=$SLURM_PROCID", "LOCAL_RANK=$SLURM_LOCALID", "WORLD_SIZE=$SLURM_NTASKS"]
        inner = " ".join(assigns) + " exec python3 " + " ".join(
            word(a) for a in (workload.script, *workload.args))
        if has_refs(inner):
            raise ValueError("a job-time variable in a per-task command")  # a bug
        env = {**env, "MASTER_ADDR": ref("MASTER_ADDR"), "MASTER_PORT": ref("MASTER_PORT")}
        return _exec(prefix, workload, site, runtime, ["bash", "-c", inner], env)


class MpiexecTorchrun(Launcher):
    """Derecho (PBS Pro, Cray PALS): mpiexec one process per node, each running torchrun."""

    name = "mpiexec-torchrun"
    schedulers = ("pbs",)

    def shape(self, site: Site, nodes: int, gpus: int) -> tuple[int, int | None, bool]:
        return 1, _share(site, gpus), False

    def argv(self, workload, site, runtime, *, gpus, cpus_per_task, env):
        prefix = ["mpiexec", "-n", str(workload.nodes), "--ppn", "1", "--cpu-bind", "none"]
        return _exec(prefix, workload, site, runtime, workload.command, env)


LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in
                                  (TorchrunPerNode(), SrunPerGpu(), MpiexecTorchrun())}


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


def _check_request(request: JobRequest, target: Target, site: Site,
                   site_arch: str | None) -> None:
    if request.workload not in WORKLOADS:
        raise ConfigError(f"--workload must be one of {', '.join(WORKLOADS)} (got "
                          f"'{request.workload}'){suggest(request.workload, WORKLOADS)}")
    if site.scheduler not in SCHEDULERS:
        hint = " (for a Slurm cluster of CPU nodes: --site local-slurm)" if site.gpu == "none" \
            else ""
        raise ConfigError(f"site {site.name} has no batch scheduler (scheduler: "
                          f"{site.scheduler}); name a site that has one with --site{hint}",
                          path=site.path, line=site.lines.get("scheduler"), key="scheduler")
    if request.nodes < 1:
        raise ConfigError(f"--nodes must be at least 1 (got {request.nodes})")
    if request.workload == "build" and request.nodes != 1:
        raise ConfigError(f"a build job runs on one node (got --nodes {request.nodes})")
    if target.gpu != site.gpu:
        raise ConfigError(f"target {target.name} is an image for {_KINDS[target.gpu]} but "
                          f"site {site.name} has {_KINDS[site.gpu]}")
    if site_arch and target.arch != site_arch:
        raise ConfigError(f"target {target.name} is {target.arch} but site {site.name}'s "
                          f"nodes are {site_arch}")
    if request.time is not None:
        match = _TIME.match(request.time)
        if not match or not any(int(part) for part in match.groups()):
            raise ConfigError(f"--time must be HH:MM:SS (e.g. 01:30:00; got "
                              f"'{request.time}')")
    if request.account is not None and not _DIRECTIVE_SAFE.match(request.account):
        raise ConfigError(f"--account '{request.account}' is not an account name")
    if request.partition is not None and site.partitions and \
            request.partition not in site.partitions:
        raise ConfigError(f"unknown partition '{request.partition}' for site {site.name}"
                          f"{suggest(request.partition, site.partitions)}; known: "
                          f"{', '.join(site.partitions)}")
    if request.launcher is not None and request.launcher not in LAUNCHERS:
        raise ConfigError(f"--launcher must be one of {', '.join(LAUNCHERS)} (got "
                          f"'{request.launcher}')")


def _gpus(request: JobRequest, site: Site) -> int:
    gpus = request.gpus_per_node
    if gpus is None:
        gpus = site.gpus_per_node or 2  # CPU sites: two ranks per node, as invoke smoke
    if gpus < 1:
        raise ConfigError(f"--gpus-per-node must be at least 1 (got {gpus})")
    if site.gpus_per_node and gpus > site.gpus_per_node:
        raise ConfigError(f"{site.name} nodes have {site.gpus_per_node} GPUs; --gpus-per-node "
                          f"{gpus} is more", path=site.path,
                          line=site.lines.get("gpus_per_node"), key="gpus_per_node")
    total = gpus * request.nodes
    if site.max_gpus_per_job and site.gpu != "none" and total > site.max_gpus_per_job:
        raise ConfigError(f"{site.name} allows at most {site.max_gpus_per_job} GPUs per job; "
                          f"--nodes {request.nodes} x --gpus-per-node {gpus} = {total}",
                          path=site.path, line=site.lines.get("max_gpus_per_job"),
                          key="max_gpus_per_job")
    return gpus


def plan_job(target: Target, site: Site, *, settings: Settings, request: JobRequest,
             host_arch: str, site_arch: str | None = None, venv: Path | None = None) -> Job:
    """The whole batch job, rendered: pure (nothing is read from the environment or run).

    ``host_arch`` and ``venv`` (this tool's Python environment) decide how a build job finds
    ``invoke`` on the build node; ``site_arch`` is the architecture of the site's nodes.
    """
    _check_request(request, target, site, site_arch)
    scheduler = SCHEDULERS[site.scheduler]
    runtime = Runtime(binary=site.runtime, flavour=site.runtime, version="site")
    name = f"{request.workload}-{target.name}"
    _directive(name, "job name")
    output = scheduler.output_dir(settings.results_dir / "jobs", name)
    time = request.time or DEFAULT_TIME.get(request.workload, "01:00:00")
    root = settings.root
    comments = [f"invoke job: {request.workload} of image {target.name} on site {site.name} "
                f"(hpc-containers {__version__})",
                f"submit: {scheduler.submit_command} FILE; output: {output}"]
    body = [f"cd {word(str(root))}", ""]
    if request.workload == "build":
        gpus = 1 if site.gpus_per_node else 0
        res = Resources(name=name, nodes=1, tasks_per_node=1, cpus_per_task=_share(site, 1),
                        gpus_per_node=gpus, time=time,
                        partition=request.partition or site.build_partition
                        or site.default_partition, account=request.account, output=output,
                        mem_per_gpu_gb=site.mem_per_gpu_gb)
        body += _build_body(target, root=root, host_arch=host_arch, venv=venv)
        script = Script(directives=scheduler.preamble(res), comments=comments, body=body)
        return Job(request=request, target=target, site=site, scheduler=scheduler,
                   launcher=None, resources=res, text=script.render(), results=None)

    launcher = LAUNCHERS[request.launcher or site.launcher]
    if site.scheduler == "pbs" and launcher.name == "torchrun":
        launcher = LAUNCHERS["mpiexec-torchrun"]  # torchrun per node, started by mpiexec
    if site.scheduler not in launcher.schedulers:
        raise ConfigError(f"launcher {launcher.name} needs a {' or '.join(launcher.schedulers)} "
                          f"site; {site.name} schedules with {site.scheduler}")
    gpus = _gpus(request, site)
    tasks, cpus, exclusive = launcher.shape(site, request.nodes, gpus)
    res = Resources(name=name, nodes=request.nodes, tasks_per_node=tasks, cpus_per_task=cpus,
                    gpus_per_node=gpus if site.gpu != "none" else 0, time=time,
                    partition=request.partition or site.default_partition,
                    account=request.account, output=output, exclusive=exclusive,
                    mem_per_gpu_gb=site.mem_per_gpu_gb)
    job_id = ref(scheduler.job_id_var)
    multinode = request.nodes > 1
    placement = Placement(nodes=request.nodes, endpoint=f"{ref('MASTER_ADDR')}:"
                          f"{ref('MASTER_PORT')}", rdzv_id=job_id) if multinode else None
    workload = _plan_workload(target, site, settings=settings, request=request, gpus=gpus,
                              run_id=f"job{job_id}", placement=placement)
    env = dict(workload.env)
    if request.nccl_debug:
        env["NCCL_DEBUG"] = "INFO"
    argv, groups = launcher.argv(workload, site, runtime, gpus=gpus, cpus_per_task=cpus, env=env)
    if multinode and site.multinode_modules:
        body += ["# Host modules whose paths the multi-node binds name (Lmod reads unset "
                 "variables: not under set -u)",
                 "set +u", "module load " + " ".join(word(m) for m in site.multinode_modules),
                 "set -u", ""]
    if multinode or launcher.needs_rendezvous_vars:
        body += [*scheduler.rendezvous(), ""]
    out_dir = str(workload.out_dir)
    body += [f"mkdir -p {word(out_dir)}", f"echo {word('results: ' + out_dir)}", "",
             command(argv, groups=groups)]
    script = Script(directives=scheduler.preamble(res), comments=[
        *comments, f"{request.nodes} node{'s' if multinode else ''} x {gpus} "
        f"{'GPUs' if site.gpu != 'none' else 'CPU ranks'}, launcher {launcher.name}"],
        body=body)
    results = out_dir.replace(job_id, "{job_id}")
    return Job(request=request, target=target, site=site, scheduler=scheduler,
               launcher=launcher, resources=res, text=script.render(), results=results)


def _plan_workload(target: Target, site: Site, *, settings: Settings, request: JobRequest,
                   gpus: int, run_id: str, placement: Placement | None) -> Workload:
    """The workload as ``invoke smoke``/``invoke train`` plan it, with every host variable left
    for the job's shell (:data:`SHELL_VARS`): site values stay as written in the profile."""
    runtime = Runtime(binary=site.runtime, flavour=site.runtime, version="site")
    common = dict(settings=settings, runtime=runtime, run_id=run_id, environ=SHELL_VARS,
                  strict=False, placement=placement)
    if request.workload == "smoke":
        options = request.options if isinstance(request.options, SmokeOptions) \
            else SmokeOptions(gpus=gpus)
        return plan_smoke(target, site, options=replace(options, gpus=gpus), **common)
    options = request.options if isinstance(request.options, TrainOptions) \
        else TrainOptions(example=request.workload, gpus=gpus)
    return plan_train(target, site, options=replace(options, example=request.workload,
                                                    gpus=gpus), **common)


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

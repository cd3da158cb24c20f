"""Every site's rendered jobs, executed: each script runs under bash with the site's scheduler
and launcher tools replaced by recording shims that exist only where the site has them (a PBS
site has no ``srun``; a Slurm site no ``mpiexec``), the scheduler's variables set as it sets
them, and nothing else on PATH but a few basic tools. The shims write their argv as JSON lines;
a launcher shim then runs the container runtime's part of its argv, so the log holds each step
in the order the job ran it. Checked: the exact sequence of steps (modules, rendezvous, device
gate, workload, verdict), that the user's command starts after the gate, and that a failing gate
stops it. (The real Slurm cluster runs the Slurm scripts: test_slurm_jobs.py,
test_slurm_run_jobs.py.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers.batch import job as batch
from containers.batch.judgeenv import BUILD_PYTHONS, COMPLETE, JudgeEnv
from containers.errors import ConfigError
from containers.inputs.settings import load_settings
from containers.prove import registry
from tests.fixtures.data import with_plugin

TARGET = {"lumi": "lumi-rocm", "olivia": "olivia-cuda", "puhti": "puhti-cuda",
          "mahti": "mahti-cuda", "derecho": "derecho-cuda", "local-slurm": "cpu"}
#: Where a 2-node job goes when the default partition is a one-node one.
MULTINODE = {"mahti": "gpumedium"}
#: What a 2-node job asks beyond its size: Derecho has no network plugin for containers
#: (transport.unavailable), so across nodes it runs only over TCP sockets, asked for.
ACROSS = {"derecho": {"transport": "socket"}}
LAUNCHER_TOOLS = {"slurm": ("srun", "scontrol"), "pbs": ("mpiexec",)}
#: What the basic tools of a job script are; nothing else of this machine is on its PATH.
BASE_TOOLS = ("sed", "mkdir", "cat", "cp", "tee", "uname", "hostname", "rm")
COMMAND = ("python", "own.py", "--lr", "0.1")
NODE_ADDR = "10.0.0.1"

SHIM = r'''#!{python}
"""A recording shim: its argv as one JSON line; scontrol answers; a launcher runs its step."""
import json, os, sys
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["SHIM_LOG"], "a") as log:
    log.write(json.dumps([name, *args]) + "\n")
if name == "python3" and args[0] == "-c":  # the node's Python, asked its version
    print(os.environ.get("SHIM_PYTHON", "3.12"))
elif name == "module":  # Lmod prints what its shell function evaluates: the module's variables
    print("".join(f"export {{var}}=/modules/{{var}};" for var in os.environ["SHIM_SETS"].split()))
elif name == "scontrol" and args[:2] == ["show", "hostnames"]:
    print("\n".join(os.environ["SHIM_NODES"].split()))
elif name == "scontrol":
    print(f"NodeName={{args[-1]}} NodeAddr={addr} State=ALLOCATED")
elif name in ("srun", "mpiexec"):
    runtime = next((i for i, a in enumerate(args) if a in ("apptainer", "singularity")), None)
    if runtime is None:
        sys.exit(f"{{name}}: no container runtime in the step")
    os.execvp(args[runtime], args[runtime:])
fail = os.environ.get("SHIM_FAIL")
sys.exit(7 if fail and any(fail in a for a in args) else 0)
'''


@pytest.fixture
def data_site_job(data_world, tmp_path):
    """run(site, workload, fail=None, **request) -> (exit status, steps as argv lists): the
    site's job rendered for a project in ``tmp_path`` and executed with the site's shims."""
    targets, sites = data_world
    root = tmp_path / "proj"
    for folder in ("jobs", "images"):
        (root / folder).mkdir(parents=True)
    settings = load_settings(root, {"tmp_dir": str(tmp_path / "tmp")})

    def run(site, workload: str, *, fail: str | None = None, python: str = "3.12",
            unset: tuple[str, ...] = (), **request):
        where = sites[site] if isinstance(site, str) else site
        target = targets[TARGET[where.name]]
        foreign = target.arch != "x86_64"
        judge = JudgeEnv(folder=root / ".judge" / "aarch64", arch="aarch64", python="3.12",
                         requirements=()) if foreign else None
        tool = tuple(JudgeEnv(folder=root / ".buildenv" / f"aarch64-py{python}", arch="aarch64",
                              python=python, requirements=())
                     for python in BUILD_PYTHONS) if foreign else ()
        for env in (judge, *tool) if judge else ():
            env.folder.mkdir(parents=True, exist_ok=True)
            (env.folder / COMPLETE).write_text("")
        job = batch.plan_job(batch.JobNeeds(target, where, settings=settings, host_arch="x86_64",
                             site_arch=target.arch, venv=tmp_path / "venv", judge=judge, tool=tool),
                             batch.JobRequest(kind=registry.kind_of(workload), account="proj_1", **request),
                             environ={})
        return execute(job.text, where, tmp_path, nodes=request.get("nodes", 1), fail=fail,
                       python=python, unset=unset)
    return run


def _tools(site, folder: Path) -> Path:
    """The shims of ``site``'s tools (and the python3 its modules give), and the venv's invoke,
    in ``folder/bin``; the basic tools linked into ``folder/base``."""
    shim = SHIM.format(python=sys.executable, addr=NODE_ADDR)
    names = [*LAUNCHER_TOOLS[site.scheduler], site.runtime, "module", "python3"]
    for where, tools in ((folder / "bin", names), (folder / "venv" / "bin", ["invoke"])):
        where.mkdir(parents=True, exist_ok=True)
        for name in tools:
            (where / name).write_text(shim)
            (where / name).chmod(0o755)
    base = folder / "base"
    base.mkdir(exist_ok=True)
    for name in BASE_TOOLS:
        if not (base / name).exists():
            (base / name).symlink_to(shutil.which(name))
    return folder / "bin"


def _scheduler_env(site, folder: Path, nodes: int) -> dict[str, str]:
    """The variables the site's scheduler sets in a job of ``nodes`` nodes."""
    names = [f"n{i}" for i in range(1, nodes + 1)]
    if site.scheduler == "pbs":
        nodefile = folder / "nodefile"
        nodefile.write_text("".join(f"{name}\n" for name in names))
        return {"PBS_JOBID": "4242.desched1", "PBS_NODEFILE": str(nodefile),
                "PBS_O_WORKDIR": str(folder), "SHIM_NODES": " ".join(names)}
    return {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": f"n[1-{nodes}]",
            "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
            "SHIM_NODES": " ".join(names)}


def execute(text: str, site, folder: Path, *, nodes: int, fail: str | None,
            python: str = "3.12", unset: tuple[str, ...] = ()) -> tuple[int, list[list[str]]]:
    """The job run under bash with the site's shims (``python``: the version the node's
    python3 says; ``unset``: variables the site's modules leave unset); its stderr is left in
    ``folder/job.err``."""
    shims = _tools(site, folder)
    log = folder / "steps.jsonl"
    log.write_text("")
    script = folder / "job.sh"
    script.write_text(text)
    # Lmod's module is a shell function that evaluates what its command prints; batch shells
    # get it from their environment (here BASH_ENV). The variables the site's binds name
    # ($EBROOTNCCL, ...) are what its modules set (but those ``unset`` names).
    functions = folder / "lmod.sh"
    functions.write_text(f'module() {{ eval "$({shims}/module "$@")"; }}\n')
    sets = [name for name in site.job_variables(multinode=True) if name not in unset]
    env = {"PATH": f"{shims}:{folder / 'base'}", "HOME": str(folder), "USER": "alice",
           "SHIM_LOG": str(log), "BASH_ENV": str(functions), "SHIM_SETS": " ".join(sets),
           "SHIM_PYTHON": python,
           **_scheduler_env(site, folder, nodes), **({"SHIM_FAIL": fail} if fail else {})}
    done = subprocess.run(["/bin/bash", str(script)], env=env, cwd=folder, capture_output=True,
                          text=True, timeout=120)
    (folder / "job.err").write_text(done.stderr)
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert "command not found" not in done.stderr, done.stderr + text
    return done.returncode, steps


def step_names(steps: list[list[str]]) -> list[str]:
    """Each recorded step by what it is: a module load, the rendezvous' scontrol, a launcher,
    and what a container ran (gate, workload, verdict)."""
    names = []
    for name, *args in steps:
        text = " ".join(args)
        if name in ("apptainer", "singularity"):
            names.append("gate" if "/gate.py" in text else "verdict" if "verdict" in text
                         else "workload")
        elif name == "invoke":
            names.append(f"invoke {args[0]}")
        elif name == "python3" and args[:2] == ["-m", "invoke"]:  # past --search-root ROOT
            names.append(f"invoke {args[4]}")
        elif name == "python3":
            names.append("python3 version")
        else:
            names.append(f"{name} {args[0]}" if name == "module" else name)
    return names


def expected(site, workload: str, *, nodes: int, launcher: str | None = None) -> list[str]:
    """The steps a job of the site runs, in order, from the site's facts."""
    step = "mpiexec" if site.scheduler == "pbs" else "srun"
    modules = [*site.modules, *(site.transport.modules if nodes > 1 else ())]
    head = ["module load"] if modules else []
    if workload == "build":  # on aarch64 nodes the node's python3 is asked its version first
        return [*head, *(["python3 version"] if TARGET[site.name] == "olivia-cuda" else []),
                "invoke build"]
    meets = nodes > 1 or launcher == "srun-per-gpu"
    head += ["scontrol", "scontrol"] if meets and site.scheduler == "slurm" else []
    gate = [step, "gate"] if workload == "run" and site.gpus.kind != "none" else []
    verdict = "verdict" if workload == "run" or TARGET[site.name] == "olivia-cuda" \
        else "invoke verdict"
    return [*head, *gate, step, "workload", verdict]


def _cases():
    for site in TARGET:
        for workload in registry.WORKLOADS:
            for nodes in (1, 2):
                if nodes == 2 and workload == "build":
                    continue
                if workload == "build" and site in ("puhti", "mahti", "derecho"):
                    continue  # refused before anything is written (no fakeroot): test_job.py
                yield site, workload, nodes


@pytest.mark.parametrize("site, workload, nodes", list(_cases()))
def test_every_sites_job_runs_its_steps_in_order(data_world, data_site_job, site, workload,
                                                 nodes) -> None:
    where = data_world[1][site]
    extra = {"command": COMMAND} if workload == "run" else {}
    if nodes > 1 and site in MULTINODE:
        extra["partition"] = MULTINODE[site]
    if nodes > 1:
        extra.update(ACROSS.get(site, {}))
    status, steps = data_site_job(site, workload, nodes=nodes, **extra)
    assert status == 0, steps
    assert step_names(steps) == expected(where, workload, nodes=nodes), steps
    modules = [m for s in steps if s[0] == "module" for m in s[2:]]
    assert modules == [*where.job_modules, *(where.transport.modules if nodes > 1 else ())]
    if workload == "build":
        return
    work = next(s for s in steps if step_names([s]) == ["workload"])
    launcher = steps[steps.index(work) - 1]
    assert launcher[0] == ("mpiexec" if where.scheduler == "pbs" else "srun")
    assert f"--nodes={nodes}" in launcher or ["-n", str(nodes)] == launcher[1:3]
    assert all(word in launcher for word in where.job.step_options)
    if nodes > 1:  # the rendezvous the job's shell found: the first node's address (PBS:
        # the node file's first line)
        first = "n1" if where.scheduler == "pbs" else NODE_ADDR
        assert f"--rdzv-endpoint={first}:24242" in work
    if workload == "run":  # the user's command, as its words, after torchrun's --no-python
        assert work[-len(COMMAND):] == list(COMMAND) and "--no-python" in work


def test_a_failing_gate_stops_the_command(data_world, data_site_job) -> None:
    for site in ("lumi", "derecho", "olivia"):
        status, steps = data_site_job(site, "run", fail="/gate.py", command=COMMAND)
        step = "mpiexec" if site == "derecho" else "srun"
        head = ["module load"] if data_world[1][site].job_modules else []
        assert step_names(steps) == [*head, step, "gate", "verdict"], steps
        assert not any(COMMAND[1] in s for s in steps)
        verdict = steps[-1]
        assert verdict[verdict.index("--gate") + 1] == "fail"
        assert status == 0  # the verdict's own status (the shim's): the job ends with it


def test_lumi_one_task_per_gcd(data_world, data_site_job) -> None:
    lumi = data_world[1]["lumi"]
    status, steps = data_site_job("lumi", "run", launcher="srun-per-gpu", command=COMMAND)
    assert status == 0
    assert step_names(steps) == expected(lumi, "run", nodes=1, launcher="srun-per-gpu")
    gate, work = steps[2], steps[4]  # after the rendezvous' two scontrol calls
    assert gate[:3] == ["srun", "--nodes=1", "--ntasks-per-node=1"]
    assert work[:3] == ["srun", "--nodes=1", "--ntasks-per-node=8"]
    assert f"MASTER_ADDR={NODE_ADDR}" in steps[5]


def test_each_site_has_only_its_own_tools(data_world, tmp_path) -> None:
    """A PBS site has no srun and a Slurm site no mpiexec: a job written with another
    scheduler's launcher fails at its first step, as it would on the site (a Derecho gate
    started by srun did)."""
    for site, absent in (("derecho", "srun"), ("lumi", "mpiexec")):
        shims = _tools(data_world[1][site], tmp_path / site)
        found = subprocess.run(["/bin/bash", "-c", f"command -v {absent}"],
                               env={"PATH": f"{shims}:{tmp_path / site / 'base'}"})
        assert found.returncode != 0, (site, absent)


def test_derecho_across_nodes_is_refused_not_written(data_site_job) -> None:
    with pytest.raises(ConfigError, match="needs the host's network plugin and libfabric"):
        data_site_job("derecho", "run", nodes=2, command=COMMAND)


@pytest.mark.parametrize("workload", ["run", "smoke"])
def test_derecho_across_nodes_with_a_plugin_runs_with_ncars_binds(data_world, data_site_job,
                                                                  workload) -> None:
    """Once a plugin for containers exists, a 2-node Derecho job runs with the binds and
    library path of NCAR's own container example (FastEddy) and NCCL_NET forcing the plugin."""
    derecho = with_plugin(data_world[1]["derecho"], "/glade/u/apps/ofi/lib")
    extra = {"command": COMMAND} if workload == "run" else {}
    status, steps = data_site_job(derecho, workload, nodes=2, **extra)
    assert status == 0
    assert step_names(steps) == expected(derecho, workload, nodes=2), steps
    work = next(s for s in steps if step_names([s]) == ["workload"])
    binds = [work[i + 1] for i, word in enumerate(work) if word == "--bind"]
    assert binds[-4:] == ["/run", "/opt/cray", "/usr/lib64:/host/lib64",
                          "/glade/u/apps/ofi/lib:/opt/aws-ofi-nccl/lib"]
    assert ("LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/cray/libfabric/1.15.2.0/lib64:"
            "$LD_LIBRARY_PATH:/host/lib64") in work  # $: the image's own, in the container
    assert "NCCL_NET=AWS Libfabric" in work and "--rdzv-endpoint=n1:24242" in work


def test_derecho_across_nodes_over_sockets_records_the_choice(data_site_job,
                                                              tmp_path) -> None:
    """--transport socket: the job runs, forcing NCCL's sockets; its job.json says so and its
    verdict (the image's runverdict.py for a run job) is told the transport is degraded."""
    status, steps = data_site_job("derecho", "run", nodes=2, transport="socket",
                                  command=COMMAND)
    assert status == 0
    work = next(s for s in steps if step_names([s]) == ["workload"])
    assert "NCCL_NET=Socket" in work and "/usr/lib64:/host/lib64" not in work
    ran = steps[-1]  # the run verdict, in the image: told the transport was chosen, degraded
    assert ran[ran.index("--transport-degraded") + 1].startswith("TCP sockets instead of OFI")
    records = list((tmp_path / "proj" / "results" / "run").glob("*/job.json"))
    assert [json.loads(r.read_text())["transport"] for r in records] == ["socket"]


def test_olivias_build_job_with_an_old_python3_fails_in_one_line(data_site_job,
                                                                 tmp_path) -> None:
    """The node's python3 (after the site's modules) is 3.9: no prepared folder is for it, so
    the job stops before invoke, saying what it found and what was prepared."""
    status, steps = data_site_job("olivia", "build", python="3.9")
    assert status == 2 and step_names(steps)[-1] == "python3 version", steps
    err = (tmp_path / "job.err").read_text()
    assert err.count("\n") == 1 and err.startswith(
        "build: FAIL: python3 on this node (after the site's modules) is 3.9; invoke job "
        "prepared aarch64 packages for Python 3.11, 3.12, 3.13"), err


@pytest.mark.parametrize("workload", ["ddp", "run"])
def test_a_variable_the_modules_leave_unset_stops_the_job_in_one_line(data_site_job, tmp_path,
                                                                      workload) -> None:
    """Olivia's 2-node job binds $EBROOTAWSMINOFIMINNCCL, which the NCCL module is to set:
    where it does not, the job stops right after module load, naming the modules and the
    variable (not "unbound variable" at the launch line); where it does, the job runs."""
    command = {"command": COMMAND} if workload == "run" else {}
    status, steps = data_site_job("olivia", workload, nodes=2,
                                  unset=("EBROOTAWSMINOFIMINNCCL",), **command)
    err = (tmp_path / "job.err").read_text()
    assert status == 2 and step_names(steps) == ["module load"], steps
    assert err == ("job script: module load NRIS/GPU NCCL/2.26.6-GCCcore-14.2.0-CUDA-12.8.0 "
                   "did not set EBROOTAWSMINOFIMINNCCL, which transport.binds of "
                   "sites/olivia.yaml uses: load the module that sets it, or fix the "
                   "profile\n"), err
    status, steps = data_site_job("olivia", workload, nodes=2, **command)
    assert status == 0 and "workload" in step_names(steps), steps

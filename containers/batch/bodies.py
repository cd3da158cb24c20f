"""The shell lines of a batch job's body: a workload's run and verdict, a user's command after
its device gate, a build, host modules. Where this checkout's environment cannot run on the
nodes, the image's Python judges and the node's own ``python3`` builds (packages made ahead)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from containers.batch.judgeenv import COMPLETE, JudgeEnv
from containers.batch.script import command, ref, stop_if, word
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.inputs.sites import Site
from containers.records import JobRecord
from containers.run.command import CommandRun
from containers.run.workload import IMAGE_RECORD, JOB_RECORD, Workload

VERDICT_SCRIPT = "runverdict.py"


def workload_lines(target: Target, workload: Workload, *, settings: Settings, record: dict,
                    judge: JudgeEnv | None, host_arch: str, venv: Path | None) -> list[str]:
    """A smoke or training job's body after its rendezvous: records, the step, the verdict."""
    out_dir = str(workload.out_dir)
    image_record = settings.provenance_path(target.name)
    verdict = verdict_in_image(target, workload, settings, judge, out_dir, host_arch=host_arch) \
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


def run_lines(planned: CommandRun, *, site: Site, settings: Settings, record: dict,
              nodes: int) -> list[str]:
    """A run job's body after its rendezvous: record, gate, command, verdict."""
    workload = planned.workload
    out_dir = str(workload.out_dir)
    log = word(out_dir + "/run.log")
    workdir = record.get("workdir")
    lines = [*([f"cd {word(workdir)}"] if workdir else []),
             *folder_lines(workload.out_dir), "",
             "# What the verdict reads besides the log: the job and its command",
             f"cat > {word(out_dir + '/' + JOB_RECORD)} <<'JOB'", JobRecord.of(record).as_json(),
             "JOB", "",
             "status=0", "gate=none"]
    if planned.gate:
        lines += ["# The device gate: every node's ranks must see a GPU of the site's kind",
                  "gate=pass",
                  command(planned.gate) + f" 2>&1 | tee {log} || gate=fail", ""]
    lines += ['if [[ $gate != fail ]]; then',
              "    " + command(workload.argv) + f" 2>&1 | tee -a {log} || status=$?",
              "fi", ""]
    verdict = [f"{settings.jobs_mount}/{VERDICT_SCRIPT}", "--out", settings.results_mount,
               "--exit-status", ref("status"), "--gate", ref("gate"),
               "--expect-gpu", site.gpus.kind, "--ranks", str(workload.ranks)]
    if site.transport.applies(nodes) and site.transport.expect:
        verdict += ["--transport-name", site.transport.name or "the site's network",
                    "--transport-expect", site.transport.expect,
                    *(["--transport-degraded", site.transport.degraded]
                      if site.transport.degraded else [])]
    binds = (f"{settings.jobs_dir}:{settings.jobs_mount}:ro",
             f"{out_dir}:{settings.results_mount}")
    return [*lines,
            "# The verdict, by the image's own Python (no venv, pip or package index on the node);",
            "# the job's exit status is the verdict's (0, 2 for the gate, else the command's).",
            "exec " + command(workload.launch.runtime.exec_argv(
                image=workload.image, command=["python3", *verdict], binds=binds))]


def folder_lines(out_dir: Path) -> list[str]:
    """The job's results folder made new, or the job stopped: it is another job's."""
    folder = str(out_dir)
    refusal = (f"job: FAIL: the results folder {folder} exists: it holds another job's "
               "results (job ids repeat after a cluster restart), which this job does not "
               "overwrite; write the script again (invoke job) and submit that")
    return [f"mkdir -p {word(str(out_dir.parent))}", *stop_if(f"! mkdir {word(folder)}",
                                                                word(refusal)),
            f"echo {word('results: ' + folder)}"]


def run_record(record: dict, words: Sequence[str], workdir: str | None = None) -> dict:
    return {**record, "command": list(words), **({"workdir": workdir} if workdir else {})}


def _folders(settings: Settings) -> dict[str, str]:
    """The settings' folders as the variables ``invoke verdict`` reads them from."""
    return {"INVOKE_CONTAINERS_IMAGES_DIR": str(settings.images_dir),
            "INVOKE_CONTAINERS_RESULTS_DIR": str(settings.results_dir),
            "INVOKE_CONTAINERS_PERFLOG_DIR": str(settings.perflog_dir)}


def loaded_modules(site: Site, *, multinode: bool) -> list[str]:
    """Across nodes, the modules the multi-node binds name come too."""
    across = site.transport.modules if multinode else ()
    return [*site.job_modules, *(m for m in across if m not in site.job_modules)]


def module_lines(names: Sequence[str], *, multinode: bool = False) -> list[str]:
    """``module load`` of ``names``, not under ``set -u`` (Lmod reads unset variables)."""
    if not names:
        return []
    why = ("the site's modules and those its multi-node binds name" if multinode
           else "the modules the site's documentation requires")
    return [f"# Host modules: {why} (Lmod reads unset variables: not under set -u)",
            "set +u", "module load " + " ".join(word(m) for m in names), "set -u", ""]


def module_variable_lines(site: Site, modules: Sequence[str], *,
                           multinode: bool) -> list[str]:
    """After ``module load``: stop in one line where a host variable the job uses is empty."""
    used = site.job_variables(multinode=multinode)
    if not modules or not used:
        return []
    loaded = "module load " + " ".join(modules)
    lines = ["# What the binds and environment below take from the host (its modules): each "
             "must be set"]
    for name, keys in used.items():
        lines += stop_if(f"[[ -z ${{{name}:-}} ]]", word(
            f"job script: {loaded} did not set {name}, which {' and '.join(keys)} of "
            f"sites/{site.name}.yaml use{'s' if len(keys) == 1 else ''}: load the module that "
            "sets it, or fix the profile"))
    return [*lines, ""]


def build_body(target: Target, site: Site, *, root: Path, host_arch: str,
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
    """``invoke build`` by the node's own ``python3``, with packages prepared for its version."""
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
        *stop_if(f"[[ ! -f $packages/{COMPLETE} ]]", word("build: FAIL: ") + '"$packages"'
                 + word(" is not prepared (invoke job --out or --submit prepares it on the "
                        "login node)")),
        f'export PATH="$packages/bin:$PATH" PYTHONPATH="$packages":{word(str(root))}',
        "exec " + command(["python3", "-m", "invoke", "--search-root", str(root), "build",
                           "--target", target.name])]


def verdict_in_image(target: Target, workload: Workload, settings: Settings,
                      judge: JudgeEnv | None, out_dir: str, *, host_arch: str) -> list[str]:
    """``invoke verdict`` by the image's own Python, with packages prepared for its version."""
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
        *stop_if(f"[[ ! -f {word(folder + '/' + COMPLETE)} ]]", word(
            f"verdict: FAIL: {folder} is not prepared (invoke job --out or --submit prepares it "
            "on the login node)")),
        command(["mkdir", "-p", *writable]),
        "exec " + command(judge_argv)]


def _invoke(args: list[str], *, venv: Path | None, exec_: bool = False) -> list[str]:
    """The line that runs ``invoke ARGS`` with this checkout's venv."""
    binary = str(venv / "bin" / "invoke") if venv is not None else "invoke"
    return [("exec " if exec_ else "") + command([binary, *args])]

"""``invoke job``: render a site's batch job; print it, write it or submit it."""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from containers.app.following import ask, follow_job
from containers.app.project import Project
from containers.batch import follow, job as batch, judgeenv
from containers.errors import ImageMissing, UsageError, on_disk
from containers.files import atomic_write_text
from containers.host.facts import host_arch, run_stamp
from containers.image import provenance
from containers.image.arch import check_arch, recorded_arch, site_arches
from containers.host.process import capture
from containers.inputs.envspec import load_target_env
from containers.inputs.recipes import Target
from containers.inputs.sites import Site, get_site
from containers.prove.kind import Options, WorkloadKind
from containers.prove.registry import kind_of
from containers.report import Say, say_line as _print
from containers.unique import claim_file


@dataclass(frozen=True)
class JobSubmission:
    """A rendered batch job, where its script was written, and its job id once submitted."""

    job: batch.Job
    script: Path | None = None
    job_id: str | None = None


def job(project: Project, *, target: str | None, workload: str, site: str | None = None,
        nodes: int = 1, gpus_per_node: int | None = None, time: str | int | None = None,
        account: str | None = None, partition: str | None = None, launcher: str | None = None,
        out: str | Path | None = None, submit: bool = False, nccl_debug: bool = False,
        options: Options | None = None, qos: str | None = None,
        reservation: str | None = None, directives: tuple[str, ...] = (),
        command: tuple[str, ...] = (), wait: bool = False, transport: str | None = None,
        kind: WorkloadKind | None = None, say: Say = _print) -> JobSubmission:
    """Render the batch job for a site; print it, write it (atomically) or submit it.

    Whichever it does, the folder the job's output goes to exists afterwards (schedulers do
    not create it, and a job whose output folder is missing dies without a log). ``time`` is
    seconds or a time as ``--time`` takes it; ``kind`` is the workload's, resolved by the
    task (else here, once)."""
    script = Path(os.path.abspath(out)) if out else None  # a link named is refused, not followed
    if script is not None and script.is_dir() and not script.is_symlink():
        raise UsageError(f"--out {out} is a folder; name the script file to write (e.g. "
                         f"{Path(out) / 'job.sh'})", flag="--out")
    kind = kind or kind_of(workload)
    item = project.target(target or project.default_target())
    where = get_site(project.sites, site) if site else project.site_of(item)
    home = project.targets.get(where.default_target or "")
    request = batch.JobRequest(workload=workload, nodes=int(nodes), gpus_per_node=gpus_per_node,
                               time=time, account=account, partition=partition,
                               launcher=launcher, nccl_debug=nccl_debug, options=options,
                               qos=qos, reservation=reservation, directives=tuple(directives),
                               command=tuple(command), transport=transport,
                               workdir=kind.workdir(os.getcwd), kind=kind)
    venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
    judge = _judge_env(project, item, kind)
    tool = judgeenv.build_plans(project.settings.root, arch=item.arch) \
        if kind.needs_node_tool(item.arch, host_arch()) else ()
    planned = batch.plan_job(item, where, settings=project.settings, request=request,
                             host_arch=host_arch(), site_arch=home.arch if home else None,
                             venv=venv, environ=os.environ, judge=judge, tool=tool)
    with on_disk("create the job's output folder", planned.output_folder):
        planned.output_folder.mkdir(parents=True, exist_ok=True)
    if script is None and not submit:
        say(planned.text.rstrip("\n"))
        return JobSubmission(job=planned)
    text = planned.text
    if judge is None and kind.judged_off_host(item.arch, host_arch()):
        text = _not_ready(item, text, submit=submit)
    if submit:  # every refusal before a script exists: none is left that looks ready to run
        kind.before_submit(lambda: _check_image(project, item, where))
    for packages in [*([judge] if judge is not None else []), *tool]:
        judgeenv.prepare(packages, say=say)  # made here, so the node needs no package index
    if not submit:
        assert script is not None
        _write(script, text)
        say(f"wrote {os.path.relpath(script)} ({planned.scheduler.submit_command} it to run)")
        return JobSubmission(job=planned, script=script)
    submission = _submit(project, planned, script, index={
        "workload": workload, "target": item.name, "site": where.name}, say=say)
    if wait:
        results = planned.results_of(submission.job_id or "")
        follow_job(planned.scheduler.name, submission.job_id or "", say=say,
                   results=Path(results) if results else None,
                   output=planned.output_of(submission.job_id or ""))
    return submission


def _not_ready(item: Target, text: str, *, submit: bool) -> str:
    """A job whose verdict runs in an image whose Python is not known yet: a submission is
    refused; a script written for reading before the build says so at its top."""
    unknown = (f"the verdict of {item.name}'s jobs runs in the image on its {item.arch} "
               "nodes, and neither the image's build record (stack.python) nor its env spec "
               "(python=) says which Python it has")
    if submit:
        raise UsageError(f"not submitted: {unknown}: build the image first, or pin python= "
                         "in its env spec", flag="--submit")
    head, _, rest = text.partition("\n")
    return (f"{head}\n# NOT READY TO SUBMIT: {unknown}; build the image, then write this "
            f"script again (invoke job ... --out) or submit it (--submit)\n{rest}")


def _write(script: Path, text: str) -> None:
    with on_disk("write the job script", script):
        atomic_write_text(script, text, mode=0o755)


def _submit(project: Project, planned: batch.Job, script: Path | None, *, index: dict,
            say: Say) -> JobSubmission:
    """Write the script (a claimed name under ``results/jobs`` unless ``--out`` named one),
    submit it, and add the job to the index ``invoke jobs`` reads."""
    jobs_dir = project.settings.results_dir / "jobs"
    claimed = script is None
    if script is None:
        script = claim_file(jobs_dir, f"{planned.name}-{planned.stamp or run_stamp()}", ".sh")
    _write(script, planned.text)
    try:
        job_id = planned.scheduler.parse_job_id(
            capture(planned.scheduler.submit_argv(script), timeout=120))
    except BaseException:
        if claimed:  # not submitted: the tool's own name for it is not left behind
            script.unlink(missing_ok=True)
        raise
    results = planned.results_of(job_id)
    say(f"submitted job {job_id}: output {os.path.relpath(planned.output_of(job_id))}"
        + (f", results {os.path.relpath(results)}" if results else "")
        + f", script {os.path.relpath(script)}")
    with on_disk("add the job to the index", jobs_dir):
        follow.append_index(jobs_dir, {
            "job_id": job_id, "scheduler": planned.scheduler.name, **index,
            "script": str(script), "output": planned.output_of(job_id), "results": results,
            "submitted": datetime.datetime.now().isoformat(timespec="seconds"),
            # the scheduler's own: what tells this job from a restarted cluster's of its id
            "scheduler_submitted": follow.submitted_at(planned.scheduler.name, job_id, ask)})
    return JobSubmission(job=planned, script=script, job_id=job_id)


def _check_image(project: Project, item: Target, where: Site) -> None:
    """What a submission of a job that runs the image needs that a written script does not:
    the image itself, of the architecture of the site's nodes (from its build record, not its
    name)."""
    image = project.settings.image_path(item.name)
    if not image.is_file():
        raise ImageMissing(os.path.relpath(image), item.name, hint=(
            f"build it first (on a login node, or as a job: invoke job --target {item.name} "
            "--workload build --submit)"))
    record = provenance.read(project.settings.provenance_path(item.name))
    check_arch(recorded_arch(record, image, project.runtime(required=False)),
               site_arches(where, project.targets),
               image=os.path.relpath(image), where=f"site {where.name}", doing="submitting")


def _judge_env(project: Project, item: Target, kind: WorkloadKind) -> judgeenv.JudgeEnv | None:
    """Where the verdict of a job this checkout judges on nodes of another architecture gets
    its packages for the image's Python (None: this checkout's environment judges, or the
    image's Python is unknown)."""
    if not kind.judged_off_host(item.arch, host_arch()):
        return None
    record = provenance.read(project.settings.provenance_path(item.name), corrupt_ok=True)
    env = load_target_env(item)
    python = judgeenv.image_python(record, tuple(dep.spec for dep in env.conda) if env else ())
    return None if python is None else judgeenv.plan(project.settings.root, arch=item.arch,
                                                     python=python)

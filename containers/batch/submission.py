"""A planned batch job delivered: printed, written or submitted (its nodes' package folders
prepared first), a submission added to the index ``invoke jobs`` reads. See :func:`deliver`."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from containers.batch import follow, judgeenv
from containers.batch.job import Job, JobNeeds
from containers.errors import ImageMissing, UsageError, on_disk
from containers.files import atomic_write_text, refuse_replacing, refuse_unsafe_way
from containers.host.facts import run_stamp
from containers.host.process import capture
from containers.host.runtime import Runtime
from containers.image import provenance
from containers.image.arch import check_arch, recorded_arch
from containers.inputs.recipes import Target
from containers.report import Say
from containers.unique import claim_file


@dataclass(frozen=True)
class JobSubmission:
    """A rendered batch job, where its script was written, and its job id once submitted."""

    job: Job
    script: Path | None = None
    job_id: str | None = None


def deliver(job: Job, needs: JobNeeds, *, script: Path | None, submit: bool,
            runtime: Callable[[], Runtime], say: Say) -> JobSubmission:
    """Print the job, write it or submit it; its output folder is made, refusals first."""
    refuse_unsafe_way(job.output_folder)
    if script is not None:
        refuse_replacing(script)  # before any folder is made
    with on_disk("create the job's output folder", job.output_folder):
        job.output_folder.mkdir(parents=True, exist_ok=True)
    if script is None and not submit:
        say(job.text.rstrip("\n"))
        return JobSubmission(job=job)
    text = job.text if needs.ready else _not_ready(job.target, job.text, submit=submit)
    if submit:  # none is left that looks ready to run
        job.request.kind.before_submit(lambda: check_image(needs, runtime))
    for packages in needs.packages:
        judgeenv.prepare(packages, say=say)  # made here, so the node needs no package index
    if not submit:
        assert script is not None
        _write(script, text)
        say(f"wrote {os.path.relpath(script)} ({job.scheduler.submit_command} it to run)")
        return JobSubmission(job=job, script=script)
    return _submit(job, script, jobs_dir=needs.settings.results_dir / "jobs", say=say)


def check_image(needs: JobNeeds, runtime: Callable[[], Runtime]) -> None:
    """What submitting needs that writing does not: the image, of the nodes' architecture."""
    item, settings = needs.target, needs.settings
    image = settings.image_path(item.name)
    if not image.is_file():
        raise ImageMissing(os.path.relpath(image), item.name, hint=(
            f"build it first (on a login node, or as a job: invoke job --target {item.name} "
            "--workload build --submit)"))
    record = provenance.read(settings.provenance_path(item.name))
    check_arch(recorded_arch(record, image, runtime()),
               (needs.site_arch,) if needs.site_arch else None,
               image=os.path.relpath(image), where=f"site {needs.site.name}", doing="submitting")


def _not_ready(item: Target, text: str, *, submit: bool) -> str:
    """Refuse submitting a job whose verdict needs an image Python not known yet."""
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


def _submit(job: Job, script: Path | None, *, jobs_dir: Path, say: Say) -> JobSubmission:
    claimed = script is None
    if script is None:
        script = claim_file(jobs_dir, f"{job.resources.name}-{job.stamp or run_stamp()}", ".sh")
    _write(script, job.text)
    try:
        job_id = job.scheduler.parse_job_id(
            capture(job.scheduler.submit_argv(script), timeout=120))
    except BaseException:
        if claimed:  # not submitted: the tool's own name for it is not left behind
            script.unlink(missing_ok=True)
        raise
    results = job.results_of(job_id)
    say(f"submitted job {job_id}: output {os.path.relpath(job.output_of(job_id))}"
        + (f", results {os.path.relpath(results)}" if results else "")
        + f", script {os.path.relpath(script)}")
    with on_disk("add the job to the index", jobs_dir):
        follow.append_index(jobs_dir, {
            "job_id": job_id, "scheduler": job.scheduler.name,
            "workload": job.request.kind.workload, "target": job.target.name,
            "site": job.site.name, "script": str(script), "output": job.output_of(job_id),
            "results": results,
            "submitted": datetime.datetime.now().isoformat(timespec="seconds"),
            # the scheduler's own: what tells this job from a restarted cluster's of its id
            "scheduler_submitted": job.scheduler.submitted_at(job_id, follow.ask)})
    return JobSubmission(job=job, script=script, job_id=job_id)

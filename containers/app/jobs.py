"""``invoke job``: render a site's batch job; print it, write it or submit it, then follow it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from containers.app.following import follow_job
from containers.app.project import Project
from containers.batch import job as batch, submission
from containers.batch.submission import JobSubmission
from containers.errors import UsageError
from containers.host.facts import host_arch
from containers.report import Say, say_line as _print


def job(project: Project, request: batch.JobRequest, *, target: str | None,
        site: str | None = None, out: str | Path | None = None, submit: bool = False,
        wait: bool = False, say: Say = _print) -> JobSubmission:
    script = Path(os.path.abspath(out)) if out else None  # a link named is refused, not followed
    if script is not None and script.is_dir() and not script.is_symlink():
        raise UsageError(f"--out {out} is a folder; name the script file to write (e.g. "
                         f"{Path(out) / 'job.sh'})", flag="--out")
    needs = project.job_needs(target, site, kind=request.kind, host_arch=host_arch(),
                              venv=Path(sys.prefix) if sys.prefix != sys.base_prefix else None)
    planned = batch.plan_job(needs, request, environ=os.environ)
    done = submission.deliver(planned, needs, script=script, submit=submit, say=say,
                              runtime=lambda: project.runtime(required=False))
    if wait and done.job_id is not None:
        results = done.job.results_of(done.job_id)
        follow_job(done.job.scheduler, done.job_id, say=say,
                   results=Path(results) if results else None,
                   output=done.job.output_of(done.job_id))
    return done

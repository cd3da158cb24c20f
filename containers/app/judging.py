"""``invoke verdict``: judge a finished batch run from the files it left, as an interactive run is
judged, and write the same ``verdict.json`` (and, for smoke, the perflog line).

The plan is re-made from ``job.json``; missing files or another image's results FAIL.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from containers.app.project import Project
from containers.app.workloads import _record
from containers.batch import job as batch
from containers.batch.request import RecordOptionsError, request_from_record
from containers.batch.schedulers import scheduler_of
from containers.errors import ConfigError, StateError, VerdictFailed
from containers.files import read_regular_json, read_regular_text
from containers.image import provenance
from containers.inputs.sites import get_site
from containers.prove import verdict
from containers.prove.kind import WorkloadKind
from containers.prove.registry import WORKLOADS
from containers.records import JobRecord, Malformed
from containers.report import Say, say_line as _print
from containers.run.workload import IMAGE_RECORD, JOB_RECORD, collect


def judge_results(project: Project, *, results: str | Path, exit_status: int,
                  say: Say = _print) -> verdict.Result:
    """Judge the batch run in ``results``; write its verdict, then raise as a run does."""
    folder = Path(results).resolve()
    job = _job_record(folder)
    kind = _judged_here(folder, job.workload)
    item = project.target(job.target)
    site = get_site(project.sites, job.site)
    try:
        scheduler_of(site, ": no batch job ran there")
    except ConfigError as exc:
        raise VerdictFailed(f"verdict FAILED: {folder / JOB_RECORD}: site: {exc}") from None
    try:
        request = request_from_record(job, kind)
    except RecordOptionsError as exc:
        raise VerdictFailed(f"verdict FAILED: job.json {exc}") from exc
    run = batch.job_run(item, site, settings=project.settings, request=request)
    workload = replace(run.workload, out_dir=folder)
    log = folder / "run.log"
    lines: list[str] = []
    seconds = 0.0
    if log.is_file():
        try:
            lines = read_regular_text(log).splitlines()
        except (OSError, ValueError) as exc:  # a FIFO, a device, a huge file: no log to read
            raise VerdictFailed(f"verdict FAILED: {log} is unreadable ({exc})") from exc
        seconds = max(0.0, log.stat().st_mtime - (folder / JOB_RECORD).stat().st_mtime)
    outcome = collect(workload, returncode=int(exit_status), timed_out=False, lines=lines,
                      seconds=seconds)
    result = verdict.Result(
        kind=run.kind, plan=workload, outcome=outcome,
        partition=os.environ.get("SLURM_JOB_PARTITION") or job.partition,
        given_reasons=tuple(image_reasons(project, item.name, folder)))
    say(f"{run.kind.name}: judging {os.path.relpath(folder)} ({item.name} on site {site.name}, "
        f"{workload.ranks} ranks, launcher exit status {exit_status})")
    _record(project, result, say=say)
    verdict.check(result)
    return result


def _job_record(folder: Path) -> JobRecord:
    """The ``job.json`` the job script wrote; a folder without one is not a job's results."""
    path = folder / JOB_RECORD
    try:
        data = read_regular_json(path)
    except (OSError, ValueError) as exc:
        raise VerdictFailed(f"verdict FAILED: {path} is missing or unreadable ({exc}); "
                            "--results must name a results folder a batch job wrote") from exc
    try:
        return JobRecord.of(data, source=path)
    except Malformed as exc:
        raise VerdictFailed(f"verdict FAILED: {exc}: it describes no job") from None


def _judged_here(folder: Path, workload: object) -> WorkloadKind:
    """The kind of the job's ``workload``, one this checkout judges."""
    kind = WORKLOADS.get(workload) if isinstance(workload, str) else None
    if kind is None:
        raise VerdictFailed(f"verdict FAILED: {folder / JOB_RECORD} names workload "
                            f"{workload!r}, none the tool knows ({', '.join(WORKLOADS)})")
    kind.check_judged_here(folder)
    return kind


def image_reasons(project: Project, target: str, folder: Path) -> list[str]:
    """Why these results may not be of the image there now (its ``image.json``)."""
    try:
        ran = provenance.read(folder / IMAGE_RECORD)
    except StateError as exc:
        return [f"{exc.args[0].split(';')[0]}: these results cannot be tied to an image"]
    now = provenance.read(project.settings.provenance_path(target))
    if not ran.sha256:
        return [f"the run left no record of its image ({IMAGE_RECORD}): these results "
                "cannot be tied to an image"]
    if ran.target not in (None, target):
        return [f"results of another image: the run used target {ran.target}'s, "
                f"not {target}'s"]
    if ran.sha256 != now.sha256:
        return [f"results of another image: the run used sha256 {str(ran.sha256)[:12]}, "
                f"images/{target}.sif is now {str(now.sha256 or 'missing')[:12]}"]
    return []

"""``invoke job --submit --wait`` and ``invoke jobs``: a submitted job followed to its verdict."""

from __future__ import annotations

import json
import os
from pathlib import Path

from containers.app.project import Project
from containers.app.running import CommandExit
from containers.batch import follow
from containers.batch.follow import verdict_of, wait_for
from containers.batch.schedulers import SCHEDULERS, Scheduler
from containers.errors import StateError
from containers.files import read_json_object
from containers.inputs.flags import JOB_ID
from containers.records import Verdict
from containers.report import Say, say_line as _print, show_table


class JobVerdict(CommandExit):
    """A followed job's verdict was not a pass: the tool exits with the verdict's code."""

    fallback = 2


def follow_job(scheduler: Scheduler, job_id: str, *, results: Path | None, output: str,
               say: Say = _print, poll: float | None = None) -> dict:
    """Wait for the job, print its verdict, raise :class:`JobVerdict` unless it passed."""
    state = wait_for(scheduler, job_id, say=say, poll=poll)
    record = verdict_of(results, job_id=job_id, state=state, output=output)
    code = follow.verdict_code(record)
    say(f"verdict: {'PASS' if code == 0 else 'FAIL'} (exit {code})"
        + "".join(f"\n  {reason}" for reason in record.reasons or []))
    if code:
        raise JobVerdict(f"job {job_id}: verdict FAIL (exit {code}); "
                         f"{os.path.relpath(results / 'verdict.json')}", code)
    return record


def _index(project: Project) -> list[dict]:
    """The jobs index's entries; an index that is not a regular file is one line."""
    path = project.settings.results_dir / "jobs" / follow.INDEX
    try:
        return follow.read_index(path.parent)
    except (OSError, ValueError) as exc:  # FileRefused: a FIFO, a device, a huge file
        raise StateError(f"{path}: cannot read the jobs index: {exc}; move it away (invoke "
                         "job --submit starts a new one)") from None


def _row(entry: dict, queries: dict[str, follow.Queries]) -> dict | None:
    """An index entry with its state and verdict; None for one no job of this tool wrote."""
    try:
        job_id = JOB_ID.parse(entry.get("job_id"))
    except ValueError:
        return None
    verdict = None
    if isinstance(entry.get("results"), str) and entry["results"]:
        path = Path(entry["results"]) / "verdict.json"
        record = read_json_object(path)
        if record is not None:
            code = follow.verdict_code(Verdict.of(record, source=path))
            verdict = "PASS" if code == 0 else "FAIL"
    at = entry.get("scheduler_submitted")
    asked = queries.get(str(entry.get("scheduler"))) or queries["slurm"]  # older entries
    state = asked.scheduler.job_state(job_id, asked, submitted=at if isinstance(at, str) else None)
    unknown = "unknown" if asked.silent else "ended"
    return {**entry, "job_id": job_id, "state": state or unknown, "verdict": verdict}


def _cell(value: object) -> str:
    return value if isinstance(value, str) else ""


def jobs_report(project: Project, *, as_json: bool = False, say: Say = _print) -> list[dict]:
    """The jobs this checkout submitted, newest last, with their state now and verdict."""
    queries = {name: follow.Queries(scheduler) for name, scheduler in SCHEDULERS.items()}
    rows = [row for row in (_row(entry, queries) for entry in _index(project)) if row is not None]
    unanswered = {name: asked.silent for name, asked in queries.items() if asked.silent}
    if as_json:
        say(json.dumps({"jobs": rows, "unanswered": unanswered}, indent=2))
        return rows
    if not rows:
        say("no jobs submitted from this checkout yet (invoke job --submit adds one)")
        return rows
    columns = ("job", "scheduler", "workload", "target", "site", "submitted", "results", "state",
               "verdict")
    show_table(f"jobs ({len(rows)})", columns,
               [(r["job_id"], *(_cell(r.get(key)) for key in columns[1:6]),
                 Path(_cell(r.get("results"))).name or "-", r["state"], r["verdict"] or "-")
                for r in rows])
    for name, why in unanswered.items():
        say(f"state unknown of the {name} jobs: {why}")
    return rows

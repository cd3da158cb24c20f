"""Following a submitted job (``invoke job --submit --wait``, ``invoke jobs``): its state from the
scheduler's own tools (unknown, never "ended", where it does not answer), and the jobs index."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping

from containers.batch.schedulers import Ask, Scheduler
from containers.errors import CommandFailed, ContainersError, StateError, VerdictFailed
from containers.files import TooDeep, json_value, read_regular_json, read_regular_text
from containers.host.process import capture
from containers.prove.perflog import append_line
from containers.records import Verdict
from containers.report import Say

#: States after which a job does nothing more (Slurm's and PBS's).
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED", "ENDED", "FINISHED"}
INDEX = "index.jsonl"
POLL_SECONDS = 3.0


class Queries:
    """One listing's state queries to one scheduler; one that did not answer is asked no more."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.silent: str | None = None

    def __call__(self, argv: list[str]) -> str | None:
        if self.silent is not None:
            return None
        try:
            return capture(argv, timeout=60)
        except CommandFailed as exc:
            if exc.returncode is None or self.scheduler.unreachable.search("\n".join(exc.output)):
                self.silent = str(exc)
            return None


def ask(argv: list[str]) -> str | None:
    """One state query's output, None when the tool is missing or it failed."""
    try:
        return capture(argv, timeout=60)
    except ContainersError:
        return None


def wait_for(scheduler: Scheduler, job_id: str, *, say: Say, poll: float | None = None,
             query: Ask = ask) -> str:
    """Poll until the job has ended, saying each change; the last state (or ``UNKNOWN``)."""
    last, started = None, time.monotonic()
    misses = 0
    while True:
        state = scheduler.job_state(job_id, query)
        if state != last and state is not None:
            say(f"job {job_id}: {state} ({time.monotonic() - started:.0f} s)")
            last = state
        if state is None:
            misses += 1
            if misses >= 3:  # forgotten by the scheduler: it has ended
                return last or "UNKNOWN"
        elif state.upper() in ENDED:
            return state
        time.sleep(POLL_SECONDS if poll is None else poll)


def verdict_code(given: Mapping) -> int:
    """The exit status a job's ``verdict.json`` stands for (its own, else 0, 3 or 2)."""
    record = Verdict.of(given)
    if isinstance(record.exit_code, int):
        return record.exit_code
    if record.passed is not True:
        return 2
    return 3 if record.performance is not None and record.performance.state == "fail" else 0


def verdict_of(results: Path | None, *, job_id: str, state: str, output: str) -> Verdict:
    """The job's ``verdict.json``; refused in one line when it is missing (fail closed)."""
    if results is None:
        raise VerdictFailed(f"job {job_id} ended {state}; a build job writes no verdict "
                            f"(output: {os.path.relpath(output)})")
    try:
        record = read_regular_json(results / "verdict.json")
    except (OSError, ValueError) as exc:
        raise VerdictFailed(f"job {job_id} ended {state} without a readable verdict.json in "
                            f"{os.path.relpath(results)} ({exc.__class__.__name__}); its output: "
                            f"{os.path.relpath(output)}") from None
    if not isinstance(record, dict):
        raise VerdictFailed(f"job {job_id}: verdict.json is not an object")
    return Verdict.of(record, source=results / "verdict.json")


def append_index(jobs_dir: Path, entry: dict) -> None:
    append_line(jobs_dir / INDEX, entry)


def read_index(jobs_dir: Path) -> list[dict]:
    """The index's entries, oldest first; a torn line (a killed append) is skipped."""
    path = jobs_dir / INDEX
    if not path.exists():
        return []
    entries = []
    for number, line in enumerate(read_regular_text(path).splitlines(), start=1):
        try:
            entry = json_value(line)
        except TooDeep as exc:
            raise StateError(f"{path}:{number}: {exc}; the tool writes no such line: remove "
                             "it or move the index away") from None
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("job_id"):
            entries.append(entry)
    return entries

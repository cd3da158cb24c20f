"""Following a submitted job: its state changes said once each, an ended or forgotten job, the
verdict it left (a missing one fails closed), and ``invoke jobs``' rows, also over an index that
is not what the tool wrote (one line, never a traceback; one bad entry never hides the others)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from containers.app import following
from containers.app.project import Project
from containers.app.following import JobVerdict, follow_job, jobs_report, verdict_of, wait_for
from containers.batch import follow
from containers.batch.schedulers import SCHEDULERS
from containers.errors import CommandFailed, StateError, VerdictFailed
from containers.inputs.settings import load_settings
from tests.fixtures import ROOT

SLURM = SCHEDULERS["slurm"]


def _answers(*states: str | None):
    """A scheduler whose ``scontrol show job`` answers ``states`` in turn (None: no answer)."""
    queue = list(states)

    def query(argv: list[str]) -> str | None:
        if argv[0] != "scontrol":
            return None  # sacct knows nothing either
        state = queue.pop(0) if len(queue) > 1 else queue[0]
        return None if state is None else f"JobId=7 JobState={state} Reason=None"
    return query


def test_each_state_change_is_said_once_until_the_job_ends() -> None:
    lines: list[str] = []
    state = wait_for(SLURM, "7", say=lines.append, poll=0,
                     query=_answers("PENDING", "PENDING", "RUNNING", "COMPLETED"))
    assert state == "COMPLETED"
    assert [line.split(" (")[0] for line in lines] == [
        "job 7: PENDING", "job 7: RUNNING", "job 7: COMPLETED"]


def test_a_job_the_scheduler_forgot_has_ended() -> None:
    assert wait_for(SLURM, "7", say=lambda _: None, poll=0,
                    query=_answers("RUNNING", None)) == "RUNNING"
    assert wait_for(SLURM, "7", say=lambda _: None, poll=0, query=_answers(None)) == "UNKNOWN"


def test_a_missing_or_odd_verdict_fails_closed(tmp_path) -> None:
    with pytest.raises(VerdictFailed, match="a build job writes no verdict"):
        verdict_of(None, job_id="7", state="COMPLETED", output="out")
    with pytest.raises(VerdictFailed, match="without a readable verdict.json"):
        verdict_of(tmp_path, job_id="7", state="FAILED", output="out")
    (tmp_path / "verdict.json").write_text("[1]")
    with pytest.raises(VerdictFailed, match="verdict.json is not an object"):
        verdict_of(tmp_path, job_id="7", state="COMPLETED", output="out")


def test_follow_job_exits_with_the_verdicts_code(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(follow, "capture", lambda argv, **kwargs: "JobId=7 JobState=COMPLETED")
    (tmp_path / "verdict.json").write_text(json.dumps(
        {"passed": False, "reasons": ["the loss did not fall"]}))
    lines: list[str] = []
    with pytest.raises(JobVerdict) as failed:
        follow_job(SLURM, "7", results=tmp_path, output="out", say=lines.append, poll=0)
    assert failed.value.exit_code == 2
    assert "verdict: FAIL (exit 2)\n  the loss did not fall" in lines
    (tmp_path / "verdict.json").write_text(json.dumps({"passed": True}))
    assert follow_job(SLURM, "7", results=tmp_path, output="out", say=lines.append,
                      poll=0).passed is True


def _no_such_job(argv: list[str], **kwargs) -> str:
    """A scheduler that answers and knows none of the jobs (scontrol: exit 1)."""
    raise CommandFailed(" ".join(argv), argv=argv, returncode=1,
                        output=["slurm_load_jobs error: Invalid job id specified"])


def test_jobs_report_reads_the_index_and_each_verdict(data_project, tmp_path,
                                                      monkeypatch) -> None:
    monkeypatch.setattr(follow, "capture", _no_such_job)
    results = tmp_path / "r"
    results.mkdir()
    (results / "verdict.json").write_text(json.dumps({"passed": True}))
    jobs = data_project.settings.results_dir / "jobs"
    follow.append_index(jobs, {"job_id": "11", "workload": "smoke", "results": str(results)})
    follow.append_index(jobs, {"job_id": "12", "workload": "build", "results": None})
    lines: list[str] = []
    rows = jobs_report(data_project, as_json=True, say=lines.append)
    assert [(r["job_id"], r["state"], r["verdict"]) for r in rows] == [
        ("11", "ended", "PASS"), ("12", "ended", None)]
    assert json.loads(lines[0])["jobs"] == rows


def _project(tmp_path: Path) -> Project:
    settings = load_settings(ROOT, {"results_dir": str(tmp_path / "results")})
    (tmp_path / "results" / "jobs").mkdir(parents=True)
    return Project(root=ROOT, settings=settings)


@pytest.mark.parametrize("make", [
    lambda index: index.symlink_to("/dev/zero"),
    lambda index: os.mkfifo(index),
])
def test_an_index_that_is_not_a_file_is_one_line(tmp_path: Path, make) -> None:
    project = _project(tmp_path)
    index = tmp_path / "results" / "jobs" / "index.jsonl"
    make(index)
    with pytest.raises(StateError) as refused:
        following.jobs_report(project, as_json=True, say=lambda line: None)
    assert str(refused.value).startswith(f"{index}: cannot read the jobs index: not a regular "
                                         "file")
    assert "\n" not in str(refused.value)


def test_a_bad_entry_hides_no_other_job(tmp_path: Path) -> None:
    project = _project(tmp_path)
    good = tmp_path / "good"
    good.mkdir()
    (good / "verdict.json").write_text(json.dumps({"passed": True}))
    lines = [{"job_id": "101", "scheduler": "slurm", "results": 7},
             {"job_id": "102", "scheduler": "slurm", "results": str(good)},
             {"job_id": "--help", "scheduler": "slurm", "results": str(good)},
             {"job_id": "104", "scheduler": ["x"], "results": None}]
    (tmp_path / "results" / "jobs" / "index.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines))
    said: list[str] = []
    rows = following.jobs_report(project, as_json=True, say=said.append)
    assert [row["job_id"] for row in rows] == ["101", "102", "104"]
    assert [row["verdict"] for row in rows] == [None, "PASS", None]
    assert json.loads(said[-1])["jobs"][1]["verdict"] == "PASS"


def test_two_clusters_job_1_are_two_rows(data_project, tmp_path, monkeypatch, capsys) -> None:
    """Job ids repeat across clusters and restarts: the table names each job's own results
    folder (stamp, scheduler and id), and each row reads its own verdict; an entry written
    before the folders were stamped still reads."""
    monkeypatch.setattr(follow, "capture", _no_such_job)
    jobs = data_project.settings.results_dir / "jobs"
    for name, passed in (("cpu-20260101-120000-slurm-job1", True),
                         ("cpu-20260101-130000-slurm-job1", False), ("cpu-job1", True)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "verdict.json").write_text(json.dumps({"passed": passed}))
        follow.append_index(jobs, {"job_id": "1", "scheduler": "slurm", "workload": "smoke",
                                   "results": str(tmp_path / name)})
    rows = jobs_report(data_project, say=lambda line: None)
    assert [r["verdict"] for r in rows] == ["PASS", "FAIL", "PASS"]
    shown = capsys.readouterr().out
    assert "cpu-20260101-120000-slurm-job1" in shown and "cpu-20260101-130000-slurm-job1" in shown
    assert "cpu-job1" in shown and "scheduler" in shown


@pytest.mark.parametrize("silence", [
    CommandFailed("scontrol show job -o 1 timed out after 60s", argv=["scontrol"]),
    CommandFailed("scontrol show job -o 1", argv=["scontrol"], returncode=1, output=[
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"])])
def test_a_scheduler_that_does_not_answer_is_asked_once_and_its_jobs_are_unknown(
        data_project, monkeypatch, silence: CommandFailed) -> None:
    """A controller that is down (or a query that times out) is waited for once per listing,
    not once per job, and its jobs are "unknown", never "ended" (a guess); the listing says
    why, in its table's last line and in the JSON document."""
    asked: list[list[str]] = []

    def silent(argv: list[str], **kwargs) -> str:
        asked.append(argv)
        raise silence

    monkeypatch.setattr(follow, "capture", silent)
    jobs = data_project.settings.results_dir / "jobs"
    for job_id in ("21", "22", "23"):
        follow.append_index(jobs, {"job_id": job_id, "scheduler": "slurm", "results": None})
    lines: list[str] = []
    rows = jobs_report(data_project, say=lines.append)
    assert len(asked) == 1 and [row["state"] for row in rows] == ["unknown"] * 3
    assert lines[-1].startswith("state unknown of the slurm jobs: scontrol show job -o 1")
    document = json.loads(_listed_json(data_project))
    assert set(document["unanswered"]) == {"slurm"}


def _listed_json(project) -> str:
    said: list[str] = []
    jobs_report(project, as_json=True, say=said.append)
    return said[-1]

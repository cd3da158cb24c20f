"""Following a job: its state from Slurm's or PBS's tools, the verdict's exit code, the index."""

from __future__ import annotations

import json

import pytest

from containers.app import following
from containers.batch import follow
from containers.errors import VerdictFailed


@pytest.mark.parametrize("scheduler, text, state", [
    ("slurm", "JobId=7 JobName=run-cpu UserId=root(0) JobState=RUNNING Reason=None", "RUNNING"),
    ("slurm", "CANCELLED by 0\n", "CANCELLED"),
    ("slurm", "", None),
    ("pbs", "Job Id: 12.derecho\n    Job_Name = run-cpu\n    job_state = F\n", "FINISHED"),
    ("pbs", "Job Id: 12.derecho\n    job_state = Q\n", "PENDING"),
])
def test_states_are_read_from_each_schedulers_tools(scheduler, text, state) -> None:
    assert follow.parse_state(scheduler, text) == state


@pytest.mark.parametrize("record, code", [
    ({"passed": True}, 0), ({"passed": False}, 2), ({}, 2),
    ({"passed": True, "performance": {"state": "fail"}}, 3),
    ({"kind": "run", "passed": False, "exit_code": 7}, 7),
])
def test_the_verdicts_exit_code(record, code) -> None:
    assert follow.verdict_code(record) == code


def test_wait_says_each_state_change_and_stops_when_it_ends() -> None:
    answers = iter(["JobState=PENDING", "JobState=PENDING", "JobState=RUNNING",
                    "JobState=COMPLETED"])
    said: list[str] = []
    state = following.wait_for("slurm", "7", say=said.append, poll=0,
                               query=lambda argv: next(answers) if argv[0] == "scontrol"
                               else None)
    assert state == "COMPLETED"
    assert [line.split(" (")[0] for line in said] == ["job 7: PENDING", "job 7: RUNNING",
                                                      "job 7: COMPLETED"]


def test_a_job_that_ended_without_a_verdict_fails_closed(tmp_path) -> None:
    with pytest.raises(VerdictFailed, match="ended COMPLETED without a readable verdict.json"):
        following.verdict_of(tmp_path, job_id="7", state="COMPLETED", output="out")
    (tmp_path / "verdict.json").write_text(json.dumps([1]))
    with pytest.raises(VerdictFailed, match="not an object"):
        following.verdict_of(tmp_path, job_id="7", state="COMPLETED", output="out")


def test_the_index_keeps_one_line_per_job(tmp_path) -> None:
    follow.append_index(tmp_path, {"job_id": "1", "workload": "run"})
    follow.append_index(tmp_path, {"job_id": "2", "workload": "smoke"})
    with open(tmp_path / follow.INDEX, "a") as handle:
        handle.write("{torn")
    follow.append_index(tmp_path, {"job_id": "3", "workload": "run"})
    assert [e["job_id"] for e in follow.read_index(tmp_path)] == ["1", "2", "3"]

"""Following a job: its state from Slurm's or PBS's tools, the verdict's exit code, the index."""

from __future__ import annotations

import json

import pytest

from containers.batch import follow
from containers.errors import StateError, VerdictFailed


@pytest.mark.parametrize("scheduler, text, state", [
    ("slurm", "JobId=7 JobName=run-cpu UserId=root(0) JobState=RUNNING Reason=None", "RUNNING"),
    ("slurm", "CANCELLED by 0\n", "CANCELLED"),
    ("slurm", "", None),
    ("pbs", "Job Id: 12.derecho\n    Job_Name = run-cpu\n    job_state = F\n", "FINISHED"),
    ("pbs", "Job Id: 12.derecho\n    job_state = Q\n", "PENDING"),
])
def test_states_are_read_from_each_schedulers_tools(scheduler, text, state) -> None:
    assert follow.parse_state(scheduler, text) == state


@pytest.mark.parametrize("scheduler, text, submitted", [
    ("slurm", "JobId=1 JobState=RUNNING SubmitTime=2026-11-27T22:41:10 EligibleTime=x",
     "2026-11-27T22:41:10"),
    ("slurm", "CANCELLED by 0|2026-11-27T22:41:11\n", "2026-11-27T22:41:11"),  # sacct
    ("pbs", "Job Id: 1.d\n    ctime = Fri Nov 27 22:41:10 2026\n    job_state = R\n",
     "Fri Nov 27 22:41:10 2026"),
    ("slurm", "JobId=1 JobState=RUNNING", None),
])
def test_submit_times_are_read_from_each_schedulers_tools(scheduler, text, submitted) -> None:
    assert follow.parse_submitted(scheduler, text) == submitted
    assert follow.parse_state(scheduler, text) in ("RUNNING", "CANCELLED")


def test_a_restarted_clusters_job_of_the_same_id_is_another_job() -> None:
    """Job ids start again at 1 on a restarted cluster: the job this tool submitted at another
    time has ended, whatever the new job 1 is doing; an entry without the time (written by an
    earlier version) takes the scheduler's word as before."""
    def ask(argv: list[str]) -> str | None:
        return "JobId=1 JobState=RUNNING SubmitTime=2026-11-27T22:41:16" \
            if argv[0] == "scontrol" else None
    assert follow.job_state("slurm", "1", ask, submitted="2026-11-27T22:41:10") is None
    assert follow.job_state("slurm", "1", ask, submitted="2026-11-27T22:41:16") == "RUNNING"
    assert follow.job_state("slurm", "1", ask) == "RUNNING"
    assert follow.submitted_at("slurm", "1", ask) == "2026-11-27T22:41:16"


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
    state = follow.wait_for("slurm", "7", say=said.append, poll=0,
                            query=lambda argv: next(answers) if argv[0] == "scontrol" else None)
    assert state == "COMPLETED"
    assert [line.split(" (")[0] for line in said] == ["job 7: PENDING", "job 7: RUNNING",
                                                      "job 7: COMPLETED"]


def test_a_job_that_ended_without_a_verdict_fails_closed(tmp_path) -> None:
    with pytest.raises(VerdictFailed, match="ended COMPLETED without a readable verdict.json"):
        follow.verdict_of(tmp_path, job_id="7", state="COMPLETED", output="out")
    (tmp_path / "verdict.json").write_text(json.dumps([1]))
    with pytest.raises(VerdictFailed, match="not an object"):
        follow.verdict_of(tmp_path, job_id="7", state="COMPLETED", output="out")


def test_the_index_keeps_one_line_per_job(tmp_path) -> None:
    follow.append_index(tmp_path, {"job_id": "1", "workload": "run"})
    follow.append_index(tmp_path, {"job_id": "2", "workload": "smoke"})
    with open(tmp_path / follow.INDEX, "a") as handle:
        handle.write("{torn")
    follow.append_index(tmp_path, {"job_id": "3", "workload": "run"})
    assert [e["job_id"] for e in follow.read_index(tmp_path)] == ["1", "2", "3"]


def test_an_index_line_nested_past_reason_is_one_line_naming_the_file_and_line(tmp_path) -> None:
    follow.append_index(tmp_path, {"job_id": "1", "workload": "run"})
    with open(tmp_path / follow.INDEX, "a") as handle:
        handle.write('{"job_id": "2", "a": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(StateError, match=rf"^{tmp_path / follow.INDEX}:2: nested deeper than "):
        follow.read_index(tmp_path)

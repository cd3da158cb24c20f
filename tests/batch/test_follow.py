"""Following a job: the verdict's exit code, a verdict missing, the index of submitted jobs."""

from __future__ import annotations

import json

import pytest

from containers.batch import follow
from containers.errors import StateError, VerdictFailed


@pytest.mark.parametrize("record, code", [
    ({"passed": True}, 0), ({"passed": False}, 2), ({}, 2),
    ({"passed": True, "performance": {"state": "fail"}}, 3),
    ({"kind": "run", "passed": False, "exit_code": 7}, 7),
])
def test_the_verdicts_exit_code(record, code) -> None:
    assert follow.verdict_code(record) == code


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

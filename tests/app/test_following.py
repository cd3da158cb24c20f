"""``invoke jobs`` over a jobs index that is not what the tool wrote: one line, never a
traceback, and one bad entry never hides the others."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from containers import app
from containers.errors import StateError
from containers.inputs.settings import load_settings
from tests.fixtures import ROOT


def _project(tmp_path: Path) -> app.Project:
    settings = load_settings(ROOT, {"results_dir": str(tmp_path / "results")})
    (tmp_path / "results" / "jobs").mkdir(parents=True)
    return app.Project(root=ROOT, settings=settings)


@pytest.mark.parametrize("make", [
    lambda index: index.symlink_to("/dev/zero"),
    lambda index: os.mkfifo(index),
])
def test_an_index_that_is_not_a_file_is_one_line(tmp_path: Path, make) -> None:
    project = _project(tmp_path)
    index = tmp_path / "results" / "jobs" / "index.jsonl"
    make(index)
    with pytest.raises(StateError) as refused:
        app.jobs_report(project, as_json=True, say=lambda line: None)
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
    rows = app.jobs_report(project, as_json=True, say=said.append)
    assert [row["job_id"] for row in rows] == ["101", "102", "104"]
    assert [row["verdict"] for row in rows] == [None, "PASS", None]
    assert json.loads(said[-1])["jobs"][1]["verdict"] == "PASS"

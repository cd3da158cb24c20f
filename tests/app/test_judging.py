"""``invoke verdict``: a batch job's results judged as an interactive run is, from the files the
job left (``job.json``, the image's record, the ranks' files, the report); only a kind this
checkout judges is judged here, and missing or foreign evidence fails closed."""

from __future__ import annotations

import json

import pytest

from containers.app.project import Project
from containers.app.judging import judge_results
from containers.errors import VerdictFailed
from containers.prove import perflog
from containers.publish.checks import find_verdict
from tests.fixtures import ROOT

IMAGE = {"inputs_hash": "a" * 64, "sha256": "b" * 64, "build_date": "2026-11-20T10:00:00Z"}
ROW = {"op": "all_reduce", "bytes": 16 << 20, "oop": {"algbw": 2.0, "busbw": 2.0, "wrong": 0},
       "ip": {"algbw": 2.1, "busbw": 2.1, "wrong": 0}}
#: What jobs/allreduce.py leaves of a clean 2-rank run (its all_reduce.json holds the same).
REPORT = {"schema": 2, "backend": "gloo", "nodes": 1, "world_size": 2, "ok": True,
          "finished": "x", "wrong_total": 0, "ops": ["all_reduce"], "results": [ROW],
          "collectives": {"all_reduce": {"wrong_total": 0, "ok": True}}}


@pytest.fixture
def batch_run(tmp_path):
    """(project, folder, write): a project whose results and images are in ``tmp_path``, the
    results folder a 2-rank local-slurm smoke job left (as its script writes them), and
    ``write({file: content})`` to change what the job left (None: leave that file out)."""
    project = Project.load(ROOT, {"results_dir": str(tmp_path / "results"),
                                  "perflog_dir": str(tmp_path / "perflog"),
                                  "images_dir": str(tmp_path / "images")})
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "cpu.sif.json").write_text(json.dumps({"target": "cpu", **IMAGE}))
    folder = tmp_path / "results" / "smoke" / "cpu-job77"
    files = {
        "job.json": {"target": "cpu", "site": "local-slurm", "workload": "smoke", "nodes": 1,
                     "gpus_per_node": 2, "launcher": "torchrun", "partition": None},
        "image.json": {"target": "cpu", **IMAGE},
        "rank-0.json": {"rank": 0, "wrong": 0, "finished": True},
        "rank-1.json": {"rank": 1, "wrong": 0, "finished": True},
        "allreduce.json": REPORT, "all_reduce.json": REPORT,
    }

    def write(changes: dict | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in {**files, **(changes or {})}.items():
            path = folder / name
            if content is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(json.dumps(content))
        (folder / "run.log").write_text("rank 0: all_reduce ok\n")
    return project, folder, write


def _judge(project, folder, status=0):
    lines: list[str] = []
    try:
        judge_results(project, results=folder, exit_status=status, say=lines.append)
        failure = None
    except VerdictFailed as exc:
        failure = exc
    record = json.loads((folder / "verdict.json").read_text()) \
        if (folder / "verdict.json").is_file() else None
    return record, failure, lines


def test_a_batch_run_gets_the_verdict_an_interactive_run_gets(batch_run) -> None:
    project, folder, write = batch_run
    write()
    record, failure, lines = _judge(project, folder)
    assert failure is None and record["passed"] is True and record["reasons"] == []
    assert (record["kind"], record["target"], record["site"], record["ranks"]) == \
        ("smoke", "cpu", "local-slurm", 2)
    assert record["sha256"] == IMAGE["sha256"] and record["out_dir"] == str(folder)
    assert "verdict: PASS" in lines
    # publish finds the proof a job made
    found = find_verdict(project.settings.results_dir, "cpu", IMAGE["sha256"])
    assert found is not None and found[0] == folder / "verdict.json"
    logged = perflog.log_path(project.settings.perflog_dir, site="local-slurm", partition=None)
    assert IMAGE["sha256"] in logged.read_text()  # the smoke's perflog line


@pytest.mark.parametrize("overrides, status, reason", [
    ({"rank-1.json": None}, 0, "ranks that did not finish: 1 (of 2)"),
    ({}, 1, "the benchmark exited with code 1"),
    ({"image.json": None}, 0, "the run left no record of its image (image.json)"),
    ({"image.json": {"target": "cpu", **IMAGE, "sha256": "c" * 64}}, 0,
     "results of another image: the run used sha256 cccccccccccc, images/cpu.sif is now "
     "bbbbbbbbbbbb"),
    ({"image.json": {"target": "lumi-rocm", **IMAGE}}, 0,
     "results of another image: the run used target lumi-rocm's, not cpu's"),
    ({"allreduce.json": None}, 0, "no allreduce.json was written"),
    # issue 48: the files a run left that prove nothing
    ({"allreduce.json": {**REPORT, "results": []}}, 0,
     "allreduce.json: key 'results' is empty: the benchmark measured no size"),
    ({"allreduce.json": {**REPORT, "results": [{**ROW, "oop": {"busbw": float("nan")}}]}}, 0,
     "allreduce.json: key 'results.0.oop.busbw': Input should be a finite number (got nan)"),
    ({"all_reduce.json": {**REPORT, "ok": False, "wrong_total": 4}}, 0,
     "all_reduce.json: key 'ok' is False, 'wrong_total' 4, but allreduce.json counts 0 wrong "
     "all_reduce values"),
    ({"rank-1.json": {"rank": 1, "wrong": 3, "finished": True}}, 0,
     "rank-1.json: key 'wrong' is 3, but allreduce.json counts 0 wrong values over all ranks"),
    ({"all_reduce.json": {**REPORT, "results": [{**ROW, "bytes": 8}]}}, 0,
     "all_reduce.json: key 'results' differs from allreduce.json's all_reduce rows"),
])
def test_a_batch_verdict_fails_closed(batch_run, overrides, status, reason) -> None:
    project, folder, write = batch_run
    write(overrides)
    record, failure, _ = _judge(project, folder, status)
    assert failure is not None and failure.exit_code == 2
    assert record["passed"] is False
    assert any(reason in r for r in record["reasons"]), record["reasons"]


def test_a_folder_no_job_wrote_is_refused(batch_run, tmp_path) -> None:
    project, folder, write = batch_run
    write({"job.json": None})
    record, failure, _ = _judge(project, folder)
    assert failure is not None and record is None
    assert "job.json is missing or unreadable" in str(failure)


def test_a_job_json_naming_a_site_with_no_scheduler_is_one_line(batch_run) -> None:
    """No batch job ran on a site without a scheduler (``local``): the refusal names the
    job.json, its key and the site profile's, never a KeyError."""
    project, folder, write = batch_run
    write({"job.json": {"target": "cpu", "site": "local", "workload": "smoke", "nodes": 1,
                        "gpus_per_node": 2}})
    record, failure, _ = _judge(project, folder)
    assert failure is not None and record is None
    assert str(failure) == (f"verdict FAILED: {folder / 'job.json'}: site: {ROOT}/sites/"
                            "local.yaml:3: scheduler: site local has no batch scheduler "
                            "(scheduler: none): no batch job ran there")


@pytest.mark.parametrize("workload, message", [
    ("run", "is a run job's; the job judges itself (jobs/runverdict.py writes its verdict.json)"),
    ("build", "is a build job's, which has no verdict"),
    ("smok", "names workload 'smok', none the tool knows (smoke, ddp, deepspeed, fsdp, run, "
             "build)"),
])
def test_only_a_kind_this_checkout_judges_is_judged(batch_run, workload, message) -> None:
    """The workload registry says who judges: the name is never compared here."""
    project, folder, write = batch_run
    write({"job.json": {"target": "cpu", "site": "local-slurm", "workload": workload,
                        "nodes": 1, "gpus_per_node": 2}})
    record, failure, _ = _judge(project, folder)
    assert failure is not None and record is None and message in str(failure)

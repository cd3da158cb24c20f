"""A planned job delivered (containers/batch/submission.py): the package folders its nodes need
planned with it, a submission that writes, submits and indexes, a refusal before any script."""

from __future__ import annotations

import json

import pytest

from containers.batch import follow, judgeenv, submission
from containers.batch.job import JobRequest, plan_job
from containers.errors import UsageError
from containers.prove.registry import kind_of


def _planned(project, target: str, workload: str, site: str | None = None):
    request = JobRequest(kind=kind_of(workload))
    needs = project.job_needs(target, site, kind=request.kind, host_arch="x86_64", venv=None)
    return needs, plan_job(needs, request, environ={"SBATCH_ACCOUNT": "p"})


def test_the_needs_carry_the_packages_its_nodes_need(data_project) -> None:
    """An aarch64 smoke job from x86_64: not ready while its image's Python is unknown, then
    the verdict's packages for it; a build there: the tool's, one folder per Python."""
    unknown = _planned(data_project, "olivia-cuda", "smoke")[0]
    assert unknown.packages == () and not unknown.ready
    record = data_project.settings.provenance_path("olivia-cuda")
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"target": "olivia-cuda", "stack": {"python": "3.12.3"}}))
    [judge] = _planned(data_project, "olivia-cuda", "smoke")[0].packages
    assert (judge.arch, judge.python) == ("aarch64", "3.12")
    build = _planned(data_project, "olivia-cuda", "build")[0]
    assert build.ready and [env.python for env in build.packages] == list(judgeenv.BUILD_PYTHONS)
    assert _planned(data_project, "cpu", "smoke", "local-slurm")[0].packages == ()


def test_a_submission_writes_submits_and_indexes_the_job(data_project, monkeypatch) -> None:
    submitted: list[list[str]] = []
    monkeypatch.setattr(submission, "capture",
                        lambda argv, **kw: submitted.append(argv) or "42")
    monkeypatch.setattr(follow, "ask", lambda argv: None)  # no scheduler to ask its time
    checked: list[object] = []
    monkeypatch.setattr(submission, "check_image", lambda needs, runtime: checked.append(needs))
    jobs_dir = data_project.settings.results_dir / "jobs"
    needs, planned = _planned(data_project, "cpu", "smoke", "local-slurm")
    done = submission.deliver(planned, needs, script=None, submit=True, say=lambda line: None,
                              runtime=lambda: None)
    assert done.job_id == "42" and checked == [needs] and done.script.parent == jobs_dir
    assert submitted == [[*submitted[0][:-1], str(done.script)]]
    [entry] = follow.read_index(jobs_dir)
    assert {key: entry[key] for key in ("job_id", "workload", "target", "site", "script")} == {
        "job_id": "42", "workload": "smoke", "target": "cpu", "site": "local-slurm",
        "script": str(done.script)}


def test_an_unready_job_is_refused_before_any_script_exists(data_project) -> None:
    needs, planned = _planned(data_project, "olivia-cuda", "smoke")
    jobs_dir = data_project.settings.results_dir / "jobs"
    with pytest.raises(UsageError, match="not submitted: .*stack.python"):
        submission.deliver(planned, needs, script=None, submit=True, say=lambda line: None,
                           runtime=lambda: None)
    assert not list(jobs_dir.glob("*.sh")) and planned.output_folder.is_dir()

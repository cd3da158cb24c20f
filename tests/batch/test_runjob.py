"""The body of a ``--workload run`` batch job: the job record, the device gate before the command
(the command runs only when the gate did not fail), the command's output and status kept, and the
verdict by the image's own Python, whose exit status is the job's."""

from __future__ import annotations

import json

from containers.batch.runjob import VERDICT_SCRIPT, run_lines, run_record
from containers.host.runtime import assumed_runtime
from containers.run.command import plan_command

ENVIRON = {"USER": "u", "SLURM_JOB_ID": "1"}


def _lines(project, target: str, *, nodes: int = 1, workdir: str | None = None) -> list[str]:
    item = project.target(target)
    site = project.site_of(item)
    planned = plan_command(item, site, settings=project.settings,
                           runtime=assumed_runtime("apptainer"), command=["python", "t.py"],
                           ranks=1, run_id="t", timeout=0, environ=ENVIRON, strict=False)
    record = run_record({"job": "t"}, planned.command, workdir)
    return run_lines(planned, site=site, settings=project.settings, record=record, nodes=nodes)


def _index(lines: list[str], start: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(start))


def test_the_gate_runs_first_and_a_failed_gate_skips_the_command(data_project) -> None:
    lines = _lines(data_project, "lumi-rocm")
    gate = lines.index("gate=pass") + 1
    assert "/gate.py --expect-gpu rocm --ranks 1 2>&1 | tee " in lines[gate]
    assert lines[gate].endswith("/run.log || gate=fail")
    guard = lines.index("if [[ $gate != fail ]]; then")
    assert guard > gate and lines[guard + 1].endswith("/run.log || status=$?")
    assert " tee -a " in lines[guard + 1] and "python t.py" in lines[guard + 1]
    assert lines[guard + 2] == "fi"
    assert lines[-1].startswith("exec ") and f"/{VERDICT_SCRIPT} " in lines[-1]
    assert '--exit-status "${status}" --gate "${gate}" --expect-gpu rocm' in lines[-1]


def test_a_cpu_site_has_no_gate_and_the_verdict_expects_no_gpu(data_project) -> None:
    lines = _lines(data_project, "cpu")
    assert "gate=none" in lines and "gate=pass" not in lines
    assert not [line for line in lines if "gate.py" in line]
    assert "--expect-gpu none" in lines[-1]


def test_the_job_record_holds_the_command_and_the_job_starts_in_its_workdir(
        data_project) -> None:
    lines = _lines(data_project, "cpu", workdir="/proj/my dir")
    assert lines[0] == "cd '/proj/my dir'"
    record = json.loads(lines[lines.index("JOB") - 1])
    assert record == {"job": "t", "command": ["python", "t.py"], "workdir": "/proj/my dir"}
    assert not _lines(data_project, "cpu")[0].startswith("cd ")


def test_the_record_keeps_its_keys_and_no_workdir_adds_none() -> None:
    assert run_record({"a": 1}, ("x", "y")) == {"a": 1, "command": ["x", "y"]}
    assert run_record({"a": 1}, ("x",), None) == {"a": 1, "command": ["x"]}
    assert run_record({"a": 1}, ("x",), "/w") == {"a": 1, "command": ["x"], "workdir": "/w"}

"""The shell lines of a job's body: host modules (across nodes, those the binds name too), a
build by ``invoke build`` where this checkout's environment runs; a ``--workload run`` job's
device gate before the command (which runs only when the gate did not fail), its record, and the
verdict by the image's own Python, whose exit status is the job's."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from containers.batch.bodies import (VERDICT_SCRIPT, build_body, folder_lines, loaded_modules,
                                     module_lines, run_lines, run_record)
from containers.host.runtime import assumed_runtime
from containers.run.command import plan_command


def test_modules_across_nodes_add_the_transports(data_world) -> None:
    lumi = data_world[1]["lumi"]
    one, many = loaded_modules(lumi, multinode=False), loaded_modules(lumi, multinode=True)
    assert one == list(lumi.modules)
    assert many[:len(one)] == one and set(many) >= set(lumi.transport.modules)
    assert module_lines([]) == []
    assert module_lines(["a b"], multinode=True)[1:4] == ["set +u", "module load 'a b'", "set -u"]


def test_a_build_here_runs_this_checkouts_invoke(data_world) -> None:
    targets, sites = data_world
    lines = build_body(targets["lumi-rocm"], sites["lumi"], root=Path("/proj"),
                       host_arch="x86_64", venv=Path("/proj/.venv"), tool=())
    assert lines[-1] == "/proj/.venv/bin/invoke build --target lumi-rocm"


ENVIRON = {"USER": "u", "SLURM_JOB_ID": "1"}


def _lines(project, target: str, *, nodes: int = 1, workdir: str | None = None) -> list[str]:
    item = project.target(target)
    site = project.site_of(item)
    planned = plan_command(item, site, settings=project.settings,
                           runtime=assumed_runtime("apptainer"), command=["python", "t.py"],
                           ranks=1, run_id="t", timeout=0, environ=ENVIRON, strict=False)
    record = run_record({"target": target, "site": site.name, "workload": "run", "nodes": nodes,
                         "gpus_per_node": 1}, planned.command, workdir)
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
    assert record == {"target": "cpu", "site": "local", "workload": "run", "nodes": 1,
                      "gpus_per_node": 1, "command": ["python", "t.py"], "workdir": "/proj/my dir"}
    assert not _lines(data_project, "cpu")[0].startswith("cd ")


def test_the_record_keeps_its_keys_and_no_workdir_adds_none() -> None:
    assert run_record({"a": 1}, ("x", "y")) == {"a": 1, "command": ["x", "y"]}
    assert run_record({"a": 1}, ("x",), None) == {"a": 1, "command": ["x"]}
    assert run_record({"a": 1}, ("x",), "/w") == {"a": 1, "command": ["x"], "workdir": "/w"}


def test_a_results_folder_that_exists_stops_the_job_and_is_left_alone(tmp_path) -> None:
    """A job id repeats after a cluster restart: the second job finds the first one's folder,
    says so in one line and exits 2, and the first job's log is left as it was."""
    out = tmp_path / "smoke" / "cpu-20260101-120000-slurm-job1"
    script = "\n".join(["set -euo pipefail", *folder_lines(out),
                        f"echo first > {shlex.quote(str(out / 'run.log'))}"])
    first = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert first.returncode == 0 and first.stdout == f"results: {out}\n", first.stderr
    again = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert again.returncode == 2
    assert f"job: FAIL: the results folder {out} exists: it holds another job's" in again.stderr
    assert (out / "run.log").read_text() == "first\n"

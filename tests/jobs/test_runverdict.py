"""The verdict of a run job (jobs/runverdict.py) and the device gate (jobs/gate.py), as the
image's own Python runs them at the end of a job: fail closed, the command's own exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jobs.scripts import sibling

pytest.importorskip("torch")
runverdict = sibling("runverdict")
gate = sibling("gate")

ROOT_CAUSE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_02:33:33
  host      : n1
  rank      : 1 (local_rank: 1)
  exitcode  : 7 (pid: 12)
"""


def _judge(out: Path, log: str | None, *args: str) -> tuple[dict, int]:
    if log is not None:
        (out / "run.log").write_text(log)
    code = runverdict.main(["--out", str(out), *args])
    return json.loads((out / "verdict.json").read_text()), code


def test_a_passing_command(tmp_path) -> None:
    record, code = _judge(tmp_path, "hello\n", "--exit-status", "0", "--gate", "none")
    assert (record["passed"], code, record["reasons"]) == (True, 0, [])
    assert record["stack"]["torch"]


def test_a_degraded_transport_is_recorded_and_said(tmp_path, capsys) -> None:
    """A job that chose TCP sockets (invoke job --transport socket): proven by NCCL's line,
    passed, and named degraded in verdict.json and the printed verdict."""
    record, code = _judge(tmp_path, "NCCL INFO Using network Socket\n", "--exit-status", "0",
                          "--gate", "none", "--transport-name", "TCP sockets",
                          "--transport-expect", r"NCCL INFO Using network Socket\b",
                          "--transport-degraded", "TCP sockets instead of cxi")
    assert (record["passed"], code, record["transport"]["proven"]) == (True, 0, True)
    assert record["degraded"] == "TCP sockets instead of cxi"
    assert capsys.readouterr().out.startswith(
        "verdict: PASS (degraded transport: TCP sockets instead of cxi)")
    assert _judge(tmp_path, "hello\n", "--exit-status", "0", "--gate", "none")[0][
        "degraded"] is None


def test_the_first_failing_ranks_exit_status_is_the_jobs(tmp_path) -> None:
    record, code = _judge(tmp_path, ROOT_CAUSE, "--exit-status", "1", "--gate", "none")
    assert code == 7 and record["exit_status"] == 7 and not record["passed"]
    assert record["reasons"] == ["the command exited with status 7 (rank 1 failed first)"]


@pytest.mark.parametrize("log, args, reason", [
    (None, ("--gate", "none"), "run.log is missing or not a regular file"),
    ("device gate: FAIL on n1 (all of 2 local ranks): expected a cuda GPU\n",
     ("--gate", "fail"), "device gate: FAIL on n1 (all of 2 local ranks): expected a cuda GPU"),
    ("ok\n", ("--gate", "pass"), "device gate: no PASS line in run.log"),
    ("ok\n", ("--gate", "none", "--transport-name", "cxi", "--transport-expect", "Selected "
              "[Pp]rovider is cxi"), "transport: cxi not proven"),
])
def test_missing_evidence_fails_closed(tmp_path, log, args, reason) -> None:
    record, code = _judge(tmp_path, log, "--exit-status", "0", *args)
    assert not record["passed"] and code == 2
    assert record["reasons"][0].startswith(reason)


def test_the_gate_refuses_a_cpu_torch_for_a_gpu_site(capsys) -> None:
    assert gate.main(["--expect-gpu", "cuda", "--ranks", "2"]) == 2
    assert capsys.readouterr().out.startswith("device gate: FAIL on ")
    assert gate.main(["--expect-gpu", "none", "--ranks", "2"]) == 0


@pytest.mark.parametrize("local_rank, expected", [("0", "[0]"), ("1", "[1]")])
def test_pinned_runs_the_command_on_its_ranks_cores(local_rank, expected) -> None:
    import os
    import subprocess
    import sys

    from tests.jobs.scripts import JOBS
    done = subprocess.run(
        [sys.executable, str(JOBS / "pinned.py"), "0:1", "--", sys.executable, "-c",
         "import os; print(sorted(os.sched_getaffinity(0)))"],
        env={**os.environ, "LOCAL_RANK": local_rank}, capture_output=True, text=True,
        timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr
    missing = subprocess.run([sys.executable, str(JOBS / "pinned.py"), "0", "--", "no-such-cmd"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 127 and "cannot run no-such-cmd" in missing.stderr

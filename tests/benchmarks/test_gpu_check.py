"""benchmarks/gpu_check.sh and gpu_check.py: the GPU check, run here in its CPU form (gloo ranks,
every stage judged by the tool's gates) and on a GPU expectation this machine cannot meet, which
must fail stage by stage with the reason. Its run on a real GPU is in docs/gpu-check.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from tests.fixtures import ROOT, procs
from tests.fixtures.disks import Ways
from tests.jobs.scripts import clean_env

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
RUN_TIMEOUT_S = 400
pytestmark = pytest.mark.distributed


def gpu_check(*args: str, **env: str) -> tuple[int, str]:
    proc = procs.start([sys.executable, str(SCRIPT), *args], clean_env(**env))
    code, out, err = procs.finish(proc, RUN_TIMEOUT_S)
    return code, out + err


def test_the_wrapper_is_valid_bash_and_bounded():
    wrapper = (ROOT / "benchmarks" / "gpu_check.sh").read_text()
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)
    assert "timeout" in wrapper and " 480 " in wrapper  # under 8 minutes, whatever hangs


def test_cpu_form_runs_every_stage_and_judges_each(tmp_path):
    """... and leaves nothing in TMPDIR (torchrun left a torchelastic_* folder per stage)."""
    (tmp_path / "tmp").mkdir()
    code, out = gpu_check("--device", "cpu", "--ranks", "2", "--out", str(tmp_path / "out"),
                          TMPDIR=str(tmp_path / "tmp"))
    record = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    stages = {stage["name"]: stage for stage in record["stages"]}
    assert code == 0, out[-3000:]
    assert record["passed"] is True
    assert list(stages) == ["device gate", "collectives (nccl-tests ops)", "train ddp",
                            "train fsdp", "train deepspeed"]
    assert all(stage["verdict"] == "PASS" for stage in stages.values())
    assert "7 ops, #wrong 0" in stages["collectives (nccl-tests ops)"]["figures"]
    assert "loss" in stages["train ddp"]["figures"]
    assert "gpu check: PASS (5 of 5 stages passed)" in out
    for stage in ("smoke", "ddp", "fsdp", "deepspeed"):  # each run's own evidence is kept
        assert (tmp_path / "out" / stage / "run.log").is_file()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_out_never_goes_through_a_folder_someone_else_controls(tmp_path):
    """``--out D`` wrote gpu-check.json through another user's link in a sticky world-writable
    folder: refused in one line before any stage runs, as the package refuses any write; a
    site's own link is followed."""
    ways = Ways(tmp_path)
    for folder, refusal in ways.refusals.items():
        code, out = gpu_check("--device", "cpu", "--stages", "gate", "--out", str(folder / "D"))
        assert code == 2 and re.fullmatch(
            f"gpu_check: --out {folder / 'D'}: {refusal}.*; refusing to write there\n", out), out
    ways.untouched()
    code, out = gpu_check("--device", "cpu", "--ranks", "1", "--stages", "gate",
                          "--out", str(ways.site / "D"))
    assert code == 0 and json.loads((ways.elsewhere / "D" / "gpu-check.json").read_text())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_expectation_without_a_gpu_fails_every_stage_with_the_reason(tmp_path):
    code, out = gpu_check("--device", "cuda", "--ranks", "1", "--stages", "gate,smoke",
                          "--out", str(tmp_path))
    record = json.loads((tmp_path / "gpu-check.json").read_text())
    stages = {stage["name"]: stage for stage in record["stages"]}
    assert code == 1 and record["passed"] is False
    assert stages["device gate"]["verdict"] == "FAIL"
    smoke = stages["collectives (nccl-tests ops)"]
    assert smoke["verdict"] == "FAIL"
    assert any("CPU" in reason for reason in smoke["reasons"]), smoke["reasons"]
    # one GPU cannot prove sendrecv: a row says so rather than a silent pass
    assert stages["collective sendrecv"]["verdict"] == "NOT RUN"
    assert "gpu check: FAIL" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_no_gpu_at_all_is_one_failing_row(tmp_path):
    code, out = gpu_check("--device", "cuda", "--out", str(tmp_path))
    record = json.loads((tmp_path / "gpu-check.json").read_text())
    assert code == 1
    assert record["stages"][0]["reasons"] == [
        "torch sees no CUDA GPU here (torch.cuda.is_available() is False)"]

"""``invoke run -- CMD``: the dry run shows the gate and the command; a real run goes through the
one run-and-log path: the gate first (a failed gate leaves the command unstarted, in one line),
the command's own exit status, ``run.log`` and ``status.json`` beside it. The image's own runs
(Apptainer, torchrun ranks) are in ``tests/run/test_run_image.py``; here the steps are plain
processes so that each outcome is certain. Also: the exit status a run ends with."""

from __future__ import annotations

import dataclasses
import importlib
import json
import platform

import pytest

from containers.errors import VerdictFailed
from containers.host.runtime import assumed_runtime
from containers.run.command import plan_command

#: The module itself (``containers.app.running``; the package exports its commands).
running = importlib.import_module("containers.app.running")


def test_the_dry_run_shows_the_gate_on_a_gpu_site(data_project) -> None:
    lines: list[str] = []
    assert running.run_command(data_project, target="lumi-rocm", command=["python", "x.py"],
                               gpus=8, dry_run=True, say=lines.append) == 0
    assert lines[0] == "run: lumi-rocm on site lumi, 8 ranks"
    assert lines[1].startswith("  gate ") and "gate.py" in lines[1]
    assert lines[2].startswith("  run  ") and lines[2].endswith("python x.py")
    lines.clear()
    running.run_command(data_project, target="cpu", command=["true"], launcher=False,
                        dry_run=True, say=lines.append)
    assert lines[0] == "run: cpu on site local, 1 rank (no launcher)" and len(lines) == 2


def _planned(project, gate: str | None, command: str):
    """A planned run of the cpu image whose gate and command are these shell lines."""
    planned = plan_command(project.target("cpu"), project.sites["local"],
                           settings=project.settings, runtime=assumed_runtime("apptainer"),
                           command=["sh", "-c", command], ranks=1, run_id="t", timeout=0)
    workload = dataclasses.replace(planned.workload, argv=["sh", "-c", command])
    return dataclasses.replace(planned, workload=workload,
                               gate=None if gate is None else ["sh", "-c", gate])


def _status(planned) -> dict:
    return json.loads((planned.workload.out_dir / "status.json").read_text())


def test_a_failed_gate_leaves_the_command_unstarted(data_project, tmp_path) -> None:
    marker = tmp_path / "started"
    planned = _planned(data_project, "echo 'device gate: FAIL no GPU'; exit 2",
                       f"touch {marker}")
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failed:
        running._run(planned, timeout=None, say=lines.append)
    assert str(failed.value).startswith("device gate: FAIL no GPU; sh -c 'touch ")
    assert "was not started" in str(failed.value) and not marker.exists()
    assert _status(planned)["device_gate"] == "fail" and _status(planned)["exit_status"] is None
    assert (planned.workload.out_dir / "run.log").read_text() == "device gate: FAIL no GPU\n"


def test_the_command_exits_with_its_own_status(data_project) -> None:
    planned = _planned(data_project, "echo gate ok", "echo working; exit 5")
    lines: list[str] = []
    with pytest.raises(running.CommandExit) as failed:
        running._run(planned, timeout=None, say=lines.append)
    assert failed.value.exit_code == 5 and ": exit 5; log: " in str(failed.value)
    assert lines == ["gate ok", "working"]
    assert (_status(planned)["device_gate"], _status(planned)["exit_status"]) == ("pass", 5)
    passing = _planned(data_project, None, "echo done")
    running._run(passing, timeout=None, say=lines.append)
    assert lines[-1].startswith("run: exit 0 (") and _status(passing)["device_gate"] is None


def test_the_first_failing_ranks_status_is_the_exit_status() -> None:
    """torchrun exits 1 whatever its ranks exited with; the rank's own status is the run's."""
    assert running.command_status(1, False, (0, 7)) == 7
    assert running.command_status(1, False, (1, -9)) == 1  # killed by a signal: the launcher's
    assert running.command_status(3, False, None) == 3
    assert running.command_status(0, False, None) == 0
    assert running.command_status(1, True, (0, 7)) == 124



def test_a_run_of_an_emulated_image_writes_the_cpu_folder_its_plan_names(
        data_project, tmp_path, monkeypatch) -> None:
    """The plan only names the folder (a dry run writes nothing); the run writes it before its
    steps start, or apptainer would refuse a bind whose source is missing."""
    if platform.machine() == "aarch64":
        pytest.skip("an aarch64 image runs natively here: nothing is emulated")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    planned = plan_command(data_project.target("cpu-arm64"), data_project.sites["local"],
                           settings=data_project.settings, runtime=assumed_runtime("apptainer"),
                           command=["true"], ranks=1, run_id="t", timeout=0)
    sysfs = [b.split(":")[0] for b in planned.workload.binds if ":/sys/devices/system/cpu:" in b]
    assert len(sysfs) == 1 and not (tmp_path / "xdg").exists()
    planned = dataclasses.replace(planned, gate=None, workload=dataclasses.replace(
        planned.workload, argv=["test", "-f", f"{sysfs[0]}/online"]))
    running._run(planned, timeout=None, say=print)  # raises unless the folder was there

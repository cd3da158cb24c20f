"""Integration: ``invoke run`` / ``invoke shell`` with a user's own script in the real CPU image."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from containers.app.project import Project
from containers.app.running import run_command
from containers.app.running import CommandExit
from containers.errors import VerdictFailed
from containers.inputs.settings import load_settings
from tests.fixtures import ROOT
from tests.fixtures.procs import at_a_terminal

pytestmark = [pytest.mark.apptainer, pytest.mark.distributed]

OWN = """\
import torch, torch.distributed as dist
dist.init_process_group()  # the launcher set every variable it needs
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"own: rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item():.0f}", flush=True)
dist.destroy_process_group()
"""
RAISES = """\
import torch.distributed as dist
dist.init_process_group()
if dist.get_rank() == 1:
    raise RuntimeError("own script failed on purpose")
dist.barrier()
"""


def _invoke(*args: str, cwd: Path, root: Path = ROOT,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "invoke"), "-r", str(root), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_torchrun_leaves_nothing_in_tmpdir(cpu_image, factory_cli_project, tmp_path) -> None:
    """Apptainer shares TMPDIR with the image: torchrun's logs go to the results folder, not
    to a ``torchelastic_*`` folder left there by every run."""
    root = factory_cli_project(images_dir=cpu_image.parent, results_dir=tmp_path / "results")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = _invoke("smoke", "--gpus", "2", "--sizes", "1K:4K", "--iters", "2", cwd=tmp_path,
                   root=root, env={**os.environ, "TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(tmp.iterdir()) == []
    (logs,) = (tmp_path / "results" / "smoke").glob("cpu-*/torchelastic")
    assert logs.is_dir()


def test_own_distributed_script_and_a_failing_one(cpu_image, factory_cli_project,
                                                  tmp_path) -> None:
    root = factory_cli_project(images_dir=cpu_image.parent, results_dir=tmp_path / "results")
    work = tmp_path / "work"
    work.mkdir()
    (work / "own.py").write_text(OWN)
    (work / "raises.py").write_text(RAISES)
    done = _invoke("run", "--gpus", "2", "--", "python", "own.py", cwd=work, root=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the two ranks share one pipe: their lines may arrive interleaved
    assert sorted(re.findall(r"own: rank \d of 2 sum \d", done.stdout)) == [
        "own: rank 0 of 2 sum 3", "own: rank 1 of 2 sum 3"]
    assert ("torchrun --standalone --nproc-per-node=2 --log-dir=/opt/containers/results/"
            "torchelastic --no-python python own.py") in done.stdout
    (status,) = (tmp_path / "results" / "run").glob("cpu-*/status.json")
    assert json.loads(status.read_text())["exit_status"] == 0
    assert "own: rank 0 of 2 sum 3" in (status.parent / "run.log").read_text()

    failed = _invoke("run", "--gpus", "2", "--", "python", "raises.py", cwd=work, root=root)
    assert failed.returncode == 1
    assert "RuntimeError: own script failed on purpose" in failed.stdout
    assert failed.stderr.startswith("error: python raises.py: rank 1 failed first (exit 1)")

    shell = _invoke("shell", "--", "python", "-c", "import torch, os; print('in', os.getcwd(),"
                    " torch.__version__)", cwd=work, root=root)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.strip() == f"in {work} 2.13.0+cpu"


def test_a_gpu_site_with_the_cpu_image_stops_before_the_command(cpu_image, factory_project,
                                                                tmp_path) -> None:
    root = factory_project()
    profile = root / "sites" / "local.yaml"
    profile.write_text(profile.read_text() + "gpus: {kind: cuda, per_node: 4}\n")
    settings = load_settings(root, {"images_dir": str(cpu_image.parent),
                                    "results_dir": str(tmp_path / "results")})
    marker = tmp_path / "marker"
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failure:
        run_command(Project(root=root, settings=settings), target="cpu", gpus=2,
                    command=["touch", str(marker)], say=lines.append)
    assert failure.value.exit_code == 2
    assert str(failure.value).startswith("device gate: FAIL on ")
    assert "expected a cuda GPU, but torch is not a cuda build" in str(failure.value)
    assert f"touch {marker} was not started" in str(failure.value)
    assert not marker.exists()
    assert any(line.startswith("  gate ") and " exec --nv " in line for line in lines)
    (status,) = (tmp_path / "results" / "run").glob("cpu-*/status.json")
    assert json.loads(status.read_text())["device_gate"] == "fail"


def test_no_launcher_exits_with_the_commands_own_status(cpu_image, real_project, tmp_path,
                                                        monkeypatch) -> None:
    settings = load_settings(real_project.root, {"results_dir": str(tmp_path / "results")})
    with pytest.raises(CommandExit) as failure:
        run_command(Project(root=real_project.root, settings=settings), target="cpu",
                    launcher=False, command=["sh", "-c", "exit 7"], say=lambda line: None)
    assert failure.value.exit_code == 7


def test_through_the_launcher_the_ranks_own_status_is_the_exit_status(
        cpu_image, factory_cli_project, tmp_path) -> None:
    """torchrun exits 1 whatever its ranks did; ``invoke run`` exits with the first failing
    rank's status (as a batch run of the same command does), and so does status.json; the
    failed command is echoed as a shell would read it."""
    root = factory_cli_project(images_dir=cpu_image.parent, results_dir=tmp_path / "results")
    failed = _invoke("run", "--gpus", "2", "--", "sh", "-c", "exit 7", cwd=tmp_path, root=root)
    assert failed.returncode == 7, failed.stdout[-3000:] + failed.stderr[-3000:]
    assert failed.stderr.startswith("error: sh -c 'exit 7': rank ")
    assert "failed first (exit 7)" in failed.stderr
    (status,) = (tmp_path / "results" / "run").glob("cpu-*/status.json")
    assert json.loads(status.read_text())["exit_status"] == 7


def test_ctrl_c_during_a_run_is_recorded_in_its_status(cpu_image, factory_cli_project,
                                                       tmp_path) -> None:
    root = factory_cli_project(images_dir=cpu_image.parent, results_dir=tmp_path / "results")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "invoke"), "-r", str(root), "run",
                             "--", "sh", "-c", "echo started; sleep 60"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=at_a_terminal)
    try:
        for line in proc.stdout:
            if line.strip() == "started":
                break
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends the tool
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "interrupted", err  # torchrun's own traceback is in the run's output
    (status,) = (tmp_path / "results" / "run").glob("cpu-*/status.json")
    record = json.loads(status.read_text())
    assert record["interrupted"] is True and record["exit_status"] == 130


def test_the_interactive_shell_is_the_images_python_whatever_bashrc_says(
        cpu_image, factory_cli_project, tmp_path) -> None:
    """A ~/.bashrc that puts the host's Python first (conda, pyenv) is not read: the shell's
    python is the image's, as under ``apptainer shell``."""
    root = factory_cli_project(images_dir=cpu_image.parent, results_dir=tmp_path / "results")
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").write_text("#!/bin/sh\necho host-python\n")
    (home / "bin" / "python").chmod(0o755)
    (home / ".bashrc").write_text(f"export PATH={home / 'bin'}:$PATH\n")
    shell = subprocess.run([str(Path(sys.executable).parent / "invoke"), "-r", str(root),
                            "shell"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           input="python -c 'import torch; print(\"torch\", torch.__version__)'"
                                 "\nexit\n", env={**os.environ, "HOME": str(home)})
    assert "host-python" not in shell.stdout
    assert "torch 2." in shell.stdout, shell.stdout + shell.stderr

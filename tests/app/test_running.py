"""``invoke run -- CMD``: the dry run shows the gate and the command; a real run goes through the
one run-and-log path: the gate first (a failed gate leaves the command unstarted, in one line),
the command's own exit status, ``run.log`` and ``status.json`` beside it. The image's own runs
(Apptainer, torchrun ranks) are in ``tests/run/test_run_image.py``; here the steps are plain
processes so that each outcome is certain. Also: the exit status a run ends with."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import subprocess
import sys

import pytest

from containers.app import running
from containers.errors import VerdictFailed
from containers.host.runtime import assumed_runtime
from containers.records import BuildRecord, RunStatus
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from containers.run.command import plan_command
from containers.app.project import Project
from tests.fixtures import ROOT
from tests.fixtures.images import stand_in_image


def test_the_dry_run_shows_the_gate_on_a_gpu_site(data_project) -> None:
    lines: list[str] = []
    assert running.run_command(data_project, target="lumi-rocm", command=["python", "x.py"],
                               gpus=8, dry_run=True, say=lines.append) == 0
    assert lines[0] == "# run: lumi-rocm on site lumi, 8 ranks"
    assert lines[2].startswith("mkdir -p ") and lines[3] == "# gate"
    assert lines[4].startswith("singularity exec ") and "gate.py" in lines[4]
    assert lines[5] == "# run" and lines[6].endswith("python x.py")
    lines.clear()
    running.run_command(data_project, target="cpu", command=["true"], launcher=False,
                        dry_run=True, say=lines.append)
    assert lines[0] == "# run: cpu on site local, 1 rank (no launcher)" and len(lines) == 5


def _planned(project, gate: str | None, command: str):
    """A planned run of the cpu image whose gate and command are these shell lines."""
    planned = plan_command(project.target("cpu"), project.sites["local"],
                           settings=project.settings, runtime=assumed_runtime("apptainer"),
                           command=["sh", "-c", command], ranks=1, run_id="t", timeout=0)
    workload = dataclasses.replace(planned.workload, argv=["sh", "-c", command])
    return dataclasses.replace(planned, workload=workload,
                               gate=None if gate is None else ["sh", "-c", gate])


#: The image's build record a run is handed (what its status.json names).
IMAGE = BuildRecord(target="cpu", sha256="ab" * 32)


def _status(planned) -> dict:
    return json.loads((planned.workload.out_dir / "status.json").read_text())


def test_a_failed_gate_leaves_the_command_unstarted(data_project, tmp_path) -> None:
    marker = tmp_path / "started"
    planned = _planned(data_project, "echo 'device gate: FAIL no GPU'; exit 2",
                       f"touch {marker}")
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failed:
        running._run(planned, image=IMAGE, timeout=None, say=lines.append)
    assert str(failed.value).startswith("device gate: FAIL no GPU; sh -c 'touch ")
    assert "was not started" in str(failed.value) and not marker.exists()
    assert _status(planned)["device_gate"] == "fail" and _status(planned)["exit_status"] is None
    assert (planned.workload.out_dir / "run.log").read_text() == "device gate: FAIL no GPU\n"


def test_the_command_exits_with_its_own_status(data_project) -> None:
    planned = _planned(data_project, "echo gate ok", "echo working; exit 5")
    lines: list[str] = []
    with pytest.raises(running.CommandExit) as failed:
        running._run(planned, image=IMAGE, timeout=None, say=lines.append)
    assert failed.value.exit_code == 5 and ": exit 5; log: " in str(failed.value)
    assert lines == ["gate ok", "working"]
    assert (_status(planned)["device_gate"], _status(planned)["exit_status"]) == ("pass", 5)
    passing = _planned(data_project, None, "echo done")
    running._run(passing, image=IMAGE, timeout=None, say=lines.append)
    assert lines[-1].startswith("run: exit 0 (") and _status(passing)["device_gate"] is None


def test_the_status_names_the_image_that_ran_in_a_record_of_the_users_alone(
        data_project) -> None:
    """Publish takes a passing run as the proof of an image without torch: its status.json
    says which image (the build record's sha256) and target ran what, and when; mode 0644
    whatever the umask, as publish trusts only a file of the user's alone."""
    planned = _planned(data_project, None, "true")
    old = os.umask(0o002)
    try:
        running._run(planned, image=IMAGE, timeout=None, say=[].append)
    finally:
        os.umask(old)
    path = planned.workload.out_dir / "status.json"
    record = RunStatus.of(json.loads(path.read_text()), source=path)
    assert (record.target, record.sha256, record.command, record.exit_status) == \
        ("cpu", "ab" * 32, ["sh", "-c", "true"], 0)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.date)
    assert path.stat().st_mode & 0o777 == 0o644


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
    sysfs = [b.split(":")[0] for b in planned.workload.launch.binds
             if ":/sys/devices/system/cpu:" in b]
    assert len(sysfs) == 1 and not (tmp_path / "xdg").exists()
    planned = dataclasses.replace(planned, gate=None, workload=dataclasses.replace(
        planned.workload, argv=["test", "-f", f"{sysfs[0]}/online"]))
    running._run(planned, image=IMAGE, timeout=None, say=print)  # raises unless it was there


def single_quoted(text: str) -> list[str]:
    """The single-quoted strings of shell ``text``, comments left out: a ``$`` in one is
    printed for the shell to leave alone, which a pasted dry run must not do to a host
    variable."""
    found: list[str] = []
    i, state, start = 0, "", 0
    while i < len(text):
        char = text[i]
        if not state and char == "#" and (i == 0 or text[i - 1] in " \t\n"):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if char == "\\" and state != "'":
            i += 2
            continue
        if not state and char in "'\"":
            state, start = char, i + 1
        elif state and char == state:
            if state == "'":
                found.append(text[start:i])
            state = ""
        i += 1
    return found


def _dry(project, monkeypatch, what: str, target: str, **options) -> str:
    """What ``invoke <what> --dry-run`` prints, outside any allocation."""
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    lines: list[str] = []
    if what == "run":
        running.run_command(project, target=target, command=["python", "t.py"], dry_run=True,
                            say=lines.append, **options)
    elif what == "shell":
        running.shell(project, target=target, dry_run=True, say=lines.append)
    else:
        from containers.app import workloads
        options = {"options": SmokeOptions(gpus=2)} if what == "smoke" else {
            "options": TrainOptions(example="ddp", gpus=2), **options}
        getattr(workloads, "prove" if what == "smoke" else "train")(
            project, target=target, dry_run=True, say=lines.append, **options)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("what, target, options", [
    ("run", "lumi-rocm", {"nodes": 2, "gpus": 8}), ("run", "lumi-rocm", {}),
    ("smoke", "lumi-rocm", {}), ("train", "lumi-rocm", {"nodes": 2}),
    ("shell", "lumi-rocm", {}), ("run", "cpu", {"nodes": 2, "gpus": 2}),
    ("train", "cpu", {}), ("run", "derecho-cuda", {"nodes": 2, "gpus": 4}),
])
def test_a_dry_run_prints_lines_a_shell_runs(data_project, monkeypatch, what, target,
                                             options) -> None:
    """Issue 41: every line is shell (prose as comments), host variables expand where it is
    pasted (none single-quoted), and a run across nodes first sets the rendezvous it names the
    way Slurm gives the first node, in the lines a batch script runs."""
    text = _dry(data_project, monkeypatch, what, target, **options)
    checked = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr + text
    # a profile's $$VAR is the container's variable: quoted so the host shell leaves it alone
    container = tuple(f"{name}=" for site in data_project.sites.values()
                      for name, value in {**site.env, **site.transport.env}.items()
                      if "$$" in value)
    assert not [s for s in single_quoted(text) if "$" in s and not s.startswith(container)], text
    assert "FIRST_NODE_ADDR" not in text
    if options.get("nodes", 1) > 1:  # the first node as the site's scheduler gives it
        first, launch = (('MASTER_ADDR=$(sed -n 1p "$PBS_NODEFILE")', "mpiexec ")
                         if target == "derecho-cuda" else
                         ('head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST"', "srun "))
        assert text.index(first) < text.index("\nexport MASTER_ADDR MASTER_PORT\n") \
            < text.index(launch)
        assert '"--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}"' in text
    if target == "lumi-rocm" and what != "shell":
        assert '"MIOPEN_USER_DB_PATH=/tmp/' in text and '-miopen-cache-${SLURM_JOB_ID}"' in text


def test_invoke_run_dry_run_for_lumi_pastes() -> None:
    """The command line itself (the issue's case): ``invoke run --dry-run`` across nodes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_JOB")}
    shown = subprocess.run([sys.executable, "-m", "invoke", "run", "--target", "lumi-rocm",
                            "--nodes", "2", "--gpus", "8", "--dry-run", "--", "python", "t.py"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert subprocess.run(["bash", "-n"], input=shown.stdout, text=True).returncode == 0
    assert not [s for s in single_quoted(shown.stdout) if "$" in s], shown.stdout


def test_the_scanner_finds_what_a_shell_leaves_single_quoted() -> None:
    """Comments, double quotes and a backslash-escaped quote open no single-quoted string."""
    text = "# it's a comment\necho 'a $X' \"b '$Y'\" \\'c\n"
    assert single_quoted(text) == ["a $X"]


@pytest.mark.slurm
@pytest.mark.apptainer
def test_a_dry_runs_lines_run_as_shown_in_an_allocation(slurm_cluster, tmp_path,
                                                        monkeypatch) -> None:
    """The printed lines of the CPU target's dry run across two nodes, run as they are inside
    ``salloc`` on the local cluster: the rendezvous lines find the first node, and both nodes'
    torchrun (a stand-in that prints its arguments) get its address and port."""
    images = tmp_path / "images"
    images.mkdir()
    stand_in_image(images / "cpu.sif")
    project = Project.load(ROOT, {"images_dir": str(images),
                                  "results_dir": str(tmp_path / "results")})
    text = _dry(project, monkeypatch, "run", "cpu", nodes=2, gpus=2)
    ran = slurm_cluster.run(["salloc", "--nodes=2", "--ntasks-per-node=1", "bash", "-euo",
                             "pipefail", "-c", text], timeout=120, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr + text
    assert f"rendezvous: {slurm_cluster.node_addr}:" in ran.stdout
    started = [line for line in ran.stdout.splitlines() if line.startswith("torchrun ")]
    assert len(started) == 2, ran.stdout
    assert all(f"--rdzv-endpoint={slurm_cluster.node_addr}:2" in line
               and "--no-python python t.py" in line for line in started), started

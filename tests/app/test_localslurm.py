"""``invoke local-slurm``: the real cluster started, used by a job, and stopped: its daemons by
their PIDs, its job steps by their tie to it, nothing else."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from containers.app import jobs
from containers.app.following import jobs_report
from containers.app.localslurm import local_slurm
from containers.app.project import Project
from containers.errors import StateError, describe
from containers.host import slurmcluster
from containers.batch.request import JobRequest
from containers.prove.registry import kind_of
from tests.fixtures import ROOT
from tests.fixtures.images import stand_in_image
from tests.fixtures.procs import alive, launched
from tests.fixtures.slurm import ensure_installed, wait_job


@pytest.fixture
def folder(monkeypatch):
    """The command's cluster folder, in a temp folder munged (user munge) can reach."""
    parent = Path(tempfile.mkdtemp(prefix="local-slurm-test-"))
    parent.chmod(0o755)
    root = parent / "local-slurm"
    monkeypatch.setenv("CONTAINERS_LOCAL_SLURM_DIR", str(root))
    yield root
    shutil.rmtree(parent, ignore_errors=True)


def test_a_folder_closed_to_munge_is_refused(tmp_path, monkeypatch) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    monkeypatch.setenv("CONTAINERS_LOCAL_SLURM_DIR", str(closed / "cluster"))
    if slurmcluster.missing_programs() or os.geteuid() != 0:
        pytest.skip("needs root and Slurm installed to get as far as the folder")
    with pytest.raises(StateError, match=f"{closed} is closed to other users"):
        local_slurm(Project.load(ROOT, {}), action="start")


def test_status_and_stop_when_none_runs(folder) -> None:
    project = Project.load(ROOT, {})
    with pytest.raises(StateError, match="no local Slurm cluster is running"):
        local_slurm(project, action="status")
    said: list[str] = []
    local_slurm(project, action="stop", say=said.append)
    assert said == [f"no local Slurm cluster is running (in {folder}); nothing to stop"]


def test_a_planted_record_is_refused_by_every_action_and_nothing_is_signalled(folder) -> None:
    """``--stop`` as root killed the PIDs of a cluster.json anyone can plant in the fixed
    folder, and ``--status`` hung on it: each action refuses it in one line, at once."""
    sleeper = launched(["sleep", "60"])
    try:
        folder.mkdir(mode=0o755)
        (folder / "cluster.json").write_text(json.dumps({
            "conf": str(folder / "slurm.conf"), "nodes": ["n1"],
            "pids": {"slurmctld": sleeper.pid, "munged": sleeper.pid}}))
        (folder / "slurm.conf").write_text("SlurmctldHost=nowhere(192.0.2.1)\n")
        project = Project.load(ROOT, {})
        for action in ("stop", "status", "start"):
            began = time.monotonic()
            with pytest.raises(StateError, match=rf"PID {sleeper.pid} is 'sleep 60', not "
                                                 "slurmctld; refusing to signal it") as caught:
                local_slurm(project, action=action)
            assert time.monotonic() - began < 5 and describe(caught.value)[0].count("\n") == 0
        assert sleeper.poll() is None and (folder / "cluster.json").is_file()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_folder_of_another_user_is_neither_read_nor_removed(folder) -> None:
    folder.mkdir(mode=0o755)
    (folder / "slurm.conf").write_text("theirs\n")
    os.chown(folder, 65534, 65534)
    for action in ("stop", "start"):
        with pytest.raises(StateError, match=f"^{folder} is owned by uid 65534"):
            local_slurm(Project.load(ROOT, {}), action=action)
    assert (folder / "slurm.conf").read_text() == "theirs\n"


def test_a_site_without_slurm_is_refused(folder) -> None:
    with pytest.raises(StateError, match="site derecho has scheduler pbs, not slurm"):
        local_slurm(Project.load(ROOT, {}), action="start", site="derecho")
    assert not folder.exists()


@pytest.mark.parametrize("argv, message", [
    ([], "--start: name one of --start, --stop or --status"),
    (["--stop", "--site", "lumi"], "--site: goes with --start"),
    (["--start", "--stop"], "--start: name one of --start, --stop or --status"),
])
def test_cli_refuses_unclear_requests(argv, message) -> None:
    result = subprocess.run([sys.executable, "-m", "invoke", "local-slurm", *argv], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr.strip()) == (1, f"error: {message}")


@pytest.mark.slurm
def test_start_run_a_job_and_stop_by_pid(folder) -> None:
    ensure_installed()
    project = Project.load(ROOT, {})
    said: list[str] = []
    local_slurm(project, action="start", say=said.append)
    cluster = slurmcluster.load(folder)
    try:
        assert f"export SLURM_CONF={folder / 'slurm.conf'}" in said
        assert "nodes: n1, n2; partitions: debug" in said
        with pytest.raises(StateError, match="already running"):
            local_slurm(project, action="start")
        shown: list[str] = []
        local_slurm(project, action="status", say=shown.append)
        assert shown[0] == "nodes: n1, n2; partitions: debug"
        job = cluster.run(["sbatch", "--parsable", "--nodes=2", "-o", str(folder / "out.txt"),
                           "--wrap", "srun hostname"]).stdout.strip()
        assert wait_job(cluster, job, timeout=120)["JobState"] == "COMPLETED"
        assert len((folder / "out.txt").read_text().split()) == 2  # a task on each node
    finally:
        local_slurm(project, action="stop", say=said.append)
    assert said[-1].startswith(f"stopped the local Slurm cluster in {folder}: munged (PID ")
    assert not any(alive(pid) for pid in cluster.pids.values())
    assert not folder.exists()


def _job_process(cluster: slurmcluster.SlurmCluster, seconds: int) -> psutil.Process:
    """The running process of a batch job ``sleep SECONDS``, once Slurm has started it."""
    job = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                       f"sleep {seconds}"]).stdout.strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline", "environ"]):
            if proc.info["cmdline"] == ["sleep", str(seconds)] \
                    and (proc.info["environ"] or {}).get("SLURM_JOB_ID") == job:
                return proc
        time.sleep(0.3)
    pytest.fail(f"job {job} (sleep {seconds}) did not start in 60 s")


def _ended(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slurm
def test_stop_ends_the_job_steps_and_spares_the_users_processes(folder) -> None:
    """Issue 48: ``--stop`` signalled every process carrying the cluster's SLURM_CONF, which
    users export: it killed their ``sleep``, the ``timeout`` running it and the ``timeout``
    running the stop itself, cutting the stop off half way. Only the job's own process (under
    the cluster's slurmstepd) ends, and no slurmstepd of the cluster is left."""
    ensure_installed()
    project = Project.load(ROOT, {})
    local_slurm(project, action="start", say=lambda line: None)
    user_env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    bystander = launched(["timeout", "300", "sleep", "301"], env=user_env)
    try:
        step = _job_process(slurmcluster.load(folder), 302)
        stopped = subprocess.run(["timeout", "120", sys.executable, "-m", "invoke",
                                  "local-slurm", "--stop"], env=user_env, cwd=ROOT,
                                 capture_output=True, text=True)
        assert (stopped.returncode, stopped.stderr) == (0, ""), stopped
        assert "stopped the local Slurm cluster" in stopped.stdout and "job steps" in stopped.stdout
        assert _ended(step) and not folder.exists()
        gone = slurmcluster.SlurmCluster(root=folder, conf=folder / "slurm.conf")
        assert slurmcluster.steps(gone) == []  # no slurmstepd of it is left
        assert bystander.poll() is None
        assert [p.cmdline() for p in psutil.Process(bystander.pid).children()] == [["sleep", "301"]]
    finally:
        for proc in psutil.Process(bystander.pid).children():
            proc.kill()
        bystander.kill()
        bystander.wait()
        local_slurm(project, action="stop", say=lambda line: None)


@pytest.mark.slurm
def test_a_half_stopped_cluster_is_named_so_and_a_second_stop_finishes_it(folder) -> None:
    """A stop cut off after the Slurm daemons left munged, a job step and the record: ``--status``
    said nothing ran and ``--start`` refused until a second ``--stop``. Each now names what
    still runs and that ``--stop`` finishes it, and it does."""
    ensure_installed()
    project = Project.load(ROOT, {})
    local_slurm(project, action="start", say=lambda line: None)
    cluster = slurmcluster.load(folder)
    step = _job_process(cluster, 303)
    try:
        for name in ("slurmctld", "slurmd-n1", "slurmd-n2"):
            os.kill(cluster.pids[name], signal.SIGKILL)
        while any(alive(cluster.pids[n]) for n in cluster.pids if n != "munged"):
            time.sleep(0.1)
        half = (rf"^the local Slurm cluster in {folder} is half-stopped: slurmctld, slurmd-n1, "
                rf"slurmd-n2 exited, still running: munged \(PID {cluster.pids['munged']}\), "
                r"job steps \(PIDs [\d, ]+\); finish stopping it: invoke local-slurm --stop$")
        for action in ("status", "start"):
            with pytest.raises(StateError, match=half):
                local_slurm(project, action=action)
        assert not _ended(step)
    finally:
        said: list[str] = []
        local_slurm(project, action="stop", say=said.append)
    assert said[0].startswith(f"stopped the local Slurm cluster in {folder}: munged (PID ")
    assert _ended(step) and not alive(cluster.pids["munged"]) and not folder.exists()
    with pytest.raises(StateError, match="no local Slurm cluster is running"):
        local_slurm(project, action="status")


def _stand_in_project(tmp_path: Path) -> Project:
    """The real project with a stand-in cpu image (:func:`stand_in_image`: its torchrun starts
    no ranks): a smoke job then finds no rank's results and its verdict says so, which is
    evidence enough to see it kept."""
    images = tmp_path / "images"
    images.mkdir()
    stand_in_image(images / "cpu.sif")
    return Project.load(ROOT, {"results_dir": str(tmp_path / "results"),
                               "perflog_dir": str(tmp_path / "results" / "perflog"),
                               "images_dir": str(images)})


def _job_on_a_fresh_cluster(project: Project, folder: Path, monkeypatch) -> tuple:
    """``invoke local-slurm --start``, one smoke job to its end, ``invoke jobs`` while the
    cluster still runs, ``--stop``: the submission, the controller's word on it, the rows."""
    local_slurm(project, action="start", say=lambda line: None)
    monkeypatch.setenv("SLURM_CONF", str(folder / "slurm.conf"))
    try:
        submitted = jobs.job(project, JobRequest(kind=kind_of("smoke")), target="cpu",
                             site="local-slurm", submit=True, say=lambda line: None)
        info = wait_job(slurmcluster.load(folder), submitted.job_id, timeout=120)
        rows = jobs_report(project, as_json=True, say=lambda line: None)
    finally:
        local_slurm(project, action="stop", say=lambda line: None)
    return submitted, info, rows


@pytest.mark.slurm
@pytest.mark.apptainer
def test_a_restarted_cluster_job_1_leaves_the_first_job_1s_evidence(folder, tmp_path,
                                                                      monkeypatch) -> None:
    """Issue 41: a second local cluster starts its job ids at 1 again; the second job 1 gets
    its own output and results folder, and the first one's log and verdict are kept."""
    ensure_installed()
    project = _stand_in_project(tmp_path)
    first, _, _ = _job_on_a_fresh_cluster(project, folder, monkeypatch)
    kept = {name: (Path(first.job.results_of(first.job_id)) / name).read_text()
            for name in ("run.log", "verdict.json")}
    time.sleep(1.1)  # the stamp names the second
    again, info, rows = _job_on_a_fresh_cluster(project, folder, monkeypatch)
    assert first.job_id == again.job_id == "1", "both clusters begin at job 1"
    assert info["JobState"] == "FAILED"  # the stand-in image: the verdict's exit 2
    folders = [Path(s.job.results_of(s.job_id)) for s in (first, again)]
    assert folders[0] != folders[1]
    assert {name: (folders[0] / name).read_text() for name in kept} == kept
    for results in folders:
        assert json.loads((results / "verdict.json").read_text())["passed"] is False
        assert "run.log" in os.listdir(results)
    assert first.job.output_of("1") != again.job.output_of("1")
    # invoke jobs on the second cluster: two rows "1", each with its own folder and verdict;
    # the first job 1 has ended (the controller's job 1 was submitted at another time)
    assert [(r["job_id"], r["results"], r["verdict"]) for r in rows] == [
        ("1", str(f), "FAIL") for f in folders]
    assert rows[0]["state"] == "ended" and rows[1]["state"] == "FAILED"
    assert rows[0]["scheduler_submitted"] != rows[1]["scheduler_submitted"] is not None

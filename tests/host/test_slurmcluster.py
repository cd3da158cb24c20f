"""The Slurm cluster's record, its daemons and processes, without starting it (the started cluster is
tested by tests/app/test_localslurm.py and used by every ``slurm`` test)."""

from __future__ import annotations

import json
import os
import sys

import psutil
import pytest

from containers.errors import StateError
from containers.host import slurmcluster
from tests.fixtures.procs import launched


def test_record_round_trip(tmp_path) -> None:
    cluster = slurmcluster.SlurmCluster(root=tmp_path, conf=tmp_path / "slurm.conf",
                                        pids={"munged": 11, "slurmctld": 12})
    slurmcluster.save(cluster)
    again = slurmcluster.load(tmp_path)
    assert (again.conf, again.nodes, again.pids) == (cluster.conf, ("n1", "n2"), cluster.pids)
    assert slurmcluster.load(tmp_path / "none") is None


# --- a record anyone could plant (issue 42, item 3)

@pytest.fixture
def sleeper():
    """A process of the test's own (``sleep 60``) that a planted record names."""
    proc = launched(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _fake_daemon(program: str, *argv: str, **popen: object):
    """A process whose command line reads ``program ARGV...`` (Python sleeping under that name)."""
    return launched([program, "-c", "import time; time.sleep(60)", *argv], reads=[program],
                    executable=sys.executable, **popen)


def _plant(root, pids: dict, **extra) -> None:
    root.mkdir(exist_ok=True)
    root.chmod(0o755)
    record = {"conf": str(root / "slurm.conf"), "nodes": ["n1"], "pids": pids, **extra}
    (root / slurmcluster.STATE_FILE).write_text(json.dumps(record))
    (root / slurmcluster.STATE_FILE).chmod(0o644)


def test_a_recorded_pid_that_is_not_the_daemon_is_refused_and_not_signalled(
        tmp_path, sleeper) -> None:
    _plant(tmp_path / "c", {"slurmctld": sleeper.pid})
    cluster = slurmcluster.load(tmp_path / "c")
    with pytest.raises(StateError, match=rf"names PID {sleeper.pid} as slurmctld, but PID "
                                         rf"{sleeper.pid} is 'sleep 60', not slurmctld; "
                                         "refusing to signal it") as caught:
        slurmcluster.stop(cluster)
    assert "\n" not in str(caught.value)
    assert sleeper.poll() is None and (tmp_path / "c").is_dir()


def test_only_the_clusters_own_daemon_started_when_recorded_is_stopped(tmp_path) -> None:
    """The program, the cluster's own config in its argv and the start time must all match."""
    root = tmp_path / "c"
    conf = str(root / "slurm.conf")
    other = _fake_daemon("slurmctld", "-f", "/etc/slurm/slurm.conf")
    ours = _fake_daemon("slurmctld", "-f", conf)
    try:
        _plant(root, {"slurmctld": other.pid})
        with pytest.raises(StateError, match="is a slurmctld without this cluster's "
                                             f"{conf} in its command line"):
            slurmcluster.stop(slurmcluster.load(root))
        started = psutil.Process(ours.pid).create_time()
        _plant(root, {"slurmctld": ours.pid}, started={"slurmctld": started - 100})
        with pytest.raises(StateError, match="started at another time"):
            slurmcluster.stop(slurmcluster.load(root))
        assert other.poll() is None and ours.poll() is None
        _plant(root, {"slurmctld": ours.pid}, started={"slurmctld": started})
        slurmcluster.stop(slurmcluster.load(root))
        assert ours.wait(timeout=15) == -15 and other.poll() is None and not root.exists()
    finally:
        for proc in (other, ours):
            proc.kill()
            proc.wait()


def test_the_accounting_daemons_are_known_by_their_data_and_slurm_conf(tmp_path) -> None:
    """mariadbd by its own --datadir; slurmdbd, which takes no config in its argv, by the
    SLURM_CONF it runs with: another's is refused, not signalled."""
    root = tmp_path / "c"
    conf = str(root / "slurm.conf")
    mariadbd = _fake_daemon("mariadbd", "--datadir=/var/lib/mysql")
    slurmdbd = _fake_daemon("slurmdbd", env={**os.environ, "SLURM_CONF": "/etc/slurm/x.conf"})
    ours = _fake_daemon("slurmdbd", env={**os.environ, "SLURM_CONF": conf})
    try:
        for name, proc, why in (("mariadbd", mariadbd, f"--datadir={root / 'mysql'}"),
                                ("slurmdbd", slurmdbd, f"SLURM_CONF={conf}")):
            _plant(root, {name: proc.pid})
            with pytest.raises(StateError, match=f"is a {name} without this cluster's {why}"):
                slurmcluster.stop(slurmcluster.load(root))
        _plant(root, {"slurmdbd": ours.pid})
        slurmcluster.stop(slurmcluster.load(root))
        assert ours.wait(timeout=15) == -15 and mariadbd.poll() is None is slurmdbd.poll()
    finally:
        for proc in (mariadbd, slurmdbd, ours):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("plant, why", [
    ("group-writable", r"c is writable by its group or others \(mode 775\)"),
    ("record-writable", r"cluster.json is writable by its group or others \(mode 646\)"),
    ("link", r"c is a link \(to .*real\)"),
    pytest.param("other-uid", r"c/cluster.json is owned by uid 65534, not this user \(0\)",
                 marks=pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")),
])
def test_a_record_not_this_users_alone_is_refused(tmp_path, sleeper, plant, why) -> None:
    root = tmp_path / "c"
    _plant(tmp_path / "real" if plant == "link" else root, {"slurmctld": sleeper.pid})
    if plant == "group-writable":
        root.chmod(0o775)
    elif plant == "record-writable":
        (root / slurmcluster.STATE_FILE).chmod(0o646)
    elif plant == "link":
        root.symlink_to(tmp_path / "real")
    else:
        os.chown(root / slurmcluster.STATE_FILE, 65534, 65534)
    with pytest.raises(StateError, match=rf"{why}; refusing to use the local Slurm cluster's"):
        slurmcluster.load(root)
    assert sleeper.poll() is None


def test_a_record_naming_another_config_is_refused(tmp_path) -> None:
    _plant(tmp_path / "c", {"slurmctld": 12})
    record = json.loads((tmp_path / "c" / slurmcluster.STATE_FILE).read_text())
    (tmp_path / "c" / slurmcluster.STATE_FILE).write_text(json.dumps(
        {**record, "conf": "/etc/slurm/slurm.conf"}))
    with pytest.raises(StateError, match="is not a record this tool wrote"):
        slurmcluster.load(tmp_path / "c")

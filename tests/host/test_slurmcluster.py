"""The Slurm cluster's configuration and record, without starting it (the started cluster is
tested by tests/app/test_localslurm.py and used by every ``slurm`` test)."""

from __future__ import annotations

import os

import pytest

from containers.host import slurmcluster
from containers.inputs.sites import load_sites
from tests.fixtures import ROOT


def test_two_node_conf(tmp_path) -> None:
    conf = slurmcluster.two_node_conf(tmp_path, [7001, 7002, 7003], tmp_path / "munge.socket")
    text = conf.read_text()
    assert "SlurmctldPort=7001" in text and "SlurmdPort=7002" in text
    assert "NodeName=n1 " in text and "NodeName=n2 " in text and "Port=7003" in text
    assert "PartitionName=debug Nodes=n1,n2 Default=YES" in text
    assert f"AuthInfo=socket={tmp_path / 'munge.socket'}" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="stand-in GPU devices are made with mknod (root)")
def test_site_shape_without_partitions_gets_a_default_one(tmp_path) -> None:
    site = load_sites(ROOT)["local-slurm"]
    assert not site.partitions
    text = slurmcluster.site_conf_writer(site)(tmp_path, [1, 2, 3], tmp_path / "s").read_text()
    assert "PartitionName=debug Nodes=local-slurm1,local-slurm2 Default=YES" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="stand-in GPU devices are made with mknod (root)")
def test_site_shape_carries_partitions_gres_and_the_account_rule(tmp_path) -> None:
    site = load_sites(ROOT)["lumi"]
    text = slurmcluster.site_conf_writer(site)(tmp_path, [1, 2, 3], tmp_path / "s").read_text()
    assert "PartitionName=standard-g " in text and "MaxTime=2880 " in text
    assert f"Gres=gpu:{site.gpus.gres_type or 'lumi'}:{site.gpus.per_node}" in text
    assert ("JobSubmitPlugins=lua" in text) == site.account_required
    # memory is allocated, and a node has what LUMI-G allocates (480 of 512 GiB), not more
    assert "SelectTypeParameters=CR_Core_Memory" in text
    assert "RealMemory=491520 " in text and "MaxMemPerNode=491520 " in text


def test_record_round_trip(tmp_path) -> None:
    cluster = slurmcluster.SlurmCluster(root=tmp_path, conf=tmp_path / "slurm.conf",
                                        pids={"munged": 11, "slurmctld": 12})
    slurmcluster.save(cluster)
    again = slurmcluster.load(tmp_path)
    assert (again.conf, again.nodes, again.pids) == (cluster.conf, ("n1", "n2"), cluster.pids)
    assert slurmcluster.load(tmp_path / "none") is None


def test_alive_is_false_for_a_finished_process() -> None:
    assert slurmcluster.alive(os.getpid())
    assert not slurmcluster.alive(2 ** 22 + 1)


def test_the_job_steps_left_are_found_by_their_slurm_conf_and_stopped(tmp_path) -> None:
    """What :func:`slurmcluster.stop` does after the daemons: a process still carrying this
    cluster's SLURM_CONF is found (not one of another cluster's) and stopped by its PID, even
    one that ignores SIGTERM."""
    import subprocess
    import sys

    conf = tmp_path / "slurm.conf"
    ignores_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
                   "print(flush=True); time.sleep(60)"
    steps = [subprocess.Popen([sys.executable, "-c", ignores_term], stdout=subprocess.PIPE,
                              env={**os.environ, "SLURM_CONF": str(path)})
             for path in (conf, tmp_path / "other.conf")]
    try:
        for step in steps:
            step.stdout.readline()  # its handler is set
        assert slurmcluster.carrying(f"SLURM_CONF={conf}") == [steps[0].pid]
        slurmcluster.stop_pids([steps[0].pid], grace=0.5)
        assert steps[0].wait(timeout=5) == -9 and steps[1].poll() is None
    finally:
        for step in steps:
            step.kill()
            step.wait()

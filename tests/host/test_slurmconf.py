"""The slurm.conf of a cluster on this machine, both shapes, written without starting it."""

from __future__ import annotations

import json
import os

import pytest

from containers.host import slurmconf
from containers.inputs.sites import load_sites
from tests.fixtures import ROOT


def test_two_node_conf(tmp_path) -> None:
    conf = slurmconf.two_node_conf(tmp_path, [7001, 7002, 7003], tmp_path / "munge.socket")
    text = conf.read_text()
    assert "SlurmctldPort=7001" in text and "SlurmdPort=7002" in text
    assert "NodeName=n1 " in text and "NodeName=n2 " in text and "Port=7003" in text
    assert "PartitionName=debug Nodes=n1,n2 Default=YES" in text
    assert f"AuthInfo=socket={tmp_path / 'munge.socket'}" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="stand-in GPU devices are made with mknod (root)")
def test_site_shape_without_partitions_gets_a_default_one(tmp_path) -> None:
    site = load_sites(ROOT)["local-slurm"]
    assert not site.partitions
    text = slurmconf.site_conf_writer(site)(tmp_path, [1, 2, 3], tmp_path / "s").read_text()
    assert "PartitionName=debug Nodes=local-slurm1,local-slurm2 Default=YES" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="stand-in GPU devices are made with mknod (root)")
def test_site_shape_carries_partitions_gres_and_the_account_rule(tmp_path) -> None:
    site = load_sites(ROOT)["lumi"]
    text = slurmconf.site_conf_writer(site)(tmp_path, [1, 2, 3], tmp_path / "s").read_text()
    assert "PartitionName=standard-g " in text and "MaxTime=2880 " in text
    # GRES typed by the GPU model (MI250X (GCD)), not the site
    assert f"Gres=gpu:mi250x:{site.gpus.per_node}" in text and not site.gpus.gres_type
    assert ("JobSubmitPlugins=lua" in text) == site.account_required
    # memory is allocated, and a node has what LUMI-G allocates (480 of 512 GiB), not more
    assert "SelectTypeParameters=CR_Core_Memory" in text
    assert "RealMemory=491520 " in text and "MaxMemPerNode=491520 " in text


@pytest.mark.skipif(os.geteuid() != 0, reason="stand-in GPU devices are made with mknod (root)")
def test_site_shape_has_the_features_its_required_constraints_name(tmp_path) -> None:
    """Nodes carry every feature the profile's required lines name; the submit filter refuses
    a job without them (GPU jobs only, for gpu_directives), after the account."""
    site = load_sites(ROOT)["olivia"]
    site = site.model_copy(update={"job": site.job.model_copy(update={
        "directives": ("--constraint=cpu_ok",), "gpu_directives": ("-C gpu&hbm80g",)})})
    assert slurmconf.required_features(site) == {
        "cpu_ok": ("--constraint=cpu_ok", ""), "gpu": ("-C gpu&hbm80g", "gpu"),
        "hbm80g": ("-C gpu&hbm80g", "gpu")}
    text = slurmconf.site_conf_writer(site)(tmp_path, [1, 2, 3, 4], tmp_path / "s").read_text()
    assert " Feature=cpu_ok,gpu,hbm80g Gres=gpu:gh200:4 " in text
    lua = (tmp_path / "job_submit.lua").read_text()
    assert lua.index("job_desc.account") < lua.index('"cpu_ok"') < lua.index('"hbm80g"')
    assert lua.count("tres_per_node") == 2  # the GPU jobs' two features


@pytest.mark.skipif(os.geteuid() != 0, reason="stand-in GPU devices are made with mknod (root)")
def test_a_site_with_qos_is_shaped_with_accounting(tmp_path) -> None:
    """QoS need slurmdbd: its conf (mode 0600, as slurmdbd demands) beside slurm.conf, and the
    sacctmgr calls that make each QoS with its limits and the user's default QoS."""
    site = load_sites(ROOT)["olivia"].model_copy(update={"default_qos": "devel"})
    text = slurmconf.site_conf_writer(site)(tmp_path, [1, 2, 3, 4], tmp_path / "s").read_text()
    assert "AccountingStorageType=accounting_storage/slurmdbd\n" in text
    assert "AccountingStoragePort=4\n" in text and "accounting_storage/none" not in text
    assert "DbdPort=4\n" in (tmp_path / "slurmdbd.conf").read_text()
    assert (tmp_path / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    calls = json.loads((tmp_path / "accounting.json").read_text())
    assert ["sacctmgr", "-i", "add", "qos", "devel", "Flags=DenyOnLimit", "MaxWall=120"] in calls
    assert calls[-1][-1] == "DefaultQOS=devel"
    lumi = load_sites(ROOT)["lumi"]  # no QoS: no accounting
    assert "accounting_storage/none" in slurmconf.site_conf_writer(lumi)(
        tmp_path / "l", [1, 2, 3, 4], tmp_path / "s").read_text()

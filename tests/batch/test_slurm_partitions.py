"""Every site's batch script against a real Slurm shaped like that site (``sbatch --test-only``).

The test cluster (tests/fixtures/slurm.py, ``site_shaped_cluster``) carries the site profile's
partitions by name with their time limits and node counts, nodes with the site's cores, memory
and GPUs (GRES of the profile's type), and a submit filter (job_submit.lua) that requires an
account where the site does.
``sbatch --test-only`` asks slurmctld whether it would run the script, without running it: every
rendered script must be accepted as it is written; an over-limit ``--time`` and a missing account
must be rejected by Slurm itself, as the tool rejects them before writing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from containers import walltime
from containers.batch import job as batch, judgeenv
from containers.errors import UsageError
from containers.prove import registry
from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings
from containers.inputs.sites import Qos, load_sites
from containers.prove.registry import kind_of
from tests.fixtures import ROOT
from tests.fixtures.slurm import TEST_ACCOUNT, site_shaped_cluster

pytestmark = pytest.mark.slurm
SITES = {"lumi": "lumi-rocm", "puhti": "puhti-cuda", "mahti": "mahti-cuda",
         "olivia": "olivia-cuda"}
#: A 2-node job's partition where the default one takes a single node.
MULTINODE = {"mahti": "gpumedium"}


@pytest.fixture(scope="module", params=list(SITES))
def shaped(request, tmp_path_factory):
    """(site, cluster, render): the site's profile, its Slurm, and a renderer of its jobs."""
    targets, sites = load_targets(ROOT), load_sites(ROOT)
    site = sites[request.param]
    settings = load_settings(tmp_path_factory.mktemp("proj"), {})

    arch = targets[SITES[site.name]].arch
    # Olivia's aarch64 jobs judge with the image's Python (tests/batch/test_judgeenv.py)
    judge = judgeenv.plan(settings.root, arch=arch, python="3.12") if arch != "x86_64" else None

    def render(workload: str, *, on=None, **kw) -> batch.Job:
        return batch.plan_job(batch.JobNeeds(targets[SITES[site.name]], on or site,
                              settings=settings, host_arch="x86_64", site_arch=arch,
                              venv=ROOT / ".venv", judge=judge),
                              batch.JobRequest(kind=kind_of(workload), **kw), environ={})
    with site_shaped_cluster(site) as cluster:
        yield site, cluster, render


def _test_only(cluster, text: str, tmp_path: Path, *flags: str):
    script = tmp_path / "job.sh"
    script.write_text(text)
    return cluster.run(["sbatch", "--test-only", *flags, str(script)], check=False)


def test_every_rendered_script_is_accepted(shaped, tmp_path) -> None:
    site, cluster, render = shaped
    checked = []
    for workload in registry.WORKLOADS:
        if workload == "build" and not site.fakeroot and SITES[site.name] != "lumi-rocm":
            continue  # refused before anything is written (test_job.py)
        for nodes in ((1,) if workload == "build" else (1, 2)):
            partition = MULTINODE.get(site.name) if nodes > 1 else None
            command = {"command": ("python", "own.py", "it's $(id)\n`id`")} \
                if workload == "run" else {}
            job = render(workload, nodes=nodes, partition=partition, account=TEST_ACCOUNT,
                         **command)
            result = _test_only(cluster, job.text, tmp_path)
            assert result.returncode == 0 and "to start at" in result.stderr, \
                f"{site.name} {workload} x{nodes}:\n{result.stderr}\n{job.text}"
            checked.append((workload, nodes))
    assert len(checked) >= 8


def test_an_over_limit_time_is_refused_by_slurm_and_by_the_tool(shaped, tmp_path) -> None:
    site, cluster, render = shaped
    partition = site.partition(site.default_partition)
    over = walltime.format(partition.max_time + 60)
    job = render("smoke", account=TEST_ACCOUNT)
    slurm = _test_only(cluster, job.text, tmp_path, f"--time={over}")
    assert slurm.returncode != 0 and "time limit" in slurm.stderr.lower(), slurm.stderr
    with pytest.raises(UsageError, match=f"--time {over} is more than partition "
                                         f"{partition.name} of site {site.name} allows"):
        render("smoke", account=TEST_ACCOUNT, time=over)


def test_a_missing_account_is_refused_by_slurm_and_by_the_tool(shaped, tmp_path) -> None:
    site, cluster, render = shaped
    assert site.account_required
    with pytest.raises(UsageError, match=f"site {site.name} requires an account"):
        render("smoke")
    # The script the tool would write if the profile did not know: Slurm refuses it too.
    unknowing = render("smoke", on=site.model_copy(update={"account_required": False}))
    assert "--account" not in unknowing.text
    slurm = _test_only(cluster, unknowing.text, tmp_path)
    assert slurm.returncode != 0 and "account" in slurm.stderr.lower(), slurm.stderr
    other = _test_only(cluster, unknowing.text, tmp_path, "--account=someone_else")
    assert other.returncode != 0 and "account" in other.stderr.lower(), other.stderr


def test_a_memory_over_ask_is_refused_by_slurm_and_the_rendered_job_accepted(shaped,
                                                                            tmp_path) -> None:
    """The nodes have what a node allocates (the partition's allocatable_gb), not its nominal
    memory: one GB per GPU more than the partition's share is refused by Slurm itself (Puhti:
    4 x 94G > 373 GiB), and the job the tool renders (its share, 93G there) is accepted."""
    site, cluster, render = shaped
    partition = site.partition(site.default_partition)
    share = partition.gpu_share(site.gpus_in(partition))
    assert share is not None and site.mem_per_gpu_gb(partition) <= share
    job = render("ddp", account=TEST_ACCOUNT)
    assert f"#SBATCH --mem-per-gpu={site.mem_per_gpu_gb(partition)}G\n" in job.text
    accepted = _test_only(cluster, job.text, tmp_path)
    assert accepted.returncode == 0 and "to start at" in accepted.stderr, accepted.stderr
    over = _test_only(cluster, job.text, tmp_path, f"--mem-per-gpu={share + 1}G")
    assert over.returncode != 0, over.stderr
    assert "memory" in over.stderr.lower() or "node configuration" in over.stderr.lower(), \
        over.stderr


def test_a_constraint_expression_reaches_sbatch_as_written(tmp_path) -> None:
    """Issue 49: -C gpu and a quoted constraint expression in #SBATCH lines read by sbatch as
    the expression (nodes with both features accept it; a feature none has is refused)."""
    targets, sites = load_targets(ROOT), load_sites(ROOT)
    mahti = sites["mahti"]
    site = mahti.model_copy(update={"job": mahti.job.model_copy(update={
        "gpu_directives": ("-C gpu&hbm80g",)})})
    settings = load_settings(tmp_path, {})

    def text(*directives: str) -> str:
        return batch.plan_job(batch.JobNeeds(targets["mahti-cuda"], site, settings=settings,
                                             host_arch="x86_64", site_arch="x86_64"),
                              batch.JobRequest(kind=kind_of("smoke"), account=TEST_ACCOUNT,
                                               directives=directives), environ={}).text
    assert "#SBATCH -C 'gpu&hbm80g'\n" in text()
    with site_shaped_cluster(site) as cluster:
        accepted = _test_only(cluster, text("--constraint=[gpu|hbm80g]"), tmp_path)
        plain = _test_only(cluster, text(), tmp_path)
        refused = _test_only(cluster, text("--constraint=gpu&hbm80g&bigmem"), tmp_path)
    for result in (accepted, plain):
        assert result.returncode == 0 and "to start at" in result.stderr, result.stderr
    assert refused.returncode != 0 and "Invalid feature specification" in refused.stderr, \
        refused.stderr


def test_the_sites_qos_are_enforced_through_slurmdbd(tmp_path) -> None:
    """Issue 49: a site's QoS (time and node limits) enforced by Slurm itself through slurmdbd
    and a private MariaDB: the tool's job under the default QoS is accepted, one over its time
    or nodes refused by Slurm as by the tool, another QoS's longer limit taken, an unknown QoS
    refused."""
    targets, sites = load_targets(ROOT), load_sites(ROOT)
    olivia = sites["olivia"]
    debug = Qos(max_time="00:30:00", max_nodes=1, source="a 30-minute default")
    debug._name = "debug"
    site = olivia.model_copy(update={"qos": {"debug": debug, **olivia.qos},
                                     "default_qos": "debug"})
    settings = load_settings(tmp_path, {})
    judge = judgeenv.plan(settings.root, arch="aarch64", python="3.12")
    job = batch.plan_job(batch.JobNeeds(targets["olivia-cuda"], site, settings=settings,
                                        host_arch="x86_64", site_arch="aarch64", judge=judge),
                         batch.JobRequest(kind=kind_of("smoke"), account=TEST_ACCOUNT), environ={})
    assert "#SBATCH --qos=debug\n" in job.text
    with pytest.raises(UsageError, match="QoS debug"):
        batch.plan_job(batch.JobNeeds(targets["olivia-cuda"], site, settings=settings,
                                      host_arch="x86_64", site_arch="aarch64", judge=judge),
                       batch.JobRequest(kind=kind_of("smoke"), account=TEST_ACCOUNT, time="01:00:00"),
                       environ={})
    with site_shaped_cluster(site) as cluster:
        results = {flags: _test_only(cluster, job.text, tmp_path, *flags) for flags in (
            (), ("--time=60",), ("--nodes=2",), ("--qos=devel", "--time=60"),
            ("--qos=nonexistent",))}
    said = {flags: result.stderr for flags, result in results.items()}
    assert results[()].returncode == 0 and "to start at" in said[()], said
    assert "QOSMaxWallDurationPerJobLimit" in said[("--time=60",)], said
    assert "QOSMaxNodePerJobLimit" in said[("--nodes=2",)], said
    assert results[("--qos=devel", "--time=60")].returncode == 0, said
    assert "Invalid qos specification" in said[("--qos=nonexistent",)], said

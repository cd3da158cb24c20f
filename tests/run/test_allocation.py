"""Inside a Slurm allocation (``invoke smoke --nodes M``): finding the allocation, refusing node
counts it cannot give, and the placement: srun one task per node, torchrun's c10d rendezvous at
the first node's NodeAddr (the real cluster: tests/batch/test_slurm_jobs.py)."""

from __future__ import annotations

import pytest

from containers.errors import ConfigError, StateError, UsageError
from containers.host.runtime import assumed_runtime
from containers.report import deferred
from containers.run import allocation
from containers.run.allocation import Allocation, check_nodes, current_allocation, placement
from containers.run.launchers import LAUNCHERS
from containers.run.rendezvous import RENDEZVOUS
from containers.run.workload import plan_workload

ALLOC = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "nid[1-2]",
         "SLURM_CPUS_ON_NODE": "56", "USER": "alice"}


def _scontrol(argv: list[str]) -> str:
    """What scontrol answers on the cluster (recorded)."""
    if argv[:3] == ["scontrol", "show", "hostnames"]:
        return "nid001\nnid002\n"
    return "NodeName=nid001 Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=nid001 Port=0\n"


def test_allocation_detection_and_limits() -> None:
    found = current_allocation(ALLOC)
    assert found == Allocation(job_id="4242", nodes=2, nodelist="nid[1-2]", cpus_on_node=56)
    assert current_allocation({}) is None
    assert current_allocation({"SLURM_JOBID": "7", "SLURM_NNODES": "3",
                               "SLURM_NODELIST": "n[1-3]"}) == Allocation("7", 3, "n[1-3]")
    with pytest.raises(StateError, match="SLURM_JOB_NUM_NODES='x' is not a node count"):
        current_allocation({**ALLOC, "SLURM_JOB_NUM_NODES": "x"})
    check_nodes(2, found)
    check_nodes(1, None)
    with pytest.raises(UsageError, match=r"^--nodes 3 is more than this allocation has: job "
                                         r"4242 holds 2 nodes \(nid\[1-2\]\)$"):
        check_nodes(3, found)
    with pytest.raises(UsageError, match="not inside one"):
        check_nodes(2, None)
    with pytest.raises(UsageError, match="--nodes must be at least 1"):
        check_nodes(0, found)
    with pytest.raises(UsageError, match="--nodes 3 is more"):
        allocation.across_nodes(3, environ=ALLOC)
    assert allocation.across_nodes(1, environ=ALLOC) is None
    assert allocation.across_nodes(1, environ={}) is None
    planned = allocation.across_nodes(2, dry_run=True, environ={})
    # a dry run outside an allocation: the variables the lines it prints set, as they expand
    assert planned.nodes == 2 and planned.rendezvous.id == deferred("SLURM_JOB_ID")
    assert planned.rendezvous.endpoint == f"{deferred('MASTER_ADDR')}:{deferred('MASTER_PORT')}"
    assert allocation.shown_lines(planned) == allocation.SLURM.shell()
    on_pbs = allocation.across_nodes(2, dry_run=True, environ={}, scheduler="pbs")
    assert on_pbs.launcher is LAUNCHERS["mpiexec-torchrun"]
    assert on_pbs.rendezvous.id == deferred("PBS_JOBID")
    assert allocation.shown_lines(on_pbs) == RENDEZVOUS["pbs"].shell()
    assert allocation.shown_lines(None) == [] == allocation.shown_lines(
        placement(current_allocation(ALLOC), 2, query=_scontrol))


def test_placement_is_srun_per_node_at_the_first_nodes_address() -> None:
    where = placement(current_allocation(ALLOC), 2, query=_scontrol)
    assert where.launcher is LAUNCHERS["torchrun"]  # the registry's own object
    assert (where.nodes, where.cpus_per_task) == (2, 56)
    assert (where.rendezvous.endpoint, where.rendezvous.id) == ("10.1.2.3:24242", "4242")


def test_smoke_across_nodes_plans_srun_and_torchrun(data_world, data_settings) -> None:
    targets, sites = data_world
    where = placement(current_allocation(ALLOC), 2, query=_scontrol)
    common = dict(settings=data_settings, run_id="r", script="allreduce.py", timeout=60,
                  report_name="allreduce.json", args=["--sizes", "1K:1M"])
    plan = plan_workload(targets["lumi-rocm"], sites["lumi"], kind="smoke", ranks=8,
                         runtime=assumed_runtime("singularity"), environ=ALLOC, placement=where,
                         **common)
    assert plan.argv[:6] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=56",
                             "--kill-on-bad-exit=1", "singularity"]
    image = plan.argv.index(str(data_settings.images_dir / "lumi-rocm.sif"))
    assert plan.argv[image + 1:image + 9] == [
        "torchrun", "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.1.2.3:24242", "--rdzv-id=4242",
        "--log-dir=/opt/containers/results/torchelastic", "/opt/containers/jobs/allreduce.py"]
    assert (plan.ranks, plan.launch.nodes) == (16, 2)
    assert "MIOPEN_USER_DB_PATH=/tmp/alice-miopen-cache-4242" in plan.argv
    # Olivia across nodes: the multi-node binds/env, expanded from the job's environment.
    olivia_env = {**ALLOC, "EBROOTLIBFABRIC": "/sw/fabric", "EBROOTNCCL": "/sw/nccl",
                  "EBROOTAWSMINOFIMINNCCL": "/sw/ofi"}
    olivia = dict(kind="train-ddp", ranks=4, runtime=assumed_runtime("apptainer"), **common)
    train = plan_workload(targets["olivia-cuda"], sites["olivia"], environ=olivia_env,
                          placement=where, **olivia)
    assert "/sw/fabric/lib:/opt/libfabric/lib" in train.argv and "FI_PROVIDER=cxi" in train.argv
    with pytest.raises(ConfigError, match=r"needs \$EBROOTLIBFABRIC"):
        plan_workload(targets["olivia-cuda"], sites["olivia"], environ=ALLOC, placement=where,
                      **olivia)
    # One node stays as it was: no srun, no multi-node binds.
    single = plan_workload(targets["olivia-cuda"], sites["olivia"], environ=ALLOC, **olivia)
    assert single.argv[0] == "apptainer" and "FI_PROVIDER=cxi" not in single.argv
    # The site's per-job limit holds across the allocation's nodes as in a batch job.
    nine = placement(Allocation("4242", 9, "nid[1-9]"), 9, query=_scontrol)
    with pytest.raises(ConfigError, match="olivia allows at most 32 GPUs per job; --nodes 9 x "
                                          "--gpus 4 = 36"):
        plan_workload(targets["olivia-cuda"], sites["olivia"], environ=olivia_env,
                      placement=nine, **olivia)

"""The launcher registry: each launcher's argv from the ingredients of a planned run, the job
shape it asks for, and how a site's launcher (or ``--launcher``) is checked against the registry
and the site's scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError, UsageError
from containers.host.runtime import Runtime
from containers.run import launchers
from containers.run.launchers import (LAUNCHERS, Launch, MpiexecTorchrun, Shape, SrunPerGpu,
                                      Torchrun, cores_for, ingredients)
from containers.run.rendezvous import Rendezvous

RUNTIME = Runtime(binary="singularity", flavour="singularity", version="site")
RDZV = Rendezvous(host="10.1.2.3", port="24242", id="4242")
EXEC = ["singularity", "exec", "--rocm", "--bind", "/j:/jobs:ro", "--env", "A=1", "/i/x.sif"]


def _launch(**fields) -> Launch:
    base = dict(runtime=RUNTIME, image=Path("/i/x.sif"), script="/jobs/allreduce.py",
                args=("--iters", "5"), gpu_flag="--rocm", binds=("/j:/jobs:ro",), env={"A": "1"},
                ranks_per_node=8)
    return Launch(**{**base, **fields})


def test_torchrun_standalone_here_and_c10d_in_a_job_step() -> None:
    torchrun = LAUNCHERS["torchrun"]
    assert torchrun.argv(_launch()) == [
        *EXEC, "torchrun", "--standalone", "--nproc-per-node=8", "/jobs/allreduce.py",
        "--iters", "5"]
    across = torchrun.argv(_launch(nodes=2, rendezvous=RDZV, step=True, cpus_per_task=56,
                                   torchrun="/usr/local/bin/torchrun"))
    assert across == [
        "srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=56", "--kill-on-bad-exit=1",
        *EXEC, "/usr/local/bin/torchrun", "--nnodes=2", "--nproc-per-node=8",
        "--rdzv-backend=c10d", "--rdzv-endpoint=10.1.2.3:24242", "--rdzv-id=4242",
        "/jobs/allreduce.py", "--iters", "5"]
    # One node in a batch job: still a job step (srun), torchrun standalone.
    assert torchrun.argv(_launch(step=True))[:4] == [
        "srun", "--nodes=1", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    with pytest.raises(ValueError):
        torchrun.argv(_launch(nodes=2, rendezvous=RDZV))  # several nodes only as a job step
    with pytest.raises(ValueError):
        torchrun.argv(_launch(nodes=2, step=True))  # several nodes need a rendezvous


def test_mpiexec_starts_one_torchrun_per_node() -> None:
    """The PALS options are the site's (Derecho's job.step_options), not the launcher's."""
    argv = LAUNCHERS["mpiexec-torchrun"].argv(_launch(nodes=2, rendezvous=RDZV, step=True,
                                                      step_options=("--cpu-bind", "none")))
    assert argv[:7] == ["mpiexec", "-n", "2", "--ppn", "1", "--cpu-bind", "none"]
    srun = LAUNCHERS["torchrun"].argv(_launch(nodes=2, rendezvous=RDZV, step=True))
    assert srun[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert argv[7:] == srun[4:]
    # Not as a job step: just torchrun, as on any node.
    assert LAUNCHERS["mpiexec-torchrun"].argv(_launch()) == LAUNCHERS["torchrun"].argv(_launch())


def test_srun_per_gpu_one_task_per_gpu_with_masks() -> None:
    masks = tuple(f"0x{1 << i:x}" for i in range(8))
    argv = LAUNCHERS["srun-per-gpu"].argv(_launch(
        ranks_per_node=2, nodes=2, rendezvous=RDZV, step=True, cpus_per_task=7, cpu_masks=masks,
        visible_devices="ROCR_VISIBLE_DEVICES", args=("--out", "/r s")))
    assert argv[:6] == ["srun", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=7",
                        "--cpu-bind=mask_cpu:0x1,0x2", "--kill-on-bad-exit=1"]
    assert argv[6:14] == [*EXEC[:7], "--env"]
    assert argv[14:18] == ["MASTER_ADDR=10.1.2.3", "--env", "MASTER_PORT=24242", "/i/x.sif"]
    assert argv[18:] == ["bash", "-c", "ROCR_VISIBLE_DEVICES=$SLURM_LOCALID RANK=$SLURM_PROCID "
                         "LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS exec python3 "
                         "/jobs/allreduce.py --out '/r s'"]
    with pytest.raises(ValueError):
        LAUNCHERS["srun-per-gpu"].argv(_launch(step=True))  # needs the rendezvous variables
    with pytest.raises(ValueError):
        LAUNCHERS["srun-per-gpu"].argv(_launch(rendezvous=RDZV, args=("\x00JOB\x00",)))


def test_shapes_and_cores(data_world) -> None:
    _, sites = data_world
    lumi, olivia, cpu = sites["lumi"], sites["olivia"], sites["local-slurm"]
    assert LAUNCHERS["torchrun"].shape(lumi, 8) == Shape(1, 56, False)
    assert LAUNCHERS["srun-per-gpu"].shape(lumi, 8) == Shape(8, 7, True)
    assert LAUNCHERS["mpiexec-torchrun"].shape(sites["derecho"], 4) == Shape(1, 64, False)
    assert cores_for(olivia, 1) == 72 and cores_for(cpu, 2) is None
    assert cores_for(cpu.model_copy(update={"cores_per_node": 16}), 2) == 16
    assert ingredients(lumi) == dict(gpu_flag="--rocm", torchrun="torchrun",
                                     cpu_masks=lumi.cpu_bind,
                                     visible_devices="ROCR_VISIBLE_DEVICES", step_options=())
    assert ingredients(sites["derecho"])["step_options"] == ("--cpu-bind", "none")


@pytest.mark.parametrize("name, prefix", [
    ("torchrun", ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=7",
                  "--kill-on-bad-exit=1"]),
    ("srun-per-gpu", ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=7",
                      "--kill-on-bad-exit=1"]),
    ("mpiexec-torchrun", ["mpiexec", "-n", "2", "--ppn", "1"]),
])
def test_every_launcher_gives_every_job_steps_prefix(name, prefix) -> None:
    """One process per node (a job's device gate): each launcher's own way, the site's step
    options after its own."""
    launch = _launch(nodes=2, rendezvous=RDZV, step=True, cpus_per_task=7,
                     step_options=("--x", "y"))
    launcher = LAUNCHERS[name]
    assert launcher.node_step(launch) == [*prefix, "--x", "y"]
    # the workload's own step starts with the same launcher word and the site's options
    argv = launcher.argv(launch)
    assert argv[0] == prefix[0] and argv[argv.index("singularity") - 2:][:2] == ["--x", "y"]


def test_registry_and_site_resolution(data_world) -> None:
    _, sites = data_world
    assert list(LAUNCHERS) == ["torchrun", "srun-per-gpu", "mpiexec-torchrun"]
    assert [type(x) for x in LAUNCHERS.values()] == [Torchrun, SrunPerGpu, MpiexecTorchrun]
    assert launchers.for_site(sites["lumi"]) is LAUNCHERS["torchrun"]
    assert launchers.for_site(sites["derecho"]) is LAUNCHERS["mpiexec-torchrun"]
    # torchrun on a PBS site: one torchrun per node, started by mpiexec.
    assert launchers.for_site(sites["derecho"], "torchrun") is LAUNCHERS["mpiexec-torchrun"]
    torchrun, per_gpu = LAUNCHERS["torchrun"], LAUNCHERS["srun-per-gpu"]
    assert (torchrun.on("pbs"), torchrun.on("slurm"), per_gpu.on("pbs")) == (
        LAUNCHERS["mpiexec-torchrun"], torchrun, per_gpu)
    assert launchers.for_site(sites["lumi"], "srun-per-gpu") is LAUNCHERS["srun-per-gpu"]
    assert launchers.for_site(sites["local"]) is LAUNCHERS["torchrun"]
    for site in sites.values():  # every profile in the checkout names a launcher that fits
        launchers.for_site(site)
    with pytest.raises(UsageError, match=r"--launcher must be one of torchrun, srun-per-gpu, "
                                         r"mpiexec-torchrun \(got 'srun-per-gcd'\) \(did you "
                                         r"mean 'srun-per-gpu'\?\)"):
        launchers.for_site(sites["lumi"], "srun-per-gcd")
    with pytest.raises(UsageError, match="--launcher: launcher srun-per-gpu needs a slurm site; "
                                         "derecho schedules with pbs"):
        launchers.for_site(sites["derecho"], "srun-per-gpu")


def test_a_site_profiles_launcher_is_checked_at_its_line(data_world) -> None:
    _, sites = data_world
    lumi = sites["lumi"]
    with pytest.raises(ConfigError) as typo:
        launchers.for_site(lumi.model_copy(update={"launcher": "srun-per-gcd"}))
    assert typo.value.path == lumi.path and typo.value.line == lumi.lines["launcher"]
    assert typo.value.key == "launcher" and "did you mean 'srun-per-gpu'" in str(typo.value)
    with pytest.raises(ConfigError, match="launcher srun-per-gpu needs a slurm site; local "
                                          "schedules with none") as unfit:
        launchers.for_site(sites["local"].model_copy(update={"launcher": "srun-per-gpu"}))
    assert unfit.value.key == "launcher"

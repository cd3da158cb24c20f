"""Planning a workload: the exact argv on this node (torchrun standalone, no launcher prefix), the
site's environment and visible devices, the ranks checked once, and what a run needs on disk."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from containers.errors import ConfigError, ImageMissing, StateError
from containers.host.runtime import assumed_runtime
from containers.run.launchers import LAUNCHERS
from containers.run.rendezvous import Rendezvous
from containers.run.workload import (Placement, collect, container_env, plan_workload,
                                     run_workload)

#: Olivia's multi-node binds name these host module variables.
EBROOT = {"EBROOTLIBFABRIC": "/sw/f", "EBROOTNCCL": "/sw/n", "EBROOTAWSMINOFIMINNCCL": "/sw/o"}


def _plan(data_world, data_settings, site="olivia", target="olivia-cuda", **kwargs):
    targets, sites = data_world
    return plan_workload(targets[target], sites[site], settings=data_settings,
                         runtime=assumed_runtime("apptainer"), kind="smoke",
                         script="allreduce.py", args=["--iters", "5"],
                         ranks=kwargs.pop("ranks", 4), timeout=60, run_id="r",
                         report_name="allreduce.json", environ=kwargs.pop("environ", {}),
                         **kwargs)


def test_one_node_is_torchrun_standalone_with_no_prefix(data_world, data_settings) -> None:
    plan = _plan(data_world, data_settings, host="aarch64")  # on one of Olivia's own nodes
    image = str(data_settings.images_dir / "olivia-cuda.sif")
    out = data_settings.results_dir / "smoke" / "olivia-cuda-r"
    assert plan.argv[:3] == ["apptainer", "exec", "--nv"]
    assert plan.argv[plan.argv.index(image):] == [
        image, "/usr/local/bin/torchrun", "--standalone", "--nproc-per-node=4",
        "--log-dir=/opt/containers/results/torchelastic", "/opt/containers/jobs/allreduce.py",
        "--iters", "5",
        "--expect-gpu", "cuda", "--backend", "nccl"]
    # Olivia's network stack is bound in only across nodes: one node neither forces nor
    # proves the transport; two nodes do both.
    assert "NCCL_NET" not in plan.launch.env and "NCCL_DEBUG" not in plan.launch.env
    across = _plan(data_world, data_settings, environ=EBROOT, placement=Placement(
        nodes=2, rendezvous=Rendezvous(host="h", port="20001", id="1")))
    assert across.launch.env["NCCL_NET"] == "AWS Libfabric"
    assert across.launch.env["NCCL_DEBUG"] == "INFO"
    assert f"{data_settings.jobs_dir}:/opt/containers/jobs:ro" in plan.launch.binds
    assert f"{out}:/opt/containers/results" in plan.launch.binds
    assert (plan.out_dir, plan.ranks, plan.launch.nodes) == (out, 4, 1)
    assert plan.launcher is LAUNCHERS["torchrun"] and plan.launch.step is False
    assert plan.argv == plan.launcher.argv(plan.launch)
    assert plan.launch.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_ranks_this_machine_emulates_end_without_teardown(data_world, data_settings) -> None:
    """qemu-user deadlocked one run in ten joining gloo's threads at destroy_process_group: an
    image of another architecture, run here, ends its ranks with os._exit (--no-teardown); its
    own nodes, or a scheduler's placement of it, tear down as usual."""
    def tail(plan) -> list[str]:
        return plan.argv[plan.argv.index("/opt/containers/jobs/allreduce.py"):]

    emulated = _plan(data_world, data_settings, host="x86_64")
    assert tail(emulated)[-1] == "--no-teardown"
    assert "--no-teardown" not in _plan(data_world, data_settings, host="aarch64").argv
    placed = _plan(data_world, data_settings, host="x86_64", environ=EBROOT, placement=Placement(
        nodes=2, rendezvous=Rendezvous(host="h", port="20001", id="1")))
    assert "--no-teardown" not in placed.argv
    cpu = _plan(data_world, data_settings, site="local", target="cpu", ranks=2, host="x86_64")
    assert "--no-teardown" not in cpu.argv
    command = _plan(data_world, data_settings, host="x86_64", command=["python3", "mine.py"])
    assert "--no-teardown" not in command.argv  # the user's own program takes no such flag


def test_ranks_this_machine_emulates_see_an_aarch64_cpu(data_world, data_settings, tmp_path,
                                                       monkeypatch) -> None:
    """torch's aarch64 oneDNN reads each CPU's MIDR_EL1 from sysfs as torch is imported, which an
    x86_64 kernel does not have: emulated ranks get a described CPU bound over the sysfs folder;
    the image's own nodes, or a scheduler's placement, see their real CPUs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sysfs = [b for b in _plan(data_world, data_settings, host="x86_64").launch.binds
             if ":/sys/devices/system/cpu:" in b]
    assert sysfs == [f"{tmp_path}/hpc-containers/emulation/aarch64-{os.cpu_count()}cpu"
                     ":/sys/devices/system/cpu:ro"]
    assert not (tmp_path / "hpc-containers").exists()  # a plan (a --dry-run) only names it
    native = _plan(data_world, data_settings, host="aarch64")
    placed = _plan(data_world, data_settings, host="x86_64", environ=EBROOT, placement=Placement(
        nodes=2, rendezvous=Rendezvous(host="h", port="20001", id="1")))
    cpu = _plan(data_world, data_settings, site="local", target="cpu", ranks=2, host="x86_64")
    for plan in (native, placed, cpu):
        assert not any("/sys/devices/system/cpu" in b for b in plan.launch.binds)


def test_an_image_with_its_own_torchrun_starts_that_one(data_world, data_settings) -> None:
    """Olivia's profile names NGC's /usr/local/bin/torchrun; the pip-built image has its own in
    its venv, which its manifest names."""
    ngc = _plan(data_world, data_settings, host="aarch64")
    pip = _plan(data_world, data_settings, target="olivia-cuda-pip", host="aarch64")
    assert "/usr/local/bin/torchrun" in ngc.argv and "/opt/venv/bin/torchrun" not in ngc.argv
    image = pip.argv.index(str(data_settings.images_dir / "olivia-cuda-pip.sif"))
    assert pip.argv[image + 1] == "/opt/venv/bin/torchrun"


def test_more_environment_replans_the_same_launch(data_world, data_settings) -> None:
    plan = _plan(data_world, data_settings)
    debug = plan.with_env({"NCCL_DEBUG": "INFO"})
    assert debug.launch.env["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG=INFO" in debug.argv
    assert debug.argv == plan.launcher.argv(debug.launch) and "NCCL_DEBUG" not in plan.launch.env


def test_a_placement_brings_its_launcher_and_names_its_flag(data_world, data_settings) -> None:
    rdzv = Rendezvous(host="h", port="20001", id="1")
    where = Placement(nodes=2, rendezvous=rdzv, launcher=LAUNCHERS["srun-per-gpu"],
                      cpus_per_task=72, ranks_flag="--gpus-per-node")
    plan = _plan(data_world, data_settings, placement=where, ranks=2, environ=EBROOT)
    assert plan.argv[:5] == ["srun", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=72",
                             "--kill-on-bad-exit=1"]
    assert "MASTER_ADDR=h" in plan.argv and plan.ranks == 4
    with pytest.raises(ConfigError, match="olivia nodes have 4 GPUs; --gpus-per-node 5 is more"):
        _plan(data_world, data_settings, placement=where, ranks=5, environ=EBROOT)
    with pytest.raises(ConfigError, match="olivia nodes have 4 GPUs; --gpus 5 is more"):
        _plan(data_world, data_settings, ranks=5)


def test_the_allocations_devices_stand(data_world) -> None:
    _, sites = data_world
    lumi = sites["lumi"]
    assert container_env(lumi, ranks=2, environ={"USER": "a", "SLURM_JOB_ID": "1"},
                         strict=True)["ROCR_VISIBLE_DEVICES"] == "0,1"
    given = {"USER": "a", "SLURM_JOB_ID": "1", "ROCR_VISIBLE_DEVICES": "4,5"}
    assert "ROCR_VISIBLE_DEVICES" not in container_env(lumi, ranks=2, environ=given, strict=True)
    assert "CUDA_VISIBLE_DEVICES" not in container_env(sites["local"], ranks=2, environ={},
                                                       strict=True)


def test_running_needs_the_image(data_world, data_settings) -> None:
    plan = _plan(data_world, data_settings, site="local", target="cpu", ranks=2)
    with pytest.raises(ImageMissing, match="is not built; run: invoke build --target cpu"):
        run_workload(plan, say=print)
    assert not plan.out_dir.exists()


def test_a_read_only_results_folder_is_one_line(data_world, data_settings,
                                                factory_read_only) -> None:
    plan = _plan(data_world, data_settings, site="local", target="cpu", ranks=2)
    plan = dataclasses.replace(plan, image=Path(__file__))  # any file: nothing runs
    factory_read_only(plan.out_dir.parent)
    with pytest.raises(StateError, match=rf"^cannot create the results folder: .*\({plan.out_dir}"):
        run_workload(plan, say=print)


def test_an_emulated_run_writes_the_cpu_folder_its_plan_names(data_world, data_settings,
                                                              tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    plan = _plan(data_world, data_settings, host="x86_64")
    plan = dataclasses.replace(plan, image=Path(__file__), argv=["true"])  # nothing of it runs
    run_workload(plan, say=print)
    folder = tmp_path / "hpc-containers" / "emulation" / f"aarch64-{os.cpu_count()}cpu"
    assert (folder / "online").is_file() or os.uname().machine == "aarch64"


def test_results_a_user_replaced_with_a_fifo_or_device_count_as_missing(
        data_world, data_settings) -> None:
    """Reading a run's files back never blocks or grows: a FIFO rank report, a link to
    /dev/zero as the device report or the run's report are unreadable, so missing."""
    plan = _plan(data_world, data_settings, site="local", target="cpu", ranks=2)
    plan.out_dir.mkdir(parents=True)
    (plan.out_dir / "rank-0.json").write_text('{"rank": 0, "finished": true}')
    os.mkfifo(plan.out_dir / "rank-1.json")
    (plan.out_dir / "device-0.json").symlink_to("/dev/zero")
    (plan.out_dir / plan.report_name).symlink_to("/dev/zero")
    outcome = collect(plan, returncode=0, timed_out=False, lines=[], seconds=1.0)
    assert outcome.missing_ranks == [1] and outcome.report is None and outcome.devices == ()

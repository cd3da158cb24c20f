"""jobs/devices.py and the rank placement of jobs/workload.py: the probe each rank writes as
``device-<RANK>.json``, pinning to ``--rank-cores``, and the refusal without the expected GPU.

This machine has no GPU: the GPU paths are driven by stand-ins for torch's answers (a build, a
device count, device properties), the CPU paths for real.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
from types import SimpleNamespace

import pytest

from tests.jobs.scripts import sibling

torch = pytest.importorskip("torch")
choices, cudadriver, devices, distenv, gate, workload = (
    sibling(name) for name in ("choices", "cudadriver", "devices", "distenv", "gate", "workload"))

PROBE_KEYS = {"rank", "local_rank", "hostname", "pid", "device", "index", "name", "uuid",
              "pci_bus_id", "visible", "visible_env", "build", "torch", "cuda", "hip", "nccl",
              "driver", "cores", "cpus_allowed_list", "pinned", "arch", "image"}
ENV = distenv.DistEnv(1, 2, 1, "torchrun")
NVIDIA_VERSION = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                  "22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0 (GCC)\n")
NVIDIA_OPEN_VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.35.03  "
                       "Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024")


@pytest.fixture
def restore_affinity():
    """Give this test process its cores back after a test pins it."""
    cores = os.sched_getaffinity(0)
    yield cores
    os.sched_setaffinity(0, cores)


@pytest.fixture
def gpu_torch(monkeypatch):
    """Pretend torch is a ``build`` build that sees ``count`` GPUs."""
    def pretend(build: str, count: int) -> None:
        monkeypatch.setattr(devices, "torch_build", lambda: build)
        monkeypatch.setattr(devices, "visible_gpus", lambda: count)
    for name in devices.VISIBLE_ENV:
        monkeypatch.delenv(name, raising=False)
    return pretend


# ----------------------------------------------------------------------------------------------
# The probe on this (CPU-only) machine
# ----------------------------------------------------------------------------------------------


def test_probe_on_this_cpu_machine() -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    probe = devices.probe(ENV, torch.device("cpu"), pinned=False)
    assert set(probe) == PROBE_KEYS
    assert (probe["rank"], probe["local_rank"], probe["pid"]) == (1, 1, os.getpid())
    assert probe["hostname"] == socket.gethostname()
    assert (probe["device"], probe["index"], probe["name"], probe["uuid"],
            probe["pci_bus_id"]) == ("cpu", None, None, None, None)
    assert (probe["build"], probe["visible"], probe["nccl"]) == ("cpu", 0, None)
    assert probe["torch"] == torch.__version__ and probe["cuda"] == torch.version.cuda
    assert probe["arch"] == platform.machine()
    assert probe["cores"] == choices.format_cpulist(os.sched_getaffinity(0))
    assert choices.parse_cpulist(probe["cpus_allowed_list"]) == os.sched_getaffinity(0)
    assert probe["pinned"] is False
    assert json.loads(json.dumps(probe)) == probe  # what device-<RANK>.json holds


def test_probe_shows_the_visible_devices_variables(monkeypatch) -> None:
    for name in devices.VISIBLE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    probe = devices.probe(ENV, torch.device("cpu"), pinned=True)
    assert probe["visible_env"] == {"CUDA_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": "2,3"}
    assert probe["pinned"] is True


def test_gpu_identity_from_device_properties(monkeypatch) -> None:
    props = SimpleNamespace(uuid="GPU-1234", pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: f"NVIDIA H100 #{index}")
    assert devices.gpu_identity(3) == {"name": "NVIDIA H100 #3", "uuid": "GPU-1234",
                                       "pci_bus_id": "0000:1b:00.0"}
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(pci_bus_id=0x1B))  # an older torch
    assert devices.gpu_identity(0) == {"name": "NVIDIA H100 #0", "uuid": None,
                                       "pci_bus_id": None}


def test_gpu_identity_never_raises(monkeypatch) -> None:
    def broken(index):
        raise RuntimeError("CUDA error: no CUDA-capable device is detected")

    monkeypatch.setattr(torch.cuda, "get_device_properties", broken)
    monkeypatch.setattr(torch.cuda, "get_device_name", broken)
    assert devices.gpu_identity(0) == {"name": None, "uuid": None, "pci_bus_id": None}


def test_a_rank_records_the_labels_of_the_image_it_runs_in(tmp_path) -> None:
    """The publish gate ties a run to its image by these (Apptainer's labels.json inside it)."""
    labels = tmp_path / "labels.json"
    labels.write_text('{"containers.build-date": "2026-11-21T05:27:24Z", "n": 1}')
    assert devices.image_labels(labels) == {"containers.build-date": "2026-11-21T05:27:24Z"}
    assert devices.image_labels(tmp_path / "absent") is None
    labels.write_text("[1]")
    assert devices.image_labels(labels) is None
    assert "image" in devices.probe(ENV, torch.device("cpu"), pinned=False)


def test_cpus_allowed_list(tmp_path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8\n")
    assert devices.cpus_allowed_list(status) == "0-3,8"
    assert devices.cpus_allowed_list(tmp_path / "absent") is None


@pytest.mark.parametrize("text, version", [
    (NVIDIA_VERSION, "550.54.15"), (NVIDIA_OPEN_VERSION, "560.35.03"), ("garbage", None)])
def test_parse_nvidia_driver(text, version) -> None:
    assert cudadriver.parse_nvidia_driver(text) == version


def test_driver_version_nvidia_then_amd(tmp_path) -> None:
    nvidia, amd = tmp_path / "nvidia", tmp_path / "amdgpu"
    assert distenv.driver_version(nvidia, amd) is None
    amd.write_text("6.7.0\n")
    assert distenv.driver_version(nvidia, amd) == "6.7.0"
    nvidia.write_text(NVIDIA_VERSION)
    assert distenv.driver_version(nvidia, amd) == "550.54.15"
    assert set(distenv.runtime_versions()) == {"torch", "cuda", "hip", "nccl", "driver"}


# ----------------------------------------------------------------------------------------------
# The expected GPU
# ----------------------------------------------------------------------------------------------


def test_no_gpu_expected_is_never_missing(gpu_torch) -> None:
    gpu_torch("cpu", 0)
    assert devices.missing_gpu("none", 0) is None


@pytest.mark.parametrize("expect, build, count, local_rank, why", [
    ("cuda", "cpu", 0, 0, "torch is not a cuda build"),
    ("cuda", "rocm", 8, 0, "torch is not a cuda build"),  # ROCm torch answers to torch.cuda
    ("rocm", "cuda", 4, 0, "torch is not a rocm build"),
    ("cuda", "cuda", 0, 0, "torch sees no GPU"),
    ("rocm", "rocm", 2, 2, "local rank 2 has no GPU of its own"),
])
def test_missing_gpu_says_why_and_what_it_saw(gpu_torch, monkeypatch, expect, build, count,
                                              local_rank, why) -> None:
    gpu_torch(build, count)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    text = devices.missing_gpu(expect, local_rank)
    assert text.startswith(f"expected a {expect} GPU, but {why} (")
    assert f"{build} build, {count} GPUs visible, CUDA_VISIBLE_DEVICES='0,1')" in text


@pytest.fixture
def node_driver(monkeypatch, tmp_path):
    """Pretend the node's NVIDIA driver is ``driver`` (its /proc file) and torch's CUDA runtime
    ``cuda``; the driver library answers nothing (as on this GPU-less machine)."""
    def pretend(driver: str, cuda: str) -> None:
        version = tmp_path / "nvidia-version"
        version.write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue\n")
        monkeypatch.setattr(cudadriver, "nvidia_driver", lambda: cudadriver.nvidia_driver_file(
            version))
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(cudadriver, "driver_api_cuda", lambda: None)
    return pretend


def test_the_gate_names_a_driver_too_old_for_the_cuda_runtime(gpu_torch, node_driver,
                                                              capsys) -> None:
    """A CUDA 13 image on an R570 node: the first line names the driver, the newest CUDA it
    supports and the image's runtime, not only "torch sees no GPU"."""
    gpu_torch("cuda", 0)
    node_driver("570.86.15", "13.0")
    assert gate.main(["--expect-gpu", "cuda", "--ranks", "4"]) == 2
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("device gate: FAIL on ")
    assert ("(all of 4 local ranks): expected a cuda GPU, but torch sees no GPU because the "
            "node's NVIDIA driver 570.86.15 supports CUDA 12.8 at most and the image's torch "
            "uses the CUDA 13.0 runtime, which needs NVIDIA driver R580 or newer") in first
    assert "; NVIDIA driver 570.86.15 (CUDA 12.8 at most), CUDA runtime 13.0: cuda build" in first


def test_a_fitting_driver_is_shown_not_blamed(gpu_torch, node_driver) -> None:
    gpu_torch("cuda", 0)
    node_driver("570.86.15", "12.8")
    text = devices.missing_gpu("cuda", 0)
    assert text.startswith("expected a cuda GPU, but torch sees no GPU (torch ")
    assert "NVIDIA driver 570.86.15 (CUDA 12.8 at most), CUDA runtime 12.8: cuda build" in text


def test_rocm_names_the_amdgpu_driver(gpu_torch, monkeypatch, tmp_path) -> None:
    gpu_torch("rocm", 0)
    amd = tmp_path / "amdgpu-version"
    amd.write_text("6.10.5\n")
    monkeypatch.setattr(devices, "amdgpu_driver", lambda: distenv.amdgpu_driver(amd))
    monkeypatch.setattr(torch.version, "hip", "6.2.41133", raising=False)
    assert "; amdgpu driver 6.10.5, HIP 6.2.41133: rocm build" in devices.missing_gpu("rocm", 0)


@pytest.mark.parametrize("expect, count, local_rank", [
    ("cuda", 4, 3), ("rocm", 8, 0),
    ("cuda", 1, 3),  # srun --gpus-per-task=1: every task sees its one GPU as device 0
])
def test_gpu_present(gpu_torch, expect, count, local_rank) -> None:
    gpu_torch(expect, count)
    assert devices.missing_gpu(expect, local_rank) is None


def test_auto_backend_honours_the_expected_gpu() -> None:
    assert distenv.choose_backend("auto", "cuda") == "nccl"
    assert distenv.choose_backend("auto", "rocm") == "nccl"
    assert distenv.choose_backend("gloo") == "gloo"


@pytest.mark.parametrize("local_rank, count, index", [
    (0, 4, 0), (3, 4, 3), (3, 1, 0), (4, 4, None), (0, 0, None), (1, 2, 1)])
def test_gpu_index(local_rank, count, index) -> None:
    assert distenv.gpu_index(local_rank, count) == index


# ----------------------------------------------------------------------------------------------
# Placing a rank (workload.place_rank): pin, backend, device, device-<RANK>.json, refusal
# ----------------------------------------------------------------------------------------------


def _args(tmp_path, **flags):
    parser = argparse.ArgumentParser()
    workload.add_common_flags(parser, out=str(tmp_path), writes="x.json", timeout_s=9)
    argv = [item for flag, value in flags.items()
            for item in (f"--{flag.replace('_', '-')}", value)]
    return parser.parse_args(argv)


def test_place_rank_on_cpu_writes_the_probe(tmp_path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    placement = workload.place_rank(_args(tmp_path), ENV)
    assert (placement.backend, placement.device.type) == ("gloo", "cpu")
    written = json.loads((tmp_path / "device-1.json").read_text())
    assert written == placement.probe and written["pinned"] is False


def test_place_rank_refuses_without_the_expected_gpu(tmp_path, gpu_torch) -> None:
    gpu_torch("cpu", 0)
    with pytest.raises(workload.NoGpu, match="^expected a rocm GPU, but torch is not a rocm"):
        workload.place_rank(_args(tmp_path, expect_gpu="rocm"), ENV)
    written = json.loads((tmp_path / "device-1.json").read_text())  # written all the same
    assert (written["device"], written["rank"]) == ("cpu", 1)


def test_place_rank_refuses_gloo_with_an_expected_gpu(tmp_path) -> None:
    with pytest.raises(workload.ScriptUsageError,
                       match="--backend gloo contradicts --expect-gpu cuda"):
        workload.place_rank(_args(tmp_path, expect_gpu="cuda", backend="gloo"), ENV)


def test_place_rank_pins(tmp_path, restore_affinity) -> None:
    core = min(restore_affinity)
    cores = f"{core}:{core}"  # local rank 1 takes the second entry
    placement = workload.place_rank(_args(tmp_path, rank_cores=cores), ENV)
    assert os.sched_getaffinity(0) == {core}
    assert placement.probe["pinned"] is True and placement.probe["cores"] == str(core)
    assert placement.probe["cpus_allowed_list"] == str(core)


def test_pin_rank_without_an_entry_is_this_ranks_error(restore_affinity) -> None:
    with pytest.raises(workload.RankUsageError,
                       match=r"--rank-cores: rank 1 \(local rank 1\) has no entry: the map "
                       "names 1 local ranks"):
        workload.pin_rank([frozenset(restore_affinity)], ENV)
    assert os.sched_getaffinity(0) == restore_affinity


def test_pin_rank_refuses_cores_the_machine_lacks(restore_affinity) -> None:
    here = choices.format_cpulist(restore_affinity)
    with pytest.raises(workload.ScriptUsageError) as caught:
        workload.pin_rank([frozenset(restore_affinity), frozenset({4095})], ENV)
    assert not isinstance(caught.value, workload.RankUsageError)  # every rank sees it: rank 0
    assert str(caught.value).startswith("--rank-cores: local rank 1 asks for cores 4095, which ")
    assert f"this process may use {here})" in str(caught.value)
    assert workload.pin_rank(None, ENV) is False


def test_pin_refuses_what_the_kernel_refuses(restore_affinity) -> None:
    with pytest.raises(ValueError, match="cannot pin to cores 4095"):
        devices.pin(frozenset({4095}))
    assert os.sched_getaffinity(0) == restore_affinity


def test_rank_lines_show_bus_id_name_and_cores() -> None:
    gpu = {"rank": 0, "local_rank": 0, "hostname": "nid001", "pid": 42, "index": 0,
           "name": "AMD Instinct MI250X", "pci_bus_id": "0000:c1:00.0", "cores": "49-55"}
    cpu = {**gpu, "rank": 1, "index": None, "name": None, "pci_bus_id": None, "cores": "0,2"}
    lines = devices.format_rank_lines([gpu, cpu])
    assert lines[0] == "# Using devices"
    assert lines[1].endswith("device  0 [0000:c1:00.0] AMD Instinct MI250X cores 49-55")
    assert lines[2].endswith("device  - [cpu] cores 0,2")


# ----------------------------------------------------------------------------------------------
# guarded_main: the one-line refusals
# ----------------------------------------------------------------------------------------------


def test_no_gpu_is_one_line_from_every_rank_with_status_4(rank, capsys) -> None:
    def refuse(env):
        raise workload.NoGpu("expected a cuda GPU, but torch sees no GPU")

    for n in (0, 1):
        rank(n)
        assert workload.guarded_main("job.py", refuse) == workload.EXIT_NO_GPU == 4
        assert capsys.readouterr().err == (f"job.py: rank {n} on {socket.gethostname()}: "
                                           "expected a cuda GPU, but torch sees no GPU\n")


def test_rank_usage_error_is_printed_by_the_rank_that_hit_it(rank, capsys) -> None:
    def bad(env):
        raise workload.RankUsageError("--rank-cores: rank 1 (local rank 1) has no entry")

    rank(1)
    assert workload.guarded_main("job.py", bad) == workload.EXIT_USAGE
    assert capsys.readouterr().err == "job.py: error: --rank-cores: rank 1 (local rank 1) has " \
        "no entry\n"

"""What a rank runs on: its CPU cores, its GPU and the torch build, probed before it joins the job.

A run on a GPU site proves nothing if its ranks quietly ran on the CPU, shared one GPU or ran on
cores far from their GPU. So every rank pins itself to the cores ``--rank-cores`` gives it, probes
what it got and writes ``OUT/device-<RANK>.json`` before the process group exists (a rank that
then refuses, or hangs in the rendezvous, has still said what it saw), and the host checks those
files. With ``--expect-gpu`` a rank without a usable GPU of that kind refuses to run at all.

Every torch.cuda query here is guarded: the probe runs on CPU-only machines and broken GPU nodes
too, and must describe them rather than fail. The cpulist syntax lives in ``choices.py`` (the host
formats the map with the same helpers).
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist

import choices
import cudadriver
from distenv import DistEnv, amdgpu_driver, describe_device, gpu_index, runtime_versions

#: The variables that limit which GPUs a process sees (CUDA; ROCm's runtime; HIP; older ROCm).
VISIBLE_ENV = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
               "GPU_DEVICE_ORDINAL")

T = TypeVar("T")


def machine_cores() -> frozenset[int]:
    """The cores this machine has online (not only those this process may use)."""
    try:
        online = Path("/sys/devices/system/cpu/online").read_text(encoding="ascii")
        return choices.parse_cpulist(online.strip())
    except (OSError, ValueError):
        return frozenset(range(os.cpu_count() or 1))


def check_cores_exist(rank_cores: Sequence[frozenset[int]]) -> None:
    """Refuse a map naming cores this machine does not have: every rank of a node reaches the
    same verdict, so the error is not one rank's alone (which the others would wait on)."""
    online = machine_cores()
    for local_rank, cores in enumerate(rank_cores):
        absent = cores - online
        if absent:
            raise ValueError(
                f"local rank {local_rank} asks for cores {choices.format_cpulist(absent)}, which "
                f"{socket.gethostname()} does not have (online: {choices.format_cpulist(online)}; "
                f"this process may use {choices.format_cpulist(os.sched_getaffinity(0))})")


def pin(cores: frozenset[int]) -> None:
    """Run this process on ``cores`` only, or raise ValueError saying what was asked and what is
    available; a kernel that grants fewer cores than asked (a cpuset) counts as a refusal."""
    available = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cores)
    except OSError as err:
        raise ValueError(f"cannot pin to cores {choices.format_cpulist(cores)} ({err.strerror}); "
                         f"this process may use {choices.format_cpulist(available)}") from err
    granted = os.sched_getaffinity(0)
    if granted != cores:
        raise ValueError(f"asked for cores {choices.format_cpulist(cores)} but got "
                         f"{choices.format_cpulist(granted)}; this process may use "
                         f"{choices.format_cpulist(available)}")


def cpus_allowed_list(status: Path = Path("/proc/self/status")) -> Optional[str]:
    """The kernel's ``Cpus_allowed_list`` of this process, or None where it cannot be read."""
    try:
        text = status.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    match = re.search(r"^Cpus_allowed_list:(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def guarded(query: Callable[[], T], default: T) -> T:
    """``query()``, or ``default`` when it raises: a broken GPU stack is reported, not fatal."""
    try:
        return query()
    except Exception:  # noqa: BLE001 - the probe describes what it finds, whatever that is
        return default


def torch_build() -> str:
    """``rocm``, ``cuda`` or ``cpu``: what this torch was built for (ROCm torch also answers to
    torch.cuda, so only torch.version tells the vendors apart)."""
    if getattr(torch.version, "hip", None):
        return "rocm"
    return "cuda" if torch.version.cuda else "cpu"


def visible_gpus() -> int:
    """How many GPUs torch can use here (0 where none is usable)."""
    return guarded(lambda: torch.cuda.device_count() if torch.cuda.is_available() else 0, 0)


def visible_env() -> dict[str, str]:
    """The visible-devices variables that are set: what limited the GPUs this rank sees."""
    return {name: os.environ[name] for name in VISIBLE_ENV if name in os.environ}


def node_driver(build: str) -> tuple[Optional[str], Optional[str]]:
    """``(what the node's driver is, for the failure line; why it cannot run this torch's
    runtime, or None)``: NVIDIA's driver and the newest CUDA it supports against
    ``torch.version.cuda`` (:mod:`cudadriver`), amdgpu's version against ``torch.version.hip``."""
    if build == "rocm":
        amd = amdgpu_driver()
        return f"amdgpu driver {amd or 'unknown'}, HIP {torch.version.hip}", None
    if build != "cuda":
        return None, None
    driver = cudadriver.nvidia_driver()
    driver_cuda = cudadriver.driver_api_cuda()
    newest = driver_cuda or cudadriver.newest_cuda(driver)
    shown = (f"NVIDIA driver {driver or 'unknown'}"
             + (f" (CUDA {newest} at most)" if newest else "")
             + f", CUDA runtime {torch.version.cuda}")
    return shown, cudadriver.misfit(torch.version.cuda, driver, driver_cuda)


def missing_gpu(expect_gpu: str, local_rank: int) -> Optional[str]:
    """Why this rank has no usable ``expect_gpu`` GPU (one line, what it saw), or None if it has
    one or none was expected. When torch sees no GPU because the node's driver is too old for
    the image's CUDA runtime, the line says so first: the cause, not the symptom."""
    if expect_gpu == "none":
        return None
    build, count = torch_build(), visible_gpus()
    if build != expect_gpu:
        why = f"torch is not a {expect_gpu} build"
    elif count == 0:
        why = "torch sees no GPU"
    elif gpu_index(local_rank, count) is None:
        why = f"local rank {local_rank} has no GPU of its own"
    else:
        return None
    driver, cause = node_driver(build)
    if cause and count == 0:
        why = f"torch sees no GPU because {cause}"
    shown = ", ".join(f"{name}={value!r}" for name, value in visible_env().items())
    return (f"expected a {expect_gpu} GPU, but {why} (torch {torch.__version__}"
            f"{'; ' + driver if driver else ''}: {build} build, {count} GPUs visible, "
            f"{shown or 'no visible-devices variable set'})")


def gpu_identity(index: int) -> dict[str, Any]:
    """Name, UUID and PCI bus id (``DDDD:BB:DD.0``) of GPU ``index``, each None when unknown."""
    props = guarded(lambda: torch.cuda.get_device_properties(index), None)
    uuid = getattr(props, "uuid", None)
    pci = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    return {
        "name": guarded(lambda: torch.cuda.get_device_name(index), None),
        "uuid": None if uuid is None else str(uuid),
        "pci_bus_id": None if None in pci else "{:04x}:{:02x}:{:02x}.0".format(*pci),
    }


#: Where Apptainer keeps an image's labels inside it (its ``/.singularity.d`` metadata folder; the
#: labels ``apptainer inspect`` shows, checked with ``apptainer exec IMAGE cat`` on Apptainer 1.4).
LABELS = Path("/.singularity.d/labels.json")


def image_labels(path: Path = LABELS) -> Optional[dict[str, str]]:
    """The labels of the image this rank runs in, as it reads them from inside: the publish gate
    ties the run to the image by them (None outside an image, or where they do not read)."""
    try:
        labels = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(labels, dict):
        return None
    return {str(key): value for key, value in labels.items() if isinstance(value, str)}


def probe(env: DistEnv, device: torch.device, pinned: bool) -> dict[str, Any]:
    """What this rank runs on: ``OUT/device-<RANK>.json``, and its entry in the report's ranks.

    ``device`` is ``cuda`` when the rank uses a GPU (ROCm's too), else ``cpu``; ``build`` says
    which vendor's torch it is; ``cores`` is the affinity after pinning.
    """
    index = (device.index or 0) if device.type == "cuda" else None
    identity = dict.fromkeys(("name", "uuid", "pci_bus_id")) if index is None else \
        gpu_identity(index)
    return {
        "rank": env.rank, "local_rank": env.local_rank, "hostname": socket.gethostname(),
        # The CPU architecture the rank's python runs as (aarch64 under qemu on an x86_64 host).
        "arch": platform.machine(),
        "pid": os.getpid(), "device": "cpu" if index is None else "cuda", "index": index,
        **identity,
        "visible": visible_gpus(), "visible_env": visible_env(), "build": torch_build(),
        **runtime_versions(),
        "cores": choices.format_cpulist(os.sched_getaffinity(0)),
        "cpus_allowed_list": cpus_allowed_list(), "pinned": pinned, "image": image_labels(),
    }


def gather_ranks(mine: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """Every rank's probe plus its human-readable ``device_text``, in rank order."""
    entry = {**mine, "device_text": describe_device(device)}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, entry)
    return sorted(gathered, key=lambda info: info["rank"])


def format_rank_lines(ranks: Sequence[dict[str, Any]]) -> list[str]:
    """nccl-tests' ``# Using devices`` lines: each rank's pid, host, GPU (bus id and name) and
    cores."""
    lines = ["# Using devices"]
    for info in ranks:
        on_gpu = info["index"] is not None
        where = info["pci_bus_id"] or (f"cuda:{info['index']}" if on_gpu else "cpu")
        name = f" {info['name']}" if info["name"] else ""
        lines.append(f"#  Rank {info['rank']:>3} Group  0 Pid {info['pid']:>7} on "
                     f"{info['hostname']:>12} device {info['index'] if on_gpu else '-':>2} "
                     f"[{where}]{name} cores {info['cores']}")
    return lines

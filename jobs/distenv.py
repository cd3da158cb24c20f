"""Where a training process sits in the job, and the few collectives the trainer itself needs.

The launcher handling (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else Slurm's SLURM_PROCID /
SLURM_NTASKS / SLURM_LOCALID with MASTER_ADDR / MASTER_PORT exported by the batch script, else a
single process), the backend and device choice and the atomic JSON writer live here and serve both
workloads (``allreduce.py`` and ``train.py``), so both start in exactly the same way under every
launcher.

Imports are plain (``import distenv``): ``jobs/`` is a folder of scripts, not a package, and
Python puts the running script's folder first on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import hashlib
import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import torch
import torch.distributed as dist

import cudadriver
import safewrite


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job, whichever launcher started it."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "torchrun" (or any RANK/WORLD_SIZE exporter), "slurm" or "single"


def resolve_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """Read rank and world size from torchrun's variables, else from srun's, else run alone.

    torchrun's variables win, so ``srun torchrun ...`` (one agent per node) works as well as
    ``srun python allreduce.py`` (one task per GPU).
    """
    if "RANK" in environ and "WORLD_SIZE" in environ:
        local = environ.get("LOCAL_RANK", environ.get("SLURM_LOCALID", "0"))
        return DistEnv(int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(local), "torchrun")
    if "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ:
        return DistEnv(int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"]),
                       int(environ.get("SLURM_LOCALID", "0")), "slurm")
    return DistEnv(0, 1, 0, "single")


def choose_backend(requested: str, expect_gpu: str = "none") -> str:
    """auto means nccl when a GPU is expected or visible (RCCL on ROCm answers to the same name),
    else gloo; nccl without a GPU is an error, never a quiet fall back to gloo."""
    if requested == "auto":
        return "nccl" if expect_gpu != "none" or torch.cuda.is_available() else "gloo"
    if requested == "nccl" and not torch.cuda.is_available():
        raise RuntimeError("--backend nccl needs a GPU, but torch.cuda.is_available() is False")
    return requested


def gpu_index(local_rank: int, count: int) -> Optional[int]:
    """The GPU of a local rank among ``count`` visible ones, or None when it has none.

    When Slurm binds one GPU per task (``--gpus-per-task=1``), each task sees a single device
    numbered 0 whatever its local rank, so that case maps to device 0.
    """
    if local_rank < count:
        return local_rank
    return 0 if count == 1 else None


def choose_device(backend: str, local_rank: int) -> torch.device:
    """One GPU per rank for nccl (by local rank, see :func:`gpu_index`); CPU tensors for gloo."""
    if backend != "nccl":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    index = gpu_index(local_rank, count)
    if index is None:
        raise RuntimeError(f"local rank {local_rank} has no GPU: only {count} visible")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_process_group(env: DistEnv, backend: str, timeout_s: int) -> None:
    """Join the process group; a single process uses an in-memory store and needs no address."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if env.world_size == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
        return
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"{' and '.join(missing)} not set: under srun export MASTER_ADDR (the first node of "
            "the job) and MASTER_PORT (a free port) before launching")
    # env:// reads these; under srun they come from SLURM_* and are not set yet.
    os.environ.setdefault("RANK", str(env.rank))
    os.environ.setdefault("WORLD_SIZE", str(env.world_size))
    os.environ.setdefault("LOCAL_RANK", str(env.local_rank))
    dist.init_process_group(backend, init_method="env://", rank=env.rank,
                            world_size=env.world_size, timeout=timeout)


#: Where the amdgpu kernel module says its version (ROCm nodes).
AMDGPU_VERSION_FILE = Path("/sys/module/amdgpu/version")


def amdgpu_driver(path: Path = AMDGPU_VERSION_FILE) -> Optional[str]:
    """The amdgpu kernel driver's version, or None where it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def driver_version(nvidia: Path = cudadriver.NVIDIA_VERSION_FILE,
                   amd: Path = AMDGPU_VERSION_FILE) -> Optional[str]:
    """The kernel driver's version (NVIDIA's, else amdgpu's), or None where neither is readable.

    A container brings its own CUDA/HIP runtime but shares the host's kernel driver; when the two
    do not match, this is the number that explains it.
    """
    return cudadriver.nvidia_driver_file(nvidia) or amdgpu_driver(amd)


def runtime_versions() -> dict[str, Optional[str]]:
    """torch, GPU runtime and kernel driver versions, recorded because results depend on all of
    them."""
    versions: dict[str, Optional[str]] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "nccl": None,
        "driver": driver_version(),
    }
    # a version string is nice to have, never fatal
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()
            versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return versions


def describe_device(device: torch.device) -> str:
    """Device text for the rank map, e.g. ``cuda:0 NVIDIA H100`` or ``cpu``."""
    if device.type == "cuda":
        return f"{device} {torch.cuda.get_device_name(device)}"
    return "cpu"


def write_text(path: Path, text: str) -> None:
    """Write text atomically (temp file, then os.replace) so a reader never sees half a file,
    never through a link nor over a device or another user's file (:mod:`safewrite`)."""
    safewrite.write_text(path, text)


def finite(value: Any) -> Any:
    """``value`` with every NaN or Infinity made None (JSON null): strict JSON readers refuse
    them, and a figure that is not a number is no figure (the host judges a null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    return [finite(item) for item in value] if isinstance(value, (list, tuple)) else value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (:func:`write_text`), never a NaN (:func:`finite`)."""
    write_text(path, json.dumps(finite(data), indent=2, allow_nan=False) + "\n")


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def seed_everything(seed: int) -> None:
    """Same seed on every rank: identical initial weights (FSDP shards each rank's own copy)."""
    random.seed(seed)
    torch.manual_seed(seed)


def sync(device: torch.device) -> None:
    """Drain this rank's GPU queue, then line up all ranks: what a timed region starts with."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def reduce_across_ranks(values: list[float], op: dist.ReduceOp, dtype: torch.dtype,
                        device: torch.device) -> list[float]:
    """Reduce a few host numbers over all ranks (MAX of times and memory peaks, SUM of wrong
    counts)."""
    tensor = torch.tensor(values, dtype=dtype, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks (in place, and returned)."""
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def average_buffers(module: torch.nn.Module) -> None:
    """Average floating-point buffers (BatchNorm running statistics) over ranks.

    DDP broadcasts rank 0's buffers at every forward, so its ranks agree; FSDP and DeepSpeed do
    not touch buffers, so each rank's BatchNorm statistics drift apart on its own data shard.
    Averaging them before evaluation (as timm's ``distribute_bn`` does) gives every rank the
    same model to evaluate and to save.
    """
    world = dist.get_world_size()
    for buffer in module.buffers():
        if buffer.is_floating_point():
            dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
            buffer.div_(world)


def fingerprint(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """sha256 over (name, dtype, shape, raw bytes copied to the CPU, without numpy) of tensors,
    plus a float64 sum for people to read, and how many tensors and elements went in."""
    digest, checksum, tensors, elements = hashlib.sha256(), 0.0, 0, 0
    for name, tensor in named:
        flat = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        if flat.numel():
            digest.update(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))
        checksum += float(tensor.detach().double().sum())
        tensors += 1
        elements += tensor.numel()
    return {"sha256": digest.hexdigest(), "checksum": checksum, "tensors": tensors,
            "elements": elements}


def compare_across_ranks(value: Any) -> tuple[bool, list[Any]]:
    """(every rank holds an equal value, the values in rank order)."""
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return all(v == values[0] for v in values), values

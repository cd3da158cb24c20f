"""Where a training process sits in the job, and the few collectives the trainer itself needs.

The launcher handling (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else Slurm's SLURM_PROCID /
SLURM_NTASKS / SLURM_LOCALID with MASTER_ADDR / MASTER_PORT exported by the batch script, else a
single process), the backend and device choice and the atomic JSON writer are the all_reduce
benchmark's (``allreduce.py``, a sibling script), imported rather than copied so that both
workloads start in exactly the same way under every launcher.

Imports are plain (``import distenv``): ``jobs/`` is a folder of scripts, not a package, and
Python puts the running script's folder first on ``sys.path``.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import socket
from typing import Any, Iterable

import torch
import torch.distributed as dist

from allreduce import (  # noqa: F401 - re-exported for the trainer
    DistEnv,
    choose_backend,
    choose_device,
    describe_device,
    init_process_group,
    now_iso,
    resolve_dist_env,
    runtime_versions,
    write_json,
)


def seed_everything(seed: int) -> None:
    """Same seed on every rank: identical initial weights (FSDP shards each rank's own copy)."""
    random.seed(seed)
    torch.manual_seed(seed)


def sync(device: torch.device) -> None:
    """Drain this rank's GPU queue, then line up all ranks: what a timed region starts with."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def gather_hostnames() -> list[str]:
    """Every rank's host name, in rank order (distinct names = nodes)."""
    names: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(names, socket.gethostname())
    return [str(name) for name in names]


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


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The raw bytes of a tensor (copied to the CPU), without numpy."""
    flat = tensor.detach().to("cpu").contiguous()
    if flat.numel() == 0:
        return b""
    return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())


class Fingerprint:
    """sha256 over (name, dtype, shape, bytes) of tensors, plus a float64 sum for people to read."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.checksum = 0.0
        self.tensors = 0
        self.elements = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self.digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        self.digest.update(tensor_bytes(tensor))
        self.checksum += float(tensor.detach().double().sum())
        self.tensors += 1
        self.elements += tensor.numel()

    def add_all(self, named: Iterable[tuple[str, torch.Tensor]]) -> "Fingerprint":
        for name, tensor in named:
            self.add(name, tensor)
        return self

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


def compare_across_ranks(value: Any) -> tuple[bool, list[Any]]:
    """(every rank holds an equal value, the values in rank order)."""
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return all(v == values[0] for v in values), values

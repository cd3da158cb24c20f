"""Which cores each local rank of a node runs on, from a site profile's CPU masks. With one
torchrun per node Slurm cannot bind each rank, so each pins itself (``--rank-cores``) first."""

from __future__ import annotations

from typing import Iterable, Sequence

from containers.inputs import names


def mask_cores(mask: str) -> frozenset[int]:
    """The cores of a hexadecimal CPU mask (``0xfe`` is cores 1-7); the profile checked it."""
    value = int(mask, 16)
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)


def rank_cores(masks: Sequence[str], ranks_per_node: int) -> list[frozenset[int]]:
    """The cores of local ranks ``0 .. ranks_per_node-1`` (one mask per GPU, in GPU order)."""
    return [mask_cores(mask) for mask in masks[:ranks_per_node]]


def rank_cores_arg(cores: Sequence[frozenset[int]]) -> str:
    """``--rank-cores``' value for the workloads: local ranks' cpulists, ``:`` between them."""
    return ":".join(names.format_cpulist(c) for c in cores)


def describe(cores: Iterable[frozenset[int]]) -> str:
    """``rank 0 cores 49-55, rank 1 cores 57-63`` for plans and dry runs."""
    return ", ".join(f"rank {rank} cores {names.format_cpulist(c)}"
                     for rank, c in enumerate(cores))

"""The collectives ``allreduce.py --op`` measures, each a small plug-in, as nccl-tests has one
``*_perf`` file per collective around one timing loop (``src/common.cu``).

A plug-in says only what is its own:

* its element counts (nccl-tests' ``GetCollByteCount``): from the ``count`` of a ``--sizes``
  size, the count per rank (the table's ``count`` column) and what each rank sends and receives;
  for all_gather, reduce_scatter and alltoall the size is the whole buffer, as nccl-tests reports
  it, so the count per rank is ``count // ranks``;
* the bytes its algbw divides (``GetBw``: the whole buffer for those three, else the count's) and
  its bus factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast,
  reduce, sendrecv 1), so busbw compares with a link's speed at any rank count;
* its buffers out-of-place and in-place (in-place aliases input and output at nccl-tests'
  offsets; alltoall and sendrecv run in place on one buffer, as nccl-tests runs them, and, as
  there, their in-place values are not checked: ``#wrong`` N/A, its ``reportErrors = 0``);
* the call, and the EXACT values each rank must hold afterwards (none where a rank receives
  nothing: reduce's non-root ranks).

Input of rank r at element i is ``((i + r) mod P) + 1`` (:func:`rank_values`). Summing ops keep
``n * P`` within the dtype's exact integers (:func:`pattern_period`), so any reduction order is
exact; moving ops only copy, so P is larger (a value from the wrong rank shows up unless the
ranks are :data:`MOVE_PERIOD` apart). torch and the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

import torch
import torch.distributed as dist

# Largest element value of a summing op's pattern; 13 is prime, so the pattern is not aligned
# with any power-of-two chunking a collective algorithm might use.
MAX_PATTERN_PERIOD = 13
# A moving op's pattern: prime, and at most bfloat16's 256 exact integers.
MOVE_PERIOD = 251
# Every collective with a root uses rank 0, as nccl-tests does by default (``-r 0``).
ROOT = 0


def exact_integer_limit(dtype: torch.dtype) -> int:
    """Largest N such that every integer 0..N is exact in dtype (2^24, 2^11, 2^8 for
    fp32, fp16, bf16)."""
    return round(2 / torch.finfo(dtype).eps)  # eps is 2^-(significand bits - 1)


def pattern_period(dtype: torch.dtype, world_size: int) -> int:
    """Largest element value K of a summing op's pattern, or 0 if no exact check is possible.

    Every partial sum of any reduction order is an integer no larger than world_size * K;
    keeping that within the dtype's exact integers makes the result exact whatever algorithm
    the backend picks (ring, tree, NVLS). bfloat16 holds integers exactly only up to 256,
    hence the shrinking K; beyond 256 ranks no such pattern exists.
    """
    return min(MAX_PATTERN_PERIOD, exact_integer_limit(dtype) // world_size)


def _tiled(tile: torch.Tensor, count: int) -> torch.Tensor:
    repeats = -(-count // tile.numel())
    return tile.repeat(repeats)[:count].contiguous()


def rank_values(rank: int, count: int, period: int, dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    """Rank's input: ((i + rank) mod period) + 1, so a value from the wrong rank shows up."""
    tile = (torch.arange(period, device=device) + rank) % period + 1
    return _tiled(tile.to(dtype), count)


def expected_values(world_size: int, count: int, period: int, dtype: torch.dtype,
                    device: torch.device) -> torch.Tensor:
    """The exact element-wise sum of rank_values over all ranks (integer arithmetic, then cast)."""
    index = torch.arange(period, dtype=torch.int64, device=device)
    total = sum((index + rank) % period + 1 for rank in range(world_size))
    return _tiled(total.to(dtype), count)


def all_reduce_factor(n: int) -> float:
    """2(n-1)/n: each rank sends and receives (n-1)/n of the buffer twice (reduce-scatter,
    then all-gather)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    return 2.0 * (n - 1) / n


def gather_factor(n: int) -> float:
    """(n-1)/n: each rank receives the n-1 parts of the buffer it does not hold."""
    return (n - 1) / n


def one(n: int) -> float:
    """1: the whole buffer crosses one link (root to peers, peers to root, rank to rank)."""
    return 1.0


@dataclass
class Buffers:
    """One mode's tensors: ``send`` is read by the call, ``recv`` written (they may be one
    tensor, or one a view of the other); ``refill``: copy ``src`` into ``send`` before every
    timed call, outside the bracket (torch's call works on one tensor, so out-of-place keeps
    the input untouched that way)."""

    src: torch.Tensor
    send: torch.Tensor
    recv: torch.Tensor
    refill: bool = False


@dataclass(frozen=True)
class Collective:
    """One collective: its table labels, counts, bytes, bus factor, buffers, call and the exact
    values each rank must hold after it."""

    name: str
    redop: str                       # as nccl-tests prints it: "none" where it passes none
    factor: Callable[[int], float]
    factor_text: str
    call: Callable[[Buffers, int, int], None]
    split: bool = False              # the size is the whole buffer, split over the ranks
    root: Optional[int] = None       # the root rank of broadcast and reduce
    sums: bool = False
    checks_in_place: bool = True     # the aliased in-place result is checked (nccl-tests)
    min_ranks: int = 1
    why_min_ranks: str = ""

    # -- counts and bytes (nccl-tests' GetCollByteCount / GetBw)
    def param_count(self, count: int, n: int) -> int:
        """The table's count: per rank for split ops (at least one element)."""
        return max(1, count // n) if self.split else count

    def send_count(self, param: int, n: int) -> int:
        return param * n if self.name in ("reduce_scatter", "alltoall") else param

    def recv_count(self, param: int, n: int) -> int:
        return param * n if self.name in ("all_gather", "alltoall") else param

    def size_bytes(self, param: int, n: int, element: int) -> int:
        """The table's size: the larger of the send and the receive buffer."""
        return max(self.send_count(param, n), self.recv_count(param, n)) * element

    def bw_bytes(self, param: int, n: int, element: int) -> int:
        """What algbw divides by the time: the whole buffer for split ops, else the count's."""
        return param * element * (n if self.split else 1)

    def period(self, dtype: torch.dtype, n: int) -> int:
        """The check pattern's period: exact sums for summing ops (0: none possible)."""
        if self.sums:
            return pattern_period(dtype, n)
        return min(MOVE_PERIOD, exact_integer_limit(dtype))

    # -- buffers
    def buffers(self, mode: str, src: torch.Tensor, param: int, n: int, rank: int) -> Buffers:
        """``mode``'s buffers around ``src`` (this rank's untouched input)."""
        if self.name in ("all_reduce", "broadcast", "reduce"):
            # torch works in place on one tensor: oop refills it from src, untimed
            out = src.clone()
            return Buffers(src=src, send=out, recv=out, refill=mode == "oop")
        if mode == "oop":  # the call only reads its input: src itself (at most 3 buffers)
            recv = torch.empty(self.recv_count(param, n), dtype=src.dtype, device=src.device)
            return Buffers(src=src, send=src, recv=recv)
        own = slice(rank * param, (rank + 1) * param)
        if self.name == "all_gather":  # nccl-tests: sendbuff = recvbuff + rank * count
            recv = torch.empty(param * n, dtype=src.dtype, device=src.device)
            recv[own] = src
            return Buffers(src=src, send=recv[own], recv=recv)
        if self.name == "reduce_scatter":  # nccl-tests: recvbuff = sendbuff + rank * count
            send = src.clone()
            return Buffers(src=src, send=send, recv=send[own])
        # alltoall, sendrecv: one buffer read and written (nccl-tests: offsets 0, unchecked)
        both = src.clone()  # their send and receive counts are equal
        return Buffers(src=src, send=both, recv=both)

    # -- the check
    def expected(self, rank: int, n: int, param: int, period: int, dtype: torch.dtype,
                 device: torch.device) -> Optional[torch.Tensor]:
        """The exact values ``rank``'s ``recv`` must hold; None where it receives nothing."""
        name, own = self.name, slice(rank * param, (rank + 1) * param)
        values = partial(rank_values, period=period, dtype=dtype, device=device)
        if name == "all_reduce" or (name == "reduce" and rank == self.root):
            return expected_values(n, param, period, dtype, device)
        if name == "reduce":
            return None
        if name == "broadcast":
            return values(self.root, param)
        if name == "all_gather":
            return torch.cat([values(peer, param) for peer in range(n)])
        if name == "reduce_scatter":
            return expected_values(n, param * n, period, dtype, device)[own]
        if name == "alltoall":  # part `rank` of every peer's input, in peer order
            return torch.cat([values(peer, param * n)[own] for peer in range(n)])
        if name == "sendrecv":
            return values((rank - 1) % n, param)
        raise ValueError(f"unknown collective {name}")


def _newest(name: str, old: str) -> Callable[..., None]:
    """torch 2.13 renamed the one-tensor all_gather and reduce_scatter ``*_single`` (the old
    names warn); older images have only ``all_gather_into_tensor`` / ``reduce_scatter_tensor``."""
    return getattr(dist, name, None) or getattr(dist, old)


def _send_recv(bufs: Buffers, rank: int, n: int) -> None:
    """Each rank sends to the next and receives from the previous."""
    ops = [dist.P2POp(dist.isend, bufs.send, (rank + 1) % n),
           dist.P2POp(dist.irecv, bufs.recv, (rank - 1) % n)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


# call: one collective on (bufs, rank, ranks), blocking (gloo returns when done; NCCL enqueues)
COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("all_reduce", "sum", all_reduce_factor, "2(n-1)/n", sums=True,
               call=lambda bufs, rank, n: dist.all_reduce(bufs.send)),
    Collective("all_gather", "none", gather_factor, "(n-1)/n", split=True,
               call=lambda bufs, rank, n: _newest("all_gather_single",
                                                  "all_gather_into_tensor")(bufs.recv, bufs.send)),
    Collective("reduce_scatter", "sum", gather_factor, "(n-1)/n", split=True, sums=True,
               call=lambda bufs, rank, n: _newest("reduce_scatter_single",
                                                  "reduce_scatter_tensor")(bufs.recv, bufs.send)),
    Collective("alltoall", "none", gather_factor, "(n-1)/n", split=True, checks_in_place=False,
               call=lambda bufs, rank, n: dist.all_to_all_single(bufs.recv, bufs.send)),
    Collective("broadcast", "none", one, "1", root=ROOT,
               call=lambda bufs, rank, n: dist.broadcast(bufs.send, src=ROOT)),
    Collective("reduce", "sum", one, "1", root=ROOT, sums=True,
               call=lambda bufs, rank, n: dist.reduce(bufs.send, dst=ROOT)),
    # nccl-tests' sendrecv prints the -o op it was given (sum by default), though none applies
    Collective("sendrecv", "sum", one, "1", checks_in_place=False, min_ranks=2,
               why_min_ranks="needs 2 ranks (torch.distributed does not send to its own rank)",
               call=_send_recv),
)}

#!/usr/bin/env python3
"""all_reduce bandwidth benchmark on torch.distributed, measured the way nccl-tests measures.

Runs inside the container images, so it needs torch and the standard library only.

Launch one process per GPU (or per CPU rank with gloo), for example::

    torchrun --standalone --nproc-per-node 4 allreduce.py --out results/
    srun python allreduce.py --out results/       # with MASTER_ADDR / MASTER_PORT exported

Measurement (see nccl-tests ``src/common.cu`` and ``doc/PERFORMANCE.md``):

* per size, ``--warmup`` untimed calls, then ``--iters`` timed calls, out-of-place then in-place;
* the time of one iteration is the mean over the timed calls on a rank, and the reported time is
  the MAX of that over ranks (the slowest rank bounds the collective);
* ``algbw = bytes / time`` and ``busbw = algbw * 2(n-1)/n``, in GB/s (10^9 bytes per second);
* correctness is checked outside the timed region on freshly initialised data whose exact sum is
  known, and ``#wrong`` is the number of wrong elements summed over ranks;
* ``--cycles N`` repeats the whole sweep N times (nccl-tests' ``-N``): a link that corrupts data
  now and then shows up as wrong values in some cycles only;
* with one rank no data crosses a link, so algbw and busbw are not reported (``n/a``, JSON null).

``torch.distributed.all_reduce`` only works in place.  "Out-of-place" here means the result lands
in a separate output buffer that is refilled from an untouched input buffer before every call; the
copy is outside the timed bracket, so only the collective is timed.  Each call is bracketed on its
own (CUDA/HIP events on the GPU, ``time.perf_counter`` on the CPU) and the brackets are summed.
Expect out-of-place and in-place numbers to be close: it is the same collective underneath.

Exit status: 0 all good; 1 wrong values found; 2 bad command line; 3 any other error; 4 no usable
GPU of the kind ``--expect-gpu`` names.  Every rank pins itself to its ``--rank-cores`` and writes
``OUT/device-<RANK>.json`` (what it runs on) before the process group exists; rank 0 prints the
table and writes ``OUT/allreduce.json`` (rewritten after every size); every rank writes
``OUT/rank-<RANK>.json`` once it has finished cleanly, so the launcher can tell which ranks did not
finish.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

import choices
import devices
import workload
# shared with train.py: both start the same way under every launcher
from distenv import DistEnv, init_process_group, now_iso, runtime_versions, sync, write_json
from workload import EXIT_OK

EXIT_WRONG = workload.EXIT_FAILED
FAULT_EXIT_CODE = 17

BENCHMARK = "all_reduce"
REDOP = "sum"
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in choices.DTYPES}
FAULT_KINDS = ("die", "hang", "corrupt")
MODES = ("oop", "ip")
ONE_RANK_NOTE = ("# 1 rank: no data crosses a link, so algbw and busbw are not meaningful "
                 "(shown as n/a)")
# Largest element value in the check pattern; 13 is prime, so the pattern is not aligned with
# any power-of-two chunking a collective algorithm might use.
MAX_PATTERN_PERIOD = 13


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """A fault to inject on one rank; exists only so the harness's failure paths can be tested."""

    kind: str
    rank: int
    cycle: Optional[int] = None  # corrupt only: the one 1-based cycle it acts in; None: every one

    def corrupts(self, rank: int, cycle: int) -> bool:
        """Whether this fault damages ``rank``'s results in ``cycle``."""
        return self.kind == "corrupt" and self.rank == rank and self.cycle in (None, cycle)


def parse_fault(text: str) -> Fault:
    """Parse ``KIND@RANK`` for ``--fault``, or ``corrupt@RANK:CYCLE`` for one cycle only (die
    and hang act once, in the first cycle, so a cycle there is refused rather than ignored)."""
    kind, sep, where = text.partition("@")
    rank, colon, cycle = where.partition(":")
    if not sep or kind not in FAULT_KINDS or not rank.isdigit() or \
            (colon and (kind != "corrupt" or not cycle.isdigit() or int(cycle) < 1)):
        raise ValueError(f"fault must be KIND@RANK with KIND in {', '.join(FAULT_KINDS)}, or "
                         f"corrupt@RANK:CYCLE (CYCLE from 1): {text!r}")
    return Fault(kind=kind, rank=int(rank), cycle=int(cycle) if colon else None)


def build_parser() -> argparse.ArgumentParser:
    """The command line; every flag is documented because batch scripts are read by others."""
    parser = argparse.ArgumentParser(
        description="torch.distributed all_reduce benchmark with nccl-tests style output "
        "(time, algbw, busbw, #wrong; out-of-place and in-place).",
        epilog=workload.EPILOG.format(failed="wrong values"),
    )
    parser.add_argument(
        "--sizes", default="1K:128M",
        help="message sizes in bytes: A:B for A, A*f, ... up to B (f = --step-factor), or a comma "
        "list A,B,C; K/M/G are binary units (default: %(default)s)")
    workload.add_counts(parser, [
        ("--step-factor", workload.step_factor, 2,
         "multiplier between sizes of an A:B range, >= 2"),
        ("--iters", workload.positive_int, 20, "timed iterations per size and mode"),
        ("--warmup", workload.non_negative_int, 5, "untimed warm-up iterations per size"),
        ("--cycles", workload.positive_int, 1,
         "times to run the whole size sweep (nccl-tests' -N); results keep each size's last "
         "timings and the wrong values of all cycles"),
    ])
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float32",
        help="element type (default: %(default)s)")
    workload.add_common_flags(parser, out="allreduce-results", writes="allreduce.json",
                              timeout_s=300)
    parser.add_argument(
        "--check", action=argparse.BooleanOptionalAction, default=True,
        help="check every result against the exact expected sum (default: on)")
    parser.add_argument(
        "--fault", type=workload.argparse_type(parse_fault), default=None, metavar="KIND@RANK",
        help="FOR TESTS OF THE HARNESS ONLY: inject a fault on one rank. die: the rank exits with "
        f"status {FAULT_EXIT_CODE} after the first size's warm-up of the first cycle; hang: the "
        "rank sleeps forever there; corrupt: the rank damages its result buffer before every "
        "check, or with corrupt@RANK:CYCLE only in that cycle (from 1)")
    return parser


# ----------------------------------------------------------------------------------------------
# Bandwidth model and check pattern
# ----------------------------------------------------------------------------------------------


def busbw_factor(world_size: int) -> float:
    """nccl-tests' all_reduce bus factor 2(n-1)/n: makes busbw comparable across rank counts."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return 2.0 * (world_size - 1) / world_size


def bandwidths(nbytes: int, seconds: float,
               world_size: int) -> tuple[Optional[float], Optional[float]]:
    """Return (algbw, busbw) in GB/s (10^9) for one all_reduce of nbytes taking seconds.

    None for one rank: nothing crosses a link, so bytes over time measures a memory copy at best
    (one H100 "reached" 624,268 GB/s for 1 GiB), which no one should read as bandwidth.
    """
    if world_size == 1:
        return None, None
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * busbw_factor(world_size)


def exact_integer_limit(dtype: torch.dtype) -> int:
    """Largest N such that every integer 0..N is exact in dtype (2^24, 2^11, 2^8 for
    fp32, fp16, bf16)."""
    eps = torch.finfo(dtype).eps  # 2^-(significand bits - 1)
    significand_bits = 1 - round(torch.log2(torch.tensor(eps, dtype=torch.float64)).item())
    return 2**significand_bits


def pattern_period(dtype: torch.dtype, world_size: int) -> int:
    """Largest element value K for the check pattern, or 0 if no exact check is possible.

    Rank r holds ((i + r) mod K) + 1 at element i: small positive integers, so every partial sum
    of any reduction order is an integer no larger than world_size * K.  Keeping that at or
    below the dtype's exact-integer limit makes the result exact, whatever algorithm the
    backend picks (ring, tree, NVLS) and whatever order it adds in.  bfloat16 only holds
    integers exactly up to 256, hence the shrinking K; beyond 256 ranks no such pattern exists.
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
    total = torch.zeros(period, dtype=torch.int64, device=device)
    for rank in range(world_size):
        total += (index + rank) % period + 1
    return _tiled(total.to(dtype), count)


# ----------------------------------------------------------------------------------------------
# Timing and check
# ----------------------------------------------------------------------------------------------


def time_collective(buf: torch.Tensor, src: Optional[torch.Tensor], iters: int,
                    device: torch.device) -> float:
    """Mean seconds per all_reduce of buf on this rank, timing the collective alone.

    With src (out-of-place), buf is refilled from src before each call and the copy sits
    outside the bracket.  On the GPU the bracket is a pair of events on the current stream:
    the NCCL stream waits for the start event and the end event waits for the collective, so
    the bracket covers the collective (including waiting for late ranks, as in nccl-tests)
    without a host synchronisation per call.  On the CPU gloo returns when the work is done,
    so a wall-clock bracket is exact.
    """
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            if src is not None:
                buf.copy_(src)
            start.record()
            dist.all_reduce(buf)
            end.record()
        torch.cuda.synchronize(device)
        return sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3 / iters
    total = 0.0
    for _ in range(iters):
        if src is not None:
            buf.copy_(src)
        began = time.perf_counter()
        dist.all_reduce(buf)
        total += time.perf_counter() - began
    return total / iters


def count_wrong(buf: torch.Tensor, src: torch.Tensor, expected: torch.Tensor,
                corrupt: bool = False) -> int:
    """all_reduce fresh input and count elements that differ from the exact sum, on this rank.

    corrupt damages one element after the collective (the --fault corrupt test hook); the
    expected values are all positive, so -1 is always wrong.
    """
    buf.copy_(src)
    dist.all_reduce(buf)
    if corrupt:
        buf[0] = -1
    return int((buf != expected).sum().item())


def reduce_across_ranks(values: list[float], op: dist.ReduceOp, dtype: torch.dtype,
                        device: torch.device) -> list[float]:
    """Reduce a few host numbers over all ranks (MAX of times, SUM of wrong counts)."""
    tensor = torch.tensor(values, dtype=dtype, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


# ----------------------------------------------------------------------------------------------
# Records, table and JSON
# ----------------------------------------------------------------------------------------------


def make_mode_record(nbytes: int, seconds: float, wrong: Optional[int],
                     world_size: int) -> dict[str, Any]:
    """One mode's numbers, rounded once here so the table and the JSON show the same values."""
    algbw, busbw = bandwidths(nbytes, seconds, world_size)
    return {
        "time_us": round(seconds * 1e6, 2),
        "algbw": None if algbw is None else round(algbw, 3),
        "busbw": None if busbw is None else round(busbw, 3),
        "wrong": wrong,
    }


def make_record(nbytes: int, count: int, dtype_name: str, oop: dict[str, Any],
                ip: dict[str, Any]) -> dict[str, Any]:
    """One table row / one element of the JSON ``results`` list."""
    return {"bytes": nbytes, "count": count, "type": dtype_name, "redop": REDOP,
            "oop": oop, "ip": ip}


# Column layout shared by the header and the rows: (header, units, width).
_KEY_COLUMNS = (("size", "(B)", 12), ("count", "(elements)", 12), ("type", "", 9),
                ("redop", "", 6))
_MODE_COLUMNS = (("time", "(us)", 11), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8),
                 ("#wrong", "", 7))


def format_table_header() -> str:
    """The nccl-tests column header: names, then units, out-of-place then in-place."""
    key_width = sum(width + 1 for _, _, width in _KEY_COLUMNS)
    mode_width = sum(width + 1 for _, _, width in _MODE_COLUMNS)
    banner = "#" + " " * (key_width - 1) + "  " + "out-of-place (oop)".center(mode_width) + \
        "  " + "in-place (ip)".center(mode_width)
    lines = [banner.rstrip()]
    for row in (0, 1):
        keys = " ".join(f"{col[row]:>{col[2]}}" for col in _KEY_COLUMNS)
        mode = " ".join(f"{col[row]:>{col[2]}}" for col in _MODE_COLUMNS)
        lines.append(("#" + keys[1:] + " |" + mode + " |" + mode).rstrip())
    return "\n".join(lines)


def _gbps(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _format_mode(mode: dict[str, Any]) -> str:
    wrong = "N/A" if mode["wrong"] is None else str(mode["wrong"])
    widths = [col[2] for col in _MODE_COLUMNS]
    return (f"{mode['time_us']:>{widths[0]}.2f} {_gbps(mode['algbw']):>{widths[1]}} "
            f"{_gbps(mode['busbw']):>{widths[2]}} {wrong:>{widths[3]}}")


def format_row(record: dict[str, Any]) -> str:
    """One result row, aligned under format_table_header()."""
    widths = [col[2] for col in _KEY_COLUMNS]
    keys = (f"{record['bytes']:>{widths[0]}} {record['count']:>{widths[1]}} "
            f"{record['type']:>{widths[2]}} {record['redop']:>{widths[3]}}")
    return f"{keys} |{_format_mode(record['oop'])} |{_format_mode(record['ip'])}"


def summarize(records: list[dict[str, Any]],
              check: bool) -> tuple[Optional[int], Optional[float]]:
    """(total #wrong or None when unchecked, mean busbw over all rows and both modes, or None
    when there is no busbw: one rank).

    The mean is nccl-tests' "Avg bus bandwidth"; it is dominated by small messages.
    """
    modes = [record[key] for record in records for key in ("oop", "ip")]
    wrong_total = sum(mode["wrong"] for mode in modes) if check else None
    busbw = [mode["busbw"] for mode in modes if mode["busbw"] is not None]
    return wrong_total, round(sum(busbw) / len(busbw), 3) if busbw else None


def format_footer(wrong_total: Optional[int], avg_busbw: Optional[float]) -> str:
    """The nccl-tests footer, with a reminder that the average is not a verdict on bandwidth."""
    if wrong_total is None:
        bounds = "N/A (check disabled)"
    else:
        bounds = f"{wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}"
    return "\n".join([
        f"# Out of bounds values : {bounds}",
        f"# Avg bus bandwidth    : {_gbps(avg_busbw)}",
        "#   (mean over all sizes and both modes, dominated by small messages: read the busbw of",
        "#    the largest size instead; the average is not a pass criterion)",
    ])


def format_header(args: argparse.Namespace, sizes: list[int], env: DistEnv, backend: str,
                  ranks: list[dict[str, Any]], nodes: int) -> str:
    """nccl-tests' preamble (with nThread/nGpus), plus backend, versions and the rank map."""
    step = "list" if ":" not in args.sizes else f"{args.step_factor}(factor)"
    gpus = 1 if backend == "nccl" else 0
    lines = [
        f"# {BENCHMARK} on torch.distributed (nccl-tests layout)",
        f"# nThread 1 nGpus {gpus} minBytes {min(sizes)} maxBytes {max(sizes)} step: {step} "
        f"warmup iters: {args.warmup} iters: {args.iters} agg iters: 1 "
        f"validation: {int(args.check)} graph: 0",
        f"# ranks {env.world_size}  nodes {nodes}  launcher {env.launcher}  backend {backend}  "
        f"dtype {args.dtype}  cycles {args.cycles}  {runtime_summary()}",
        "# time: per-iteration mean on each rank, max over ranks; copy to the oop buffer untimed",
    ]
    if env.world_size == 1:
        lines.append(ONE_RANK_NOTE)
    lines += ["#", *devices.format_rank_lines(ranks), "#"]
    return "\n".join(lines)


def runtime_summary() -> str:
    """One header fragment such as ``torch 2.13.0  cuda 12.8  nccl 2.27.5  driver 550.54.15``."""
    return "  ".join(f"{name} {value}" for name, value in runtime_versions().items() if value)


def merge_result(previous: Optional[dict[str, Any]], record: dict[str, Any],
                 cycle: int) -> dict[str, Any]:
    """A size's row of ``results`` after ``cycle``: that cycle's timings, the wrong values of
    every cycle so far, and which cycles had any (one bad cycle in ten must not hide)."""
    row = {**record, **{mode: dict(record[mode]) for mode in MODES}}
    wrong_cycles = list(previous["wrong_cycles"]) if previous else []
    if any(record[mode]["wrong"] for mode in MODES):
        wrong_cycles.append(cycle)
    if previous and record["oop"]["wrong"] is not None:
        for mode in MODES:
            row[mode]["wrong"] += previous[mode]["wrong"]
    row["wrong_cycles"] = wrong_cycles
    return row


def failure_line(report: dict[str, Any], wrong_total: int) -> str:
    """``# FAILED: N wrong values at sizes (B): 1024 (cycle 2: oop 1, ip 1)``: which sizes, in
    which cycles, in which mode."""
    bad = []
    for index, row in enumerate(report["results"]):
        cycles = [(entry["cycle"], entry["results"][index]) for entry in report["cycle_results"]
                  if entry["cycle"] in row["wrong_cycles"]]
        if cycles:
            bad.append(f"{row['bytes']} (" + "; ".join(
                f"cycle {cycle}: oop {rec['oop']['wrong']}, ip {rec['ip']['wrong']}"
                for cycle, rec in cycles) + ")")
    return f"# FAILED: {wrong_total} wrong values at sizes (B): {', '.join(bad)}"


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def inject_mid_run_fault(fault: Optional[Fault], rank: int) -> None:
    """--fault die / hang: act on the faulty rank after the first size's warm-up."""
    if fault is None or fault.rank != rank or fault.kind not in ("die", "hang"):
        return
    print(f"rank {rank}: injected fault {fault.kind}", file=sys.stderr, flush=True)
    if fault.kind == "die":
        os._exit(FAULT_EXIT_CODE)
    while True:
        time.sleep(3600)


def benchmark_size(nbytes: int, count: int, send: torch.Tensor, recv: torch.Tensor,
                   args: argparse.Namespace, env: DistEnv, device: torch.device,
                   period: int, cycle: int, first: bool) -> tuple[dict[str, Any], int]:
    """Warm up, time oop then ip, check both; return the (reduced) record and the local #wrong."""
    dtype = DTYPES[args.dtype]
    src, buf = send[:count], recv[:count]
    buf.copy_(src)
    if args.warmup:
        time_collective(buf, None, args.warmup, device)
    if first:
        inject_mid_run_fault(args.fault, env.rank)

    sync(device)
    oop_s = time_collective(buf, src, args.iters, device)
    buf.copy_(src)
    sync(device)
    ip_s = time_collective(buf, None, args.iters, device)

    local_wrong = [0, 0]
    if period:
        expected = expected_values(env.world_size, count, period, dtype, device)
        corrupt = args.fault is not None and args.fault.corrupts(env.rank, cycle)
        # Both modes end in the same collective on the same buffer; check each, as nccl-tests does.
        local_wrong = [count_wrong(buf, src, expected, corrupt) for _mode in MODES]
        del expected

    oop_s, ip_s = reduce_across_ranks([oop_s, ip_s], dist.ReduceOp.MAX, torch.float64, device)
    wrong = reduce_across_ranks(local_wrong, dist.ReduceOp.SUM, torch.int64, device)
    oop_wrong, ip_wrong = (int(w) for w in wrong) if period else (None, None)
    record = make_record(
        nbytes, count, args.dtype,
        make_mode_record(nbytes, oop_s, oop_wrong, env.world_size),
        make_mode_record(nbytes, ip_s, ip_wrong, env.world_size),
    )
    return record, sum(local_wrong)


def run_cycles(args: argparse.Namespace, env: DistEnv, sizes: list[int], device: torch.device,
               period: int, report: dict[str, Any], out: Path) -> int:
    """Sweep every size ``--cycles`` times, filling ``report`` (rewritten after every size on
    rank 0, so a run that dies midway leaves what it measured); return this rank's #wrong."""
    dtype, elem = DTYPES[args.dtype], choices.DTYPES[args.dtype]
    leader = env.rank == 0
    send = rank_values(env.rank, max(sizes) // elem, period or MAX_PATTERN_PERIOD, dtype, device)
    recv = torch.empty_like(send)
    local_wrong = 0
    for cycle in range(1, args.cycles + 1):
        if leader and args.cycles > 1:
            print(f"# cycle {cycle}/{args.cycles}", flush=True)
        rows: list[dict[str, Any]] = []
        report["cycle_results"].append({"cycle": cycle, "results": rows})
        for index, size in enumerate(sizes):
            count = size // elem
            record, wrong = benchmark_size(count * elem, count, send, recv, args, env, device,
                                           period, cycle, first=cycle == 1 and index == 0)
            local_wrong += wrong
            rows.append(record)  # every rank: all of them exit with the same verdict
            results = report["results"]
            if cycle == 1:
                results.append(merge_result(None, record, cycle))
            else:
                results[index] = merge_result(results[index], record, cycle)
            if leader:
                print(format_row(record), flush=True)
                write_json(out / "allreduce.json", report)  # partial: finished stays null
        report["cycles_done"] = cycle
    return local_wrong


def run(args: argparse.Namespace, env: DistEnv) -> int:
    """Benchmark every size, print on rank 0, write the JSON files; return the exit status."""
    placement = workload.place_rank(args, env)  # first: pinned before anything touches a GPU
    started = now_iso()
    try:  # before the process group exists, so every rank refuses at once
        sizes = choices.check_sizes(args.sizes, args.dtype, args.step_factor)
    except ValueError as err:
        raise workload.UsageError(f"--sizes: {err}") from err

    backend, device = placement.backend, placement.device
    init_process_group(env, backend, args.timeout_s)
    out = Path(args.out)
    leader = env.rank == 0

    ranks = devices.gather_ranks(placement.probe, device)
    hostnames = sorted({info["hostname"] for info in ranks})
    period = pattern_period(DTYPES[args.dtype], env.world_size) if args.check else 0
    if leader:
        print(format_header(args, sizes, env, backend, ranks, len(hostnames)), flush=True)
        if args.check and not period:
            print(f"# check disabled: {args.dtype} cannot hold exact sums over "
                  f"{env.world_size} ranks", flush=True)
        print(format_table_header(), flush=True)

    report: dict[str, Any] = {
        "benchmark": BENCHMARK, "world_size": env.world_size, "nodes": len(hostnames),
        "backend": backend, "device": device.type, "expect_gpu": args.expect_gpu,
        "dtype": args.dtype, "torch_version": torch.__version__, "runtime": runtime_versions(),
        "hostnames": hostnames, "ranks": ranks, "iters": args.iters, "warmup": args.warmup,
        "check": bool(period), "cycles": args.cycles, "cycles_done": 0, "results": [],
        "cycle_results": [], "wrong_total": None, "avg_busbw": None, "ok": False,
        "started": started, "finished": None,
    }
    if leader:  # exists from the start, so a run that dies early still leaves its context
        write_json(out / "allreduce.json", report)

    local_wrong = run_cycles(args, env, sizes, device, period, report, out)
    wrong_total, avg_busbw = summarize(report["results"], bool(period))
    ok = not wrong_total
    if leader:
        print(format_footer(wrong_total, avg_busbw), flush=True)
        if not ok:
            message = failure_line(report, wrong_total or 0)
            print(message, flush=True)
            print(message.lstrip("# "), file=sys.stderr, flush=True)
        report.update(wrong_total=wrong_total, avg_busbw=avg_busbw, ok=ok, finished=now_iso())
        write_json(out / "allreduce.json", report)

    dist.destroy_process_group()
    workload.write_rank_file(out, env, wrong=local_wrong if period else None)
    return EXIT_OK if ok else EXIT_WRONG


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return workload.guarded_main("allreduce.py", lambda env: run(args, env))


if __name__ == "__main__":
    sys.exit(main())

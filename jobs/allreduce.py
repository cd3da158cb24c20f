#!/usr/bin/env python3
"""Collective bandwidth benchmark on torch.distributed, measured the way nccl-tests measures.

``--op`` picks the collectives (all_reduce by default; ``--op all``: all_reduce, all_gather,
reduce_scatter, alltoall, broadcast, reduce, sendrecv). One timing loop here runs each of them;
what is particular to one (buffers, call, expected values, bytes, bus factor) is its plug-in in
``collectives.py``.

Runs inside the container images, so it needs torch and the standard library only.

Launch one process per GPU (or per CPU rank with gloo), for example::

    torchrun --standalone --nproc-per-node 4 allreduce.py --out results/
    srun python allreduce.py --out results/       # with MASTER_ADDR / MASTER_PORT exported

Measurement (see nccl-tests ``src/common.cu`` and ``doc/PERFORMANCE.md``):

* per size, ``--warmup`` untimed calls, then ``--iters`` timed calls, out-of-place then in-place;
* the time of one iteration is the mean over the timed calls on a rank, and the reported time is
  the MAX of that over ranks (the slowest rank bounds the collective);
* ``algbw = bytes / time`` and ``busbw = algbw * factor``, in GB/s (10^9 bytes per second), with
  the collective's bytes and bus factor (``collectives.py``);
* correctness is checked outside the timed region on freshly initialised data: every rank's
  output is compared element by element with the exact values that rank must hold (the output is
  poisoned first, so a call that writes nothing fails), and ``#wrong`` is the number of wrong
  elements summed over ranks;
* ``--cycles N`` repeats each op's sweep N times (nccl-tests' ``-N``: its rows repeat in the
  op's table): a link that corrupts data now and then shows up as wrong values in some cycles;
* with one rank no data crosses a link: algbw and busbw are printed as nccl-tests prints them
  (numbers: a memory copy's rate, times the op's bus factor at 1 rank), and judged by nothing.

Out-of-place and in-place are each op's buffers in ``collectives.py`` (alltoall and sendrecv run
in place on one buffer and are not checked there, as in nccl-tests: ``#wrong`` N/A).  An op
the backend does not have is reported in one line (and fails the run) rather than imitated.  Each call is bracketed on its own (CUDA/HIP events on the
GPU, ``time.perf_counter`` on the CPU) and the brackets are summed.  Expect out-of-place and
in-place numbers to be close: it is the same collective underneath.

Exit status 1 means wrong values, or an op this backend or rank count cannot run; the others and
the per-rank files are ``workload.py``'s.  Rank 0 prints one nccl-tests table per op
(``nccltests.py``: its header, rows, ``# Avg bus bandwidth`` and ``Collective test concluded``
line; all else on ``#`` lines) and writes ``OUT/allreduce.json``, every op's report (rewritten
after every size; every row names its ``op``, and ``collectives`` holds each op's factor, #wrong
and verdict), and per op ``OUT/<op>.json`` (its part of that report) and ``OUT/<op>.txt`` (the
preamble and its table: what its nccl-tests binary prints, for the scripts sites run on that).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

import choices
import devices
import nccltests
import workload
from collectives import COLLECTIVES, MAX_PATTERN_PERIOD, Buffers, Collective, rank_values
# shared with train.py: both start the same way under every launcher
from distenv import (DistEnv, now_iso, reduce_across_ranks, runtime_versions, sync, write_json,
                     write_text)

EXIT_WRONG = workload.EXIT_FAILED
FAULT_EXIT_CODE = 17

BENCHMARK = "all_reduce"
#: The combined report of every op, as this tool reads it (each op also has ``<op>.json``).
REPORT = "allreduce.json"
#: The smoke report's version (containers/records.py: SmokeReport reads it; this file imports
#: nothing of the engine, so the number is kept equal to records.SmokeReport.SCHEMA by a test).
REPORT_SCHEMA = 2
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in choices.DTYPES}
FAULT_KINDS = ("die", "hang", "corrupt")
MODES = ("oop", "ip")
ONE_RANK_NOTE = ("# 1 rank: no data crosses a link, so algbw and busbw measure no link "
                 "(printed as nccl-tests prints them; judged by nothing)")
# How torch's backends refuse a collective they lack ("ProcessGroupGloo does not support
# reduce_scatter", "... is not implemented", "Unsupported ..."); any other error is a failure.
UNSUPPORTED = re.compile(r"not support|unsupported|not implemented|no attribute", re.IGNORECASE)


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
        description="torch.distributed collective benchmark (all_reduce by default; --op) "
        "with nccl-tests style output (time, algbw, busbw, #wrong; out-of-place and in-place).",
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
        "--op", type=workload.argparse_type(choices.parse_ops), default=["all_reduce"],
        metavar="OPS",
        help=f"collectives to measure: a comma list of {', '.join(choices.COLLECTIVES)}, or all "
        "(default: all_reduce)")
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float32",
        help="element type (default: %(default)s)")
    workload.add_common_flags(parser, out="allreduce-results", writes=REPORT,
                              timeout_s=300)
    parser.add_argument(
        "--check", action=argparse.BooleanOptionalAction, default=True,
        help="check every rank's result against the exact values it must hold (default: on)")
    parser.add_argument(
        "--fault", type=workload.argparse_type(parse_fault), default=None, metavar="KIND@RANK",
        help="FOR TESTS OF THE HARNESS ONLY: inject a fault on one rank. die: the rank exits with "
        f"status {FAULT_EXIT_CODE} after the first size's warm-up of the first cycle; hang: the "
        "rank sleeps forever there; corrupt: the rank damages its result buffer before every "
        "check of every op (reduce's non-root ranks, which receive nothing, damage their "
        "input instead), or with corrupt@RANK:CYCLE only in that cycle (from 1)")
    return parser


def bandwidths(nbytes: int, seconds: float,
               factor: float) -> tuple[Optional[float], Optional[float]]:
    """Return (algbw, busbw) in GB/s (10^9) for one collective moving nbytes (its bw bytes) in
    seconds; ``factor`` is its bus factor. One rank gets numbers too, as nccl-tests prints them
    (strict readers of its tables take nothing else): no link is crossed, so they measure a
    memory copy at best (one H100 "reached" 624,268 GB/s algbw for 1 GiB) and no verdict reads
    them (the smoke's judgement of one rank is "not judged"). A broken timer: none, never NaN."""
    if not math.isfinite(seconds):
        return None, None
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * factor


def time_collective(op: Collective, bufs: Buffers, iters: int, device: torch.device,
                    rank: int, world_size: int) -> float:
    """Mean seconds per call of ``op`` on ``bufs`` on this rank, timing the collective alone.

    With ``bufs.refill`` (out-of-place of a one-tensor call), the input is restored before each
    call and the copy sits outside the bracket.  On the GPU the bracket is a pair of events on
    the current stream: the NCCL stream waits for the start event and the end event waits for
    the collective, so the bracket covers the collective (including waiting for late ranks, as
    in nccl-tests) without a host synchronisation per call.  On the CPU gloo returns when the
    work is done, so a wall-clock bracket is exact.
    """
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            if bufs.refill:
                bufs.send.copy_(bufs.src)
            start.record()
            op.call(bufs, rank, world_size)
            end.record()
        torch.cuda.synchronize(device)
        return sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3 / iters
    total = 0.0
    for _ in range(iters):
        if bufs.refill:
            bufs.send.copy_(bufs.src)
        began = time.perf_counter()
        op.call(bufs, rank, world_size)
        total += time.perf_counter() - began
    return total / iters


def count_wrong(op: Collective, bufs: Buffers, expected: Optional[torch.Tensor], rank: int,
                world_size: int, corrupt: bool = False) -> int:
    """Run ``op`` once on fresh input and count this rank's elements that differ from the exact
    values it must hold (``expected``; None: it receives nothing, so nothing is counted here).

    The result buffer is poisoned first (no pattern holds 0), so a call that leaves it alone is
    caught.  corrupt is the --fault corrupt test hook: it damages one element of the result
    after the call (every expected value is positive, so -1 is always wrong), or, on a rank
    that receives nothing, one element of its input before the call, so the root's result is
    wrong instead.
    """
    bufs.recv.fill_(0)
    bufs.send.copy_(bufs.src)
    if corrupt and expected is None:
        bufs.send[0] = -1
    op.call(bufs, rank, world_size)
    if expected is None:
        return 0
    if corrupt:
        bufs.recv[0] = -1
    return int((bufs.recv != expected).sum().item())


def make_mode_record(nbytes: int, seconds: float, wrong: Optional[int],
                     factor: float) -> dict[str, Any]:
    """One mode's numbers, rounded once here so the table and the JSON show the same values;
    ``nbytes`` is what algbw divides (the op's bw bytes), ``factor`` its bus factor."""
    algbw, busbw = bandwidths(nbytes, seconds, factor)
    return {
        "time_us": round(seconds * 1e6, 2) if math.isfinite(seconds) else None,
        "algbw": None if algbw is None else round(algbw, 3),
        "busbw": None if busbw is None else round(busbw, 3),
        "wrong": wrong,
    }


def make_record(nbytes: int, count: int, dtype_name: str, oop: dict[str, Any],
                ip: Optional[dict[str, Any]], op: str = "all_reduce") -> dict[str, Any]:
    """One table row / one element of the JSON ``results`` list; ``root`` None: the op has
    none (the table prints -1, as nccl-tests)."""
    return {"op": op, "bytes": nbytes, "count": count, "type": dtype_name,
            "redop": COLLECTIVES[op].redop, "root": COLLECTIVES[op].root, "oop": oop, "ip": ip}


def row_modes(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The modes a row measured (both, but a report of an older harness has no in-place
    alltoall or sendrecv)."""
    return [record[mode] for mode in MODES if record.get(mode) is not None]


def summarize(records: list[dict[str, Any]],
              check: bool) -> tuple[Optional[int], Optional[float]]:
    """(total #wrong or None when unchecked, mean busbw over all rows and both modes, or None
    when there is no row).

    The mean is nccl-tests' "Avg bus bandwidth" (over one collective's rows, as each of its
    binaries averages its own); it is dominated by small messages.
    """
    modes = [mode for record in records for mode in row_modes(record)]
    wrong_total = sum(mode["wrong"] or 0 for mode in modes) if check else None
    busbw = [mode["busbw"] for mode in modes if mode["busbw"] is not None]
    return wrong_total, round(sum(busbw) / len(busbw), 3) if busbw else None


def op_notes(op: Collective, world_size: int) -> list[str]:
    """What this harness says about one op above its table: its bus factor and root, and an
    in-place result that is not checked (nccl-tests runs one binary per op; here one run
    prints one table per op)."""
    factor = op.factor(world_size)
    root = "" if op.root is None else f"  root {op.root}"
    value = "" if op.factor_text == "1" else f" = algbw * {factor:.4g}"
    notes = [f"busbw = algbw * {op.factor_text}{value} at {world_size} "
             f"rank{'s' if world_size != 1 else ''}{root}"]
    if not op.checks_in_place:
        notes.append("in-place runs on one buffer, as nccl-tests runs it, and is not checked "
                     "there either (#wrong N/A)")
    return notes


def format_header(args: argparse.Namespace, sizes: list[int], env: DistEnv, backend: str,
                  ranks: list[dict[str, Any]], nodes: int) -> str:
    """nccl-tests' preamble (with nThread/nGpus), plus backend, versions and the rank map."""
    step = "list" if ":" not in args.sizes else f"{args.step_factor}(factor)"
    gpus = 1 if backend == "nccl" else 0
    # e.g. "torch 2.13.0  cuda 12.8  nccl 2.27.5  driver 550.54.15"
    versions = "  ".join(f"{name} {value}" for name, value in runtime_versions().items() if value)
    lines = [
        f"# {', '.join(args.op)} on torch.distributed (nccl-tests layout)",
        f"# nThread 1 nGpus {gpus} minBytes {min(sizes)} maxBytes {max(sizes)} step: {step} "
        f"warmup iters: {args.warmup} iters: {args.iters} agg iters: 1 "
        f"validation: {int(args.check)} graph: 0",
        f"# ranks {env.world_size}  nodes {nodes}  launcher {env.launcher}  backend {backend}  "
        f"dtype {args.dtype}  cycles {args.cycles}  {versions}",
        "# time: per-iteration mean on each rank, max over ranks; copy to the oop buffer untimed",
    ]
    if env.world_size == 1:
        lines.append(ONE_RANK_NOTE)
    lines += ["#", *devices.format_rank_lines(ranks), "#"]
    return "\n".join(lines)


def merge_result(previous: Optional[dict[str, Any]], record: dict[str, Any],
                 cycle: int) -> dict[str, Any]:
    """A size's row of ``results`` after ``cycle``: that cycle's timings, the wrong values of
    every cycle so far, and which cycles had any (one bad cycle in ten must not hide)."""
    present = [mode for mode in MODES if record.get(mode) is not None]
    row = {**record, **{mode: dict(record[mode]) for mode in present}}
    wrong_cycles = list(previous["wrong_cycles"]) if previous else []
    if any(record[mode]["wrong"] for mode in present):
        wrong_cycles.append(cycle)
    for mode in present:  # a mode not checked (in-place alltoall, sendrecv) stays None
        if previous and record[mode]["wrong"] is not None:
            row[mode]["wrong"] += previous[mode]["wrong"]
    row["wrong_cycles"] = wrong_cycles
    return row


def _wrong_text(record: dict[str, Any]) -> str:
    return ", ".join(f"{mode} {record[mode]['wrong']}" for mode in MODES
                     if (record.get(mode) or {}).get("wrong") is not None)


def failure_line(report: dict[str, Any], wrong_total: int) -> str:
    """``# FAILED: N wrong values at sizes (B): 1024 (cycle 2: oop 1, ip 1)``: which sizes (of
    which op, when several ran), in which cycles, in which mode."""
    bad = []
    several = len(report.get("ops") or ["all_reduce"]) > 1
    for index, row in enumerate(report["results"]):
        cycles = [(entry["cycle"], entry["results"][index]) for entry in report["cycle_results"]
                  if entry["cycle"] in row["wrong_cycles"]]
        if cycles:
            name = f"{row.get('op', BENCHMARK)} " if several else ""
            bad.append(f"{name}{row['bytes']} (" + "; ".join(
                f"cycle {cycle}: {_wrong_text(rec)}" for cycle, rec in cycles) + ")")
    return f"# FAILED: {wrong_total} wrong values at sizes (B): {', '.join(bad)}"


def inject_mid_run_fault(fault: Optional[Fault], rank: int) -> None:
    """--fault die / hang: act on the faulty rank after the first size's warm-up."""
    if fault is None or fault.rank != rank or fault.kind not in ("die", "hang"):
        return
    print(f"rank {rank}: injected fault {fault.kind}", file=sys.stderr, flush=True)
    if fault.kind == "die":
        os._exit(FAULT_EXIT_CODE)
    while True:
        time.sleep(3600)


def benchmark_size(op: Collective, size: int, args: argparse.Namespace, env: DistEnv,
                   device: torch.device, period: int, cycle: int,
                   first: bool) -> tuple[dict[str, Any], int]:
    """One op at one size: warm up, time and check out-of-place, then in-place (checked where
    nccl-tests checks it); return the (reduced over ranks) record and this rank's #wrong."""
    dtype, element = DTYPES[args.dtype], choices.DTYPES[args.dtype]
    n, rank = env.world_size, env.rank
    param = op.param_count(size // element, n)
    src = rank_values(rank, op.send_count(param, n), period or MAX_PATTERN_PERIOD, dtype, device)
    expected = op.expected(rank, n, param, period, dtype, device) if period else None
    corrupt = args.fault is not None and args.fault.corrupts(rank, cycle)
    checked = [bool(period) and (mode == "oop" or op.checks_in_place) for mode in MODES]
    seconds, local_wrong = [], []
    for mode, check in zip(MODES, checked):
        bufs = op.buffers(mode, src, param, n, rank)
        if mode == "oop" and args.warmup:
            time_collective(op, bufs, args.warmup, device, rank, n)
            if first:
                inject_mid_run_fault(args.fault, rank)
        sync(device)
        seconds.append(time_collective(op, bufs, args.iters, device, rank, n))
        # Checked on fresh input after the timing, outside it, as nccl-tests does per mode.
        local_wrong.append(count_wrong(op, bufs, expected, rank, n, corrupt) if check else 0)
        del bufs
    del expected, src

    seconds = reduce_across_ranks(seconds, dist.ReduceOp.MAX, torch.float64, device)
    wrong = reduce_across_ranks(local_wrong, dist.ReduceOp.SUM, torch.int64, device)
    made = [make_mode_record(op.bw_bytes(param, n, element), s, w if check else None,
                             op.factor(n)) for s, w, check in zip(seconds, wrong, checked)]
    record = make_record(op.size_bytes(param, n, element), param, args.dtype, *made, op=op.name)
    return record, sum(local_wrong)


def unsupported(op: Collective, env: DistEnv, device: torch.device,
                dtype: torch.dtype) -> Optional[str]:
    """Why ``op`` cannot run here (too few ranks, or the backend lacks it: one tiny call is
    tried on every rank, which all refuse alike), else None; the ranks agree on the answer."""
    if env.world_size < op.min_ranks:
        return op.why_min_ranks
    reason = None
    try:
        src = rank_values(env.rank, op.send_count(1, env.world_size), MAX_PATTERN_PERIOD, dtype,
                          device)
        op.call(op.buffers("oop", src, 1, env.world_size, env.rank), env.rank, env.world_size)
        sync(device)
    except (RuntimeError, NotImplementedError, AttributeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if isinstance(err, RuntimeError) and not UNSUPPORTED.search(first):
            raise  # a real failure (a broken link, a dead peer) is not a missing feature
        reason = f"not supported by backend {dist.get_backend()} in torch {torch.__version__}: " \
            f"{first[:200]}"
    refused = reduce_across_ranks([1 if reason else 0], dist.ReduceOp.MAX, torch.int64, device)
    if refused[0] and not reason:
        reason = f"not supported by backend {dist.get_backend()} on another rank"
    return reason


@dataclass
class Sweep:
    """What every op's sweep needs, and rank 0's output: one nccl-tests table per op on stdout,
    and per op ``OUT/<op>.txt`` (the run's preamble and that table: what the op's nccl-tests
    binary prints) and ``OUT/<op>.json`` (its part of the report), besides the combined
    ``OUT/allreduce.json`` that this tool reads."""

    args: argparse.Namespace
    env: DistEnv
    sizes: list[int]
    device: torch.device
    report: dict[str, Any]
    out: Path
    preamble: str = ""
    shown: list[str] = field(default_factory=list)

    def show(self, text: str) -> None:
        """Print on rank 0, and keep it for the op's own text file."""
        if self.env.rank == 0:
            print(text, flush=True)
            self.shown.append(text)

    def cycle_rows(self, cycle: int) -> list[dict[str, Any]]:
        """Cycle ``cycle``'s rows (every op's, in op order), started by the first op."""
        entries = self.report["cycle_results"]
        if len(entries) < cycle:
            entries.append({"cycle": cycle, "results": []})
        return entries[cycle - 1]["results"]

    def measure(self, op: Collective, period: int, number: int, notes: list[str]) -> int:
        """Op ``number`` of the run: its table, ``--cycles`` sweeps over the sizes (nccl-tests'
        -N repeats the rows in one table), its footer and files; return this rank's #wrong.
        ``report`` is rewritten after every size, so a run that dies midway leaves what it
        measured."""
        self.shown = []
        self.show(nccltests.opening(op.name, notes))
        local_wrong, results = 0, self.report["results"]
        for cycle in range(1, self.args.cycles + 1):
            if self.args.cycles > 1:
                self.show(f"# cycle {cycle}/{self.args.cycles}")
            rows = self.cycle_rows(cycle)
            for position, size in enumerate(self.sizes):
                index = number * len(self.sizes) + position
                record, wrong = benchmark_size(op, size, self.args, self.env, self.device,
                                               period, cycle, first=cycle == 1 and index == 0)
                local_wrong += wrong
                rows.append(record)  # every rank: all of them exit with the same verdict
                if cycle == 1:
                    results.append(merge_result(None, record, cycle))
                else:
                    results[index] = merge_result(results[index], record, cycle)
                self.show(nccltests.row(record))
                if self.env.rank == 0:  # partial: finished stays null
                    write_json(self.out / REPORT, self.report)
        summary = op_summaries(self.report, [op], self.env.world_size, {},
                               {op.name: period})[op.name]
        self.show(nccltests.footer(op.name, summary["wrong_total"], summary["avg_busbw"]))
        if self.env.rank == 0:
            write_text(self.out / f"{op.name}.txt", "\n".join([self.preamble, *self.shown, ""]))
            write_json(self.out / f"{op.name}.json", op_report(self.report, op.name, summary))
        return local_wrong


def op_report(report: dict[str, Any], name: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One op's part of the report, for ``OUT/<op>.json``: the same record (one reader reads
    both) with only its rows and summary, finished when the op is."""
    def mine(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [row for row in rows if row["op"] == name]
    return {**report, "benchmark": name, "ops": [name], "results": mine(report["results"]),
            "cycle_results": [{**entry, "results": mine(entry["results"])}
                              for entry in report["cycle_results"]],
            "collectives": {name: summary}, "wrong_total": summary["wrong_total"],
            "avg_busbw": summary["avg_busbw"], "ok": summary["ok"],
            "cycles_done": report["cycles"] if summary["unsupported"] is None else 0,
            "finished": now_iso()}


def op_summaries(report: dict[str, Any], ops: list[Collective], world_size: int,
                 refused: dict[str, str], periods: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Per op: its bus factor (as text and at this rank count), root, whether its in-place
    result is checked, whether it was checked at all, and, once measured, its #wrong, average
    busbw (nccl-tests' Avg bus bandwidth) and verdict; an op the backend refused carries the
    reason and is not ok."""
    found = {}
    for op in ops:
        rows = [row for row in report["results"] if row["op"] == op.name]
        checked = bool(periods.get(op.name))
        wrong, avg = summarize(rows, checked) if rows else (None, None)
        reason = refused.get(op.name)
        found[op.name] = {
            "factor": op.factor_text, "busbw_factor": round(op.factor(world_size), 6),
            "root": op.root, "in_place": True, "in_place_checked": checked and op.checks_in_place,
            "redop": op.redop, "check": checked, "unsupported": reason, "wrong_total": wrong,
            "avg_busbw": avg, "ok": reason is None and not wrong}
    return found


def notes_of(op: Collective, args: argparse.Namespace, world_size: int, period: int) -> list[str]:
    """The notes above an op's table: :func:`op_notes`, and a check the dtype cannot do."""
    unchecked = [f"check disabled: {args.dtype} cannot hold exact sums over {world_size} ranks"]
    return op_notes(op, world_size) + (unchecked if args.check and not period else [])


def run(args: argparse.Namespace, env: DistEnv) -> int:
    """Benchmark every op at every size, print on rank 0, write the JSON files; return the exit
    status."""
    placement = workload.place_rank(args, env)  # first: pinned before anything touches a GPU
    started = now_iso()
    try:  # before the process group exists, so every rank refuses at once
        sizes = choices.check_sizes(args.sizes, args.dtype, args.step_factor)
    except ValueError as err:
        raise workload.ScriptUsageError(f"--sizes: {err}") from err

    backend, device = placement.backend, placement.device
    workload.join_group(env, backend, args.timeout_s)
    out = Path(args.out)
    leader = env.rank == 0
    dtype = DTYPES[args.dtype]
    ops = [COLLECTIVES[name] for name in args.op]

    ranks = devices.gather_ranks(placement.probe, device)
    hostnames = sorted({info["hostname"] for info in ranks})
    refused = {op.name: reason for op in ops
               if (reason := unsupported(op, env, device, dtype)) is not None}
    periods = {op.name: op.period(dtype, env.world_size) if args.check else 0 for op in ops}
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA, "benchmark": BENCHMARK if args.op == [BENCHMARK] else "collectives", "ops": args.op,
        "world_size": env.world_size, "nodes": len(hostnames),
        "backend": backend, "device": device.type, "expect_gpu": args.expect_gpu,
        "dtype": args.dtype, "torch_version": torch.__version__, "runtime": runtime_versions(),
        "hostnames": hostnames, "ranks": ranks, "iters": args.iters, "warmup": args.warmup,
        "check": any(periods.values()), "cycles": args.cycles, "cycles_done": 0,
        "results": [], "cycle_results": [], "wrong_total": None, "avg_busbw": None,
        "ok": False, "started": started, "finished": None,
    }
    report["collectives"] = op_summaries(report, ops, env.world_size, refused, periods)
    sweep = Sweep(args, env, sizes, device, report, out,
                  preamble=format_header(args, sizes, env, backend, ranks, len(hostnames)))
    if leader:  # exists from the start, so a run that dies early still leaves its context
        print(sweep.preamble, flush=True)
        for name, reason in refused.items():
            print(f"# {name}: {reason}", flush=True)
        write_json(out / REPORT, report)

    runnable = [op for op in ops if op.name not in refused]
    local_wrong = sum(sweep.measure(op, periods[op.name], number,
                                    notes_of(op, args, env.world_size, periods[op.name]))
                      for number, op in enumerate(runnable))
    report["cycles_done"] = args.cycles if runnable else 0
    wrong_total = summarize(report["results"], any(periods.values()))[0]
    ok = not wrong_total and not refused
    if leader:
        conclude(report, ops, refused, periods, out)
    workload.finish(out, env, teardown=not args.no_teardown,
                    wrong=local_wrong if any(periods.values()) else None)
    return workload.EXIT_OK if ok else EXIT_WRONG


def conclude(report: dict[str, Any], ops: list[Collective], refused: dict[str, str],
             periods: dict[str, int], out: Path) -> None:
    """Rank 0's end of the run: the note on the averages, what failed (stdout and stderr),
    the final report and a file per refused op."""
    wrong_total, avg_busbw = summarize(report["results"], any(periods.values()))
    print(nccltests.AVG_NOTE, flush=True)
    messages = [f"# FAILED: {name}: {reason}" for name, reason in refused.items()]
    if wrong_total:
        messages.append(failure_line(report, wrong_total))
    for message in messages:
        print(message, flush=True)
        print(message.lstrip("# "), file=sys.stderr, flush=True)
    summaries = op_summaries(report, ops, report["world_size"], refused, periods)
    # nccl-tests' average is one collective's: several ops have one each, in ``collectives``
    report.update(wrong_total=wrong_total, avg_busbw=avg_busbw if len(ops) == 1 else None,
                  ok=not wrong_total and not refused, finished=now_iso(), collectives=summaries)
    write_json(out / REPORT, report)
    for name in refused:
        write_json(out / f"{name}.json", op_report(report, name, summaries[name]))


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return workload.guarded_main("allreduce.py", lambda env: run(args, env),
                                 teardown=not args.no_teardown)


if __name__ == "__main__":
    sys.exit(main())

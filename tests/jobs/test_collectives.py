"""Tests of the collectives ``allreduce.py --op`` measures (``jobs/collectives.py``): each plug-in's
bus factor, byte convention and exact expected values, then real gloo runs of every op on this
host at 2 and 4 ranks, with a corruption caught per op and per cycle.

The expected values are checked against a simulation written independently of the plug-ins:
the ranks' inputs stacked as one tensor, and each collective's meaning applied to the stack.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fixtures import procs
from tests.fixtures.procs import start
from tests.jobs.scripts import JOBS, clean_env, script, sibling

torch = pytest.importorskip("torch")

ar = script("allreduce.py", "allreduce_job")
coll = sibling("collectives")
nt = sibling("nccltests")
choices = sibling("choices")
CPU = torch.device("cpu")
ALL = list(choices.COLLECTIVES)


# ------------------------------------------------------------------------------ names, factors
def test_parse_ops():
    assert choices.parse_ops("all") == ALL
    assert choices.parse_ops("sendrecv, all_reduce") == ["all_reduce", "sendrecv"]
    assert choices.parse_ops("reduce,reduce") == ["reduce"]
    for bad in ("", "all,reduce", "all_reduce,bogus"):
        with pytest.raises(ValueError, match="all_reduce, all_gather"):
            choices.parse_ops(bad)
    assert set(coll.COLLECTIVES) == set(choices.COLLECTIVES)


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_bus_factors_are_nccl_tests(n):
    factors = {name: coll.COLLECTIVES[name].factor(n) for name in ALL}
    assert factors == pytest.approx({
        "all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
        "alltoall": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0})


def test_bytes_follow_nccl_tests():
    """The size column is the whole buffer for all_gather, reduce_scatter and alltoall, whose
    count column is per rank; algbw divides that whole buffer."""
    size, n, element = 2**20, 4, 4
    count = size // element
    for name in ALL:
        op = coll.COLLECTIVES[name]
        param = op.param_count(count, n)
        assert param == (count // n if name in ("all_gather", "reduce_scatter", "alltoall")
                         else count), name
        assert op.size_bytes(param, n, element) == size, name
        assert op.bw_bytes(param, n, element) == size, name
    ag = coll.COLLECTIVES["all_gather"]
    assert (ag.send_count(10, 4), ag.recv_count(10, 4)) == (10, 40)
    rs = coll.COLLECTIVES["reduce_scatter"]
    assert (rs.send_count(10, 4), rs.recv_count(10, 4)) == (40, 10)
    # a size below one element per rank still moves one element per rank, and says so
    assert ag.param_count(2, 4) == 1 and ag.size_bytes(1, 4, 4) == 16


def test_roots_redops_and_in_place_forms():
    table = {name: (op.redop, op.root, op.checks_in_place)
             for name, op in coll.COLLECTIVES.items()}
    assert table == {
        "all_reduce": ("sum", None, True), "all_gather": ("none", None, True),
        "reduce_scatter": ("sum", None, True), "alltoall": ("none", None, False),
        "broadcast": ("none", 0, True), "reduce": ("sum", 0, True),
        "sendrecv": ("sum", None, False)}  # nccl-tests prints its -o op, sum by default


# ------------------------------------------------------------------------------ expected values
def _simulate(name: str, inputs: torch.Tensor, rank: int, param: int) -> torch.Tensor | None:
    """What ``rank`` holds after ``name`` of the stacked ``inputs`` (one row per rank)."""
    n = inputs.shape[0]
    chunk = slice(rank * param, (rank + 1) * param)
    if name == "all_reduce":
        return inputs.sum(0)
    if name == "reduce":
        return inputs.sum(0) if rank == 0 else None
    if name == "broadcast":
        return inputs[0]
    if name == "all_gather":
        return inputs.reshape(-1)
    if name == "reduce_scatter":
        return inputs.sum(0)[chunk]
    if name == "alltoall":
        return inputs[:, chunk].reshape(-1)
    if name == "sendrecv":
        return inputs[(rank - 1) % n]
    raise AssertionError(name)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n", [2, 3, 4, 7])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_expected_values_are_exact_per_rank(name, n, dtype_name):
    op, dtype = coll.COLLECTIVES[name], ar.DTYPES[dtype_name]
    param = 37  # not a multiple of any period
    period = op.period(dtype, n)
    assert period >= 1
    inputs = torch.stack([coll.rank_values(r, op.send_count(param, n), period, torch.float64, CPU)
                          for r in range(n)])
    for rank in range(n):
        expected = op.expected(rank, n, param, period, dtype, CPU)
        truth = _simulate(name, inputs, rank, param)
        if truth is None:
            assert expected is None
            continue
        assert expected.dtype == dtype and expected.numel() == op.recv_count(param, n)
        assert torch.equal(expected.double(), truth), (name, rank)  # exact in the dtype
        assert bool((expected > 0).all())  # the poison (0) and the fault (-1) are never right


def test_moving_ops_tell_ranks_apart():
    """A moving op's pattern repeats only every 251 elements: a part from the wrong rank of up
    to 251 ranks differs somewhere."""
    op = coll.COLLECTIVES["all_gather"]
    assert op.period(torch.float32, 64) == coll.MOVE_PERIOD == 251
    assert op.period(torch.bfloat16, 64) == 251 and op.period(torch.float16, 64) == 251
    a, b = (coll.rank_values(r, 300, 251, torch.float32, CPU) for r in (0, 13))
    assert not torch.equal(a, b)
    assert coll.COLLECTIVES["reduce_scatter"].period(torch.bfloat16, 64) == 4  # 64 * 4 <= 256


def _src(op, rank: int, param: int, n: int) -> torch.Tensor:
    return coll.rank_values(rank, op.send_count(param, n), 13, torch.float32, CPU)


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter"])
def test_in_place_aliases_at_nccl_tests_offsets(name):
    op, n, rank, param = coll.COLLECTIVES[name], 4, 2, 8
    src = _src(op, rank, param, n)
    bufs = op.buffers("ip", src, param, n, rank)
    inner, outer = (bufs.send, bufs.recv) if name == "all_gather" else (bufs.recv, bufs.send)
    assert inner.data_ptr() == outer.data_ptr() + rank * param * 4
    oop = op.buffers("oop", src, param, n, rank)
    assert oop.send is src and oop.recv.data_ptr() != src.data_ptr() and not oop.refill
    for one_buffer in ("alltoall", "sendrecv"):  # nccl-tests: sendbuff == recvbuff, offset 0
        own = _src(coll.COLLECTIVES[one_buffer], rank, param, n)
        both = coll.COLLECTIVES[one_buffer].buffers("ip", own, param, n, rank)
        assert both.send is both.recv and torch.equal(both.send, own) and both.send is not own
    single = coll.COLLECTIVES["broadcast"].buffers("oop", src, param, n, rank)
    assert single.send is single.recv and single.refill


def test_an_old_report_without_in_place_reads_as_na_and_not_counted():
    """A row of a report an older harness wrote (no in-place alltoall: ``ip`` null)."""
    oop = ar.make_mode_record(4096, 0.001, 2, 0.75)
    record = ar.make_record(4096, 256, "float32", oop, None, op="alltoall")
    assert record["redop"] == "none" and record["root"] is None
    fields = nt.row(record).replace("|", " ").split()
    assert fields[:5] == ["4096", "256", "float", "none", "-1"] and fields[9:] == ["N/A"] * 4
    assert len(nt.row(record)) == len(nt.row(
        ar.make_record(4096, 256, "float32", oop, oop)))
    assert ar.summarize([record], check=True) == (2, oop["busbw"])
    merged = ar.merge_result(ar.merge_result(None, record, 1), record, 2)
    assert merged["oop"]["wrong"] == 4 and merged["ip"] is None and merged["wrong_cycles"] == [1, 2]
    assert oop["busbw"] == pytest.approx(oop["algbw"] * 0.75, abs=1e-3)


# ------------------------------------------------------------------------------ real runs
def _run(out: Path, nproc: int, *args: str) -> tuple[int, str, str, dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), str(JOBS / "allreduce.py"), "--backend", "gloo",
           "--iters", "2", "--warmup", "1", "--op", "all", "--out", str(out), *args]
    rc, stdout, stderr = procs.finish(start(cmd, clean_env()), 120)
    return rc, stdout, stderr, json.loads((out / "allreduce.json").read_text())


@pytest.mark.distributed
def test_every_op_passes_with_its_factor_at_two_ranks(tmp_path):
    rc, out, err, report = _run(tmp_path, 2, "--sizes", "64K,256K")
    assert rc == 0, err
    assert report["ok"] is True and report["ops"] == ALL and report["benchmark"] == "collectives"
    assert [r["op"] for r in report["results"]] == [name for name in ALL for _ in (1, 2)]
    for name in ALL:
        summary = report["collectives"][name]
        assert summary["ok"] and summary["wrong_total"] == 0 and summary["check"]
        assert summary["busbw_factor"] == pytest.approx(coll.COLLECTIVES[name].factor(2))
        assert f"# {name}: busbw = algbw * {summary['factor']}" in out
    for row in report["results"]:
        factor = report["collectives"][row["op"]]["busbw_factor"]
        unchecked = row["op"] in ("alltoall", "sendrecv")  # in place, as nccl-tests: N/A
        for mode in ar.row_modes(row):
            assert mode["wrong"] == (None if unchecked and mode is row["ip"] else 0)
            assert mode["time_us"] > 0
            assert mode["busbw"] == pytest.approx(mode["algbw"] * factor, abs=2e-3)
            if mode["algbw"] >= 0.05:  # well above the 3-decimal rounding
                assert mode["busbw"] / mode["algbw"] == pytest.approx(factor, rel=0.05)
        assert nt.row(row) in out
        assert (row["ip"]["wrong"] is None) == (row["op"] in ("alltoall", "sendrecv"))
        assert row["root"] == (0 if row["op"] in ("broadcast", "reduce") else None)
    sizes = {(r["op"], r["bytes"]): r["count"] for r in report["results"]}
    assert sizes[("all_reduce", 65536)] == 16384 and sizes[("all_gather", 65536)] == 8192


@pytest.mark.distributed
def test_corruption_is_caught_per_op_per_cycle_at_four_ranks(tmp_path):
    """Cycle 1 is clean (every op's values right at 4 ranks); in cycle 2 rank 1 damages its
    result (reduce's non-root: its input), and every op's row names cycle 2."""
    rc, out, err, report = _run(tmp_path, 4, "--sizes", "1K,4K", "--cycles", "2",
                                "--fault", "corrupt@1:2")
    assert rc == ar.EXIT_WRONG
    assert (report["ok"], report["cycles_done"], report["world_size"]) == (False, 2, 4)
    first, second = report["cycle_results"]
    def checked(row: dict) -> list[dict]:
        return [mode for mode in ar.row_modes(row) if mode["wrong"] is not None]

    for row in first["results"]:
        assert [mode["wrong"] for mode in checked(row)] == [0] * len(checked(row)), row
    for row in second["results"]:
        assert [mode["wrong"] for mode in checked(row)] == [1] * len(checked(row)), row
        assert len(checked(row)) == (1 if row["op"] in ("alltoall", "sendrecv") else 2)
    for row in report["results"]:
        assert row["wrong_cycles"] == [2], row
    for name in ALL:
        summary = report["collectives"][name]
        modes = 2 if coll.COLLECTIVES[name].checks_in_place else 1
        assert summary["ok"] is False and summary["wrong_total"] == 2 * modes, name
        assert summary["busbw_factor"] == pytest.approx(coll.COLLECTIVES[name].factor(4))
        assert f"{name} 1024 (cycle 2: oop 1" in err
    assert report["wrong_total"] == sum(s["wrong_total"] for s in report["collectives"].values())


@pytest.mark.distributed
def test_one_rank_cannot_sendrecv_and_says_so(tmp_path):
    cmd = [sys.executable, str(JOBS / "allreduce.py"), "--sizes", "1K", "--iters", "1",
           "--warmup", "0", "--op", "sendrecv,broadcast", "--out", str(tmp_path)]
    rc, out, err = procs.finish(start(cmd, clean_env()), 60)
    assert rc == ar.EXIT_WRONG
    report = json.loads((tmp_path / "allreduce.json").read_text())
    assert [r["op"] for r in report["results"]] == ["broadcast"]
    assert report["collectives"]["sendrecv"]["unsupported"].startswith("needs 2 ranks")
    assert report["collectives"]["broadcast"]["ok"] is True and report["ok"] is False
    assert err.strip().splitlines()[-1] == (
        "FAILED: sendrecv: needs 2 ranks (torch.distributed does not send to its own rank)")


@pytest.mark.distributed
def test_a_backend_refusal_is_unsupported_but_a_broken_link_is_a_failure(tmp_path):
    """One gloo rank: an op the backend refuses ("does not support", as older gloo refuses
    reduce_scatter) is reported in one line; any other error is raised, not called missing."""
    import torch.distributed as dist

    env = ar.DistEnv(rank=0, world_size=1, local_rank=0, launcher="single")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        op = coll.COLLECTIVES["reduce_scatter"]
        assert ar.unsupported(op, env, CPU, torch.float32) is None  # torch 2.13's gloo has it

        def refuse(bufs, rank, n):
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter")
        assert ar.unsupported(replace(op, call=refuse), env, CPU, torch.float32) == (
            f"not supported by backend gloo in torch {torch.__version__}: ProcessGroupGloo does "
            "not support reduce_scatter")

        def broken(bufs, rank, n):
            raise RuntimeError("Connection reset by peer")
        with pytest.raises(RuntimeError, match="Connection reset"):
            ar.unsupported(replace(op, call=broken), env, CPU, torch.float32)
        assert ar.unsupported(coll.COLLECTIVES["sendrecv"], env, CPU, torch.float32) == \
            "needs 2 ranks (torch.distributed does not send to its own rank)"
    finally:
        dist.destroy_process_group()

"""Tests of jobs/allreduce.py: its pure helpers, and real 2-rank gloo runs on this host.

The integration tests launch the job exactly as a batch script would (torchrun, or plain
processes with srun's variables), each in its own session so a hung run can be killed as a
whole process group without touching anything else.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import procs
from tests.jobs.nccl_consumers import STRICT_ROW
from tests.fixtures.procs import start
from tests.jobs.scripts import JOBS, LAUNCH_VARS, clean_env, script, sibling
from tests.jobs.test_devices import PROBE_KEYS

torch = pytest.importorskip("torch")

JOB = JOBS / "allreduce.py"
RUN_TIMEOUT_S = 60
SMALL_RUN = ["--sizes", "1K:64K", "--iters", "3", "--warmup", "1"]
SMALL_SIZES = [1024 * 2**i for i in range(7)]
# torchrun stops the other ranks (SIGTERM) once it sees one fail; looking only every 5 s lets
# ranks that all refuse at start each finish, print and exit with their own status first.
PATIENT = ("--monitor-interval", "5")


ar = script("allreduce.py", "allreduce_job")
choices = sibling("choices")
coll = sibling("collectives")
nt = sibling("nccltests")
devices = sibling("devices")
workload = sibling("workload")
ALL_REDUCE = coll.COLLECTIVES["all_reduce"]


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT_S) -> tuple[int, str, str]:
    return procs.finish(proc, timeout)


def torchrun(out_dir: Path, *args: str, nproc: int = 2, backend: str | None = "gloo",
             agent: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """The job under torchrun (``agent``: torchrun's own flags), on gloo unless told."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), *agent, str(JOB), *SMALL_RUN,
           *(["--backend", backend] if backend else []), "--out", str(out_dir), *args]
    return finish(start(cmd, clean_env()))


def single(out_dir: Path, *args: str) -> tuple[int, str, str]:
    """The job as one plain process, without a launcher."""
    cmd = [sys.executable, str(JOB), *SMALL_RUN, "--out", str(out_dir), *args]
    return finish(start(cmd, clean_env()))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------------------------
# sizes, faults, command line
# ----------------------------------------------------------------------------------------------


def test_parse_sizes_default_matches_nccl_tests_sweep():
    sizes = choices.parse_sizes(ar.build_parser().parse_args([]).sizes)
    assert sizes[0] == 1024 and sizes[-1] == 128 * 2**20 and len(sizes) == 18
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))


def test_parse_fault():
    assert ar.parse_fault("die@1") == ar.Fault("die", 1)
    assert ar.parse_fault("corrupt@0") == ar.Fault("corrupt", 0)
    assert ar.parse_fault("corrupt@1:2") == ar.Fault("corrupt", 1, 2)
    for bad in ("die", "die@", "explode@1", "hang@-1", "hang@x", "die@1:2", "hang@0:1",
                "corrupt@1:0", "corrupt@1:", "corrupt@1:x", "corrupt@:2"):
        with pytest.raises(ValueError):
            ar.parse_fault(bad)


def test_fault_corrupts_its_rank_in_its_cycles():
    every, second = ar.Fault("corrupt", 1), ar.Fault("corrupt", 1, 2)
    assert [every.corrupts(1, c) for c in (1, 2, 3)] == [True, True, True]
    assert [second.corrupts(1, c) for c in (1, 2, 3)] == [False, True, False]
    assert not second.corrupts(0, 2) and not ar.Fault("die", 1).corrupts(1, 1)


def test_parser_defaults_and_flags():
    parser = ar.build_parser()
    args = parser.parse_args([])
    assert (args.sizes, args.step_factor, args.iters, args.warmup) == ("1K:128M", 2, 20, 5)
    assert (args.cycles, args.expect_gpu, args.rank_cores) == (1, "none", None)
    assert (args.dtype, args.backend, args.check, args.fault) == ("float32", "auto", True, None)
    args = parser.parse_args(["--no-check", "--fault", "hang@3", "--timeout-s", "7"])
    assert args.check is False and args.fault == ar.Fault("hang", 3) and args.timeout_s == 7
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert "FOR TESTS OF THE HARNESS ONLY" in " ".join(parser.format_help().split())


@pytest.mark.parametrize("argv", [["--fault", "boom@1"], ["--iters", "0"], ["--dtype", "int8"],
                                  ["--step-factor", "1"], ["--warmup", "-1"], ["--cycles", "0"],
                                  ["--expect-gpu", "yes"], ["--rank-cores", "0-"]])
def test_parser_rejects(argv):
    with pytest.raises(SystemExit) as exc:
        ar.build_parser().parse_args(argv)
    assert exc.value.code == 2


def test_main_rejects_bad_sizes_with_usage_status(capsys, monkeypatch, tmp_path):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    out = ["--out", str(tmp_path)]
    assert ar.main(["--sizes", "8K:1K", *out]) == workload.EXIT_USAGE
    assert ar.main(["--sizes", "1", "--dtype", "float32", *out]) == workload.EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "allreduce.py: error: --sizes: size range start 8192 is above its end 1024",
        "allreduce.py: error: --sizes: 1 B is less than one float32 (4 B)"]


# ----------------------------------------------------------------------------------------------
# bandwidth model
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ranks, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_busbw_factor(ranks, factor):
    assert ALL_REDUCE.factor(ranks) == pytest.approx(factor)


def test_busbw_factor_rejects_empty_world():
    with pytest.raises(ValueError):
        ALL_REDUCE.factor(0)


def test_bandwidths_in_decimal_gigabytes():
    algbw, busbw = ar.bandwidths(10**9, 1.0, ALL_REDUCE.factor(4))
    assert algbw == pytest.approx(1.0) and busbw == pytest.approx(1.5)
    algbw, busbw = ar.bandwidths(128 * 2**20, 0.001, ALL_REDUCE.factor(8))  # 128 MiB in 1 ms
    assert algbw == pytest.approx(134.217728) and busbw == pytest.approx(134.217728 * 1.75)
    assert ar.bandwidths(1024, 0.0, 1.0) == (0.0, 0.0)


def test_a_broken_timer_gives_no_figure_and_no_nan_is_written(tmp_path: Path):
    """A non-finite time (a NaN from a broken timer) is no figure (null, which the verdict and
    the release gate refuse in a multi-rank run), and the harness never writes a bare NaN (a
    diverged loss in train.json is null too, and the run fails on it)."""
    for seconds in (float("nan"), float("inf")):
        assert ar.make_mode_record(1024, seconds, 0, 1.0) == \
            {"time_us": None, "algbw": None, "busbw": None, "wrong": 0}
    ar.write_json(tmp_path / "x.json", {"busbw": float("nan"), "rows": [{"t": float("inf")}]})
    assert json.loads((tmp_path / "x.json").read_text()) == {"busbw": None, "rows": [{"t": None}]}


def test_one_rank_prints_numbers_as_nccl_tests_does():
    """Nothing crosses a link (bytes over time is a memory copy's rate: 624,268 GB/s on one
    H100 for 1 GiB), yet nccl-tests prints numbers there, and strict readers of its tables take
    nothing else: algbw, and busbw at the op's bus factor at 1 rank (0 for all_reduce)."""
    mode = ar.make_mode_record(2**30, 1.72e-6, 0, ALL_REDUCE.factor(1))
    assert mode == {"time_us": 1.72, "algbw": 624268.502, "busbw": 0.0, "wrong": 0}
    record = ar.make_record(2**30, 2**28, "float32", mode, mode)
    assert STRICT_ROW.match(nt.row(record)), nt.row(record)
    assert len(nt.row(record)) == len(nt.row(_record()))  # columns still line up
    assert ar.summarize([record], check=True) == (0, 0.0)
    assert "# Avg bus bandwidth    : 0" in nt.footer("all_reduce", 0, 0.0)


# ----------------------------------------------------------------------------------------------
# check pattern: exact in every dtype and reduction order
# ----------------------------------------------------------------------------------------------


def test_exact_integer_limits():
    assert coll.exact_integer_limit(torch.float32) == 2**24
    assert coll.exact_integer_limit(torch.float16) == 2**11
    assert coll.exact_integer_limit(torch.bfloat16) == 2**8


@pytest.mark.parametrize("dtype_name", sorted(ar.DTYPES))
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 7, 8, 16, 64, 256])
def test_pattern_sums_are_exact(dtype_name, ranks):
    dtype = ar.DTYPES[dtype_name]
    period = coll.pattern_period(dtype, ranks)
    assert period >= 1 and ranks * period <= coll.exact_integer_limit(dtype)
    count = 1000
    inputs = [coll.rank_values(r, count, period, dtype, torch.device("cpu")) for r in range(ranks)]
    expected = coll.expected_values(ranks, count, period, dtype, torch.device("cpu"))
    assert expected.dtype == dtype and expected.shape == (count,)
    exact = torch.stack([x.double() for x in inputs]).sum(0)
    assert torch.equal(expected.double(), exact)
    # Accumulating in the dtype itself, forwards and backwards, gives the same exact answer.
    for order in (inputs, inputs[::-1]):
        acc = torch.zeros(count, dtype=dtype)
        for x in order:
            acc += x
        assert torch.equal(acc, expected)


def test_pattern_differs_between_ranks():
    a = coll.rank_values(0, 64, 13, torch.float32, torch.device("cpu"))
    b = coll.rank_values(1, 64, 13, torch.float32, torch.device("cpu"))
    assert not torch.equal(a, b) and bool((a > 0).all())


def test_no_exact_pattern_for_bfloat16_beyond_256_ranks():
    assert coll.pattern_period(torch.bfloat16, 257) == 0
    assert coll.pattern_period(torch.float32, 4096) == 13


# ----------------------------------------------------------------------------------------------
# records, table, footer, JSON
# ----------------------------------------------------------------------------------------------


def _record(wrong=0):
    oop = ar.make_mode_record(65536, 0.000123456, wrong, 1.5)
    ip = ar.make_mode_record(65536, 0.0001, 0, 1.5)
    return ar.make_record(65536, 16384, "float32", oop, ip)


def test_make_mode_record_rounds_once():
    mode = ar.make_mode_record(65536, 0.000123456, 0, 1.5)
    assert mode == {"time_us": 123.46, "algbw": 0.531, "busbw": 0.796, "wrong": 0}


def test_format_row_shows_the_json_values():
    record = _record()
    row = nt.row(record)
    fields = row.replace("|", " ").split()
    assert fields == ["65536", "16384", "float", "sum", "-1",
                      "123.46", "0.53", "0.80", "0", "100.00", "0.66", "0.98", "0"]
    assert float(fields[5]) == record["oop"]["time_us"]  # nccl-tests' %6.2f: the JSON keeps more
    assert float(fields[11]) == round(record["ip"]["busbw"], 2)


def test_format_row_unchecked_shows_na():
    oop = ar.make_mode_record(1024, 0.001, None, 1.0)
    row = nt.row(ar.make_record(1024, 256, "float32", oop, oop))
    assert row.split().count("N/A") == 2


def test_table_header_lines_up_with_rows():
    header = nt.table_header().splitlines()
    row = nt.row(_record())
    assert len(header) == 3 and header[0].startswith("#")
    names, units = header[1], header[2]
    for word in ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"):
        assert word in names
    assert "out-of-place" in header[0] and "in-place" in header[0]
    def ends(line: str) -> list[int]:  # right-aligned: every column ends where its values do
        return [m.end() for m in re.finditer(r"[^\s#]\S*", line)]

    assert ends(names) == ends(row) and set(ends(units)) <= set(ends(row))
    assert len(names) == len(row)
    # right-aligned columns end where the values end
    assert names.index("size") + len("size") == row.index("65536") + len("65536")


def test_summarize_and_footer():
    records = [_record(), _record(wrong=3)]
    wrong, avg = ar.summarize(records, check=True)
    assert wrong == 3
    assert avg == pytest.approx((0.796 + 0.983) / 2, abs=1e-3)
    assert ar.summarize(records, check=False)[0] is None
    assert "0 OK" in nt.footer("all_reduce", 0, 1.0)
    assert "3 FAILED" in nt.footer("all_reduce", 3, 1.0)
    assert "N/A" in nt.footer("all_reduce", None, 1.0)
    assert "not a pass criterion" in nt.AVG_NOTE and "Avg bus bandwidth" not in nt.AVG_NOTE
    assert nt.footer("all_reduce", 0, 1.5).splitlines() == [
        "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.5", "#",
        "# Collective test concluded: all_reduce_perf"]


def test_merge_result_keeps_last_timings_and_all_wrong_values():
    first = ar.merge_result(None, _record(wrong=0), 1)
    assert first["wrong_cycles"] == [] and first["oop"]["wrong"] == 0
    bad = _record(wrong=3)
    bad["ip"] = {**bad["ip"], "time_us": 7.0, "wrong": 2}
    second = ar.merge_result(first, bad, 2)
    assert second["wrong_cycles"] == [2]
    assert (second["oop"]["wrong"], second["ip"]["wrong"], second["ip"]["time_us"]) == (3, 2, 7.0)
    third = ar.merge_result(second, _record(wrong=1), 3)
    assert third["wrong_cycles"] == [2, 3] and third["oop"]["wrong"] == 4
    assert third["ip"]["time_us"] == _record()["ip"]["time_us"]
    assert bad["oop"]["wrong"] == 3 and "wrong_cycles" not in bad  # the cycle's own row is kept
    unchecked = ar.make_mode_record(1024, 0.001, None, 1.0)
    row = ar.make_record(1024, 256, "float32", unchecked, unchecked)
    merged = ar.merge_result(ar.merge_result(None, row, 1), row, 2)
    assert merged["oop"]["wrong"] is None and merged["wrong_cycles"] == []


def test_failure_line_names_sizes_cycles_and_modes():
    clean, bad = _record(), _record(wrong=3)
    rows = [ar.merge_result(None, bad, 1), ar.merge_result(None, clean, 1)]
    rows = [ar.merge_result(rows[0], bad, 2), ar.merge_result(rows[1], bad, 2)]
    report = {"results": rows, "cycle_results": [{"cycle": 1, "results": [bad, clean]},
                                                 {"cycle": 2, "results": [bad, bad]}]}
    assert ar.failure_line(report, 9) == (
        "# FAILED: 9 wrong values at sizes (B): 65536 (cycle 1: oop 3, ip 0; cycle 2: oop 3, "
        "ip 0), 65536 (cycle 2: oop 3, ip 0)")


# ----------------------------------------------------------------------------------------------
# real runs on this host (gloo, CPU)
# ----------------------------------------------------------------------------------------------


@pytest.mark.distributed
def test_single_process_without_launcher(tmp_path):
    cmd = [sys.executable, str(JOB), "--sizes", "1K,4K", "--iters", "2", "--warmup", "1",
           "--out", str(tmp_path)]
    rc, out, err = finish(start(cmd, clean_env()))
    assert rc == 0, err
    report = load(tmp_path / "allreduce.json")
    assert report["world_size"] == 1 and report["ok"] is True and report["wrong_total"] == 0
    for record in report["results"]:  # no link crossed: numbers all the same, and checked
        for mode in ("oop", "ip"):
            assert record[mode]["algbw"] > 0 and record[mode]["busbw"] == 0.0
            assert record[mode]["time_us"] > 0 and record[mode]["wrong"] == 0
        assert nt.row(record) in out and STRICT_ROW.match(nt.row(record))
    assert report["avg_busbw"] == 0.0
    assert ar.ONE_RANK_NOTE in out.splitlines()
    assert load(tmp_path / "rank-0.json")["finished"] is True
    assert load(tmp_path / "device-0.json") == {
        key: value for key, value in report["ranks"][0].items() if key != "device_text"}


@pytest.mark.distributed
def test_two_ranks_pass(tmp_path):
    rc, out, err = torchrun(tmp_path)
    assert rc == 0, err
    report = load(tmp_path / "allreduce.json")
    for key in ("benchmark", "world_size", "nodes", "backend", "device", "dtype",
                "torch_version", "hostnames", "iters", "warmup", "results", "wrong_total",
                "avg_busbw", "ok", "started", "finished"):
        assert key in report, key
    assert report["benchmark"] == "all_reduce"
    assert (report["world_size"], report["nodes"], report["backend"]) == (2, 1, "gloo")
    assert (report["device"], report["dtype"], report["iters"], report["warmup"]) == \
        ("cpu", "float32", 3, 1)
    assert report["hostnames"] == [socket.gethostname()]
    assert report["ok"] is True and report["wrong_total"] == 0 and report["finished"]
    assert (report["cycles"], report["cycles_done"], report["expect_gpu"]) == (1, 1, "none")
    assert [c["cycle"] for c in report["cycle_results"]] == [1]
    assert ar.ONE_RANK_NOTE not in out
    assert [info["rank"] for info in report["ranks"]] == [0, 1]
    for info in report["ranks"]:
        assert set(info) == PROBE_KEYS | {"device_text"}
        assert (info["device"], info["device_text"]) == ("cpu", "cpu")  # gloo, even on a GPU host
        assert info["build"] == devices.torch_build()
        assert info["pinned"] is False and f"cores {info['cores']}" in out
        device = load(tmp_path / f"device-{info['rank']}.json")
        assert device == {k: v for k, v in info.items() if k != "device_text"}
    assert [r["bytes"] for r in report["results"]] == SMALL_SIZES
    for record in report["results"]:
        assert record["count"] == record["bytes"] // 4 and record["wrong_cycles"] == []
        assert (record["type"], record["redop"]) == ("float32", "sum")
        for mode in ("oop", "ip"):
            m = record[mode]
            assert m["wrong"] == 0 and m["time_us"] > 0 and m["algbw"] >= 0
            assert m["busbw"] == pytest.approx(m["algbw"], abs=1e-3)  # factor 1 at 2 ranks
        # the table printed on rank 0 is the JSON, row for row
        assert nt.row(record) in out
    assert "# nThread 1" in out and "# Out of bounds values : 0 OK" in out
    for rank in (0, 1):
        info = load(tmp_path / f"rank-{rank}.json")
        assert info["rank"] == rank and info["finished"] is True and info["wrong"] == 0
        assert {"local_rank", "hostname", "pid"} <= info.keys()
        assert info["teardown"] == "destroyed"


@pytest.mark.distributed
@pytest.mark.parametrize("fault, status", [(None, 0), ("corrupt@1", ar.EXIT_WRONG)])
def test_no_teardown_ends_each_rank_with_its_own_status(tmp_path, fault, status):
    """--no-teardown (the host's choice under emulation) skips destroy_process_group and the
    interpreter's shutdown, never the results, the rank files or a failing status."""
    rc, out, err = torchrun(tmp_path, "--no-teardown", *(("--fault", fault) if fault else ()))
    assert (rc != 0) == bool(status), err
    assert load(tmp_path / "allreduce.json")["ok"] is (not status)
    assert ("# Out of bounds values : 0 OK" in out) is (not status)  # flushed before os._exit
    for rank in (0, 1):
        info = load(tmp_path / f"rank-{rank}.json")
        assert info["teardown"] == "skipped" and info["finished"] is True
    if status:  # torchrun's summary names the faulty rank's own exit status
        assert f"exitcode  : {status} " in err, err


@pytest.mark.distributed
def test_corrupt_fault_is_caught(tmp_path):
    rc, out, err = torchrun(tmp_path, "--fault", "corrupt@1")
    assert rc != 0
    report = load(tmp_path / "allreduce.json")
    assert report["ok"] is False and report["wrong_total"] > 0
    assert all(r["oop"]["wrong"] > 0 and r["ip"]["wrong"] > 0 for r in report["results"])
    assert "FAILED" in out
    assert load(tmp_path / "rank-1.json")["wrong"] > 0  # the faulty rank saw its own damage
    assert load(tmp_path / "rank-0.json")["wrong"] == 0


@pytest.mark.distributed
def test_die_fault_leaves_rank_file_missing(tmp_path):
    rc, out, err = torchrun(tmp_path, "--fault", "die@1", "--timeout-s", "20")
    assert rc != 0
    assert not (tmp_path / "rank-1.json").exists()
    report = load(tmp_path / "allreduce.json")  # written at start, never finished
    assert report["finished"] is None and report["ok"] is False


@pytest.mark.distributed
def test_hang_fault_times_out(tmp_path):
    rc, out, err = torchrun(tmp_path, "--fault", "hang@1", "--timeout-s", "3")
    assert rc != 0
    assert not (tmp_path / "rank-1.json").exists()
    assert not (tmp_path / "rank-0.json").exists()


def _srun_like(tmp_path: Path, *args: str, master: bool = True) -> list[tuple[int, str, str]]:
    """Two plain processes with only srun's variables, as `srun -n 2 python allreduce.py`."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        extra = {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank)}
        if master:
            extra.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, str(JOB), *SMALL_RUN, "--backend", "gloo",
               "--out", str(tmp_path), *args]
        procs.append(start(cmd, clean_env(**extra)))
    return [finish(proc) for proc in procs]


@pytest.mark.distributed
def test_srun_variables(tmp_path):
    results = _srun_like(tmp_path, "--sizes", "1K:4K")
    assert [rc for rc, _, _ in results] == [0, 0], results[0][2] + results[1][2]
    assert "launcher slurm" in results[0][1]
    assert load(tmp_path / "allreduce.json")["world_size"] == 2
    assert all(load(tmp_path / f"rank-{r}.json")["finished"] for r in (0, 1))


@pytest.mark.distributed
def test_srun_wrong_values_exit_1_on_every_rank(tmp_path):
    results = _srun_like(tmp_path, "--sizes", "1K:4K", "--fault", "corrupt@0")
    assert [rc for rc, _, _ in results] == [ar.EXIT_WRONG, ar.EXIT_WRONG]
    assert "wrong values at sizes" in results[0][2]


@pytest.mark.distributed
def test_srun_without_master_addr_explains(tmp_path):
    results = _srun_like(tmp_path, master=False)
    for rc, _, err in results:
        assert rc == workload.EXIT_ERROR and "MASTER_ADDR" in err
        assert "allreduce.py: rank " in err and " failed:" in err  # which rank, where


# ----------------------------------------------------------------------------------------------
# --expect-gpu, --rank-cores, --cycles: real runs
# ----------------------------------------------------------------------------------------------


def _rank_logs(log_dir: Path, stream: str) -> dict[int, str]:
    """What each local rank wrote to ``stream`` under torchrun's ``--redirects 3``."""
    return {int(path.parent.name): path.read_text()
            for path in log_dir.glob(f"*/attempt_0/*/{stream}.log")}


@pytest.mark.distributed
@pytest.mark.parametrize("nproc", [1, 2])
def test_expect_gpu_without_one_refuses_on_every_rank(tmp_path, nproc):
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    logs = tmp_path / "logs"
    agent = (*PATIENT, "--log-dir", str(logs), "--redirects", "3")  # each rank's stderr apart
    rc, _out, err = torchrun(tmp_path / "out", "--expect-gpu", "cuda", nproc=nproc,
                             backend=None, agent=agent)
    assert rc != 0
    assert err.count("exitcode  : 4 ") == nproc, err  # torchrun's summary of each rank
    host = socket.gethostname()
    stderr = _rank_logs(logs, "stderr")
    assert sorted(stderr) == list(range(nproc))
    for rank, text in stderr.items():
        assert text.splitlines() == [
            f"allreduce.py: rank {rank} on {host}: expected a cuda GPU, but torch is not a cuda "
            f"build (torch {torch.__version__}: cpu build, 0 GPUs visible, no visible-devices "
            "variable set)"]
        assert "Traceback" not in text
        device = load(tmp_path / "out" / f"device-{rank}.json")
        assert (device["rank"], device["device"], device["visible"]) == (rank, "cpu", 0)
    assert not (tmp_path / "out" / "allreduce.json").exists()  # refused before the group


@pytest.mark.distributed
def test_expect_gpu_with_gloo_is_a_usage_error(tmp_path):
    rc, _out, err = single(tmp_path, "--expect-gpu", "cuda", "--backend", "gloo")
    assert rc == workload.EXIT_USAGE
    assert err.splitlines() == ["allreduce.py: error: --backend gloo contradicts --expect-gpu "
                                "cuda: the GPUs would sit idle while the run passes on the CPU"]


@pytest.mark.distributed
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_rank_cores_pin_each_rank(tmp_path):
    rc, out, err = torchrun(tmp_path, "--sizes", "1K:4K", "--rank-cores", "0:1")
    assert rc == 0, err
    ranks = load(tmp_path / "allreduce.json")["ranks"]
    assert [(r["rank"], r["cores"], r["pinned"]) for r in ranks] == [(0, "0", True),
                                                                      (1, "1", True)]
    for info in ranks:
        assert info["cpus_allowed_list"] == info["cores"]
        assert load(tmp_path / f"device-{info['rank']}.json")["cores"] == info["cores"]
    assert out.count(" [cpu] cores 0\n") == 1 and out.count(" [cpu] cores 1\n") == 1


@pytest.mark.distributed
def test_rank_cores_the_machine_lacks_is_a_usage_error(tmp_path):
    rc, _out, err = single(tmp_path / "one", "--rank-cores", "4095")
    assert rc == workload.EXIT_USAGE
    assert err.startswith("allreduce.py: error: --rank-cores: local rank 0 asks for cores 4095, "
                          f"which {socket.gethostname()} does not have (online: ")
    assert len(err.splitlines()) == 1 and "this process may use " in err
    rc, _out, err = torchrun(tmp_path / "two", "--rank-cores", "0:4095", agent=PATIENT)
    assert rc != 0 and err.count("exitcode  : 2 ") == 2  # every rank: rank 0 says why
    assert err.count("allreduce.py: error: --rank-cores: local rank 1 asks for cores 4095") == 1


@pytest.mark.distributed
def test_corruption_in_one_cycle_is_pinned_to_that_cycle(tmp_path):
    rc, out, err = torchrun(tmp_path, "--sizes", "1K:4K", "--iters", "2", "--warmup", "1",
                            "--cycles", "3", "--fault", "corrupt@1:2")
    assert rc != 0
    report = load(tmp_path / "allreduce.json")
    assert (report["cycles"], report["cycles_done"], report["ok"]) == (3, 3, False)
    assert [r["bytes"] for r in report["results"]] == [1024, 2048, 4096]
    for row in report["results"]:
        assert row["wrong_cycles"] == [2]
        assert row["oop"]["wrong"] == 1 and row["ip"]["wrong"] == 1  # one element, one rank
    assert report["wrong_total"] == 6
    cycles = report["cycle_results"]
    assert [c["cycle"] for c in cycles] == [1, 2, 3]
    for entry in cycles:
        wrong = [r[m]["wrong"] for r in entry["results"] for m in ("oop", "ip")]
        assert wrong == ([1] * 6 if entry["cycle"] == 2 else [0] * 6)
    # the results rows carry the last cycle's timings
    assert [r["oop"]["time_us"] for r in report["results"]] == \
        [r["oop"]["time_us"] for r in cycles[2]["results"]]
    assert [line for line in out.splitlines() if line.startswith("# cycle")] == \
        ["# cycle 1/3", "# cycle 2/3", "# cycle 3/3"]
    failed = ("FAILED: 6 wrong values at sizes (B): 1024 (cycle 2: oop 1, ip 1), 2048 (cycle 2: "
              "oop 1, ip 1), 4096 (cycle 2: oop 1, ip 1)")
    assert f"# {failed}" in out and failed in err
    assert load(tmp_path / "rank-1.json")["wrong"] == 6


@pytest.mark.distributed
def test_cycles_without_fault_pass(tmp_path):
    rc, out, err = torchrun(tmp_path, "--sizes", "1K:2K", "--iters", "2", "--warmup", "1",
                            "--cycles", "2")
    assert rc == 0, err
    report = load(tmp_path / "allreduce.json")
    assert (report["cycles_done"], report["wrong_total"], report["ok"]) == (2, 0, True)
    assert all(row["wrong_cycles"] == [] for row in report["results"])
    assert len(report["cycle_results"]) == 2 and "# cycle 2/2" in out


#: The kind of expression ReFrame's NCCL checks and sites' scripts read nccl-tests rows with:
#: size, count, type, redop, root, then time, algbw, busbw, #wrong (out-of-place first).
NCCL_TESTS_ROW = re.compile(r"^\s+(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+"
                            r"(?P<redop>\w+)\s+(?P<root>-?\d+)\s+(?P<time>\S+)\s+"
                            r"(?P<algbw>\S+)\s+(?P<busbw>\S+)\s+(?P<wrong>\S+)")


def test_the_table_reads_as_nccl_tests_output() -> None:
    record = {"bytes": 134217728, "count": 33554432, "type": "float32", "redop": "sum",
              "root": None, "oop": {"time_us": 1234.5, "algbw": 108.7, "busbw": 190.2,
                                    "wrong": 0}, "ip": None}
    table = "\n".join([nt.table_header(), nt.row(record),
                       nt.footer("all_reduce", 0, 1.5)])
    rows = [m.groupdict() for line in table.splitlines() if (m := NCCL_TESTS_ROW.match(line))]
    assert rows == [{"size": "134217728", "count": "33554432", "type": "float", "redop": "sum",
                     "root": "-1", "time": "1234.50", "algbw": "108.70", "busbw": "190.20",
                     "wrong": "0"}]
    assert "|" not in table and "float32" not in table
    assert all(line.startswith("#") for line in table.splitlines() if line != nt.row(
        record))  # the harness's own facts are comment lines a parser skips

"""Tests of jobs/allreduce.py: its pure helpers, and real 2-rank gloo runs on this host.

The integration tests launch the job exactly as a batch script would (torchrun, or plain
processes with srun's variables), each in its own session so a hung run can be killed as a
whole process group without touching anything else.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import procs
from tests.fixtures.procs import start
from tests.jobs.scripts import JOBS, LAUNCH_VARS, clean_env, script, sibling

torch = pytest.importorskip("torch")

JOB = JOBS / "allreduce.py"
RUN_TIMEOUT_S = 60
SMALL_RUN = ["--sizes", "1K:64K", "--iters", "3", "--warmup", "1"]
SMALL_SIZES = [1024 * 2**i for i in range(7)]


ar = script("allreduce.py", "allreduce_job")
choices = sibling("choices")
workload = sibling("workload")


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT_S) -> tuple[int, str, str]:
    return procs.finish(proc, timeout)


def torchrun(out_dir: Path, *args: str, nproc: int = 2) -> tuple[int, str, str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), str(JOB), *SMALL_RUN, "--backend", "gloo",
           "--out", str(out_dir), *args]
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
    for bad in ("die", "die@", "explode@1", "hang@-1", "hang@x"):
        with pytest.raises(ValueError):
            ar.parse_fault(bad)


def test_parser_defaults_and_flags():
    parser = ar.build_parser()
    args = parser.parse_args([])
    assert (args.sizes, args.step_factor, args.iters, args.warmup) == ("1K:128M", 2, 20, 5)
    assert (args.dtype, args.backend, args.check, args.fault) == ("float32", "auto", True, None)
    args = parser.parse_args(["--no-check", "--fault", "hang@3", "--timeout-s", "7"])
    assert args.check is False and args.fault == ar.Fault("hang", 3) and args.timeout_s == 7
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert "FOR TESTS OF THE HARNESS ONLY" in " ".join(parser.format_help().split())


@pytest.mark.parametrize("argv", [["--fault", "boom@1"], ["--iters", "0"], ["--dtype", "int8"],
                                  ["--step-factor", "1"], ["--warmup", "-1"]])
def test_parser_rejects(argv):
    with pytest.raises(SystemExit) as exc:
        ar.build_parser().parse_args(argv)
    assert exc.value.code == 2


def test_main_rejects_bad_sizes_with_usage_status(capsys, monkeypatch):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    assert ar.main(["--sizes", "8K:1K"]) == workload.EXIT_USAGE
    assert ar.main(["--sizes", "1", "--dtype", "float32"]) == workload.EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "allreduce.py: error: --sizes: size range start 8192 is above its end 1024",
        "allreduce.py: error: --sizes: 1 B is less than one float32 (4 B)"]


# ----------------------------------------------------------------------------------------------
# bandwidth model
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ranks, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_busbw_factor(ranks, factor):
    assert ar.busbw_factor(ranks) == pytest.approx(factor)


def test_busbw_factor_rejects_empty_world():
    with pytest.raises(ValueError):
        ar.busbw_factor(0)


def test_bandwidths_in_decimal_gigabytes():
    algbw, busbw = ar.bandwidths(10**9, 1.0, 4)
    assert algbw == pytest.approx(1.0) and busbw == pytest.approx(1.5)
    algbw, busbw = ar.bandwidths(128 * 2**20, 0.001, 8)  # 128 MiB in 1 ms
    assert algbw == pytest.approx(134.217728) and busbw == pytest.approx(134.217728 * 1.75)
    assert ar.bandwidths(1024, 0.0, 2) == (0.0, 0.0)


# ----------------------------------------------------------------------------------------------
# check pattern: exact in every dtype and reduction order
# ----------------------------------------------------------------------------------------------


def test_exact_integer_limits():
    assert ar.exact_integer_limit(torch.float32) == 2**24
    assert ar.exact_integer_limit(torch.float16) == 2**11
    assert ar.exact_integer_limit(torch.bfloat16) == 2**8


@pytest.mark.parametrize("dtype_name", sorted(ar.DTYPES))
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 7, 8, 16, 64, 256])
def test_pattern_sums_are_exact(dtype_name, ranks):
    dtype = ar.DTYPES[dtype_name]
    period = ar.pattern_period(dtype, ranks)
    assert period >= 1 and ranks * period <= ar.exact_integer_limit(dtype)
    count = 1000
    inputs = [ar.rank_values(r, count, period, dtype, torch.device("cpu")) for r in range(ranks)]
    expected = ar.expected_values(ranks, count, period, dtype, torch.device("cpu"))
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
    a = ar.rank_values(0, 64, 13, torch.float32, torch.device("cpu"))
    b = ar.rank_values(1, 64, 13, torch.float32, torch.device("cpu"))
    assert not torch.equal(a, b) and bool((a > 0).all())


def test_no_exact_pattern_for_bfloat16_beyond_256_ranks():
    assert ar.pattern_period(torch.bfloat16, 257) == 0
    assert ar.pattern_period(torch.float32, 4096) == 13


# ----------------------------------------------------------------------------------------------
# records, table, footer, JSON
# ----------------------------------------------------------------------------------------------


def _record(wrong=0):
    oop = ar.make_mode_record(65536, 0.000123456, wrong, 4)
    ip = ar.make_mode_record(65536, 0.0001, 0, 4)
    return ar.make_record(65536, 16384, "float32", oop, ip)


def test_make_mode_record_rounds_once():
    mode = ar.make_mode_record(65536, 0.000123456, 0, 4)
    assert mode == {"time_us": 123.46, "algbw": 0.531, "busbw": 0.796, "wrong": 0}


def test_format_row_shows_the_json_values():
    record = _record()
    row = ar.format_row(record)
    fields = row.replace("|", " ").split()
    assert fields == ["65536", "16384", "float32", "sum",
                      "123.46", "0.531", "0.796", "0", "100.00", "0.655", "0.983", "0"]
    assert float(fields[4]) == record["oop"]["time_us"]
    assert float(fields[10]) == record["ip"]["busbw"]


def test_format_row_unchecked_shows_na():
    oop = ar.make_mode_record(1024, 0.001, None, 2)
    row = ar.format_row(ar.make_record(1024, 256, "float32", oop, oop))
    assert row.split().count("N/A") == 2


def test_table_header_lines_up_with_rows():
    header = ar.format_table_header().splitlines()
    row = ar.format_row(_record())
    assert len(header) == 3 and header[0].startswith("#")
    names, units = header[1], header[2]
    for word in ("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"):
        assert word in names
    assert "out-of-place" in header[0] and "in-place" in header[0]
    def bars(line: str) -> list[int]:
        return [i for i, c in enumerate(line) if c == "|"]

    assert bars(names) == bars(row) and bars(units) == bars(row)
    assert len(names) == len(row)
    # right-aligned columns end where the values end
    assert names.index("size") + len("size") == row.index("65536") + len("65536")


def test_summarize_and_footer():
    records = [_record(), _record(wrong=3)]
    wrong, avg = ar.summarize(records, check=True)
    assert wrong == 3
    assert avg == pytest.approx((0.796 + 0.983) / 2, abs=1e-3)
    assert ar.summarize(records, check=False)[0] is None
    assert "0 OK" in ar.format_footer(0, 1.0)
    assert "3 FAILED" in ar.format_footer(3, 1.0)
    assert "N/A" in ar.format_footer(None, 1.0)
    assert "not a pass criterion" in ar.format_footer(0, 1.0)


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
    assert report["world_size"] == 1 and report["ok"] is True
    assert all(r["oop"]["busbw"] == 0.0 for r in report["results"])  # 2(n-1)/n = 0
    assert load(tmp_path / "rank-0.json")["finished"] is True


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
    assert [r["bytes"] for r in report["results"]] == SMALL_SIZES
    for record in report["results"]:
        assert record["count"] == record["bytes"] // 4
        assert (record["type"], record["redop"]) == ("float32", "sum")
        for mode in ("oop", "ip"):
            m = record[mode]
            assert m["wrong"] == 0 and m["time_us"] > 0 and m["algbw"] >= 0
            assert m["busbw"] == pytest.approx(m["algbw"], abs=1e-3)  # factor 1 at 2 ranks
        # the table printed on rank 0 is the JSON, row for row
        assert ar.format_row(record) in out
    assert "# nThread 1" in out and "# Out of bounds values : 0 OK" in out
    for rank in (0, 1):
        info = load(tmp_path / f"rank-{rank}.json")
        assert info["rank"] == rank and info["finished"] is True and info["wrong"] == 0
        assert {"local_rank", "hostname", "pid"} <= info.keys()


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

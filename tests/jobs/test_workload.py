"""jobs/workload.py: the exit codes, flags, value types, rank file and guarded main that
allreduce.py and train.py share."""

from __future__ import annotations

import argparse
import json
import socket

import pytest

from tests.jobs.scripts import sibling

pytest.importorskip("torch")
workload = sibling("workload")


def test_exit_codes_are_what_the_host_reads() -> None:
    assert (workload.EXIT_OK, workload.EXIT_FAILED, workload.EXIT_USAGE,
            workload.EXIT_ERROR, workload.EXIT_NO_GPU) == (0, 1, 2, 3, 4)
    assert "4 no usable GPU of the kind --expect-gpu names" in workload.EPILOG


@pytest.mark.parametrize("convert, good, bad, message", [
    (workload.positive_int, ("1", 1), "0", "must be >= 1, got 0"),
    (workload.non_negative_int, ("0", 0), "-1", "must be >= 0, got -1"),
    (workload.step_factor, ("2", 2), "1", "must be >= 2, got 1"),
    (workload.fraction, ("1", 1.0), "1.5", r"must be in \(0, 1\], got 1.5"),
    (workload.positive_float, ("0.1", 0.1), "0", "must be > 0, got 0.0"),
])
def test_value_types(convert, good, bad, message) -> None:
    assert convert(good[0]) == good[1]
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        convert(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        convert("x")


def test_common_flags() -> None:
    parser = argparse.ArgumentParser()
    workload.add_common_flags(parser, out="res", writes="x.json", timeout_s=9)
    args = parser.parse_args([])
    assert (args.backend, args.out, args.timeout_s) == ("auto", "res", 9)
    assert (args.expect_gpu, args.rank_cores) == ("none", None)
    args = parser.parse_args(["--expect-gpu", "rocm", "--rank-cores", "49-55:57-63"])
    assert args.expect_gpu == "rocm"
    assert args.rank_cores == [frozenset(range(49, 56)), frozenset(range(57, 64))]
    for bad in (["--backend", "mpi"], ["--expect-gpu", "metal"], ["--rank-cores", "3-1"],
                ["--rank-cores", "0:"]):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(bad)
        assert exc.value.code == 2
    assert "x.json" in parser.format_help() and "device-<RANK>.json" in parser.format_help()


def test_usage_error_is_one_line_from_rank_0_only(rank, capsys) -> None:
    def bad(env):
        raise workload.ScriptUsageError("--sizes: no sizes given")

    rank(0)
    assert workload.guarded_main("job.py", bad) == workload.EXIT_USAGE
    assert capsys.readouterr().err == "job.py: error: --sizes: no sizes given\n"
    rank(1)
    assert workload.guarded_main("job.py", bad) == workload.EXIT_USAGE
    assert capsys.readouterr().err == ""


def test_other_errors_name_the_rank_and_host_with_traceback(rank, capsys) -> None:
    def broken(env):
        raise RuntimeError("device lost")

    rank(1)
    assert workload.guarded_main("job.py", broken) == workload.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"job.py: rank 1 on {socket.gethostname()} failed:\n")
    assert "Traceback" in err and "RuntimeError: device lost" in err
    assert workload.guarded_main("job.py", lambda env: env.rank + 40) == 41


def test_rank_file(tmp_path, monkeypatch) -> None:
    """Each rank waits for the others before it may exit (torchrun stops the rest once one
    fails): after its rank file without teardown, before destroying the group with it."""
    seen = []
    monkeypatch.setattr(workload.dist, "barrier", lambda: seen.append(
        ("barrier", (tmp_path / "rank-1.json").exists())))
    monkeypatch.setattr(workload.dist, "destroy_process_group", lambda: seen.append(
        ("destroy", (tmp_path / "rank-1.json").exists())))
    env = workload.distenv.resolve_dist_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    workload.finish(tmp_path, env, teardown=True, status=0)
    assert seen == [("barrier", False), ("destroy", False)]
    (tmp_path / "rank-1.json").unlink()
    seen.clear()
    workload.finish(tmp_path, env, teardown=False, status=0)
    assert seen == [("barrier", True)]
    record = json.loads((tmp_path / "rank-1.json").read_text())
    assert record["rank"] == 1 and record["local_rank"] == 1 and record["status"] == 0
    assert record["teardown"] == "skipped"
    assert record["finished"] is True and record["hostname"] == socket.gethostname()


def test_a_rank_across_nodes_names_the_loopback_address_it_would_advertise(monkeypatch) -> None:
    """gloo advertises GLOO_SOCKET_IFNAME's address, else the host name's; across nodes a
    loopback one is named (before the process group forms); one node, or NCCL left to choose
    its interface, is never judged."""
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "127.0.1.1")
    across = {"GROUP_WORLD_SIZE": "2"}
    reason = workload.loopback_reason("gloo", across)
    assert reason and "advertises the loopback address 127.0.1.1" in reason
    assert "set GLOO_SOCKET_IFNAME in the site profile" in reason
    assert "GLOO_SOCKET_IFNAME=lo" in workload.loopback_reason(
        "gloo", {**across, "GLOO_SOCKET_IFNAME": "lo"})
    assert "names no interface" in workload.loopback_reason(
        "gloo", {**across, "GLOO_SOCKET_IFNAME": "nosuch0"})
    assert workload.loopback_reason("gloo", {"GROUP_WORLD_SIZE": "1"}) is None
    assert workload.loopback_reason("nccl", across) is None
    assert "NCCL_SOCKET_IFNAME=lo" in workload.loopback_reason(
        "nccl", {**across, "NCCL_SOCKET_IFNAME": "lo"})
    assert workload.spans_nodes({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert not workload.spans_nodes({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"})
    assert workload.spans_nodes({"SLURM_STEP_NUM_NODES": "2"})

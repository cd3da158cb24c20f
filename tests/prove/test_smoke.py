"""The smoke kind: its options, planning (exact exec argv per site) and its sanity rules."""

from __future__ import annotations

import pytest

from containers.errors import ConfigError, UsageError, VerdictFailed
from containers.inputs.flags import SIZES_LABEL as SIZES
from tests.fixtures.data import load_targets
from containers.inputs.sites import load_site
from containers.prove.kind import plan as plan_run
from containers.prove.smoke import SMOKE, SmokeOptions
from containers.prove.verdict import Result, check
from containers.run.workload import Outcome


def test_cpu_plan_argv(data_root, data_settings, data_runtime) -> None:
    target = load_targets(data_root)["cpu"]
    site = load_site(data_root / "sites" / "local.yaml")
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime,
                      options=SmokeOptions(gpus=4, sizes="1K:1M", iters=3, warmup=1, timeout=90),
                      run_id="r1")
    out = data_settings.results_dir / "smoke" / "cpu-r1"
    assert plan.out_dir == out and plan.ranks == 4 and plan.timeout == 90
    assert plan.argv == [
        "apptainer", "exec",
        "--bind", f"{data_settings.root / 'jobs'}:/opt/containers/jobs:ro",
        "--bind", f"{out}:/opt/containers/results",
        str(data_settings.images_dir / "cpu.sif"),
        "torchrun", "--standalone", "--nproc-per-node=4",
        "--log-dir=/opt/containers/results/torchelastic",
        "/opt/containers/jobs/allreduce.py",
        "--sizes", "1K:1M", "--iters", "3", "--warmup", "1", "--dtype", "float32",
        "--cycles", "1", "--op", "all_reduce", "--out", "/opt/containers/results",
        "--timeout-s", "90",
        # a CPU site: gloo, said explicitly, and no GPU expected
        "--expect-gpu", "none", "--backend", "gloo"]


def test_gpu_site_flags_binds_env_and_limits(tmp_path, data_root, data_settings,
                                             data_runtime) -> None:
    site_file = tmp_path / "gpusite.yaml"
    site_file.write_text("description: x\ngpus: {kind: rocm, per_node: 8}\nruntime: singularity\n"
                         "binds: [/opt/cray]\nenv: {NCCL_SOCKET_IFNAME: hsn}\n")
    site = load_site(site_file)
    target = load_targets(data_root)["cpu"]
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime,
                      options=SmokeOptions(gpus=8), run_id="r")
    assert plan.argv[2] == "--rocm" and "--nv" not in plan.argv
    assert plan.argv[plan.argv.index("/opt/cray") - 1] == "--bind"
    assert "NCCL_SOCKET_IFNAME=hsn" in plan.argv
    with pytest.raises(ConfigError, match="nodes have 8 GPUs; --gpus 16"):
        plan_run(target, site, settings=data_settings, runtime=data_runtime,
                   options=SmokeOptions(gpus=16), run_id="r")



@pytest.mark.parametrize("values, message", [
    ({"gpus": 0}, "--gpus must be at least 1 (got 0)"),
    ({"iters": 0}, "--iters must be at least 1 (got 0)"),
    ({"warmup": -1}, "--warmup must be at least 0 (got -1)"),
    ({"timeout": 0}, "--timeout must be more than 0 (got 0)"),
    ({"dtype": "int8"}, "--dtype must be one of float32, float16, bfloat16 (got 'int8')"),
    ({"sizes": "8K:1K"},
     "--sizes 8K:1K: size range start 8192 is above its end 1024; it takes " + SIZES),
    ({"sizes": "1:4", "dtype": "float32"},
     "--sizes 1:4: 1 B is less than one float32 (4 B); it takes " + SIZES),
    ({"gpus": "two"}, "--gpus takes a whole number >= 1 (got 'two')"),
    ({"timeout": "nan"}, "--timeout must be a finite number of seconds, more than 0 (got 'nan')"),
    ({"sizes": "0"}, "--sizes 0: byte size must be positive: '0'; it takes " + SIZES),
])
def test_options_check_themselves(values, message) -> None:
    with pytest.raises(UsageError) as info:
        SmokeOptions(**{"gpus": 2, **values})
    assert str(info.value) == message and info.value.flag == message.split()[0]
    assert SmokeOptions(gpus=2, sizes="2:4", dtype="float16").kind is SMOKE
    made = SmokeOptions(gpus="3", iters="4", warmup="0", timeout="90", cycles="2")  # CLI text
    assert (made.gpus, made.iters, made.warmup, made.timeout, made.cycles) == (3, 4, 0, 90.0, 2)
    assert made.largest_size == 128 << 20


#: One size measured, as the benchmark writes a row.
ROW = {"op": "all_reduce", "bytes": 1024, "oop": {"busbw": 1.0, "wrong": 0},
       "ip": {"busbw": 1.0, "wrong": 0}}


def _result(plan, **kw) -> Result:
    base = dict(returncode=0, timed_out=False, missing_ranks=[], seconds=1.0,
                report={"wrong_total": 0, "results": [ROW], "finished": "2026-11-21T00:00:00"})
    return Result(kind=SMOKE, plan=plan, outcome=Outcome(**{**base, **kw}))


def verdict(result: Result) -> list[str]:
    return result.reasons


def test_verdicts(data_root, data_settings, data_runtime) -> None:
    target = load_targets(data_root)["cpu"]
    site = load_site(data_root / "sites" / "local.yaml")
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime,
                      options=SmokeOptions(gpus=2, timeout=30), run_id="r")
    assert verdict(_result(plan)) == [] and _result(plan).ok
    check(_result(plan))
    empty = {"wrong_total": 0, "results": [], "finished": "2026-11-21T00:00:00"}
    assert "allreduce.json: key 'results' is empty: the benchmark measured no size" in \
        verdict(_result(plan, report=empty))
    row = {"bytes": 1024, "oop": {"busbw": 1.0, "wrong": 3}, "ip": {"busbw": 1.0, "wrong": 0}}
    wrong = _result(plan, returncode=1, report={"wrong_total": 3, "results": [row],
                                                 "finished": "2026-11-21T00:00:01"})
    assert verdict(wrong) == ["3 wrong values (all_reduce results differ from the exact sum) "
                              "at sizes 1024 B"]
    lost = _result(plan, returncode=1, timed_out=True, missing_ranks=[1], report=None)
    assert verdict(lost) == ["timed out after 30 s; every process of the run was stopped",
                             "ranks that did not finish: 1 (of 2)"]
    with pytest.raises(VerdictFailed, match="smoke FAILED for cpu \\(2 ranks\\): timed out"):
        check(lost)
    assert verdict(_result(plan, returncode=3)) == ["the benchmark exited with code 3"]
    assert verdict(_result(plan, report=None)) == ["no allreduce.json was written"]
    unfinished = _result(plan, report={"results": [], "finished": None})
    assert verdict(unfinished) == ["the benchmark did not complete its sizes"]


def test_first_failure_from_torchrun_summary() -> None:
    from containers.run.workload import first_failure
    summary = ["[rank0]: some noise", "Failures:", "  <NO_OTHER_FAILURES>",
               "Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-21_05:30",
               "  host      : localhost", "  rank      : 1 (local_rank: 1)",
               "  exitcode  : 17 (pid: 12684)", "  error_file: <N/A>"]
    assert first_failure(summary) == (1, 17)
    assert first_failure(summary[:3]) is None


def test_a_soak_names_its_cycles_and_one_rank_is_not_judged(data_root, data_settings,
                                                           data_runtime) -> None:
    target = load_targets(data_root)["cpu"]
    site = load_site(data_root / "sites" / "local.yaml")
    plan = plan_run(target, site, settings=data_settings, runtime=data_runtime,
                    options=SmokeOptions(gpus=2, cycles=3), run_id="r")
    assert plan.argv[plan.argv.index("--cycles") + 1] == "3"
    rows = [{"bytes": size, "oop": {"busbw": 1.0, "wrong": oop},
             "ip": {"busbw": 1.0, "wrong": ip}, "wrong_cycles": cycles}
            for size, oop, ip, cycles in ((1024, 1, 1, [2]), (2048, 0, 0, []),
                                          (4096, 2, 0, [1, 3]))]
    soak = _result(plan, returncode=1, report={"results": rows, "cycles": 3, "cycles_done": 3,
                                                "finished": "x"})
    assert verdict(soak) == ["4 wrong values (all_reduce results differ from the exact sum) at "
                             "sizes 1024 B (cycle 2), 4096 B (cycles 1, 3) in a soak of 3 "
                             "cycles"]
    record = soak.kind.details(soak)
    assert record["cycles"] == 3 and [r["wrong_cycles"] for r in record["results"]] == [
        [2], [], [1, 3]]
    with pytest.raises(UsageError, match="--cycles must be at least 1"):
        SmokeOptions(gpus=2, cycles=0)

    alone = plan_run(target, site, settings=data_settings, runtime=data_runtime,
                     options=SmokeOptions(gpus=1), run_id="r")
    none = {"bytes": 1 << 30, "oop": {"busbw": None, "algbw": None, "wrong": 0},
            "ip": {"busbw": None, "algbw": None, "wrong": 0}}
    one = _result(alone, report={"results": [none], "finished": "x"})
    assert one.ok and one.performance.state == "not-judged"
    assert one.performance.message.startswith("1 rank: no data crosses a link")
    assert one.kind.write_reports(one) == []

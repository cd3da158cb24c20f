"""``invoke smoke --op``: the options, references keyed by collective, and each op's own
sanity, performance, verdict and perflog line, from reports shaped as allreduce.py writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.errors import ConfigError, UsageError
from tests.fixtures.data import load_targets
from containers.inputs.references import parse_reference, select
from containers.inputs.sites import load_site
from containers.inputs.yamlsource import load_yaml_text
from containers.prove import perflog
from containers.prove.kind import plan as plan_run
from containers.prove.registry import kind_of
from containers.prove.smoke import SMOKE, SmokeOptions
from containers.prove.verdict import Result, gate_lines
from containers.run.workload import Outcome
from tests.fixtures.data import reference as ref

ALL = "all_reduce,all_gather,reduce_scatter,alltoall,broadcast,reduce,sendrecv"


def test_op_option_is_a_canonical_list() -> None:
    assert SmokeOptions(gpus=2).op == "all_reduce"
    assert SmokeOptions(gpus=2, op="all").op == ALL
    assert SmokeOptions(gpus=2, op="reduce, all_gather").op == "all_gather,reduce"
    assert SmokeOptions(gpus=2, op="allreduce").op == "all_reduce"  # the files' spelling
    with pytest.raises(UsageError, match="--op unknown collective 'allreduse'"):
        SmokeOptions(gpus=2, op="allreduse")


def test_references_are_keyed_by_op() -> None:
    refs = [ref(bytes=4096, value=1.0), ref(op="all_gather", bytes=4096, value=0.5)]
    assert select(refs, partition=None, nodes=1, ranks_per_node=8).value == 1.0
    assert select(refs, partition=None, nodes=1, ranks_per_node=8, op="all_gather").value == 0.5
    assert select(refs, partition=None, nodes=1, ranks_per_node=8, op="alltoall") is None
    data = load_yaml_text("- nodes: 1\n  ranks_per_node: 8\n  bytes: 1024\n"
                          "  busbw: [1.0, -0.1, null, GB/s]\n  source: x\n"
                          "- op: allgather\n  nodes: 1\n  ranks_per_node: 8\n  bytes: 1024\n"
                          "  busbw: [1.0, -0.1, null, GB/s]\n  source: x\n",
                          path=Path("sites/x.yaml"))
    assert parse_reference(data[0], path=Path("sites/x.yaml"), index=0).op == "all_reduce"
    with pytest.raises(ConfigError, match=r"sites/x.yaml:6: references\[1\].op: unknown "
                                          r"collective 'allgather'.*all_gather"):
        parse_reference(data[1], path=Path("sites/x.yaml"), index=1)


def _row(op: str, size: int, busbw: float, wrong: int = 0, ip: bool = True) -> dict:
    mode = {"time_us": 1.0, "algbw": busbw, "busbw": busbw, "wrong": wrong}
    return {"op": op, "bytes": size, "count": size // 4, "type": "float32", "oop": mode,
            "ip": dict(mode) if ip else None, "wrong_cycles": [1] if wrong else []}


def _plan(data_root, data_settings, data_runtime, op: str, references=()):
    target = load_targets(data_root)["cpu"]
    site = load_site(data_root / "sites" / "local.yaml").model_copy(
        update={"references": tuple(references)})
    return plan_run(target, site, settings=data_settings, runtime=data_runtime,
                    options=SmokeOptions(gpus=2, op=op), run_id="r")


def _result(plan, rows, **report) -> Result:
    args = plan.launch.args
    full = {"results": rows, "finished": "x", "ops": args[args.index("--op") + 1].split(","),
            **report}
    return Result(kind=SMOKE, plan=plan, outcome=Outcome(
        returncode=0, timed_out=False, missing_ranks=[], seconds=1.0, report=full))


def test_each_op_is_judged_by_its_own_reference(data_root, data_settings, data_runtime) -> None:
    """An all_reduce reference (the only kind sites had) must not judge all_gather."""
    plan = _plan(data_root, data_settings, data_runtime, "all_reduce,all_gather",
                 [ref(nodes=1, ranks_per_node=2, bytes=4096, value=1.0, lower=-0.1)])
    result = _result(plan, [_row("all_reduce", 4096, 1.0), _row("all_gather", 4096, 0.2)])
    assert result.reasons == []
    assert SMOKE.op_performance(result, "all_reduce").state == "pass"
    assert SMOKE.op_performance(result, "all_gather").state == "no-reference"
    assert result.performance.state == "no-reference" and result.ok
    assert "all_reduce: PASS" in result.performance.message

    slow = _plan(data_root, data_settings, data_runtime, "all_reduce,all_gather",
                 [ref(nodes=1, ranks_per_node=2, bytes=4096, value=1.0, lower=-0.1),
                  ref(op="all_gather", nodes=1, ranks_per_node=2, bytes=4096, value=1.0,
                      lower=-0.1)])
    result = _result(slow, [_row("all_reduce", 4096, 1.0), _row("all_gather", 4096, 0.2)])
    assert result.performance.failed and not result.ok
    assert "all_gather: FAIL: busbw 0.2 GB/s is below" in result.performance.message


def test_each_op_has_its_own_verdict_and_perflog_line(data_root, data_settings,
                                                     data_runtime) -> None:
    plan = _plan(data_root, data_settings, data_runtime, ALL)
    rows = [_row(op, 4096, 0.5, wrong=2 if op == "alltoall" else 0,
                 ip=op not in ("alltoall", "sendrecv")) for op in ALL.split(",")]
    collectives = {op: {"factor": "1", "busbw_factor": 1.0, "unsupported": None}
                   for op in ALL.split(",")}
    collectives["reduce_scatter"]["unsupported"] = "not supported by backend gloo"
    rows = [r for r in rows if r["op"] != "reduce_scatter"]
    result = _result(plan, rows, collectives=collectives)
    assert result.reasons == [
        "reduce_scatter: not supported by backend gloo",
        "2 wrong values (alltoall results differ from the exact values each rank must hold) "
        "at sizes 4096 B"]
    details = SMOKE.details(result)
    assert details["ops"] == ALL.split(",") and details["wrong_total"] == 2
    verdicts = {op: entry["passed"] for op, entry in details["collectives"].items()}
    assert verdicts == {op: op not in ("alltoall", "reduce_scatter") for op in ALL.split(",")}
    assert [r["op"] for r in details["results"]] == [r["op"] for r in rows]
    assert details["collectives"]["sendrecv"]["largest"]["busbw_ip"] is None

    record = {"site": "local", "partition": None, "date": "2026-11-25T00:00:00Z",
              "target": "cpu", "passed": False, "performance": None, **details}
    lines = SMOKE.perflog_records(record)
    assert [line["op"] for line in lines] == ALL.split(",")
    assert all({r["op"] for r in line["results"]} <= {line["op"]} for line in lines)
    assert [line["passed"] for line in lines] == list(verdicts.values())
    history = perflog.history_json(lines)
    assert [run["op"] for run in history] == ALL.split(",")
    shown = gate_lines({**record, "reasons": result.reasons})
    assert any(line.startswith("  alltoall:") and "FAIL (2 wrong" in line for line in shown)
    assert any(line.startswith("  broadcast:") and "PASS (0 wrong" in line for line in shown)


def test_an_op_asked_for_but_not_measured_fails(data_root, data_settings, data_runtime) -> None:
    plan = _plan(data_root, data_settings, data_runtime, "all_reduce,broadcast")
    result = _result(plan, [_row("all_reduce", 4096, 0.5)], ops=["all_reduce"])
    assert result.reasons == ["broadcast was asked for but the benchmark measured none of it"]
    stray = _result(plan, [_row("all_reduce", 4096, 0.5), _row("broadcast", 4096, 0.5),
                           _row("reduce", 4096, 0.5, wrong=1)])
    assert stray.reasons == ["2 wrong values (reduce results differ from the exact sum) at "
                             "sizes 4096 B"]


def test_history_reference_of_another_op_is_not_plotted() -> None:
    reference = {"op": "all_reduce", "bytes": 4096, "value": 1.0, "lower": -0.1,
                 "upper": None, "unit": "GB/s", "source": "x"}
    base = {"date": "2026-11-25T00:00:00Z", "target": "cpu", "passed": True,
            "results": [{"op": "all_gather", "bytes": 4096, "busbw_oop": 0.5}],
            "performance": {"state": "pass", "reference": reference}}
    assert perflog.at_reference({**base, "op": "all_gather"}) is None
    assert perflog.at_reference({**base, "op": "all_reduce", "results": [
        {"op": "all_reduce", "bytes": 4096, "busbw_oop": 0.9}]}) == (4096, 0.9)


# ------------------------------------------------------------------ batch jobs: invoke verdict
from tests.app.test_judging import ROW, _judge, batch_run  # noqa: E402,F401  (the fixture)


def _job_options(op: str) -> dict:
    return {"target": "cpu", "site": "local-slurm", "workload": "smoke", "nodes": 1,
            "gpus_per_node": 2, "launcher": "torchrun", "partition": None,
            "options": {"sizes": "4K", "iters": 2, "op": op}}


def _report(rows: list[dict]) -> dict:
    return {"backend": "gloo", "nodes": 1, "finished": "x", "ops": ["all_reduce", "alltoall"],
            "results": rows}


def test_a_batch_smoke_job_is_judged_per_op(batch_run) -> None:
    """The ops a job was written for travel in job.json; invoke verdict judges each of them."""
    project, folder, write = batch_run
    oop, ip = {**ROW["oop"], "algbw": 2.0}, {**ROW["ip"], "algbw": 2.1}
    reduce_row = {**ROW, "op": "all_reduce", "oop": oop, "ip": ip}
    alltoall = {**ROW, "op": "alltoall", "oop": oop, "ip": None}
    write({"job.json": _job_options("all_reduce,alltoall"),
           "allreduce.json": _report([reduce_row, alltoall]),
           "all_reduce.json": {"ok": True, "results": [reduce_row]},
           "alltoall.json": {"ok": True, "results": [alltoall]}})
    (folder / "alltoall.txt").write_text("# Collective test starting: alltoall_perf\n")
    record, failure, lines = _judge(project, folder)
    assert failure is None and record["ops"] == ["all_reduce", "alltoall"], record["reasons"]
    listed = [line.split(": ")[0] + ": " + Path(line.split(": ")[1]).name for line in lines
              if line.startswith(("json: ", "table: "))]
    assert listed == ["json: allreduce.json", "json: all_reduce.json", "json: alltoall.json",
                      "table: alltoall.txt"]
    assert any(line.startswith("  alltoall:") and "PASS (0 wrong" in line for line in lines)
    assert (folder / "alltoall.png").is_file() and (folder / "all_reduce.png").is_file()
    logged = perflog.read(project.settings.perflog_dir)
    assert [line["op"] for line in logged] == ["all_reduce", "alltoall"]
    assert sorted(p.name for p in project.settings.perflog_dir.rglob("*.jsonl")) == \
        ["all_reduce.jsonl", "alltoall.jsonl"]  # one log per collective, as its results

    bad = {**alltoall, "oop": {**oop, "wrong": 3}, "wrong_cycles": [1]}
    write({"job.json": _job_options("all_reduce,alltoall"),
           "allreduce.json": _report([reduce_row, bad]),
           "alltoall.json": {"ok": False, "wrong_total": 3, "results": [bad]}})
    record, failure, _ = _judge(project, folder)
    assert failure is not None and failure.exit_code == 2
    assert record["reasons"] == ["3 wrong values (alltoall results differ from the exact values "
                                 "each rank must hold) at sizes 16777216 B"]
    assert record["collectives"]["all_reduce"]["passed"] is True
    assert record["collectives"]["alltoall"]["passed"] is False

    write({"job.json": _job_options("all_reduce,alltoall"),
           "allreduce.json": _report([reduce_row])})
    record, failure, _ = _judge(project, folder)
    assert failure is not None
    assert record["reasons"] == ["alltoall was asked for but the benchmark measured none of it"]


def test_a_smoke_job_carries_its_ops(data_root, data_settings) -> None:
    """``invoke job --workload smoke --op all``: the script runs every op and job.json names
    them, so the job's verdict re-plans the same run."""
    from containers.batch import job as batch
    from containers.batch.request import request_from_record

    target = load_targets(data_root)["cpu"]
    site = load_site(data_root / "sites" / "local-slurm.yaml")
    request = batch.JobRequest(kind=kind_of("smoke"), options=SmokeOptions(gpus=2, op="all"))
    made = batch.plan_job(batch.JobNeeds(target, site, settings=data_settings, host_arch="x86_64"),
                          request, environ={})
    assert f" --op {ALL} " in made.text
    record = json.loads(made.text.split("<<'JOB'\n")[1].split("\nJOB\n")[0])
    assert record["options"]["op"] == ALL
    again = batch.job_run(target, site, settings=data_settings,
                          request=request_from_record(record, kind_of(record["workload"])))
    assert again.options.op == ALL and "--op" in again.workload.launch.args

"""Integration: ``invoke smoke --op all`` inside the real CPU image at 2 and 4 ranks.

One soak of two cycles per rank count, rank 1 corrupting its result in cycle 2 only: cycle 1
proves every op's values right on every rank, cycle 2 that a corrupted result is caught for
every op in that cycle, and the JSON's busbw/algbw is each op's bus factor.
"""

from __future__ import annotations

import json

import pytest

from containers.app.workloads import prove
from containers.errors import VerdictFailed
from containers.inputs.names import COLLECTIVES
from containers.prove import perflog
from containers.prove.smoke import SmokeOptions
from tests.fixtures.images import results_project
from tests.jobs.nccl_consumers import STRICT_ROW, superbench_figures

pytestmark = [pytest.mark.apptainer, pytest.mark.distributed]

FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
UNCHECKED_IN_PLACE = ("alltoall", "sendrecv")


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_op_checked_with_its_factor_and_a_corruption_caught_per_op_per_cycle(
        cpu_image, real_project, tmp_path, ranks) -> None:
    project = results_project(real_project.root, tmp_path)
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failure:
        prove(project, target="cpu", say=lines.append,
              options=SmokeOptions(gpus=ranks, sizes="64K,256K", iters=2, warmup=1,
                                       timeout=300, cycles=2, fault="corrupt@1:2", op="all"))
    message = str(failure.value)
    (out,) = (tmp_path / "results" / "smoke").glob("cpu-*")
    report = json.loads((out / "allreduce.json").read_text())
    assert report["ops"] == list(COLLECTIVES) and report["world_size"] == ranks
    first, second = report["cycle_results"]
    def checked(row: dict) -> list[int]:  # in-place alltoall, sendrecv: not checked (None)
        return [m["wrong"] for m in (row["oop"], row["ip"]) if m["wrong"] is not None]

    for row in first["results"]:  # cycle 1: every op's exact values on every rank
        assert checked(row) == [0] * (1 + (row["op"] not in UNCHECKED_IN_PLACE)), row
    for row in second["results"]:  # cycle 2: rank 1's damage caught in every op and mode
        assert checked(row) == [1] * (1 + (row["op"] not in UNCHECKED_IN_PLACE)), row
    for op in COLLECTIVES:
        summary = report["collectives"][op]
        assert summary["busbw_factor"] == pytest.approx(FACTORS[op](ranks))
        rows = [r for r in report["results"] if r["op"] == op]
        assert [r["bytes"] for r in rows] == [64 << 10, 256 << 10]
        for row in rows:
            assert row["wrong_cycles"] == [2]
            for mode in (row["oop"], row["ip"]):
                assert mode["busbw"] == pytest.approx(mode["algbw"] * summary["busbw_factor"],
                                                      abs=2e-3)
                if mode["algbw"] >= 0.05:
                    assert mode["busbw"] / mode["algbw"] == pytest.approx(
                        summary["busbw_factor"], rel=0.05)
        assert f"({op} results differ from the exact" in message
        assert f"at sizes 65536 B (cycle 2), 262144 B (cycle 2) in a soak of 2 cycles" in message
    record = json.loads((out / "verdict.json").read_text())
    assert record["passed"] is False and record["ops"] == list(COLLECTIVES)
    assert all(entry["passed"] is False for entry in record["collectives"].values())
    logged = perflog.read(project.settings.perflog_dir)
    assert [line["op"] for line in logged] == list(COLLECTIVES)
    assert all(line["passed"] is False and line["wrong_total"] > 0 for line in logged)
    assert sum(line.startswith("# ") and "busbw = algbw *" in line for line in lines) == \
        len(COLLECTIVES)  # each op's one table, its rows repeated per cycle as nccl-tests -N
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == {f"{op}.png" for op in COLLECTIVES}
    assert sorted(p.name for p in project.settings.perflog_dir.rglob("*.jsonl")) == \
        sorted(f"{op}.jsonl" for op in COLLECTIVES)
    for op in COLLECTIVES:  # per op: its report, and its table as nccl-tests' binary prints it
        assert json.loads((out / f"{op}.json").read_text())["ops"] == [op]
        text = (out / f"{op}.txt").read_text()
        rows = [line for line in text.splitlines() if not line.startswith("#")]
        assert len(rows) == 2 * 2 and all(STRICT_ROW.match(row) for row in rows), text
        assert len(superbench_figures(text, op, in_place=True)) == 3 * 2

"""``allreduce.py --op all`` read by the tools sites run on nccl-tests output
(``jobs/nccltests.py``): the real output of a 2-rank gloo run, parsed by a strict nccl-tests row expression, a
ReFrame-style extraction of ``# Avg bus bandwidth`` and superbenchmark's parser algorithm
(``tests/jobs/nccl_consumers.py``), each collective's table and files on their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.fixtures import procs
from tests.fixtures.procs import start
from tests.jobs.nccl_consumers import (REFRAME_AVG, STRICT_ROW, SuperbenchRejects, sections,
                                       superbench_figures)
from tests.jobs.scripts import JOBS, clean_env, sibling

pytest.importorskip("torch")

nccltests = sibling("nccltests")
ALL = list(sibling("choices").COLLECTIVES)
SIZES = (1024, 2048, 4096, 8192)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[str, dict, Path]:
    """One real run of every op at 2 ranks: (stdout, the combined report, OUT)."""
    out = tmp_path_factory.mktemp("nccl") / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(JOBS / "allreduce.py"), "--backend", "gloo", "--iters", "2", "--warmup", "1",
           "--op", "all", "--sizes", "1K:8K", "--out", str(out)]
    rc, stdout, stderr = procs.finish(start(cmd, clean_env()), 180)
    assert rc == 0, stderr
    return stdout, json.loads((out / "allreduce.json").read_text()), out


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.distributed
def test_every_line_is_a_strict_nccl_tests_row_or_a_comment(run):
    stdout, report, _ = run
    rows = _rows(stdout)
    assert len(rows) == len(ALL) * len(SIZES)
    assert [row for row in rows if not STRICT_ROW.match(row)] == []
    for row in rows:  # numbers wherever nccl-tests prints them: only #wrong may be N/A
        fields = row.split()
        assert "N/A" not in fields[5:8] + fields[9:12], row
    in_place_unchecked = {r.split()[0] for r in rows if r.split()[-1] == "N/A"}
    assert in_place_unchecked == {str(size) for size in SIZES}
    assert {r["op"] for r in report["results"] if r["ip"]["wrong"] is None} == \
        {"alltoall", "sendrecv"}


@pytest.mark.distributed
def test_each_collective_is_one_table_with_its_own_average(run):
    stdout, report, _ = run
    blocks = sections(stdout)
    assert list(blocks) == ALL
    for name, block in blocks.items():
        assert block.count(nccltests.table_header()) == 1
        assert f"# Collective test concluded: {name}_perf" in block
        averages = REFRAME_AVG.findall(block)
        assert [float(a) for a in averages] == [report["collectives"][name]["avg_busbw"]]
        types = {tuple(row.split()[2:5]) for row in _rows(block)}
        redop = "none" if name in ("all_gather", "alltoall", "broadcast") else "sum"
        root = "0" if name in ("broadcast", "reduce") else "-1"
        assert types == {("float", redop, root)}, name
    assert len(REFRAME_AVG.findall(stdout)) == len(ALL)  # ReFrame's extractall: one per op


@pytest.mark.distributed
@pytest.mark.parametrize("in_place", [False, True])
def test_superbenchmark_reads_every_op(run, in_place):
    """Per op (its block of stdout, and its own OUT/<op>.txt) every size's figures, equal to the
    JSON's; the whole output at once reads as its last op, without error."""
    stdout, report, out = run
    for name, block in sections(stdout).items():
        figures = superbench_figures(block, name, in_place=in_place)
        assert figures == superbench_figures((out / f"{name}.txt").read_text(), name,
                                             in_place=in_place)
        mode = "ip" if in_place else "oop"
        for row in (r for r in report["results"] if r["op"] == name):
            # as printed: two decimals where they fit the column (a slow size's time has fewer)
            assert figures[f"{name}_{row['bytes']}_busbw"] == float(nccltests.fit(
                row[mode]["busbw"], 6))
            assert figures[f"{name}_{row['bytes']}_time"] == float(nccltests.fit(
                row[mode]["time_us"], 7))
        assert len(figures) == 3 * len(SIZES)
    assert set(superbench_figures(stdout, "all", in_place=in_place)) == \
        {f"all_{size}_{name}" for size in SIZES for name in ("busbw", "algbw", "time")}


@pytest.mark.distributed
def test_per_op_files_beside_the_combined_report(run):
    stdout, report, out = run
    assert set(report["collectives"]) == set(ALL) and len(report["results"]) == 28
    for name in ALL:
        own = json.loads((out / f"{name}.json").read_text())
        assert own["ops"] == [name] and own["ok"] is True and own["finished"]
        assert own["results"] == [r for r in report["results"] if r["op"] == name]
        assert own["collectives"] == {name: report["collectives"][name]}
        text = (out / f"{name}.txt").read_text()
        assert text.startswith(stdout.splitlines()[0]) and "# Using devices" in text
        assert list(sections(text)) == [name]


def test_superbench_algorithm_rejects_what_it_cannot_read():
    """The helper fails where superbenchmark does, so the tests above prove something: an N/A
    in a column it converts (what the in-place columns of alltoall held before)."""
    header = nccltests.table_header()
    row = {"op": "alltoall", "bytes": 1024, "count": 128, "type": "float32", "redop": "none",
           "root": None, "oop": {"time_us": 9.0, "algbw": 0.1, "busbw": 0.05, "wrong": 0},
           "ip": None}
    text = "\n".join([header, nccltests.row(row), nccltests.footer("alltoall", 0, 0.05)])
    assert superbench_figures(text, "alltoall")["alltoall_1024_busbw"] == 0.05
    with pytest.raises(ValueError, match="N/A"):
        superbench_figures(text, "alltoall", in_place=True)
    with pytest.raises(SuperbenchRejects):
        superbench_figures("# nothing", "alltoall")


@pytest.mark.parametrize("value, text", [(1.5, "   1.50"), (12345.678, "12345.7"),
                                         (1234567.0, "1234567"), (123456789.0, "1.2e+08")])
def test_numbers_fit_their_column_as_nccl_tests_fits_them(value, text):
    assert nccltests.fit(value, 7) == text
    assert nccltests.fit(None, 6) == "N/A"

"""The release gate's busbw comparison against the current latest (a fall beyond the reference's
tolerance is a regression; unlike runs are not compared and say why), on plain data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.publish import gate
from containers.records import SmokeSummary
from tests.publish.standin import LABELS, SHA, smoke_report, smoke_run


def smoke(measured: float, **changes) -> dict:
    """A catalogue smoke summary measuring ``measured`` GB/s at 128 MiB (tolerance -5%)."""
    base = {"passed": True, "site": "lumi", "partition": "standard-g", "nodes": 2, "ranks": 16,
            "date": "2026-11-25T00:00:00Z",
            "performance": {"state": "pass", "measured": measured, "failed": False,
                            "reference": {"bytes": 134217728, "value": 85.0, "lower": -0.05,
                                          "unit": "GB/s"}}}
    return {**base, **changes}


def summary(measured: float, **changes) -> SmokeSummary:
    """:func:`smoke` as the catalogue entry's reader gives it."""
    return SmokeSummary.model_validate(smoke(measured, **changes))


def test_busbw_below_the_tolerance_is_a_regression() -> None:
    result = gate.busbw_check(summary(100.0), summary(94.0))
    assert result["regression"].startswith("busbw fell from 100 to 94 GB/s at 134217728 B "
                                           "(6% lower; the reference allows 5%)")
    assert result["floor"] == 95.0
    assert result["regression"].endswith(" on site lumi, partition standard-g, 16 ranks")
    alone = gate.busbw_check(summary(100.0, partition=None), summary(94.0, partition=None))
    assert alone["regression"].endswith(" on site lumi, 16 ranks")  # never "lumi/-"


def test_busbw_within_the_tolerance_passes() -> None:
    assert gate.busbw_check(summary(100.0), summary(95.5))["regression"] is None


def test_unlike_runs_or_missing_figures_are_not_compared_and_say_why() -> None:
    result = gate.busbw_check(summary(100.0), summary(10.0, ranks=8, nodes=1))
    assert result["regression"] is None and result["note"] == \
        "not compared: the runs differ in nodes, ranks"
    assert "the current latest has no busbw" in gate.busbw_check(None, summary(1.0))["note"]


# ------------------------------------------------- every file of the run, read strictly
def _rewrite(folder: Path, name: str, **changes) -> None:
    (folder / name).write_text(json.dumps({**json.loads((folder / name).read_text()),
                                           **changes}))


def _nan_busbw(folder: Path, value: str) -> None:
    text = (folder / "allreduce.json").read_text()
    (folder / "allreduce.json").write_text(text.replace('"busbw": 1.0', f'"busbw": {value}', 1))


@pytest.mark.parametrize("spoil, why", [
    (lambda f: [_rewrite(f, name, results=[]) for name in ("allreduce.json", "all_reduce.json")],
     "allreduce.json: key 'results' is empty: the benchmark measured no size"),
    (lambda f: _nan_busbw(f, "NaN"),
     "allreduce.json: key 'results.0.oop.busbw': Input should be a finite number (got nan)"),
    (lambda f: _nan_busbw(f, "Infinity"),
     "allreduce.json: key 'results.0.oop.busbw': Input should be a finite number (got inf)"),
    (lambda f: _nan_busbw(f, "null"), "allreduce.json: key 'results' has no busbw at 1024 B"),
    (lambda f: _rewrite(f, "all_reduce.json", ok=False, wrong_total=4),
     "all_reduce.json: key 'ok' is False, 'wrong_total' 4, but allreduce.json counts 0 wrong "
     "all_reduce values"),
    (lambda f: _rewrite(f, "rank-1.json", wrong=3),
     "rank-1.json: key 'wrong' is 3, but allreduce.json counts 0 wrong values over all ranks"),
    (lambda f: _rewrite(f, "all_reduce.json", results=smoke_report(2)["results"][:1]),
     "all_reduce.json: key 'results' differs from allreduce.json's all_reduce rows"),
    (lambda f: (f / "all_reduce.json").unlink(), "no readable all_reduce.json"),
])
def test_the_gate_refuses_a_run_whose_files_prove_nothing(tmp_path: Path, spoil, why) -> None:
    """Issue 48's reproductions: each file of a passing 2-rank run spoiled in one way."""
    path = smoke_run(tmp_path / "run", sha256=SHA)
    record = json.loads(path.read_text())
    assert gate.evidence_reasons(path, record, sha256=SHA, labels=LABELS) == []
    spoil(path.parent)
    assert why in gate.evidence_reasons(path, record, sha256=SHA, labels=LABELS)

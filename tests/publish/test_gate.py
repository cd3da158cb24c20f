"""The release gate's busbw comparison against the current latest (a fall beyond the reference's
tolerance is a regression; unlike runs are not compared and say why), on plain data."""

from __future__ import annotations

from containers.publish import gate


def smoke(measured: float, **changes) -> dict:
    """A catalogue smoke summary measuring ``measured`` GB/s at 128 MiB (tolerance -5%)."""
    base = {"passed": True, "site": "lumi", "partition": "standard-g", "nodes": 2, "ranks": 16,
            "date": "2026-11-25T00:00:00Z",
            "performance": {"state": "pass", "measured": measured, "failed": False,
                            "reference": {"bytes": 134217728, "value": 85.0, "lower": -0.05,
                                          "unit": "GB/s"}}}
    return {**base, **changes}


def test_busbw_below_the_tolerance_is_a_regression() -> None:
    result = gate.busbw_check(smoke(100.0), smoke(94.0))
    assert result["regression"].startswith("busbw fell from 100 to 94 GB/s at 134217728 B "
                                           "(6% lower; the reference allows 5%)")
    assert result["floor"] == 95.0
    assert result["regression"].endswith(" on site lumi, partition standard-g, 16 ranks")
    alone = gate.busbw_check(smoke(100.0, partition=None), smoke(94.0, partition=None))
    assert alone["regression"].endswith(" on site lumi, 16 ranks")  # never "lumi/-"


def test_busbw_within_the_tolerance_passes() -> None:
    assert gate.busbw_check(smoke(100.0), smoke(95.5))["regression"] is None


def test_unlike_runs_or_missing_figures_are_not_compared_and_say_why() -> None:
    result = gate.busbw_check(smoke(100.0), smoke(10.0, ranks=8, nodes=1))
    assert result["regression"] is None and result["note"] == \
        "not compared: the runs differ in nodes, ranks"
    assert "the current latest has no busbw" in gate.busbw_check(None, smoke(1.0))["note"]

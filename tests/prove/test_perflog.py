"""The perflog: one JSON line per smoke run, read back as a history table and a PNG."""

from __future__ import annotations

import json
from pathlib import Path

from containers.prove import perflog


def _record(date: str, inputs_hash: str, busbw: float, passed: bool = True) -> dict:
    return {"date": date, "site": "lumi", "partition": "standard-g", "target": "lumi-rocm",
            "inputs_hash": inputs_hash, "build_date": date, "ranks": 8, "nodes": 1,
            "passed": passed, "results": [{"bytes": 1 << 20, "busbw_oop": 50.0},
                                          {"bytes": 128 << 20, "busbw_oop": busbw}],
            "performance": {"state": "pass", "reference": {
                "bytes": 128 << 20, "value": 125.0, "unit": "GB/s"}}}


def test_perflog_accumulates_and_renders(tmp_path: Path) -> None:
    for record in (_record("2026-11-01T10:00:00Z", "a" * 64, 131.0),
                   _record("2026-11-02T10:00:00Z", "a" * 64, 129.5),
                   _record("2026-11-03T10:00:00Z", "b" * 64, 97.0, passed=False)):
        path = perflog.append(tmp_path, record)
    assert path == tmp_path / "lumi" / "standard-g" / "allreduce.jsonl"
    assert len(path.read_text().splitlines()) == 3
    (tmp_path / "lumi" / "standard-g" / "allreduce.jsonl").open("a").write("not json\n")
    records = perflog.read(tmp_path, target="lumi-rocm")
    assert [r["date"][:10] for r in records] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert perflog.read(tmp_path, target="cpu") == []
    table = perflog.history_rows(records)
    assert [row[7] for row in table] == ["131.000", "129.500", "97.000"]
    assert table[2][3] == "lumi-rocm bbbbbbbbbbbb (2026-11-03)" and table[2][9] == "FAIL"
    png = perflog.plot_history(records, tmp_path / "h.png", title="t")
    assert png.stat().st_size > 10_000
    assert json.loads(path.read_text().splitlines()[0])["inputs_hash"] == "a" * 64

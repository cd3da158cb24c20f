"""benchmarks/common.py: the JSON mirror of every side-by-side benchmark's table is written by
the package's rule (atomic, never through a folder or link someone else controls)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from tests.fixtures import ROOT
from tests.fixtures.disks import Ways

_SPEC = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "common.py")
common = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(common)


def test_report_refuses_a_way_someone_else_controls_in_one_line(tmp_path, capsys):
    ways = Ways(tmp_path)
    for folder, refusal in ways.refusals.items():
        out = folder / "bench" / "r.json"
        with pytest.raises(SystemExit) as stop:
            common.report("t", ["a"], [[1]], out, {"a": 1})
        assert re.fullmatch(f"benchmark: --out {out}: {refusal}.*; refusing to write there",
                            str(stop.value.code)), stop.value.code
    ways.untouched()
    common.report("t", ["a"], [[1]], ways.site / "r.json", {"a": 1})
    assert json.loads((ways.elsewhere / "r.json").read_text()) == {"a": 1}
    assert capsys.readouterr().out.endswith(f"json: {ways.site / 'r.json'}\n")

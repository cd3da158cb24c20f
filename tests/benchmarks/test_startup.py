"""benchmarks/startup.py, run as a user runs it with one repetition, against the same checkout,
on an images folder with no built cpu image: each case is measured (the one-task file, --list,
targets as kept and read afresh) in both, the unchanged build is not built but named as not
measured, and the JSON holds each row with its ratio to the other checkout. Times are reported,
never judged here (a shared machine times too noisily)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures import ROOT
from tests.jobs.scripts import clean_env


def test_the_benchmark_measures_each_case_and_never_builds(tmp_path: Path) -> None:
    out, images = tmp_path / "startup.json", tmp_path / "images"
    images.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "startup.py"), "--repeat", "1",
         "--images", str(images), "--out", str(out), "--against", str(ROOT)],
        capture_output=True, text=True, timeout=600, env=clean_env(), cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    rows = {row["case"]: row for row in document["rows"]}
    assert [row["case"] for row in document["against_rows"]] == list(rows)
    assert list(rows) == ["one-task file", "invoke --list", "invoke targets",
                          "invoke targets, read afresh", "unchanged build"]
    assert rows["unchanged build"] == {
        "case": "unchanged build", "skipped": "not measured: the cpu image is not built (build "
                                              "it first: invoke build --target cpu)"}
    assert rows["one-task file"]["ratio"] == 1.0
    for case in ("invoke --list", "invoke targets"):
        assert rows[case]["median_s"] > 0 and len(rows[case]["samples"]) == 1
        assert isinstance(rows[case]["met"], bool) and rows[case]["vs_against"] > 0
    afresh = rows["invoke targets, read afresh"]  # measured beside it, judged by no goal
    assert afresh["median_s"] > 0 and "met" not in afresh
    assert not list(images.iterdir())  # nothing built, nothing written there
    assert "over one-task" in done.stdout

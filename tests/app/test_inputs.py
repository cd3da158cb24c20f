"""``invoke targets`` and ``invoke check``: each target's state from its image and record, a bad
manifest listed rather than hidden, and every problem reported at once (JSON: file, line, key)."""

from __future__ import annotations

import json

import pytest

from containers.app.inputs import TARGET_COLUMNS, check_inputs, targets_report
from containers.app.project import Project
from containers.errors import ContainersError


def _rows(project) -> dict[str, dict]:
    lines: list[str] = []
    targets_report(project, as_json=True, say=lines.append)
    return {row["target"]: row for row in json.loads(lines[0])}


def test_each_target_says_whether_its_image_is_current(data_project) -> None:
    rows = _rows(data_project)
    assert set(rows) == set(data_project.targets) and all(
        tuple(row) == TARGET_COLUMNS for row in rows.values())
    assert rows["cpu"]["state"] == "not built" and len(rows["cpu"]["inputs_hash"]) == 12
    images = data_project.settings.images_dir
    images.mkdir(parents=True)
    (images / "cpu.sif").write_bytes(b"sif")
    assert _rows(data_project)["cpu"]["state"] == "built (no record)"
    (images / "cpu.sif.json").write_text(json.dumps({"target": "cpu", "inputs_hash": "0" * 64}))
    assert _rows(data_project)["cpu"]["state"] == "stale"


def test_a_bad_manifest_is_listed_invalid_and_check_reports_it(factory_project) -> None:
    root = factory_project()
    bad = root / "recipes" / "broken.yaml"
    bad.write_text("site: local\narch: x86_64\nbogus: 1\n")
    project = Project.load(root, {"images_dir": str(root / "images")})
    row = _rows(project)["broken"]
    assert row["state"].startswith("invalid: ") and row["site"] == "?"
    lines: list[str] = []
    with pytest.raises(ContainersError):
        check_inputs(project, as_json=True, say=lines.append)
    document = json.loads(lines[0])
    assert document["ok"] is False and "cpu" in document["targets"]
    found = [(e["line"], e["key"]) for e in document["errors"] if e["file"] == str(bad)]
    assert found == [(1, "description"), (3, "bogus")]  # every problem of the file at once


def test_the_shipped_inputs_check_clean(data_project) -> None:
    lines: list[str] = []
    check_inputs(data_project, say=lines.append)
    assert lines[0].startswith("runtime: ")
    assert any(line.startswith("ok  target cpu ") for line in lines)
    assert any(line.startswith("ok  site   local ") for line in lines)

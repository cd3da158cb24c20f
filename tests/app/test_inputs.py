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


def test_check_refuses_a_profile_that_asks_more_memory_than_a_node_allocates(
        factory_project) -> None:
    """Puhti's GPU nodes allocate 373 GB: 4 GPUs x 95 GB is refused in one line at the line
    and key of the figure (issue 41)."""
    root = factory_project()
    puhti = root / "sites" / "puhti.yaml"
    text = puhti.read_text()
    puhti.write_text(text.replace("  per_gpu_gb: 93\n", "  per_gpu_gb: 95\n"))
    line = text.splitlines().index("  per_gpu_gb: 93") + 1
    project = Project.load(root, {"images_dir": str(root / "images")})
    lines: list[str] = []
    with pytest.raises(ContainersError) as refused:
        check_inputs(project, as_json=True, say=lines.append)
    found = [(e["line"], e["key"]) for e in json.loads(lines[0])["errors"]
             if e["file"] == str(puhti)]
    assert found == [(line, "memory.per_gpu_gb")]
    assert f"puhti.yaml:{line}: memory.per_gpu_gb: 95 GB per GPU x 4 GPUs = 380 GB is more " \
           "than a node of partition gputest allocates (373 GB" in str(refused.value)
    assert "at most 93 per GPU" in str(refused.value) and "\n" not in str(refused.value)


def test_the_shipped_inputs_check_clean(data_project) -> None:
    lines: list[str] = []
    check_inputs(data_project, say=lines.append)
    assert lines[0].startswith("runtime: ")
    assert any(line.startswith("ok  target cpu ") for line in lines)
    assert any(line.startswith("ok  site   local ") for line in lines)

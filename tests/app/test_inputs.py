"""``invoke targets`` and ``invoke check``: each target's state from its image and record, a bad
manifest listed rather than hidden, and every problem reported at once (JSON: file, line, key);
a listing kept while the content of everything it read is the same, and only the user's own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers.app.inputs import TARGET_COLUMNS, check_inputs, list_targets, show, target_listing
from containers.app.project import Project
from containers.errors import ContainersError
from tests.fixtures.disks import plant_in_place


def _rows(project) -> dict[str, dict]:
    lines: list[str] = []
    show(target_listing(project), as_json=True, say=lines.append)
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


class Listed:
    """``invoke targets`` on a copy of the project: each listing's rows, and how many times the
    project was loaded (a listing read afresh)."""

    def __init__(self, root: Path, tmp_path: Path) -> None:
        self.root, self.loads = root, 0
        self.config = {"images_dir": str(tmp_path / "images"), "tmp_dir": str(tmp_path / "work")}
        self.store_dir = tmp_path / "xdg" / "hpc-containers"

    def __call__(self, **config: str) -> dict[str, dict]:
        def project() -> Project:
            self.loads += 1
            return Project.load(self.root, {**self.config, **config})
        lines: list[str] = []
        list_targets({**self.config, **config}, self.root, project, as_json=True,
                     say=lines.append)
        return {row["target"]: row for row in json.loads(lines[0])}

    def store(self) -> Path:
        (store,) = self.store_dir.glob("targets-*.json")
        return store


@pytest.fixture
def listed(factory_project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Listed:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(sys, "addaudithook", None)  # no process-wide hook: none can be added
    return Listed(factory_project(), tmp_path)


def test_a_second_listing_is_the_kept_one(listed: Listed) -> None:
    first = listed()
    assert listed() == first and listed.loads == 1
    assert not listed.store().stat().st_mode & 0o022


def _edit(path: Path) -> None:
    """A comment more, with the modification time put back: the content says it changed."""
    info = path.stat()
    path.write_text(path.read_text() + "# edited\n")
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


@pytest.mark.parametrize("change", [
    "env spec", "definition", "script", "manifest", "new manifest", "image built", "setting",
    "environment"])
def test_any_change_to_what_the_listing_read_reads_it_afresh(
        listed: Listed, change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = listed()
    root, images = listed.root, Path(listed.config["images_dir"])
    config: dict[str, str] = {}
    if change in ("env spec", "definition", "script", "manifest"):
        _edit({"env spec": root / "envs" / "cpu.yml", "definition": root / "recipes" /
                         "cpu.def", "script": root / "recipes" / "scripts" /
                         "install-python-packages.sh", "manifest": root / "recipes" /
                         "cpu.yaml"}[change])
    elif change == "new manifest":
        shutil.copy(root / "recipes" / "cpu.yaml", root / "recipes" / "cpu2.yaml")
    elif change == "image built":
        images.mkdir()
        (images / "cpu.sif").write_bytes(b"sif")
    elif change == "setting":
        config = {"images_dir": str(images / "elsewhere")}
    else:
        monkeypatch.setenv("INVOKE_CONTAINERS_SOMETHING", "x")
    after = listed(**config)
    assert listed.loads == 2
    if change in ("env spec", "definition", "script"):
        assert after["cpu"]["inputs_hash"] != before["cpu"]["inputs_hash"]
    assert after == listed(**config) and listed.loads == 2  # and kept anew


@pytest.mark.parametrize("why", ["invalid target", "build left work"])
def test_a_listing_that_cannot_tell_everything_from_files_is_not_kept(listed: Listed,
                                                                       why: str) -> None:
    if why == "invalid target":
        (listed.root / "recipes" / "broken.yaml").write_text("site: local\nbogus: 1\n")
    else:
        (Path(listed.config["tmp_dir"]) / "cpu-0123456789ab").mkdir(parents=True)
    listed()
    listed()
    assert listed.loads == 2 and not list(listed.store_dir.glob("targets-*.json"))


def _mark(store: Path) -> None:
    kept = json.loads(store.read_text())
    kept["listing"]["rows"][0]["state"] = "as kept"
    store.write_text(json.dumps(kept))


@pytest.mark.parametrize("how", ["another user's", "writable by others", "folder of others",
                                 "not a listing"])
def test_a_kept_listing_is_used_only_when_it_is_the_users_alone(listed: Listed,
                                                                 how: str) -> None:
    listed()
    store = listed.store()
    _mark(store)
    assert "as kept" in {row["state"] for row in listed().values()}  # the mark is shown
    if how == "another user's":
        os.chown(store, 65534, 65534)
    elif how == "writable by others":
        store.chmod(0o666)
    elif how == "folder of others":
        store.parent.chmod(0o777)
    else:
        kept = json.loads(store.read_text())
        kept["listing"]["rows"][0]["state"] = ["a", "list"]
        store.write_text(json.dumps(kept))
    rows = listed()
    assert listed.loads == 2 and "as kept" not in {str(r["state"]) for r in rows.values()}


@pytest.mark.parametrize("what", ["link", "FIFO", "a file for its folder", "huge"])
def test_a_store_that_cannot_be_read_or_written_costs_only_the_time(
        listed: Listed, tmp_path: Path, what: str) -> None:
    """Listed afresh, without an error: a huge store is never read, only replaced; a link (never
    written through), a FIFO, or a file where the folder would be is left as it is."""
    listed()
    store = listed.store()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    if what == "a file for its folder":
        shutil.rmtree(listed.store_dir)
        listed.store_dir.write_text("")
    else:
        plant_in_place(store, what, elsewhere)
    first = listed()
    assert listed.loads == 2 and listed() == first
    assert elsewhere.read_text() == "{}"
    assert listed.loads == (2 if what == "huge" else 3)


def test_a_kept_listing_loads_no_model_and_reads_nothing_afresh(listed: Listed) -> None:
    """What makes the kept listing fast: shown without the inputs' or the records' models (a
    project that loads would divide by zero)."""
    first = listed()
    code = (f"import json, sys\nfrom pathlib import Path\n"
            f"from containers.app.inputs import list_targets\n"
            f"list_targets({listed.config!r}, Path({str(listed.root)!r}), lambda: 1 / 0, "
            f"as_json=True)\nprint(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), cwd=os.getcwd(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *shown, modules = done.stdout.splitlines()
    assert {row["target"]: row for row in json.loads("\n".join(shown))} == first
    assert [m for m in json.loads(modules) if m == "pydantic" or m.startswith(
        ("containers.inputs", "containers.records", "yaml"))] == []

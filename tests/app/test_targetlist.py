"""The kept listing of ``invoke targets``: shown only while everything it read is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from containers.app import targetlist
from containers.app.targetlist import Listing


class Inputs:
    """A stand-in for the project's inputs: a folder of files a listing reads and lists."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "recipes").mkdir(parents=True)
        (root / "recipes" / "a.yaml").write_text("name: a\n")
        self.calls = 0

    def compute(self, **extra: object) -> Listing:
        self.calls += 1
        names = sorted(p.name for p in (self.root / "recipes").iterdir())
        rows = [{"target": n, "text": (self.root / "recipes" / n).read_text()} for n in names]
        return Listing(runtime_line="runtime: none", rows=rows, **extra)  # type: ignore[arg-type]


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Inputs:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(targetlist, "RACY_S", 0.0)  # files made just now count as settled
    return Inputs(tmp_path / "project")


def listed(inputs: Inputs, config: dict | None = None, **extra: object) -> Listing:
    return targetlist.listing(config or {}, inputs.root, lambda: inputs.compute(**extra))


def test_an_unchanged_project_is_shown_from_the_kept_listing(inputs: Inputs) -> None:
    first = listed(inputs)
    second = listed(inputs)
    assert inputs.calls == 1
    assert second == first and second.rows == [{"target": "a.yaml", "text": "name: a\n"}]


@pytest.mark.parametrize("change", ["edit", "same size", "add", "remove"])
def test_a_changed_input_is_read_afresh(inputs: Inputs, change: str) -> None:
    listed(inputs)
    recipe = inputs.root / "recipes" / "a.yaml"
    if change == "edit":
        recipe.write_text("name: a\nsite: x\n")
    elif change == "same size":  # its ctime moves even if its mtime is put back
        info = recipe.stat()
        recipe.write_text("name: b\n")
        os.utime(recipe, ns=(info.st_atime_ns, info.st_mtime_ns))
    elif change == "add":
        (inputs.root / "recipes" / "b.yaml").write_text("name: b\n")
    else:
        recipe.unlink()
    fresh = listed(inputs)
    assert inputs.calls == 2
    assert fresh.rows != [{"target": "a.yaml", "text": "name: a\n"}]


def test_other_settings_or_environment_read_afresh(inputs: Inputs,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    listed(inputs, {"images_dir": "images"})
    listed(inputs, {"images_dir": "elsewhere"})
    assert inputs.calls == 2
    monkeypatch.setenv("INVOKE_CONTAINERS_TMP_DIR", "/var/tmp/x")
    listed(inputs, {"images_dir": "elsewhere"})
    assert inputs.calls == 3
    monkeypatch.setenv("OLDPWD", "/somewhere")  # the shell's bookkeeping changes nothing
    listed(inputs, {"images_dir": "elsewhere"})
    assert inputs.calls == 3


@pytest.mark.parametrize("extra", [{"residue": True}, {"leftovers": ["work folder x"]}])
def test_a_listing_that_saw_build_work_is_not_kept(inputs: Inputs, extra: dict) -> None:
    listed(inputs, **extra)
    listed(inputs, **extra)
    assert inputs.calls == 2


def test_a_file_changed_within_the_racy_window_is_not_kept(
        inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targetlist, "RACY_S", 60.0)  # the recipe was written just now
    listed(inputs)
    listed(inputs)
    assert inputs.calls == 2


def test_running_a_program_or_writing_a_file_is_not_kept(inputs: Inputs, tmp_path: Path) -> None:
    def runs() -> Listing:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return inputs.compute()

    def writes() -> Listing:
        (tmp_path / "written").write_text("x")
        return inputs.compute()

    for compute in (runs, runs, writes, writes):
        targetlist.listing({}, inputs.root, compute)
    assert inputs.calls == 4


def test_the_runtime_version_is_kept_with_the_runtime_binary_stat(
        inputs: Inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "bin" / "apptainer"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\necho apptainer version 1.4.5\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")

    def asks() -> Listing:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
        return Listing(runtime_line=out.stdout.strip(), rows=inputs.compute().rows)

    targetlist.listing({}, inputs.root, asks)
    assert targetlist.listing({}, inputs.root, asks).runtime_line == "apptainer version 1.4.5"
    assert inputs.calls == 1
    binary.write_text("#!/bin/sh\necho apptainer version 1.4.6\n")
    assert targetlist.listing({}, inputs.root, asks).runtime_line == "apptainer version 1.4.6"
    assert inputs.calls == 2


def test_an_unreadable_kept_listing_or_a_read_only_cache_is_no_error(
        inputs: Inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed(inputs)
    (store,) = (tmp_path / "xdg" / "hpc-containers").glob("targets-*.json")
    store.write_text("{not json")
    assert listed(inputs).rows and inputs.calls == 2
    kept = json.loads(store.read_text())  # written anew
    store.write_text(json.dumps({**kept, "listing": {"rows": 7, "other": 1}}))
    assert listed(inputs).rows and inputs.calls == 3, "a hand-edited store: listed afresh"
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert listed(inputs).rows and listed(inputs).rows and inputs.calls == 5


def test_the_kept_listing_is_outside_the_checkout(inputs: Inputs, tmp_path: Path) -> None:
    listed(inputs)
    assert not [p for p in inputs.root.rglob("*") if "targets" in p.name]
    assert list((tmp_path / "xdg" / "hpc-containers").glob("targets-*.json"))


def test_a_watched_folder_that_appears_reads_afresh(inputs: Inputs, tmp_path: Path) -> None:
    """The builds' work folder is missing at the first listing (nothing lists it then); a
    killed build makes it later: the next listing must look, not show what was kept."""
    work = tmp_path / "work"
    listed(inputs, folders=[str(work)])
    listed(inputs, folders=[str(work)])
    assert inputs.calls == 1
    work.mkdir()
    listed(inputs, folders=[str(work)])
    assert inputs.calls == 2

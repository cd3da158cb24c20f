"""What ``--keep`` removes (:mod:`containers.publish.pruning`): never latest, never a version in
use, never through a link or outside the publish folder."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from containers.errors import StateError
from containers.publish import catalogue as cat
from tests.publish.standin import Built, tree


def test_publish_prunes_to_keep_but_never_latest(data_built: Built) -> None:
    for version in ("1", "2"):
        data_built.publish(version=version, skip_checks=True)
    lines: list[str] = []
    data_built.publish(lines, version="3", skip_checks=True, keep=1)
    assert "pruning cpu 1 (--keep 1)" in lines and "pruning cpu 2 (--keep 1)" in lines
    dest = data_built.dest
    assert [e.version for e in cat.entries(cat.load(dest / cat.CATALOGUE_NAME), "cpu")] == ["3"]
    assert sorted(p.name for p in (dest / "cpu").iterdir()) == [
        "3.sif", "3.sif.cdx.json", "3.sif.sha256", "bin", "latest"]
    assert sorted(p.name for p in (dest / "modules" / "cpu").iterdir()) == ["3.lua", "default"]


def test_keep_never_prunes_through_a_link(data_built: Built, tmp_path: Path) -> None:
    for version in ("1", "2"):
        data_built.publish(version=version, skip_checks=True)
    folder = data_built.dest / "cpu"
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder, elsewhere, symlinks=True)
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere)
    with pytest.raises(StateError, match=f"^{folder} is a symbolic link"):
        data_built.publish(version="3", skip_checks=True, keep=1)
    assert (elsewhere / "1.sif").exists() and not (elsewhere / "3.sif").exists()


def test_keep_never_removes_outside_dest_for_a_hostile_catalogue(data_built: Built,
                                                                  tmp_path: Path) -> None:
    for version in ("1", "2"):
        data_built.publish(version=version, skip_checks=True)
    path = data_built.dest / cat.CATALOGUE_NAME
    data = json.loads(path.read_text())
    victim = tmp_path / "x.sif"  # what pub/cpu/../../x.sif names
    victim.write_text("not yours")
    data["targets"]["cpu"]["versions"][0]["version"] = "../../x"
    path.write_text(json.dumps(data))
    with pytest.raises(StateError) as refused:
        data_built.publish(version="3", skip_checks=True, keep=1)
    assert str(refused.value).startswith(f"{path}: target 'cpu' entry 0 (version '../../x'): "
                                         "'../../x' is not a usable version name")
    assert victim.read_text() == "not yours"
    assert not (data_built.dest / "cpu" / "3.sif").exists()


def test_keep_names_every_file_it_removes(data_built: Built) -> None:
    for version in ("1", "2"):
        data_built.publish(version=version, skip_checks=True)
    lines: list[str] = []
    data_built.publish(lines, version="3", skip_checks=True, keep=2)
    dest = data_built.dest
    assert "pruning cpu 1 (--keep 2)" in lines
    for path in (dest / "modules/cpu/1.lua", dest / "cpu/1.sif.sha256", dest / "cpu/1.sif"):
        assert f"  removing {path}" in lines and not path.exists()


@pytest.mark.parametrize("pin", ["catalogue", "default", "config"])
def test_keep_refuses_to_remove_a_version_in_use(data_built: Built, pin: str) -> None:
    for version in ("1", "2"):
        data_built.publish(version=version, skip_checks=True)
    dest = data_built.dest
    if pin == "catalogue":
        data = json.loads((dest / cat.CATALOGUE_NAME).read_text())
        data["targets"]["cpu"]["pinned"] = ["1"]
        (dest / cat.CATALOGUE_NAME).write_text(json.dumps(data))
        why = f"pinned in {dest / cat.CATALOGUE_NAME}"
    elif pin == "config":
        data_built.settings = data_built.settings.model_copy(
            update={"publish_pinned": {"cpu": ("1",)}})
        why = "pinned in the config: containers.publish_pinned"
    else:
        os.remove(dest / "modules/cpu/default")
        os.symlink("1.lua", dest / "modules/cpu/default")
        why = f"the module default: {dest / 'modules/cpu/default'} points to it"
    before = tree(dest)
    with pytest.raises(StateError, match=re.escape(
            f"--keep 1 would remove cpu 1, which is in use ({why}); nothing was published or "
            "removed: keep more versions, or unpin it first")):
        data_built.publish(version="3", skip_checks=True, keep=1)
    assert tree(dest) == before


def test_a_pinned_version_that_breaks_the_name_rule_is_refused(data_built: Built) -> None:
    data_built.publish(version="1", skip_checks=True)
    path = data_built.dest / cat.CATALOGUE_NAME
    data = json.loads(path.read_text())
    data["targets"]["cpu"]["pinned"] = ["../../etc"]
    path.write_text(json.dumps(data))
    with pytest.raises(StateError, match="target 'cpu': pinned: "):
        data_built.publish(version="2", skip_checks=True, keep=1)


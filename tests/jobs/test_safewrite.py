"""``jobs/safewrite.py``: the in-image scripts' one write, refused through a link, over a FIFO or
device, or over another user's file (issue 42, item 1), as ``containers.files`` refuses it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.disks import PLANTED
from tests.jobs.scripts import sibling

safewrite = sibling("safewrite")
distenv_write = sibling("distenv").write_json


def test_a_rank_report_is_never_written_through_a_link_or_into_a_device(
        tmp_path: Path, factory_planted) -> None:
    planted = factory_planted(tmp_path)
    why = {**PLANTED, "fifo": "is not a regular file; refusing to replace it"}
    for kind, path in planted.paths.items():
        with pytest.raises(safewrite.WriteRefused, match=f"^{path} {why[kind]}$"):
            distenv_write(path, {"rank": 0})
    planted.untouched()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in planted.paths.values()), "no temp is left"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_another_users_file_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "verdict.json"
    path.write_text("theirs\n")
    os.chown(path, 65534, 65534)
    with pytest.raises(safewrite.WriteRefused, match="belongs to uid 65534"):
        safewrite.write_text(path, "ours\n")
    assert path.read_text() == "theirs\n"


def test_our_file_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "train.json"
    distenv_write(path, {"a": 1})
    old = path.stat().st_ino
    distenv_write(path, {"a": 2})
    assert path.read_text() == '{\n  "a": 2\n}\n' and path.stat().st_ino != old
    assert [p.name for p in path.parent.iterdir()] == ["train.json"]

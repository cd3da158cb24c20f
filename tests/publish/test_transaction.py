"""A publish is all or nothing (:mod:`containers.publish.transaction`): a failure at any commit
step leaves the folder as it was, and a retry works."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from containers.errors import StateError
from containers.publish import transaction
from containers.publish.transaction import Transaction
from tests.publish.standin import Built, tree


def test_rollback_puts_back_what_was_replaced_and_removes_what_was_made(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.write_text("before")
    tx = Transaction()
    tx.folder(tmp_path / "new" / "deeper")
    for final in (old, tmp_path / "new" / "deeper" / "file"):
        temp = tx.temp(final.with_name(f".{final.name}.tmp"))
        temp.write_text("after")
        tx.install(temp, final, final.name)
    assert tx.rollback() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"] and old.read_text() == "before"
    tx = Transaction()
    temp = tx.temp(tmp_path / ".old.tmp")
    temp.write_text("after")
    tx.install(temp, old, "old")
    tx.commit()
    assert tx.rollback() == [] and old.read_text() == "after"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


COMMIT_STEPS = ("checksum", "image", "module", "wrapper", "latest", "default", "catalogue")


@pytest.mark.parametrize("failing", COMMIT_STEPS)
def test_a_failure_at_any_commit_step_leaves_dest_as_it_was_and_a_retry_works(
        data_built: Built, monkeypatch, failing: str) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    before = tree(data_built.dest)

    def fault(step: str) -> None:
        if step == failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(data_built.dest))

    monkeypatch.setattr(transaction, "before_commit", fault)
    with pytest.raises(StateError, match=f"^publishing cpu 2.0 to {data_built.dest} failed: the "
                                         "disk is full .*; everything this publish made was "
                                         "removed$"):
        data_built.publish(version="2.0", skip_checks=True)
    assert tree(data_built.dest) == before
    monkeypatch.setattr(transaction, "before_commit", lambda step: None)
    entry = data_built.publish(version="2.0", skip_checks=True)  # not "already published"
    assert entry["version"] == "2.0" and os.readlink(data_built.dest / "cpu" / "latest") == \
        "2.0.sif"


def test_a_failed_forced_republish_puts_the_old_version_back(data_built: Built,
                                                             monkeypatch) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    before = tree(data_built.dest)
    monkeypatch.setattr(transaction, "before_commit", lambda step: (_ for _ in ()).throw(
        OSError(errno.EIO, "I/O error")) if step == "catalogue" else None)
    with pytest.raises(StateError, match="failed: I/O error"):
        data_built.publish(version="1.0", skip_checks=True, force=True)
    assert tree(data_built.dest) == before


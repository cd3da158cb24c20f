"""An image's provenance record: read safely, and which images are built from which inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from containers.errors import StateError
from containers.image import provenance
from containers.records import BuildRecord


def test_a_missing_record_is_none_and_a_corrupt_one_is_one_line(tmp_path: Path) -> None:
    """A corrupt record used to read as none: the image showed as 'built (no record)' and a
    smoke run wrote a verdict with a null sha256. Now it is refused, naming the file, except
    where the caller replaces it (a build) or only asks whether it is current."""
    assert provenance.read(tmp_path / "none.json") == BuildRecord()
    broken = tmp_path / "cpu.sif.json"
    listed = tmp_path / "list.sif.json"
    fifo = tmp_path / "fifo.sif.json"
    broken.write_text('{"inputs_hash": ')
    listed.write_text("[1, 2]")
    os.mkfifo(fifo)
    for path, why in ((broken, "not JSON"), (listed, "the image record is not a JSON object"),
                      (fifo, r"not a regular file \(a FIFO\)")):
        with pytest.raises(StateError, match=rf"^the image record {path} is unreadable: {why}"):
            provenance.read(path)
        assert provenance.read(path, corrupt_ok=True) == BuildRecord()
        assert provenance.is_corrupt(path)
    assert "invoke build --target cpu --force" in str(pytest.raises(
        StateError, provenance.read, broken).value)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"inputs_hash": "abc"}))
    assert provenance.read(good).inputs_hash == "abc" and not provenance.is_corrupt(good)


def test_built_hashes_need_both_the_image_and_its_record(tmp_path: Path) -> None:
    (tmp_path / "cpu.sif").write_bytes(b"sif")
    (tmp_path / "cpu.sif.json").write_text(json.dumps({"inputs_hash": "h1"}))
    (tmp_path / "gone.sif.json").write_text(json.dumps({"inputs_hash": "h2"}))  # no image
    (tmp_path / "bare.sif").write_bytes(b"sif")  # no record
    assert provenance.built_hashes(tmp_path, ["cpu", "gone", "bare", "never"]) == {"cpu": "h1"}

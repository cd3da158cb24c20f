"""An image's provenance record: read safely, and which images are built from which inputs."""

from __future__ import annotations

import json
from pathlib import Path

from containers.image import provenance


def test_read_tolerates_missing_broken_and_non_object_records(tmp_path: Path) -> None:
    assert provenance.read(tmp_path / "none.json") == {}
    broken = tmp_path / "broken.json"
    broken.write_text('{"inputs_hash": ')
    assert provenance.read(broken) == {}
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert provenance.read(listed) == {}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"inputs_hash": "abc"}))
    assert provenance.read(good) == {"inputs_hash": "abc"}


def test_built_hashes_need_both_the_image_and_its_record(tmp_path: Path) -> None:
    (tmp_path / "cpu.sif").write_bytes(b"sif")
    (tmp_path / "cpu.sif.json").write_text(json.dumps({"inputs_hash": "h1"}))
    (tmp_path / "gone.sif.json").write_text(json.dumps({"inputs_hash": "h2"}))  # no image
    (tmp_path / "bare.sif").write_bytes(b"sif")  # no record
    assert provenance.built_hashes(tmp_path, ["cpu", "gone", "bare", "never"]) == {"cpu": "h1"}

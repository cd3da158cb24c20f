"""Unit tests of ``verify`` on an unsigned publish folder of a stand-in image (no Apptainer: the
runtime is asked for only when a signature is to be checked; signed images are verified for real
in ``test_publish_image.py``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from containers.errors import UsageError, VerdictFailed
from containers.publish import catalogue as cat
from containers.publish.verify import snapshot, verify
from tests.publish.standin import Built


def _no_runtime():
    raise AssertionError("an unsigned folder needs no runtime")


def _publish_two(built: Built) -> Path:
    for version in ("1.0", "2.0"):
        built.publish(version=version, skip_checks=True)
    return built.dest


def test_a_healthy_folder_verifies_without_a_runtime(data_built: Built) -> None:
    dest = _publish_two(data_built)
    (dest / "cpu" / ".3.0.sif.999.partial").write_bytes(b"half")
    lines: list[str] = []
    rows = verify(dest, runtime=_no_runtime, say=lines.append)
    assert [(r[0], r[1], r[2], r[5], r[6], r[8]) for r in rows] == [
        ("cpu", "1.0", "", "unsigned", "skipped", "ok"),
        ("cpu", "2.0", "yes", "unsigned", "skipped", "ok")]
    assert any(l.startswith(f"note: {dest}/cpu/.3.0.sif.999.partial is a leftover") for l in lines)
    assert lines[-1] == f"verify: 2 published image(s) in {dest}: all ok"
    folder = snapshot(dest)["cpu"]
    assert folder.sifs == {"1.0", "2.0"} and folder.latest_link == "2.0.sif" and folder.has_exec


def test_verify_names_every_problem(data_built: Built) -> None:
    dest = _publish_two(data_built)
    sif = dest / "cpu" / "1.0.sif"
    data = bytearray(sif.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sif.write_bytes(bytes(data))
    (dest / "cpu" / "2.0.sif.sha256").write_text("0" * 64 + "  2.0.sif\n")
    (dest / "modules" / "cpu" / "2.0.lua").unlink()
    os.chmod(dest / "cpu" / "2.0.sif", 0o666)
    with pytest.raises(VerdictFailed, match=f"^verify found 4 problem.s. in {dest}: ") as failed:
        verify(dest, runtime=_no_runtime, say=lambda line: None)
    message = str(failed.value)
    assert "modules/cpu/2.0.lua: missing" in message
    assert f"{sif}: sha256" in message and "does not match the catalogue" in message
    assert "2.0.sif.sha256: does not say" in message
    assert "2.0.sif: world-writable (mode 0666)" in message
    with pytest.raises(VerdictFailed, match="gpu: nothing published"):
        verify(dest, runtime=_no_runtime, target="gpu", say=lambda line: None)
    with pytest.raises(UsageError, match=r"^--target: '\.\./cpu' is not a usable target name"):
        verify(dest, runtime=_no_runtime, target="../cpu", say=lambda line: None)


def test_verify_without_a_usable_catalogue(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^--dest: "):
        verify("", runtime=_no_runtime)
    with pytest.raises(VerdictFailed, match="no catalogue"):
        verify(tmp_path, runtime=_no_runtime)
    (tmp_path / cat.CATALOGUE_NAME).write_text("{")
    with pytest.raises(VerdictFailed, match="catalogue is not valid JSON") as broken:
        verify(tmp_path, runtime=_no_runtime)
    assert broken.value.__cause__ is not None


@pytest.mark.parametrize("linked", ["cpu", "modules/cpu", "modules", "cpu/bin", "cpu/1.0.sif"])
def test_verify_never_follows_a_link_inside_dest(data_built: Built, tmp_path: Path,
                                                 linked: str) -> None:
    dest = _publish_two(data_built)
    link = dest / linked
    copy = tmp_path / "elsewhere"
    if link.is_dir():
        shutil.copytree(link, copy, symlinks=True)
        shutil.rmtree(link)
    else:
        shutil.copy(link, copy)
        link.unlink()
    link.symlink_to(copy)
    with pytest.raises(VerdictFailed) as refused:
        verify(dest, runtime=_no_runtime, say=lambda line: None)
    assert str(refused.value) == (f"{link} is a symbolic link; nothing inside {dest} is "
                                  "reached through a link: remove it (and check what it "
                                  "pointed to), or publish elsewhere")


def test_verify_refuses_a_catalogue_naming_files_outside_dest(data_built: Built) -> None:
    dest = _publish_two(data_built)
    path = dest / cat.CATALOGUE_NAME
    data = json.loads(path.read_text())
    data["targets"]["cpu"]["versions"][1]["file"] = "../../../../etc/passwd"
    path.write_text(json.dumps(data))
    with pytest.raises(VerdictFailed, match=f"^{path}: target 'cpu' entry 1 .version '2.0'.: "
                                            "file '../../../../etc/passwd' is not 'cpu/2.0.sif'"):
        verify(dest, runtime=_no_runtime, say=lambda line: None)


def test_a_checksum_file_that_is_not_text_is_a_problem_not_a_crash(data_built: Built) -> None:
    dest = _publish_two(data_built)
    sums = dest / "cpu" / "2.0.sif.sha256"
    sums.write_bytes(b"\xff\xfe not a checksum")
    with pytest.raises(VerdictFailed, match="2.0.sif.sha256: does not say"):
        verify(dest, runtime=_no_runtime, say=lambda line: None)


def test_verify_as_json_prints_one_document_with_each_image(data_built: Built, capsys) -> None:
    dest = _publish_two(data_built)
    rows = verify(dest, runtime=_no_runtime, as_json=True, say=lambda line: None)
    doc = json.loads(capsys.readouterr().out)
    assert len(rows) == 2 and doc["ok"] is True and doc["dest"] == str(dest)
    assert doc["problems"] == [] and doc["leftovers"] == []
    first = doc["images"][0]
    assert {k: first[k] for k in ("target", "version", "path", "latest", "sha256_ok",
                                  "signature", "module_ok", "problems")} == {
        "target": "cpu", "version": "1.0", "path": str(dest / "cpu" / "1.0.sif"),
        "latest": False, "sha256_ok": True, "signature": "unsigned", "module_ok": True,
        "problems": []}
    (dest / "cpu" / "2.0.sif").write_bytes(b"replaced")
    (dest / "modules" / "cpu" / "2.0.lua").unlink()
    with pytest.raises(VerdictFailed, match="verify found 2 problem"):
        verify(dest, runtime=_no_runtime, as_json=True, say=lambda line: None)
    doc = json.loads(capsys.readouterr().out)
    second = doc["images"][1]
    assert doc["ok"] is False and second["sha256_ok"] is False and second["module_ok"] is False
    assert len(second["problems"]) == 2 and doc["images"][0]["problems"] == []
    assert sorted(doc["problems"]) == sorted(second["problems"])


def test_verify_as_json_of_a_folder_without_a_catalogue(tmp_path: Path, capsys) -> None:
    with pytest.raises(VerdictFailed, match="no catalogue"):
        verify(tmp_path, runtime=_no_runtime, as_json=True, say=lambda line: None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["images"] == [] and "no catalogue" in doc["problems"][0]


def test_verify_dest_naming_a_file_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(UsageError, match=f"^--dest: {afile} is a file, not a folder$"):
        verify(afile, runtime=_no_runtime, say=lambda line: None)


def test_a_latest_that_is_a_folder_is_said_to_be_one(data_built: Built) -> None:
    """It used to read 'points to None'."""
    dest = _publish_two(data_built)
    (dest / "cpu" / "latest").unlink()
    (dest / "cpu" / "latest").mkdir()
    with pytest.raises(VerdictFailed) as failed:
        verify(dest, runtime=_no_runtime, say=lambda line: None)
    assert "cpu/latest: is a folder, not a link, the catalogue says '2.0.sif'" in \
        str(failed.value)
    assert "None" not in str(failed.value)


def test_verify_flags_a_dest_anyone_could_swap(data_built: Built) -> None:
    dest = _publish_two(data_built)
    os.chmod(dest.parent, 0o777)
    try:
        with pytest.raises(VerdictFailed, match="world-writable without the sticky bit"):
            verify(dest, runtime=_no_runtime, say=lambda line: None)
    finally:
        os.chmod(dest.parent, 0o755)


@pytest.mark.parametrize("sticky", [0, 0o1000])
def test_a_world_writable_dest_is_one_problem(data_built: Built, sticky: int) -> None:
    """A DEST anyone may write was named twice: by the mode check and by the way's rule."""
    dest = _publish_two(data_built)
    os.chmod(dest, 0o777 | sticky)
    try:
        with pytest.raises(VerdictFailed, match=f"^verify found 1 problem.s. in {dest}: ") as \
                failed:
            verify(dest, runtime=_no_runtime, say=lambda line: None)
    finally:
        os.chmod(dest, 0o755)
    assert ("world-writable without the sticky bit" if not sticky
            else f"{dest}: world-writable (mode 1777)") in str(failed.value)

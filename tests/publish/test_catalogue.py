"""Unit tests of the catalogue: versions, checksum lines, updates, pruning, loading and the
consistency rules ``verify`` applies."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from containers.errors import StateError, UsageError
from containers.publish import catalogue as cat
from tests.inputs.test_recipes import bounded


# ------------------------------------------------------------------------------- versions
@pytest.mark.parametrize("version", ["1.0", "2026.11.21-1e9c228c", "v2+cuda12.4", "a_b", "x" * 64,
                                     "_x", "+x"])
def test_good_versions(version: str) -> None:
    assert cat.validate_version(version) == version


@pytest.mark.parametrize("version", ["", "../x", "a/b", ".hidden", "-x", "has space", "latest",
                                     "default", "bin", "modules", "keys", "catalogue.json",
                                     "x.partial", "x.tmp", "x" * 65, "é", "a\nb", "a\rb"])
def test_bad_versions_are_refused(version: str) -> None:
    with pytest.raises(UsageError, match="^--version: .*not a usable version") as refused:
        cat.validate_version(version)
    assert refused.value.flag == "--version"


def test_default_version_is_build_day_and_inputs_hash() -> None:
    record = {"build_date": "2026-11-21T05:27:24Z", "inputs_hash": "1e9c228c71566f9d"}
    assert cat.default_version(record) == "2026.11.21-1e9c228c"
    with pytest.raises(StateError, match="give --version"):
        cat.default_version({"inputs_hash": "abc"})
    with pytest.raises(StateError, match=r"makes no usable version \('2026.11.21-\.\./\.\./x'"):
        cat.default_version({**record, "inputs_hash": "../../x"})


def test_checksum_line_is_sha256sum_format() -> None:
    sha = "ab" * 32
    line = cat.checksum_line(sha, "1.0")
    assert line == f"{sha}  1.0.sif\n"
    assert cat.parse_checksum_line(line) == (sha, "1.0.sif")
    assert cat.parse_checksum_line("nonsense\n") is None


# ------------------------------------------------------------------------------ catalogue
def _entry(version: str, target: str = "cpu") -> dict:
    """An entry as publish writes it (the parts the catalogue checks)."""
    return {"target": target, "version": version, "sha256": "0" * 64, "size_bytes": 1,
            **cat.layout_files(target, version), "signed": False, "checks": {},
            "published": "2026-11-21T05:27:24Z"}


def test_with_entry_appends_and_moves_latest_and_forced_republish_moves_to_end() -> None:
    data = cat.empty()
    for version in ("a", "b", "c"):
        data = cat.with_entry(data, _entry(version), now="t")
    assert [e.version for e in cat.entries(data, "cpu")] == ["a", "b", "c"]
    assert cat.latest(data, "cpu") == "c"
    again = cat.with_entry(data, {**_entry("a"), "sha256": "1" * 64}, now="t2")
    assert [e.version for e in cat.entries(again, "cpu")] == ["b", "c", "a"]
    assert cat.find(again, "cpu", "a").sha256 == "1" * 64 and again["updated"] == "t2"
    assert cat.find(data, "cpu", "a").sha256 == "0" * 64, "the input is not modified"
    fewer = cat.with_entry(data, {**_entry("a"), "sha256": "1" * 64}, now="t3", without=["b"])
    assert [e.version for e in cat.entries(fewer, "cpu")] == ["c", "a"]


def test_catalogue_format_is_checked() -> None:
    assert cat.check_format(cat.empty(), path="c.json")["targets"] == {}
    with pytest.raises(StateError, match="^c.json: not a catalogue"):
        cat.check_format([], path="c.json")
    with pytest.raises(StateError, match="^c.json: catalogue format 7"):
        cat.check_format({"format": 7, "targets": {}}, path="c.json")
    with pytest.raises(StateError, match="^c.json: target 'cpu': has no 'versions' list"):
        cat.check_format({"format": 1, "targets": {"cpu": {}}}, path="c.json")


def _with(entry: dict, target: str = "cpu") -> dict:
    return {"format": 1, "targets": {target: {"latest": None, "versions": [_entry("1"), entry]}}}


@pytest.mark.parametrize("change,where,why", [
    ({"version": "../../x"}, "entry 1 (version '../../x')", "'../../x' is not a usable version"),
    ({"version": "a\nb"}, "entry 1 (version 'a\\nb')", "is not a usable version"),
    ({"version": 7}, "entry 1 (version 7)", "key 'version': Input should be a valid string"),
    ({"file": "../../etc/passwd"}, "entry 1 (version '2')",
     "file '../../etc/passwd' is not 'cpu/2.sif'"),
    ({"module": "modules/cpu/../../x.lua"}, "entry 1", "module 'modules/cpu/../../x.lua' is not"),
    ({"checksum_file": "/etc/shadow"}, "entry 1", "checksum_file '/etc/shadow' is not"),
    ({"target": "gpu"}, "entry 1", "target 'gpu' is not 'cpu'"),
    ({"sha256": None}, "entry 1", "sha256 is not 64"),
    ({"size_bytes": "big"}, "entry 1", "key 'size_bytes': Input should be a valid integer"),
    ({"size_bytes": -1}, "entry 1", "key 'size_bytes': Input should be greater than or equal"),
    ({"checks": []}, "entry 1", "key 'checks': Input should be a valid dictionary"),
    ({"schema": 99}, "entry 1 (version '2')", "key 'schema' is 99; this checkout reads "
                                              "catalogue entry versions 1 to 2"),
    ({"provenance": {"build_seconds": float("nan")}}, "entry 1",
     "key 'provenance.build_seconds': Input should be a finite number (got nan)"),
    ({"signed": True, "key_fingerprint": "AB" * 20, "public_key": "keys/../../x.pgp"},
     "entry 1", "public_key 'keys/../../x.pgp' is not 'keys/" + "AB" * 20 + ".pgp'"),
    ({"version": "1", **cat.layout_files("cpu", "1")}, "entry 1 (version '1')", "listed twice"),
])
def test_every_name_read_back_is_checked_naming_file_and_entry(change, where, why) -> None:
    entry = {**_entry("2"), **change}
    with pytest.raises(StateError) as refused:
        cat.check_format(_with(entry), path="/pub/catalogue.json")
    message = str(refused.value)
    assert message.startswith(f"/pub/catalogue.json: target 'cpu' {where}") and why in message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["../x", "modules", "a\nb"])
def test_a_target_name_read_back_is_checked(name: str) -> None:
    with pytest.raises(StateError, match=f"^c.json: target {re.escape(repr(name))}: "
                                         ".*not a usable target name"):
        cat.check_format(_with(_entry("2", name), name), path="c.json")
    broken = _with(_entry("2"))
    broken["targets"]["cpu"]["latest"] = "../x"
    with pytest.raises(StateError, match="target 'cpu': latest: '../x' is not a usable version"):
        cat.check_format(broken, path="c.json")


@pytest.mark.parametrize("versions,keep,latest,gone", [
    (["a", "b", "c"], 1, "c", ["a", "b"]),
    (["a", "b", "c"], 2, "c", ["a"]),
    (["a", "b", "c"], 5, "c", []),
    (["a", "b", "c"], 1, "a", ["b"]),       # latest is never removed, even when old
    (["a"], 1, "a", []),
])
def test_select_prune(versions, keep, latest, gone) -> None:
    assert cat.select_prune(versions, keep=keep, latest=latest) == gone


def test_load_an_absent_catalogue_is_empty_and_a_broken_one_names_the_file(tmp_path) -> None:
    path = tmp_path / cat.CATALOGUE_NAME
    assert cat.load(path) == cat.empty()
    path.write_text(json.dumps(cat.with_entry(cat.empty(), _entry("a"), now="t")))
    assert cat.latest(cat.load(path), "cpu") == "a"
    path.write_text("{")
    with pytest.raises(StateError, match=f"^{path}: catalogue is not valid JSON") as broken:
        cat.load(path)
    assert isinstance(broken.value.__cause__, ValueError)
    for text in ("[]", '"catalogue"', "7", "null"):
        path.write_text(text)
        with pytest.raises(StateError, match=f"^{path}: not a catalogue"):
            cat.load(path)
    path.write_bytes(b'{"format": 1, "targets": {"\xff": {}}}')
    with pytest.raises(StateError, match=f"^{path}: catalogue is not valid JSON"):
        cat.load(path)


def test_a_catalogue_that_is_not_a_file_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / cat.CATALOGUE_NAME
    os.mkfifo(path)
    assert bounded(lambda: cat.load(path)) == (
        "StateError", f"{path}: cannot read the catalogue: not a regular file (a FIFO)")


def _healthy(versions: list[str]) -> cat.TargetFolder:
    return cat.TargetFolder(sifs=set(versions), checksums=set(versions), modules=set(versions),
                            latest_link=f"{versions[-1]}.sif",
                            default_link=f"{versions[-1]}.lua", has_exec=True)


def test_consistency_of_a_healthy_folder() -> None:
    data = cat.with_entry(cat.with_entry(cat.empty(), _entry("a"), now="t"), _entry("b"), now="t")
    assert cat.consistency_problems(data, {"cpu": _healthy(["a", "b"])}) == []


def test_consistency_names_every_problem() -> None:
    data = cat.with_entry(cat.with_entry(cat.empty(), _entry("a"), now="t"), _entry("b"), now="t")
    folder = _healthy(["a", "b"])
    folder.sifs = {"b", "stray"}
    folder.checksums = {"b"}
    folder.modules = {"b"}
    folder.latest_link = "a.sif"
    folder.default_link = None
    folder.has_exec = False
    problems = cat.consistency_problems(data, {"cpu": folder, "gpu": _healthy(["x"])})
    assert problems == [
        "cpu/a.sif: listed in the catalogue but missing",
        "cpu/a.sif.sha256: missing",
        "modules/cpu/a.lua: missing",
        "cpu/stray.sif: not in the catalogue",
        "cpu/latest: points to 'a.sif', the catalogue says 'b.sif'",
        "modules/cpu/default: is missing, expected 'b.lua'",
        "cpu/bin/cpu-exec: missing",
        "gpu/x.sif: not in the catalogue",
    ]
    folder = _healthy(["a", "b"])  # `latest` made a folder: said so, never 'points to None'
    folder.latest_link, folder.latest_not_link = None, "is a folder, not a link"
    assert cat.consistency_problems(data, {"cpu": folder}) == [
        "cpu/latest: is a folder, not a link, the catalogue says 'b.sif'"]
    broken = json.loads(json.dumps(data))
    broken["targets"]["cpu"]["latest"] = "zz"
    assert "catalogue: cpu latest 'zz' is not a listed version" in \
        cat.consistency_problems(broken, {"cpu": _healthy(["a", "b"])})


@pytest.mark.parametrize("stack, needed", [
    ({"build": "cuda", "cuda": "13.0"}, "NVIDIA driver R580 or newer (CUDA 13.x, minor version "
                                        "compatibility)"),
    ({"build": "cuda", "cuda": "12.8"}, "NVIDIA driver R525 or newer (CUDA 12.x, minor version "
                                        "compatibility)"),
    ({"build": "cuda", "cuda": "99.0"}, "unknown (no driver branch known for CUDA 99.0)"),
    ({"build": "rocm", "hip": "6.2"}, None), ({"build": "cpu"}, None), (None, None)])
def test_an_entry_names_the_driver_series_its_cuda_runtime_needs(stack, needed) -> None:
    assert cat.driver_needed(stack) == needed

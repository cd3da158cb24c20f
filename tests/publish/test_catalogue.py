"""Unit tests of the catalogue: versions, checksum lines, updates, pruning, loading and the
consistency rules ``verify`` applies."""

from __future__ import annotations

import json

import pytest

from containers.errors import ConfigError, StateError, UsageError
from containers.publish import catalogue as cat


# ------------------------------------------------------------------------------- versions
@pytest.mark.parametrize("version", ["1.0", "2026.11.21-1e9c228c", "v2+cuda12.4", "a_b", "x" * 64])
def test_good_versions(version: str) -> None:
    assert cat.validate_version(version) == version


@pytest.mark.parametrize("version", ["", "../x", "a/b", ".hidden", "-x", "has space", "latest",
                                     "default", "bin", "x.partial", "x.tmp", "x" * 65, "é"])
def test_bad_versions_are_refused(version: str) -> None:
    with pytest.raises(UsageError, match="^--version: .*not a usable version") as refused:
        cat.validate_version(version)
    assert refused.value.flag == "--version"


def test_default_version_is_build_day_and_inputs_hash() -> None:
    record = {"build_date": "2026-11-21T05:27:24Z", "inputs_hash": "1e9c228c71566f9d"}
    assert cat.default_version(record) == "2026.11.21-1e9c228c"
    with pytest.raises(StateError, match="give --version"):
        cat.default_version({"inputs_hash": "abc"})


def test_checksum_line_is_sha256sum_format() -> None:
    sha = "ab" * 32
    line = cat.checksum_line(sha, "1.0")
    assert line == f"{sha}  1.0.sif\n"
    assert cat.parse_checksum_line(line) == (sha, "1.0.sif")
    assert cat.parse_checksum_line("nonsense\n") is None


# ------------------------------------------------------------------------------ catalogue
def _entry(version: str, target: str = "cpu") -> dict:
    return {"target": target, "version": version, "sha256": "0" * 64}


def test_with_entry_appends_and_moves_latest_and_forced_republish_moves_to_end() -> None:
    data = cat.empty()
    for version in ("a", "b", "c"):
        data = cat.with_entry(data, _entry(version), now="t")
    assert [e["version"] for e in cat.entries(data, "cpu")] == ["a", "b", "c"]
    assert cat.latest(data, "cpu") == "c"
    again = cat.with_entry(data, {**_entry("a"), "sha256": "1" * 64}, now="t2")
    assert [e["version"] for e in cat.entries(again, "cpu")] == ["b", "c", "a"]
    assert cat.find(again, "cpu", "a")["sha256"] == "1" * 64 and again["updated"] == "t2"
    assert cat.find(data, "cpu", "a")["sha256"] == "0" * 64, "the input is not modified"
    fewer = cat.without_versions(again, "cpu", ["b"], now="t3")
    assert [e["version"] for e in cat.entries(fewer, "cpu")] == ["c", "a"]


def test_catalogue_format_is_checked() -> None:
    assert cat.check_format(cat.empty(), path="c.json")["targets"] == {}
    with pytest.raises(ConfigError, match="not a catalogue"):
        cat.check_format([], path="c.json")
    with pytest.raises(ConfigError, match="format 7"):
        cat.check_format({"format": 7, "targets": {}}, path="c.json")
    with pytest.raises(ConfigError, match="no 'versions' list"):
        cat.check_format({"format": 1, "targets": {"cpu": {}}}, path="c.json")


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
    with pytest.raises(ConfigError, match="catalogue is not valid JSON") as broken:
        cat.load(path)
    assert broken.value.path == path and isinstance(broken.value.__cause__, ValueError)
    path.write_text("[]")
    with pytest.raises(ConfigError, match="not a catalogue"):
        cat.load(path)


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
        "modules/cpu/default: points to None, expected 'b.lua'",
        "cpu/bin/cpu-exec: missing",
        "gpu/x.sif: not in the catalogue",
    ]
    broken = json.loads(json.dumps(data))
    broken["targets"]["cpu"]["latest"] = "zz"
    assert "catalogue: cpu latest 'zz' is not a listed version" in \
        cat.consistency_problems(broken, {"cpu": _healthy(["a", "b"])})

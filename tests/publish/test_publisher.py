"""Unit tests of the publish request, plan and sequence, on a small stand-in image file (no
Apptainer: unsigned, and the checks are the caller's function). The real image, signing, Lmod
and killed publishes are in ``test_publish_image.py``."""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from containers.errors import ConfigError, ImageMissing, StateError, UsageError, VerdictFailed
from containers.publish import catalogue as cat
from containers.publish.publisher import COPY_DELAY_ENV, PublishRequest, publish
from tests.publish.standin import IMAGE, RUNTIME, SHA, Built


# ------------------------------------------------------------------------------- request
def test_request_normalises_dest_and_checks_each_flag_once(tmp_path: Path,
                                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert PublishRequest(target="cpu", dest="pub").dest == tmp_path / "pub"
    assert PublishRequest(target="cpu", dest="pub", keep=1).keep == 1
    refusals = {"--keep": dict(keep=0), "--version": dict(version="../evil"),
                "--target": dict(target=""), "--dest": dict(dest="")}
    for flag, change in refusals.items():
        with pytest.raises(UsageError) as refused:
            PublishRequest(**{"target": "cpu", "dest": "pub", **change})
        assert refused.value.flag == flag and str(refused.value).startswith(f"{flag}: ")
    with pytest.raises(UsageError, match="^--keep: must be at least 1 .got -2.$"):
        PublishRequest(target="cpu", dest="pub", keep=-2)
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o777)
    with pytest.raises(UsageError, match="^--dest: .*open is world-writable"):
        PublishRequest(target="cpu", dest="open")


# ---------------------------------------------------------------------------------- plan
def test_plan_places_everything_and_defaults_the_version(data_built: Built) -> None:
    plan = data_built.plan()
    assert plan.version == "2026.11.21-1e9c228c"
    assert plan.sif == data_built.dest / "cpu" / "2026.11.21-1e9c228c.sif"
    assert plan.module == data_built.dest / "modules" / "cpu" / "2026.11.21-1e9c228c.lua"
    assert plan.exec_path == data_built.dest / "cpu" / "bin" / "cpu-exec"
    assert plan.temp.name == f".{plan.sif.name}.{os.getpid()}.partial"
    assert (plan.modes.file, plan.modes.gid) == (0o644, None)
    assert not data_built.dest.exists(), "planning touches nothing"


def test_plan_refuses_unbuilt_unrecorded_and_bad_groups(data_built: Built) -> None:
    data_built.settings.provenance_path("cpu").write_text("{}")
    with pytest.raises(StateError, match="has no provenance record with a sha256"):
        data_built.plan(version="1")
    data_built.settings.image_path("cpu").unlink()
    with pytest.raises(ImageMissing, match="is not built; run: invoke build --target cpu"):
        data_built.plan(version="1")


def test_plan_refuses_a_group_naming_where_it_came_from(data_built: Built) -> None:
    with pytest.raises(UsageError, match="^--group: group 'no-such-group-here' does not exist"):
        data_built.plan(group="no-such-group-here")
    data_built.settings = dataclasses.replace(data_built.settings, publish_group="nope-x")
    with pytest.raises(ConfigError, match="containers.publish_group: group 'nope-x'"):
        data_built.plan()


def test_plan_refuses_a_site_env_name_a_module_cannot_set(data_built: Built) -> None:
    data_built.site = dataclasses.replace(data_built.site, env={"BAD-NAME": "x"})
    with pytest.raises(ConfigError, match="BAD-NAME: not a usable environment variable name"):
        data_built.plan()


# ------------------------------------------------------------------------------ sequence
def test_publish_copies_checksums_catalogues_and_links(data_built: Built) -> None:
    lines: list[str] = []
    entry = publish(data_built.plan(version="1.0"), RUNTIME,
                    quick_check=data_built.quick_check_writing_verdict(), say=lines.append)
    dest = data_built.dest
    assert (dest / "cpu" / "1.0.sif").read_bytes() == IMAGE
    assert (dest / "cpu" / "1.0.sif.sha256").read_text() == f"{SHA}  1.0.sif\n"
    assert os.readlink(dest / "cpu" / "latest") == "1.0.sif"
    assert os.readlink(dest / "modules" / "cpu" / "default") == "1.0.lua"
    assert (dest / "cpu" / "bin" / "cpu-exec").stat().st_mode & 0o111
    assert cat.load(dest / cat.CATALOGUE_NAME)["targets"]["cpu"]["versions"] == [entry]
    assert entry["sha256"] == SHA and entry["size_bytes"] == len(IMAGE)
    assert entry["signed"] is False and entry["forced"] is False
    assert entry["checks"]["smoke"]["run_now"] is True
    assert "labels" not in entry["provenance"] and entry["provenance"]["sha256"] == SHA
    assert "  smoke: PASS" in lines and lines[-1].startswith("module: module use ")
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            wanted = 0o755 if path.is_dir() or path.name == "cpu-exec" else 0o644
            assert stat.S_IMODE(path.stat().st_mode) == wanted, path
    assert not [p for p in dest.rglob(".*") if p.name != cat.LOCK_NAME], "no temp left"


def test_publish_refuses_a_version_twice_unless_forced(data_built: Built) -> None:
    first = data_built.publish(version="1.0", skip_checks=True)
    with pytest.raises(StateError, match=r"^cpu 1.0 is already published \(.*1.0.sif\); give "
                                         "another --version, or --force to replace it$"):
        data_built.publish(version="1.0", skip_checks=True)
    again = data_built.publish(version="1.0", skip_checks=True, force=True)
    assert again["forced"] is True and again["replaced_sha256"] == first["sha256"]
    assert len(cat.entries(cat.load(data_built.dest / cat.CATALOGUE_NAME), "cpu")) == 1


def test_publish_refuses_a_file_the_catalogue_does_not_know(data_built: Built) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    stray = data_built.dest / "cpu" / "2.0.sif"
    stray.write_bytes(b"hand copy")
    with pytest.raises(StateError, match="2.0.sif exists but is not in the catalogue"):
        data_built.publish(version="2.0", skip_checks=True)
    (data_built.dest / cat.CATALOGUE_NAME).write_text("{")
    with pytest.raises(StateError, match="catalogue is not valid JSON"):
        data_built.publish(version="3.0", skip_checks=True)
    (data_built.dest / cat.CATALOGUE_NAME).write_text("[]")
    with pytest.raises(StateError, match=f"^{data_built.dest / cat.CATALOGUE_NAME}: not a "
                                         "catalogue"):
        data_built.publish(version="3.0", skip_checks=True)


def test_publish_prunes_to_keep_but_never_latest(data_built: Built) -> None:
    for version in ("1", "2"):
        data_built.publish(version=version, skip_checks=True)
    lines: list[str] = []
    data_built.publish(lines, version="3", skip_checks=True, keep=1)
    assert "pruning cpu 1 (--keep 1)" in lines and "pruning cpu 2 (--keep 1)" in lines
    dest = data_built.dest
    assert [e["version"] for e in cat.entries(cat.load(dest / cat.CATALOGUE_NAME), "cpu")] == ["3"]
    assert sorted(p.name for p in (dest / "cpu").iterdir()) == ["3.sif", "3.sif.sha256", "bin",
                                                                "latest"]
    assert sorted(p.name for p in (dest / "modules" / "cpu").iterdir()) == ["3.lua", "default"]


def test_a_copy_that_does_not_match_the_build_record_is_refused(data_built: Built) -> None:
    data_built.settings.image_path("cpu").write_bytes(IMAGE + b"changed since the build")
    with pytest.raises(StateError, match="does not match its build record"):
        data_built.publish(version="1.0", skip_checks=True)
    assert sorted(p.name for p in (data_built.dest / "cpu").iterdir()) == ["bin"], "no temp"
    assert not (data_built.dest / cat.CATALOGUE_NAME).exists()


def test_leftovers_of_a_killed_publish_are_swept(data_built: Built, monkeypatch) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    leftover = data_built.dest / "cpu" / ".2.0.sif.12345.partial"
    leftover.write_bytes(b"half")
    monkeypatch.setenv(COPY_DELAY_ENV, "0.001")
    lines: list[str] = []
    data_built.publish(lines, version="2.0", skip_checks=True)
    assert f"removing leftover of an interrupted publish: {leftover}" in lines
    assert not leftover.exists()


def test_failed_checks_publish_nothing(data_built: Built) -> None:
    def failing(say) -> None:
        raise VerdictFailed("smoke FAILED for cpu (2 ranks)")

    with pytest.raises(VerdictFailed, match="^not publishing cpu: smoke FAILED"):
        publish(data_built.plan(version="1.0"), RUNTIME, quick_check=failing, say=print)
    assert not data_built.dest.exists()


# ------------------------------------------------------------------------ hostile input
def _record(built: Built, text: str) -> Path:
    record = built.settings.provenance_path("cpu")
    record.write_text(text)
    return record


@pytest.mark.parametrize("text", ["[]", '"sha"', "null", "7"])
def test_a_build_record_that_is_not_a_json_object_is_named(data_built: Built, text: str) -> None:
    record = _record(data_built, text)
    with pytest.raises(StateError, match=f"^{record}: the build record is not a JSON object; "
                                         "rebuild"):
        data_built.plan(version="1.0")


def test_a_build_record_with_a_bad_sha256_is_refused_before_copying(data_built: Built) -> None:
    _record(data_built, '{"sha256": 5, "build_date": "2026-11-21"}')
    with pytest.raises(StateError, match="has no provenance record with a sha256"):
        data_built.publish(version="1.0", skip_checks=True)
    record = _record(data_built, "{")
    with pytest.raises(StateError, match=f"^{record}: the build record is not valid JSON"):
        data_built.plan(version="1.0")
    assert not data_built.dest.exists()


HOSTILE = "cpu\nos.execute('touch PWNED')\n--"


def test_a_hostile_target_name_never_reaches_the_writers(data_built: Built) -> None:
    with pytest.raises(UsageError, match=r"^--target: \"cpu\\nos.execute.*is not a usable "
                                         "target name"):
        PublishRequest(target=HOSTILE, dest=data_built.dest)
    for name in (HOSTILE, "../cpu", "modules"):
        data_built.target = dataclasses.replace(data_built.target, name=name)
        with pytest.raises(ConfigError, match="target: .* is not a usable target name") as no:
            data_built.publish(version="1.0", skip_checks=True)
        assert "\n" not in str(no.value)
    assert not data_built.dest.exists()


def _outside(tmp_path: Path) -> Path:
    """A folder outside the publish folder holding a private file a link might expose."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "private").write_text("secret")
    os.chmod(folder / "private", 0o600)
    return folder


@pytest.mark.parametrize("linked", ["modules/cpu", "cpu", "cpu/bin", "modules", "keys",
                                    "catalogue.json", ".publish.lock"])
def test_publish_never_follows_a_link_inside_dest(data_built: Built, tmp_path: Path,
                                                  linked: str) -> None:
    data_built.publish(version="1.0", skip_checks=True)
    elsewhere = _outside(tmp_path)
    link = data_built.dest / linked
    if link.is_dir():
        shutil.rmtree(link)
    else:
        link.unlink(missing_ok=True)  # keys/ exists only once something was signed
    link.symlink_to(elsewhere if linked.count("/") or "." not in linked
                    else elsewhere / "private")
    group = grp.getgrgid(os.getgid()).gr_name
    with pytest.raises(StateError) as refused:
        data_built.publish(version="2.0", skip_checks=True, group=group)
    assert str(refused.value).startswith(f"{link} is a symbolic link; nothing inside "
                                         f"{data_built.dest} is reached through a link")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["private"]
    assert stat.S_IMODE((elsewhere / "private").stat().st_mode) == 0o600
    assert (elsewhere / "private").read_text() == "secret"


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


def test_latest_that_is_not_a_link_is_refused(data_built: Built) -> None:
    data_built.publish(version="1", skip_checks=True)
    latest = data_built.dest / "cpu" / "latest"
    latest.unlink()
    latest.mkdir()
    with pytest.raises(StateError, match=f"^{latest} is not a symbolic link"):
        data_built.publish(version="2", skip_checks=True)

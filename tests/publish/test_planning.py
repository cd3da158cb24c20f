"""Unit tests of the publish request and plan (:mod:`containers.publish.planning`): what is
refused before anything is touched, on the stand-in image of :mod:`tests.publish.standin`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from containers.errors import ConfigError, ImageMissing, StateError, UsageError
from containers.publish.planning import PublishRequest, check_dest, plan_publish
from tests.publish.standin import Built


def test_request_normalises_dest_and_checks_each_flag_once(tmp_path: Path,
                                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert PublishRequest(target="cpu", dest="pub").dest == tmp_path / "pub"
    assert PublishRequest(target="cpu", dest="pub", keep=1).keep == 1
    with pytest.raises(UsageError, match=r"^--group is not a group name.*\(got '-x'\)$"):
        PublishRequest(target="cpu", dest="pub", group="-x")  # the flag's own type
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
        check_dest(PublishRequest(target="cpu", dest="open").dest)


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
    data_built.settings = data_built.settings.model_copy(update={"publish_group": "nope-x"})
    with pytest.raises(ConfigError, match="containers.publish_group: group 'nope-x'"):
        data_built.plan()


def test_plan_refuses_a_site_env_name_a_module_cannot_set(data_built: Built) -> None:
    data_built.site = data_built.site.model_copy(update={"env": {"BAD-NAME": "x"}})
    with pytest.raises(ConfigError, match="BAD-NAME: not a usable environment variable name"):
        data_built.plan()


def test_an_image_whose_record_names_another_target_is_refused(data_built: Built) -> None:
    record = data_built.settings.provenance_path("cpu")
    for named in ({"target": "gpu"}, {"target": None}):
        record.write_text(json.dumps({**json.loads(record.read_text()), **named}))
        with pytest.raises(StateError) as refused:
            data_built.plan()
        assert str(refused.value) == (
            f"{data_built.settings.image_path('cpu')}: its build record names target "
            f"{named['target']}, not cpu: rebuild it with invoke build --target cpu --force")


def test_an_image_built_from_other_inputs_than_now_is_refused(data_built: Built) -> None:
    assert data_built.plan(inputs_hash="1e9c228c71566f9d").version.endswith("1e9c228c")
    with pytest.raises(StateError) as refused:
        data_built.plan(inputs_hash="99" * 32)
    assert str(refused.value) == (
        f"{data_built.settings.image_path('cpu')} is stale: it was built from inputs "
        "1e9c228c7156, the target's inputs are now 999999999999; rebuild it with invoke build "
        "--target cpu before publishing")


def test_dest_naming_a_file_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    request = PublishRequest(target="cpu", dest=afile)  # the request reads no disk
    with pytest.raises(UsageError, match=f"^--dest: {afile} is a file, not a folder$"):
        check_dest(request.dest)
    with pytest.raises(UsageError, match=f"^--dest: {afile} is a file, not a folder$"):
        plan_publish(request, target=None, site=None, settings=None)  # type: ignore[arg-type]


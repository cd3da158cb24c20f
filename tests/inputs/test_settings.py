"""Project settings (the ``containers`` part of the invoke config): paths, defaults, bad values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from containers.app.project import Project, settings_of
from containers.errors import ConfigError, Problems
from containers.inputs.settings import SettingsFile, environment_settings, load_settings
from tests.fixtures import ROOT


def test_defaults_resolve_under_the_root(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {})
    assert settings.images_dir == tmp_path / "images"
    assert settings.image_path("cpu") == tmp_path / "images" / "cpu.sif"
    assert settings.provenance_path("cpu") == tmp_path / "images" / "cpu.sif.json"
    assert settings.runtime == "auto" and settings.cache_dir is None


def test_absolute_and_home_paths_are_kept(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"images_dir": "/srv/images", "results_dir": "~/r"})
    assert settings.images_dir == Path("/srv/images")
    assert settings.results_dir == Path("~/r").expanduser()


@pytest.mark.parametrize("config,message", [
    ({"image_dir": "x"}, "containers.image_dir: unknown key in containers settings "
                         "(did you mean 'images_dir'?)"),
    ({"runtime": "docker"}, "containers.runtime: must be auto, apptainer, singularity or an "
                            "absolute path"),
    ({"sign_keyidx": "zero"}, "containers.sign_keyidx: must be an integer"),
    ({"squashfs_level": 0}, "containers.squashfs_level: must be a gzip level from 1 (fastest) "
                            "to 9 (smallest, Apptainer's own), got 0"),
    ({"squashfs_level": 10}, "containers.squashfs_level: must be a gzip level from 1"),
    ({"squashfs_level": "fast"}, "containers.squashfs_level: must be an integer"),
    ({"squashfs": "xz"}, "containers.squashfs: must be one of auto, zstd, gzip, got 'xz'"),
])
def test_bad_settings_name_the_key(tmp_path: Path, config: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, config)
    assert message in str(info.value)


def test_batch_accounts_per_site_then_global(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"account": "global_1",
                                        "accounts": {"lumi": "project_465000001"}})
    assert settings.account_for("lumi") == "project_465000001"
    assert settings.account_for("olivia") == "global_1"
    assert load_settings(tmp_path, {}).account_for("lumi") is None
    with pytest.raises(ConfigError, match="containers.accounts: must be a mapping"):
        load_settings(tmp_path, {"accounts": ["lumi"]})


@pytest.mark.parametrize("value, message", [
    ({"cpu": "1"}, "containers.publish_pinned.cpu: must be a list of version names"),
    ({"cpu": ["../../etc"]}, "containers.publish_pinned.cpu: "),
])
def test_pinned_versions_are_lists_of_version_names(tmp_path, value, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(tmp_path, {"publish_pinned": value})
    assert load_settings(tmp_path, {"publish_pinned": {"cpu": ["2026.11.21-1e9c228c"]}}
                         ).publish_pinned == {"cpu": ("2026.11.21-1e9c228c",)}


def test_a_mistyped_invoke_variable_is_an_error_as_in_a_file() -> None:
    """invoke ignores INVOKE_CONTAINERS_* names it does not know in silence: each is named,
    with the likely name; a mapping's entry is read whether or not a file sets it."""
    environ = {"INVOKE_CONTAINERS_IMAGE_DIR": "/x", "INVOKE_CONTAINERS_RUNTIME": "auto",
               "INVOKE_CONTAINERS_FOO": "1", "INVOKE_CONTAINERS_ACCOUNTS_LUMI": "p1",
               "INVOKE_OTHER": "x", "PATH": "/bin"}
    with pytest.raises(Problems) as refused:
        environment_settings(environ)
    assert [str(p).split(":")[0] for p in refused.value.problems] == [
        "environment variable INVOKE_CONTAINERS_FOO",
        "environment variable INVOKE_CONTAINERS_IMAGE_DIR"]
    assert "names no setting, so it would be ignored; the settings: " in str(
        refused.value.problems[0])
    assert "(did you mean INVOKE_CONTAINERS_IMAGES_DIR?)" in str(refused.value.problems[1])
    del environ["INVOKE_CONTAINERS_FOO"], environ["INVOKE_CONTAINERS_IMAGE_DIR"]
    assert environment_settings(environ, {"accounts": {"mahti": "p0"}}) == {
        "runtime": "auto", "accounts": {"mahti": "p0", "lumi": "p1"}}


@pytest.mark.parametrize("name, text, message", [
    ("PUBLISH_WORLD_READABLE", "maybe", "'maybe' is not true or false"),
    ("SQUASHFS_LEVEL", "abc", "'abc' is not a whole number"),
    ("ACCOUNTS", "lumi", "'lumi' is not a mapping such as {lumi: project_1}"),
])
def test_a_variable_not_of_its_settings_type_is_one_line(name, text, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(
            f"environment variable INVOKE_CONTAINERS_{name}: containers.{name.lower()}: "
            f"{message}")):
        environment_settings({f"INVOKE_CONTAINERS_{name}": text})


#: A value other than the default for each setting: (the variable's text, the value in a file).
#: A string setting not named here takes a path; a setting of another type must be named.
SAMPLES = {"squashfs": ("gzip", "gzip"), "squashfs_level": ("1", 1),
           "keep_roots": ("no", False),
           "runtime": ("/opt/apptainer/bin/apptainer", "/opt/apptainer/bin/apptainer"),
           "default_target": ("cpu-arm64", "cpu-arm64"), "sign_keyidx": ("2", 2),
           "publish_world_readable": ("false", False), "cache_group": ("root", "root"),
           "publish_group": ("root", "root"), "account": ("project_1", "project_1"),
           "publish_pinned": ("{cpu: [2026.11.21-1e9c228c]}", {"cpu": ["2026.11.21-1e9c228c"]}),
           "accounts": ("{lumi: project_2}", {"lumi": "project_2"})}


@pytest.mark.parametrize("key", list(SettingsFile.model_fields))
def test_every_setting_is_reachable_by_its_variable(tmp_path: Path, key: str,
                                                    monkeypatch) -> None:
    """``INVOKE_CONTAINERS_SQUASHFS=gzip`` was ignored (invoke reads only the keys a file
    declares) and ``..._PUBLISH_WORLD_READABLE=false`` read as true: through invoke's own
    config loading, each variable sets its setting as the same value in a file does."""
    from invoke import Config

    default = SettingsFile.model_fields[key].default
    text, value = SAMPLES.get(key) or (("/elsewhere/" + key, "/elsewhere/" + key)
                                       if isinstance(default, str) else SAMPLES[key])
    project = tmp_path / "project"
    project.mkdir()
    (project / "invoke.yaml").write_text("containers:\n  images_dir: images\n")
    monkeypatch.setenv(f"INVOKE_CONTAINERS_{key.upper()}", text)
    config = Config(project_location=str(project))
    config.load_project()
    config.load_shell_env()
    settings, sources = settings_of(config)
    got = Project.load(project, settings, sources=sources).settings
    assert got == load_settings(project, {key: value}) != load_settings(project, {})


def test_invoke_yaml_declares_every_setting_with_its_default() -> None:
    """The project file admins read is the model's list of settings, defaults included."""
    declared = yaml.safe_load((ROOT / "invoke.yaml").read_text())["containers"]
    assert declared == {key: field.default for key, field in SettingsFile.model_fields.items()}


@pytest.mark.parametrize("config, key", [({"account": "bad name;x"}, "containers.account"),
                                         ({"accounts": {"lumi": "-x"}}, "containers.accounts.lumi")])
def test_a_configured_account_is_checked_where_it_is_set(tmp_path: Path, config, key) -> None:
    """A bad account in the settings (or INVOKE_CONTAINERS_ACCOUNT) is named there, not blamed
    on --account when the job is planned."""
    with pytest.raises(ConfigError, match=rf"^invoke.yaml: {re.escape(key)}: .* takes an account "
                                          "name"):
        load_settings(tmp_path, config)


@pytest.mark.parametrize("config, key, message", [
    ({"account": "proj@x"}, "containers.account", "takes an account name"),
    ({"account": "-proj"}, "containers.account", "takes an account name"),
    ({"default_target": "../x"}, "containers.default_target", "is not a usable target name"),
    ({"sign_keyidx": -1}, "containers.sign_keyidx", "must be at least 0"),
    ({"cache_group": "a b"}, "containers.cache_group", "is not a group name"),
    ({"publish_group": "-x"}, "containers.publish_group", "is not a group name"),
])
def test_settings_are_checked_at_load_by_the_flags_rules(tmp_path: Path, config, key,
                                                         message) -> None:
    """A setting with a flag of the same meaning follows that flag's rule, checked when the
    settings are loaded (not when a job is rendered), and named where it is set."""
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path, config)
    assert str(refused.value).startswith(f"invoke.yaml: {key}: ") and message in str(
        refused.value)

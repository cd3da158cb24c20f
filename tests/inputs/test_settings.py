"""Project settings (the ``containers`` part of the invoke config): paths, defaults, bad values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.settings import load_settings, unknown_variables


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
    """invoke ignores INVOKE_CONTAINERS_* names it does not know in silence: each is named."""
    environ = {"INVOKE_CONTAINERS_IMAGE_DIR": "/x", "INVOKE_CONTAINERS_RUNTIME": "auto",
               "INVOKE_CONTAINERS_ACCOUNTS_LUMI": "p1", "INVOKE_CONTAINERS_ACCOUNTS_MAHTI": "p2",
               "INVOKE_OTHER": "x", "PATH": "/bin"}
    problems = unknown_variables(environ, {"accounts": {"mahti": "p0"}})
    assert [str(p).split(":")[0] for p in problems] == [
        "environment variable INVOKE_CONTAINERS_ACCOUNTS_LUMI",
        "environment variable INVOKE_CONTAINERS_IMAGE_DIR"]
    assert "(did you mean INVOKE_CONTAINERS_IMAGES_DIR?)" in str(problems[1])
    assert "set containers.accounts.lumi in invoke.yaml instead" in str(problems[0])


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

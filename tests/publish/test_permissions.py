"""Unit tests of published files' permissions: modes, groups, what one publish owns, the umask."""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

import pytest

from containers.errors import ConfigError, StateError, UsageError
from containers.publish.permissions import (Modes, apply_modes, expected_mode, managed_paths,
                                            mode_problems, resolve_group, umask, unsafe_layout)


def test_modes_and_problems(tmp_path: Path) -> None:
    world, group = Modes.of(world_readable=True, gid=None), Modes.of(world_readable=False, gid=None)
    assert (world.file, world.dir, world.umask) == (0o644, 0o755, 0o022)
    assert (group.file, group.dir, group.umask) == (0o640, 0o750, 0o027)
    (tmp_path / "bin").mkdir()
    wrapper, sif = tmp_path / "bin" / "cpu-exec", tmp_path / "1.sif"
    wrapper.write_text("#!/bin/sh\n")
    sif.write_text("x")
    assert expected_mode(wrapper, group) == 0o750 and expected_mode(sif, group) == 0o640
    os.chmod(sif, 0o666)
    os.chmod(wrapper, 0o750)
    assert mode_problems([sif, wrapper], group) == [f"{sif}: world-writable (mode 0666)"]
    os.chmod(sif, 0o644)
    assert mode_problems([sif], group) == [f"{sif}: mode 0644, expected 0640"]
    assert mode_problems([sif], None) == []


def test_resolve_group_names_where_the_group_came_from() -> None:
    assert resolve_group("", named_by="--group") is None
    users = grp.getgrnam("users").gr_gid
    if os.geteuid() == 0:
        assert resolve_group("users", named_by="--group") == users
    with pytest.raises(UsageError, match="^--group: group 'no-such-group-here' does not exist"):
        resolve_group("no-such-group-here", named_by="--group")
    with pytest.raises(ConfigError, match="containers.publish_group: group 'nope-x' does not") \
            as setting:
        resolve_group("nope-x", named_by="containers.publish_group")
    assert setting.value.key == "containers.publish_group"
    assert isinstance(setting.value.__cause__, KeyError)


def test_managed_paths_are_this_targets_files_not_links_nor_other_targets(tmp_path: Path) -> None:
    for folder in ("cpu/bin", "modules/cpu", "keys", "gpu"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("catalogue.json", ".publish.lock", "cpu/1.sif", "cpu/bin/cpu-exec",
                 "modules/cpu/1.lua", "keys/F.pgp", "gpu/1.sif"):
        (tmp_path / name).write_text("x")
    os.symlink("1.sif", tmp_path / "cpu" / "latest")
    found = {str(p.relative_to(tmp_path)) for p in managed_paths(tmp_path, "cpu")}
    assert found == {"catalogue.json", ".publish.lock", "modules", "cpu", "cpu/1.sif", "cpu/bin",
                     "cpu/bin/cpu-exec", "modules/cpu", "modules/cpu/1.lua", "keys",
                     "keys/F.pgp"}


def test_apply_modes_sets_modes_keeps_setgid_and_then_nothing_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "cpu" / "bin").mkdir(parents=True)
    wrapper, sif = tmp_path / "cpu" / "bin" / "cpu-exec", tmp_path / "cpu" / "1.sif"
    wrapper.write_text("#!/bin/sh\n")
    sif.write_text("x")
    os.chmod(sif, 0o666)
    os.chmod(tmp_path / "cpu", 0o2777)
    modes = Modes.of(world_readable=False, gid=os.getgid())
    paths = [tmp_path / "cpu", tmp_path / "cpu" / "bin", wrapper, sif]
    apply_modes(paths, modes)
    assert [stat.S_IMODE(p.stat().st_mode) for p in paths] == [0o2750, 0o750, 0o750, 0o640]
    assert mode_problems(paths, modes) == []


def test_umask_is_restored(tmp_path: Path) -> None:
    before = os.umask(0o022)
    try:
        with umask(0o027):
            (tmp_path / "f").write_text("x")
        assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o640
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)


def test_nothing_reached_through_a_link_is_managed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private").write_text("x")
    dest = tmp_path / "pub"
    (dest / "cpu").mkdir(parents=True)
    (dest / "modules").mkdir()
    (dest / "modules" / "cpu").symlink_to(elsewhere)
    found = {str(p.relative_to(dest)) for p in managed_paths(dest, "cpu")}
    assert found == {"modules", "cpu"}, "nothing under the linked folder"
    assert unsafe_layout(dest, "cpu").startswith(f"{dest}/modules/cpu is a symbolic link")
    assert unsafe_layout(dest, "gpu") is None, "another target's link is not this publish's"
    assert unsafe_layout(dest).startswith(f"{dest}/modules/cpu is a symbolic link")
    (dest / "modules" / "cpu").unlink()
    (dest / "modules" / "cpu").write_text("a file")
    assert unsafe_layout(dest, "cpu") == (f"{dest}/modules/cpu is a file, where publish keeps "
                                          "a folder")
    os.symlink("1.sif", dest / "cpu" / "latest")
    (dest / "modules" / "cpu").unlink()
    (dest / "modules" / "cpu").mkdir()
    os.symlink("1.lua", dest / "modules" / "cpu" / "default")
    assert unsafe_layout(dest, "cpu") is None and unsafe_layout(dest) is None


def test_a_world_writable_folder_is_refused_to_publish_not_to_verify(tmp_path: Path) -> None:
    """A file planted in a folder anyone may write would be published with the rest; verify
    reports world-writable files as problems instead (mode_problems)."""
    (tmp_path / "cpu" / "bin").mkdir(parents=True)
    (tmp_path / "keys").write_text("a file")
    os.chmod(tmp_path / "cpu" / "bin", 0o777)
    assert unsafe_layout(tmp_path, "cpu") == (f"{tmp_path}/keys is a file, where publish keeps "
                                              "a folder"), "a misplaced file is named first"
    (tmp_path / "keys").unlink()
    assert unsafe_layout(tmp_path, "cpu") == (
        f"{tmp_path}/cpu/bin is world-writable (mode 0777): anyone could have put files there; "
        "check what it holds, chmod o-w it, then publish")
    assert unsafe_layout(tmp_path) is None


def test_apply_modes_never_follows_a_link_swapped_in(tmp_path: Path) -> None:
    target = tmp_path / "private"
    target.write_text("x")
    os.chmod(target, 0o600)
    link = tmp_path / "1.sif"
    link.symlink_to(target)
    with pytest.raises(StateError, match=f"^{link} became a symbolic link while publishing"):
        apply_modes([link], Modes.of(world_readable=True, gid=None))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600

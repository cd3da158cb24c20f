"""``invoke build``: what it decides before anything runs: a target of another architecture
(emulated, or refused in one line), a cotainr base image that is not here, the package cache's
line, and the dry-run plan with its exact commands."""

from __future__ import annotations

import dataclasses

import pytest

from containers.app import build as app_build
from containers.errors import ConfigError, UsageError
from containers.host.facts import host_arch
from containers.image.plan import plan_build
from containers.inputs.builders import builder_of
from tests.fixtures import ROOT

pytestmark = pytest.mark.skipif(host_arch() != "x86_64", reason="the targets' arches are "
                                "x86_64 and aarch64; the tests take this machine as x86_64")


def test_a_target_of_this_machine_builds_natively(data_project) -> None:
    assert app_build.foreign_build(data_project.target("cpu"), dry_run=False) is None


def test_another_architecture_builds_emulated_or_is_refused(data_project, monkeypatch) -> None:
    arm = data_project.target("cpu-arm64")
    monkeypatch.setattr(app_build, "emulation", lambda arch: None)
    assert app_build.foreign_build(arm, dry_run=False).startswith(
        "target cpu-arm64 is aarch64, this machine x86_64: building under qemu emulation")
    monkeypatch.setattr(app_build, "emulation", lambda arch: "no binfmt handler")
    assert "without emulation (no binfmt handler)" in app_build.foreign_build(arm, dry_run=True)
    with pytest.raises(ConfigError) as refused:
        app_build.foreign_build(arm, dry_run=False)
    assert refused.value.key == "arch" and refused.value.path == arm.manifest
    assert "cannot emulate it: no binfmt handler" in str(refused.value)


def test_the_dry_run_shows_every_step_and_builds_nothing(data_project) -> None:
    lines: list[str] = []
    plan = app_build.build(data_project, target="cpu", dry_run=True, say=lines.append)
    assert [s.target.name for s in plan.steps] == ["debian-base", "cpu"]
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == [
        "step 1/2", "step 2/2"]
    assert any(line.startswith("  run    ") and " build " in line for line in lines)
    assert not list(data_project.settings.images_dir.glob("*.sif"))


def test_kept_roots_off_plans_builds_that_keep_and_use_none(data_project, tmp_path) -> None:
    """``containers.keep_roots: false`` (a small quota): the cpu build neither rebuilds from a
    kept root nor keeps one, and its plan's ``cache`` line says why."""
    from containers.app.project import Project

    def planned(**settings) -> tuple[object, list[str]]:
        project = Project.load(ROOT, {**settings, "cache_dir": str(tmp_path / "cache"),
                                      "images_dir": str(tmp_path / "images")})
        lines: list[str] = []
        step = app_build.build(project, target="cpu", dry_run=True, say=lines.append).steps[-1]
        return step, [line for line in lines if line.startswith("  cache  ")]

    kept, kept_lines = planned()
    assert kept.kept_root is not None and "kept root file systems (" in kept_lines[-1]
    off, off_lines = planned(keep_roots=False)
    assert off.kept_root is None and "kept root file systems (" not in off_lines[-1]
    assert "no kept root file system (containers.keep_roots is off)" in off_lines[-1]
    assert off.cache_use.startswith("pip (")


def test_a_cotainr_base_image_must_be_here(data_project, data_settings) -> None:
    step = next(s for s in _steps(data_project, "lumi-rocm") if s.target.name == "lumi-rocm")
    with pytest.raises(ConfigError) as refused:  # the manifest's path: the manifest is wrong
        builder_of(step.target).check_base_image(step.target, step.inputs)
    assert refused.value.key == "base_image"
    given = dataclasses.replace(step, inputs={**step.inputs, "base_image": "/nonexistent.sif"})
    with pytest.raises(UsageError, match="pass --build-arg BASE_IMAGE=PATH"):
        builder_of(given.target).check_base_image(given.target, given.inputs)
    docker = dataclasses.replace(step, inputs={**step.inputs, "base_image": "docker://x"})
    assert builder_of(docker.target).check_base_image(docker.target, docker.inputs) is None


def test_the_cache_line_says_why_none_is_used(data_project) -> None:
    step = _steps(data_project, "cpu")[-1]
    bare = dataclasses.replace(step, package_cache=None)
    assert app_build.cache_line(bare, no_cache=True) == (
        "  cache  not used (--no-cache): every package is fetched afresh")
    assert app_build.cache_line(bare, no_cache=False).startswith("  cache  not used: ")


def _steps(project, name: str):
    from containers.image.gather import gather_host
    from containers.host.runtime import assumed_runtime

    host = gather_host(project.root, project.settings.images_dir, assumed_runtime("apptainer"),
                       list(project.targets), mirror_override=None, package_cache=None)
    return plan_build(project.targets, name, settings=project.settings, host=host,
                      cli_args={}, force=True).steps

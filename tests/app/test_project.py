"""The project a command works with: settings from their layers (an error names the layer that
set it), targets kept apart when their manifest is bad, the default target and runtime."""

from __future__ import annotations

import pytest
from invoke import Config

from containers.app.project import Project, config_sources
from containers.errors import ConfigError, ContainersError, Problems
from containers.host.runtime import Runtime
from containers.prove.registry import kind_of
from tests.fixtures import ROOT

SMOKE = kind_of("smoke")


def test_a_bad_setting_names_the_file_and_line_that_set_it(tmp_path) -> None:
    user = tmp_path / "invoke.yaml"
    user.write_text("containers:\n  images_dir: images\n  results_dir: 7\n")
    config = Config(runtime_path=str(user))
    config.load_runtime()
    sources = config_sources(config)
    assert [s.path for s in sources] == [user]
    with pytest.raises(ConfigError) as refused:
        Project.load(ROOT, dict(config.containers), sources=sources)
    assert (refused.value.path, refused.value.line) == (user, 3)


def test_several_bad_settings_are_each_named_in_file_order(tmp_path) -> None:
    user = tmp_path / "invoke.yaml"
    user.write_text("containers:\n  runtime: dockerx\n  squashfs: lz4\n")
    config = Config(runtime_path=str(user))
    config.load_runtime()
    with pytest.raises(Problems) as refused:
        Project.load(ROOT, dict(config.containers), sources=config_sources(config))
    assert [(p.path, p.line, p.key) for p in refused.value.problems] == [
        (user, 2, "containers.runtime"), (user, 3, "containers.squashfs")]


def test_bad_settings_of_two_layers_come_layer_by_layer_the_winning_first(tmp_path) -> None:
    (tmp_path / "project").mkdir()
    project, user = tmp_path / "project" / "invoke.yaml", tmp_path / "zz-runtime.yaml"
    project.write_text("containers:\n  images_dir: images\n  squashfs: lz4\n")
    user.write_text("containers:\n  runtime: dockerx\n")
    config = Config(project_location=str(tmp_path / "project"), runtime_path=str(user))
    config.load_project()
    config.load_runtime()
    sources = config_sources(config)
    with pytest.raises(Problems) as refused:
        Project.load(ROOT, dict(config.containers), sources=sources)
    assert [(p.path, p.line) for p in refused.value.problems] == [(user, 2), (project, 3)]


def test_a_bad_manifest_stops_only_the_commands_that_name_it(factory_project) -> None:
    root = factory_project()
    (root / "recipes" / "broken.yaml").write_text("site: local\narch: x86_64\nbogus: 1\n")
    project = Project.load(root, {})
    assert "broken" not in project.targets and "cpu" in project.targets
    assert project.target("cpu").name == "cpu"
    with pytest.raises(ContainersError, match="broken.yaml"):
        project.target("broken")


def test_the_default_target_and_the_runtime_for_another_site(data_project) -> None:
    assert data_project.default_target() == data_project.settings.default_target == "cpu"
    lumi = data_project.sites["lumi"]
    planned = data_project.runtime_for(lumi, dry_run=True)
    assert isinstance(planned, Runtime) and planned.flavour == lumi.runtime
    assert data_project.site_of(data_project.target("cpu")).name == "local"


def test_a_jobs_needs_are_resolved_once(data_project) -> None:
    """The target named (else the default), the site named (else the target's own), and the
    architecture of that site's nodes: its default target's."""
    needs = data_project.job_needs("olivia-cuda", None, kind=SMOKE, host_arch="x86_64", venv=None)
    assert (needs.target.name, needs.site.name, needs.site_arch) == (
        "olivia-cuda", "olivia", "aarch64")
    needs = data_project.job_needs("cpu", "olivia", kind=SMOKE, host_arch="x86_64",
                                   venv=None)
    assert (needs.site.name, needs.site_arch, needs.host_arch) == ("olivia", "aarch64", "x86_64")
    with pytest.raises(ContainersError, match="no-such-target"):
        data_project.job_needs("no-such-target", None, kind=SMOKE, host_arch="x86_64",
                               venv=None)

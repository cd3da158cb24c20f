"""References between input files: each message names the file, the line and the key."""

from __future__ import annotations

import pytest

from containers.errors import ConfigError
from containers.image.plan import CONTEXT_ARGS, PROVENANCE_ARGS
from containers.inputs import validate
from containers.inputs.recipes import load_targets
from containers.inputs.sites import load_sites

TOOL_ARGS = (*CONTEXT_ARGS, *PROVENANCE_ARGS)


def _line(path, start: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if l.startswith(start))


def test_shipped_inputs_reference_each_other(data_root) -> None:
    targets, sites = load_targets(data_root), load_sites(data_root)
    validate.check_sites(sites, targets)
    validate.check_targets(targets.values(), sites, tool_args=TOOL_ARGS)


def test_manifest_naming_a_site_without_profile(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("site: local", "site: locall"))
    with pytest.raises(ConfigError) as info:
        validate.check_target(load_targets(root)["cpu"], load_sites(root), tool_args=TOOL_ARGS)
    assert str(info.value) == (f"{manifest}:{_line(manifest, 'site:')}: site: site 'locall' has "
                               "no profile in sites/ (did you mean 'local'?)")


def test_site_default_target_must_exist(factory_project) -> None:
    root = factory_project()
    profile = root / "sites" / "lumi.yaml"
    profile.write_text(profile.read_text().replace("default_target: lumi-rocm\n",
                                                   "default_target: lumi-rcom\n"))
    with pytest.raises(ConfigError) as info:
        validate.check_sites(load_sites(root), load_targets(root))
    assert str(info.value).startswith(f"{profile}:{_line(profile, 'default_target:')}: "
                                      "default_target: default_target 'lumi-rcom' is not a target")
    assert "did you mean 'lumi-rocm'" in str(info.value)


def test_definition_argument_without_value(factory_project) -> None:
    root = factory_project()
    definition = root / "recipes" / "cpu.def"
    text = definition.read_text()
    definition.write_text(text.replace("%post\n", "%post\n    echo {{ NOT_GIVEN }}\n", 1))
    with pytest.raises(ConfigError) as info:
        validate.check_target(load_targets(root)["cpu"], load_sites(root), tool_args=TOOL_ARGS)
    message = str(info.value)
    assert message.startswith(f"{definition}:")
    assert "NOT_GIVEN: build argument {{ NOT_GIVEN }} has no value" in message
    # the tool's own arguments are not reported
    validate.check_target(load_targets(root)["debian-base"], load_sites(root),
                          tool_args=TOOL_ARGS)


def test_site_of_a_manifest_is_the_manifests_error(factory_project, data_root) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("site: local", "site: locall"))
    sites = load_sites(root)
    with pytest.raises(ConfigError, match=rf"^{manifest}:\d+: site: site 'locall'"):
        validate.site_of(load_targets(root)["cpu"], sites)
    assert validate.site_of(load_targets(data_root)["cpu"], sites).name == "local"


def test_site_and_partition_names_follow_the_name_rule(factory_project) -> None:
    root = factory_project()
    profile = root / "sites" / "lumi.yaml"
    text = profile.read_text()
    profile.write_text(text.replace("partitions: [", "partitions: ['../../x', ", 1))
    with pytest.raises(ConfigError) as info:
        validate.check_sites(load_sites(root), load_targets(root))
    assert str(info.value).startswith(f"{profile}:{_line(profile, 'partitions:')}: partitions: "
                                      "'../../x' is not a usable partition name")
    profile.write_text(text)
    (root / "sites" / "x y.yaml").write_text((root / "sites" / "local.yaml").read_text())
    with pytest.raises(ConfigError, match=r"x y.yaml: file name: 'x y' is not a usable site"):
        validate.check_sites(load_sites(root), load_targets(root))

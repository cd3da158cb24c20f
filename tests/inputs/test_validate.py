"""References between input files: each message names the file, the line and the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from containers.app.inputs import check_inputs, show, target_listing
from containers.app.project import Project
from containers.errors import ConfigError, Problems, UsageError
from containers.image.identity import CONTEXT_ARGS, PROVENANCE_ARGS
from containers.inputs import validate
from tests.fixtures.data import load_targets
from containers.inputs.sites import load_sites
from tests import test_cli
from tests.fixtures.data import pin_torch

cli_project = test_cli.cli_project  # the fixture: a project copy that invoke runs in

TOOL_ARGS = (*CONTEXT_ARGS, *PROVENANCE_ARGS)


def _line(path, start: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if l.startswith(start))


def _check_sites(root) -> None:
    targets = load_targets(root)
    for site in load_sites(root).values():
        validate.check_site(site, targets)


def test_shipped_inputs_reference_each_other(data_root) -> None:
    targets, sites = load_targets(data_root), load_sites(data_root)
    for site in sites.values():
        validate.check_site(site, targets)
    for target in targets.values():
        validate.check_target(target, sites, tool_args=TOOL_ARGS)


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
        _check_sites(root)
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
    # (with what a node allocates: a GPU partition without it is refused as the profile loads)
    profile.write_text(text.replace("partitions:\n", "partitions:\n  '../../x': "
                                    "{allocatable_gb: 480, allocatable_source: s}\n", 1))
    with pytest.raises(ConfigError) as info:  # when the profile loads, or when it is checked
        _check_sites(root)
    assert str(info.value).startswith(f"{profile}:{_line(profile, 'partitions:')}: partitions: "
                                      "'../../x' is not a usable partition name")
    profile.write_text(text)
    (root / "sites" / "x y.yaml").write_text((root / "sites" / "local.yaml").read_text())
    with pytest.raises(ConfigError, match=r"x y.yaml: file name: 'x y' is not a usable site"):
        _check_sites(root)


def _forbidding(root: Path, target: str) -> list[str]:
    """``invoke check`` of ``target`` once its manifest says ``host_paths: forbid``: its errors."""
    manifest = root / "recipes" / f"{target}.yaml"
    manifest.write_text(manifest.read_text() + "host_paths: forbid\n")
    return [str(e) for e in validate.check_project(root, target=target,
                                                   tool_args=TOOL_ARGS).errors]


def _plant_three_errors(root: Path) -> tuple[Path, Path]:
    """Two bad keys in a manifest, one bad reference value in a site profile."""
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("definition:", "defintion:")
                        .replace("arch: x86_64", "arch: x86-64"))
    profile = root / "sites" / "lumi.yaml"
    text = profile.read_text()
    value = re.search(r"busbw: \[([0-9.]+),", text)
    assert value, "lumi.yaml has a reference"
    profile.write_text(text.replace(value.group(0), "busbw: [.nan,", 1))
    return manifest, profile


def test_check_reports_every_error_in_every_file(factory_project) -> None:
    root = factory_project()
    manifest, profile = _plant_three_errors(root)
    report = validate.check_project(root, tool_args=TOOL_ARGS)
    where = [(e.path, e.key) for e in report.errors]
    assert where == [(manifest, "arch"), (manifest, "defintion"),
                     (profile, "references[0].busbw")], [str(e) for e in report.errors]
    assert all(e.line for e in report.errors)
    assert "did you mean 'definition'" in str(report.errors[1])
    assert "value nan is not a finite number" in str(report.errors[2])
    # everything else was still checked: the other targets and sites pass
    assert "cpu" not in report.ok_targets and "debian-base" in report.ok_targets
    assert "lumi" not in report.ok_sites and "local" in report.ok_sites
    # --target limits the check to that target, its bases and the sites
    only = validate.check_project(root, target="debian-base", tool_args=TOOL_ARGS)
    assert [e.path for e in only.errors] == [profile] and only.ok_targets == ["debian-base"]
    with pytest.raises(UsageError, match="unknown target 'cpuu'"):
        validate.check_project(root, target="cpuu")


def test_check_through_invoke_lists_every_planted_error(cli_project: Path) -> None:
    manifest, profile = _plant_three_errors(cli_project)
    result = test_cli._invoke(cli_project, "check")
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4 and lines[-1] == "error: 3 problems found", result.stderr
    assert lines[0].startswith(f"error: {manifest}:") and "arch: 'x86-64' is not one of" in lines[0]
    assert lines[1].startswith(f"error: {manifest}:") and "defintion: unknown key" in lines[1]
    assert lines[2].startswith(f"error: {profile}:") and "references[0].busbw: value nan" \
        in lines[2]
    assert "ok  target debian-base" in result.stdout and "ok  site   local" in result.stdout


def test_check_json_document(factory_project) -> None:
    root = factory_project()
    manifest, profile = _plant_three_errors(root)
    printed: list[str] = []
    with pytest.raises(Problems):
        check_inputs(Project.load(root, {}), as_json=True, say=printed.append)
    document = json.loads("".join(printed))
    assert set(document) == {"ok", "errors", "warnings", "targets", "sites"}
    assert document["ok"] is False and len(document["errors"]) == 3
    assert document["errors"][1] == {"file": str(manifest), "line": 6, "key": "defintion",
                                     "message": "unknown key in target manifest (did you mean "
                                                "'definition'?)"}
    assert "debian-base" in document["targets"] and "local" in document["sites"]
    assert all(set(w) == {"file", "line", "key", "message"} for w in document["warnings"])


def test_targets_json_has_the_table_columns(factory_project, tmp_path: Path) -> None:
    root = factory_project()
    printed: list[str] = []
    project = Project.load(root, {"images_dir": str(tmp_path / "images")})
    show(target_listing(project), as_json=True, say=printed.append)
    rows = json.loads("".join(printed))
    assert [row["target"] for row in rows] == sorted(p.stem for p in (root / "recipes")
                                                    .glob("*.yaml"))
    cpu = next(row for row in rows if row["target"] == "cpu")
    assert set(cpu) == {"target", "site", "arch", "gpu", "builder", "from", "image", "state",
                        "inputs_hash"}
    # which images start from a registry (NGC) and which from the package index on our base
    starts = {row["target"]: row["from"] for row in rows}
    assert starts["cpu"] == starts["mahti-cuda-pip"] == "target debian-base"
    assert starts["olivia-cuda-pip"] == "target debian-base-arm64"
    assert starts["olivia-cuda"] == "docker: nvcr.io/nvidia/pytorch:25.06-py3"
    assert (cpu["site"], cpu["builder"], cpu["state"]) == ("local", "apptainer", "not built")
    assert len(cpu["inputs_hash"]) == 12


def test_host_paths_warn_or_fail_as_the_manifest_says(factory_project) -> None:
    root = factory_project()
    definition = root / "recipes" / "cpu.def"
    definition.write_text(definition.read_text().replace(
        "%files\n", "%files\n    /etc/ssl/private/site.key /opt/site.key\n", 1))
    line = definition.read_text().splitlines().index("    /etc/ssl/private/site.key "
                                                      "/opt/site.key") + 1
    report = validate.check_project(root, target="cpu", tool_args=TOOL_ARGS)
    assert report.errors == [] and "cpu" in report.ok_targets
    assert [str(w) for w in report.warnings if w.key == "%files"] == [
        f"{definition}:{line}: %files: reads host paths outside the build context: "
        "/etc/ssl/private/site.key; the image depends on the build machine; host_paths: forbid "
        "in the manifest makes this an error"]
    assert _forbidding(root, "cpu") == [
        f"{definition}:{line}: %files: reads host paths outside the build context: "
        "/etc/ssl/private/site.key; the manifest forbids them (host_paths: forbid)"]


def test_conda_channels_and_prefix_of_a_cotainr_env_spec(factory_project) -> None:
    """http:// channels are refused as pip's http:// URLs are; a file:// channel is a folder of
    the build host, judged by host_paths like a definition's host paths; prefix: is ignored."""
    root = factory_project()
    spec = root / "envs" / "lumi-rocm.yml"
    text = spec.read_text()
    spec.write_text(text.replace("channels:\n", "prefix: /etc/evil\nchannels:\n"
                                 "  - file:///etc\n", 1))
    line = spec.read_text().splitlines().index("  - file:///etc") + 1
    report = validate.check_project(root, target="lumi-rocm", tool_args=TOOL_ARGS)
    assert report.errors == [] and "lumi-rocm" in report.ok_targets
    warned = {w.key: str(w) for w in report.warnings}
    assert warned["channels"] == (
        f"{spec}:{line}: channels: reads host paths outside the build context: Conda channel "
        "file:///etc; the image depends on the build machine; host_paths: forbid in the "
        "manifest makes this an error")
    assert warned["prefix"].startswith(f"{spec}:{line - 2}: prefix: is ignored")
    manifest = root / "recipes" / "lumi-rocm.yaml"
    manifest.write_text(manifest.read_text() + "host_paths: forbid\n")
    report = validate.check_project(root, target="lumi-rocm", tool_args=TOOL_ARGS)
    assert [e.key for e in report.errors] == ["channels"]
    spec.write_text(text.replace("channels:\n", "channels:\n  - http://conda.example.org/c\n"))
    report = validate.check_project(root, target="lumi-rocm", tool_args=TOOL_ARGS)
    assert "channel 'http://conda.example.org/c' is not an https URL" in str(report.errors[0])


def test_check_finds_the_torch_mismatch_and_pip_sources(factory_project) -> None:
    root = factory_project()
    spec = root / "envs" / "lumi-rocm.yml"
    pin_torch(root, "2.5.1+rocm6.2")
    # by default the examples are those torch 2.5 runs: FSDP2 is left out, said in one line
    report = validate.check_project(root, target="lumi-rocm", tool_args=TOOL_ARGS)
    assert report.errors == [] and "lumi-rocm" in report.ok_targets
    assert [i for i in report.infos if "lumi-rocm" in i] == [
        "target lumi-rocm: examples ddp, deepspeed (left out: fsdp: target lumi-rocm gets torch "
        "2.5, but example 'fsdp' needs torch >= 2.6 (FSDP2 (fully_shard, MixedPrecisionPolicy) "
        "is public in torch.distributed.fsdp from torch 2.6))"]
    # asked for by name, it is refused
    manifest = root / "recipes" / "lumi-rocm.yaml"
    manifest.write_text(manifest.read_text() + "examples: [ddp, fsdp]\n")
    report = validate.check_project(root, target="lumi-rocm", tool_args=TOOL_ARGS)
    assert [str(e).split(": torch: ", 1)[1].split(" (")[0] for e in report.errors] == [
        "target lumi-rocm gets torch 2.5, but example 'fsdp' needs torch >= 2.6"]
    assert report.errors[0].path == spec
    manifest.write_text(manifest.read_text().replace("examples: [ddp, fsdp]\n", ""))
    # an extra index the manifest does not allow is refused, naming the env spec's line
    manifest.write_text(manifest.read_text().split("pip_extra_index_urls:")[0])
    report = validate.check_project(root, target="lumi-rocm", tool_args=TOOL_ARGS)
    assert len(report.errors) == 1 and report.errors[0].path == spec
    assert "is not allowed: list it under pip_extra_index_urls" in str(report.errors[0])


def test_a_broken_base_is_reported_once_not_through_its_children(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "debian-base.yaml"
    manifest.write_text(manifest.read_text() + "colour: blue\n")
    report = validate.check_project(root, tool_args=TOOL_ARGS)
    assert [(e.path, e.key) for e in report.errors] == [(manifest, "colour")], \
        [str(e) for e in report.errors]
    assert "lumi-rocm" in report.ok_targets
    assert "debian-base" not in report.ok_targets and "cpu" not in report.ok_targets


def test_one_bad_manifest_stops_only_what_needs_it(factory_project) -> None:
    """A bad manifest used to make every command fail, for every target (invoke targets printed
    no table): now only it, and the targets built on it, are refused; the rest work."""
    root = factory_project()
    (root / "recipes" / "broken.yaml").write_text("description: x\nsite: local\narch: x86-64\n")
    (root / "recipes" / "onbroken.yaml").write_text(
        "description: y\nsite: local\nbase: broken\ndefinition: recipes/cpu.def\n")
    project = Project.load(root, {})
    assert project.target("cpu").name == "cpu"
    with pytest.raises(ConfigError, match=r"broken.yaml:3: arch: 'x86-64' is not one of"):
        project.target("broken")
    with pytest.raises(ConfigError, match=r"onbroken.yaml:3: base: base target 'broken' is not "
                                          "usable: .*broken.yaml:3: arch"):
        project.target("onbroken")
    lines: list[str] = []
    show(target_listing(project), as_json=True, say=lines.append)
    rows = {row["target"]: row for row in json.loads(lines[0])}
    assert rows["cpu"]["state"] in ("not built", "built", "stale", "built (no record)")
    assert rows["broken"]["state"].startswith("invalid: ") and "arch" in rows["broken"]["state"]
    assert rows["onbroken"]["state"].startswith("invalid: ")


def test_a_target_high_on_a_broken_chain_names_its_base_as_not_usable(factory_project) -> None:
    """Whatever order the files load in: ``a`` (on ``b``, on ``d``, on ``c``, on a base that
    does not exist) used to be told its base ``b`` did not exist."""
    root = factory_project()
    for name, base in (("a", "b"), ("b", "d"), ("c", "nowhere"), ("d", "c")):
        (root / "recipes" / f"{name}.yaml").write_text(
            f"description: {name}\nbase: {base}\ndefinition: recipes/cpu.def\n")
    targets, failed = validate.targets_apart(root)
    assert "a" not in targets and str(failed["c"][0]).endswith(
        "c.yaml:2: base: base target 'nowhere' does not exist")
    for name, base in (("a", "b"), ("b", "d"), ("d", "c")):
        assert f"{name}.yaml:2: base: base target '{base}' is not usable: " in str(failed[name][0])


def test_a_chain_on_a_manifest_that_did_not_load_names_each_base_as_not_usable(
        factory_project) -> None:
    """``z`` on ``y`` on ``x``, whose own manifest is bad: ``y`` exists, it is not usable."""
    root = factory_project()
    (root / "recipes" / "x.yaml").write_text("description: x\nbogus: 1\n"
                                            "definition: recipes/cpu.def\n")
    for name, base in (("y", "x"), ("z", "y")):
        (root / "recipes" / f"{name}.yaml").write_text(
            f"description: {name}\nbase: {base}\ndefinition: recipes/cpu.def\n")
    targets, failed = validate.targets_apart(root)
    assert not {"x", "y", "z"} & set(targets)
    for name, base in (("y", "x"), ("z", "y")):
        assert f"{name}.yaml:2: base: base target '{base}' is not usable: " in str(failed[name][0])


def test_check_sees_a_setup_line_behind_a_form_feed(factory_project) -> None:
    """The issue's reproduction: Apptainer cuts lines at \\n only, so ``cat /etc/hostname`` after
    ``<FF>%labels`` runs in %setup; under host_paths: forbid ``invoke check`` refuses it."""
    root = factory_project()
    definition = root / "recipes" / "cpu.def"
    definition.write_text(definition.read_text() + '\n%setup\n    true \f%labels ;cat '
                          '/etc/hostname > "${APPTAINER_ROOTFS}/leak"\n')
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text() + "host_paths: forbid\n")
    report = validate.check_project(root, target="cpu", tool_args=TOOL_ARGS)
    line = definition.read_text().split("\n").index(
        '    true \f%labels ;cat /etc/hostname > "${APPTAINER_ROOTFS}/leak"') + 1
    assert [str(e) for e in report.errors] == [
        f"{definition}:{line}: %setup: reads host paths outside the build context: "
        "/etc/hostname; the manifest forbids them (host_paths: forbid)"]


def test_check_refuses_a_second_from_naming_a_host_image(factory_project) -> None:
    """Apptainer builds from the last ``From:``: a second one below the manifest's base is
    refused in one line, and a host image as the only base is a host path."""
    root = factory_project()
    definition = root / "recipes" / "cpu.def"
    text = definition.read_text()
    definition.write_text(text.replace("From: {{ BASE_IMAGE }}\n",
                                       "From: {{ BASE_IMAGE }}\nFrom: /root/host.sif\n", 1))
    assert _forbidding(root, "cpu") == [
        f"{definition}:3: from: header key 'from' is given twice (lines 2 and 3); Apptainer "
        "uses only the last: give it once"]
    definition.write_text(text.replace("From: {{ BASE_IMAGE }}\n", "From: /root/host.sif\n", 1))
    report = validate.check_project(root, target="cpu", tool_args=TOOL_ARGS)
    assert [str(e) for e in report.errors] == [
        f"{definition}:2: From: reads host paths outside the build context: /root/host.sif; "
        "the manifest forbids them (host_paths: forbid)"]

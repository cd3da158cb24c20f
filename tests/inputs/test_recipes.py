"""Loading and validating target manifests: errors name file, line, key, and suggest the key."""

from __future__ import annotations

import multiprocessing
import os
import re
import resource
from pathlib import Path
from typing import Callable

import pytest

from containers.app.inputs import check_inputs
from containers.app.project import Project
from containers.errors import ConfigError
from containers.inputs.recipes import base_chain
from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings
from containers.inputs.sites import load_sites


def test_shipped_targets_and_sites_load(data_root: Path) -> None:
    targets = load_targets(data_root)
    assert {"debian-base", "cpu"} <= set(targets)
    assert [t.name for t in base_chain(targets, "cpu")] == ["debian-base", "cpu"]
    assert targets["cpu"].env == data_root / "envs" / "cpu.yml"
    assert "local" in load_sites(data_root)


def test_typo_key_names_file_line_and_suggestion(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    text = manifest.read_text().replace("builder:", "buidler:")
    manifest.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.startswith("buidler"))
    with pytest.raises(ConfigError) as info:
        load_targets(root)
    message = str(info.value)
    assert message.startswith(f"{manifest}:{line}: buidler: unknown key")
    assert "did you mean 'builder'?" in message
    assert "\n" not in message


def test_bad_choice_and_wrong_type(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("arch: x86_64", "arch: x86-64"))
    with pytest.raises(ConfigError, match=r"cpu.yaml:3: arch: 'x86-64' is not one of.*x86_64"):
        load_targets(root)
    manifest.write_text(manifest.read_text().replace("arch: x86-64", "arch: [x86_64]"))
    with pytest.raises(ConfigError, match=r"arch: must be a string, got a list"):
        load_targets(root)


def test_unknown_base_and_cycle(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("base: debian-base", "base: debian-bse"))
    with pytest.raises(ConfigError, match="base target 'debian-bse' does not exist.*debian-base"):
        load_targets(root)
    manifest.write_text(manifest.read_text().replace("base: debian-bse", "base: cpu"))
    with pytest.raises(ConfigError, match="base chain loops: cpu -> cpu"):
        load_targets(root)


# ------------------------------------------------------------------------ hostile input
SECRET = "root:$6$not-for-your-eyes:19000:0:99999:7:::\n"


def bounded(call: Callable[[], object], *, seconds: float = 10) -> tuple[str, str]:
    """(kind, message) of the error ``call`` raises (``("returned", "")`` if none), run in a
    forked child with a time limit and 1 GiB more memory than it starts with: a read that
    blocks (a FIFO) or grows without end (``/dev/zero``) fails the test instead of hanging or
    exhausting the suite."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)

    def child() -> None:
        limit = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (limit + (1 << 30), resource.RLIM_INFINITY))
        try:
            call()
            writer.send(("returned", ""))
        except BaseException as exc:  # reported to the parent, whatever it is
            writer.send((type(exc).__name__, str(exc)))

    process = context.Process(target=child)
    process.start()
    process.join(seconds)
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError(f"blocked for more than {seconds} s")
    if not reader.poll():
        raise AssertionError(f"died without an answer (exit {process.exitcode}): out of memory?")
    return reader.recv()


def _line(path: Path, start: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if l.startswith(start))


def _secret(tmp_path: Path) -> Path:
    """A host file outside the project that no input may name."""
    path = tmp_path / "shadow"
    path.write_text(SECRET)
    return path


def _refused(root: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        load_targets(root)
    message = str(refused.value)
    assert "\n" not in message and "not-for-your-eyes" not in message
    return message


@pytest.mark.parametrize("key", ["definition", "env"])
def test_an_input_outside_the_project_is_refused_at_its_line(factory_project, tmp_path,
                                                            key: str) -> None:
    root = factory_project()
    secret = _secret(tmp_path)
    manifest = root / "recipes" / "cpu.yaml"
    text = manifest.read_text()
    manifest.write_text(re.sub(rf"^{key}: .*$", f"{key}: {secret}", text, flags=re.M))
    assert _refused(root) == (f"{manifest}:{_line(manifest, key)}: {key}: '{secret}' is outside "
                              f"the project {root}: inputs must be the project's own files")


def test_a_link_out_of_the_project_is_refused(factory_project, tmp_path) -> None:
    root = factory_project()
    (root / "recipes" / "evil.def").symlink_to(_secret(tmp_path))
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("recipes/cpu.def", "recipes/evil.def"))
    assert _refused(root) == (f"{manifest}:{_line(manifest, 'definition')}: definition: "
                              f"'recipes/evil.def' is outside the project {root} (it leads to "
                              f"{tmp_path / 'shadow'}): inputs must be the project's own files")


def test_a_script_linked_out_of_the_project_is_refused(factory_project, tmp_path) -> None:
    root = factory_project()
    script = root / "recipes" / "scripts" / "install-python-packages.sh"
    script.unlink()
    script.symlink_to(_secret(tmp_path))
    manifest = root / "recipes" / "cpu-arm64.yaml"  # the first manifest whose definition runs it
    assert _refused(root) == (f"{manifest}:{_line(manifest, 'definition')}: definition: {script} "
                              f"(run by cpu.def) is outside the project {root} (it leads to "
                              f"{tmp_path / 'shadow'}): inputs must be the project's own files")


def test_a_script_a_script_runs_linked_out_of_the_project_is_refused(factory_project,
                                                                      tmp_path) -> None:
    """Scripts are staged and hashed when a script the definition runs names them: the same
    rule holds for them, checked before they are read."""
    root = factory_project()
    scripts = root / "recipes" / "scripts"
    (scripts / "outer.sh").write_text("#!/bin/sh\nsh \"$(dirname \"$0\")/inner.sh\"\n")
    (scripts / "inner.sh").symlink_to(_secret(tmp_path))
    (root / "recipes" / "t.def").write_text(
        "Bootstrap: localimage\nFrom: {{ BASE_IMAGE }}\n%post\n    sh outer.sh\n")
    manifest = root / "recipes" / "aaa.yaml"  # read first
    manifest.write_text("description: t\nbase: debian-base\ndefinition: recipes/t.def\n")
    assert _refused(root) == (f"{manifest}:{_line(manifest, 'definition')}: definition: "
                              f"{scripts / 'inner.sh'} (run by outer.sh, run by t.def) is outside "
                              f"the project {root} (it leads to {tmp_path / 'shadow'}): inputs "
                              "must be the project's own files")


def test_a_manifest_linked_out_of_the_project_is_refused(factory_project, tmp_path) -> None:
    root = factory_project()
    manifest = root / "recipes" / "evil.yaml"
    manifest.symlink_to(_secret(tmp_path))
    assert _refused(root) == (f"{manifest}: a link to {tmp_path / 'shadow'}, outside the project "
                              f"{root}: inputs must be the project's own files")


@pytest.mark.parametrize("name", ["evil\nx", "my target", "-rf", "modules", "x\x1b[2J"])
def test_a_manifest_name_that_breaks_the_name_rule_is_named(factory_project, name: str) -> None:
    root = factory_project()
    manifest = root / "recipes" / f"{name}.yaml"
    manifest.write_text((root / "recipes" / "cpu.yaml").read_text())
    message = _refused(root)
    if name.isprintable():
        assert message.startswith(f"{manifest}: file name: {name!r} is not a usable target name")
    else:
        assert message.startswith(f"{root / 'recipes'}: file {manifest.name!r}: {name!r} is not "
                                  "a usable target name")


def test_invoke_check_refuses_a_hostile_target_name(factory_project) -> None:
    root = factory_project()
    (root / "recipes" / "x\ntouch PWNED.yaml").write_text(
        (root / "recipes" / "cpu.yaml").read_text())
    project = Project(root=root, settings=load_settings(root, {}))
    with pytest.raises(ConfigError, match="is not a usable target name"):
        check_inputs(project, say=lambda line: None)


def test_hidden_files_in_recipes_are_not_manifests(factory_project) -> None:
    root = factory_project()
    os.symlink("user@host.1234", root / "recipes" / ".#cpu.yaml")  # an editor's lock
    assert "cpu" in load_targets(root)


@pytest.mark.parametrize("special", ["fifo", "zero", "folder"])
def test_only_regular_files_are_read(factory_project, special: str) -> None:
    root = factory_project()
    path = root / "recipes" / "odd.yaml"
    if special == "fifo":
        os.mkfifo(path)
    elif special == "folder":
        path.mkdir()
    else:
        os.symlink("/dev/zero", root / "envs" / "zero.yml")
        manifest = root / "recipes" / "cpu.yaml"
        manifest.write_text(manifest.read_text().replace("envs/cpu.yml", "envs/zero.yml"))
    kind, message = bounded(lambda: load_targets(root))
    assert kind == "ConfigError"
    if special == "zero":
        assert "outside the project" in message, "a link to /dev/zero leads out of the project"
    else:
        kind = "a FIFO" if special == "fifo" else "a folder"
        assert message == (f"{path}: not a regular file ({kind}): inputs are regular files of "
                           f"at most {1 << 20} bytes")


def test_a_fifo_named_by_a_manifest_does_not_block(factory_project) -> None:
    root = factory_project()
    os.mkfifo(root / "envs" / "pipe.yml")
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("envs/cpu.yml", "envs/pipe.yml"))
    assert bounded(lambda: load_targets(root)) == (
        "ConfigError", f"{root / 'envs' / 'pipe.yml'}: not a regular file (a FIFO): inputs are "
                       f"regular files of at most {1 << 20} bytes")


def test_a_huge_input_is_refused(factory_project) -> None:
    root = factory_project()
    definition = root / "recipes" / "cpu.def"
    definition.write_text(definition.read_text() + "#" * (1 << 20) + "\n")
    assert _refused(root).startswith(f"{definition}: larger than {1 << 20} bytes")


@pytest.mark.parametrize("name,line", [("recipes/cpu.yaml", 3), ("recipes/cpu.def", 2),
                                       ("envs/cpu.yml", 2),
                                       ("recipes/scripts/install-python-packages.sh", 2)])
def test_a_byte_that_is_not_utf8_names_file_and_line(factory_project, name: str,
                                                     line: int) -> None:
    root = factory_project()
    path = root / name
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] += b" \xff"
    path.write_bytes(b"\n".join(lines))
    assert _refused(root).startswith(f"{path}:{line}: not UTF-8 text (byte 0xff at offset ")


@pytest.mark.parametrize("value,why", [('"recipes/cpu\\0.def"', "holds a NUL byte"),
                                       ("x" * 5000, "cannot use 'xxx")])
def test_a_path_no_file_can_have_is_refused_at_its_line(factory_project, value, why) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("recipes/cpu.def", value))
    message = _refused(root)
    assert message.startswith(f"{manifest}:{_line(manifest, 'definition')}: definition: ")
    assert why in message


@pytest.mark.parametrize("key, value, message", [
    ("pip_extra_index_urls", "[http://wheels.example.org/rocm]",
     r"pip_extra_index_urls: 'http://wheels.example.org/rocm' is not an https URL"),
    ("pip_extra_index_urls", "[https://user:pw@wheels.example.org/rocm]",
     r"pip_extra_index_urls: '.*' is not an https URL without credentials"),
    ("host_paths", "allow", r"host_paths: 'allow' is not one of: warn, forbid"),
    ("torch", "latest", r"torch: 'latest' is not a torch version"),
])
def test_package_source_and_host_path_keys_are_checked(factory_project, key: str, value: str,
                                                       message: str) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text() + f"{key}: {value}\n")
    with pytest.raises(ConfigError, match=rf"^{manifest}:\d+: {message}"):
        load_targets(root)


@pytest.mark.parametrize("value", ['""', '"  "', '"CPU torch\\nfor CI"', "|\n  two\n  lines"])
def test_a_description_is_one_line(factory_project, value: str) -> None:
    """The description is what module whatis and the catalogue page say the image is."""
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    lines = manifest.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith("description:")]
    manifest.write_text(f"description: {value}\n" + "".join(kept))
    with pytest.raises(ConfigError, match=rf"^{manifest}:1: description: must be one line"):
        load_targets(root)


def test_every_shipped_target_says_what_it_is_in_one_line(data_root) -> None:
    targets = load_targets(data_root)
    assert targets and all(t.description.strip() and "\n" not in t.description
                           for t in targets.values())


def test_lumi_manifests_allow_exactly_the_rocm_index_their_env_spec_adds(data_root) -> None:
    targets = load_targets(data_root)
    for name in ("lumi-rocm", "lumi-rocm-def"):
        env = targets[name].env
        assert env is not None
        extra = [line.split()[-1] for line in env.read_text().splitlines()
                 if "--extra-index-url" in line and not line.lstrip().startswith("#")]
        assert list(targets[name].pip_extra_index_urls) == extra, name

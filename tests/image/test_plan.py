"""Build planning: inputs hash, build order, up-to-date decisions, exact argv."""

from __future__ import annotations

import os

import csv
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from containers.errors import ConfigError, UsageError
from containers.host.sources import PipConfig
from containers.image.identity import chain_hashes
from containers.image.plan import HostFacts, plan_build
from containers.inputs.definition import parse_definition, read_definition
from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings


def data_host(runtime, **changes) -> HostFacts:
    host = HostFacts(runtime=runtime, pip=PipConfig(find_links=("/srv/wheels",),
                                                    cert="/etc/ssl/bundle.pem"),
                     mirror="http://mirror.example/debian", host_paths=("/srv/wheels",),
                     ca_certificates=(Path("/usr/local/share/ca-certificates/site.crt"),),
                     git_revision="abc123", build_date="2026-11-21T00:00:00Z")
    return replace(host, **changes)


def test_the_squashfs_compression_reaches_apptainer_and_cotainr_builds_alike(
        data_root, data_settings, data_runtime) -> None:
    """Through APPTAINER_MKSQUASHFS_ARGS, which Apptainer reads for its own builds and for the
    one cotainr starts. The default (auto) is zstd with Apptainer; a gzip level set on its own
    is gzip at that level; gzip at 9 passes nothing (Apptainer's own). SingularityCE keeps its
    own gzip by default and refuses anything else, in one line naming the setting."""
    targets = load_targets(data_root)
    cases = {(): "-comp zstd -Xcompression-level 1",
             (("squashfs_level", 1),): "-comp gzip -Xcompression-level 1",
             (("squashfs", "gzip"), ("squashfs_level", 4)): "-comp gzip -Xcompression-level 4",
             (("squashfs", "gzip"),): None}
    for name in ("cpu", "lumi-rocm"):
        hashes = set()
        for changes, args in cases.items():
            step = plan_build(targets, name, settings=data_settings.model_copy(update=dict(changes)),
                              host=data_host(data_runtime)).steps[-1]
            assert step.env.get("APPTAINER_MKSQUASHFS_ARGS") == args, changes
            hashes.add(step.inputs_hash)
        assert len(hashes) == 1  # the same files, packed another way
    singularity = data_host(replace(data_runtime, flavour="singularity"))
    default = plan_build(targets, "cpu", settings=data_settings, host=singularity).steps[-1]
    assert "APPTAINER_MKSQUASHFS_ARGS" not in default.env
    for changes, key in ((dict(squashfs_level=1), "squashfs_level"),
                         (dict(squashfs="zstd"), "squashfs")):
        with pytest.raises(ConfigError, match=rf"containers.{key}: .* is passed to mksquashfs "
                                              r"through Apptainer, and the runtime is singularity"):
            plan_build(targets, "cpu", settings=data_settings.model_copy(update=changes),
                       host=singularity)


def test_an_emulated_build_and_its_test_see_an_aarch64_cpu(data_root, data_settings,
                                                          data_runtime, tmp_path,
                                                          monkeypatch) -> None:
    """%post (DeepSpeed's setup.py) and %test import torch, whose aarch64 oneDNN reads MIDR_EL1
    from sysfs: on an x86_64 host both get the described CPU; a native build does not, and the
    bind is host plumbing, not an input (same hash on either host)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    targets = load_targets(data_root)
    bind = f"{tmp_path}/hpc-containers/emulation/aarch64-{os.cpu_count()}cpu" \
           ":/sys/devices/system/cpu:ro"
    here = plan_build(targets, "cpu-arm64", settings=data_settings,
                      host=data_host(data_runtime)).steps[-1]
    assert here.build_argv[here.build_argv.index(bind) - 1] == "--bind"
    assert here.test_argv[:4] == ["apptainer", "test", "--bind", bind]
    assert not (tmp_path / "hpc-containers").exists()  # named only: a --dry-run writes nothing
    native = plan_build(targets, "cpu-arm64", settings=data_settings,
                        host=data_host(data_runtime, arch="aarch64")).steps[-1]
    assert not any("/sys/devices/system/cpu" in word
                   for word in [*native.build_argv, *native.test_argv])
    assert native.inputs_hash == here.inputs_hash


def test_order_hashes_and_exact_commands(data_root, data_settings, data_runtime) -> None:
    targets = load_targets(data_root)
    plan = plan_build(targets, "cpu", settings=data_settings, host=data_host(data_runtime))
    base, cpu = plan.steps
    assert [s.target.name for s in plan.steps] == ["debian-base", "cpu"]
    assert [s.action for s in plan.steps] == ["build", "build"]
    assert chain_hashes(targets, "cpu") == {"debian-base": base.inputs_hash,
                                             "cpu": cpu.inputs_hash}
    assert cpu.inputs["base"] == base.inputs_hash
    images = data_settings.images_dir
    assert base.build_argv == [
        "apptainer", "build", "--force", "--notest", "--fakeroot",
        "--build-arg", f"INPUTS_HASH={base.inputs_hash}", "--build-arg", "TOOL_VERSION=0.1.0",
        "--build-arg", "GIT_REVISION=abc123", "--build-arg", "BUILD_DATE=2026-11-21T00:00:00Z",
        "--build-arg", "MIRROR=http://mirror.example/debian",
        str(images / f".debian-base.sif.{base.short_hash}.partial"),
        str(base.workdir / "definition.def")]
    context = data_settings.tmp_dir / f"cpu-{cpu.short_hash}" / "context"
    assert f"BUILD_CONTEXT={context}" in cpu.build_argv
    assert f"BASE_IMAGE={images / 'debian-base.sif'}" in cpu.build_argv
    assert cpu.build_argv[-4:] == ["--bind", "/srv/wheels",
                                   str(images / f".cpu.sif.{cpu.short_hash}.partial"),
                                   str(cpu.workdir / "definition.def")]
    assert "HOST_PATHS=/srv/wheels:/var/cache/containers-pip" in cpu.build_argv  # + the pip mount
    assert cpu.test_argv == ["apptainer", "test", str(cpu.partial)]
    assert cpu.env == {"APPTAINER_TMPDIR": str(data_settings.tmp_dir / f"cpu-{cpu.short_hash}" /
                                               "tmp"),
                       "APPTAINER_MKSQUASHFS_ARGS": "-comp zstd -Xcompression-level 1"}
    assert cpu.staged["requirements.txt"].splitlines()[0] == "torch==2.13.0"
    assert "cert = /opt/build-context/pip-cert.pem" in cpu.staged["pip.conf"]
    assert "find-links = /srv/wheels" in cpu.staged["pip.conf"]
    # the install script the definition names
    assert set(cpu.copied) == {"ca-certificates/site.crt", "pip-cert.pem",
                               "install-python-packages.sh"}
    assert set(cpu.inputs["scripts"]) == {"install-python-packages.sh"}
    assert base.staged == {} and base.copied == {}  # debian-base uses no build context


def test_hash_ignores_host_plumbing_but_not_content(data_root, data_settings,
                                                    data_runtime) -> None:
    targets = load_targets(data_root)
    one = plan_build(targets, "cpu", settings=data_settings, host=data_host(data_runtime))
    other_host = data_host(data_runtime, mirror="http://other/debian", git_revision="def",
                           build_date="2030-01-01T00:00:00Z", host_paths=())
    two = plan_build(targets, "cpu", settings=data_settings, host=other_host)
    assert [s.inputs_hash for s in one.steps] == [s.inputs_hash for s in two.steps]
    three = plan_build(targets, "cpu", settings=data_settings, host=data_host(data_runtime),
                       cli_args={"VENV": "/opt/other"})
    assert three.steps[0].inputs_hash == one.steps[0].inputs_hash
    assert three.steps[1].inputs_hash != one.steps[1].inputs_hash
    assert "VENV=/opt/other" in three.steps[1].build_argv


def test_up_to_date_and_not_needed(data_root, data_settings, data_runtime) -> None:
    targets = load_targets(data_root)
    hashes = chain_hashes(targets, "cpu")
    data_settings.images_dir.mkdir(parents=True)
    (data_settings.images_dir / "cpu.sif").write_bytes(b"sif")
    host = data_host(data_runtime, built_hashes={"cpu": hashes["cpu"]})
    plan = plan_build(targets, "cpu", settings=data_settings, host=host)
    assert [s.action for s in plan.steps] == ["not-needed", "up-to-date"]
    assert plan.pending == ()
    forced = plan_build(targets, "cpu", settings=data_settings, host=host, force=True)
    assert [s.action for s in forced.steps] == ["build", "build"]
    stale = plan_build(targets, "cpu", settings=data_settings,
                       host=data_host(data_runtime, built_hashes={"cpu": "0" * 64}))
    assert [s.action for s in stale.steps] == ["build", "build"]


def test_build_arg_errors(data_root, data_settings, data_runtime) -> None:
    targets = load_targets(data_root)
    with pytest.raises(ConfigError, match="build argument 'VENVV' is not used by the definition"):
        plan_build(targets, "cpu", settings=data_settings, host=data_host(data_runtime),
                   cli_args={"VENVV": "/x"})
    with pytest.raises(ConfigError, match=r"debian-base.def:3: MIRROR: build argument "
                                          r"\{\{ MIRROR \}\} has no value"):
        plan_build(targets, "debian-base", settings=data_settings,
                   host=data_host(data_runtime, mirror=None))


def _build_args(argv: list[str]) -> dict[str, str]:
    """The build arguments as Apptainer reads them: each --build-arg value is a CSV record."""
    pairs = [field for flag, value in zip(argv, argv[1:]) if flag == "--build-arg"
             for field in next(csv.reader([value]))]
    return dict(pair.split("=", 1) for pair in pairs)


def test_paths_with_spaces_and_quotes_survive(tmp_path: Path, data_root, data_runtime) -> None:
    settings = load_settings(tmp_path, {"tmp_dir": str(tmp_path / "build tmp, #1 +=@%!~"),
                                        "images_dir": str(tmp_path / "my images")})
    wheels = ["/srv/my wheels", "/srv/it's \"odd\" $HOME"]
    host = data_host(data_runtime, host_paths=tuple(wheels))
    cpu = plan_build(load_targets(data_root), "cpu", settings=settings, host=host).steps[1]
    context = settings.tmp_dir / f"cpu-{cpu.short_hash}" / "context"
    args = _build_args(cpu.build_argv)
    assert args["BUILD_CONTEXT"] == str(context)
    assert args["BASE_IMAGE"] == str(settings.images_dir / "debian-base.sif")
    assert args["HOST_PATHS"].split(":") == [*wheels, "/var/cache/containers-pip"]
    assert f'"BUILD_CONTEXT={context}"' in cpu.build_argv  # the comma: CSV-quoted for Apptainer
    assert cpu.build_argv[-6:-2] == ["--bind", wheels[0], "--bind", wheels[1]]


def test_definition_setup_creates_every_bind_destination(tmp_path: Path, data_root) -> None:
    """cpu.def's %setup, as Apptainer renders and runs it (sh), makes each HOST_PATHS folder."""
    wheels = ["/srv/my wheels", "/srv/it's \"odd\" $HOME `x` \\n", "/srv/ lead and trail "]
    rendered = parse_definition(read_definition(data_root / "recipes" / "cpu.def").render(
        {"BASE_IMAGE": "/b.sif", "BUILD_CONTEXT": "/ctx", "HOST_PATHS": ":".join(wheels)}))
    setup = rendered.section("setup")
    assert setup is not None
    rootfs = tmp_path / "root fs"
    subprocess.run(["sh", "-euc", setup.body], check=True, timeout=30,
                   env={"PATH": "/usr/bin:/bin", "APPTAINER_ROOTFS": str(rootfs)})
    made = sorted(str(p.relative_to(rootfs)) for p in rootfs.rglob("*"))
    assert made == sorted(["srv", *(w[1:] for w in wheels)])
    empty = parse_definition(read_definition(data_root / "recipes" / "cpu.def").render(
        {"BASE_IMAGE": "/b.sif", "BUILD_CONTEXT": "/ctx"})).section("setup")
    subprocess.run(["sh", "-euc", empty.body], check=True, timeout=30,
                   env={"PATH": "/usr/bin:/bin", "APPTAINER_ROOTFS": str(tmp_path / "none")})
    assert not (tmp_path / "none").exists()  # the default (no host paths) makes nothing


@pytest.mark.parametrize("tmp_dir", ["build $HOME", "a`b`", "it's", "glob*", "new\nline"])
def test_context_apptainer_would_expand_is_refused(tmp_dir: str, tmp_path: Path, data_root,
                                                   data_runtime) -> None:
    settings = load_settings(tmp_path, {"tmp_dir": str(tmp_path / tmp_dir)})
    with pytest.raises(ConfigError, match=r"invoke.yaml: containers.tmp_dir: the build context "
                                          r".* holds .*%files"):
        plan_build(load_targets(data_root), "cpu", settings=settings,
                   host=data_host(data_runtime))


@pytest.mark.parametrize("path", ["/srv/a,b", "/srv/a:b"])
def test_host_path_bind_cannot_carry_is_refused(path: str, data_root, data_settings,
                                                data_runtime) -> None:
    with pytest.raises(ConfigError, match=f"HOST_PATHS: host folder '{path}' holds '.', which "
                                          "apptainer --bind cannot carry"):
        plan_build(load_targets(data_root), "cpu", settings=data_settings,
                   host=data_host(data_runtime, host_paths=("/srv/ok", path)))
    # A target whose definition binds nothing does not care.
    plan_build(load_targets(data_root), "debian-base", settings=data_settings,
               host=data_host(data_runtime, host_paths=(path,)))


MULTISTAGE = Path(__file__).with_name("multistage.def")


def multistage_project(root: Path) -> Path:
    """``root`` with a ``multistage`` target whose definition is the test-only two-stage file."""
    shutil.copy(MULTISTAGE, root / "recipes" / "multistage.def")
    (root / "recipes" / "multistage.yaml").write_text(
        "description: two stages, a file copied from the first into the final one (test only)\n"
        "definition: recipes/multistage.def\n")
    return root


def test_multi_stage_definition_is_planned_and_passed_through(factory_project, data_settings,
                                                              data_runtime) -> None:
    root = multistage_project(factory_project())
    definition = root / "recipes" / "multistage.def"
    original = definition.read_bytes()
    step = plan_build(load_targets(root), "multistage", settings=data_settings,
                      host=data_host(data_runtime),
                      cli_args={"BASE_IMAGE": "/images/debian-base.sif"}).steps[0]
    # Apptainer reads the stages of the file as written, the tool's labels after them (to the
    # final stage's); the file itself is left as it is
    labels = ("%labels\n    containers.target multistage\n"
              f"    containers.inputs-hash {step.inputs_hash}\n    containers.tool-version 0.1.0\n"
              "    containers.git-revision abc123\n"
              "    containers.build-date 2026-11-21T00:00:00Z\n")
    assert step.build_argv[-1] == str(step.workdir / "definition.def")
    assert step.definition == original.decode() + labels
    assert definition.read_bytes() == original
    assert step.inputs["definition"] == original.decode()
    assert "--fakeroot" in step.build_argv  # the build stage has a %post
    assert step.test_argv == ["apptainer", "test", str(step.partial)]  # the final stage's %test
    args = _build_args(step.build_argv)
    assert args["BASE_IMAGE"] == "/images/debian-base.sif" and "MESSAGE" not in args


def test_multi_stage_files_of_every_stage_are_staged(factory_project, data_settings,
                                                     data_runtime) -> None:
    root = multistage_project(factory_project())
    definition = root / "recipes" / "multistage.def"
    definition.write_text(definition.read_text().replace(
        "%post\n", "%files\n    \"{{ BUILD_CONTEXT }}\" /opt/build-context\n%post\n    sh "
        "/opt/build-context/install-python-packages.sh /opt/venv\n", 1))
    (root / "recipes" / "multistage.yaml").write_text(
        (root / "recipes" / "multistage.yaml").read_text() + "env: envs/cpu.yml\n")
    step = plan_build(load_targets(root), "multistage", settings=data_settings,
                      host=data_host(data_runtime),
                      cli_args={"BASE_IMAGE": "/images/debian-base.sif"}).steps[0]
    # the build stage's %files and scripts are staged as a single-stage definition's are
    assert "requirements.txt" in step.staged and "install-python-packages.sh" in step.copied
    assert "BUILD_CONTEXT" in _build_args(step.build_argv)


def test_plan_refuses_a_pip_source_the_manifest_does_not_allow(factory_project, data_settings,
                                                               data_runtime) -> None:
    root = factory_project()
    env = root / "envs" / "cpu.yml"
    env.write_text(env.read_text().replace("      - numpy\n", "      - numpy\n      - "
                                           "--index-url http://evil.example/simple\n"))
    with pytest.raises(ConfigError, match=rf"^{env}:\d+: dependencies.pip: --index-url replaces "
                                          "the package index"):
        plan_build(load_targets(root), "cpu", settings=data_settings,
                   host=data_host(data_runtime))


@pytest.mark.parametrize("key", ["INPUTS_HASH", "GIT_REVISION", "BUILD_DATE", "TOOL_VERSION",
                                 "TARGET", "BASE_IMAGE", "BUILD_CONTEXT", "HOST_PATHS"])
def test_provenance_and_staged_args_cannot_be_given(key, data_root, data_settings,
                                                    data_runtime) -> None:
    """The tool's own values are never replaced: labels and record would lie, the hash miss it."""
    with pytest.raises(UsageError, match=rf"^--build-arg: {key} is the tool's own build "
                                         "argument"):
        plan_build(load_targets(data_root), "cpu", settings=data_settings,
                   host=data_host(data_runtime), cli_args={key: "fake"})


def test_a_given_base_image_of_a_baseless_target_is_hashed(factory_project, data_settings,
                                                           data_runtime) -> None:
    root = multistage_project(factory_project())
    one, two = (plan_build(load_targets(root), "multistage", settings=data_settings,
                           host=data_host(data_runtime), cli_args={"BASE_IMAGE": image}
                           ).steps[0] for image in ("/a.sif", "/b.sif"))
    assert one.inputs_hash != two.inputs_hash


def test_host_paths_forbid_is_enforced_by_the_build_plan(factory_project, data_settings,
                                                         data_runtime) -> None:
    root = factory_project()
    definition = root / "recipes" / "cpu.def"
    definition.write_text(definition.read_text().replace(
        "%files\n", '%files\n    "{{ BUILD_CONTEXT }}/../../../../etc/shadow" /opt/shadow\n', 1))
    plan_build(load_targets(root), "cpu", settings=data_settings, host=data_host(data_runtime))
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text() + "host_paths: forbid\n")
    with pytest.raises(ConfigError, match=r"%files: reads host paths outside the build context: "
                       r"\{\{ BUILD_CONTEXT \}\}/\.\./\.\./\.\./\.\./etc/shadow; the manifest "
                       r"forbids them"):
        plan_build(load_targets(root), "cpu", settings=data_settings,
                   host=data_host(data_runtime))


def test_the_plan_judges_the_examples_as_check_does(factory_project, data_settings,
                                                    data_runtime) -> None:
    """``invoke build --dry-run`` and ``invoke check`` disagreed: the plan never judged the
    examples. An example the manifest names that cannot run is refused by both, in the same
    words; the default (left out) is accepted by both."""
    from containers.inputs import validate
    from tests.fixtures.data import pin_torch

    root = factory_project()
    pin_torch(root, "2.5.1+rocm6.2")
    host = data_host(data_runtime)
    plan_build(load_targets(root), "lumi-rocm", settings=data_settings, host=host)
    manifest = root / "recipes" / "lumi-rocm.yaml"
    manifest.write_text(manifest.read_text() + "examples: [fsdp]\n")
    report = validate.check_project(root, target="lumi-rocm", tool_args=())
    with pytest.raises(ConfigError) as planned:
        plan_build(load_targets(root), "lumi-rocm", settings=data_settings, host=host)
    assert [str(e) for e in report.errors] == [str(planned.value)]
    assert "example 'fsdp' needs torch >= 2.6" in str(planned.value)


def test_a_cotainr_env_without_torch_is_tested_without_torch(factory_project, data_settings,
                                                             data_runtime) -> None:
    from tests.inputs.test_compat import _cotainr_target

    root = factory_project()
    _cotainr_target(root, "r-env.yml")
    host = data_host(data_runtime, cotainr="/usr/bin/cotainr")
    step = plan_build(load_targets(root), "mine", settings=data_settings, host=host).steps[-1]
    assert step.test_argv is not None and "import torch" not in " ".join(step.test_argv)
    assert step.test_argv[-3:] == ["python", "-c",
                                   "import sys; print('python', sys.version.split()[0], 'ok')"]


def test_an_ngc_tag_build_arg_plans_with_the_declared_torch_unknown(factory_project,
                                                                    data_settings,
                                                                    data_runtime) -> None:
    """A manifest declaring torch 2.5 cannot name fsdp, until --build-arg NGC_TAG builds on
    another base: its torch is then unknown (a warning, not a verdict on a wrong version)."""
    root = factory_project()
    manifest = root / "recipes" / "olivia-cuda.yaml"
    manifest.write_text(manifest.read_text().replace("torch: 2.8.0a0", "torch: 2.5.0")
                        + "examples: [fsdp]\n")
    host = data_host(data_runtime)
    with pytest.raises(ConfigError, match=r"example 'fsdp' needs torch >= 2.6"):
        plan_build(load_targets(root), "olivia-cuda", settings=data_settings, host=host)
    step = plan_build(load_targets(root), "olivia-cuda", settings=data_settings, host=host,
                      cli_args={"NGC_TAG": "24.10-py3"}).steps[-1]
    assert step.target.torch_unknown and step.target.torch_unknown.startswith(
        "--build-arg NGC_TAG=24.10-py3 builds on another base")


FIXTURE_DEFINITIONS = Path(__file__).resolve().parents[1] / "fixtures" / "definitions"


def test_apps_without_post_are_built_with_fakeroot(factory_project, data_settings,
                                                   data_runtime) -> None:
    """Apptainer runs an install step in the image for every app (its post step), as for a
    %post: a definition with %app* sections and no %post gets --fakeroot all the same."""
    root = factory_project()
    shutil.copy(FIXTURE_DEFINITIONS / "apps-no-post.def", root / "recipes" / "apps.def")
    (root / "recipes" / "apps.yaml").write_text("description: apps (test only)\n"
                                                "definition: recipes/apps.def\n")
    step = plan_build(load_targets(root), "apps", settings=data_settings,
                      host=data_host(data_runtime),
                      cli_args={"BASE_IMAGE": "/images/debian-base.sif"}).steps[0]
    assert "--fakeroot" in step.build_argv

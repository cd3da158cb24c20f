"""The architecture reader (ELF headers recorded from real images' python) and the arch guard on
recorded build records; no Apptainer needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError, StateError
from containers.image import arch
from containers.batch.request import JobRequest
from containers.prove.registry import kind_of

#: First 20 bytes of /usr/bin/python3.11 in images/cpu.sif (Debian bookworm amd64).
X86_64_PYTHON = bytes.fromhex("7f454c46020101000000000000000000 02003e00".replace(" ", ""))
#: First 20 bytes of /usr/bin/python3.11 in images/cpu-arm64.sif (Debian bookworm arm64).
AARCH64_PYTHON = bytes.fromhex("7f454c46020101000000000000000000 0200b700".replace(" ", ""))
#: A big-endian s390x header: byte order is read from the header, not assumed.
S390X = bytes.fromhex("7f454c46020201000000000000000000 00020016".replace(" ", ""))


def test_reads_the_architecture_from_the_elf_header() -> None:
    assert arch.elf_arch(X86_64_PYTHON) == "x86_64"
    assert arch.elf_arch(AARCH64_PYTHON + b"\0" * 44) == "aarch64"
    assert arch.elf_arch(S390X) == "s390x"


@pytest.mark.parametrize("header", [b"", b"#!/bin/sh\n" * 3, X86_64_PYTHON[:19],
                                    X86_64_PYTHON[:5] + b"\x07" + X86_64_PYTHON[6:],
                                    X86_64_PYTHON[:18] + b"\x99\x99"])
def test_anything_else_is_refused_not_guessed(header: bytes) -> None:
    with pytest.raises(arch.NotElf):
        arch.elf_arch(header)


def binfmt(tmp_path: Path, *, text: str | None) -> Path:
    (tmp_path / "status").write_text("enabled\n")
    if text is not None:
        (tmp_path / "qemu-aarch64").write_text(text)
    return tmp_path


ENABLED = ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n"
           "offset 0\n")


def test_emulation_needs_a_mounted_enabled_entry_with_the_f_flag(tmp_path: Path) -> None:
    assert arch.emulation("aarch64", binfmt(tmp_path, text=ENABLED)) is None
    assert "not mounted" in arch.emulation("aarch64", tmp_path / "none")
    assert "qemu-user-static" in arch.emulation("aarch64", tmp_path / "none")
    assert "disabled" in arch.emulation("aarch64", binfmt(tmp_path, text="disabled\n"))
    assert "F flag" in arch.emulation(
        "aarch64", binfmt(tmp_path, text=ENABLED.replace("PF", "P")))
    (tmp_path / "qemu-aarch64").unlink()
    assert "no qemu-aarch64" in arch.emulation("aarch64", tmp_path)


def test_this_machine_runs_what_it_emulates(tmp_path: Path) -> None:
    assert arch.machine_arches("x86_64", binfmt(tmp_path, text=ENABLED)) == ("x86_64", "aarch64")
    assert arch.machine_arches("x86_64", tmp_path / "none") == ("x86_64",)


def test_the_guard_trusts_the_record_not_the_name(tmp_path: Path) -> None:
    image = tmp_path / "olivia-cuda.sif"  # named for Olivia, recorded as x86_64
    image.write_bytes(b"not an image")
    recorded = arch.recorded_arch({"arch": "x86_64"}, image)
    assert recorded == "x86_64"
    with pytest.raises(StateError) as caught:
        arch.check_arch(recorded, ("aarch64",), image=image, where="site olivia",
                        doing="publishing")
    message = str(caught.value)
    assert "\n" not in message and "x86_64 image" in message and "site olivia runs aarch64" \
        in message
    arch.check_arch("aarch64", ("aarch64",), image=image, where="site olivia", doing="running")
    arch.check_arch("aarch64", None, image=image, where="site x", doing="running")


def test_no_recorded_architecture_and_none_readable_is_refused(tmp_path: Path) -> None:
    image = tmp_path / "cpu.sif"
    image.write_bytes(b"random")
    for record in ({}, {"arch": "amd64"}, {"arch": None}):
        with pytest.raises(StateError, match="names no architecture"):
            arch.recorded_arch(record, image)


# ------------------------------------------------------------------ plans and sites (the repo's)
from containers.app import build as app_build  # noqa: E402
from containers.host.runtime import Runtime  # noqa: E402
from containers.image.identity import chain_hashes  # noqa: E402
from containers.image.plan import HostFacts, plan_build  # noqa: E402
from tests.fixtures.data import load_targets  # noqa: E402
from containers.inputs.settings import load_settings  # noqa: E402
from containers.inputs.sites import load_sites  # noqa: E402
from tests.fixtures import ROOT  # noqa: E402

RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")


def test_the_arm64_base_is_a_foreign_root_then_an_apptainer_build(tmp_path: Path) -> None:
    targets = load_targets(ROOT)
    settings = load_settings(ROOT, {"images_dir": str(tmp_path / "images"),
                                    "tmp_dir": str(tmp_path / "tmp")})
    plan = plan_build(targets, "cpu-arm64", settings=settings,
                      host=HostFacts(runtime=RUNTIME, mirror="http://mirror.test/debian"))
    base, cpu = plan.steps
    assert (base.target.name, cpu.target.name) == ("debian-base-arm64", "cpu-arm64")
    argv = base.build_argv
    root = str(base.workdir / "rootfs")
    assert argv[:7] == ["sh", str(base.workdir / "context" / "foreign-root.sh"), "arm64",
                        "bookworm", "http://mirror.test/debian", root, "--"]
    assert argv[7:9] == ["apptainer", "build"] and f"FOREIGN_ROOT={root}" in argv
    assert "foreign-root.sh" in base.copied
    assert base.inputs["arch"] == cpu.inputs["arch"] == "aarch64"
    # The mirror and the work folder locate inputs; they do not change the image.
    other = plan_build(targets, "cpu-arm64", settings=settings,
                       host=HostFacts(runtime=RUNTIME, mirror="http://other.test/debian"))
    assert other.steps[1].inputs_hash == cpu.inputs_hash


def test_a_foreign_build_without_emulation_is_refused_but_planned(monkeypatch) -> None:
    target = load_targets(ROOT)["cpu-arm64"]
    monkeypatch.setattr(app_build, "host_arch", lambda: "x86_64")
    monkeypatch.setattr(app_build, "emulation", lambda a: "binfmt_misc is not mounted: install")
    with pytest.raises(ConfigError) as caught:
        app_build.foreign_build(target, dry_run=False)
    assert "cannot emulate it" in str(caught.value) and "\n" not in str(caught.value)
    shown = app_build.foreign_build(target, dry_run=True)
    assert "invoke job --workload build --target cpu-arm64" in shown
    monkeypatch.setattr(app_build, "emulation", lambda a: None)
    assert "under qemu emulation" in app_build.foreign_build(target, dry_run=False)
    monkeypatch.setattr(app_build, "host_arch", lambda: "aarch64")
    assert app_build.foreign_build(target, dry_run=False) is None


def test_sites_say_which_architecture_their_nodes_run() -> None:
    sites, targets = load_sites(ROOT), load_targets(ROOT)
    assert arch.site_arches(sites["olivia"], targets) == ("aarch64",)
    assert arch.site_arches(sites["lumi"], targets) == ("x86_64",)
    assert arch.site_arches(sites["local"], targets)[0] == arch.host_arch()
    assert sites["olivia"].build_partition == "accel"


def test_a_run_is_refused_from_the_recorded_arch(tmp_path: Path) -> None:
    """``invoke smoke``/``train`` check the build record before starting anything: a cpu.sif
    whose record says s390x is refused here in one line, whatever its name says."""
    from containers.app.project import Project
    from containers.app.workloads import guard_run
    settings = load_settings(ROOT, {"images_dir": str(tmp_path)})
    (tmp_path / "cpu.sif").write_bytes(b"stand-in")
    (tmp_path / "cpu.sif.json").write_text('{"arch": "s390x"}')
    project = Project(root=ROOT, settings=settings)
    with pytest.raises(StateError, match=r"cpu.sif is an s390x image \(its build record\) but "
                                         r"this machine runs x86_64.*not running it"):
        guard_run(project, "cpu", RUNTIME)
    (tmp_path / "cpu.sif.json").write_text(f'{{"arch": "{arch.host_arch()}"}}')
    guard_run(project, "cpu", RUNTIME)


def test_publish_is_refused_from_the_recorded_arch(tmp_path: Path, real_runtime) -> None:
    """``invoke publish`` reads the build record's arch before copying anything: an image
    recorded as s390x is not published for the local (this machine's) site, whatever its name."""
    from containers.app.project import Project
    from containers.app.publishing import publish
    from tests.publish.standin import Built
    built = Built.make(tmp_path)
    record = built.settings.provenance_path("cpu")
    project = Project(root=ROOT, settings=built.settings)
    current = chain_hashes(project.targets, "cpu")["cpu"]  # current, so only the arch is wrong
    record.write_text(record.read_text().replace(f'"arch": "{arch.host_arch()}"', '"arch": "s390x"')
                      .replace('"1e9c228c71566f9d"', f'"{current}"'))
    with pytest.raises(StateError, match=r"cpu.sif is an s390x image \(its build record\) but "
                                         r"site local runs .*not publishing it"):
        publish(project, target="cpu", dest=built.dest, version="1.0", skip_checks=True,
                say=lambda line: None)
    assert not (built.dest / "cpu").exists()


def test_the_squashfs_compression_is_read_from_the_superblock() -> None:
    superblock = b"hsqs" + bytes(16) + (6).to_bytes(2, "little") + bytes(74)
    assert arch.compression_of(superblock) == "zstd"
    assert arch.compression_of(superblock[:20] + b"\x01\x00") == "gzip"
    for bad in (b"sqsh" + superblock[4:], superblock[:21], superblock[:20] + b"\x09\x00"):
        with pytest.raises(ValueError):
            arch.compression_of(bad)


def test_a_known_root_offset_reads_the_compression_without_listing_the_sif(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build reads its image's root offset once (``apptainer sif list``) for both the
    architecture and the compression: given it, the superblock is read there directly."""
    from containers.host.runtime import Runtime

    image = tmp_path / "x.sif"
    image.write_bytes(bytes(100) + b"hsqs" + bytes(16) + (6).to_bytes(2, "little") + bytes(74))
    monkeypatch.setattr(arch, "capture", lambda argv, **kw: pytest.fail(f"ran {argv}"))
    assert arch.image_compression(Runtime("apptainer", "apptainer", "1.4"), image, 100) == "zstd"


def test_publish_is_refused_for_a_compression_the_site_cannot_mount(tmp_path: Path) -> None:
    """A build's zstd default published for a site whose runtime is known to read gzip only
    would not mount there: refused before anything is copied, checks skipped or not."""
    from containers.app.project import Project
    from containers.app.publishing import publish
    from tests.publish.standin import Built
    built = Built.make(tmp_path)
    record = built.settings.provenance_path("cpu")
    project = Project(root=ROOT, settings=built.settings)
    current = chain_hashes(project.targets, "cpu")["cpu"]
    record.write_text(record.read_text().replace('"squashfs": "gzip"', '"squashfs": "xz"')
                      .replace('"1e9c228c71566f9d"', f'"{current}"'))
    with pytest.raises(StateError, match=r"cpu.sif's root file system is xz-compressed, and site "
                                         r"local's runtime is known to read gzip and zstd only "
                                         r".*INVOKE_CONTAINERS_SQUASHFS=gzip invoke build "
                                         r"--target cpu --force"):
        publish(project, target="cpu", dest=built.dest, version="1.0", skip_checks=True,
                say=lambda line: None)
    assert not (built.dest / "cpu").exists()
    olivia = load_sites(ROOT)["olivia"]
    assert olivia.squashfs.reads == ("gzip",)  # a GPU site: only what every runtime reads
    arch.check_compression("gzip", olivia, image="x.sif", target="olivia-cuda")
    with pytest.raises(StateError, match="zstd-compressed"):
        arch.check_compression("zstd", olivia, image="x.sif", target="olivia-cuda")


def _recorded_cpu_image(tmp_path: Path, arch_name: str):
    """A project whose images folder holds a stand-in cpu.sif recorded as ``arch_name``."""
    from containers.app.project import Project
    settings = load_settings(ROOT, {"images_dir": str(tmp_path / "images"),
                                    "results_dir": str(tmp_path / "results")})
    settings.images_dir.mkdir()
    settings.image_path("cpu").write_bytes(b"stand-in")
    settings.provenance_path("cpu").write_text(f'{{"arch": "{arch_name}"}}')
    return Project(root=ROOT, settings=settings)


def test_submit_is_refused_from_the_recorded_arch(tmp_path: Path, monkeypatch) -> None:
    """``invoke job --submit`` checks the record before sbatch sees the script: nothing is
    submitted for an image of another architecture than the site's nodes."""
    from containers.app.jobs import job
    import containers.batch.submission as submission
    project = _recorded_cpu_image(tmp_path, "s390x")
    submitted: list = []
    monkeypatch.setattr(submission, "capture", lambda argv, **kw: submitted.append(argv) or "1")
    lines: list[str] = []
    with pytest.raises(StateError, match=r"s390x image \(its build record\).*not submitting it"):
        job(project, JobRequest(kind=kind_of("smoke")), target="cpu", site="local-slurm",
            submit=True,
            say=lines.append)
    assert submitted == []
    # refused before any script exists: none is left (or announced) that looks ready to sbatch
    assert not list((tmp_path / "results" / "jobs").glob("*.sh")) and lines == []


def test_a_submission_that_fails_leaves_no_script_behind(tmp_path: Path, monkeypatch) -> None:
    """sbatch refusing the job: the script the tool named for it is removed (an --out the user
    named is theirs and stays)."""
    from containers.app.jobs import job
    from containers.errors import CommandFailed
    import containers.app.jobs as app_jobs
    import containers.batch.submission as submission
    project = _recorded_cpu_image(tmp_path, "x86_64")

    def refuse(argv, **kw):
        raise CommandFailed("sbatch", returncode=1, output=["sbatch: error: invalid partition"])
    monkeypatch.setattr(submission, "capture", refuse)
    monkeypatch.setattr(app_jobs, "host_arch", lambda: "x86_64")
    with pytest.raises(CommandFailed):
        job(project, JobRequest(kind=kind_of("smoke")), target="cpu", site="local-slurm",
            submit=True,
            say=lambda line: None)
    assert not list((tmp_path / "results" / "jobs").glob("*.sh"))
    mine = tmp_path / "mine.sh"
    with pytest.raises(CommandFailed):
        job(project, JobRequest(kind=kind_of("smoke")), target="cpu", site="local-slurm",
            submit=True,
            out=mine, say=lambda line: None)
    assert mine.is_file()


def test_only_python3_counts_as_the_image_python(tmp_path: Path, monkeypatch) -> None:
    """An image whose only interpreter is Python 2 (``python``, ``python2``) has no python3:
    the probe, smoke and examples run ``python3``, so it is kept as one without Python 3 rather
    than probed and thrown away. The image's shell is faked by the host's, on a PATH of
    scripts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "python2"):
        (bin_dir / name).write_text("#!/bin/sh\necho 'Python 2.7.18'\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(Runtime, "exec_argv", lambda self, *, image, command, **_: [
        "env", f"PATH={bin_dir}", "/bin/sh", *command[1:]])
    assert arch.image_python(RUNTIME, tmp_path / "x.sif") is None
    (bin_dir / "python3").write_text("#!/bin/sh\n")
    (bin_dir / "python3").chmod(0o755)
    assert arch.image_python(RUNTIME, tmp_path / "x.sif") == str(bin_dir / "python3")


@pytest.mark.parametrize("listing", ["", "ID  |GROUP   |LINK    |SIF POSITION (start-end)  |TYPE\n"
                                         "1   |1       |NONE    |32768-33000               |"
                                         "Def.FILE\n", "garbage | x"])
def test_a_sif_without_a_squashfs_root_is_one_line(tmp_path: Path, monkeypatch,
                                                   listing: str) -> None:
    """An empty (or foreign) ``sif list`` was a traceback; it is one line naming the image."""
    from containers.errors import StateError
    from containers.host.runtime import Runtime
    image = tmp_path / "x.sif"
    image.write_bytes(bytes(64))
    monkeypatch.setattr(arch, "capture", lambda argv, **kw: listing)
    runtime = Runtime("apptainer", "apptainer", "1.4")
    with pytest.raises(StateError) as refused:
        arch.squashfs_offset(runtime, image)
    assert str(refused.value).startswith(f"{image}: apptainer sif list shows no squashfs root")
    assert "\n" not in str(refused.value)
    with pytest.raises(StateError, match="its root file system is not a squashfs superblock"):
        arch.image_compression(runtime, image, 0)

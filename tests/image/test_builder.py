"""The builder's pure parts: which build phase a line of apptainer output announces; and what
a build of one target sweeps (only its own leftovers)."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from containers.errors import CommandFailed, StateError
from containers.host.runtime import Runtime
from containers.image.builder import OWNER_LOCK, build_step, leftovers, phase_of, stale_partials
from containers.image.plan import BuildStep
from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings
from tests.fixtures import ROOT
from tests.test_progress import on_a_terminal


@pytest.mark.parametrize("line,phase", [
    ("INFO:    Starting build...", "start"),
    ("I: Retrieving InRelease", "debootstrap"),
    ("INFO:    Running post scriptlet", "post"),
    ("INFO:    Running setup scriptlet", "setup"),
    ("INFO:    Adding labels", "metadata"),
    ("INFO:    Creating SIF file...", "squashfs"),
    ("Collecting torch==2.13.0", "post"),  # no announcement: the phase goes on
])
def test_phase_of(line: str, phase: str) -> None:
    assert phase_of(line, "post") == phase


def _failing_step(tmp_path: Path, name: str) -> BuildStep:
    """A build of ``name`` whose build command fails at once (``false``), after the sweep."""
    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    inputs_hash = "c0ffee" * 10 + "abcd"
    short = inputs_hash[:12]
    return BuildStep(
        target=load_targets(ROOT)["cpu"].model_copy(update={"name": name}),
        inputs_hash=inputs_hash, inputs={}, image=images / f"{name}.sif",
        partial=images / f".{name}.sif.{short}.partial", workdir=tmp_path / f"{name}-{short}",
        build_argv=["false"], test_argv=None, inspect_argv=[], env={}, staged={}, copied={},
        action="build")


def test_a_build_sweeps_only_its_own_partial_images(tmp_path: Path) -> None:
    step = _failing_step(tmp_path, "x")
    images = step.image.parent
    own = images / ".x.sif.0123456789ab.partial"        # a killed build of x
    other = images / ".x.sif.sif.0123456789ab.partial"  # target x.sif's, maybe being written
    lookalike = images / ".x.sif.notahash.partial"
    for path in (own, other, lookalike):
        path.write_bytes(b"half an image")
    assert stale_partials(step) == [own]
    with pytest.raises(CommandFailed, match="apptainer build of x"):
        build_step(step, runtime=Runtime(binary="apptainer", flavour="apptainer",
                                         version="1.4.5"), say=lambda line: None)
    assert not own.exists() and other.exists() and lookalike.exists()


RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")
# A build command that waits for `go`, then writes whether its staged pip.conf is still there.
CHECKS_ITS_CONTEXT = """
import sys, time
from pathlib import Path
staged, go, result = map(Path, sys.argv[1:])
while not go.exists():
    time.sleep(0.05)
result.write_text("present" if staged.is_file() else "gone")
sys.exit(1)
"""


def _checkout_step(checkout: Path, tmp_dir: Path, argv: list[str]) -> BuildStep:
    """A build of target cpu in ``checkout`` (its own images folder) with a shared tmp_dir:
    the work folder the plan names is the same for both checkouts."""
    step = _failing_step(checkout, "cpu")
    workdir = tmp_dir / step.workdir.name
    argv = [a.replace("{workdir}", str(workdir)) for a in argv]
    return dataclasses.replace(step, workdir=workdir, build_argv=argv,
                               staged={"pip.conf": "[global]\n"})


def test_two_checkouts_building_one_target_keep_their_own_work_folders(tmp_path: Path) -> None:
    """Two checkouts share tmp_dir and each holds only its own lock: the second build must not
    remove the first one's work folder (it did: both used tmp_dir/<target>-<hash>)."""
    tmp_dir, go, result = tmp_path / "tmp", tmp_path / "go", tmp_path / "result"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _checkout_step(tmp_path / "a", tmp_dir, [
        sys.executable, "-c", CHECKS_ITS_CONTEXT, "{workdir}/context/pip.conf", str(go),
        str(result)])
    second = _checkout_step(tmp_path / "b", tmp_dir, ["false"])
    errors: list[BaseException] = []

    def build_first() -> None:
        try:
            build_step(first, runtime=RUNTIME, say=lambda line: None)
        except CommandFailed as exc:
            errors.append(exc)

    thread = threading.Thread(target=build_first)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not any(tmp_dir.glob("cpu-*/context/pip.conf")) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(CommandFailed, match="apptainer build of cpu"):
            build_step(second, runtime=RUNTIME, say=lambda line: None)
    finally:
        go.touch()
        thread.join(timeout=30)
    assert result.read_text() == "present", "the second build removed the first one's folder"
    assert len(errors) == 1  # the first build ran to its (planted) end
    assert not [p for p in tmp_dir.iterdir() if p.is_dir()], "a work folder was left behind"


HOLD = """
import sys, time
from pathlib import Path
from containers.locking import acquire
acquire(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _owned(lock: Path, seconds: float) -> subprocess.Popen:
    """A process that takes ``lock`` and holds it for ``seconds`` (or until it is ended)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_leftovers_are_what_no_live_process_owns_and_a_build_sweeps_only_them(
        tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"tmp_dir": str(tmp_path / "tmp"),
                                        "images_dir": str(tmp_path / "images")})
    dead, live = (settings.tmp_dir / f"cpu-{'ab' * 6}-{tag}" for tag in ("deadbeef", "alive123"))
    older = settings.tmp_dir / f"rocm-{'cd' * 6}"  # a folder of the layout before owner locks
    recent = settings.tmp_dir / f"rocm-{'ef' * 6}"  # the same, maybe an older tool's build
    unrelated = settings.tmp_dir / "notes"
    for folder in (dead, live, older, recent, unrelated):
        folder.mkdir(parents=True)
    days_ago = time.time() - 2 * 86400
    os.utime(older, (days_ago, days_ago))
    _owned(dead / OWNER_LOCK, 0).wait()  # its owner took the lock, then died
    holder = _owned(live / OWNER_LOCK, 600)
    settings.images_dir.mkdir()
    partial = settings.images_dir / f".rocm.sif.{'cd' * 6}.partial"
    partial.write_bytes(b"half")
    try:
        found = leftovers(settings)
        assert [(f.path, f.kind) for f in found] == [
            (dead, "work folder"), (older, "work folder"), (partial, "partial image")]
        assert f"owner pid {found[0].owner} is gone" in found[0].describe()
        lines: list[str] = []
        step = dataclasses.replace(_failing_step(tmp_path, "cpu"),
                                   workdir=settings.tmp_dir / f"cpu-{'ab' * 6}")
        with pytest.raises(CommandFailed):
            build_step(step, runtime=RUNTIME, say=lines.append)
        assert not dead.exists() and not older.exists()
        assert live.is_dir() and recent.is_dir() and unrelated.is_dir()
        assert partial.exists()  # rocm's, not cpu's
        assert any(str(dead) in line for line in lines)
    finally:
        holder.kill()
        holder.wait()
    assert [f.path for f in leftovers(settings)] == [live, partial]


# A build on a terminal whose command announces phases (then fails: nothing to install).
BUILD_ON_A_TERMINAL = """
import dataclasses, sys
from pathlib import Path
from containers.errors import CommandFailed
from containers.image.builder import build_step
from tests.image.test_builder import RUNTIME, _failing_step
lines = "import time; print('INFO: Starting build...', flush=True); time.sleep(0.4); " \\
        "print('I: Retrieving InRelease', flush=True); time.sleep(0.6)"
step = dataclasses.replace(_failing_step(Path(sys.argv[1]), "cpu"),
                           build_argv=[sys.executable, "-c", lines + "; raise SystemExit(1)"])
try:
    build_step(step, runtime=RUNTIME, say=print)
except CommandFailed:
    print("failed as planned", flush=True)
"""


def test_a_build_on_a_terminal_shows_a_live_phase_line(tmp_path: Path) -> None:
    drawn = on_a_terminal([sys.executable, "-c", BUILD_ON_A_TERMINAL, str(tmp_path)])
    assert "cpu: build: debootstrap" in drawn, drawn[-2000:]
    assert "failed as planned" in drawn


def test_a_full_disk_while_staging_is_one_line_and_leaves_nothing(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """ENOSPC from the copy of a staged file (simulated at the copy: no disk is filled)."""
    marker = tmp_path / "built"
    step = dataclasses.replace(_failing_step(tmp_path, "x"), build_argv=["touch", str(marker)],
                               staged={"pip.conf": "[global]\n"},
                               copied={"ca-certificates/site.crt": Path(__file__)})

    def full(source, dest, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("containers.image.builder.copy_hashing", full)
    with pytest.raises(StateError, match=r"^cannot stage the build context of x: the disk is "
                                         r"full \(.*x-c0ffee"):
        build_step(step, runtime=RUNTIME, say=lambda line: None)
    assert not marker.exists()  # nothing ran
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("x-")] == []


def test_a_build_of_an_emulated_image_writes_the_cpu_folder_its_plan_only_names(
        tmp_path: Path, monkeypatch) -> None:
    """The plan names the emulation folder (a --dry-run writes nothing, tests/image/test_plan);
    the build writes it before anything runs."""
    from containers.image.emulated import emulated_binds

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("containers.image.emulated.host_arch", lambda: "x86_64")
    step = dataclasses.replace(_failing_step(tmp_path, "x"), target=load_targets(ROOT)[
        "cpu-arm64"].model_copy(update={"name": "x"}))
    (bind,) = emulated_binds("aarch64", write=False)
    folder = Path(bind.split(":")[0])
    assert not folder.exists()
    with pytest.raises(CommandFailed):
        build_step(step, runtime=RUNTIME, say=lambda line: None)
    assert (folder / "online").is_file()


def test_build_output_is_plain_and_a_wrappers_traceback_is_folded(tmp_path: Path) -> None:
    """cotainr writes colour codes even into a pipe and ends a failed build in a Python
    traceback (measured: invoke build --target lumi-rocm off LUMI): the streamed lines carry
    neither, and the error line names cotainr and the FATAL line, not 'apptainer build'."""
    from containers.image.builder import _stream

    step = dataclasses.replace(_failing_step(tmp_path, "x"), target=load_targets(ROOT)[
        "lumi-rocm"].model_copy(update={"name": "x"}))
    raw = ["\x1b[2KCotainr:-: Creating Singularity Sandbox",
           "\x1b[2KSingularitySandbox.err:-: \x1b[38;5;160mFATAL:   Unable to build from "
           "/b.sif\x1b[0m",
           "Traceback (most recent call last):", '  File "cli.py", line 596, in main',
           "    cli.subcommand.execute()",
           "subprocess.CalledProcessError: Command '['singularity']' returned non-zero exit "
           "status 255."]
    shown: list[str] = []
    on_line = _stream(step, "build", shown.append)
    for line in raw:
        on_line(line)
    assert not any("\x1b" in line for line in shown)
    assert [line.split("] ", 1)[1] for line in shown] == [
        "Cotainr:-: Creating Singularity Sandbox",
        "SingularitySandbox.err:-: FATAL:   Unable to build from /b.sif",
        "(a traceback of 3 lines left out) subprocess.CalledProcessError: Command "
        "'['singularity']' returned non-zero exit status 255."]
    failed = CommandFailed("cotainr build of x", returncode=1, output=raw)
    assert str(failed) == ("cotainr build of x failed (exit 1): SingularitySandbox.err:-: "
                           "FATAL:   Unable to build from /b.sif")


def test_a_cotainr_base_image_that_is_not_here_is_refused_first(tmp_path: Path) -> None:
    from containers.errors import ConfigError, UsageError
    from containers.inputs.builders import builder_of

    def missing_base_image(step: BuildStep) -> None:
        builder_of(step.target).check_base_image(step.target, step.inputs)

    target = load_targets(ROOT)["lumi-rocm"]
    step = dataclasses.replace(_failing_step(tmp_path, "x"), target=target,
                               inputs={"base_image": target.base_image})
    with pytest.raises(ConfigError, match=r"lumi-rocm.yaml:\d+: base_image: base image "
                                          r"/appl/.* is not a file on this machine"):
        missing_base_image(step)
    given = dataclasses.replace(step, inputs={"base_image": str(tmp_path / "none.sif")})
    with pytest.raises(UsageError, match=r"^--build-arg BASE_IMAGE: base image .*none.sif"):
        missing_base_image(given)
    missing_base_image(dataclasses.replace(step, inputs={"base_image": __file__}))
    missing_base_image(dataclasses.replace(step, inputs={"base_image": "docker://rocm/x"}))


def test_a_build_says_how_it_uses_the_package_cache(tmp_path: Path) -> None:
    """How the cache is used, said once the build holds it; never its size (walking a big
    cache's files cost seconds, twice per build)."""
    from containers.image.cache import PackageCache

    cache = PackageCache(root=tmp_path / "packages")
    step = dataclasses.replace(_failing_step(tmp_path, "x"), package_cache=cache,
                               cache_use="pip (test)")
    lines: list[str] = []
    with pytest.raises(CommandFailed):
        build_step(step, runtime=RUNTIME, say=lines.append)
    said = [line for line in lines if line.startswith("==> package cache")]
    assert said == ["==> package cache: pip (test)"], lines


def _built_step(tmp_path: Path, test_script: str) -> BuildStep:
    """A build of ``x`` whose build command writes its partial image and whose image test is
    ``test_script`` (sh), run in ``tmp_path``; reading the image (record, arch) is faked."""
    step = _failing_step(tmp_path, "x")
    return dataclasses.replace(step, build_argv=["sh", "-c", f"echo image > '{step.partial}'"],
                               test_argv=["sh", "-c", f"cd '{tmp_path}' && {test_script}"])


@pytest.fixture
def read_image_faked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("containers.image.builder.build_record",
                        lambda step, runtime, seconds: {"labels": {}, "size_bytes": 6})
    monkeypatch.setattr("containers.image.builder.squashfs_offset", lambda runtime, image: 0)
    monkeypatch.setattr("containers.image.builder.checked_arch",
                        lambda step, runtime, offset: "x86_64")
    monkeypatch.setattr("containers.image.builder.image_compression",
                        lambda runtime, image, offset: "zstd")
    monkeypatch.setattr("containers.image.builder.image_python",
                        lambda runtime, image: "/usr/bin/python3")


def test_an_image_without_python_is_kept_unexamined(tmp_path: Path, read_image_faked: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """busybox, scratch or apt-only images have no python: the probe (SBOM, site fit) cannot
    read them, which one line says; the image itself is good and kept."""
    monkeypatch.setattr("containers.image.builder.image_python", lambda runtime, image: None)
    step = _built_step(tmp_path, "true")

    def examine(step: BuildStep, runtime: Runtime, record: dict, say) -> dict:
        raise AssertionError("an image without python is not probed")

    lines: list[str] = []
    record = build_step(step, runtime=RUNTIME, say=lines.append, examine=examine)
    assert step.image.read_text() == "image\n" and record["python"] is None
    assert [line for line in lines if "no Python 3" in line] == [
        "==> x: the image has no Python 3 (python3): not probed (no SBOM, no site fit); smoke "
        "and examples cannot run in it"]


def test_the_image_test_runs_while_the_image_is_examined(tmp_path: Path,
                                                         read_image_faked: None) -> None:
    """Two independent execs of the finished image: the test here passes only if the examine
    has run meanwhile (one after the other, it would wait 10 s for it and fail)."""
    step = _built_step(tmp_path, "for i in $(seq 100); do [ -e examined ] && exit 0; "
                                 "sleep 0.1; done; exit 1")

    def examine(step: BuildStep, runtime: Runtime, record: dict, say) -> dict:
        (tmp_path / "examined").touch()
        return {".extra": "text\n"}

    lines: list[str] = []
    record = build_step(step, runtime=RUNTIME, say=lines.append, examine=examine)
    assert step.image.read_text() == "image\n" and not step.partial.exists()
    assert Path(f"{step.image}.extra").read_text() == "text\n"
    assert record["build_seconds"] < 10 and "==> testing x" in lines


def test_a_failed_image_test_is_the_failure_reported_and_nothing_is_kept(
        tmp_path: Path, read_image_faked: None) -> None:
    """The examine failing too (say, its site fit) does not hide the image's own test."""
    step = _built_step(tmp_path, "sleep 0.5; echo broken; exit 3")

    def examine(step: BuildStep, runtime: Runtime, record: dict, say) -> dict:
        raise CommandFailed("x does not fit site local")

    with pytest.raises(CommandFailed, match="apptainer test of x") as failed:
        build_step(step, runtime=RUNTIME, say=lambda line: None, examine=examine)
    assert failed.value.returncode == 3
    assert not step.image.exists() and not step.partial.exists()
    passing = _built_step(tmp_path, "true")
    with pytest.raises(CommandFailed, match="does not fit site local"):
        build_step(passing, runtime=RUNTIME, say=lambda line: None, examine=examine)
    assert not passing.image.exists()


def test_an_interrupt_while_examining_stops_the_image_test(tmp_path: Path,
                                                           read_image_faked: None) -> None:
    step = _built_step(tmp_path, "echo $$ > test.pid; exec sleep 60")

    def examine(step: BuildStep, runtime: Runtime, record: dict, say) -> dict:
        deadline = time.monotonic() + 20
        pid_file = tmp_path / "test.pid"  # made by the shell's redirection before echo writes
        while not (pid_file.is_file() and pid_file.read_text().endswith("\n")) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        build_step(step, runtime=RUNTIME, say=lambda line: None, examine=examine)
    assert time.monotonic() - started < 30
    pid = int((tmp_path / "test.pid").read_text())
    import psutil
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not step.image.exists() and not step.partial.exists()


def test_the_built_image_never_replaces_a_link_or_a_device(tmp_path: Path,
                                                           tmp_path_factory) -> None:
    """``images/x.sif`` planted as a link (to a file elsewhere, or to /dev/null): the tested
    image is not renamed over it, and what it points to is untouched (issue 42, item 1)."""
    from containers.errors import WriteRefused
    from containers.image.builder import _install

    victim = tmp_path_factory.mktemp("elsewhere") / "passwd"
    victim.write_text("root:x:0:0\n")
    for target in (victim, Path("/dev/null")):
        step = _failing_step(tmp_path, "x")
        step.partial.write_bytes(b"image")
        step.image.unlink(missing_ok=True)
        step.image.symlink_to(target)
        with pytest.raises(WriteRefused, match=f"^{step.image} is a symbolic link; refusing"):
            _install(step, {"sha256": "x"}, {})
        assert step.image.is_symlink() and step.partial.read_bytes() == b"image"
    assert victim.read_text() == "root:x:0:0\n" and Path("/dev/null").is_char_device()

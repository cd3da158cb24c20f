"""Executing a :class:`~containers.image.plan.BuildPlan`: stage, build, test, record, rename.

Only a built and tested image gets its final name; a killed build's work (no owner) is swept."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from containers.files import (atomic_write_text, copy_hashing, refuse_replacing, replace_into,
                              sha256_file)
from containers.host.process import run, start
from containers.host.runtime import Runtime
from containers.errors import CommandFailed, on_disk, plain
from containers.image import provenance, rebuild
from containers.image.arch import image_arch, image_compression, image_python, squashfs_offset
from containers.image.cache import in_use
from containers.image.emulated import emulated_binds
from containers.image.plan import STAGED_DEFINITION, BuildPlan, BuildStep
from containers.inputs.settings import Settings
from containers import records
from containers.records import BuildRecord
from containers.locking import acquire, file_lock, folder_lock, held, holder, release
from containers.progress import phase_line
from containers.report import Say

#: A last test of a built image before it is kept: (step, runtime, its record, say) -> files to
#: write beside the image, by suffix ({".cdx.json": sbom}); raises CommandFailed to refuse it.
Examine = Callable[[BuildStep, Runtime, dict, Say], dict]
#: In each work folder: the lock its build holds while it runs.
OWNER_LOCK = ".owner.lock"
#: A work folder without an owner lock was made by an older version of the tool, perhaps still
#: building in another checkout: it is a leftover only when untouched this long (seconds).
UNOWNED_AGE = 6 * 3600
#: ``<target>-<12 hex>`` (the plan's name; an older build's folder) plus mkdtemp's ending.
_WORKDIR = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]*-[0-9a-f]{12}(-[A-Za-z0-9_]{8})?\Z")
#: A partial image ``.<target>.sif.<12 hex>.partial``: its fixed-length ending names the target.
_PARTIAL = re.compile(r"\.(?P<target>.+)\.sif\.[0-9a-f]{12}\.partial\Z")
_PHASES = (
    (re.compile(r"Running (\w+) scriptlet"), None),
    (re.compile(r"^I: (Retrieving|Validating|Checking|Extracting|Installing|Configuring"
                r"|Unpacking)"), "debootstrap"),
    (re.compile(r"Creating SIF file"), "squashfs"),
    (re.compile(r"Adding (labels|environment|runscript|testscript|help)"), "metadata"),
    (re.compile(r"Starting build"), "start"),
)


def phase_of(line: str, current: str) -> str:
    """The build phase a line of ``apptainer build`` output announces (or the current one)."""
    for pattern, name in _PHASES:
        match = pattern.search(line)
        if match:
            return name or match.group(1)
    return current


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` so cleanup runs when a scheduler or user stops us."""
    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stage(step: BuildStep) -> None:
    context = step.workdir / "context"
    context.mkdir(parents=True, exist_ok=True)
    (step.workdir / "tmp").mkdir(exist_ok=True)
    for name, content in [*step.staged.items(), *step.copied.items()]:
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):  # copied from the host
            copy_hashing(content, context / name)
        else:
            atomic_write_text(context / name, content)
    if step.definition is not None:
        atomic_write_text(step.workdir / STAGED_DEFINITION, step.definition)
    for link, target in step.links.items():
        Path(link).parent.mkdir(parents=True, exist_ok=True)
        Path(link).symlink_to(target)
    emulated_binds(step.target.arch)  # writes the CPU folder an emulated build's plan names


def _partials(images_dir: Path) -> list[tuple[Path, str]]:
    """The partial images in ``images_dir``, with their targets: a glob ``.<target>.sif.*.partial``
    would also take target ``<target>.sif``'s (perhaps while its build writes it)."""
    return [(path, match.group("target")) for path in sorted(images_dir.glob(".*.partial"))
            if (match := _PARTIAL.match(path.name))]


def stale_partials(step: BuildStep) -> list[Path]:
    """The partial images an earlier, killed build of exactly this target left."""
    return [path for path, target in _partials(step.image.parent) if target == step.target.name]


def target_lock(images_dir: Path, target: str) -> Path:
    """The lock a build of ``target`` holds over its image, partial and provenance."""
    return images_dir / f".{target}.lock"


@dataclass(frozen=True)
class Leftover:
    """Something a killed build left on disk, with no live owner."""

    path: Path
    kind: str  # "work folder" or "partial image"
    owner: int | None  # the PID that held it, when it wrote one

    def describe(self) -> str:
        whose = f" (owner pid {self.owner} is gone)" if self.owner else " (no owner)"
        return f"leftover {self.kind}: {self.path}{whose}"


def _ownerless_workdirs(tmp_dir: Path) -> list[Leftover]:
    found = []
    for path in sorted(tmp_dir.iterdir()) if tmp_dir.is_dir() else ():
        if not _WORKDIR.match(path.name) or path.is_symlink() or not path.is_dir():
            continue
        lock = path / OWNER_LOCK
        if not os.path.lexists(lock):  # made by a tool before owner locks: judged by its age
            if time.time() - path.stat().st_mtime > UNOWNED_AGE:
                found.append(Leftover(path, "work folder", None))
        elif not held(lock):
            found.append(Leftover(path, "work folder", holder(lock)))
    return found


def leftovers(settings: Settings) -> list[Leftover]:
    """What killed builds left (nobody holds its lock); the next build removes it."""
    images = settings.images_dir
    locks = [(path, target_lock(images, target)) for path, target in _partials(images)]
    return _ownerless_workdirs(settings.tmp_dir) + [
        Leftover(path, "partial image", holder(lock)) for path, lock in locks if not held(lock)]


def has_residue(settings: Settings) -> bool:
    """Whether any build has a work folder or partial image (a listing is then not kept)."""
    tmp_dir = settings.tmp_dir
    return bool(_partials(settings.images_dir)) or tmp_dir.is_dir() and any(
        _WORKDIR.match(path.name) for path in tmp_dir.iterdir())


def _sweep(step: BuildStep, say: Say) -> None:
    for stale in stale_partials(step):
        say(f"removing leftover partial image of a killed build: {stale}")
        stale.unlink(missing_ok=True)
    tmp_dir = step.workdir.parent
    if not tmp_dir.is_dir():
        return
    with folder_lock(tmp_dir):  # no folder is between its creation and its owner's lock
        for leftover in _ownerless_workdirs(tmp_dir):
            say(f"removing {leftover.describe()}")
            shutil.rmtree(leftover.path, ignore_errors=True)


def _rebased(step: BuildStep, folder: Path) -> BuildStep:
    """``step`` working in its own ``folder`` instead of the pure plan's."""
    old = re.compile(re.escape(str(step.workdir)) + r"(?![A-Za-z0-9._+-])")

    def move(text: str) -> str:
        return old.sub(lambda _: str(folder), text)

    return replace(step, workdir=folder, build_argv=[move(a) for a in step.build_argv],
                   test_argv=[move(a) for a in step.test_argv] if step.test_argv else None,
                   env={k: move(v) for k, v in step.env.items()},
                   links={move(k): move(v) for k, v in step.links.items()},
                   binds=tuple(move(b) for b in step.binds),
                   rendered=move(step.rendered) if step.rendered is not None else None)


@contextmanager
def work_folder(step: BuildStep) -> Iterator[BuildStep]:
    """A fresh work folder for this build alone, owned until removed; yields ``step`` in it."""
    tmp_dir = step.workdir.parent
    with on_disk("make the build's work folder", tmp_dir):
        tmp_dir.mkdir(parents=True, exist_ok=True)
    with folder_lock(tmp_dir):  # a sweep waits until the new folder is owned
        with on_disk("make the build's work folder", tmp_dir):
            folder = Path(tempfile.mkdtemp(prefix=f"{step.workdir.name}-", dir=tmp_dir))
        folder.chmod(0o755)
        owner = acquire(folder / OWNER_LOCK)
    assert owner is not None
    try:
        yield _rebased(step, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        release(owner)


def _stream(step: BuildStep, label: str, say: Say,
            show: Callable[[str], None] = lambda phase: None) -> Callable[[str], None]:
    """Each output line with target, phase and elapsed time, without escape codes (cotainr
    writes colour into a pipe); a Python traceback folded to its exception line."""
    started = time.monotonic()
    state = {"phase": label, "traceback": 0}

    def on_line(raw: str) -> None:
        line = plain(raw)
        if line.startswith("Traceback (most recent call last):"):
            state["traceback"] = 1
            return
        if state["traceback"]:
            if line[:1].isspace() or not line:
                state["traceback"] += 1
                return
            line = f"(a traceback of {state['traceback']} lines left out) {line}"
            state["traceback"] = 0
        if label == "build":
            state["phase"] = phase_of(line, state["phase"])
            show(state["phase"])
        elapsed = int(time.monotonic() - started)
        say(f"[{step.target.name} {state['phase']} {elapsed // 60:02d}:{elapsed % 60:02d}] {line}")

    return on_line


def serial(say: Say) -> Say:
    """``say`` for lines from several threads: one whole line at a time."""
    lock = threading.Lock()

    def said(line: str) -> None:
        with lock:
            say(line)
    return said


def build_record(step: BuildStep, *, runtime: Runtime, seconds: float) -> dict:
    labels = provenance.labels_of(runtime, step.partial)
    own = {key.removeprefix(provenance.LABEL_PREFIX): value for key, value in step.labels.items()}
    return {
        "target": step.target.name,
        "image": str(step.image),
        "inputs_hash": step.inputs_hash,
        "inputs": {k: v for k, v in step.inputs.items()
                   if k not in ("definition", "env")},
        "definition": str(step.target.definition),
        "env_spec": str(step.target.env) if step.target.env else None,
        "tool_version": step.inputs["tool_version"],
        "git_revision": own.get("git-revision", "unknown"),
        "build_date": own.get("build-date", ""),
        "runtime": {"flavour": runtime.flavour, "version": runtime.version},
        "pip_freeze": labels.get(provenance.LABEL_PREFIX + "pip-freeze", "").split(),
        "labels": labels,
        "build_seconds": round(seconds, 1),
        "tested": bool(step.test_argv),
        # what mksquashfs was told beyond Apptainer's own -comp gzip (None: nothing)
        "mksquashfs_args": step.env.get("APPTAINER_MKSQUASHFS_ARGS"),
        "size_bytes": step.partial.stat().st_size,
        "sha256": sha256_file(step.partial),
    }


def build_step(step: BuildStep, *, runtime: Runtime, say: Say,
               examine: Examine | None = None) -> dict:
    """Build, test and install one image; return its provenance record."""
    with file_lock(target_lock(step.image.parent, step.target.name),
                   on_wait=lambda: say(f"waiting for another build of {step.target.name}…")):
        record = provenance.read(step.image.with_name(step.image.name + ".json"),
                                 corrupt_ok=True)  # this build writes it again
        if not step.forced and step.image.is_file() \
                and record.inputs_hash == step.inputs_hash:
            say(f"==> {step.target.name}: built meanwhile by another build ({step.short_hash})")
            return record.as_dict()
        refuse_replacing(step.image)  # before hours of building, and again at the rename
        _sweep(step, say)
        with work_folder(step) as own:
            try:
                return _build_in(own, runtime=runtime, say=say, examine=examine)
            finally:
                own.partial.unlink(missing_ok=True)


def _build_in(step: BuildStep, *, runtime: Runtime, say: Say,
              examine: Examine | None = None) -> dict:
    """Stage, build, test, record and rename, in the build's own work folder."""
    # Step variables may extend the caller's (PATH=<shim>:$PATH for cotainr).
    env = {**os.environ, **{k: os.path.expandvars(v) for k, v in step.env.items()}}
    started = time.time()
    with on_disk(f"stage the build context of {step.target.name}", step.workdir):
        _stage(step)  # a full disk or a read-only tmp_dir: one line; work_folder removes it all
    say(f"==> building {step.target.name} ({step.short_hash}) in {step.workdir}")
    cache = step.package_cache
    with in_use(cache), rebuild.held(step, say) as kept:
        if cache is not None:  # its size: invoke cache (a walk of ~1M files costs seconds)
            say(f"==> package cache: {step.cache_use}")
        with phase_line(f"{step.target.name}: build") as show:
            made_from = rebuild.made_with(kept, step, runtime, env,
                                          _stream(step, "post", say, show))
            if made_from is None:
                run(step.build_argv, env=env, on_line=_stream(step, "build", say, show)).check(
                    f"{step.target.builder} build of {step.target.name}")  # cotainr's: own
        record, extra = _tested(step, runtime=runtime, env=env, say=say, examine=examine)
        record["made_from"] = made_from or "full"
        if kept is not None:
            kept.keep(step, runtime, record["sha256"])
        record["package_cache"] = None if cache is None else {"use": step.cache_use,
                                                              "folder": str(cache.root)}
    record["build_seconds"] = round(time.time() - started, 1)
    _install(step, record, extra)
    say(f"==> {step.target.name}: {step.image} ({record['size_bytes'] / 1e6:.0f} MB, "
        f"{record['build_seconds']:.0f} s)")
    return record


def _tested(step: BuildStep, *, runtime: Runtime, env: dict[str, str], say: Say,
            examine: Examine | None) -> tuple[dict, dict[str, str]]:
    """The built ``.partial`` image tested, read and examined: its record and added files."""
    # %test and the tool's reading (arch, probe) are independent execs, run side by side (~3 s
    # of a rebuild here); a failed test is the verdict, whatever was read; an interrupt stops both
    test, say = None, serial(say)
    if step.test_argv:
        say(f"==> testing {step.target.name}")
        test = start(step.test_argv, env=env, on_line=_stream(step, "test", say))
    what = f"{runtime.flavour} test of {step.target.name}"
    try:
        record = build_record(step, runtime=runtime, seconds=0.0)
        offset = squashfs_offset(runtime, step.partial)  # one `sif list` serves both readings
        record["arch"] = checked_arch(step, runtime, offset)
        # build-arch names the build host (apptainer#2774): the tool's label has the files' arch
        record["labels"][provenance.LABEL_PREFIX + "arch"] = record["arch"]
        record["squashfs"] = image_compression(runtime, step.partial, offset)  # what reads it
        # examine (site fit, SBOM) reads the image with its python: one without is unexamined
        record["python"] = image_python(runtime, step.partial)
        if record["python"] is None:
            say(f"==> {step.target.name}: the image has no Python 3 (python3): not probed (no "
                "SBOM, no site fit); smoke and examples cannot run in it")
        extra = examine(step, runtime, record, say) if examine and record["python"] else {}
    except CommandFailed:
        if test is not None:
            test.wait().check(what)
        raise
    except BaseException:
        if test is not None:
            test.stop()
        raise
    if test is not None:
        test.wait().check(what)
    return record, extra


def _install(step: BuildStep, record: dict, extra: dict[str, str]) -> None:
    """The tested image in its place, then its record: the old ones go first."""
    made = BuildRecord.of(record, source=step.image)  # checked before anything is replaced
    refuse_replacing(step.image)
    for suffix in (".json", *extra):
        step.image.with_name(step.image.name + suffix).unlink(missing_ok=True)
    replace_into(step.partial, step.image)
    records.write(step.image.with_name(step.image.name + ".json"), made, BuildRecord)
    for suffix, text in extra.items():
        atomic_write_text(step.image.with_name(step.image.name + suffix), text)


def checked_arch(step: BuildStep, runtime: Runtime, offset: int | None = None) -> str:
    """The built image's real architecture (:func:`image_arch`); not the target's fails."""
    found = image_arch(runtime, step.partial, offset)
    if found != step.target.arch:
        raise CommandFailed(f"{step.target.name} was built as {found}, but its recipe says "
                            f"{step.target.arch}; the image is not kept",
                            argv=runtime.inspect_argv(step.partial))
    return found


def execute(plan: BuildPlan, *, runtime: Runtime, say: Say,
            examine: Examine | None = None) -> list[dict]:
    records = []
    with sigterm_as_exit():
        for step in plan.steps:
            if step.action != "build":
                say(f"==> {step.target.name}: {step.action} ({step.short_hash})")
                continue
            records.append(build_step(step, runtime=runtime, say=say, examine=examine))
    return records

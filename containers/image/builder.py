"""Executing a :class:`~containers.image.plan.BuildPlan`: stage, build, test, record, rename.

An image appears under its final name only after its build AND its ``apptainer test`` passed;
until then it is a ``.partial`` file beside it. Staged context and Apptainer's temp folder live in
one work folder per build. Both are removed on success, failure, Ctrl-C or SIGTERM; leftovers of a
killed (SIGKILL) build are swept by the next build of the same target, under the same lock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from containers.files import atomic_write_text
from containers.host.process import run
from containers.host.runtime import Runtime
from containers.image import provenance
from containers.image.plan import BuildPlan, BuildStep
from containers.locking import file_lock

Say = Callable[[str], None]
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
    for name, text in step.staged.items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(text, encoding="utf-8")
    for name, source in step.copied.items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, context / name)
    for link, target in step.links.items():
        Path(link).parent.mkdir(parents=True, exist_ok=True)
        Path(link).symlink_to(target)


def stale_partials(step: BuildStep) -> list[Path]:
    """The partial images an earlier, killed build of exactly this target left:
    ``.<target>.sif.<hash>.partial`` with a hash as long as the plan's. A glob
    ``.<target>.sif.*.partial`` would also take target ``<target>.sif``'s partial
    (``.<target>.sif.sif.<hash>.partial``), perhaps while that build is writing it."""
    prefix, suffix = f".{step.target.name}.sif.", ".partial"
    pattern = re.compile(re.escape(prefix) + f"[0-9a-f]{{{len(step.short_hash)}}}"
                         + re.escape(suffix) + r"\Z")
    return sorted(p for p in step.image.parent.glob(f"*{suffix}") if pattern.match(p.name))


def _sweep(step: BuildStep) -> None:
    """Remove what an earlier, killed build of this target may have left."""
    for stale in stale_partials(step):
        stale.unlink(missing_ok=True)
    shutil.rmtree(step.workdir, ignore_errors=True)


def _stream(step: BuildStep, label: str, say: Say) -> Callable[[str], None]:
    started = time.monotonic()
    state = {"phase": label}

    def on_line(line: str) -> None:
        if label == "build":
            state["phase"] = phase_of(line, state["phase"])
        elapsed = int(time.monotonic() - started)
        say(f"[{step.target.name} {state['phase']} {elapsed // 60:02d}:{elapsed % 60:02d}] {line}")

    return on_line


def build_step(step: BuildStep, *, runtime: Runtime, say: Say) -> dict:
    """Build, test and install one image; return its provenance record."""
    # Step variables may extend the caller's (PATH=<shim>:$PATH for cotainr).
    env = {**os.environ, **{k: os.path.expandvars(v) for k, v in step.env.items()}}
    with file_lock(step.image.parent / f".{step.target.name}.lock",
                   on_wait=lambda: say(f"waiting for another build of {step.target.name}…")):
        record = provenance.read(step.image.with_name(step.image.name + ".json"))
        if not step.forced and step.image.is_file() \
                and record.get("inputs_hash") == step.inputs_hash:
            say(f"==> {step.target.name}: built meanwhile by another build ({step.short_hash})")
            return record
        _sweep(step)
        started = time.time()
        try:
            _stage(step)
            say(f"==> building {step.target.name} ({step.short_hash})")
            run(step.build_argv, env=env, on_line=_stream(step, "build", say)).check(
                f"apptainer build of {step.target.name}")
            if step.test_argv:
                say(f"==> testing {step.target.name}")
                run(step.test_argv, env=env, on_line=_stream(step, "test", say)).check(
                    f"apptainer test of {step.target.name}")
            record = provenance.record(step, runtime=runtime,
                                       seconds=time.time() - started)
            step.image.with_name(step.image.name + ".json").unlink(missing_ok=True)
            os.replace(step.partial, step.image)
            atomic_write_text(step.image.with_name(step.image.name + ".json"),
                              json.dumps(record, indent=2) + "\n")
            say(f"==> {step.target.name}: {step.image} ({record['size_bytes'] / 1e6:.0f} MB, "
                f"{record['build_seconds']:.0f} s)")
            return record
        finally:
            step.partial.unlink(missing_ok=True)
            shutil.rmtree(step.workdir, ignore_errors=True)


def execute(plan: BuildPlan, *, runtime: Runtime, say: Say) -> list[dict]:
    """Build every pending step in order; stop at the first failure."""
    records = []
    with sigterm_as_exit():
        for step in plan.steps:
            if step.action != "build":
                say(f"==> {step.target.name}: {step.action} ({step.short_hash})")
                continue
            records.append(build_step(step, runtime=runtime, say=say))
    return records

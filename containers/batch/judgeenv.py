"""The packages ``invoke verdict`` (or ``invoke build``) imports, for a Python on compute nodes of
another architecture. Made once on the login node (the node has no usable ``.venv``, maybe no
package index), into a folder named for what it serves."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import stat
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from containers.errors import CommandFailed, ConfigError, on_disk
from containers.files import atomic_write_text
from containers.host.process import run
from containers.image import provenance
from containers.inputs.envspec import load_target_env
from containers.inputs.recipes import Target
from containers.inputs.settings import Settings
from containers.inputs.versions import major_minor
from containers.records import BuildRecord

#: What ``import tasks`` and :mod:`containers.app.judging` import beyond the standard library,
#: with all their own dependencies (pip runs ``--no-deps``; a test checks the list is closed).
JUDGE_PACKAGES = ("invoke", "PyYAML", "rich", "markdown-it-py", "mdurl", "Pygments", "psutil",
                  "matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "numpy",
                  "packaging", "pillow", "pyparsing", "python-dateutil", "tzdata", "pydantic",
                  "pydantic-core", "annotated-types", "typing-extensions", "typing-inspection")
#: The platforms the wheels may be for: numpy 2.3 and later ship manylinux_2_28 wheels only
#: (glibc 2.28: Debian 10, RHEL 8, Ubuntu 20.04 and later images), older ones manylinux2014.
PLATFORMS = ("manylinux2014", "manylinux_2_28")
#: Where the verdict's and a build job's packages (the tool's closure) are made, in the checkout.
JUDGE_FOLDER = ".judge"
BUILD_FOLDER = ".buildenv"
#: The CPython minor versions a build job's packages are prepared for: those the tool supports
#: (pyproject's requires-python) whose wheels its pinned closure has, for any node Python.
BUILD_PYTHONS = ("3.11", "3.12", "3.13")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
#: The file a prepared folder holds last (written before its rename): the job checks it.
COMPLETE = "COMPLETE"


@dataclass(frozen=True)
class JudgeEnv:
    """The verdict's packages for one architecture, Python and pinned list."""

    folder: Path
    arch: str
    python: str
    requirements: tuple[str, ...]
    #: What the packages are for, in the messages of :func:`prepare`.
    purpose: str = "the batch verdict's packages"


def plan(root: Path, *, arch: str, python: str, reqs: Sequence[str] | None = None,
         under: str = JUDGE_FOLDER, purpose: str = JudgeEnv.purpose) -> JudgeEnv:
    """``<root>/<under>/<arch>-py<X.Y>-<hash>``: one folder per architecture, Python, list; by
    default the verdict's, pinned to the versions this tool runs with, as tested here."""
    pinned = tuple(reqs) if reqs is not None else tuple(
        f"{name}=={importlib.metadata.version(name)}" for name in JUDGE_PACKAGES)
    digest = hashlib.sha256("\n".join(sorted(pinned)).encode()).hexdigest()[:10]
    return JudgeEnv(folder=root / under / f"{arch}-py{python}-{digest}", arch=arch,
                    python=python, requirements=pinned, purpose=purpose)


def build_requirements(python: str, arch: str, *, pyproject: Path = PYPROJECT) -> tuple[str, ...]:
    """The tool's dependencies for ``python`` on ``arch``, pinned as installed here."""
    with on_disk("read the tool's dependencies", pyproject):
        roots = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    env = {"python_version": python, "python_full_version": f"{python}.0",
           "platform_machine": arch, "sys_platform": "linux", "platform_system": "Linux",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    pinned: dict[str, str] = {}
    todo = [(Requirement(text), "") for text in roots]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        key = canonicalize_name(req.name)
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(f"{req.name} (a dependency of this tool, {req}) is not installed "
                              "in this environment, so a build job's packages cannot be pinned: "
                              "pip install -e . here first", path=pyproject) from None
        first = key not in pinned
        pinned[key] = f"{dist.metadata['Name']}=={dist.version}"
        for wanted in ([""] if first else []) + sorted(req.extras):
            todo += [(Requirement(text), wanted) for text in dist.requires or []]
    return tuple(sorted(pinned.values(), key=str.lower))


def build_plans(root: Path, *, arch: str) -> tuple[JudgeEnv, ...]:
    """A build job's packages for ``arch``, one folder per :data:`BUILD_PYTHONS` (pure)."""
    return tuple(plan(root, arch=arch, python=python, under=BUILD_FOLDER,
                      reqs=build_requirements(python, arch), purpose="the build job's packages")
                 for python in BUILD_PYTHONS)


def pip_argv(into: Path, judge: JudgeEnv) -> list[str]:
    """Wheels only, for the node, exactly the pinned list; pip's index as configured here."""
    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--target", str(into), "--only-binary=:all:",
            *(word for platform in PLATFORMS
              for word in ("--platform", f"{platform}_{judge.arch}")),
            "--python-version", judge.python,
            "--implementation", "cp", "--no-deps", *judge.requirements]


def image_python(record: Mapping, conda_specs: Sequence[str] = ()) -> str | None:
    """The image's Python as ``X.Y`` (its record, else its env spec's pin), or None."""
    found = (BuildRecord.of(record).stack or {}).get("python")
    if not found:
        for spec in conda_specs:
            name, _, version = spec.split("::")[-1].strip().partition("=")
            if name.strip().lower() == "python":
                found = version.lstrip("=")
    pair = major_minor(found)
    return f"{pair[0]}.{pair[1]}" if pair else None


def of_image(target: Target, settings: Settings) -> JudgeEnv | None:
    """The verdict's packages for the Python of ``target``'s image; None when unknown."""
    record = provenance.read(settings.provenance_path(target.name), corrupt_ok=True)
    env = load_target_env(target)
    python = image_python(record, tuple(dep.spec for dep in env.conda) if env else ())
    return None if python is None else plan(settings.root, arch=target.arch, python=python)


def _pip(argv: list[str]) -> int:
    done = run(argv, on_line=print)
    return 0 if done.ok else (done.returncode or 1)


def prepare(judge: JudgeEnv, *, say: Callable[[str], None] = print,
            runner: Callable[[list[str]], int] = _pip) -> Path:
    """Make ``judge.folder`` unless it is there: pip into a sibling, then one rename."""
    folder = judge.folder
    if (folder / COMPLETE).is_file():
        return folder
    with on_disk(f"prepare {judge.purpose}", folder.parent):
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        say(f"preparing {judge.purpose} for {judge.arch} Python {judge.python}: "
            f"{os.path.relpath(folder)}")
        argv = pip_argv(tmp, judge)
        code = runner(argv)
        if code != 0:
            raise CommandFailed(" ".join(argv), argv=argv, returncode=code)
        _node_scripts(tmp / "bin")
        atomic_write_text(tmp / COMPLETE, "\n".join(judge.requirements) + "\n")
        try:
            os.rename(tmp, folder)
        except OSError:  # another submit renamed its copy first (the target is not empty)
            if not (folder / COMPLETE).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _node_scripts(folder: Path) -> None:
    """Console scripts pip wrote name this machine's Python: run the node's instead."""
    for script in sorted(folder.glob("*")) if folder.is_dir() else ():
        if script.is_symlink() or not script.is_file():
            continue
        text = script.read_text(encoding="utf-8", errors="replace")
        first, newline, rest = text.partition("\n")
        if first.startswith("#!") and "python" in first:
            atomic_write_text(script, "#!/usr/bin/env python3" + newline + rest,
                              mode=stat.S_IMODE(script.stat().st_mode))

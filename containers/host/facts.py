"""Facts about this machine that plans record or depend on: its architecture (an aarch64 image
cannot be built on x86_64), the checkout's git revision (provenance), where cotainr is."""

from __future__ import annotations

import datetime
import platform
import shutil
import sys
from pathlib import Path

from containers.errors import CommandFailed
from containers.host.process import capture


def git_revision(root: Path) -> str:
    try:
        revision = capture(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=20).strip()
        dirty = capture(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                        timeout=20).strip()
    except CommandFailed:
        return "unknown"
    return revision + ("-dirty" if dirty else "")


def utc_now() -> str:
    """This moment as every record of the tool writes it (``2026-11-22T23:24:19Z``)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_stamp() -> str:
    """This moment in local time as it names a run's results folder or a job script."""
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def host_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def cotainr_binary() -> str:
    """cotainr from PATH, else the one installed beside this Python (a venv not activated)."""
    beside = Path(sys.executable).parent / "cotainr"
    return shutil.which("cotainr") or (str(beside) if beside.is_file() else "cotainr")


def gpu_kinds_here(dev: Path = Path("/dev")) -> set[str]:
    """The GPU kinds whose device files this machine has: ``cuda`` (``/dev/nvidia0``, …),
    ``rocm`` (``/dev/kfd``). A login node usually has neither, so a check that needs the
    target's GPUs can say up front that it cannot run here."""
    kinds = set()
    if any(p.name[len("nvidia"):].isdigit() for p in dev.glob("nvidia[0-9]*")):
        kinds.add("cuda")
    if (dev / "kfd").exists():
        kinds.add("rocm")
    return kinds

"""Facts about the build host a build plan needs: architecture, git revision, package sources,
CA certificates, cotainr, and which images are already built. Gathered once, then planning is pure.
"""

from __future__ import annotations

import dataclasses
import datetime
import platform
import shutil
import sys
from pathlib import Path

from containers.build import provenance
from containers.build.plan import HostFacts
from containers.errors import CommandFailed, ConfigError
from containers.host import sources as hostcfg
from containers.host.process import capture
from containers.host.runtime import Runtime


def git_revision(root: Path) -> str:
    try:
        revision = capture(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=20).strip()
        dirty = capture(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                        timeout=20).strip()
    except CommandFailed:
        return "unknown"
    return revision + ("-dirty" if dirty else "")


def host_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def gather_host(root: Path, images_dir: Path, runtime: Runtime, names: list[str], *,
                mirror_override: str | None) -> HostFacts:
    pip = hostcfg.host_pip_config()
    if pip.cert and not Path(pip.cert).is_file():
        pip = dataclasses.replace(pip, cert=None)
    mirror = mirror_override
    if mirror is None:
        try:
            mirror = hostcfg.debian_mirror()
        except ConfigError:
            mirror = None  # only a debootstrap definition needs it; its render check says so
    return HostFacts(
        runtime=runtime, pip=pip, mirror=mirror, host_paths=tuple(pip.local_paths()),
        ca_certificates=tuple(hostcfg.extra_ca_certificates()),
        git_revision=git_revision(root),
        build_date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        arch=host_arch(), cotainr=cotainr_binary(),
        built_hashes=provenance.built_hashes(images_dir, names))


def cotainr_binary() -> str:
    """cotainr from PATH, else the one installed beside this Python (a venv not activated)."""
    beside = Path(sys.executable).parent / "cotainr"
    return shutil.which("cotainr") or (str(beside) if beside.is_file() else "cotainr")

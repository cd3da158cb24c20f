"""The impure half of planning: gather once what a build plan needs to know about this host
(package sources, CA certificates, git revision, which images are built), so that
:func:`containers.image.plan.plan_build` stays a pure function of its inputs."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from pathlib import Path

from containers.errors import ConfigError
from containers.host import sources as hostcfg
from containers.host.facts import cotainr_binary, git_revision, host_arch, utc_now
from containers.host.runtime import Runtime
from containers.image import provenance
from containers.image.cache import PackageCache
from containers.image.plan import HostFacts


def gather_host(root: Path, images_dir: Path, runtime: Runtime, names: list[str], *,
                mirror_override: str | None, package_cache: PackageCache | None = None
                ) -> HostFacts:
    pip = hostcfg.host_pip_config()
    if pip.cert and not Path(pip.cert).is_file():
        pip = dataclasses.replace(pip, cert=None)
    mirror = mirror_override
    if mirror is None:  # only a debootstrap definition needs one; its render check says so
        with contextlib.suppress(ConfigError):
            mirror = hostcfg.debian_mirror()
    return HostFacts(
        runtime=runtime, pip=pip, mirror=mirror, host_paths=tuple(pip.local_paths()),
        ca_certificates=tuple(hostcfg.extra_ca_certificates()),
        git_revision=git_revision(root),
        build_date=utc_now(),
        arch=host_arch(), cotainr=cotainr_binary(),
        built_hashes=provenance.built_hashes(images_dir, names),
        package_cache=package_cache, debootstrap=shutil.which("debootstrap"),
        environ=dict(os.environ))

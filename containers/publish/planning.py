"""What a publish will do, decided before anything is touched: the request and the plan."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from containers.errors import ConfigError, ImageMissing, StateError, UsageError
from containers.files import not_a_folder, temp_name
from containers.image import provenance as image_provenance
from containers.image.provenance import LABEL_PREFIX
from containers.inputs.flags import GROUP
from containers.inputs.recipes import Target
from containers.inputs.schema import check_name, is_env_name, name_problem
from containers.inputs.settings import Settings
from containers.inputs.sites import Gpu, Site
from containers.publish import catalogue as cat
from containers.publish.modulefile import exec_name
from containers.publish.permissions import Modes, open_parent, resolve_group
from containers.records import BuildRecord
from containers.report import Say


@dataclass(frozen=True)
class PublishRequest:
    """What ``invoke publish`` was asked, checked once, here, before anything is looked at."""

    target: str
    dest: Path
    version: str | None = None
    sign: bool = False
    keep: int | None = None
    group: str | None = None
    force: bool = False
    skip_checks: bool = False

    def __post_init__(self) -> None:
        """The flags' own rules, without looking at the disk (:func:`check_dest` does)."""
        if not self.target:
            raise UsageError("name the image target to publish", flag="--target")
        if problem := name_problem("target", self.target):
            raise UsageError(problem, flag="--target")
        if not self.dest:
            raise UsageError("name the site folder to publish into", flag="--dest")
        object.__setattr__(self, "dest", Path(os.path.abspath(Path(self.dest).expanduser())))
        if self.version is not None:
            cat.validate_version(self.version)
        GROUP("--group", self.group)
        if self.keep is not None and self.keep < 1:
            raise UsageError(f"must be at least 1 (got {self.keep})", flag="--keep")


def check_dest(dest: Path) -> None:
    """Refuse in one line a ``--dest`` that others could write into or swap."""
    if problem := not_a_folder(dest):
        raise UsageError(problem, flag="--dest")
    if dest.exists() and stat.S_IMODE(dest.stat().st_mode) & 0o002:
        raise UsageError(f"{dest} is world-writable: anyone could replace published images; "
                         "publish into a folder only admins can write", flag="--dest")
    if problem := open_parent(dest):
        raise UsageError(problem, flag="--dest")


@dataclass(frozen=True)
class PublishPlan:
    target: Target
    site: Site
    image: Path
    provenance: BuildRecord
    version: str
    dest: Path
    sign: bool
    keep: int | None
    force: bool
    skip_checks: bool
    modes: Modes
    #: Signing key, results folder and the versions it pins (``containers.publish_pinned``).
    settings: Settings
    #: The site's directives of the batch job the catalogue page shows (None: no scheduler).
    batch_preamble: tuple[str, ...] | None = None

    @property
    def gpu(self) -> Gpu:
        return self.target.gpu if self.target.gpu != Gpu.NONE else self.site.gpus.kind

    @property
    def folder(self) -> Path:
        return self.dest / self.target.name

    @property
    def sif(self) -> Path:
        return self.folder / cat.sif_name(self.version)

    @property
    def temp(self) -> Path:
        return temp_name(self.sif, "partial")

    @property
    def module_dir(self) -> Path:
        return self.dest / "modules" / self.target.name

    @property
    def module(self) -> Path:
        return self.module_dir / f"{self.version}.lua"

    @property
    def exec_path(self) -> Path:
        return self.folder / "bin" / exec_name(self.target.name)


#: The caller's review of a version before it is published: (plan, checks, say) -> what the
#: entry records ({"fit", "gate", "stack", "diff"}); raises VerdictFailed to refuse it.
Review = Callable[[PublishPlan, dict, Say], dict]


def plan_publish(request: PublishRequest, *, target: Target, site: Site,
                 settings: Settings, inputs_hash: str | None = None) -> PublishPlan:
    """The plan for ``request``, refusing before any work what could not finish."""
    check_dest(request.dest)
    check_name("target", target.name, path=target.manifest.parent, key="target")
    image = settings.image_path(target.name)
    record = settings.provenance_path(target.name)
    if not image.is_file():
        raise ImageMissing(image, target.name)
    provenance = image_provenance.read(record)
    if not cat.SHA256.match(provenance.sha256 or ""):
        raise StateError(f"{image} has no provenance record with a sha256 ({record}); rebuild "
                         f"it with invoke build --target {target.name} --force")
    if provenance.target != target.name:
        raise StateError(f"{image}: its build record names target {provenance.target}, "
                         f"not {target.name}: rebuild it with invoke build --target {target.name}"
                         " --force")
    _refuse_other_label(image, provenance, target.name)
    built = str(provenance.inputs_hash or "")
    if inputs_hash is not None and built != inputs_hash:
        raise StateError(f"{image} is stale: it was built from inputs {built[:12] or 'unknown'},"
                         f" the target's inputs are now {inputs_hash[:12]}; rebuild it with "
                         f"invoke build --target {target.name} before publishing")
    for key in site.env:
        if not is_env_name(key):
            raise ConfigError("not a usable environment variable name for a module file",
                              path=site.path, line=site.lines.get("env"), key=key)
    gid = (resolve_group(settings.publish_group, named_by="containers.publish_group")
           if request.group is None else resolve_group(request.group, named_by="--group"))
    return PublishPlan(
        target=target, site=site, image=image, provenance=provenance,
        version=request.version or cat.default_version(provenance), dest=request.dest,
        sign=request.sign, keep=request.keep, force=request.force,
        skip_checks=request.skip_checks,
        modes=Modes.of(world_readable=settings.publish_world_readable, gid=gid), settings=settings)


def _refuse_other_label(image: Path, provenance: BuildRecord, target: str) -> None:
    """The image's own ``containers.target`` label must name the target it is published as,
    where the labels are this build's (not a base's)."""
    labels = provenance.labels if isinstance(provenance.labels, dict) else {}
    label = labels.get(LABEL_PREFIX + "target")
    if label != target and labels.get(LABEL_PREFIX + "inputs-hash") == provenance.inputs_hash:
        raise StateError(f"{image}: its label {LABEL_PREFIX}target says {label!r}, not "
                         f"{target!r}, and its build record was edited to say otherwise: "
                         f"rebuild it with invoke build --target {target} --force")

"""What ``invoke publish --keep N`` removes: chosen before the copy, removed after the commit."""

from __future__ import annotations

import os

from containers.errors import StateError
from containers.image.inspect import sbom_path
from containers.publish import catalogue as cat
from containers.publish.planning import PublishPlan
from containers.report import Say


def to_prune(plan: PublishPlan, before: dict) -> list[str]:
    """The versions ``--keep`` removes after this one; one in use is refused, naming why."""
    if plan.keep is None:
        return []
    # the versions once this one is published: a republished version moves to the end
    versions = [e.version for e in cat.entries(before, plan.target.name)
                if e.version != plan.version] + [plan.version]
    gone = cat.select_prune(versions, keep=plan.keep, latest=plan.version)
    uses: dict[str, str] = {}
    default = plan.module_dir / "default"
    linked = os.readlink(default) if default.is_symlink() else ""
    if linked.endswith(".lua") and linked[:-len(".lua")] != cat.latest(before, plan.target.name):
        uses[linked[:-len(".lua")]] = f"the module default: {default} points to it"
    for version in cat.pinned(before, plan.target.name):
        uses[version] = f"pinned in {plan.dest / cat.CATALOGUE_NAME}"
    for version in plan.settings.publish_pinned.get(plan.target.name, ()):
        uses[version] = "pinned in the config: containers.publish_pinned"
    if blocked := [v for v in gone if v in uses]:
        raise StateError(f"--keep {plan.keep} would remove {plan.target.name} {blocked[0]}, "
                         f"which is in use ({uses[blocked[0]]}); nothing was published or "
                         "removed: keep more versions, or unpin it first")
    return gone


def remove_version(plan: PublishPlan, version: str, say: Say) -> None:
    sif = plan.folder / cat.sif_name(version)
    for path in (plan.module_dir / f"{version}.lua", sif.with_name(sif.name + ".sha256"),
                 sbom_path(sif), sif.with_name(f"{version}{cat.DIFF_SUFFIX}"),
                 sif.with_name(f"{version}{cat.DIFF_PAGE_SUFFIX}"), sif):
        if path.exists():
            say(f"  removing {path}")
        path.unlink(missing_ok=True)

"""``invoke cache``: where the package cache builds share is, how big each part is, and
``--prune`` to empty it (see :mod:`containers.image.cache`)."""

from __future__ import annotations

from containers.app.project import Project
from containers.image.cache import PARTS, package_cache_dir, prune as prune_cache, usage
from containers.report import Say, human_bytes, say_line as _print


def package_cache(project: Project, *, prune: bool = False, say: Say = _print) -> None:
    root = package_cache_dir(project.settings.cache_dir)
    say(f"package cache: {root} (containers.cache_dir / INVOKE_CONTAINERS_CACHE_DIR)")
    if prune:
        size, files = prune_cache(root, on_wait=lambda: say("waiting for running builds…"))
        say(f"pruned: {human_bytes(size)} in {files} files removed")
        return
    for part in PARTS:
        size, files = usage(root / part)
        say(f"  {part:<4} {human_bytes(size):>10} in {files} files")
    if kept := sorted((root / "roots").glob("*/root")):
        say(f"  of roots, kept root file systems: {len(kept)} (one per target's inputs but its "
            f"env spec), {root / 'roots'}")

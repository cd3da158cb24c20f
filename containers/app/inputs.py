"""``invoke targets`` and ``invoke check``: what the project defines, and whether it is valid."""

from __future__ import annotations

import os
from pathlib import Path

from containers.app.project import Project
from containers.errors import ContainersError
from containers.image import provenance
from containers.image.plan import CONTEXT_ARGS, PROVENANCE_ARGS, chain_hashes
from containers.inputs import validate
from containers.report import Say, console, say_line as _print, table
from containers.run import launchers


def targets_report(project: Project, *, say: Say = _print) -> None:
    runtime = project.runtime(required=False)
    say(f"runtime: {runtime.label if runtime.version != 'unknown' else 'none found on PATH'}")
    rows = []
    for name, target in sorted(project.targets.items()):
        image = project.settings.image_path(name)
        recorded = provenance.built_hashes(project.settings.images_dir, [name]).get(name)
        try:
            current = chain_hashes(project.targets, name)[name]
        except ContainersError as exc:
            current, state = "", f"invalid: {exc}"
        else:
            state = ("built" if recorded == current else "stale" if recorded
                     else "built (no record)" if image.is_file() else "not built")
        rows.append((name, target.site, target.arch, target.gpu, target.builder,
                     os.path.relpath(image, Path.cwd()), state, current[:12]))
    console().print(table("Image targets", ("target", "site", "arch", "gpu", "builder", "image",
                                            "state", "inputs hash"), rows))


def check_inputs(project: Project, *, target: str | None = None, say: Say = _print) -> None:
    """Validate everything (or one target and what it needs); raise at the first problem."""
    runtime = project.runtime(required=False)
    say(f"runtime: {runtime.label if runtime.version != 'unknown' else 'none found on PATH'}")
    sites, targets = project.sites, project.targets
    names = [project.target(target).name] if target else sorted(targets)
    validate.check_sites(sites, targets)
    for name in names:
        validate.check_target(targets[name], sites, tool_args=(*CONTEXT_ARGS, *PROVENANCE_ARGS))
        chain_hashes(targets, name)  # reads and checks the definition and env spec of each base
        say(f"ok  target {name:<14} {os.path.relpath(targets[name].manifest)}")
    for site in sites.values():
        launchers.for_site(site)  # the profile's launcher is in the registry, fits its scheduler
        say(f"ok  site   {site.name:<14} {os.path.relpath(site.path)}")

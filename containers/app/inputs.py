"""``invoke targets`` and ``invoke check``: what the project defines, and whether it is valid."""

from __future__ import annotations

import os
from pathlib import Path

from containers.app.project import Project
from containers.build import provenance
from containers.build.plan import CONTEXT_ARGS, PROVENANCE_ARGS, chain_hashes
from containers.errors import ConfigError, ContainersError
from containers.inputs.definition import read_definition
from containers.inputs.schema import suggest
from containers.report import Say, console, say_line as _print, table


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


# ------------------------------------------------------------------------------------- check
def check_inputs(project: Project, *, target: str | None = None, say: Say = _print) -> None:
    """Validate everything (or one target and what it needs); raise at the first problem."""
    runtime = project.runtime(required=False)
    say(f"runtime: {runtime.label if runtime.version != 'unknown' else 'none found on PATH'}")
    sites = project.sites
    targets = project.targets
    names = [project.target(target).name] if target else sorted(targets)
    for site in sites.values():
        if site.default_target and site.default_target not in targets:
            raise ConfigError(f"default_target '{site.default_target}' is not a target",
                              path=site.path, line=site.lines.get("default_target"),
                              key="default_target")
    for name in names:
        item = targets[name]
        if item.site not in sites:
            raise ConfigError(f"site '{item.site}' has no profile in sites/"
                              f"{suggest(item.site, list(sites))}", path=item.manifest,
                              line=item.line("site"), key="site")
        chain_hashes(targets, name)
        if item.definition is not None:
            definition = read_definition(item.definition)
            missing = [a for a in definition.missing_args(item.build_args)
                       if a not in CONTEXT_ARGS and a not in PROVENANCE_ARGS]
            if missing:
                raise ConfigError(f"build argument {{{{ {missing[0]} }}}} has no value (no default "
                                  f"in %arguments, none in the manifest's build_args)",
                                  path=item.definition, line=definition.arg_lines.get(missing[0]),
                                  key=missing[0])
        say(f"ok  target {name:<14} {os.path.relpath(item.manifest)}")
    for site in sites.values():
        say(f"ok  site   {site.name:<14} {os.path.relpath(site.path)}")

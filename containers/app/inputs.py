"""``invoke targets`` and ``invoke check``: what the project defines, and whether it is valid.

Both print a table or lines for people, or with ``as_json`` one JSON document for programs (its
shape: docs/results.md, JSON shapes): ``check`` reports every problem of every file in one run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from containers.app.project import Project
from containers.errors import ConfigError, ContainersError, raise_all
from containers.image import builder, provenance
from containers.image.identity import CONTEXT_ARGS, PROVENANCE_ARGS, chain_hashes
from containers.inputs import validate
from containers.inputs.definition import read_definition
from containers.inputs.recipes import Target
from containers.app.targetlist import TARGET_COLUMNS, Listing, show
from containers.report import Say, say_line as _print
from containers.run import launchers

def _runtime_line(project: Project) -> str:
    runtime = project.runtime(required=False)
    return f"runtime: {runtime.label if runtime.version != 'unknown' else 'none found on PATH'}"


def starts_from(target: Target) -> str:
    """What a target's image starts from, so a user can tell a registry-based image (NGC,
    ROCm: ``docker://...``) from one this tool builds from the package index on its own base
    (``target debian-base``)."""
    if target.base:
        return f"target {target.base}"
    if target.base_image:
        return target.base_image
    if target.definition is None:
        return "?"
    try:
        definition = read_definition(target.definition)
    except (OSError, ContainersError):
        return "?"
    header = definition.header
    source = header.get("from") or header.get("mirrorurl") or ""
    for key, value in {**definition.argument_defaults, **target.build_args}.items():
        source = source.replace("{{ " + key + " }}", value)
    return f"{header.get('bootstrap', '?')}: {source}".rstrip(": ")


def target_rows(project: Project) -> list[dict[str, str]]:
    """One row per target: where it runs, how it is built, and whether its image is current."""
    rows = []
    for name, target in sorted(project.targets.items()):
        image = project.settings.image_path(name)
        recorded = provenance.built_hashes(project.settings.images_dir, [name]).get(name)
        try:
            current = chain_hashes(project.targets, name)[name]
        except ContainersError as exc:
            current, state = "", f"invalid: {exc}"
        else:
            corrupt = image.is_file() and provenance.is_corrupt(
                project.settings.provenance_path(name))
            state = ("built" if recorded == current else "stale" if recorded
                     else "built (record unreadable: rebuild with --force)" if corrupt
                     else "built (no record)" if image.is_file() else "not built")
        rows.append(dict(zip(TARGET_COLUMNS, (
            name, target.site, target.arch, target.gpu, target.builder, starts_from(target),
            os.path.relpath(image, Path.cwd()), state, current[:12]))))
    for name, problems in sorted(project.target_problems.items()):  # listed, not hidden
        image = project.settings.image_path(name)
        rows.append(dict(zip(TARGET_COLUMNS, (
            name, "?", "?", "?", "?", "?", os.path.relpath(image, Path.cwd()),
            f"invalid: {' '.join(str(problems[0]).split())}", ""))))
    return sorted(rows, key=lambda row: row["target"])


def target_listing(project: Project) -> Listing:
    """What ``invoke targets`` shows, read afresh: the runtime, the rows, and what killed builds
    left (:func:`containers.app.targetlist.listing` keeps it for the next time)."""
    return Listing(runtime_line=_runtime_line(project), rows=target_rows(project),
                   leftovers=[leftover.describe()
                              for leftover in builder.leftovers(project.settings)],
                   residue=builder.has_residue(project.settings),
                   folders=[str(project.settings.images_dir), str(project.settings.tmp_dir)])


def targets_report(project: Project, *, as_json: bool = False, say: Say = _print) -> None:
    """The targets table (and what killed builds left behind), or a JSON list of the rows."""
    show(target_listing(project), as_json=as_json, say=say)


def _problem(error: ContainersError) -> dict[str, Any]:
    """An error or warning as JSON: where (file, line, key: null when not known) and what."""
    if isinstance(error, ConfigError):
        return {"file": str(error.path) if error.path else None, "line": error.line,
                "key": error.key, "message": error.detail}
    return {"file": None, "line": None, "key": getattr(error, "flag", None),
            "message": str(error)}


def check_inputs(project: Project, *, target: str | None = None, as_json: bool = False,
                 say: Say = _print) -> None:
    """Validate everything (or one target, its bases and every site) and report every problem
    at once: the ok lines (or the JSON document), then every error raised together as
    :class:`~containers.errors.Problems` (exit 1); warnings (host paths, an unknown torch) are
    shown and do not fail the check."""
    report = validate.check_project(
        project.root, target=target, tool_args=(*CONTEXT_ARGS, *PROVENANCE_ARGS),
        # the inputs hash of a target's base chain reads and checks each base's inputs too
        target_checks=(chain_hashes,),
        # the profile's launcher is in the registry and fits its scheduler (its fit: block is
        # checked as the profile loads)
        site_checks=(launchers.for_site,))
    if as_json:
        say(json.dumps({"ok": not report.errors,
                        "errors": [_problem(e) for e in report.errors],
                        "warnings": [_problem(w) for w in report.warnings],
                        "targets": report.ok_targets, "sites": report.ok_sites}, indent=2))
    else:
        _say_report(project, report, say)
    raise_all(report.errors)  # exit 1; with --json stdout holds only the document


def _say_report(project: Project, report: validate.CheckReport, say: Say) -> None:
    say(_runtime_line(project))
    for name in report.ok_targets:
        say(f"ok  target {name:<14} {os.path.relpath(report.targets[name].manifest)}")
    for name in report.ok_sites:
        say(f"ok  site   {name:<14} {os.path.relpath(report.sites[name].path)}")
    for info in report.infos:
        say(f"info: {info}")
    for warning in report.warnings:
        say(f"warning: {warning}")

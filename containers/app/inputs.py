"""``invoke targets`` and ``invoke check``: what the project defines, and whether it is valid."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from containers.errors import ConfigError, ContainersError, raise_all
from containers.files import atomic_write_text, not_yours_alone, read_regular, read_regular_json
from containers.image.cache import cache_problem, default_cache_dir
from containers.report import Say, say_line as _print, show_table

if TYPE_CHECKING:  # loaded when a listing is read afresh, not to show a kept one
    from containers.app.project import Project
    from containers.inputs.recipes import Target

#: The columns of ``invoke targets``; with ``--json`` each target is an object with these keys.
TARGET_COLUMNS = ("target", "site", "arch", "gpu", "builder", "from", "image", "state",
                  "inputs_hash")
#: A file up to this size is known by its content; a larger one (an image, the runtime's
#: program) by its size and times. Also the most a kept listing may hold.
CONTENT_LIMIT = 4 << 20
#: Variables a shell changes on its own that nothing the listing reads depends on.
SHELL_BOOKKEEPING = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES"})
#: The tool's own code: a listing is kept for the code that made it.
PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Listing:
    """What ``invoke targets`` shows, and what it was read from (none: not kept)."""

    runtime_line: str
    rows: list[dict[str, str]]
    leftovers: list[str] = field(default_factory=list)
    depends: list[str] = field(default_factory=list)


def show(listing: Listing, *, as_json: bool = False, say: Say = _print) -> None:
    if as_json:
        say(json.dumps(listing.rows, indent=2))
        return
    say(listing.runtime_line)
    show_table("Image targets", [c.replace("_", " ") for c in TARGET_COLUMNS],
                          [tuple(row.values()) for row in listing.rows])
    for leftover in listing.leftovers:
        say(f"{leftover}; the next build removes it")


def list_targets(config: Mapping[str, Any], root: Path, project: Callable[[], Project], *,
                 as_json: bool = False, environ: Mapping[str, str] = os.environ,
                 say: Say = _print) -> None:
    """``invoke targets``: the kept listing while nothing it read changed, else afresh."""
    store = default_cache_dir(environ) / ("targets-" + _sha(str(root.resolve()))[:16] + ".json")
    env = {k: v for k, v in environ.items() if k not in SHELL_BOOKKEEPING}
    key = _sha(json.dumps([config, env, os.getcwd(), sys.version], sort_keys=True, default=str))
    kept = _kept(store, key)
    if kept is None:
        kept = target_listing(project())
        if kept.depends:
            _keep(store, key, kept, root)
    show(kept, as_json=as_json, say=say)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _digest(path: str) -> str | None:
    """What ``path`` holds now (a folder's names, a file's content), None if unreadable."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return _sha("\0".join(sorted(os.listdir(path))))
        if stat.S_ISREG(info.st_mode) and info.st_size <= CONTENT_LIMIT:
            return hashlib.sha256(read_regular(Path(path), limit=CONTENT_LIMIT)).hexdigest()
    except (OSError, ValueError):
        return None
    return f"{info.st_mode} {info.st_size} {info.st_mtime_ns} {info.st_ctime_ns} {info.st_ino}"


def _kept(store: Path, key: str) -> Listing | None:
    """The listing kept in ``store`` under ``key`` while what it read is unchanged."""
    try:
        info = store.lstat()
        if (not stat.S_ISREG(info.st_mode) or not_yours_alone(store, info)
                or cache_problem(store.parent, parts=False)):
            return None
        kept = read_regular_json(store, limit=CONTENT_LIMIT)
        listing = Listing(**kept["listing"])
        fresh = kept["key"] == key and all(_digest(p) == d for p, d in kept["state"].items())
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    shaped = all(isinstance(v, str) for v in [listing.runtime_line, *listing.leftovers]) and all(
        isinstance(r, dict) and tuple(r) == TARGET_COLUMNS
        and all(isinstance(v, str) for v in r.values()) for r in listing.rows)
    return listing if fresh and shaped else None


def _keep(store: Path, key: str, listing: Listing, root: Path) -> None:
    """Keep ``listing`` with the digests of what it read and of the tool's code."""
    code = sorted(PACKAGE.rglob("*.py"))
    tool = [*map(str, code), *sorted({str(p.parent) for p in code}), str(root / "tasks.py"),
            *(p for p in sys.path if p.endswith("-packages") and os.path.isdir(p))]
    state = {path: _digest(path) for path in [*listing.depends, *tool]}
    try:
        store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not cache_problem(store.parent, parts=False):
            atomic_write_text(store, json.dumps({"key": key, "state": state,
                                                 "listing": asdict(listing)}))
    except (OSError, ContainersError):
        pass  # listed afresh next time: that is all it costs


def _runtime_line(project: Project) -> tuple[str, list[str]]:
    """The runtime line and what it depends on (the program, the folders of PATH)."""
    runtime = project.runtime(required=False)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if runtime.version == "unknown":
        return "runtime: none found on PATH", path
    return f"runtime: {runtime.label}", [runtime.binary, *path]


def starts_from(target: Target) -> str:
    """What a target's image starts from (``docker://...``, ``target debian-base``)."""
    from containers.inputs.definition import read_definition

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
    header = definition.final.header
    source = header.get("from") or header.get("mirrorurl") or ""
    for key, value in {**definition.argument_defaults, **target.build_args}.items():
        source = source.replace("{{ " + key + " }}", value)
    return f"{header.get('bootstrap', '?')}: {source}".rstrip(": ")


def _state(project: Project, name: str, current: str, recorded: str | None) -> str:
    """Whether the image of ``name`` is current: its record's inputs hash against ``current``."""
    from containers.image import provenance

    image = project.settings.image_path(name)
    if recorded:
        return "built" if recorded == current else "stale"
    if not image.is_file():
        return "not built"
    if provenance.is_corrupt(project.settings.provenance_path(name)):
        return "built (record unreadable: rebuild with --force)"
    return "built (no record)"


def target_rows(project: Project) -> list[dict[str, str]]:
    """One row per target: where it runs, how it is built, whether its image is current."""
    from containers.image import provenance
    from containers.image.identity import chain_hashes

    recorded = provenance.built_hashes(project.settings.images_dir, list(project.targets))
    known: dict[str, str] = {}
    rows = []
    for name, target in sorted(project.targets.items()):
        try:
            current = chain_hashes(project.targets, name, known)[name]
        except ContainersError as exc:
            current, state = "", f"invalid: {exc}"
        else:
            state = _state(project, name, current, recorded.get(name))
        rows.append(_row(project, name, (target.site, target.arch, target.gpu, target.builder,
                                         starts_from(target)), state, current))
    for name, problems in sorted(project.target_problems.items()):  # listed, not hidden
        rows.append(_row(project, name, ("?",) * 5,
                         f"invalid: {' '.join(str(problems[0]).split())}", ""))
    return sorted(rows, key=lambda row: row["target"])


def _row(project: Project, name: str, facts: tuple[str, ...], state: str, current: str
         ) -> dict[str, str]:
    image = os.path.relpath(project.settings.image_path(name), Path.cwd())
    return dict(zip(TARGET_COLUMNS, (name, *facts, image, state, current[:12])))


def _read_from(project: Project) -> list[str]:
    settings = project.settings
    files = {settings.provenance_path(name) for name in project.targets}
    folders = {project.root / "recipes", settings.images_dir, settings.tmp_dir}
    for target in project.targets.values():
        files.update(p for p in (target.manifest, target.definition, target.env) if p)
        if target.definition is not None:
            scripts = target.definition.parent / "scripts"
            folders.add(scripts)
            files.update(scripts.iterdir() if scripts.is_dir() else ())
    return sorted(map(str, files | folders))


def target_listing(project: Project) -> Listing:
    """What ``invoke targets`` shows, read afresh, and what it was read from."""
    from containers.image import builder

    rows = target_rows(project)
    runtime_line, runtime = _runtime_line(project)
    leftovers = [leftover.describe() for leftover in builder.leftovers(project.settings)]
    keep = not (leftovers or builder.has_residue(project.settings)
                or any(row["state"].startswith("invalid") for row in rows))
    return Listing(runtime_line=runtime_line, rows=rows, leftovers=leftovers,
                   depends=[*_read_from(project), *runtime] if keep else [])


def _problem(error: ContainersError) -> dict[str, Any]:
    """An error or warning as JSON: where (file, line, key: null when not known) and what."""
    if isinstance(error, ConfigError):
        return {"file": str(error.path) if error.path else None, "line": error.line,
                "key": error.key, "message": error.detail}
    return {"file": None, "line": None, "key": getattr(error, "flag", None),
            "message": str(error)}


def check_inputs(project: Project, *, target: str | None = None, as_json: bool = False,
                 say: Say = _print) -> None:
    """Validate everything (or one target): the ok lines, then every error at once."""
    from containers.image.identity import CONTEXT_ARGS, PROVENANCE_ARGS, chain_hashes
    from containers.inputs import validate
    from containers.run import launchers

    report = validate.check_project(
        project.root, target=target, tool_args=(*CONTEXT_ARGS, *PROVENANCE_ARGS),
        # the inputs hash of a target's base chain reads and checks each base's inputs too
        target_checks=(chain_hashes,),
        # the profile's launcher is registered and fits its scheduler (fit: checked on load)
        site_checks=(launchers.for_site,))
    if as_json:
        say(json.dumps({"ok": not report.errors,
                        "errors": [_problem(e) for e in report.errors],
                        "warnings": [_problem(w) for w in report.warnings],
                        "targets": report.ok_targets, "sites": report.ok_sites}, indent=2))
    else:
        say(_runtime_line(project)[0])
        for name in report.ok_targets:
            say(f"ok  target {name:<14} {os.path.relpath(report.targets[name].manifest)}")
        for name in report.ok_sites:
            say(f"ok  site   {name:<14} {os.path.relpath(report.sites[name].path)}")
        for info in report.infos:
            say(f"info: {info}")
        for warning in report.warnings:
            say(f"warning: {warning}")
    raise_all(report.errors)  # exit 1; with --json stdout holds only the document

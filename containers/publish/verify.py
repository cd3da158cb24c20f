"""``invoke verify``: check a publish folder as a user would trust it."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
from pathlib import Path
from typing import Callable

from containers.errors import CommandFailed, StateError, UsageError, VerdictFailed
from containers.files import (FileRefused, file_type, not_a_folder, read_regular, sha256_file,
                             unsafe_way, walk_nofollow)
from containers.host.runtime import Runtime
from containers.inputs.schema import TEMP_ENDINGS, name_problem
from containers.progress import byte_progress
from containers.publish import catalogue as cat, signing
from containers.publish.modulefile import exec_name
from containers.publish.permissions import mode_problems, open_parent, unsafe_layout
from containers.records import CatalogueEntry
from containers.report import Say, human_bytes, say_line, show_table

COLUMNS = ("target", "version", "latest", "size", "sha256", "signature", "checks", "published",
           "status")


def snapshot(dest: Path) -> dict[str, cat.TargetFolder]:
    """What the publish folder holds, per target, for :func:`catalogue.consistency_problems`."""
    folders: dict[str, cat.TargetFolder] = {}
    for folder in sorted(p for p in dest.iterdir() if p.is_dir() and not p.is_symlink()):
        if folder.name in ("modules", "keys") or folder.name.startswith("."):
            continue
        found = cat.TargetFolder()
        for path in folder.iterdir():
            name = path.name
            if name.startswith("."):
                if name.endswith(TEMP_ENDINGS):
                    found.temps.append(str(path))
            elif name.endswith(".sif") and path.is_file() and not path.is_symlink():
                found.sifs.add(name[:-4])
            elif name.endswith(".sif.sha256"):
                found.checksums.add(name[:-len(".sif.sha256")])
        found.latest_link, found.latest_not_link = _link_state(folder / "latest")
        modules = dest / "modules" / folder.name
        if modules.is_dir():
            found.modules = {p.stem for p in modules.glob("*.lua")}
            found.default_link, found.default_not_link = _link_state(modules / "default")
        wrapper = folder / "bin" / exec_name(folder.name)
        found.has_exec = wrapper.is_file() and os.access(wrapper, os.X_OK)
        folders[folder.name] = found
    return folders


def _link_state(path: Path) -> tuple[str | None, str | None]:
    """(where the link ``path`` points, None), or (None, what it is instead, in words)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None, "is missing"
    if stat.S_ISLNK(mode):
        return os.readlink(path), None
    return None, f"is {file_type(mode)}, not a link"


def _checksum_of(sums: Path) -> tuple[str, str] | None:
    """(sha256, file name) of a ``.sha256`` file, or None when it is not one such line."""
    try:
        return cat.parse_checksum_line(read_regular(sums, limit=4096).decode("utf-8"))
    except (FileRefused, OSError, UnicodeDecodeError):
        return None


def check_entry(dest: Path, entry: CatalogueEntry, runtime: Callable[[], Runtime], *,
                show_progress: bool = True) -> tuple[list[str], str]:
    """Problems with one published version, and its signature cell for the table."""
    path = dest / entry.file
    if not path.is_file():
        return [], "-"  # reported by the consistency check
    problems = []
    # with --json, a JSON document is all that goes to stdout
    with (byte_progress(f"sha256 {entry.file}", path.stat().st_size) if show_progress
          else contextlib.nullcontext(None)) as advance:
        actual = sha256_file(path, progress=advance)
    if actual != entry.sha256:
        problems.append(f"{path}: sha256 {actual[:16]}... does not match the catalogue "
                        f"({entry.sha256[:16]}...): the file is corrupt or was replaced")
    sums = dest / entry.checksum_file
    if sums.is_file() and _checksum_of(sums) != (entry.sha256, path.name):
        problems.append(f"{sums}: does not say '{entry.sha256[:16]}...  {path.name}'")
    if not entry.signed:
        return problems, "unsigned"
    try:
        signing.verify_with_key(runtime(), path, dest / entry.public_key,
                                entry.key_fingerprint)
    except (VerdictFailed, CommandFailed) as exc:
        problems.append(str(exc))
        return problems, "FAILED"
    return problems, entry.key_fingerprint[-16:]


def image_report(dest: Path, target: str, entry: CatalogueEntry, latest: str | None,
                 found: list[str], cell: str, folder_problems: list[str]) -> dict:
    files = (entry.file, entry.checksum_file, entry.module)
    own = [p for p in folder_problems if p.split(":", 1)[0] in files]
    path = dest / entry.file
    return {
        "target": target, "version": entry.version, "path": str(path),
        "latest": entry.version == latest, "size_bytes": entry.size_bytes,
        "sha256": entry.sha256,
        "sha256_ok": path.is_file() and not any(p.startswith(f"{path}: sha256") for p in found),
        "signature": {"-": "missing", "unsigned": "unsigned", "FAILED": "failed"}.get(cell, "ok"),
        "key_fingerprint": entry.key_fingerprint,
        "module_ok": (dest / entry.module).is_file(),
        "checks": "skipped" if entry.checks.skipped else "passed",
        "published": entry.published, "problems": own + found,
    }


def _document(dest: Path, images: list[dict], problems: list[str],
              leftovers: list[str]) -> str:
    return json.dumps({"dest": str(dest), "ok": not problems, "images": images,
                       "problems": problems, "leftovers": leftovers}, indent=2)


def verify(dest: Path | str, *, runtime: Callable[[], Runtime], target: str | None = None,
           as_json: bool = False, say: Say = say_line) -> list[tuple]:
    """:class:`VerdictFailed` naming each problem; ``runtime`` is called only for a signature."""
    if not dest:
        raise UsageError("give the folder that invoke publish wrote", flag="--dest")
    if target is not None and name_problem("target", target):
        raise UsageError(name_problem("target", target), flag="--target")
    dest = Path(os.path.abspath(Path(dest).expanduser()))
    if problem := not_a_folder(dest):
        raise UsageError(problem, flag="--dest")
    try:
        catalogue, folders = _load(dest, target)
    except VerdictFailed as exc:
        if as_json:
            print(_document(dest, [], [str(exc)], []), flush=True)
        raise
    problems = cat.consistency_problems(catalogue, folders)
    runtime = functools.cache(runtime)
    rows, images, entry_problems = [], [], []
    for name, block in sorted(catalogue["targets"].items()):
        for entry in cat.entries(catalogue, name):
            found, signature = check_entry(dest, entry, runtime, show_progress=not as_json)
            entry_problems += found
            image = image_report(dest, name, entry, block["latest"], found, signature, problems)
            images.append(image)
            rows.append((name, image["version"], "yes" if image["latest"] else "",
                         human_bytes(image["size_bytes"]), image["sha256"][:16], signature,
                         image["checks"], image["published"], "FAILED" if found else "ok"))
    problems += entry_problems
    exposed = open_parent(dest)  # anyone could swap the whole folder for their own
    paths = [p for p in walk_nofollow(dest) if not p.is_symlink()]
    own = exposed and not unsafe_way(dest.parent)  # DEST itself: named once, by open_parent
    problems += mode_problems(paths[1:] if own else paths, None)
    if exposed:
        problems.append(exposed)
    temps = [temp for folder in folders.values() for temp in folder.temps]
    if as_json:
        print(_document(dest, images, problems, temps), flush=True)
    else:
        show_table(f"Published images in {dest}", COLUMNS, rows)
        for temp in temps:
            say(f"note: {temp} is a leftover of an interrupted publish (ignored; the next "
                "publish removes it)")
        for problem in problems:
            say(f"problem: {problem}")
    if problems:
        raise VerdictFailed(f"verify found {len(problems)} problem(s) in {dest}: "
                            + "; ".join(problems))
    if not as_json:
        say(f"verify: {len(rows)} published image(s) in {dest}: all ok")
    return rows


def _load(dest: Path, target: str | None) -> tuple[dict, dict[str, cat.TargetFolder]]:
    """The catalogue and the folder's snapshot; :class:`VerdictFailed` when unverifiable."""
    path = dest / cat.CATALOGUE_NAME
    if not path.is_file():
        raise VerdictFailed(f"{path}: no catalogue (nothing was published to {dest})")
    if problem := unsafe_layout(dest):
        raise VerdictFailed(problem)
    try:
        catalogue = cat.load(path)
    except StateError as exc:
        raise VerdictFailed(str(exc)) from exc
    folders = snapshot(dest)
    if target is not None:
        if target not in catalogue["targets"] and target not in folders:
            raise VerdictFailed(f"{target}: nothing published under {dest}")
        catalogue = {**catalogue, "targets": {k: v for k, v in catalogue["targets"].items()
                                              if k == target}}
        folders = {k: v for k, v in folders.items() if k == target}
    return catalogue, folders

"""The published-images catalogue (``<dest>/catalogue.json``) and the layout it describes.

Data: versions, the catalogue's shape and updates, pruning choices, and the consistency rules
``invoke verify`` applies to a snapshot of the folder; :func:`load` is its one reader (the writer
is :mod:`containers.publish.publisher`). The catalogue is the source of truth for what is
published: a version exists for users once its entry is written, and it is written last,
atomically, under the publish lock (``.publish.lock``).

Layout under ``<dest>``::

    catalogue.json                     every target, its versions (oldest first) and `latest`
    <target>/<version>.sif             the image (read-only for users)
    <target>/<version>.sif.sha256      `sha256sum -c` line, made after signing
    <target>/latest -> <version>.sif   relative symlink, replaced atomically
    <target>/bin/<target>-exec         run a command in the loaded module's image
    modules/<target>/<version>.lua     Lmod module file; modules/<target>/default -> <version>.lua
    keys/<FINGERPRINT>.pgp             public key that signed images (for `apptainer key import`)
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from containers.errors import ConfigError, StateError, UsageError

FORMAT = 1
CATALOGUE_NAME = "catalogue.json"
LOCK_NAME = ".publish.lock"
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}\Z")
RESERVED = ("latest", "default", "bin")
TEMP_SUFFIXES = (".partial", ".tmp")


def validate_version(version: str) -> str:
    """Versions become file and module names: letters, digits, ``._+-``; no slashes or spaces."""
    if not _VERSION.match(version) or version in RESERVED or version.endswith(TEMP_SUFFIXES):
        raise UsageError(f"'{version}' is not a usable version: 1-64 characters from letters, "
                         "digits and . _ + -, starting with a letter or digit, not "
                         + ", ".join(RESERVED), flag="--version")
    return version


def default_version(provenance: dict) -> str:
    """``<build date>-<inputs hash[:8]>``, e.g. ``2026.11.21-1e9c228c``: sorts by date, and the
    same build always gets the same version, so publishing it twice is caught."""
    date = str(provenance.get("build_date") or "")[:10]
    try:
        day = datetime.date.fromisoformat(date).strftime("%Y.%m.%d")
    except ValueError as exc:
        raise StateError("the image's provenance has no usable build_date; give --version") \
            from exc
    inputs = str(provenance.get("inputs_hash") or "")[:8]
    return validate_version(f"{day}-{inputs}" if inputs else day)


def sif_name(version: str) -> str:
    return f"{version}.sif"


def checksum_line(sha256: str, version: str) -> str:
    """One ``sha256sum`` line (two spaces: text mode), relative to the target folder."""
    return f"{sha256}  {sif_name(version)}\n"


def parse_checksum_line(text: str) -> tuple[str, str] | None:
    match = re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)\n?", text)
    return (match.group(1), match.group(2)) if match else None


# ----------------------------------------------------------------------------- the catalogue
def empty() -> dict:
    return {"format": FORMAT, "updated": None, "targets": {}}


def load(path: Path) -> dict:
    """The catalogue at ``path`` (an empty one when there is none yet), checked."""
    if not path.exists():
        return empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"catalogue is not valid JSON ({exc}); fix or restore it before "
                          "publishing", path=path) from exc
    return check_format(data, path=str(path))


def check_format(data: Any, *, path: str) -> dict:
    """The loaded catalogue, or a :class:`ConfigError` saying why it cannot be used."""
    if not isinstance(data, dict) or not isinstance(data.get("targets"), dict):
        raise ConfigError("not a catalogue (no 'targets' mapping)", path=path)
    if data.get("format") != FORMAT:
        raise ConfigError(f"catalogue format {data.get('format')!r} is not {FORMAT}", path=path)
    for name, block in data["targets"].items():
        if not isinstance(block, dict) or not isinstance(block.get("versions"), list):
            raise ConfigError(f"target '{name}' has no 'versions' list", path=path, key=name)
    return data


def entries(catalogue: dict, target: str) -> list[dict]:
    return catalogue["targets"].get(target, {}).get("versions", [])


def find(catalogue: dict, target: str, version: str) -> dict | None:
    return next((e for e in entries(catalogue, target) if e["version"] == version), None)


def latest(catalogue: dict, target: str) -> str | None:
    return catalogue["targets"].get(target, {}).get("latest")


def with_entry(catalogue: dict, entry: dict, *, now: str) -> dict:
    """A new catalogue with ``entry`` as its target's newest version and ``latest``; an entry of
    the same version (a forced republish) is replaced, moving to the end."""
    result = copy.deepcopy(catalogue)
    block = result["targets"].setdefault(entry["target"], {"latest": None, "versions": []})
    block["versions"] = [e for e in block["versions"] if e["version"] != entry["version"]]
    block["versions"].append(entry)
    block["latest"] = entry["version"]
    result["updated"] = now
    return result


def without_versions(catalogue: dict, target: str, versions: Iterable[str], *, now: str) -> dict:
    gone = set(versions)
    result = copy.deepcopy(catalogue)
    block = result["targets"][target]
    block["versions"] = [e for e in block["versions"] if e["version"] not in gone]
    result["updated"] = now
    return result


def select_prune(versions: list[str], *, keep: int, latest: str | None) -> list[str]:
    """Versions to remove so the newest ``keep`` remain (``versions`` oldest first); the one
    ``latest`` points to is never removed, even when it is not among the newest. ``keep`` is
    at least 1 (checked once, by :class:`~containers.publish.publisher.PublishRequest`)."""
    newest = set(versions[-keep:])
    return [v for v in versions if v not in newest and v != latest]


# ------------------------------------------------------------------------ consistency (verify)
@dataclass
class TargetFolder:
    """What ``<dest>/<target>`` and ``<dest>/modules/<target>`` hold, as ``verify`` found it."""

    sifs: set[str] = field(default_factory=set)          # versions with a <version>.sif
    checksums: set[str] = field(default_factory=set)     # versions with a .sif.sha256
    modules: set[str] = field(default_factory=set)       # versions with a .lua
    latest_link: str | None = None                       # what `latest` points to
    default_link: str | None = None                      # what modules/<target>/default points to
    has_exec: bool = False
    temps: list[str] = field(default_factory=list)       # leftovers of an interrupted publish


def consistency_problems(catalogue: dict, folders: dict[str, TargetFolder]) -> list[str]:
    """Every way the folder and the catalogue disagree, one line each, naming the file."""
    problems: list[str] = []
    for target in sorted(set(catalogue["targets"]) | set(folders)):
        listed = [e["version"] for e in entries(catalogue, target)]
        found = folders.get(target, TargetFolder())
        pointer = latest(catalogue, target)
        for version in listed:
            if version not in found.sifs:
                problems.append(f"{target}/{sif_name(version)}: listed in the catalogue but "
                                "missing")
            if version not in found.checksums:
                problems.append(f"{target}/{sif_name(version)}.sha256: missing")
            if version not in found.modules:
                problems.append(f"modules/{target}/{version}.lua: missing")
        for version in sorted(found.sifs - set(listed)):
            problems.append(f"{target}/{sif_name(version)}: not in the catalogue")
        if listed and pointer not in listed:
            problems.append(f"catalogue: {target} latest {pointer!r} is not a listed version")
        if listed and found.latest_link != sif_name(pointer or ""):
            problems.append(f"{target}/latest: points to {found.latest_link!r}, the catalogue "
                            f"says {sif_name(pointer or '')!r}")
        if listed and found.default_link != f"{pointer}.lua":
            problems.append(f"modules/{target}/default: points to {found.default_link!r}, "
                            f"expected '{pointer}.lua'")
        if listed and not found.has_exec:
            problems.append(f"{target}/bin/{target}-exec: missing")
    return problems

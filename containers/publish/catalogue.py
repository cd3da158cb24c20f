"""The published-images catalogue (``<dest>/catalogue.json``) and the layout it describes.

:func:`load` is its one reader; a publish writes it last (:mod:`.publisher`).
"""

from __future__ import annotations

import copy
import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from containers.errors import StateError, UsageError
from containers.files import read_json_state
from containers.image.inspect import driver_needed as stack_driver_needed
from containers.inputs.schema import name_problem
from containers.records import BuildRecord, CatalogueEntry, Malformed

FORMAT = 1
CATALOGUE_NAME = "catalogue.json"
#: The catalogue page (containers.publish.page), replaced right after the catalogue.
PAGE_NAME = "index.html"
LOCK_NAME = ".publish.lock"
#: Beside each published image: the diff against the version it replaced, as JSON and a page.
DIFF_SUFFIX = ".diff.json"
DIFF_PAGE_SUFFIX = ".diff.html"
#: The most a catalogue may hold (every entry keeps its image's pip freeze: a few KiB each).
CATALOGUE_LIMIT = 64 << 20
#: A sha256 as hex digits, the way ``sha256sum`` writes it.
SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_FINGERPRINT = re.compile(r"[0-9A-F]{16,64}\Z")


def driver_needed(stack: Mapping | None) -> str | None:
    """The NVIDIA driver series a version's nodes need, from its stack's CUDA runtime."""
    return stack_driver_needed(stack) if stack else None


def validate_version(version: str) -> str:
    """Versions become file and module names: the one name rule, as ``--version``."""
    if problem := name_problem("version", version):
        raise UsageError(problem, flag="--version")
    return version


def default_version(record: Mapping) -> str:
    """``<build date>-<inputs hash[:8]>``: sorted by date, the same for the same build."""
    provenance = BuildRecord.of(record)
    date = str(provenance.build_date or "")[:10]
    try:
        day = datetime.date.fromisoformat(date).strftime("%Y.%m.%d")
    except ValueError as exc:
        raise StateError("the image's provenance has no usable build_date; give --version") \
            from exc
    inputs = str(provenance.inputs_hash or "")[:8]
    version = f"{day}-{inputs}" if inputs else day
    if name_problem("version", version):
        raise StateError(f"the image's provenance makes no usable version ({version!r}: its "
                         "inputs_hash is not hexadecimal); give --version")
    return version


def sif_name(version: str) -> str:
    return f"{version}.sif"


def checksum_line(sha256: str, version: str) -> str:
    """One ``sha256sum`` line (two spaces: text mode), relative to the target folder."""
    return f"{sha256}  {sif_name(version)}\n"


def parse_checksum_line(text: str) -> tuple[str, str] | None:
    match = re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)\n?", text)
    return (match.group(1), match.group(2)) if match else None


def empty() -> dict:
    return {"format": FORMAT, "updated": None, "targets": {}}


def load(path: Path) -> dict:
    """The catalogue at ``path`` (empty if none), checked; unusable: a StateError."""
    data = read_json_state(path, limit=CATALOGUE_LIMIT, missing=empty(),
                           unreadable="cannot read the catalogue: {exc}",
                           invalid="catalogue is not valid JSON ({detail}); fix or restore it "
                                   "before publishing")
    return check_format(data, path=str(path))


def layout_files(target: str, version: str) -> dict[str, str]:
    """The files an entry of ``target`` ``version`` names, relative to the publish folder."""
    sif = f"{target}/{sif_name(version)}"
    return {"file": sif, "checksum_file": f"{sif}.sha256",
            "module": f"modules/{target}/{version}.lua"}


def _signature_problem(entry: CatalogueEntry) -> str | None:
    if entry.signed is False:
        return None
    if entry.signed is None:
        return "signed is not true or false"
    fingerprint = entry.key_fingerprint or ""
    if not _FINGERPRINT.match(fingerprint):
        return "key_fingerprint is not an upper-case hexadecimal fingerprint"
    if entry.public_key != f"keys/{fingerprint}.pgp":
        return f"public_key {entry.public_key!r} is not 'keys/{fingerprint}.pgp'"
    return None


def entry_problem(target: str, entry: Any) -> str | None:
    """Why one entry of ``target`` cannot be trusted (its names become paths), else None."""
    try:
        entry = CatalogueEntry.of(entry)
    except Malformed as exc:
        return exc.problem
    if entry.target != target:
        return f"target {entry.target!r} is not {target!r}"
    if problem := name_problem("version", entry.version):
        return problem
    for key, wanted in layout_files(target, entry.version).items():
        if getattr(entry, key) != wanted:
            return f"{key} {getattr(entry, key)!r} is not {wanted!r}"
    if not SHA256.match(entry.sha256 or ""):
        return "sha256 is not 64 lower-case hexadecimal digits"
    if entry.size_bytes is None:
        return "size_bytes is not a whole number of bytes"
    if entry.checks is None or entry.published is None:
        return "checks is not a mapping or published is not a date"
    return _signature_problem(entry)


def _block_problem(name: str, block: Any) -> tuple[str, str] | None:
    """(where, why) for the first unusable part of one target's block, else None."""
    where = f"target {name!r}"
    if problem := name_problem("target", name):
        return where, problem
    if not isinstance(block, dict) or not isinstance(block.get("versions"), list):
        return where, "has no 'versions' list"
    latest = block.get("latest")
    if latest is not None and name_problem("version", latest):
        return where, f"latest: {name_problem('version', latest)}"
    pinned = block.get("pinned", [])
    if not isinstance(pinned, list):
        return where, "pinned is not a list of versions"
    for version in pinned:
        if name_problem("version", version):
            return where, f"pinned: {name_problem('version', version)}"
    seen: set[str] = set()
    for index, entry in enumerate(block["versions"]):
        version = entry.get("version") if isinstance(entry, dict) else None
        where = f"target {name!r} entry {index} (version {version!r})"
        if problem := entry_problem(name, entry) or ("listed twice" if version in seen else None):
            return where, problem
        seen.add(version)
    return None


def check_format(data: Any, *, path: str) -> dict:
    """The loaded catalogue, or one StateError line naming an entry that cannot be used."""
    if not isinstance(data, dict) or not isinstance(data.get("targets"), dict):
        raise StateError(f"{path}: not a catalogue (no 'targets' mapping); fix or restore it")
    if data.get("format") != FORMAT:
        raise StateError(f"{path}: catalogue format {data.get('format')!r} is not {FORMAT}")
    for name, block in data["targets"].items():
        if found := _block_problem(name, block):
            raise StateError(f"{path}: {found[0]}: {found[1]}; fix or restore the catalogue")
    return data


def layout_link(dest: Path, path: Path) -> bool:
    """Whether ``path`` is ``<target>/latest`` or ``modules/<target>/default``."""
    parts = path.relative_to(dest).parts
    if len(parts) == 2:
        return parts[1] == "latest" and parts[0] not in ("modules", "keys")
    return len(parts) == 3 and parts[0] == "modules" and parts[2] == "default"


def entries(catalogue: dict, target: str) -> list[CatalogueEntry]:
    """The versions of ``target`` in a catalogue :func:`load` checked, oldest first."""
    return [CatalogueEntry.of(entry, source=f"catalogue entry of {target}")
            for entry in catalogue["targets"].get(target, {}).get("versions", [])]


def find(catalogue: dict, target: str, version: str) -> CatalogueEntry | None:
    return next((e for e in entries(catalogue, target) if e.version == version), None)


def latest(catalogue: dict, target: str) -> str | None:
    return catalogue["targets"].get(target, {}).get("latest")


def pinned(catalogue: dict, target: str) -> list[str]:
    """The versions of ``target`` an admin pinned: ``publish --keep`` keeps them."""
    return list(catalogue["targets"].get(target, {}).get("pinned", []))


def with_entry(catalogue: dict, entry: dict, *, now: str, without: Iterable[str] = ()) -> dict:
    """A new catalogue with ``entry`` as its target's newest and ``latest``, less ``without``."""
    result, made = copy.deepcopy(catalogue), CatalogueEntry.of(entry)
    block = result["targets"].setdefault(made.target, {"latest": None, "versions": []})
    gone = {made.version, *without}
    block["versions"] = [e for e in block["versions"]
                         if CatalogueEntry.of(e).version not in gone]
    block["versions"].append(dict(entry))
    block["latest"] = made.version
    result["updated"] = now
    return result


def select_prune(versions: list[str], *, keep: int, latest: str | None) -> list[str]:
    """Versions to remove so the newest ``keep`` remain, never the one ``latest`` points to."""
    newest = set(versions[-keep:])
    return [v for v in versions if v not in newest and v != latest]


@dataclass
class TargetFolder:
    """What ``<dest>/<target>`` and ``<dest>/modules/<target>`` hold, as ``verify`` found it."""

    sifs: set[str] = field(default_factory=set)          # versions with a <version>.sif
    checksums: set[str] = field(default_factory=set)     # versions with a .sif.sha256
    modules: set[str] = field(default_factory=set)       # versions with a .lua
    latest_link: str | None = None                       # what `latest` points to
    default_link: str | None = None                      # what modules/<target>/default points to
    latest_not_link: str | None = None    # what `latest` is when no link (``is a folder, ...``)
    default_not_link: str | None = None   # the same for modules/<target>/default
    has_exec: bool = False
    temps: list[str] = field(default_factory=list)       # leftovers of an interrupted publish


def consistency_problems(catalogue: dict, folders: dict[str, TargetFolder]) -> list[str]:
    """Every way the folder and the catalogue disagree, one line each, naming the file."""
    problems: list[str] = []
    for target in sorted(set(catalogue["targets"]) | set(folders)):
        listed = [e.version for e in entries(catalogue, target)]
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
        for link, wanted, points_to, not_link, says in (
                (f"{target}/latest", sif_name(pointer or ""), found.latest_link,
                 found.latest_not_link, "the catalogue says"),
                (f"modules/{target}/default", f"{pointer}.lua", found.default_link,
                 found.default_not_link, "expected")):
            if listed and points_to != wanted:
                what = (f"points to {points_to!r}" if points_to is not None
                        else not_link or "is missing")
                problems.append(f"{link}: {what}, {says} {wanted!r}")
        if listed and not found.has_exec:
            problems.append(f"{target}/bin/{target}-exec: missing")
    return problems

"""The build host's Debian mirror, read from its apt sources: the one parser of them.

Standard library only: ``scripts/install-apptainer.sh`` runs it before the venv exists. A
source counts when enabled, of type ``deb`` and serving exactly the suite asked for."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

SOURCES_DIR = Path("/etc/apt/sources.list.d")
SOURCES_LIST = Path("/etc/apt/sources.list")
OS_RELEASE = Path("/etc/os-release")


@dataclass(frozen=True)
class Source:
    """One apt source: a deb822 stanza or a one-line entry, with where it was written."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    enabled: bool
    path: Path
    line: int

    def serves(self, suite: str) -> bool:
        return self.enabled and "deb" in self.types and suite in self.suites and bool(self.uris)


def parse_deb822(text: str, path: Path) -> list[Source]:
    """The stanzas of a ``.sources`` file (field names case-insensitive, continuations)."""
    sources: list[Source] = []
    fields: dict[str, str] = {}
    key, start = "", 0
    for number, raw in enumerate([*text.splitlines(), ""], start=1):  # "": the last ends
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                sources.append(Source(
                    types=tuple(fields.get("types", "").split()),
                    uris=tuple(fields.get("uris", "").split()),
                    suites=tuple(fields.get("suites", "").split()),
                    enabled=fields.get("enabled", "yes").strip().lower() != "no",
                    path=path, line=start))
            fields = {}
        elif raw[0] in " \t":  # continues the field above (none after a blank line)
            if fields:
                fields[key] += "\n" + raw.strip()
        elif ":" in raw:
            name, value = raw.split(":", 1)
            start = start if fields else number
            key = name.strip().lower()
            fields[key] = value.strip()
    return sources


_OPTIONS = re.compile(r"\[[^\]]*\]")


def parse_one_line(text: str, path: Path) -> list[Source]:
    """The entries of a one-line ``sources.list``: ``deb [options] URI SUITE [COMPONENT…]``."""
    sources: list[Source] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.replace("\t", " ").partition(" ")
        words = _OPTIONS.sub(" ", rest, count=1).split() if rest.lstrip().startswith("[") \
            else rest.split()
        if len(words) < 2:
            continue
        sources.append(Source(types=(kind,), uris=(words[0],), suites=(words[1],), enabled=True,
                              path=path, line=number))
    return sources


def read_sources(sources_dir: Path = SOURCES_DIR,
                 sources_list: Path = SOURCES_LIST) -> list[Source]:
    """Every source of the host, in the order the mirror is looked for."""
    found: list[Source] = []
    listed = sorted(sources_dir.iterdir()) if sources_dir.is_dir() else []
    for path in (p for p in listed if p.suffix == ".sources" and p.is_file()):
        found += parse_deb822(path.read_text(encoding="utf-8"), path)
    for path in [sources_list, *(p for p in listed if p.suffix == ".list")]:
        if path.is_file():
            found += parse_one_line(path.read_text(encoding="utf-8"), path)
    return found


def host_release(os_release: Path = OS_RELEASE) -> str | None:
    """The host's release codename (``VERSION_CODENAME`` of ``/etc/os-release``), if it has one."""
    try:
        text = os_release.read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^VERSION_CODENAME=[\"']?([^\"'\s]+)", text, re.M)
    return match.group(1) if match else None


def find_mirror(sources: Iterable[Source], suite: str) -> str | None:
    """The first URI of the first source serving ``suite``, without a trailing slash."""
    for source in sources:
        if source.serves(suite):
            return source.uris[0].rstrip("/")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="aptsources.py", description="Print the Debian mirror of this host's apt sources.")
    parser.add_argument("--suite", help="the suite the mirror must serve (default: the host's "
                                        "release, VERSION_CODENAME in /etc/os-release)")
    parser.add_argument("--sources-dir", type=Path, default=SOURCES_DIR)
    parser.add_argument("--sources-list", type=Path, default=SOURCES_LIST)
    args = parser.parse_args(argv)
    suite = args.suite or host_release()
    if not suite:
        print("aptsources.py: the host's release is unknown (no VERSION_CODENAME in "
              f"{OS_RELEASE}); pass --suite", file=sys.stderr)
        return 2
    mirror = find_mirror(read_sources(args.sources_dir, args.sources_list), suite)
    if mirror is None:
        print(f"aptsources.py: no enabled 'deb' source for suite '{suite}' in "
              f"{args.sources_list} or {args.sources_dir}", file=sys.stderr)
        return 1
    print(mirror)
    return 0


if __name__ == "__main__":
    sys.exit(main())

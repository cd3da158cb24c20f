"""``invoke targets``, shown from what the last listing kept when nothing it read has changed.

Listing the targets reads, validates and hashes every manifest, env spec, definition and site
profile (YAML and the pydantic models: most of the command's time, every time). The rows are a
function of files, folders, the settings, the environment and the tool's own code, so a listing
records what it read (an audit hook: every file opened and folder listed, not a list kept by hand
that could miss one) with each one's stat, and the next one whose stats and key all match shows
the kept rows without loading the inputs. Everything it cannot see fails toward listing anew:
nothing is kept when a file it read changed in the last :data:`RACY_S` seconds (an edit of the
same size within one clock tick), when a killed build left work behind (its lock's holder is no
file), when it ran a program other than the runtime's ``--version``, or when it wrote a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from containers.files import atomic_write_text, read_json_object
from containers.image.cache import default_cache_dir
from containers.report import Say, console, say_line as _print, table

#: The kept listing's format; another reads as nothing kept.
SCHEMA = 1
#: A file changed this recently when the listing read it may change again unseen (same size,
#: same clock tick): such a listing is not kept.
RACY_S = 2.0
#: Variables a shell changes on its own that nothing the listing reads depends on.
SHELL_BOOKKEEPING = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES"})
#: The columns of ``invoke targets``; with ``--json`` each target is an object with these keys.
TARGET_COLUMNS = ("target", "site", "arch", "gpu", "builder", "from", "image", "state",
                  "inputs_hash")


@dataclass(frozen=True)
class Listing:
    """What ``invoke targets`` shows: the runtime line, one row per target, and what killed
    builds left (``residue``: work of builds, finished or not, that a later listing cannot
    judge from files)."""

    runtime_line: str
    rows: list[dict[str, str]]
    leftovers: list[str] = field(default_factory=list)
    residue: bool = False
    #: Folders whose entries decide the listing even where it did not list them (a folder
    #: that is missing now: the images folder, the builds' work folder), watched all the same.
    folders: list[str] = field(default_factory=list)


def show(listing: Listing, *, as_json: bool = False, say: Say = _print) -> None:
    """The targets table and the leftovers, or with ``as_json`` the rows as one JSON list."""
    if as_json:
        say(json.dumps(listing.rows, indent=2))
        return
    say(listing.runtime_line)
    console().print(table("Image targets", [c.replace("_", " ") for c in TARGET_COLUMNS],
                          [tuple(row.values()) for row in listing.rows]))
    for leftover in listing.leftovers:
        say(f"{leftover}; the next build removes it")


def listing(config: Mapping[str, Any], root: Path, compute: Callable[[], Listing], *,
            environ: Mapping[str, str] = os.environ) -> Listing:
    """The kept listing when its key and every stat still match, else ``compute()``'s, kept
    for the next time when it can be (a cache that cannot be read or written is no error)."""
    key = _key(config, root, environ)
    store = _store(root, environ)
    kept = _kept(store, key)
    if kept is not None:
        return kept
    with _recording() as seen:
        fresh = compute()
    read = _stats(seen, fresh.folders)
    if read is not None and not fresh.residue and not fresh.leftovers:
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(store, json.dumps({"key": key, "read": read,
                                                 "listing": asdict(fresh)}))
        except OSError:
            pass  # a read-only home lists anew each time; that is all it costs
    return fresh


def _kept(store: Path, key: Mapping[str, Any]) -> Listing | None:
    """The listing kept in ``store`` when it was kept under ``key`` and nothing it read has
    changed; None for anything else, an unreadable or hand-edited store included."""
    try:
        kept = read_json_object(store) if store.is_file() else None
        if kept and kept.get("key") == key and _unchanged(kept.get("read", {})):
            return Listing(**kept["listing"])
    except (OSError, TypeError, ValueError, AttributeError):
        pass  # listed afresh, and kept anew
    return None


def _store(root: Path, environ: Mapping[str, str]) -> Path:
    """The kept listing of the project at ``root``: in the user's XDG cache, never in the
    checkout (``$XDG_CACHE_HOME/hpc-containers/targets-<root's digest>.json``)."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return default_cache_dir(environ) / f"targets-{digest}.json"


def _key(config: Mapping[str, Any], root: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """What a listing depends on besides the files it reads: the settings as invoke merged
    them, the environment, where it runs (rows name images relative to it), Python, the
    installed packages (their folder's stat) and the tool's code (each module's stat)."""
    package = Path(__file__).resolve().parents[1]
    code = sorted(str(p) for p in package.rglob("*.py")) + [str(root / "tasks.py")]
    env = {k: v for k, v in environ.items() if k not in SHELL_BOOKKEEPING}
    return {"schema": SCHEMA, "cwd": os.getcwd(), "python": sys.version,
            "settings": json.dumps(config, sort_keys=True, default=str),
            "environ": hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest(),
            "code": _stat_of_each([*code, *_package_folders()])}


def _package_folders() -> list[str]:
    """The folders packages are installed in: an install or upgrade changes their stat."""
    return sorted({p for p in sys.path if p.endswith("-packages") and os.path.isdir(p)})


def _stat(path: str) -> list[int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None  # missing is a state too: a file that appears later changes it
    return [info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino]


def _stat_of_each(paths: list[str]) -> str:
    return hashlib.sha256(json.dumps([(p, _stat(p)) for p in paths]).encode()).hexdigest()


def _unchanged(read: Mapping[str, Any]) -> bool:
    return isinstance(read, dict) and all(_stat(path) == stat for path, stat in read.items())


class _Seen:
    """What a listing read: files opened, folders listed, programs run, and whether it wrote."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.programs: list[list[str]] = []
        self.wrote = False


_ACTIVE: list[_Seen] = []
_HOOKED = False


def _audit(event: str, args: tuple) -> None:
    """Audit hook (PEP 578): notes what the recording listing opens, lists and runs."""
    if not _ACTIVE:
        return
    seen = _ACTIVE[-1]
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        if os.fsdecode(args[0]) == os.devnull:
            return  # a program's standard input: nothing is read from it, nothing written
        seen.paths.add(os.path.abspath(os.fsdecode(args[0])))
        mode, flags = args[1], args[2] or 0
        seen.wrote |= bool(mode and set(str(mode)) & set("wax+")) or bool(
            flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
    elif event in ("os.listdir", "os.scandir") and isinstance(args[0], (str, bytes, os.PathLike)):
        seen.paths.add(os.path.abspath(os.fsdecode(args[0])))
    elif event == "subprocess.Popen":
        seen.programs.append([os.fsdecode(a) for a in args[1]] if args[1] else [])


@contextmanager
def _recording() -> Iterator[_Seen]:
    global _HOOKED
    if not _HOOKED:  # a hook cannot be removed: one for the process, idle when not recording
        sys.addaudithook(_audit)
        _HOOKED = True
    seen = _Seen()
    _ACTIVE.append(seen)
    try:
        yield seen
    finally:
        _ACTIVE.remove(seen)


def _stats(seen: _Seen, folders: list[str]) -> dict[str, list[int] | None] | None:
    """The stat of every file and folder the listing read (and of the runtime it asked for its
    version, and the folders of PATH that found it), or None when the listing cannot be kept."""
    if seen.wrote or any(len(argv) != 2 or argv[1] != "--version" for argv in seen.programs):
        return None
    paths = {p for p in seen.paths if not _own_code(p)} | set(folders)
    for argv in seen.programs:
        paths.add(shutil.which(argv[0]) or argv[0])
    paths.update(p for p in os.environ.get("PATH", "").split(os.pathsep) if p)
    read = {path: _stat(path) for path in sorted(paths)}
    now = time.time_ns()
    racy = any(stat and now - max(stat[0], stat[1]) < RACY_S * 1e9 for stat in read.values())
    return None if racy or any(p.startswith(("/proc/", "/sys/", "/dev/")) for p in read) \
        else read


def _own_code(path: str) -> bool:
    """Python, the installed packages and the tool's own package: the key holds them."""
    package = str(Path(__file__).resolve().parents[1])
    return path == package or path.startswith(
        (sys.prefix + os.sep, sys.base_prefix + os.sep, package + os.sep))

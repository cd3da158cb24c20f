"""The package cache builds share: what pip and debootstrap fetched (or pip built), kept on the
build host so a build whose env spec changed by one package does not fetch everything again.

Never in an image nor an inputs hash: a build with it, without it (``--no-cache``) or with
someone else's installs the same files (docs/building.md, docs/architecture.md)."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import shutil
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from containers.errors import ConfigError, ContainersError, on_disk
from containers.files import file_type, not_yours_alone, unsafe_way
from containers.host.runtime import BIND_SPECIALS, unsafe_characters
from containers.locking import acquire, release

#: The tool's own folder under ``$XDG_CACHE_HOME`` (the project's package name).
TOOL_NAME = "hpc-containers"
#: Where the pip cache appears in an Apptainer build (``%setup`` makes it from ``HOST_PATHS``); not
#: ``/mnt``, the users' own binds' place (docs/building.md, as for the next).
PIP_MOUNT = "/var/cache/containers-pip"
#: Where it appears in cotainr's ``exec --writable`` steps, which cannot make a mount point: a
#: folder FHS 3.0 requires (https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch03s02.html).
COTAINR_PIP_MOUNT = "/media"
#: The staged build-context file that names the pip cache folder to the install script.
PIP_MARKER = "pip-cache-dir"
#: The lock every build holds shared and a prune holds exclusively.
LOCK = ".lock"
#: The parts of the cache, each a folder under the cache root.
PARTS = ("pip", "apt", "roots")
#: The debootstrap shim: the tool's own script, in the checkout beside its package.
SHIM = Path(__file__).resolve().parents[2] / "scripts" / "debootstrap-cached.sh"


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The XDG place for a user's caches, never in a checkout or an image (``~/.cache``)."""
    base = environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path("~/.cache").expanduser()
    return root / TOOL_NAME


def package_cache_dir(cache_dir: Path | None, environ: Mapping[str, str] = os.environ) -> Path:
    return (cache_dir or default_cache_dir(environ)) / "packages"


@dataclass(frozen=True)
class PackageCache:
    """The package cache as a plan sees it, never counted (a walk costs seconds: invoke cache)."""

    root: Path
    #: The group that shares the cache (``containers.cache_group``); None: this user's alone.
    gid: int | None = None
    #: Whether full builds keep their root to rebuild from (``containers.keep_roots``).
    keep_roots: bool = True

    @property
    def pip(self) -> Path:
        return self.root / "pip"

    @property
    def apt(self) -> Path:
        return self.root / "apt"

    @property
    def roots(self) -> Path:
        """The root file systems full builds kept (:mod:`containers.image.rebuild`)."""
        return self.root / "roots"


def usage(folder: Path) -> tuple[int, int]:
    """(bytes, files) of the regular files under ``folder``, links not followed; a file that
    vanishes meanwhile (a concurrent pip) is skipped, and scandir spares folders a stat."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return 0, 0
    except OSError:
        return 0, 0
    total = count = 0
    pending = [os.fspath(folder)]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and entry.name != LOCK:
                        total += entry.stat(follow_symlinks=False).st_size
                        count += 1
                except OSError:
                    continue
    return total, count


def gather_cache(cache_dir: Path | None, *, use: bool, group: str = "", keep_roots: bool = True,
                 environ: Mapping[str, str] = os.environ) -> PackageCache | None:
    """The package cache a build will use, or None with ``use=False``: a folder the setting names
    is checked even then, as Apptainer's own cache (``group``: ``containers.cache_group``)."""
    top = cache_dir or default_cache_dir(environ)
    if not use and cache_dir is None:
        return None
    gid = cache_gid(group)
    problem = cache_problem(top, parts=use, gid=gid)
    if problem:
        raise ConfigError(f"the cache folder {problem}: a build trusts only a cache its own "
                          f"user alone can write (pip does not re-check every entry), or one "
                          f"set up for a group (containers.cache_group); choose another folder, "
                          f"fix it, or build with --no-cache", path="invoke.yaml",
                          key="containers.cache_dir")
    if not use:
        return None
    root = package_cache_dir(cache_dir, environ)
    bad = unsafe_characters(str(root), BIND_SPECIALS)
    if bad:
        raise ConfigError(f"the package cache {str(root)!r} holds {bad!r}, which apptainer "
                          f"--bind cannot carry; choose another folder (or build with "
                          f"--no-cache)", path="invoke.yaml", key="containers.cache_dir")
    return PackageCache(root=root, gid=gid, keep_roots=keep_roots)


def cache_gid(group: str) -> int | None:
    """The gid of ``containers.cache_group`` (None: a private cache), a group this user is in."""
    if not group:
        return None
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfigError(f"no group {group!r} on this machine", path="invoke.yaml",
                          key="containers.cache_group") from None
    if gid != os.getegid() and gid not in os.getgroups():
        raise ConfigError(f"this user is not in group {group!r}, which shares the cache",
                          path="invoke.yaml", key="containers.cache_group")
    return gid


def _folder_problem(folder: Path, *, uid: int, gid: int | None) -> str | None:
    """What makes ``folder`` unsafe for a cache, as words after its name (None: safe, or not made
    yet): private, this user's alone; shared, the cache group's with set-group-ID, not others'."""
    try:
        info = folder.lstat()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if not stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        return f"is {file_type(info.st_mode)}, not a folder"
    if gid is None or stat.S_ISLNK(info.st_mode):
        return not_yours_alone(folder, info, uid=uid)
    mode = stat.S_IMODE(info.st_mode)
    if info.st_gid != gid:
        return f"belongs to gid {info.st_gid}, not the cache group's ({gid})"
    if mode & 0o002:
        return f"is writable by others (mode {mode:o})"
    if mode & 0o020 and not mode & stat.S_ISGID:
        return (f"is group-writable without the set-group-ID bit (mode {mode:o}): chmod g+s it, "
                "so what is made in it stays the group's")
    return None


def _ancestor_problem(top: Path, *, uid: int, gid: int | None) -> str | None:
    """The first folder above ``top`` (as written and resolved) where others could put their own
    in its place, as words after "is in": another user's (its owner may rename in it, sticky or
    not) or one group-writable without the sticky bit but the cache group's; root's are trusted."""
    folders = dict.fromkeys([*top.parents, *Path(os.path.realpath(top)).parents])
    for folder in folders:
        try:
            info = os.stat(folder)
        except OSError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid not in (0, uid):
            return (f"{folder}, owned by uid {info.st_uid} (who could put their own folder in "
                    "its place)")
        if mode & 0o020 and not mode & stat.S_ISVTX and info.st_gid != gid:
            return (f"{folder}, writable by group {info.st_gid} without the sticky bit (its "
                    "members could put their own folder in its place)")
    return None


def cache_problem(top: Path, *, parts: bool = True, uid: int | None = None,
                  gid: int | None = None) -> str:
    """Why the cache folder ``top`` (with ``parts``, and the folders the tool makes in it) is not
    safe, beginning with its name; empty: it is, or is not made yet. pip never checks a wheel it
    cached again: whoever can write the cache could choose what a build installs."""
    uid = os.getuid() if uid is None else uid
    problem = _folder_problem(top, uid=uid, gid=gid)
    if problem:
        return f"{top} {problem}"
    above = unsafe_way(top)
    if above:
        return above
    ancestor = _ancestor_problem(top, uid=uid, gid=gid)
    if ancestor:
        return f"{top} is in {ancestor}"
    root = top / "packages"
    below = (root, *(root / part for part in PARTS)) if parts else ()
    for folder in below:
        problem = _folder_problem(folder, uid=uid, gid=gid)
        if problem:
            return f"{top} has {folder.relative_to(top)} that {problem}"
    return ""


@contextmanager
def in_use(cache: PackageCache | None) -> Iterator[None]:
    """Hold the cache for a build: its folders made (the user's, or the group's set-group-ID),
    and a shared lock on :data:`LOCK` that a prune waits for."""
    if cache is None:
        yield
        return
    mode = 0o700 if cache.gid is None else 0o2770
    with on_disk("make the package cache", cache.root):
        for folder in (cache.root.parent, cache.root, *(cache.root / part for part in PARTS)):
            if not folder.is_dir():
                folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                folder.mkdir(mode=0o700)
                if cache.gid is not None:
                    os.chown(folder, -1, cache.gid)
                os.chmod(folder, mode)  # not what the umask left
        fd = acquire(cache.root / LOCK, shared=True)
    try:
        yield
    finally:
        release(fd)


def prune(root: Path, *, on_wait: Callable[[], None] | None = None) -> tuple[int, int]:
    """Empty the package cache at ``root`` once no build uses it; returns the (bytes, files)
    removed. Holds the exclusive lock while it removes, so no build starts meanwhile."""
    if not root.is_dir():
        return 0, 0
    with on_disk("prune the package cache", root):
        fd = acquire(root / LOCK, on_wait=on_wait)
    try:
        removed = usage(root)
        with on_disk("prune the package cache", root):
            for entry in root.iterdir():
                if entry.name == LOCK:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        return removed
    finally:
        release(fd)


@dataclass(frozen=True)
class RootKey:
    """What names a kept root file system: every build input but the env spec, and the base's
    sha256, read from its record as the build starts (:meth:`digest`): planning may precede it."""

    parts: Mapping[str, object]
    base_record: Path | None = None

    def digest(self) -> str | None:
        """The key, or None when the base's record gives no sha256 (then the build is full)."""
        from containers.image import provenance  # the record model: not for invoke targets

        base = None
        if self.base_record is not None:
            try:
                base = provenance.read(self.base_record).sha256
            except ContainersError:
                return None
            if not isinstance(base, str) or len(base) != 64:
                return None
        text = json.dumps({"inputs": self.parts, "base_sha256": base}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

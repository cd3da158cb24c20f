"""File primitives every stage shares: atomic writes, fsync, hashing, symlink swaps.

A file is written to a temp name beside it, fsynced and renamed (old content or new); a target
not a regular file of the user's, or a way others could change, is refused (``/etc/passwd``)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from containers.errors import StateError, WriteRefused

_KINDS = ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISLNK, "a link"))


class FileRefused(ValueError):
    """A file this tool will not read: not a regular file, or larger than allowed."""


def file_type(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``), for a refusal."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def _check_regular(info: os.stat_result, limit: float = float("inf")) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise FileRefused(f"not a regular file ({file_type(info.st_mode)})")
    if info.st_size > limit:
        raise FileRefused(f"larger than {limit} bytes ({info.st_size})")


def read_regular(path: Path, *, limit: int) -> bytes:
    """The bytes of regular file ``path`` of at most ``limit`` bytes, checked before the open
    and on the descriptor: a FIFO or device swapped in never blocks or grows the read."""
    _check_regular(os.stat(path), limit)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _check_regular(os.fstat(fd), limit)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0 and (block := os.read(fd, min(left, 1 << 20))):
            chunks.append(block)
            left -= len(block)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileRefused(f"larger than {limit} bytes (it grew while being read)")
    return data


#: The most a results file of a run (a rank's report, ``run.log``, ``job.json``) may hold.
RESULT_LIMIT = 256 << 20


#: The deepest a JSON or YAML value the tool reads may nest: Python walks nesting by recursion,
#: which ends near 1,000 frames, so a deeper value is refused at its reader, naming the file.
MAX_DEPTH = 100


class TooDeep(ValueError):
    """A JSON or YAML value nested deeper than :data:`MAX_DEPTH` levels."""

    def __init__(self) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} levels")


def check_depth(value: object) -> object:
    """``value`` when it nests at most :data:`MAX_DEPTH` levels (walked without recursion)."""
    layer = [value]
    for _ in range(MAX_DEPTH + 1):
        layer = [child for item in layer if isinstance(item, (dict, list))
                 for child in (item.values() if isinstance(item, dict) else item)]
        if not layer:
            return value
    raise TooDeep()


def json_value(text: str | bytes) -> object:
    """``text`` read as JSON: the tool's one JSON reader (ValueError, :class:`TooDeep`)."""
    try:
        return check_depth(json.loads(text.decode("utf-8") if isinstance(text, bytes) else text))
    except RecursionError as exc:
        raise TooDeep() from exc


def read_regular_json(path: Path, *, limit: int = RESULT_LIMIT) -> object:
    """The JSON value in ``path``; every failure is an ``OSError`` or a ``ValueError``."""
    return json_value(read_regular(path, limit=limit))


def read_json_state(path: Path, *, limit: int, missing: object, unreadable: str,
                    invalid: str) -> object:
    """The JSON value of a state file (a catalogue), ``missing`` when none; any other failure a
    :class:`StateError` worded by ``unreadable`` (``{exc}``) or ``invalid`` (``{detail}``)."""
    try:
        return read_regular_json(path, limit=limit)
    except FileNotFoundError:
        return missing
    except (FileRefused, OSError) as exc:
        raise StateError(f"{path}: " + unreadable.format(exc=exc)) from exc
    except ValueError as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise StateError(f"{path}: " + invalid.format(detail=detail)) from exc


def read_json_object(path: Path, *, limit: int = RESULT_LIMIT) -> dict | None:
    """The JSON object in ``path``, or None (a killed run's cut file must not stop the judging)."""
    try:
        value = read_regular_json(path, limit=limit)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_regular_text(path: Path, *, limit: int = RESULT_LIMIT) -> str:
    """The text of ``path``, bad UTF-8 replaced (a killed process may cut a character)."""
    return read_regular(path, limit=limit).decode("utf-8", errors="replace")


def open_append_regular(path: Path, *, mode: int = 0o644) -> BinaryIO:
    """``path`` opened to read and append (created if missing) if it is a file of ours."""
    refuse_replacing(path, doing="append to")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW
                 | os.O_CLOEXEC, mode)
    try:
        why = _not_ours(os.fstat(fd))
        if why:
            raise WriteRefused(f"{path} is {why}; refusing to append to it")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a+b")
    except BaseException:
        os.close(fd)
        raise


def resolves_outside(path: Path, root: Path) -> Path | None:
    """Where ``path`` really is (links followed) when that is outside ``root``; else None."""
    resolved = path.resolve()
    return None if resolved.is_relative_to(root.resolve()) else resolved


def not_a_folder(path: Path) -> str | None:
    """Why ``path`` cannot be a folder of ours (it, or its nearest part, is a file)."""
    for part in (path, *path.parents):
        if os.path.lexists(part):
            if part.is_dir():
                return None
            return f"{part} is {file_type(os.lstat(part).st_mode)}, not a folder"
    return None


#: Links one walk follows before it calls the path a loop (the kernel's own limit).
_MAX_LINKS = 40


def _open_to_others(folder: str, info: os.stat_result) -> str | None:
    """Why anyone could rename what is in ``folder`` (world-writable, no sticky bit), else None."""
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o002 and not mode & stat.S_ISVTX:
        return (f"{folder} is world-writable without the sticky bit (mode {mode:04o}): anyone "
                "could put their own in place of what is in it")
    return None


def _repointable(link: str, info: os.stat_result, folder: os.stat_result) -> str | None:
    """Why ``link`` could be re-pointed by someone else: in a world-writable folder only the
    user's own, or root's in root's folder, is followed (``fs.protected_symlinks``' rule)."""
    trusted = info.st_uid == os.geteuid() or info.st_uid == folder.st_uid == 0
    if trusted or not folder.st_mode & 0o002:
        return None
    return (f"{link} is a link owned by {_owner(info.st_uid)} in a world-writable folder "
            f"(mode {stat.S_IMODE(folder.st_mode):04o}): they could re-point it at any time")


def unsafe_way(path: Path) -> str | None:
    """Why a write at or in ``path`` could land where someone else chooses (walked as the kernel
    does: a world-writable folder without the sticky bit, or another user's link in a
    world-writable folder, whatever ``fs.protected_symlinks`` says), else None."""
    todo = list((Path.cwd() / path).parts[1:])  # ".." after a link is the kernel's to read
    here, links = "/", 0
    while True:
        try:
            folder = os.stat(here)
            why = _open_to_others(here, folder)
            if why or not todo:
                return f"{path}: {why}" if why else None
            nxt = os.path.normpath(os.path.join(here, todo.pop(0)))
            info = os.lstat(nxt)
        except OSError:  # missing (made by this tool), or unreachable (the write fails too)
            return None
        if not stat.S_ISLNK(info.st_mode):
            if not stat.S_ISDIR(info.st_mode):
                return None  # the write fails on its own, naming the file in the way
            here = nxt
            continue
        links += 1
        why = _repointable(nxt, info, folder) or (
            f"{nxt} leads through more than {_MAX_LINKS} links" if links > _MAX_LINKS else None)
        if why:
            return f"{path}: {why}"
        target = os.readlink(nxt)
        here = "/" if os.path.isabs(target) else here
        todo[:0] = Path(target).parts[1 if os.path.isabs(target) else 0:]


def not_yours_alone(path: Path, info: os.stat_result, *, uid: int | None = None) -> str | None:
    """Why ``path`` is not the user's alone (a link, another user's, group- or world-writable),
    else None: the one rule for what the tool trusts (the cache, a keyring, a cluster record)."""
    uid = os.geteuid() if uid is None else uid
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return f"is a link (to {os.readlink(path)})"
    if info.st_uid != uid:
        return f"is owned by uid {info.st_uid}, not this user ({uid})"
    if mode & 0o022:
        return f"is writable by its group or others (mode {mode:o})"
    return None


def first_link(base: Path, path: Path) -> Path | None:
    """The first folder or file of ``path`` below ``base`` that is a link, else None."""
    current = base
    for part in path.relative_to(base).parts:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return current
    return None


def walk_nofollow(root: Path) -> Iterator[Path]:
    """``root`` and everything below it, never entering a linked folder."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    yield root
    if not stat.S_ISDIR(info.st_mode):
        return
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs) + sorted(files):
            yield Path(folder) / name


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a folder's entries (so a rename in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path, kind: str = "tmp") -> Path:
    """``.<name>.<pid>.<kind>`` beside ``path``: a name sweeps and verify know."""
    return path.with_name(f".{path.name}.{os.getpid()}.{kind}")


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def refuse_unsafe_way(path: Path) -> None:
    way = unsafe_way(path)
    if way:
        raise WriteRefused(f"{way}; refusing to write there")


def refuse_replacing(path: Path, *, doing: str = "replace") -> None:
    """:class:`WriteRefused` when the way to ``path`` is unsafe, or it exists and is not a regular
    file of ours (root or not): every writer asks before it makes a temp or a folder."""
    refuse_unsafe_way(path)
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    why = _not_ours(info)
    if why:
        verb = "write through" if stat.S_ISLNK(info.st_mode) else doing
        raise WriteRefused(f"{path} is {why}; refusing to {verb} it (move it away, or name "
                           "another file)")


def _not_ours(info: os.stat_result) -> str | None:
    """Why a file of ``info`` (from ``lstat`` or ``fstat``) is not ours to write, else None."""
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return f"{file_type(info.st_mode)}, not a regular file"
    if info.st_uid != os.geteuid():
        return (f"a file that belongs to {_owner(info.st_uid)}, not to you "
                f"({_owner(os.geteuid())})")
    return None


def replace_into(temp: Path, path: Path) -> None:
    """Rename ``temp`` over ``path`` if it may be replaced: the one commit of every file this
    tool writes (a rename replaces the name, never what a link there points to)."""
    refuse_replacing(path)
    os.replace(temp, path)


def _open_temp(path: Path, mode: int | None) -> tuple[Path, int]:
    """A new temp file beside ``path`` and its descriptor, born with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    tmp.unlink(missing_ok=True)  # a stale temp (or a link planted there) is never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600 if mode is not None else 0o666)
    if mode is not None:
        os.fchmod(fd, mode)
    return tmp, fd


def write_temp(path: Path, data: bytes, *, mode: int | None = None) -> Path:
    """``data`` in a fsynced temp beside ``path``; the caller renames (commit) or removes it."""
    refuse_replacing(path)
    tmp = temp_name(path)
    try:
        tmp, fd = _open_temp(path, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        _name_in(exc, path)
        raise
    return tmp


def _name_in(exc: BaseException, path: Path) -> None:
    """Give an OSError from a write (ENOSPC has no file name) the file's name."""
    if isinstance(exc, OSError) and exc.filename is None:
        exc.filename = str(path)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temp file, fsync, rename (old or new, whole)."""
    tmp = write_temp(path, data, mode=mode)
    try:
        replace_into(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def create_replacing(path: Path) -> BinaryIO:
    """A new, empty file at ``path`` for a growing log, renamed into place at once."""
    refuse_replacing(path)
    tmp, fd = _open_temp(path, None)
    handle = os.fdopen(fd, "wb")
    try:
        replace_into(tmp, path)
    except BaseException:
        handle.close()
        tmp.unlink(missing_ok=True)
        raise
    return handle


def sha256_file(path: Path, *, progress: Callable[[int], None] | None = None) -> str:
    """The sha256 of ``path``; ``progress`` is told each chunk's size (a progress bar)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def copy_hashing(source: Path, dest: Path, *, mode: int = 0o644, chunk: int = 8 << 20,
                 after_chunk: Callable[[], None] | None = None,
                 progress: Callable[[int], None] | None = None) -> str:
    """Copy ``source`` to a new file ``dest`` born with ``mode``, fsynced; the sha256 of the bytes
    read, checked in the pass that makes it (``after_chunk``: a fault-injection hook)."""
    refuse_replacing(dest)
    digest = hashlib.sha256()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with open(source, "rb") as reader, os.fdopen(fd, "wb") as writer:
            while block := reader.read(chunk):
                digest.update(block)
                writer.write(block)
                if progress is not None:
                    progress(len(block))
                if after_chunk is not None:
                    after_chunk()
            writer.flush()
            os.fsync(writer.fileno())
    except OSError as exc:
        _name_in(exc, dest)
        raise
    return digest.hexdigest()


def temp_symlink(link: Path, target: str) -> Path:
    """A new symlink to ``target`` under ``link``'s temp name, to swap over ``link`` atomically."""
    refuse_unsafe_way(link)
    temp = temp_name(link)
    temp.unlink(missing_ok=True)
    os.symlink(target, temp)
    return temp

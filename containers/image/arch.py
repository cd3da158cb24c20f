"""An image's real architecture, read from its files, and whether this host can run another one.

Apptainer's ``build-arch`` label names the build host (apptainer/apptainer#2774), so the ELF
header of a program in the image is read (from outside where it can be) into its build record."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from containers.errors import CommandFailed, StateError
from containers.host.facts import host_arch
from containers.host.process import capture
from containers.host.runtime import Runtime
from containers.records import BuildRecord

if TYPE_CHECKING:
    from containers.inputs.recipes import Target
    from containers.inputs.sites import Site

#: ELF e_machine values (Linux ``include/uapi/linux/elf-em.h``) -> ``uname -m``'s (``arch:``'s).
E_MACHINE = {0x3E: "x86_64", 0xB7: "aarch64", 0x03: "i386", 0x28: "arm", 0x15: "ppc64le",
             0xF3: "riscv64", 0x16: "s390x"}
#: Debian's name for each architecture (debootstrap ``--arch``, binfmt ``qemu-*`` entries).
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
QEMU_NAME = {"x86_64": "qemu-x86_64", "aarch64": "qemu-aarch64"}
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
#: The fallback where the SIF cannot be read from outside: the image's shell, inside it.
#: Printed as hex by ``od`` (coreutils, busybox) so the bytes survive text capture.
PROBE = 'head -c 64 "$(readlink -f /bin/sh)" | od -An -v -tx1'
#: The programs tried first, in order (paths inside the image's root).
PROGRAMS = ("bin/sh", "usr/bin/python3", "usr/bin/env", "bin/busybox")
#: Folders whose first ELF program decides when none of :data:`PROGRAMS` is there (scratch).
PROGRAM_DIRS = ("bin/", "usr/bin/", "sbin/", "usr/sbin/", "usr/local/bin/", "")
#: One file's first bytes, as hex, from the SIF's squashfs (values as positional arguments).
_CAT = 'unsquashfs -o "$1" -cat "$2" "$3" 2>/dev/null | head -c 64 | od -An -v -tx1'
_LISTED = re.compile(r"^(\S)\S{9} \S+ +.+? \d{4}-\d\d-\d\d \d\d:\d\d squashfs-root/(.*)$")


class NotElf(ValueError):
    """The bytes are not an ELF header this reader understands."""


def elf_arch(header: bytes) -> str:
    """The architecture of the ELF file whose first bytes are ``header``, never a guess."""
    if len(header) < 20 or header[:4] != b"\x7fELF":
        raise NotElf("not an ELF file (no \\x7fELF magic)")
    order = {1: "little", 2: "big"}.get(header[5])
    if order is None:
        raise NotElf(f"ELF header with unknown byte order {header[5]}")
    machine = int.from_bytes(header[18:20], order)
    if machine not in E_MACHINE:
        raise NotElf(f"ELF machine 0x{machine:x} is not one this tool knows")
    return E_MACHINE[machine]


def image_arch(runtime: Runtime, image: Path | str, offset: int | None = None) -> str:
    """The architecture of ``image``: from outside where it can be (any image, shell or none),
    else through its shell; ``offset``: its root's, where the caller read it."""
    with contextlib.suppress(CommandFailed, NotElf, ValueError):
        return _outside_arch(runtime, image, offset)
    argv = runtime.exec_argv(image=image, command=["sh", "-c", PROBE])
    try:
        return elf_arch(bytes.fromhex(capture(argv, timeout=300)))
    except (NotElf, ValueError) as exc:
        raise CommandFailed(f"cannot read the architecture of {image}: no ELF program found "
                            f"({exc})", argv=argv) from exc


#: Which Python 3 an image runs: everything runs ``python3`` (a ``python`` may be Python 2).
_WHICH_PYTHON = "command -v python3"


def image_python(runtime: Runtime, image: Path | str) -> str | None:
    """The ``python3`` ``image`` runs, or None: the steps that need one then say so."""
    argv = runtime.exec_argv(image=image, command=["sh", "-c", _WHICH_PYTHON])
    try:
        found = capture(argv, timeout=300).strip().splitlines()
    except CommandFailed:
        return None
    return found[-1] if found else None


def squashfs_offset(runtime: Runtime, image: Path | str) -> int:
    """Where the squashfs root starts in the SIF ``image`` (:class:`StateError`: none)."""
    listing = capture([runtime.binary, "sif", "list", str(image)], timeout=60)
    for line in listing.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        start = cells[3].split("-")[0] if len(cells) == 5 else ""
        if cells[-1].startswith("FS (Squashfs") and start.isdigit():
            return int(start)
    shown = " ".join(listing.split())[:120] or "nothing"
    raise StateError(f"{image}: {runtime.binary} sif list shows no squashfs root file system "
                     f"(it printed: {shown}); it is not an image this tool can read")


#: squashfs superblock compression ids (``squashfs_fs.h``: ZLIB 1 ... ZSTD 6) by name.
COMPRESSIONS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}


def compression_of(superblock: bytes) -> str:
    """The compression a squashfs superblock names; :class:`ValueError` for anything else."""
    if len(superblock) < 22 or superblock[:4] != b"hsqs":
        raise ValueError("not a squashfs superblock")
    ident = int.from_bytes(superblock[20:22], "little")
    if ident not in COMPRESSIONS:
        raise ValueError(f"unknown squashfs compression id {ident}")
    return COMPRESSIONS[ident]


def image_compression(runtime: Runtime, image: Path | str, offset: int | None = None) -> str:
    """How the SIF ``image``'s root is compressed (a site's runtime must read it)."""
    with open(image, "rb") as sif:
        sif.seek(squashfs_offset(runtime, image) if offset is None else offset)
        superblock = sif.read(22)
    try:
        return compression_of(superblock)
    except ValueError as exc:
        raise StateError(f"{image}: its root file system is {exc}") from None


def parse_listing(text: str) -> dict[str, str | None]:
    """``unsquashfs -lls`` -> each path and its link target (None: a regular file)."""
    entries: dict[str, str | None] = {}
    for line in text.splitlines():
        match = _LISTED.match(line)
        if match and match.group(1) == "l" and " -> " in match.group(2):
            path, target = match.group(2).split(" -> ", 1)
            entries[path] = target
        elif match and match.group(1) == "-":
            entries[match.group(2)] = None
    return entries


def resolve(entries: dict[str, str | None], path: str, hops: int = 40) -> str | None:
    """``path`` with every link on its way followed: the regular file it names, or None."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    while parts and hops > 0:
        part = parts.pop(0)
        if part == "..":
            done = done[:-1]
            continue
        here = "/".join([*done, part])
        target = entries.get(here, "dir")
        if target is None or target == "dir":
            done.append(part)
            continue
        hops -= 1
        done = [] if target.startswith("/") else done
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    found = "/".join(done)
    return found if not parts and entries.get(found, "dir") is None else None


def _outside_arch(runtime: Runtime, image: Path | str, at: int | None) -> str:
    """:func:`image_arch` from the SIF's squashfs: a named program in a listing of the program
    folders (~0.3 s less than a 36k-entry root's), else the whole listing's first ELF program."""
    offset = str(squashfs_offset(runtime, image) if at is None else at)
    folders = [folder.rstrip("/") for folder in PROGRAM_DIRS if folder]
    for only in (folders, []):
        entries = parse_listing(capture(["unsquashfs", "-o", offset, "-lls", str(image), *only],
                                        timeout=300))
        tried = [p for p in (resolve(entries, path) for path in PROGRAMS) if p]
        if not only:
            tried += [path for folder in PROGRAM_DIRS for path, link in entries.items()
                      if link is None and path.startswith(folder)
                      and "/" not in path[len(folder):]]
        tried = list(dict.fromkeys(tried))[:50]
        for path in tried:
            header = capture(["sh", "-c", _CAT, "sh", offset, str(image), path], timeout=120)
            with contextlib.suppress(NotElf, ValueError):
                return elf_arch(bytes.fromhex(header))  # fromhex skips the whitespace od prints
    raise NotElf(f"no ELF program among the first {len(tried)} files of {image}'s bin folders")


def emulation(arch: str, binfmt_dir: Path = BINFMT_DIR) -> str | None:
    """None when this host runs ``arch`` binaries through qemu-user; else why not."""
    name = QEMU_NAME.get(arch)
    fix = ("install Debian's qemu-user-static and binfmt-support, mount binfmt_misc "
           f"(mount -t binfmt_misc binfmt_misc {binfmt_dir}) and run update-binfmts --enable "
           f"{name or 'qemu-' + arch} (./setup.sh does this)")
    if name is None:
        return f"no emulation of {arch} is known to this tool"
    if not (binfmt_dir / "status").exists():
        return f"binfmt_misc is not mounted at {binfmt_dir}: {fix}"
    entry = binfmt_dir / name
    try:
        text = entry.read_text(encoding="utf-8")
    except OSError:
        return f"no {name} binfmt entry in {binfmt_dir}: {fix}"
    lines = text.splitlines()
    if not lines or lines[0].strip() != "enabled":
        return f"the {name} binfmt entry is disabled: {fix}"
    flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags:")),
                 "")
    if "F" not in flags:
        return (f"the {name} binfmt entry lacks the F flag (interpreter not usable inside "
                f"containers): {fix}")
    return None


# ------------------------------------------------------------------------------ the guard
def recorded_arch(record: Mapping, image: Path, runtime: Runtime | None = None) -> str:
    """The architecture ``image``'s build record names (an older record's: read now)."""
    arch = BuildRecord.of(record, source=image).arch
    if arch in E_MACHINE.values():
        return arch
    if runtime is not None and Path(image).is_file():
        with contextlib.suppress(CommandFailed):
            return image_arch(runtime, image)
    raise StateError(f"{image}: its build record names no architecture and none could be read "
                     f"from its files; rebuild it (invoke build --force)")


def machine_arches(here: str | None = None, binfmt_dir: Path = BINFMT_DIR) -> tuple[str, ...]:
    """What this machine runs: its own architecture, then those qemu-user emulates here."""
    here = here or host_arch()
    return (here, *(a for a in QEMU_NAME if a != here and emulation(a, binfmt_dir) is None))


def site_arches(site: Site, targets: Mapping[str, Target]) -> tuple[str, ...] | None:
    """The architectures ``site``'s nodes run; None when the profile cannot tell."""
    if site.scheduler == "none":
        return machine_arches()
    home = targets.get(site.default_target or "")
    return (home.arch,) if home else None


def check_arch(arch: str, arches: tuple[str, ...] | None, *, image: Path | str, where: str,
               doing: str) -> None:
    """Refuse ``doing`` an ``arch`` image where only ``arches`` run (None: unknown)."""
    if arches is None or arch in arches:
        return
    hint = ""
    if arch in QEMU_NAME and arches and arches[0] == host_arch() and where == "this machine":
        hint = f" ({emulation(arch)})"
    raise StateError(f"{image} is an {arch} image (its build record) but {where} runs "
                     f"{' and '.join(arches)}: not {doing} it there{hint}")


def check_compression(found: str, site: Site, *, image: str, target: str) -> None:
    """Refuse publishing an image whose root ``site``'s runtime cannot mount."""
    reads = site.squashfs.reads
    if found in reads:
        return
    raise StateError(f"{image}'s root file system is {found}-compressed, and site {site.name}'s "
                     f"runtime is known to read {' and '.join(reads)} only (its profile's "
                     f"squashfs.reads): build it for release with INVOKE_CONTAINERS_SQUASHFS=gzip "
                     f"invoke build --target {target} --force, smoke it, then publish it")

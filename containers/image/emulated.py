"""What a process of another architecture needs from the host to run here under qemu-user:
oneDNN in PyTorch's aarch64 wheels dies without sysfs's ``midr_el1``, absent on an x86_64
kernel, so every emulated exec binds over ``/sys/devices/system/cpu`` a folder that describes
the CPUs as an aarch64 kernel would (docs/cuda-images.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from containers.files import atomic_write_text
from containers.host.facts import host_arch
from containers.image.cache import default_cache_dir

#: The sysfs folder whose per-CPU files programs read (the bind's destination).
CPU_SYSFS = "/sys/devices/system/cpu"
#: The MIDR_EL1 an emulated aarch64 CPU reports: an Arm Neoverse N1 r3p1 (implementer 0x41,
#: part 0xd0c), the core of AWS Graviton2 and Ampere Altra, inside what qemu's default ``max``
#: CPU model implements. Arm's register layout: Arm Architecture Reference Manual, MIDR_EL1.
MIDR = {"aarch64": "0x00000000413fd0c1"}


def cpu_files(arch: str, cpus: int) -> dict[str, str]:
    """The files of the folder that programs read at start-up (CPUs, their identity)."""
    last = max(cpus, 1) - 1
    span = f"0-{last}\n" if last else "0\n"
    files = {"online": span, "possible": span, "present": span, "offline": "\n",
             "kernel_max": f"{last}\n"}
    for cpu in range(last + 1):
        regs = f"cpu{cpu}/regs/identification"
        files[f"{regs}/midr_el1"] = MIDR[arch] + "\n"
        files[f"{regs}/revidr_el1"] = "0x0000000000000000\n"
    return files


def cpu_folder(arch: str, *, cpus: int | None = None, root: Path | None = None,
               write: bool = True) -> Path:
    """The folder for ``arch``, written when missing and ``write`` (a plan only names it)."""
    cpus = cpus or os.cpu_count() or 1
    folder = (root or default_cache_dir()) / "emulation" / f"{arch}-{cpus}cpu"
    if not write or (folder / "online").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for name, text in cpu_files(arch, cpus).items():
            atomic_write_text(work / name, text)
        os.replace(work, folder)
    except OSError:
        if not (folder / "online").is_file():
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def emulated_binds(arch: str | None, *, here: str | None = None,
                   environ: Mapping[str, str] = os.environ, write: bool = True) -> list[str]:
    """The binds an exec of an ``arch`` image needs here: under emulation, the CPU folder."""
    if arch is None or arch == (here or host_arch()) or arch not in MIDR:
        return []
    root = default_cache_dir(environ)
    return [f"{cpu_folder(arch, root=root, write=write)}:{CPU_SYSFS}:ro"]

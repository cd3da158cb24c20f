"""The architecture reader (ELF headers recorded from real images' python) and the arch guard on
recorded build records; no Apptainer needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import StateError
from containers.image import arch

#: First 20 bytes of /usr/bin/python3.11 in images/cpu.sif (Debian bookworm amd64).
X86_64_PYTHON = bytes.fromhex("7f454c46020101000000000000000000 02003e00".replace(" ", ""))
#: First 20 bytes of /usr/bin/python3.11 in images/cpu-arm64.sif (Debian bookworm arm64).
AARCH64_PYTHON = bytes.fromhex("7f454c46020101000000000000000000 0200b700".replace(" ", ""))
#: A big-endian s390x header: byte order is read from the header, not assumed.
S390X = bytes.fromhex("7f454c46020201000000000000000000 00020016".replace(" ", ""))


def test_reads_the_architecture_from_the_elf_header() -> None:
    assert arch.elf_arch(X86_64_PYTHON) == "x86_64"
    assert arch.elf_arch(AARCH64_PYTHON + b"\0" * 44) == "aarch64"
    assert arch.elf_arch(S390X) == "s390x"


@pytest.mark.parametrize("header", [b"", b"#!/bin/sh\n" * 3, X86_64_PYTHON[:19],
                                    X86_64_PYTHON[:5] + b"\x07" + X86_64_PYTHON[6:],
                                    X86_64_PYTHON[:18] + b"\x99\x99"])
def test_anything_else_is_refused_not_guessed(header: bytes) -> None:
    with pytest.raises(arch.NotElf):
        arch.elf_arch(header)


def binfmt(tmp_path: Path, *, text: str | None) -> Path:
    (tmp_path / "status").write_text("enabled\n")
    if text is not None:
        (tmp_path / "qemu-aarch64").write_text(text)
    return tmp_path


ENABLED = ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n"
           "offset 0\n")


def test_emulation_needs_a_mounted_enabled_entry_with_the_f_flag(tmp_path: Path) -> None:
    assert arch.emulation("aarch64", binfmt(tmp_path, text=ENABLED)) is None
    assert "not mounted" in arch.emulation("aarch64", tmp_path / "none")
    assert "qemu-user-static" in arch.emulation("aarch64", tmp_path / "none")
    assert "disabled" in arch.emulation("aarch64", binfmt(tmp_path, text="disabled\n"))
    assert "F flag" in arch.emulation(
        "aarch64", binfmt(tmp_path, text=ENABLED.replace("PF", "P")))
    (tmp_path / "qemu-aarch64").unlink()
    assert "no qemu-aarch64" in arch.emulation("aarch64", tmp_path)


def test_this_machine_runs_what_it_emulates(tmp_path: Path) -> None:
    assert arch.machine_arches("x86_64", binfmt(tmp_path, text=ENABLED)) == ("x86_64", "aarch64")
    assert arch.machine_arches("x86_64", tmp_path / "none") == ("x86_64",)


def test_the_guard_trusts_the_record_not_the_name(tmp_path: Path) -> None:
    image = tmp_path / "olivia-cuda.sif"  # named for Olivia, recorded as x86_64
    image.write_bytes(b"not an image")
    recorded = arch.recorded_arch({"arch": "x86_64"}, image)
    assert recorded == "x86_64"
    with pytest.raises(StateError) as caught:
        arch.check_arch(recorded, ("aarch64",), image=image, where="site olivia",
                        doing="publishing")
    message = str(caught.value)
    assert "\n" not in message and "x86_64 image" in message and "site olivia runs aarch64" \
        in message
    arch.check_arch("aarch64", ("aarch64",), image=image, where="site olivia", doing="running")
    arch.check_arch("aarch64", None, image=image, where="site x", doing="running")


def test_no_recorded_architecture_and_none_readable_is_refused(tmp_path: Path) -> None:
    image = tmp_path / "cpu.sif"
    image.write_bytes(b"random")
    for record in ({}, {"arch": "amd64"}, {"arch": None}):
        with pytest.raises(StateError, match="names no architecture"):
            arch.recorded_arch(record, image)

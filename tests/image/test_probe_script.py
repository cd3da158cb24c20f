"""The probe that runs inside an image (standard library only, never imported by the tool): its
ELF readers on the host's own files, and a part it cannot read reported rather than raised."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from tests.fixtures import ROOT


@pytest.fixture(scope="module")
def probe() -> dict:
    """The probe's functions, loaded without running its ``main()`` (which prints the result)."""
    names: dict = {}
    source = (ROOT / "containers" / "image" / "probe_script.py").read_text()
    assert "\nmain()\n" in source
    exec(compile(source.replace("\nmain()\n", "\n"), "probe_script", "exec"), names)
    return names


def test_the_probe_reads_which_libraries_torch_loads(probe) -> None:
    """The probe's own ELF reader (what tells dynamic from static NCCL) on the host's torch."""
    import torch

    needed = probe["elf_needed"](Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")
    assert "libc10.so" in needed and "libc.so.6" in needed
    assert not [n for n in needed if n.startswith(("libnccl", "librccl"))]  # a CPU build


def test_the_arch_is_read_from_the_interpreters_elf_header(probe, tmp_path: Path) -> None:
    """What the probe reports as the image's arch: the e_machine of its Python, not uname."""
    expected = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine()]
    assert probe["elf_machine"](Path(sys.executable).resolve()) == expected
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    assert probe["elf_machine"](script) is None
    assert probe["elf_needed"](script) is None


def test_a_part_that_cannot_be_read_is_an_error_string_not_a_raise(probe) -> None:
    result: dict = {}
    probe["guarded"](result, "good", lambda: 1)
    probe["guarded"](result, "bad", lambda: open("/nonexistent/x"))
    assert result["good"] == 1 and result["bad"] is None
    assert result["errors"] == {"bad": "FileNotFoundError: [Errno 2] No such file or directory: "
                                       "'/nonexistent/x'"}

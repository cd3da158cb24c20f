"""Unit tests of the CPU description bound into emulated images (containers.image.emulated);
tests/prove/test_arm64_image.py reads it inside the real aarch64 image."""

from __future__ import annotations

from pathlib import Path

from containers.host.runtime import Runtime
from containers.image.emulated import CPU_SYSFS, MIDR, cpu_files, cpu_folder, emulated_binds


def test_every_cpu_gets_its_identity_and_the_ranges_name_them() -> None:
    files = cpu_files("aarch64", 3)
    assert files["online"] == files["possible"] == files["present"] == "0-2\n"
    assert files["kernel_max"] == "2\n"
    for cpu in range(3):
        assert files[f"cpu{cpu}/regs/identification/midr_el1"] == MIDR["aarch64"] + "\n"
    assert "cpu3/regs/identification/midr_el1" not in files
    assert cpu_files("aarch64", 1)["online"] == "0\n"


def test_the_folder_is_written_once_and_whole(tmp_path: Path) -> None:
    folder = cpu_folder("aarch64", cpus=2, root=tmp_path)
    assert folder == tmp_path / "emulation" / "aarch64-2cpu"
    midr = folder / "cpu1/regs/identification/midr_el1"
    assert midr.read_text() == "0x00000000413fd0c1\n"
    midr.write_text("kept\n")  # a second call finds the folder and leaves it alone
    assert cpu_folder("aarch64", cpus=2, root=tmp_path) == folder
    assert midr.read_text() == "kept\n"
    assert [p.name for p in folder.parent.iterdir()] == ["aarch64-2cpu"]  # no work folder left


def test_only_an_emulated_image_gets_the_bind(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    assert emulated_binds("x86_64", here="x86_64", environ=environ) == []
    assert emulated_binds(None, here="x86_64", environ=environ) == []
    assert emulated_binds("riscv64", here="x86_64", environ=environ) == []  # nothing known
    (bind,) = emulated_binds("aarch64", here="x86_64", environ=environ)
    source, dest, mode = bind.split(":")
    assert (dest, mode) == (CPU_SYSFS, "ro")
    assert Path(source).parent == tmp_path / "hpc-containers" / "emulation"
    assert (Path(source) / "online").is_file()
    assert emulated_binds("aarch64", here="aarch64", environ=environ) == []


def test_apptainer_test_takes_the_binds() -> None:
    runtime = Runtime("apptainer", "apptainer", "1.4.5")
    assert runtime.test_argv("a.sif") == ["apptainer", "test", "a.sif"]
    assert runtime.test_argv("a.sif", binds=["/x:/y:ro"]) == [
        "apptainer", "test", "--bind", "/x:/y:ro", "a.sif"]

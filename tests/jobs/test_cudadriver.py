"""jobs/cudadriver.py: which NVIDIA driver runs which CUDA runtime (pure; no torch, no GPU)."""

from __future__ import annotations

import pytest

from tests.jobs.scripts import sibling

cudadriver = sibling("cudadriver")
R570 = "570.86.15"


@pytest.mark.parametrize("driver, newest", [
    ("525.60.13", "12.0"), ("535.183.01", "12.2"), ("550.54.15", "12.4"), ("565.57.01", "12.7"),
    (R570, "12.8"), ("575.51.03", "12.9"), ("580.65.06", "13.0"),
    ("590.44.01", "13.0"),  # newer than the table: at least its last
    ("418.87.01", None), ("garbage", None), (None, None)])
def test_newest_cuda_of_a_driver(driver, newest) -> None:
    assert cudadriver.newest_cuda(driver) == newest


@pytest.mark.parametrize("cuda, series", [
    ("13.0", 580), ("13.1", 580), ("12.8", 525), ("12.0", 525), ("11.8", 450), ("14.0", None),
    (None, None)])
def test_needed_series_is_the_first_branch_of_the_major(cuda, series) -> None:
    assert cudadriver.needed_series(cuda) == series


def test_cuda_13_on_r570_names_driver_newest_cuda_and_runtime() -> None:
    text = cudadriver.misfit("13.0", R570)
    assert text == ("the node's NVIDIA driver 570.86.15 supports CUDA 12.8 at most and the "
                    "image's torch uses the CUDA 13.0 runtime, which needs NVIDIA driver R580 "
                    "or newer (CUDA 13.x, minor version compatibility)")


@pytest.mark.parametrize("cuda, driver, driver_cuda", [
    ("12.8", R570, None), ("12.9", "525.60.13", None),  # minor version compatibility
    ("13.0", "580.65.06", None), ("12.4", "590.1", None),  # older majors on newer drivers
    ("13.0", None, None), ("13.0", "garbage", None), (None, R570, None),  # unknown: not judged
    ("12.8", None, "12.2")])
def test_fits_or_not_judged(cuda, driver, driver_cuda) -> None:
    assert cudadriver.misfit(cuda, driver, driver_cuda) is None


def test_driver_api_without_libcuda_is_unknown() -> None:
    assert cudadriver.driver_api_cuda("libcuda-absent.so.1") is None


def test_misfit_from_the_driver_api_number_alone() -> None:
    newest = cudadriver.cuda_of_driver_api(12080)
    assert newest == "12.8" and cudadriver.cuda_of_driver_api(0) is None
    assert cudadriver.misfit("13.0", None, newest).startswith(
        "the node's NVIDIA driver supports CUDA 12.8 at most and the image's torch uses the "
        "CUDA 13.0 runtime")


def test_a_driver_older_than_the_table_is_named() -> None:
    assert "418.87.01 is older than R450" in cudadriver.misfit("12.1", "418.87.01")


def test_driver_needed_for_people() -> None:
    assert cudadriver.driver_needed("13.0") == ("NVIDIA driver R580 or newer (CUDA 13.x, "
                                                "minor version compatibility)")
    assert cudadriver.driver_needed("12.8").startswith("NVIDIA driver R525 or newer")
    assert cudadriver.driver_needed(None) is None


def test_nvidia_driver_from_the_proc_file(tmp_path) -> None:
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  "
                       "Release Build  (dvs-builder@U16)  Thu Jan  9 2025\n")
    assert cudadriver.nvidia_driver(version) == R570
    assert cudadriver.nvidia_driver_file(tmp_path / "absent") is None

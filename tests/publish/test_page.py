"""The catalogue page links only to files of its own folder: a catalogue entry's file names are
data from a file others may have edited."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from containers.publish.page import render_page


def _page(tmp_path: Path, **entry) -> str:
    catalogue = {"updated": "now", "targets": {"cpu": {"latest": "1", "versions": [
        {"version": "1", **entry}]}}}
    return render_page(catalogue, tmp_path)


@pytest.mark.parametrize("bad", ["javascript:alert(7)", "JavaScript:alert(7)", " javascript:x",
                                 "data:text/html,<b>x</b>", "https://evil.example/x",
                                 "//evil.example/x", "/etc/passwd", "../../etc/passwd",
                                 "cpu/../../x", "vbscript:x", 7, ["a"]])
def test_a_link_outside_the_folder_is_shown_as_text_never_linked(tmp_path: Path, bad) -> None:
    page = _page(tmp_path, sbom_file=bad, diff_file=bad)
    links = re.findall(r'href="([^"]*)"', page)
    assert links == [], links
    assert page.count("not a file of this folder") == 2


def test_the_layouts_own_files_are_linked(tmp_path: Path) -> None:
    page = _page(tmp_path, sbom_file="cpu/1.sif.cdx.json", diff_file="cpu/1.diff.json")
    assert re.findall(r'href="([^"]*)"', page) == ["cpu/1.sif.cdx.json", "cpu/1.diff.json"]


def test_each_version_names_the_nvidia_driver_it_needs(tmp_path: Path) -> None:
    """Derived from the CUDA runtime the entry's stack records (jobs/cudadriver.py's table)."""
    def stack(build: str, **versions: str) -> dict:
        return {"torch": "2.9.0", "build": build, **versions}

    assert "needs NVIDIA driver R580 or newer (CUDA 13.x" in _page(
        tmp_path, stack=stack("cuda", cuda="13.0"))
    assert "needs NVIDIA driver R525 or newer (CUDA 12.x" in _page(
        tmp_path, stack=stack("cuda", cuda="12.8"))
    assert "needs NVIDIA" not in _page(tmp_path, stack=stack("rocm", hip="6.2"))

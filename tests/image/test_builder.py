"""The builder's pure parts: which build phase a line of apptainer output announces."""

from __future__ import annotations

import pytest

from containers.image.builder import phase_of


@pytest.mark.parametrize("line,phase", [
    ("INFO:    Starting build...", "start"),
    ("I: Retrieving InRelease", "debootstrap"),
    ("INFO:    Running post scriptlet", "post"),
    ("INFO:    Running setup scriptlet", "setup"),
    ("INFO:    Adding labels", "metadata"),
    ("INFO:    Creating SIF file...", "squashfs"),
    ("Collecting torch==2.13.0", "post"),  # no announcement: the phase goes on
])
def test_phase_of(line: str, phase: str) -> None:
    assert phase_of(line, "post") == phase

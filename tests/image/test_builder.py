"""The builder's pure parts: which build phase a line of apptainer output announces; and what
a build of one target sweeps (only its own leftovers)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from containers.errors import CommandFailed
from containers.host.runtime import Runtime
from containers.image.builder import build_step, phase_of, stale_partials
from containers.image.plan import BuildStep
from containers.inputs.recipes import load_targets
from tests.fixtures import ROOT


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


def _failing_step(tmp_path: Path, name: str) -> BuildStep:
    """A build of ``name`` whose build command fails at once (``false``), after the sweep."""
    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    inputs_hash = "c0ffee" * 10 + "abcd"
    short = inputs_hash[:12]
    return BuildStep(
        target=dataclasses.replace(load_targets(ROOT)["cpu"], name=name),
        inputs_hash=inputs_hash, inputs={}, image=images / f"{name}.sif",
        partial=images / f".{name}.sif.{short}.partial", workdir=tmp_path / f"{name}-{short}",
        build_argv=["false"], test_argv=None, inspect_argv=[], env={}, staged={}, copied={},
        action="build")


def test_a_build_sweeps_only_its_own_partial_images(tmp_path: Path) -> None:
    step = _failing_step(tmp_path, "x")
    images = step.image.parent
    own = images / ".x.sif.0123456789ab.partial"        # a killed build of x
    other = images / ".x.sif.sif.0123456789ab.partial"  # target x.sif's, maybe being written
    lookalike = images / ".x.sif.notahash.partial"
    for path in (own, other, lookalike):
        path.write_bytes(b"half an image")
    assert stale_partials(step) == [own]
    with pytest.raises(CommandFailed, match="apptainer build of x"):
        build_step(step, runtime=Runtime(binary="apptainer", flavour="apptainer",
                                         version="1.4.5"), say=lambda line: None)
    assert not own.exists() and other.exists() and lookalike.exists()

"""``invoke inspect`` of a file that is not an image: one line, with Apptainer's reason, never
the probe script it was asked to run (the real runtime)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from containers.errors import CommandFailed
from containers.image.inspect import probe
from tests.fixtures import ROOT

pytestmark = pytest.mark.apptainer


def test_probing_a_file_that_is_not_an_image_is_one_line(real_runtime, tmp_path: Path) -> None:
    fake = tmp_path / "fake.sif"
    fake.write_text("not an image\n")
    with pytest.raises(CommandFailed) as refused:
        probe(real_runtime, fake)
    message = str(refused.value)
    assert "\n" not in message and "import" not in message, message
    assert message.startswith(f"cannot read what {fake} holds: {real_runtime.flavour} exec "
                              "of its python3 failed (exit ")
    assert "FATAL" in message


def test_cli_inspect_of_a_file_that_is_not_an_image(tmp_path: Path) -> None:
    fake = tmp_path / "fake.sif"
    fake.write_text("not an image\n")
    result = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "inspect",
                             "--image", str(fake)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: cannot read what {fake} holds")

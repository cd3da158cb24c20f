"""benchmarks/squashfs.py on the session's debian-base image, run as a user runs it: every
compression packs the image's real root and gives back the same files (the benchmark fails
otherwise; two of them here); the table and JSON hold each one's figures and ratios. Times are reported, never
judged here (the README's figures are the cpu image's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import ROOT
from tests.jobs.scripts import clean_env

pytestmark = pytest.mark.apptainer


def test_every_compression_gives_back_the_same_files(tmp_path: Path,
                                                     debian_base_image: Path) -> None:
    out = tmp_path / "squashfs.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "squashfs.py"), "--image",
         str(debian_base_image), "--choices", "gzip-9,zstd-1", "--tmp", str(tmp_path),
         "--out", str(out)],
        capture_output=True, text=True, timeout=900, env=clean_env(), cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [row["label"] for row in result["rows"]] == ["gzip -9 (Apptainer's own)",
                                                        "zstd -1 (the default)"]
    assert result["entries"] > 1000  # a whole Debian root, not an empty folder
    assert all(row["bytes"] > 0 and row["pack_s"] > 0 for row in result["rows"])
    assert "pack ratio" in done.stdout
    assert not list(tmp_path.glob("bench-squashfs-*"))  # the work folder is gone

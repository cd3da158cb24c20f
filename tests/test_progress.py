"""Progress of long operations: drawn on a terminal (bytes, rate; a live phase line), nothing
at all where stdout is a pipe or a log file."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from tests.fixtures import ROOT

# Copies a file with a progress bar (as publish does), then runs a build-like phase line.
SCRIPT = """
import sys, time
from pathlib import Path
from containers.files import copy_hashing
from containers.progress import byte_progress, phase_line
source, dest = map(Path, sys.argv[1:])
with byte_progress("copy image.sif", source.stat().st_size) as advance:
    copy_hashing(source, dest, chunk=1 << 20, progress=advance,
                 after_chunk=lambda: time.sleep(0.05))
with phase_line("cpu: build") as show:
    for phase in ("start", "debootstrap", "post"):
        show(phase)
        time.sleep(0.3)
print("done", flush=True)
"""


def _source(tmp_path: Path) -> tuple[Path, Path]:
    source = tmp_path / "image.sif"
    source.write_bytes(os.urandom(24 << 20))
    return source, tmp_path / "copy.sif"


def on_a_terminal(argv: list[str]) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal; all it drew."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"})
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            block = os.read(leader, 65536)
        except OSError:  # the terminal closed: the program ended
            break
        if not block:
            break
        chunks.append(block)
    proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_shows_bytes_rate_and_the_build_phase(tmp_path: Path) -> None:
    source, dest = _source(tmp_path)
    drawn = on_a_terminal([sys.executable, "-c", SCRIPT, str(source), str(dest)])
    assert "copy image.sif" in drawn and "MiB" in drawn and "/s" in drawn, drawn[-2000:]
    assert "cpu: build: debootstrap" in drawn, drawn[-2000:]
    assert dest.read_bytes() == source.read_bytes() and "done" in drawn


def test_a_log_gets_no_progress_at_all(tmp_path: Path) -> None:
    source, dest = _source(tmp_path)
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(source), str(dest)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n" and result.stderr == ""

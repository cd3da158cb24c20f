"""File locks: a second holder waits (and is told so) until the first lets go."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from containers.locking import file_lock, holder

HOLD = """
import sys, time
from pathlib import Path
from containers.locking import file_lock
with file_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "sub" / ".x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waits: list[float] = []
        started = time.monotonic()
        with file_lock(lock, on_wait=lambda: waits.append(time.monotonic())):
            waited = time.monotonic() - started
        assert len(waits) == 1 and waited > 0.5
    finally:
        holder.wait(timeout=30)
    with file_lock(lock, on_wait=lambda: waits.append(0.0)):
        pass  # free now: no second wait
    assert len(waits) == 1


def test_a_fifo_planted_as_a_lock_does_not_block_asking_its_holder(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.lock")
    assert holder(tmp_path / "x.lock") is None

"""The process seam: streaming, timeouts, and no process left behind."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from containers.host.process import descendants, run

# A parent that starts a child in a NEW session (as torchrun does with its ranks), then both hang.
TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
print("child", child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def test_streams_lines_and_exit_code() -> None:
    lines: list[str] = []
    result = run([sys.executable, "-c", "print('a'); print('b'); raise SystemExit(3)"],
                 on_line=lines.append)
    assert lines == ["a", "b"] and result.returncode == 3 and not result.ok
    assert result.tail == ["a", "b"]


def test_timeout_stops_whole_tree_including_new_sessions() -> None:
    lines: list[str] = []
    started = time.monotonic()
    result = run([sys.executable, "-c", TREE], timeout=3, on_line=lines.append, grace=2)
    assert result.timed_out and not result.ok
    assert time.monotonic() - started < 15
    child = int(lines[0].split()[1])
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "a process in its own session outlived the timeout"
    assert not any(_alive(p) for p in descendants(os.getpid()))

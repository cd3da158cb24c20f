"""The process seam: streaming, timeouts, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from containers.errors import CommandFailed
from containers.host.process import capture, run, stop_tree
from tests.fixtures.procs import alive, descendants

# A parent that starts a child in a NEW session (as torchrun does with its ranks), then both hang.
TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
print("child", child.pid, flush=True)
time.sleep(600)
"""
# A child that starts a grandchild in a NEW session, then both hang: the grandchild's session
# and group differ from ours and from its parent's, so only the parent links lead to it.
CHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)
print("grandchild", grandchild.pid, flush=True)
time.sleep(600)
"""
GRANDCHILD = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}])
time.sleep(600)
"""
# A command that ignores SIGTERM: only the SIGKILL after the grace stops it.
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", os.getpid(), flush=True)
time.sleep(600)
"""


def _wait_dead(pid: int, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


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
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "a process in its own session outlived the timeout"
    assert not any(alive(p) for p in descendants(os.getpid()))


def test_timeout_stops_grandchild_in_new_session() -> None:
    lines: list[str] = []
    result = run([sys.executable, "-c", GRANDCHILD], timeout=3, on_line=lines.append, grace=2)
    assert result.timed_out
    grandchild = int(lines[0].split()[1])
    assert _wait_dead(grandchild), "a grandchild in its own session outlived the timeout"
    assert not any(alive(p) for p in descendants(os.getpid()))


def test_sigkill_after_grace_and_real_returncode() -> None:
    lines: list[str] = []
    started = time.monotonic()
    result = run([sys.executable, "-c", STUBBORN], timeout=2, on_line=lines.append, grace=1)
    (word, pid), = [line.split() for line in lines]
    assert word == "ready" and result.timed_out
    # The command ignores SIGTERM: only the SIGKILL after the grace ends it.
    assert _wait_dead(int(pid)), "a command that ignores SIGTERM outlived the grace"
    # Popen reaped the supervisor itself, so its status is the real one (not a psutil-reaped
    # 0): killed by the tool's SIGKILL, or by the SIGTERM it was stopped with when it ended
    # its command first (both wait the same grace: which one is first is a race).
    assert result.returncode in (-signal.SIGKILL, -signal.SIGTERM)
    assert time.monotonic() - started < 10
    with pytest.raises(CommandFailed, match="stubborn timed out after"):
        result.check("stubborn")


def test_stop_tree_of_finished_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    started = time.monotonic()
    stop_tree(proc, grace=5)  # nothing left to stop: no waiting out the grace
    assert time.monotonic() - started < 2
    assert descendants(proc.pid) == []


def test_capture_and_check() -> None:
    assert capture([sys.executable, "-c", "print('out')"]) == "out\n"
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('oops\\n'); sys.exit(4)"]
    with pytest.raises(CommandFailed, match=r"exit 4\): oops") as caught:
        capture(failing)
    assert caught.value.argv == failing and caught.value.returncode == 4
    with pytest.raises(CommandFailed, match="command not found: no-such-program-x"):
        capture(["no-such-program-x"])
    assert run([sys.executable, "-c", "pass"]).check("nothing").ok


# The tool: runs GRANDCHILD through run(), printing each line, until it is killed.
TOOL = f"""
import sys
from containers.host.process import run
run([sys.executable, "-c", {GRANDCHILD!r}], on_line=lambda line: print(line, flush=True))
"""


def test_nothing_outlives_a_sigkill_of_the_tool() -> None:
    """``kill -KILL`` of the tool's process group (as a scheduler or a user does) reaches none
    of the command's tree, which lives in sessions of its own: the supervisor ends it all."""
    tool = subprocess.Popen([sys.executable, "-c", TOOL], stdout=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=os.getcwd())
    grandchild = 0
    try:
        assert tool.stdout is not None
        line = tool.stdout.readline()
        assert line.startswith("grandchild"), line
        grandchild = int(line.split()[1])
        tree = descendants(tool.pid)
        os.killpg(tool.pid, signal.SIGKILL)
        tool.wait()
        assert _wait_dead(grandchild), "the command's grandchild survived the tool's SIGKILL"
        assert all(_wait_dead(pid, 1) for pid in tree)
    finally:
        for pid in [tool.pid, *descendants(tool.pid), grandchild]:
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_missing_command_is_named_before_anything_starts() -> None:
    with pytest.raises(CommandFailed, match="command not found: no-such-command-here"):
        run(["no-such-command-here", "x"])

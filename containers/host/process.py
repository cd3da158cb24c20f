"""The one place that starts external processes: argv lists, streamed output, clean teardown.

Workloads under ``apptainer exec … torchrun`` form a tree: torchrun starts each rank in a session
of its own (``start_new_session``), so killing our process group alone would orphan hung ranks.
:func:`stop_tree` therefore snapshots every descendant by PID (from ``/proc``), asks them to stop
(SIGTERM lets torchrun tear its ranks down), waits, then SIGKILLs whatever is left. Only processes
this module started, and their descendants, are ever signalled.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from containers.errors import CommandFailed

LineSink = Callable[[str], None]


@dataclass
class Completed:
    """What a finished (or stopped) command left behind."""

    argv: list[str]
    returncode: int
    tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def check(self, what: str) -> "Completed":
        """Itself when it succeeded, else :class:`CommandFailed` keeping argv, code and tail."""
        if self.ok:
            return self
        if self.timed_out:
            what += f" timed out after {self.seconds:.0f} s"
        raise CommandFailed(what, argv=self.argv, returncode=self.returncode, output=self.tail)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), found through ``/proc``."""
    children = _children_map()
    found: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, []))
    return found


def _signal_all(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(proc: subprocess.Popen, *, grace: float = 10.0) -> None:
    """Stop ``proc`` and all its descendants: SIGTERM, up to ``grace`` seconds, then SIGKILL."""
    tree = descendants(proc.pid)
    _signal_all([proc.pid, *tree], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        tree = [p for p in tree if Path(f"/proc/{p}").exists() and not _is_zombie(p)]
        if proc.poll() is not None and not tree:
            return
        time.sleep(0.1)
    _signal_all([proc.pid, *tree, *descendants(proc.pid)], signal.SIGKILL)
    proc.wait()


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].split()[0] == "Z"


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None, on_line: LineSink | None = None, tail_lines: int = 60,
        grace: float = 10.0) -> Completed:
    """Run ``argv``, streaming each output line (stdout and stderr merged) to ``on_line``.

    The command gets its own session so a terminal Ctrl-C reaches us first and we tear the whole
    tree down ourselves; on timeout or interrupt nothing it started is left running.
    """
    argv = [str(a) for a in argv]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(env) if env else None,
                                cwd=cwd, start_new_session=True, text=True, errors="replace",
                                bufsize=1)
    except FileNotFoundError as exc:
        raise CommandFailed(f"command not found: {argv[0]}", argv=argv) from exc
    tail: deque[str] = deque(maxlen=tail_lines)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if on_line is not None:
                on_line(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop_tree(proc, grace=grace)
    except BaseException:
        stop_tree(proc, grace=grace)
        raise
    reader.join(timeout=5)
    return Completed(argv=argv, returncode=proc.returncode, tail=list(tail), timed_out=timed_out,
                     seconds=time.monotonic() - started)


def capture(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout: float | None = 120) -> str:
    """Run a short query command and return its stdout; non-zero exit is a :class:`CommandFailed`."""
    try:
        result = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                                env=dict(env) if env else None, timeout=timeout,
                                stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise CommandFailed(f"command not found: {argv[0]}", argv=argv) from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(f"{shlex.join(map(str, argv))} timed out after {timeout}s",
                            argv=argv) from exc
    if result.returncode != 0:
        raise CommandFailed(shlex.join(map(str, argv)), argv=argv, returncode=result.returncode,
                            output=result.stderr.splitlines(), lines=5)
    return result.stdout

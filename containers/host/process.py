"""The one place that starts external processes: argv lists, streamed output, clean teardown.

Workloads under ``apptainer exec … torchrun`` form a tree: torchrun starts each rank in a session
of its own (``start_new_session``), so killing our process group alone would orphan hung ranks.
:func:`stop_tree` therefore snapshots every descendant with psutil (parent links, whatever
session or group a process is in), asks them to stop (SIGTERM lets torchrun tear its ranks down),
waits up to a grace period, then SIGKILLs whatever is left, including processes that appeared
meanwhile. Only processes this module started, and their descendants, are ever signalled.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import psutil

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


def _tree(pid: int) -> list[psutil.Process]:
    """``pid``'s live descendants (children first); empty when ``pid`` is gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _gone(proc: psutil.Process) -> bool:
    """Exited (a zombie counts: it only waits for its parent to reap it) or its PID reused."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def descendants(pid: int) -> list[int]:
    """The PIDs of every live descendant of ``pid`` (children first); zombies excluded."""
    return [proc.pid for proc in _tree(pid) if not _gone(proc)]


def _signal_all(procs: Sequence[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)  # psutil refuses a PID that another process has reused
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def _wait_gone(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``procs`` still running after up to ``timeout`` seconds.

    Not ``psutil.wait_procs``: it reaps our own child behind ``Popen``'s back (whose returncode
    would then read 0) and counts a zombie whose parent has not reaped it yet as alive.
    """
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if not _gone(p)]
    return alive


def stop_tree(proc: subprocess.Popen, *, grace: float = 10.0) -> None:
    """Stop ``proc`` and all its descendants: SIGTERM, up to ``grace`` seconds, then SIGKILL."""
    try:
        tree = [psutil.Process(proc.pid), *_tree(proc.pid)]
    except psutil.NoSuchProcess:
        tree = []
    _signal_all(tree, signal.SIGTERM)
    alive = _wait_gone(tree, grace)
    # Kill what is left, and what was started between the snapshot and the SIGTERM.
    _signal_all([*alive, *_tree(proc.pid)], signal.SIGKILL)
    proc.wait()


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
    """Run a short query command and return its stdout; a non-zero exit is
    :class:`CommandFailed`."""
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

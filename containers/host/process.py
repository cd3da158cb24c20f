"""The one place that starts external processes: argv lists, streamed output, clean teardown.

Only processes this module started, and their descendants, are ever signalled; every command
runs under :func:`supervise`, which stops its tree when the tool itself dies."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

if TYPE_CHECKING:  # imported where used: 15 ms of every command line's start (invoke --list)
    import psutil

from containers.errors import CommandFailed

LineSink = Callable[[str], None]
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: SIGTERM to SIGKILL when the tool is gone: short, as a killed build must not outlive it much.
ORPHAN_GRACE = 2.0
_ROOT = str(Path(__file__).resolve().parents[2])
_SUPERVISOR = ("import sys; sys.path.insert(0, sys.argv[1]); "
               "from containers.host.process import supervise; sys.exit(supervise(sys.argv[2:]))")


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
    import psutil
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _gone(proc: psutil.Process) -> bool:
    """Exited (a zombie counts: it only waits for its parent to reap it) or its PID reused."""
    import psutil
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _signal_all(procs: Sequence[psutil.Process], sig: signal.Signals) -> None:
    import psutil
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(sig)  # psutil refuses a PID that another process has reused


def _wait_gone(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``procs`` still running after up to ``timeout`` seconds. Not
    ``psutil.wait_procs``: it reaps our child behind ``Popen``'s back and counts zombies alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if not _gone(p)]
    return alive


def terminate(procs: Sequence[psutil.Process], grace: float,
              late: Callable[[], list[psutil.Process]] = list) -> list[psutil.Process]:
    """SIGTERM ``procs``, wait ``grace`` seconds, SIGKILL the rest; the killed."""
    _signal_all(procs, signal.SIGTERM)
    left = [*_wait_gone(procs, grace), *late()]
    _signal_all(left, signal.SIGKILL)
    return left


def stop_tree(proc: subprocess.Popen, *, grace: float = 10.0) -> None:
    """Stop ``proc`` and all its descendants: SIGTERM, up to ``grace`` seconds, then SIGKILL."""
    import psutil
    try:
        tree = [psutil.Process(proc.pid), *_tree(proc.pid)]
    except psutil.NoSuchProcess:
        tree = []
    terminate(tree, grace, late=lambda: _tree(proc.pid))
    proc.wait()


def _prctl(option: int, value: int) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


class _Stop(Exception):
    """Raised in the supervisor by a stop signal, so its main loop ends wherever it waits."""


def _stop_descendants(grace: float) -> None:
    """Stop every descendant of this process (the supervisor, a subreaper), then reap."""
    me = os.getpid()
    killed = terminate(_tree(me), grace, late=lambda: _tree(me))
    _wait_gone([*killed, *_tree(me)], grace)
    with contextlib.suppress(ChildProcessError):  # none left to reap
        while os.waitpid(-1, os.WNOHANG)[0]:  # 0: the children left are still running
            pass


def supervise(args: Sequence[str]) -> int:
    """``<tool pid> <grace> -- argv...``: run argv, its whole tree tied to the tool's life (a
    child subreaper; SIGHUP when the tool dies stops it within :data:`ORPHAN_GRACE` seconds,
    SIGTERM or SIGINT within ``grace``); exits as the command did, or by the stopping signal."""
    parent, grace, argv = int(args[0]), float(args[1]), list(args[3:])

    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def on_signal(signum: int, frame: object) -> None:
        # Once: the kernel repeats PR_SET_PDEATHSIG at each re-parenting (each of the dying
        # tool's threads, then init), and a second _Stop would cut the teardown short.
        for sig in stops:
            signal.signal(sig, signal.SIG_IGN)
        raise _Stop(signum)

    for sig in stops:
        signal.signal(sig, on_signal)
    try:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)
        if os.getppid() != parent:
            return 128 + signal.SIGHUP  # the tool died before we could watch it
        child = os.posix_spawnp(argv[0], argv, dict(os.environ), setsigdef=stops)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                break
    except _Stop as stop:
        _stop_descendants(ORPHAN_GRACE if stop.args[0] == signal.SIGHUP else grace)
        return _die_by(stop.args[0])
    except FileNotFoundError:
        sys.stderr.write(f"command not found: {argv[0]}\n")
        return 127
    try:
        _stop_descendants(ORPHAN_GRACE)  # what the command left running is ours to end
    except _Stop:  # stopped meanwhile: once more, now that further signals are ignored
        _stop_descendants(ORPHAN_GRACE)
    code = os.waitstatus_to_exitcode(status)
    return _die_by(-code) if code < 0 else code


def _die_by(signum: int) -> int:
    """End as killed by ``signum`` (returncode -N), else 128 + N where it does not kill."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return 128 + signum


def _findable(argv0: str, env: Mapping[str, str] | None) -> bool:
    """Whether ``argv0`` names a program to start (under the supervisor, only a status)."""
    if "/" in argv0:
        return os.access(argv0, os.X_OK)
    path = (env if env is not None else os.environ).get("PATH")
    return shutil.which(argv0, path=path) is not None


class Running:
    """A command :func:`start` started, with :func:`run`'s teardown guarantees."""

    def __init__(self, argv: list[str], proc: subprocess.Popen, on_line: LineSink | None,
                 grace: float) -> None:
        self.argv, self.proc, self.grace = argv, proc, grace
        self.started = time.monotonic()
        self.tail: deque[str] = deque(maxlen=60)  # for the error message
        self.reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True)
        self.reader.start()

    def _pump(self, on_line: LineSink | None) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.tail.append(line)
            if on_line is not None:
                on_line(line)

    def wait(self, timeout: float | None = None) -> Completed:
        """Its result once it ends; stopped after ``timeout`` seconds or an interrupt."""
        timed_out = False
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_tree(self.proc, grace=self.grace)
        except BaseException:
            stop_tree(self.proc, grace=self.grace)
            raise
        self.reader.join(timeout=5)
        return Completed(argv=self.argv, returncode=self.proc.returncode, tail=list(self.tail),
                         timed_out=timed_out, seconds=time.monotonic() - self.started)

    def stop(self) -> None:
        """End it and everything it started, if still running (:func:`stop_tree`)."""
        if self.proc.poll() is None:
            stop_tree(self.proc, grace=self.grace)
        self.reader.join(timeout=5)


def start(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
          on_line: LineSink | None = None, grace: float = 10.0) -> Running:
    """Start ``argv`` in its own session (a terminal's Ctrl-C reaches us, and we stop its tree),
    each output line (stdout and stderr merged) to ``on_line``."""
    argv = [str(a) for a in argv]
    if not _findable(argv[0], env):
        raise CommandFailed(f"command not found: {argv[0]}", argv=argv)
    supervised = [sys.executable, "-c", _SUPERVISOR, _ROOT, str(os.getpid()), str(grace), "--",
                  *argv]
    try:
        proc = subprocess.Popen(supervised, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(env) if env else None,
                                start_new_session=True, text=True, errors="replace", bufsize=1)
    except FileNotFoundError as exc:
        raise CommandFailed(f"command not found: {argv[0]}", argv=argv) from exc
    return Running(argv, proc, on_line, grace)


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout: float | None = None, on_line: LineSink | None = None,
        grace: float = 10.0) -> Completed:
    return start(argv, env=env, on_line=on_line, grace=grace).wait(timeout)


def capture(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout: float | None = 120) -> str:
    """Run a short query command; its stdout, or :class:`CommandFailed`."""
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

"""Running workload scripts from tests: each in its own session, killed by its PID on timeout."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start ``cmd`` in a new session, so a timeout can kill every process it started."""
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    """Wait for proc; on timeout kill its process group (by its PID) and fail the test."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err

"""Unit tests of ``invoke run``'s exit status and ``invoke shell``'s interactive command (the
real runs are in ``tests/run/test_run_image.py``)."""

from __future__ import annotations

from containers.app.running import command_status
from containers.run.command import INTERACTIVE


def test_the_first_failing_ranks_status_is_the_exit_status() -> None:
    """torchrun exits 1 whatever its ranks exited with; the rank's own status is the run's."""
    assert command_status(1, False, (0, 7)) == 7
    assert command_status(1, False, (1, -9)) == 1  # killed by a signal: the launcher's
    assert command_status(3, False, None) == 3
    assert command_status(0, False, None) == 0
    assert command_status(1, True, (0, 7)) == 124


def test_the_interactive_shell_does_not_read_the_users_bashrc() -> None:
    assert INTERACTIVE == ("/bin/bash", "--norc", "-i")

"""File locks: a second holder waits (and is told so) until the first lets go."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from containers.errors import WriteRefused
from containers.locking import file_lock, held, holder

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


def test_a_removed_lock_file_is_never_held_by_two(tmp_path: Path) -> None:
    """With remove=True the holder removes the lock file as it lets go. A waiter that had
    opened the old file must not keep that lock while a newcomer locks a new file of the same
    name: each holder marks itself busy (O_EXCL) while it holds; two at once would clash."""
    lock = tmp_path / ".publish.lock"

    def holder_process() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", HOLD_REMOVING, str(lock), str(tmp_path)],
                                stdout=subprocess.PIPE, text=True)

    with file_lock(lock, remove=True):
        waiter = holder_process()
        time.sleep(1.5)  # it has opened this lock file and waits on it
    newcomer = holder_process()  # arrives after the file was removed
    outputs = [proc.communicate(timeout=30)[0].strip() for proc in (waiter, newcomer)]
    assert outputs == ["ok", "ok"] and not lock.exists()


HOLD_REMOVING = """
import os, sys, time
from pathlib import Path
from containers.locking import file_lock
with file_lock(Path(sys.argv[1]), remove=True):
    busy = Path(sys.argv[2]) / "busy"
    try:
        os.close(os.open(busy, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        print("overlap", flush=True)
        sys.exit(1)
    time.sleep(0.7)
    busy.unlink()
    print("ok", flush=True)
"""


@pytest.mark.parametrize("planted", ["fifo", "folder", "link"])
def test_a_lock_path_that_is_no_regular_file_is_refused_in_one_line(tmp_path: Path,
                                                                    planted: str) -> None:
    lock, victim = tmp_path / ".cpu.lock", tmp_path / "victim"
    victim.write_text("precious\n")
    {"fifo": lambda: os.mkfifo(lock), "folder": lock.mkdir,
     "link": lambda: lock.symlink_to(victim)}[planted]()
    with pytest.raises(WriteRefused) as refused:
        with file_lock(lock):
            pass
    said = str(refused.value)
    assert str(lock) in said and "\n" not in said
    assert ("symbolic link" if planted == "link" else "not a regular file") in said
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("planted", ["hard link", "another user's file"])
def test_a_lock_file_not_ours_alone_is_locked_but_never_written(tmp_path: Path,
                                                               planted: str) -> None:
    lock, victim = tmp_path / ".cpu.lock", tmp_path / "victim"
    victim.write_text("precious\n")
    if planted == "hard link":
        os.link(victim, lock)
    else:
        if os.geteuid() != 0:
            pytest.skip("making another user's file needs root")
        lock.write_text("precious\n")
        os.chown(lock, 65534, 65534)
    with file_lock(lock):
        assert held(lock)
    assert lock.read_text() == "precious\n" and victim.read_text() == "precious\n"

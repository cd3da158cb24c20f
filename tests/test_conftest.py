"""tests/conftest.py's groups: under ``pytest -n 2 --dist loadgroup`` (``TEST_WORKERS=2
./setup.sh test``) every test of a shared thing runs in one worker; a test sharing one outside
its group's files is refused at collection."""

from __future__ import annotations

import re
from collections import OrderedDict
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.fixtures import ROOT

SLURM = "tests/host/test_slurmcluster.py"


def test_two_workers_run_a_groups_tests_in_one() -> None:
    """Two session Slurm clusters (one per worker) gave the same job ids, so two 2-node jobs met
    at one rendezvous port: the group must hold, whatever pytest-xdist does with its marks."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadgroup", "-v", SLURM, "tests/test_walltime.py", "-k",
         "round_trip or alive_is_false or naming_another or walltime"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    ran = re.findall(r"^\[(gw\d)\] .* PASSED (\S+)", done.stdout, re.M)
    assert done.returncode == 0 and len(ran) > 10, done.stdout[-3000:]
    assert len({worker for worker, test in ran if test.startswith(SLURM)}) == 1, ran
    assert len({worker for worker, _ in ran}) == 2, ran  # the rest is shared out


def test_the_scheduler_scopes_by_group_and_else_by_test() -> None:
    config = SimpleNamespace(getvalue=lambda name: "loadgroup")
    scheduler = conftest.pytest_xdist_make_scheduler(config=config, log=None)
    assert scheduler._split_scope(f"{SLURM}::test_x") == "slurm"
    assert scheduler._split_scope("tests/test_walltime.py::test_y") == \
        "tests/test_walltime.py::test_y"


@pytest.mark.parametrize("fixtures, marked, member", [
    ((), True, SLURM), (("build_cache_run",), False, "tests/image/test_cache_image.py"),
    (("cpu_arm64_image",), False, "tests/prove/test_arm64_image.py")])
def test_a_test_sharing_outside_the_groups_files_is_refused(fixtures, marked, member) -> None:
    """By its mark (Slurm) or the session fixture whose one instance the group shares."""
    def item(nodeid: str) -> SimpleNamespace:
        return SimpleNamespace(nodeid=nodeid, fixturenames=fixtures, get_closest_marker=lambda
                               name: (marked and name == "slurm") or None)
    conftest.pytest_collection_modifyitems(SimpleNamespace(getoption=lambda name: ""),
                                           [item(f"{member}::a")])  # in its group: accepted
    with pytest.raises(pytest.UsageError, match="SHARED lacks the files of.*test_new.py"):
        conftest.pytest_collection_modifyitems(None, [item(f"{member}::a"),
                                                      item("tests/test_new.py::b")])


def test_the_emulated_group_is_dealt_out_last() -> None:
    queue = OrderedDict([("slurm", {}), ("arm64", {}), ("tests/a.py::t", {})])
    conftest.defer_emulated(queue)
    assert list(queue) == ["slurm", "tests/a.py::t", "arm64"]
    queue.popitem(last=False), queue.popitem(last=False)
    conftest.defer_emulated(queue)  # alone, it is dealt out
    assert list(queue) == ["arm64"]

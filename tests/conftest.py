"""Registers the shared fixtures, which live in named files under ``tests/fixtures/``:
``data`` (plain data), ``images`` (the real CPU image, built once per session), ``slurm`` (a real
two-node Slurm cluster on this machine). See ``tests/README.md``."""

import pytest

pytest_plugins = ["tests.fixtures.data", "tests.fixtures.images", "tests.fixtures.slurm",
                  "tests.fixtures.disks"]

#: The long tier's marker: its tests build the pip CUDA images (gigabytes of downloads, tens of
#: minutes), so they run only when ``-m`` names it (``pytest -m cuda_images``). An addopts
#: ``-m "not cuda_images"`` would not do: a ``-m`` the user gives replaces it.
LONG_TIER = "cuda_images"


#: Test files that share one thing of this machine (a Slurm cluster's daemons and job ids, network
#: namespaces by name, the emulated image's build, the build benchmark's run): under ``pytest -n``
#: (setup.sh test) each group runs in one worker. By file, since the scheduler sees only test ids: pytest-xdist's own
#: ``xdist_group`` marks are lost on pytest 9.2 (pytest-xdist issue 1386), which ran two session
#: Slurm clusters whose jobs of the same id met at the same rendezvous port.
SHARED = {"slurm": ("tests/host/test_slurmcluster.py", "tests/app/test_localslurm.py",
                    "tests/app/test_running.py", "tests/batch/test_slurm_jobs.py",
                    "tests/batch/test_slurm_partitions.py", "tests/batch/test_slurm_run_jobs.py",
                    "tests/batch/test_slurm_smoke_ops.py", "tests/test_docs_examples.py"),
          "netns": ("tests/run/test_netns_image.py",),
          "arm64": ("tests/prove/test_arm64_image.py",),
          "build cache": ("tests/benchmarks/test_build_cache.py",
                          "tests/image/test_cache_image.py")}
#: The session fixtures whose one instance a group's files share.
SHARED_FIXTURES = {"cpu_arm64_image": "arm64", "build_cache_run": "build cache"}
GROUP_OF = {path: group for group, files in SHARED.items() for path in files}


def group_of(nodeid: str) -> str | None:
    return GROUP_OF.get(nodeid.split("::")[0])


def _shares(item) -> str | None:
    """What the test shares, by its mark or fixture: its file must be in that group."""
    if item.get_closest_marker("slurm"):
        return "slurm"
    return next((group for fixture, group in SHARED_FIXTURES.items()
                 if fixture in getattr(item, "fixturenames", ())), None)


def pytest_collection_modifyitems(config, items) -> None:
    """The long tier out unless named; a test sharing something outside its group refused; the
    emulated image's tests last, so its build (begun in the background as the session starts)
    has the longest to run."""
    strays = [item.nodeid for item in items if _shares(item) not in (None, group_of(item.nodeid))]
    if strays:
        raise pytest.UsageError(f"tests/conftest.py SHARED lacks the files of {strays}")
    items.sort(key=lambda item: group_of(item.nodeid) == "arm64")
    if LONG_TIER in (config.getoption("markexpr") or ""):
        return
    long_tier = [item for item in items if item.get_closest_marker(LONG_TIER)]
    if long_tier:
        config.hook.pytest_deselected(items=long_tier)
        items[:] = [item for item in items if not item.get_closest_marker(LONG_TIER)]


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: a :data:`SHARED` group's tests go to one worker, the others one by
    one to whichever worker is free."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

        def _assign_work_unit(self, node) -> None:
            defer_emulated(self.workqueue)
            super()._assign_work_unit(node)

    return ByGroup(config, log)


def defer_emulated(workqueue) -> None:
    """The arm64 group last: xdist queues the largest scopes first, so a worker took it at the
    start and waited 8 minutes for the emulated image's build (a clean 2-worker run)."""
    if "arm64" in workqueue and len(workqueue) > 1:
        workqueue.move_to_end("arm64")

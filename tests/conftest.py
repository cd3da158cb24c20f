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


#: Test files that share one thing of this machine (a Slurm cluster's daemons, network
#: namespaces by name): under ``pytest -n`` (setup.sh test) each group runs in one worker.
SHARED = {"slurm": ("tests/host/test_slurmcluster.py", "tests/app/test_localslurm.py",
                    "tests/test_docs_examples.py"),
          "netns": ("tests/run/test_netns_image.py",)}


def _group(item) -> str | None:
    if item.get_closest_marker("slurm"):
        return "slurm"
    if "cpu_arm64_image" in getattr(item, "fixturenames", ()):
        return "arm64"
    path = item.nodeid.split("::")[0]
    return next((group for group, files in SHARED.items() if path in files), None)


def pytest_collection_modifyitems(config, items) -> None:
    """The long tier out unless named; shared things grouped; the emulated image's tests last,
    so its build (begun in the background as the session starts) has the longest to run."""
    for item in items:
        group = _group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: _group(item) == "arm64")
    if LONG_TIER in (config.getoption("markexpr") or ""):
        return
    long_tier = [item for item in items if item.get_closest_marker(LONG_TIER)]
    if long_tier:
        config.hook.pytest_deselected(items=long_tier)
        items[:] = [item for item in items if not item.get_closest_marker(LONG_TIER)]

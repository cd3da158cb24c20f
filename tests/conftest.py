"""Registers the shared fixtures, which live in named files under ``tests/fixtures/``:
``data`` (plain data), ``images`` (the real CPU image, built once per session), ``slurm`` (a real
two-node Slurm cluster on this machine). See ``tests/README.md``."""

pytest_plugins = ["tests.fixtures.data", "tests.fixtures.images", "tests.fixtures.slurm",
                  "tests.fixtures.disks"]

#: The long tier's marker: its tests build the pip CUDA images (gigabytes of downloads, tens of
#: minutes), so they run only when ``-m`` names it (``pytest -m cuda_images``). An addopts
#: ``-m "not cuda_images"`` would not do: a ``-m`` the user gives replaces it.
LONG_TIER = "cuda_images"


def pytest_collection_modifyitems(config, items) -> None:
    if LONG_TIER in (config.getoption("markexpr") or ""):
        return
    long_tier = [item for item in items if item.get_closest_marker(LONG_TIER)]
    if long_tier:
        config.hook.pytest_deselected(items=long_tier)
        items[:] = [item for item in items if not item.get_closest_marker(LONG_TIER)]
